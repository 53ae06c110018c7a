"""Loop-dimension coalescing of range tasks (qtrace.graph.tasks.coalesce). Nothing is compiled."""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt
from qtrace.graph.plan import build_plan


def _tasks(*outs, fusion=True):
    return build_plan(tuple(o._node for o in outs), fusion).tasks


def _arr(rng, shape, dtype=np.float32):
    return qt.asarray(rng.standard_normal(shape).astype(dtype))


def test_contiguous_elementwise_task_is_one_flat_loop(rng):
    a, b = _arr(rng, (4, 5, 6)), _arr(rng, (4, 5, 6))
    (t,) = _tasks(qt.sin(a) * b + 1.0)
    assert t.kind == "map"
    assert t.domain == (120,)
    assert t.inner == ()


def test_contiguous_task_flat_without_fusion_too(rng):
    a, b = _arr(rng, (4, 5, 6)), _arr(rng, (4, 5, 6))
    tasks = _tasks(a * b + 1.0, fusion=False)
    assert len(tasks) == 2
    assert all(t.domain == (120,) for t in tasks)


@pytest.mark.parametrize("perm", [(2, 1, 0), (0, 2, 1), (1, 0, 2)])
def test_transposed_read_does_not_coalesce_fully(rng, perm):
    shape = (4, 5, 6)
    src_shape = tuple(shape[p] for p in np.argsort(perm))
    a = _arr(rng, src_shape).transpose(perm)
    assert a.shape == shape
    b = _arr(rng, shape)
    (t,) = _tasks(a + b)
    assert len(t.domain) > 1
    assert int(np.prod(t.domain)) == 120


def test_transposed_input_buffer_does_not_coalesce(rng):
    """A non-contiguous leaf (a NumPy transpose view, zero-copy) keeps its dimensions."""
    a = qt.asarray(rng.standard_normal((6, 5, 4)).astype(np.float32).T)
    (t,) = _tasks(a * 2.0)
    assert len(t.domain) == 3


def test_broadcast_read_coalesces_leading_dims_only(rng):
    a, b = _arr(rng, (4, 5, 6)), _arr(rng, (6,))
    (t,) = _tasks(a + b)
    assert t.domain == (20, 6)


def test_size_one_dims_are_dropped(rng):
    a, b = _arr(rng, (4, 1, 6)), _arr(rng, (4, 1, 6))
    (t,) = _tasks(a - b)
    assert t.domain == (24,)


def test_scalar_result_has_one_iteration(rng):
    a = _arr(rng, (4, 5, 6))
    (t,) = _tasks(a.sum())
    assert t.kind == "reduce"
    assert t.domain == (1,)
    assert t.inner == (120,)


@pytest.mark.parametrize("axis, domain, inner", [
    (2, (20,), (6,)), ((1, 2), (4,), (30,)), (0, (30,), (4,)), ((0, 1), (6,), (20,)),
])
def test_reduction_dims_coalesce(rng, axis, domain, inner):
    a = _arr(rng, (4, 5, 6))
    (t,) = _tasks(a.sum(axis=axis), fusion=False)  # (fused, a sum of 4 elements is unrolled)
    assert (t.domain, t.inner) == (domain, inner)


def test_coalesced_program_still_computes_the_right_values(rng, fusion):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    y = rng.standard_normal((6, 5, 4)).astype(np.float32)
    a, b = qt.asarray(x), qt.asarray(y)
    out = (a * 2.0 + b.T).numpy()
    np.testing.assert_allclose(out, x.astype(np.float64) * 2.0 + y.T, rtol=1e-6, atol=1e-6)
