"""Content hashing and hash-consing of graph nodes (qtrace.graph.node). Nothing is compiled."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qtrace as qt
from qtrace.graph.node import graph_key, make_input


def _inputs(rng, n=2, shape=(3, 4), dtype=np.float32):
    return [qt.asarray(rng.standard_normal(shape).astype(dtype)) for _ in range(n)]


def _program(a, b):
    """A fixed little program with views, a reduction, constants and a cast."""
    c = qt.sin(a) * 2.0 + b.T.T
    d = (c[:, 1:] - a[:, :-1]).sum(axis=1)
    return c, qt.astype(d, qt.float64) / 3


def test_same_program_twice_same_keys(rng):
    a, b = _inputs(rng)
    c1, d1 = _program(a, b)
    c2, d2 = _program(a, b)
    assert c1._node.key == c2._node.key
    assert d1._node.key == d2._node.key
    assert graph_key((c1._node, d1._node))[0] == graph_key((c2._node, d2._node))[0]


def test_same_program_on_other_buffers_same_keys(rng):
    """Leaves are identified by position and signature, never by identity or value."""
    a, b = _inputs(rng)
    x, y = _inputs(rng)
    c1, d1 = _program(a, b)
    c2, d2 = _program(x, y)
    assert c1._node is not c2._node
    assert c1._node.key == c2._node.key
    assert d1._node.key == d2._node.key
    k1, leaves1 = graph_key((c1._node, d1._node))
    k2, leaves2 = graph_key((c2._node, d2._node))
    assert k1 == k2
    assert [leaf.buffer is a._node.buffer for leaf in leaves1][:1] == [True]
    # a view of an evaluated array is an input of its own over the same memory
    assert len(leaves1) == len(leaves2)
    assert all(any(np.shares_memory(leaf.buffer, t._node.buffer) for t in (a, b)) for leaf in leaves1)


def test_leaf_pattern_distinguishes_a_plus_b_from_a_plus_a(rng):
    a, b = _inputs(rng)
    assert (a + b)._node.key != (a + a)._node.key
    assert (a * b + a)._node.key != (a * b + b)._node.key
    # the same pattern on other leaves hashes the same
    assert (a + a)._node.key == (b + b)._node.key
    assert (a - b)._node.key == (b - a)._node.key  # same pattern: leaf0 - leaf1


def test_graph_key_depends_on_output_order_and_sharing(rng):
    a, b = _inputs(rng)
    s, p = a + b, a * b
    assert graph_key((s._node, p._node))[0] != graph_key((p._node, s._node))[0]
    # two outputs over the same leaves vs over disjoint leaves
    x, y = _inputs(rng)
    assert graph_key(((a + b)._node, (a * b)._node))[0] != \
        graph_key(((a + b)._node, (x * y)._node))[0]


@pytest.mark.parametrize("change", ["shape", "dtype", "layout", "op", "param", "weak"])
def test_signature_changes_change_the_key(rng, change):
    base = qt.asarray(rng.standard_normal((4, 6)))
    ref = (base + 1.0).sum(axis=0)
    if change == "shape":
        other = (qt.asarray(rng.standard_normal((4, 7))) + 1.0).sum(axis=0)
    elif change == "dtype":
        other = (qt.asarray(rng.standard_normal((4, 6)).astype(np.float32)) + 1.0).sum(axis=0)
    elif change == "layout":  # a transposed (non-contiguous) buffer of the same shape
        other = (qt.asarray(rng.standard_normal((6, 4)).T) + 1.0).sum(axis=0)
    elif change == "op":
        other = (base - 1.0).sum(axis=0)
    elif change == "param":
        other = (base + 1.0).sum(axis=1)
    else:  # a weakly typed leaf (a traced Python scalar) vs a strong one
        weak = make_input((), np.dtype(np.float64), qt.Device("cpu"), buffer=None, weak=True)
        strong = make_input((), np.dtype(np.float64), qt.Device("cpu"), buffer=None)
        assert weak.key != strong.key
        assert (base + qt.Tensor(weak))._node.key != (base + qt.Tensor(strong))._node.key
        return
    assert ref.shape == other.shape or change in ("shape", "param")
    assert ref._node.key != other._node.key


def test_hash_consing_returns_the_live_node(rng):
    a, b = _inputs(rng)
    assert (a + b)._node is (a + b)._node
    assert (qt.exp(a) * 2.0)._node is (qt.exp(a) * 2.0)._node
    assert a[1:, ::2]._node is a[1:, ::2]._node
    assert a.sum(axis=1)._node is a.sum(axis=1)._node
    # different inputs with the same key are different nodes (never merged across buffers)
    x, y = _inputs(rng)
    assert (a + b)._node is not (x + y)._node
    # common subexpressions are shared inside one graph
    e = qt.exp(a)
    f = qt.exp(a) + qt.exp(a)
    assert f._node.inputs[0] is f._node.inputs[1] is e._node


@pytest.mark.parametrize("v1, v2", [(0.0, -0.0), (1.0, 2.0), (1, 2), (1.0, 1.0 + 2**-52),
                                    (float("inf"), -float("inf")), (1e300, 1e300 * (1 + 2**-52))])
def test_constants_with_different_values_differ(rng, v1, v2):
    """Small integers are constants of the graph in eager code (their keys differ); other
    numbers are 0-d inputs there (one key, one compiled plan for every value); while
    ``qt.jit`` traces, every number is a constant. The values are right in all three."""
    x = rng.standard_normal(5)
    a = qt.asarray(x)
    const = [abs(v) <= 4 and v == int(v) for v in (v1, v2)]
    assert ((a + v1)._node.key != (a + v2)._node.key) == any(const)
    for v in (v1, v2):
        np.testing.assert_array_equal((a + v).numpy(), x + v)
        np.testing.assert_array_equal(qt.jit(lambda t, v=v: t + v)(a).numpy(), x + v)


def test_constant_zero_and_negative_zero_give_different_results_and_keys():
    a = qt.asarray(np.array([0.0, 1.0]))
    assert (a * 0.0)._node.key != (a * -0.0)._node.key
    assert np.signbit((a * -0.0).numpy()[0])
    assert not np.signbit((a * 0.0).numpy()[0])


def test_constant_dtype_is_part_of_the_key():
    a32 = qt.asarray(np.ones(3, np.float32))
    a64 = qt.asarray(np.ones(3, np.float64))
    assert qt.full((3,), 1, dtype=qt.int32)._node.key != qt.full((3,), 1, dtype=qt.int64)._node.key
    assert (a32 + 1.0)._node.key != (a64 + 1.0)._node.key


_SUBPROCESS_PROGRAM = textwrap.dedent("""
    import numpy as np
    import qtrace as qt
    from qtrace.graph.node import graph_key
    a = qt.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    b = qt.asarray(np.ones((3, 4), np.float32))
    c = qt.sin(a) * 2.0 + b.T.T
    d = (c[:, 1:] - a[:, :-1]).sum(axis=1)
    e = qt.astype(d, qt.float64) / 3
    print(c._node.key, e._node.key, graph_key((c._node, e._node))[0])
""")


def _keys_here():
    ns: dict = {}
    exec(_SUBPROCESS_PROGRAM.replace("print(", "result = ("), ns)
    return " ".join(ns["result"])


def test_keys_stable_across_processes():
    here = _keys_here()
    env = dict(os.environ, PYTHONHASHSEED="12345")  # a different str-hash seed
    out = subprocess.run([sys.executable, "-c", _SUBPROCESS_PROGRAM], capture_output=True,
                         text=True, env=env, timeout=120, check=True)
    assert out.stdout.split() == here.split()
    env["PYTHONHASHSEED"] = "987"
    out2 = subprocess.run([sys.executable, "-c", _SUBPROCESS_PROGRAM], capture_output=True,
                          text=True, env=env, timeout=120, check=True)
    assert out2.stdout == out.stdout
