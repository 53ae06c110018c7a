"""The compiled recorder (``qtrace.graph._native``) against the Python one it accelerates.

Both record the same graphs: random programs of operators, slices, views of views and
slice assignments are run in two processes, one with ``QTRACE_NATIVE=0``, and must give
the same content keys for every pending value (the graph, node for node), the same
values bit for bit, the same NumPy results, and the same errors, word for word. The
view-semantics differential suite runs once more on the Python recorder, so the
reference stays tested where the extension is built.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import types
import warnings
import weakref

import numpy as np
import pytest

import qtrace as qt
from qtrace.graph import native

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A random program over two 2-D float64 bases, run on NumPy and on qtrace; prints JSON:
# the content key of every name's pending value before evaluation, then each value.
PROGRAM = r'''
import json, sys
import numpy as np
import qtrace as qt
from qtrace.graph import native

seed, steps = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(seed)
qt.config.max_pending_nodes = 10**6   # one graph: the keys compare whole programs
data = rng.standard_normal((2, 7, 9))
names = {"a": (qt.asarray(data[0].copy()) + 0.0, data[0].copy()),
         "b": (qt.asarray(data[1].copy()) * 1.0, data[1].copy())}
errors = []


def key():
    n0, n1 = rng.integers(0, 3, 2)
    k = [slice(int(rng.integers(0, 3)), int(rng.integers(4, 8)), int(rng.choice([1, 1, 2, -1])))
         for _ in range(2)]
    if rng.random() < 0.3:
        k[int(rng.integers(0, 2))] = int(rng.integers(-2, 2))
    form = rng.random()
    if form < 0.15:    # a short key: the trailing axis whole (p[1:-1], p[3])
        return k[0] if rng.random() < 0.5 else (k[0],)
    if form < 0.3:     # an Ellipsis for the axes the other item leaves
        return (Ellipsis, k[1]) if rng.random() < 0.5 else (k[0], Ellipsis)
    if form < 0.4:     # a new axis (p[:, None], p[None, 1:4], p[2, None])
        k.insert(int(rng.integers(0, 3)), None)
        return tuple(k) if rng.random() < 0.7 else tuple(k[:2])
    if form < 0.45:    # the whole array, as a view (p[...], p[:, :])
        return Ellipsis if rng.random() < 0.5 else (slice(None), slice(None))
    return tuple(k)


for i in range(steps):
    op = rng.integers(0, 8)
    src = rng.choice(sorted(names))
    q, n = names[src]
    try:
        if op == 0:    # binary op of two names (same shape: the C path; else broadcast)
            other = rng.choice(sorted(names))
            q2, n2 = names[other]
            f = rng.choice(["__add__", "__sub__", "__mul__", "__truediv__", "__rmul__"])
            names[f"t{i}"] = (getattr(q, f)(q2), getattr(n, f)(n2))
        elif op == 1:  # with a Python scalar: weak, small integer constant or 0-d input
            c = float(rng.choice([2.0, 0.37, -7.25, 3.0, 1e-3]))
            f = rng.choice(["__mul__", "__rsub__", "__add__", "__rtruediv__"])
            names[f"t{i}"] = (getattr(q, f)(c), getattr(n, f)(c))
        elif op == 2:  # a basic view (read back through an earlier write: often a leaf)
            k = key()
            if n[k].ndim:
                names[f"v{i}"] = (q[k], n[k])
                names[f"r{i}"] = (q[k], n[k])
        elif op == 3:  # slice assignment from a view of the same shape
            k = key()
            region = n[k].shape
            cands = [m for m in sorted(names) if names[m][1].shape == region and m != src]
            if cands:
                m = cands[int(rng.integers(len(cands)))]
                q[k] = names[m][0]
                n[k] = names[m][1].copy()
        elif op == 4:  # slice assignment of a number, or a broadcast row
            k = key()
            if rng.random() < 0.5:
                q[k] = 1.5
                n[k] = 1.5
            elif n[k].ndim == 2:
                row = rng.standard_normal(n[k].shape[1])
                q[k] = qt.asarray(row)
                n[k] = row
        elif op == 5:  # a wrong-shaped assignment (an error) or a bad index
            k = key()
            bad = np.ones((11, 13))
            try:
                n[k] = bad
            except Exception as e:
                errors.append(type(e).__name__)
            try:
                q[k] = qt.asarray(bad)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
            try:
                q[0, 0, 0]
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
        elif op == 6:  # unary functions (qt.* and through NumPy's ufunc protocol)
            f = rng.choice(["sin", "tanh", "exp", "negative", "square", "abs"])
            names[f"u{i}"] = (getattr(qt, f)(q * 0.125), getattr(np, f)(n * 0.125))
            # (NumPy's ufunc protocol on a tensor; through tanh, bounded: the cosine of a
            # value grown to ~1e9 by earlier products turns its last-bit differences from
            # NumPy into 1e-11 — seed 173378368 — and the check below is for the recorder)
            names[f"w{i}"] = (np.cos(np.tanh(q)), np.cos(np.tanh(n)))
        else:          # in-place operator on a view
            k = key()
            if n[k].ndim:
                vq, vn = q[k], n[k]
                vq *= 0.5
                vn *= 0.5
    except Exception as e:  # must then be NumPy's error too
        errors.append(f"{type(e).__name__}: {e}")

keys = {m: names[m][0]._node.key for m in sorted(names)}
pending = qt.tracer.context.state().count   # operations noted as pending work
qt.eval(*[names[m][0] for m in names])
worst = max(float(np.max(np.abs(names[m][0].numpy() - names[m][1]), initial=0.0))
            / max(1.0, float(np.max(np.abs(names[m][1]), initial=0.0))) for m in names)
values = {m: names[m][0].numpy().tobytes().hex() for m in sorted(names)}
print(json.dumps({"native": native.active(), "keys": keys, "values": values, "pending": pending,
                  "errors": errors, "numpy_err": worst}))
'''


def _run(seed: int, steps: int, native_on: bool, fusion: bool) -> dict:
    env = dict(os.environ, QTRACE_NATIVE="1" if native_on else "0",
               QTRACE_FUSION="1" if fusion else "0")
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(seed), str(steps)], env=env,
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_native = pytest.mark.skipif(not native.active(), reason="the compiled recorder is not built "
                                  "here (no C compiler at install, or QTRACE_NATIVE=0)")


def test_compiled_recorder_is_built_where_a_compiler_is():
    """``pip install`` builds the extension wherever Python's C compiler exists (it is
    optional only for machines without one)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}) on this machine")
    if os.environ.get("QTRACE_NATIVE", "1") == "0":
        pytest.skip("QTRACE_NATIVE=0 in the environment")
    assert native.active(), "a C compiler exists but qtrace.graph._native is not importable"


@needs_native
@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("seed", range(4))
def test_recorders_agree(seed, fusion):
    """Same graphs (content keys), same bits, NumPy's values, same errors."""
    steps = 60
    base = int(np.random.default_rng().integers(1 << 30)) + seed
    c = _run(base, steps, True, fusion)
    p = _run(base, steps, False, fusion)
    assert c["native"] and not p["native"]
    assert c["keys"] == p["keys"], f"seed {base}: graphs differ"
    assert c["values"] == p["values"], f"seed {base}: values differ"
    assert c["errors"] == p["errors"]
    assert c["pending"] == p["pending"], "the recorders noted different pending work"
    assert c["numpy_err"] <= 1e-12 and p["numpy_err"] <= 1e-12, f"seed {base}"  # relative


@needs_native
def test_view_semantics_on_the_python_recorder():
    """The differential view suite, a shorter run, on the Python reference recorder."""
    env = dict(os.environ, QTRACE_NATIVE="0", QTRACE_VIEW_SEEDS="8")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                          "tests/system/test_view_semantics.py", "tests/unit/test_recording_paths.py",
                           "-k", "not generator_self_check"],
                         env=env, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


@needs_native
def test_fast_paths_are_taken():
    """Operators, basic views and slice assignments are the C methods (not a silent
    fallback to the Python definitions)."""
    for name in ("__add__", "__rmul__", "__getitem__", "__setitem__"):
        assert type(qt.Tensor.__dict__[name]).__name__ == "Method", name
    # (each binary operator, [] and [] = straight from the type's slots: direct_slots)
    assert native.module().direct_slot_count(qt.Tensor) == len(_SLOT_OPS) + 2
    assert qt.tracer.tensor._note is native.module().note
    assert qt.tracer.elementwise.apply1 is native.module().apply1
    assert qt.tracer.elementwise.apply2 is native.module().apply2
    assert qt.tracer.views.assign is native.module().assign


_SLOT_OPS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "and", "or", "xor", "lshift",
             "rshift")


class _SubTensor(qt.Tensor):
    """A subclass that leaves the operators alone."""


class _SubRadd(qt.Tensor):
    """A subclass with reflected operators of its own (Python tries them first)."""

    def __radd__(self, other):
        return "subclass radd"

    def __rsub__(self, other):
        return NotImplemented


class _Foreign:
    """Another type with reflected operators (tried after Tensor's NotImplemented)."""

    def __radd__(self, other):
        return "foreign radd"

    def __rmul__(self, other):
        return NotImplemented


def _slot_outcomes(rng) -> list:
    """Every binary operator, both ways round, over tensors of several dtypes and shapes
    and the other operand kinds NumPy code mixes in (Python and NumPy scalars, arrays,
    lists, and things no operator takes), then ``[]`` and ``[] =``: each result's type,
    dtype, shape and value, or the error's type and message."""
    import operator
    f = qt.asarray(rng.standard_normal((3, 4)))
    i = qt.asarray(rng.integers(1, 5, (3, 4)))
    operands = [f, i, qt.asarray(rng.standard_normal(4).astype(np.float32)), qt.asarray(True),
                1.5, 3, True, np.float64(2.5), np.int32(2), rng.standard_normal((3, 4)),
                [1.0, 2.0, 3.0, 4.0], 2 + 1j, "text", None, _Foreign()]
    operands += [_SubTensor(f._node), _SubRadd(i._node)]
    out = []

    def record(fn):
        try:
            r = fn()
        except Exception as exc:  # noqa: BLE001 - the outcome compared
            out.append((type(exc).__name__, str(exc)))
            return
        if isinstance(r, qt.Tensor):
            out.append(("Tensor", str(r.dtype), r.shape, np.asarray(r).tolist()))
        else:
            out.append((type(r).__name__, repr(r)))

    for name in _SLOT_OPS:
        fn = getattr(operator, name + "_") if name in ("and", "or") else getattr(operator, name)
        for a in operands:
            for b in operands:
                if isinstance(a, qt.Tensor) or isinstance(b, qt.Tensor):
                    record(lambda fn=fn, a=a, b=b: fn(a, b))
    record(lambda: f[1:, ::2])
    record(lambda: f[[0, 2]])
    record(lambda: f["key"])

    def assign(key, value):
        g = f.copy()
        g[key] = value
        return g
    record(lambda: assign((slice(1, None), 0), 7.0))
    record(lambda: assign(f > 0, 0.0))
    record(lambda: assign(0, "text"))

    def delete():
        g = f.copy()
        del g[0]
    record(delete)
    return out


@needs_native
def test_operator_slots_answer_as_the_methods_do():
    """The operators taken straight from Tensor's type slots (direct_slots) give what the
    generic slots give through ``__op__``/``__rop__`` (values, dtypes, errors word for
    word), for every operand kind; assigning a dunder again hands its slot back to Python."""
    seed = int(np.random.default_rng().integers(1 << 30))
    dunders = [f"__{p}{n}__" for n in _SLOT_OPS for p in ("", "r")] + ["__getitem__", "__setitem__"]
    fast = _slot_outcomes(np.random.default_rng(seed))
    methods = {d: qt.Tensor.__dict__[d] for d in dunders}
    try:
        for d in dunders:   # (assigning a type attribute re-derives its slot: the generic one)
            setattr(qt.Tensor, d, methods[d])
        assert native.module().direct_slot_count(qt.Tensor) == 0
        generic = _slot_outcomes(np.random.default_rng(seed))
        assert native.module().direct_slots(qt.Tensor) == len(_SLOT_OPS) + 2
        calls = []
        qt.Tensor.__add__ = lambda self, other: calls.append(other) or methods["__add__"](self, other)
        qt.ones(2) + 1.0
        assert calls == [1.0], "an __add__ assigned after the direct slots was not called"
        assert native.module().direct_slot_count(qt.Tensor) == len(_SLOT_OPS) + 1
    finally:
        for d in dunders:
            setattr(qt.Tensor, d, methods[d])
        native.module().direct_slots(qt.Tensor)
    assert native.module().direct_slot_count(qt.Tensor) == len(_SLOT_OPS) + 2
    assert len(fast) == len(generic) > 1000
    for k, (x, y) in enumerate(zip(fast, generic)):
        assert x == y, f"seed {seed}, outcome {k}: direct {x} vs generic {y}"


def _pressure_sweep(p, b):
    """One Jacobi sweep of a cavity flow's pressure, as NumPy code writes it."""
    pn = p.copy()
    p[1:-1, 1:-1] = (((pn[1:-1, 2:] + pn[1:-1, 0:-2]) * 0.1 + (pn[2:, 1:-1] + pn[0:-2, 1:-1]) * 0.2)
                     / 0.3 - 0.4 * b[1:-1, 1:-1])
    p[:, -1] = p[:, -2]
    p[0, :] = p[1, :]
    p[:, 0] = p[:, 1]
    p[-1, :] = 0


def _tracked_after(sweeps: int, p, b) -> int:
    """Objects the cyclic collector tracks that recording ``sweeps`` sweeps leaves alive."""
    qt.eval(p)
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    for _ in range(sweeps):
        _pressure_sweep(p, b)
    return sum(id(o) not in before for o in gc.get_objects())


@needs_native
def test_pending_work_adds_nothing_for_the_cycle_collector():
    """A pending graph of slices, arithmetic and slice assignments holds no object that
    the cyclic collector tracks beyond a fixed few: structs, leaf lists, input tuples and
    merge records are unseen by it, so its oldest generation does not grow with the
    pending work (its full collections traverse every tracked object: 8-10 ms each in a
    41x41 cavity run, one every few thousand sweeps while these were tracked)."""
    rng = np.random.default_rng(7)
    p, b = qt.asarray(rng.normal(size=(41, 41))), qt.asarray(rng.normal(size=(41, 41)))
    was = gc.isenabled()
    gc.disable()
    try:
        _tracked_after(3, p, b)   # (first sweeps: recipes, leaf views, plans)
        few, many = _tracked_after(5, p, b), _tracked_after(40, p, b)
        assert many - few < 10, (few, many)
    finally:
        if was:
            gc.enable()


@needs_native
def test_recorded_values_need_no_cycle_collector():
    """Tensors and nodes the C paths make are not tracked by the cyclic collector (they
    cannot be in a cycle) and die with their last reference."""
    x = qt.asarray(np.ones((5, 6))) + 0.0
    x * x  # the first op of a dtype signature learns its recipe in Python
    was = gc.isenabled()
    gc.disable()
    try:
        y = x * x
        v = y[1:, 2:]
        y[0, :] = 3.25
        assert not gc.is_tracked(y) and not gc.is_tracked(y._node)
        assert not gc.is_tracked(v)
        # nor is the input tuple of a node over untracked nodes: the collector would never
        # untrack it itself (it keeps any tuple of GC-capable objects), and a step's worth of
        # them aging into the oldest generation triggered its full collections
        z = y + v.sum()
        assert all(not gc.is_tracked(i) for i in z._node.inputs)
        assert not gc.is_tracked(z._node.inputs)
        # its struct (with its parts), and a node's leaf list and inputs over input leaves
        assert not gc.is_tracked(z._node.struct) and not gc.is_tracked(z._node.struct.parts)
        w = x * qt.asarray(np.arange(6.0))
        assert not gc.is_tracked(w._node.leaves) and not gc.is_tracked(w._node.inputs)
        del z
        refs = [weakref.ref(t) for t in (y, v)] + [weakref.ref(y._node), weakref.ref(v._node)]
        del y, v
        assert all(r() is None for r in refs)
    finally:
        if was:
            gc.enable()


@needs_native
def test_structs_are_found_by_value_and_forgotten_with_their_table(monkeypatch):
    """The C struct cache answers what ``node._structs`` would: shapes and slice bounds
    compare by value (separately built tuples of large ints find the same struct), and
    when the intern table is emptied the cache is too (new nodes get the table's new
    structs, never a forgotten one)."""
    from qtrace.graph import node as graph_node

    rng = np.random.default_rng()
    n = int(rng.integers(300, 900))   # beyond CPython's cached small ints
    a, b = (qt.asarray(rng.standard_normal((n, 3))) + 0.0 for _ in range(2))
    c, d = (qt.asarray(rng.standard_normal((n, 3))) + 0.0 for _ in range(2))
    s1, s2 = (a * b)[1:n - 1], (c * d)[1:n - 1]
    assert s1._node.struct is s2._node.struct
    assert graph_node._structs[s1._node.struct.parts] is s1._node.struct
    monkeypatch.setattr(graph_node, "STRUCTS_CAP", 0)   # the next miss empties the table
    e = qt.asarray(np.ones((n + 1, 5))) * 1.75           # (a new structure: a miss)
    monkeypatch.undo()
    again = (c * d)[1:n - 1]
    assert again._node.struct is not s1._node.struct     # made anew after the emptying
    assert graph_node._structs[again._node.struct.parts] is again._node.struct
    assert again._node.key == s1._node.key               # with the same content
    np.testing.assert_array_equal(again.numpy(), s2.numpy())
    del e


@needs_native
def test_sharing_lasts_until_the_next_evaluation():
    """Recording the same operation on the same live values gives the same node (common
    subexpressions), until an evaluation starts sharing afresh; a dead node is never
    handed out again."""
    u = qt.asarray(np.random.default_rng().standard_normal((4, 5)))
    x = u + 0.0
    y = x * 3.5
    assert (x * 3.5)._node is y._node and (x[1:, ::2])._node is x[1:, ::2]._node
    ref = weakref.ref(y._node)
    del y
    assert ref() is None
    z = u * 3.5
    w = z._node
    assert (u * 3.5)._node is w
    qt.eval(z)                                  # z now holds a leaf; w is alive, held here
    assert (u * 3.5)._node is not w
    np.testing.assert_array_equal((u * 3.5).numpy(), u.numpy() * 3.5)


@needs_native
def test_evaluated_views_are_shared_outside_traces_only():
    """A view of an evaluated array read again is the same leaf (no Python on the way);
    inside ``qt.jit`` the view stays connected to the traced function's graph."""
    base = qt.asarray(np.arange(42.0).reshape(6, 7))
    v1, v2 = base[1:-1, 2:], base[1:-1, 2:]
    assert v1._node is v2._node and v1._node.prim == "input"

    @qt.jit
    def f(x):
        return x + base[1:-1, 2:]

    x = qt.asarray(np.ones((4, 5)))
    np.testing.assert_array_equal(f(x).numpy(), 1.0 + np.arange(42.0).reshape(6, 7)[1:-1, 2:])


@needs_native
def test_views_of_new_evaluations_take_no_python_once_their_layout_is_known(rng, python_calls):
    """Every evaluation makes new bases: the first view of each, of a layout seen before,
    is made in C (its NumPy view, checked, listed on the base) and is the leaf the Python
    definition would have listed there; a new layout, or a trace, is Python's."""
    def view_calls(fn) -> list:
        return [name for _, name in python_calls(fn) if name in ("_leaf_view", "_new_leaf_view")]

    a = qt.asarray(rng.standard_normal((9, 8))) * 2.0
    qt.eval(a)
    assert view_calls(lambda: (a[1:-1, ::2], a[2])), "a new layout's first view is Python's"
    for _ in range(3):   # (as a time step's fresh values)
        b = qt.asarray(rng.standard_normal((9, 8))) * 2.0
        qt.eval(b)
        got = []
        assert view_calls(lambda got=got, b=b: got.extend([b[1:-1, ::2], b[1:-1, ::2], b[2]])) == []
        assert got[0]._node is got[1]._node and got[0]._node.prim == "input"
        steps = got[0]._view[1]
        assert b._node._views[steps] is got[0]._node
        np.testing.assert_array_equal(got[0].numpy(), b.numpy()[1:-1, ::2])
        np.testing.assert_array_equal(got[2].numpy(), b.numpy()[2])
        b[1:-1, ::2] = 0.0   # (a write through the base: the view sees it)
        np.testing.assert_array_equal(got[0].numpy(), np.zeros((7, 4)))

    @qt.jit
    def f(x):   # (inside a trace the view stays connected to the graph: Python's)
        return x[1:-1, ::2] * 2.0
    b = qt.asarray(rng.standard_normal((9, 8)))
    np.testing.assert_array_equal(f(b).numpy(), b.numpy()[1:-1, ::2] * 2.0)


@needs_native
def test_integer_views_of_evaluated_arrays_and_their_evaluation_take_no_python_steps(rng, python_calls):
    """A view of an evaluated array with integer indices (``x[:, k]``, ``x[i]``, ``x[i, j]``:
    size-1 slices and a reshape) is made by one NumPy ``getitem`` from its recipe, not
    through the Python reshape step, with NumPy's values; ``qt.eval`` of views of evaluated
    memory (nothing to compute) is answered by the compiled flush, not the Python one."""
    keys = [(slice(None), -2), (3,), (2, 5), (slice(1, -1), 4, slice(None, None, -1)), (..., 0)]
    a = qt.asarray(rng.standard_normal((9, 8, 3))) * 2.0
    qt.eval(a)
    for key in keys:   # (the first view of each layout makes its recipe: Python)
        np.testing.assert_array_equal(a[key].numpy(), a.numpy()[key])
    for _ in range(2):   # (fresh bases of the same layout, as time steps make them)
        b = qt.asarray(rng.standard_normal((9, 8, 3))) * 2.0
        qt.eval(b)
        got = []
        called = {name for _, name in python_calls(lambda b=b, got=got: got.extend(b[k] for k in keys))}
        assert not called & {"_reshape_view", "_leaf_view", "_new_leaf_view"}, called
        for key, view in zip(keys, got):
            np.testing.assert_array_equal(view.numpy(), b.numpy()[key])
        called = {name for _, name in python_calls(lambda b=b, got=got: qt.eval(b, *got))}
        assert "_flush" not in called, called
        b[3] = 7.0   # (the views still see writes through the base)
        np.testing.assert_array_equal(got[1].numpy(), np.full((8, 3), 7.0))


@needs_native
def test_each_thread_notes_its_own_pending_values():
    """The thread-state memo of the C recorder: operations recorded on interleaved threads
    are noted on each one's own pending list."""
    import threading

    from qtrace.tracer import pending

    counts, barrier = {}, threading.Barrier(2)

    def work(k):
        x = qt.asarray(np.full((3, 3), float(k))) + 0.0
        pending.flush(())
        keep = []
        for _ in range(50):
            barrier.wait()
            keep.append(x * 2.5)
        counts[k] = (pending.describe()["pending_ops"], [float(t.numpy()[0, 0]) for t in keep[:2]])

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == {1: (50, [2.5, 2.5]), 2: (50, [5.0, 5.0])}


def test_stale_build_is_refused():
    """An extension built from other sources (another ABI) is not used: a warning says
    to reinstall, and recording stays correct in Python."""
    fake = types.SimpleNamespace(ABI=native.ABI - 1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert native.checked(fake) is None
    assert any("stale build" in str(w.message) for w in seen)
    real = types.SimpleNamespace(ABI=native.ABI)
    assert native.checked(real) is real


def _stencil_steps(qt_mod, p, b, steps: int, held: list):
    """Boundary writes, an interior update through a view, a reduction and a second live
    value, evaluated every step (what an eager solver loop does)."""
    for k in range(steps):
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        inner = p[1:-1, 1:-1]
        inner += 0.25 * (p[1:-1, 2:] + p[1:-1, :-2] + p[2:, 1:-1] + p[:-2, 1:-1]) - b[1:-1, 1:-1]
        p[-1, :] = 0
        total = p.sum()
        scaled = p * (0.5 + 0.01 * k)   # (not integral: a 0-d input, not a folded constant)
        if qt_mod is qt:
            qt.eval(p, total)
        held.append((float(total), np.array(scaled)))
    return p


def _update_steps(qt_mod, p, b, steps: int, held: list):
    """One elementwise update evaluated every step (one kernel: the shortest plan)."""
    for _ in range(steps):
        p *= 0.999
        p += b
        if qt_mod is qt:
            qt.eval(p)
        held.append((0.0, np.array(p)))
    return p


def _matmul_steps(qt_mod, p, b, steps: int, held: list):
    """A matrix product (a library step: the plan runs through ``Plan.run``)."""
    m = b.T @ b * 0.5
    for _ in range(steps):
        p = p @ m
        p = p + 0.01
        if qt_mod is qt:
            qt.eval(p)
        held.append((0.0, np.array(p)))
    return p


@needs_native
@pytest.mark.parametrize("program", [_stencil_steps, _update_steps, _matmul_steps],
                         ids=["stencil", "update", "matmul"])
def test_eager_evaluations_run_in_c_and_agree_with_python(program, fusion, monkeypatch):
    """Repeated eager evaluations of a known plan run in the extension (the Python
    evaluation runs only while the plans are new), with the Python path's results bit for
    bit, NumPy's values, and the same stats; fused (one kernel) and unfused (a sequence of
    small kernels, or a plan with a library step, run through ``Plan.run``)."""
    from qtrace.tracer import pending

    rng = np.random.default_rng()
    p0, b = rng.standard_normal((9, 11)), rng.standard_normal((9, 11)) * 0.1
    runs = {}
    for name, native_flush in (("c", pending.native_flush), ("python", None)):
        monkeypatch.setattr(pending, "native_flush", native_flush)
        calls = []
        real = pending._flush
        monkeypatch.setattr(pending, "_flush",
                            lambda req, real=real, calls=calls: calls.append(1) or real(req))
        p, held = qt.asarray(p0.copy()), []
        p = program(qt, p, qt.asarray(b), 3, held)   # the plans are made
        qt.reset_stats()
        calls.clear()
        p = program(qt, p, qt.asarray(b), 40, held)
        runs[name] = (p.numpy().copy(), held, qt.stats(), len(calls))
    c, py = runs["c"], runs["python"]
    assert c[3] == 0, "the known plans did not run in the extension"
    assert py[3] >= py[2]["evaluations"] >= 40
    np.testing.assert_array_equal(c[0], py[0])
    for (tc, sc), (tp, sp) in zip(c[1], py[1]):
        assert tc == tp
        np.testing.assert_array_equal(sc, sp)
    keys = ("evaluations", "kernel_launches", "tasks_run", "cache_hits_memory")
    assert {k: c[2][k] for k in keys} == {k: py[2][k] for k in keys}
    ref, held = p0.copy(), []
    ref = program(np, ref, b, 43, held)
    np.testing.assert_allclose(c[0], ref, rtol=1e-12, atol=1e-12)


@needs_native
def test_a_storage_written_again_is_listed_once():
    """Slice assignments to one array note its storage as pending once per evaluation (the
    evaluation's work does not grow with the number of writes), and every write lands."""
    from qtrace.tracer.context import state

    p = qt.asarray(np.zeros((5, 6)))
    ref = np.zeros((5, 6))
    qt.eval(p)
    before = len(state().pending)
    for k in range(200):
        p[k % 5, :] = p[(k + 1) % 5, :] + 1.0
        ref[k % 5, :] = ref[(k + 1) % 5, :] + 1.0
    listed = len(state().pending) - before
    assert listed < 200 * 3, listed     # the row views and sums, not 200 more storage entries
    storages = [r() for r in state().pending if type(r()) is qt.tracer.views.Storage]
    assert len(storages) == 1
    listed = state().pending
    np.testing.assert_array_equal(p.numpy(), ref)
    assert sys.getrefcount(listed) == 2, "a storage keeps an evaluated pending list alive"


def _poisson_steps(xp, steps: int, n: int = 11):
    """A pressure-Poisson relaxation as NumPy code writes it (copies, interior updates
    through slices, Neumann walls from neighbouring rows and columns), cut automatically."""
    rng = np.random.default_rng(7)
    p, b = xp.asarray(rng.standard_normal((n, n))), xp.asarray(rng.standard_normal((n, n)))
    for _ in range(steps):
        for _ in range(20):
            _sweep(p, b)
    return np.asarray(p)


def _sweep(p, b) -> None:
    """One Jacobi sweep of ``p`` in place, with Neumann walls, as NumPy code writes it."""
    pn = p.copy()
    p[1:-1, 1:-1] = 0.25 * (pn[1:-1, 2:] + pn[1:-1, :-2] + pn[2:, 1:-1] + pn[:-2, 1:-1]
                            - 0.01 * b[1:-1, 1:-1])
    p[:, -1] = p[:, -2]
    p[0, :] = p[1, :]
    p[:, 0] = p[:, 1]
    p[-1, :] = 0


def _sweeps(xp, p, b, steps: int):
    """``steps`` evaluations of 10 Jacobi sweeps; returns the final ``p``."""
    for _ in range(steps):
        for _ in range(10):
            _sweep(p, b)
        if xp is qt:
            qt.eval(p)
    return p


@needs_native
def test_a_repeated_loop_finds_every_table_entry_by_identity(rng, fusion, monkeypatch):
    """A program that repeats one step records the same structures from the same objects
    pass after pass — here a Jacobi relaxation restarted from new input arrays each pass
    (``qt.asarray``: NumPy makes a new shape tuple for each). Once two passes have interned
    them, a third finds every node structure, parsed key, shared tuple and scalar operand
    (``0.25 * ...``) in the tables keyed by identity (``table_stats`` counts the lookups); a
    miss hashes the parts by value instead. Tables whose two-entry sets overlapped, or a
    shape tuple new with each input array, made 7-50% of the lookups miss on every pass;
    with sets of four, keys miss every pass only where five of a pass's keys share a set
    (here about once in a million runs: ~40 distinct tuples in 1,024 sets, fewer keys
    elsewhere). The values are
    NumPy's."""
    from qtrace.graph import node as graph_node

    monkeypatch.setattr(graph_node, "STRUCTS_CAP", 1 << 30)   # (no emptying mid-test)
    monkeypatch.setattr(graph_node, "SHAPES_CAP", 1 << 30)
    n = int(rng.integers(9, 40))
    data = [rng.standard_normal((n, n)) for _ in range(2)]

    def one_pass():
        return _sweeps(qt, *(qt.asarray(a.copy()) for a in data), steps=3)

    one_pass()
    one_pass()
    before = native.module().table_stats()
    got = one_pass()
    after = native.module().table_stats()
    for table, (hits, misses) in after.items():
        hits -= before[table][0]
        misses -= before[table][1]
        assert misses == 0, (table, hits, misses)
    assert after["struct_identity"][0] - before["struct_identity"][0] >= 3 * 10 * 10
    assert after["scalar"][0] - before["scalar"][0] >= 3 * 10 * 2
    np.testing.assert_allclose(got.numpy(), _sweeps(np, *(a.copy() for a in data), steps=3),
                               rtol=1e-12, atol=1e-12)


@needs_native
def test_remembered_scalar_operands_keep_type_value_and_dtype_apart(rng, fusion):
    """Scalar operands are remembered by type, value bits, dtype and device: a random mix of
    Python floats and ints (coefficients and small integral constants, including values
    whose bits agree across types: 2 and 2.0) times float32, float64 and int64 tensors,
    repeated in random orders, gives NumPy's values and dtypes every time."""
    pool = [2.0, 2, 2.5, -2.5, 1e-3, 3, 7, 0.1, 4.0, -4]
    arrays = [rng.standard_normal(5).astype(np.float32), rng.standard_normal(5),
              rng.integers(-9, 10, 5)]
    for _ in range(3):
        for k in rng.permutation(len(pool) * len(arrays)):
            c, a = pool[k % len(pool)], arrays[k // len(pool)]
            got, want = qt.asarray(a) * c, a * c
            assert got.dtype == want.dtype, (c, a.dtype)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6 if a.dtype == np.float32 else 1e-15)
            got, want = c - qt.asarray(a), c - a
            assert got.dtype == want.dtype, (c, a.dtype)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6 if a.dtype == np.float32 else 1e-15)


@needs_native
def test_automatic_evaluations_of_a_solver_keep_their_values(fusion):
    """Many automatic evaluations of one loop, each run by the extension: the values held by
    storages after each one stay alive and right (NumPy's result)."""
    np.testing.assert_allclose(_poisson_steps(qt, 30), _poisson_steps(np, 30), rtol=1e-12,
                               atol=1e-12)


@needs_native
def test_evaluations_in_c_keep_no_input_alive():
    """An evaluation by the extension empties the sharing tables as the Python one does
    (they hold leaf lists, so buffers): inputs a program dropped are freed."""
    import gc

    from qtrace.tracer import pending

    refs = []
    for _ in range(4):   # the first evaluation compiles (Python), the next ones run in C
        a, b, e = (qt.asarray(np.random.default_rng().standard_normal(6)) for _ in range(3))
        refs += [weakref.ref(t._node.buffer) for t in (a, b, e)]
        d = ((a + b) * (e * 2.0) + a * e) * 0.5   # merged leaf lists of several leaves
        qt.eval(d)
        del a, b, e, d
    assert pending.native_flush is not None
    gc.collect()
    assert [r() is None for r in refs] == [True] * len(refs)


@needs_native
def test_past_the_limit_other_statements_pass_the_anchor_gate_in_c(rng, python_calls):
    """Once the cut policy has its anchor, an operation of the anchor's primitive and shape
    recorded at another statement is told apart in C by its frame: the Python policy (which
    walks the stack) is not called; the anchor's own statement still cuts."""
    from qtrace.tracer import context, pending

    qt.config.max_pending_nodes = 40
    pending.reset()

    def steps(p, ref, n):
        for _ in range(n):
            for _ in range(4):
                p = p * 0.5 + 0.25
                ref = ref * 0.5 + 0.25
            p[0, :] = 1.0      # the rarest statement: the anchor
            ref[0, :] = 1.0
        return p, ref

    x = rng.standard_normal((9, 9))
    p, ref = steps(qt.asarray(x), x.copy(), 30)
    s = context.state()
    assert s.gate is not None and len(s.gate) == 4, s.gate
    assert s.gate[:3] == ("slice_update", (9, 9), steps.__code__), s.gate
    cuts = pending.describe()["automatic_cuts"]
    assert cuts >= 3
    s.count = qt.config.max_pending_nodes   # past the limit, below four times it

    def assign():
        p[1, :] = 2.0                       # the anchor's prim and shape, another statement
    calls = [name for _, name in python_calls(assign)]
    ref[1, :] = 2.0
    assert "_consider_cut" not in calls, calls
    assert pending.describe()["automatic_cuts"] == cuts
    p, ref = steps(p, ref, 30)              # the anchor's statement: cuts go on
    assert pending.describe()["automatic_cuts"] > cuts
    np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-12)


@needs_native
@pytest.mark.parametrize("limit", [7, np.int64(11), 23.0], ids=["int", "numpy-int", "float"])
def test_the_pending_limit_takes_effect_when_assigned(limit):
    """The compiled recorder keeps ``config.max_pending_nodes`` as a C integer, told of
    every assignment: the first automatic evaluation (a policy learning its anchor cuts at
    twice the limit) comes at the new limit's operation, whatever type the value has (a
    non-int is read and converted on each note)."""
    from qtrace.tracer import pending

    old = qt.config.max_pending_nodes
    try:
        qt.config.max_pending_nodes = limit
        pending.reset()
        pending.flush(())   # nothing pending: the count starts at 0
        x = qt.asarray(np.arange(5.0))
        before = qt.stats()["auto_evaluations"]
        for _ in range(2 * int(limit) - 1):
            x = x * 1.5
        assert qt.stats()["auto_evaluations"] == before
        x = x * 1.5
        assert qt.stats()["auto_evaluations"] == before + 1
        np.testing.assert_allclose(x.numpy(), np.arange(5.0) * 1.5 ** (2 * int(limit)))
    finally:
        qt.config.max_pending_nodes = old


@needs_native
def test_the_pending_limit_follows_only_the_process_config():
    """Other ``Config`` objects (a copy, a new one) do not move the compiled recorder's
    limit; the process-wide ``qt.config`` does, through assignment (the tests' own
    restore assigns too)."""
    import copy

    from qtrace.config import Config
    from qtrace.tracer import pending

    old = qt.config.max_pending_nodes
    try:
        qt.config.max_pending_nodes = 5
        other = copy.copy(qt.config)
        other.max_pending_nodes = 10**9
        Config()                          # a fresh one sets its defaults
        pending.reset()
        pending.flush(())
        x = qt.asarray(np.arange(3.0))
        before = qt.stats()["auto_evaluations"]
        for _ in range(10):               # twice the limit: the learning cut
            x = x + 1.0
        assert qt.stats()["auto_evaluations"] == before + 1
    finally:
        qt.config.max_pending_nodes = old


_FAKE_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
/* cuLaunchKernel's stand-in: writes what it was given (its first parameter is the count of
   parameters, by this test's convention); a function handle of 999 fails with error 700. */
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra)
{
    FILE *out = fopen(getenv("FAKE_DRIVER_OUT"), "a");
    uint64_t n = *(uint64_t *)params[0];
    fprintf(out, "%llu %u %u %u %u %u %u %u %llu", (unsigned long long)(uintptr_t)f, gx, gy, gz,
            bx, by, bz, shared, (unsigned long long)(uintptr_t)stream);
    for (uint64_t i = 0; i < n; i++)
        fprintf(out, " %llu", (unsigned long long)*(uint64_t *)params[i]);
    fprintf(out, " %d\n", extra == NULL);
    fclose(out);
    return (uintptr_t)f == 999 ? 700 : 0;
}
int cuGetErrorName(int rc, const char **name) { *name = "CUDA_ERROR_FAKE"; return 0; }
"""

_FAKE_CALLS = r"""
import json, sys
from qtrace.graph import native
mod = native.module()
assert mod.bind_launch(sys.argv[1])
results = []
def attempt(*args):
    try:
        mod.cuda_launch(*args)
        results.append("ok")
    except Exception as exc:
        results.append(f"{type(exc).__name__}: {exc}")
attempt(123, 7, 256, 0, 3, 2**64 - 1, 5)                      # a launch, the null stream
attempt(124, 1, 32, 77, *([1 + 256 - 1] + list(range(255))))  # 256 parameters, stream 77
attempt(999, 1, 32, 0, 1)                                     # the driver fails
attempt(125, 2**32 + 3, 256, 0, 1)                            # grid too large
attempt(125, -1, 256, 0, 1)                                   # negative grid
attempt(125, 1, 256, 0, 1.5)                                  # not an integer
attempt(125, 1, 256, 0, *range(257))                          # too many parameters
attempt(125, 1, 256)                                          # too few arguments
print(json.dumps(results))
"""


@needs_native
def test_direct_kernel_launches_hand_the_driver_exactly_their_parameters(tmp_path):
    """``cuda_launch`` (the GPU's launch path, ``qtrace.kernels.llvm_nvptx``) against a stand-
    in driver library, in a fresh process (a process binds one driver): grid, block, stream
    and every 8-byte parameter reach ``cuLaunchKernel`` as given (up to 256), and bad input
    — a failing driver, a grid past 32 bits, a negative or non-integer value, too many or
    too few arguments — raises, naming what, before anything is launched."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}) on this machine")
    (tmp_path / "fake.c").write_text(_FAKE_DRIVER)
    lib = tmp_path / "libfakecuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "fake.c")], check=True)
    log = tmp_path / "calls.txt"
    out = subprocess.run([sys.executable, "-c", _FAKE_CALLS, str(lib)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env=dict(os.environ, FAKE_DRIVER_OUT=str(log)))
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert results[:2] == ["ok", "ok"]
    assert "cuLaunchKernel" in results[2] and "CUDA_ERROR_FAKE" in results[2] and "700" in results[2]
    assert results[3].startswith("OverflowError") and "grid" in results[3]
    assert results[4].startswith("OverflowError")
    assert results[5].startswith("TypeError")
    assert results[6].startswith("TypeError") and "256" in results[6]
    assert results[7].startswith("TypeError")
    calls = [line.split() for line in log.read_text().splitlines()]
    assert len(calls) == 3   # the two launches and the failing one; nothing else reached it
    assert calls[0] == ["123", "7", "1", "1", "256", "1", "1", "0", "0", "3", str(2**64 - 1), "5", "1"]
    assert calls[1] == ["124", "1", "1", "1", "32", "1", "1", "0", "77", "256", *map(str, range(255)), "1"]
