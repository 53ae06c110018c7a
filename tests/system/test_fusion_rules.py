"""Named regression cases for "fusion by proof": one test per rule of DESIGN.md.

Each case checks the result (against NumPy and against ``qt.config.fusion = False``,
the one-task-per-op reference) and the decision ``qt.explain`` reports for it: the
fusion and the rule that allowed it, or the boundary and the reason (and index
expression) that forced it. Tests whose subject is the decision set ``qt.config.fusion``
themselves; the others take the ``fusion`` fixture and run both ways.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

import qtrace as qt
from qtrace.graph import partition as partition_module
from qtrace.graph.partition import MAX_TASK_COST, REGION_BYTES
from qtrace.kernels.target import target_for


# -- helpers ----------------------------------------------------------------------------
def _values(fn, *args):
    """``fn(*args)`` evaluated together, as NumPy arrays (a tuple even for one output)."""
    outs = fn(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    qt.eval(*outs)
    return tuple(np.asarray(o.numpy()) for o in outs)


def _launches(fn, *args):
    """``(values, tasks run)`` of one evaluation of ``fn(*args)`` (kernels, however launched)."""
    qt.reset_stats()
    values = _values(fn, *args)
    return values, qt.stats()["tasks_run"]


def _check(fn, ref, arrays, *, exact=True, rtol=1e-12):
    """Run ``fn`` on tensors of ``arrays`` fused and unfused, compare with ``ref(*arrays)``.

    Returns the fused values. Fused and unfused results must be bitwise equal when
    ``exact`` (elementwise programs), else close; both must match NumPy.
    """
    old = qt.config.fusion
    try:
        results = {}
        for fusion in (True, False):
            qt.config.fusion = fusion
            results[fusion] = _values(fn, *[qt.asarray(a) for a in arrays])
    finally:
        qt.config.fusion = old
    expected = ref(*arrays)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(results[True]) == len(results[False]) == len(expected)
    for k, (f, u, e) in enumerate(zip(results[True], results[False], expected)):
        assert f.shape == u.shape == np.shape(e), f"output {k}: {f.shape} {u.shape} {np.shape(e)}"
        if exact:
            np.testing.assert_array_equal(f.view(np.uint8), u.view(np.uint8),
                                          err_msg=f"output {k}: fused and unfused differ bitwise")
        else:
            np.testing.assert_allclose(f, u, rtol=rtol, atol=0, err_msg=f"output {k}: fused vs unfused")
        np.testing.assert_allclose(f, e, rtol=rtol, atol=1e-12, err_msg=f"output {k}: vs NumPy")
    return results[True]


def _explain(fn, *arrays):
    """``qt.explain`` of ``fn`` with fusion on."""
    old = qt.config.fusion
    qt.config.fusion = True
    try:
        return qt.explain(fn, *[qt.asarray(a) for a in arrays])
    finally:
        qt.config.fusion = old


def _decision(report, producer: str, consumer: str | None = None):
    """The one decision about ``producer`` (and ``consumer``) in ``report``."""
    found = [d for d in report.decisions if d.producer.prim == producer and
             (consumer is None or d.consumer.prim == consumer)]
    assert len(found) == 1, f"expected one decision {producer} -> {consumer}, got:\n{report}"
    return found[0]


@pytest.fixture
def arrays(rng):
    """Random float64 inputs: vectors of 8, an 8x8 matrix, a 4x8 matrix."""
    return {"v": rng.uniform(-1, 1, 8), "w": rng.uniform(-1, 1, 8),
            "m": rng.uniform(-1, 1, (8, 8)), "r": rng.uniform(-1, 1, (4, 8)),
            "idx": rng.integers(0, 8, 6)}


# -- producer -> consumer at the same index -----------------------------------------------
def _step20(lib):
    """A 20-operation elementwise update of four arrays of one shape (``lib``: qt or np)."""
    def step(a, b, c, d):
        t = a * b + c          # 2
        t = t - d              # 3
        t = lib.sin(t) * a     # 5
        u = lib.tanh(b - c)    # 7
        u = u * u + 1.0        # 9
        t = t / u              # 10
        t = lib.maximum(t, d)  # 11
        t = lib.where(t > 0.1, t, -t)  # 14 (greater, negative, where)
        t = lib.exp(t * 0.25)  # 16
        t = t * c - b          # 18
        return (t + a) * d     # 20
    return step


def test_same_index_chain_is_one_kernel(rng):
    shape = (32, 32)
    ins = [rng.uniform(-1, 1, shape) for _ in range(4)]
    _check(_step20(qt), _step20(np), ins)
    report = _explain(_step20(qt), *ins)
    assert report.n_kernels == 1, str(report)
    assert report.tasks[0].bounds == shape or list(report.tasks[0].bounds) == [32 * 32], str(report)
    assert len(report.tasks[0].ops) == 20, str(report)
    assert report.boundaries() == [], str(report)
    assert report.decisions and all(d.fused and d.rule == "injective" for d in report.decisions), str(report)
    for fusion, expected in ((True, 1), (False, 20)):
        qt.config.fusion = fusion
        _, launches = _launches(_step20(qt), *[qt.asarray(a) for a in ins])
        assert launches == expected, f"fusion={fusion}: {launches} launches"
    # a shape of its own: the plan compiles here, and the compile counts its fusions
    qt.config.fusion = True
    _, launches = _launches(_step20(qt), *[qt.asarray(a[:31, :30]) for a in ins])
    assert launches == 1 and qt.stats()["tasks_fused"] == 19, qt.stats()


def test_same_index_chain_results(fusion, rng):
    ins = [rng.uniform(-1, 1, (8, 8)) for _ in range(4)]
    got = _values(_step20(qt), *[qt.asarray(a) for a in ins])[0]
    np.testing.assert_allclose(got, _step20(np)(*ins), rtol=1e-12, atol=1e-12)


def test_transpose_read_fuses_as_injective(arrays):
    m, r = arrays["m"], arrays["r"]

    def fn(m, r):
        return qt.exp(m).T + m, qt.sin(r).T * 2.0

    _check(fn, lambda m, r: (np.exp(m).T + m, np.sin(r).T * 2.0), [m, r])
    report = _explain(fn, m, r)
    d = _decision(report, "exp")
    assert d.fused and d.rule == "injective", str(report)
    d = _decision(report, "sin")
    assert d.fused and d.rule == "injective", str(report)
    assert report.n_kernels == 2, str(report)   # bounds [8, 8] and [8, 4]


def test_reversed_and_strided_reads_fuse_as_injective(arrays):
    v, m = arrays["v"], arrays["m"]

    def fn(v, m):
        return qt.exp(v)[::-1] + v, qt.tanh(m)[::2, ::-1] * 3.0

    _check(fn, lambda v, m: (np.exp(v)[::-1] + v, np.tanh(m)[::2, ::-1] * 3.0), [v, m])
    report = _explain(fn, v, m)
    assert _decision(report, "exp").rule == "injective" and _decision(report, "exp").fused, str(report)
    assert _decision(report, "tanh").rule == "injective" and _decision(report, "tanh").fused, str(report)


# -- several reads: recompute within the budget, or a boundary ------------------------------
def test_shifted_read_of_a_cheap_producer_is_recomputed(arrays):
    v = arrays["v"]

    def fn(v):
        x = v * 2.0 - 1.0
        return x[1:] + x[:-1]

    _check(fn, lambda v: (v * 2.0 - 1.0)[1:] + (v * 2.0 - 1.0)[:-1], [v])
    report = _explain(fn, v)
    assert report.n_kernels == 1, str(report)
    for prim in ("multiply", "subtract"):
        d = _decision(report, prim)
        assert d.fused and "recompute" in d.rule and "within budget" in d.rule, str(report)


def test_shifted_read_of_exp_fuses_at_two_reads_not_at_three(arrays):
    v = arrays["v"]

    def two(v):
        x = qt.exp(v)
        return x[1:] - x[:-1]

    def three(v):
        x = qt.exp(v)
        return x[2:] + x[1:-1] + x[:-2]

    _check(two, lambda v: np.exp(v)[1:] - np.exp(v)[:-1], [v])
    _check(three, lambda v: np.exp(v)[2:] + np.exp(v)[1:-1] + np.exp(v)[:-2], [v])
    d = _decision(_explain(two, v), "exp")
    # 2 reads x 7 elements of the task / 8 of exp: (1.75 - 1) * cost 4 <= budget 4
    assert d.fused and "recompute x1.75" in d.rule, str(d)
    report = _explain(three, v)
    d = _decision(report, "exp")
    # 3 x 6 / 8 = 2.25 evaluations per element of exp: (2.25 - 1) * 4 > 4
    assert not d.fused and "read at 3 indices" in d.rule and "x2.25 exceeds budget" in d.rule, str(report)
    assert report.n_kernels == 2, str(report)


def test_shifted_read_of_a_broadcast_of_exp_is_a_boundary(arrays):
    """``exp`` feeding a broadcast that is read shifted: x16 recomputation, over budget."""
    v, w = arrays["v"], arrays["w"]

    def fn(v, w):
        x = qt.exp(v)[:, None] + w[None, :]
        return x[1:] + x[:-1]

    def ref(v, w):
        x = np.exp(v)[:, None] + w[None, :]
        return x[1:] + x[:-1]

    _check(fn, ref, [v, w])
    report = _explain(fn, v, w)
    d = _decision(report, "exp")
    assert not d.fused and "exceeds budget" in d.rule, str(report)
    assert ("exp", "add", d.rule, d.expression) in report.boundaries()
    d = _decision(report, "add", "add")   # the cheap broadcast sum itself is recomputed
    assert d.fused and "recompute" in d.rule, str(report)


def test_broadcast_read_of_an_expensive_producer_is_a_boundary(arrays):
    v, w = arrays["v"], arrays["w"]

    def fn(v, w):
        return qt.exp(v)[:, None] * w[None, :]

    _check(fn, lambda v, w: np.exp(v)[:, None] * w[None, :], [v, w])
    report = _explain(fn, v, w)
    d = _decision(report, "exp")
    assert not d.fused and d.rule.startswith("broadcast read"), str(report)
    assert "i0" in str(d.expression), str(report)
    assert report.n_kernels == 2, str(report)


def test_broadcast_read_of_a_cheap_producer_over_a_short_axis_is_recomputed(arrays):
    v, w = arrays["v"], arrays["w"][:4]

    def fn(v, w):
        return (v * 3.0)[:, None] - w[None, :]

    _check(fn, lambda v, w: (v * 3.0)[:, None] - w[None, :], [v, w])
    report = _explain(fn, v, w)
    d = _decision(report, "multiply")
    assert d.fused and "recompute x4" in d.rule, str(report)   # (4 - 1) * 1 <= 4
    assert report.n_kernels == 1, str(report)


# -- index maps that are not injective -----------------------------------------------------
def test_floor_division_index_through_a_reshape_is_a_boundary(arrays):
    v = arrays["v"]

    def fn(v):  # y[i] = exp(v)[i // 2]
        return qt.broadcast_to(qt.exp(v)[:, None], (8, 2)).reshape(-1) + 1.0

    _check(fn, lambda v: np.repeat(np.exp(v), 2) + 1.0, [v])
    report = _explain(fn, v)
    d = _decision(report, "exp")
    assert not d.fused and "floor division" in d.rule, str(report)
    assert "//" in str(d.expression) and "2" in str(d.expression), str(report)
    assert "//" in str(report) and "boundary" in str(report)


INDEX_MAPS = {  # name: (y = f(exp(v)) reading exp(v) at a non-injective index, that index)
    "remainder": (lambda v: qt.broadcast_to(qt.exp(v)[None, :], (2, 8)).reshape(-1)[3:11] + 1.0,
                  lambda i: (i + 3) % 8),
    "floor division": (lambda v: qt.broadcast_to(qt.exp(v)[:, None], (8, 2)).reshape(-1)[1:15] + 1.0,
                       lambda i: (i + 1) // 2),
}


@pytest.mark.parametrize("index_map", sorted(INDEX_MAPS))
def test_boundary_index_expressions_print_unambiguously(index_map, arrays):
    """The report shows the offending index expression; read as arithmetic it must mean
    that index: ``(i0 + 3) % 8`` must not print as ``(i0 + 3 % 8)`` (which reads as
    ``i0 + 3``), nor ``(i0 + 1) // 2`` as ``(i0 + 1 // 2)``."""
    fn, meaning = INDEX_MAPS[index_map]
    d = _decision(_explain(fn, arrays["v"]), "exp")
    assert not d.fused and index_map in d.rule, str(d)
    text = str(d.expression).replace("i0", "i")
    assert [eval(text, {"i": i}) for i in range(8)] == [meaning(i) for i in range(8)], \
        f"index expression printed as {d.expression!s}"


def test_remainder_index_is_a_boundary_and_the_tasks_are_not_merged(arrays):
    """``y[i] = exp(v)[(i + 3) % 8]``: two map tasks of the same bounds [8], kept apart
    because the second reads the first's output at another index."""
    v = arrays["v"]

    def fn(v):
        return qt.broadcast_to(qt.exp(v)[None, :], (2, 8)).reshape(-1)[3:11] + 1.0

    _check(fn, lambda v: np.roll(np.exp(v), -3) + 1.0, [v])
    report = _explain(fn, v)
    d = _decision(report, "exp")
    assert not d.fused and "remainder" in d.rule and "%" in str(d.expression), str(report)
    assert report.n_kernels == 2 and [list(t.bounds) for t in report.tasks] == [[8], [8]], str(report)
    horizontal = [b for b in report.boundaries() if b[0] == "task"]
    assert len(horizontal) == 1, str(report)
    assert "reads a buffer the other task writes" in horizontal[0][2], str(report)
    assert "%" in horizontal[0][2] and "instead of i0" in horizontal[0][2], str(report)


def test_min_index_gather_keeps_its_source_apart(arrays):
    v = arrays["v"]

    def fn(v):  # y[i] = sin(v)[min(i, 5)]
        return qt.sin(v)[qt.minimum(qt.arange(8), 5)] * 2.0

    _check(fn, lambda v: np.sin(v)[np.minimum(np.arange(8), 5)] * 2.0, [v])
    report = _explain(fn, v)
    d = _decision(report, "sin")
    assert not d.fused and "data-dependent" in d.rule, str(report)
    d = _decision(report, "minimum")   # the index computation fuses into the gather
    assert d.fused and d.rule == "injective", str(report)


def test_gather_source_is_a_data_dependent_boundary(arrays):
    v, idx = arrays["v"], arrays["idx"]

    def fn(v, idx):
        return (v * 2.0 + 1.0)[idx] - 0.5

    _check(fn, lambda v, idx: (v * 2.0 + 1.0)[idx] - 0.5, [v, idx])
    report = _explain(fn, v, idx)
    d = _decision(report, "add")   # its consumer is the task the gather joined
    assert not d.fused and d.rule.startswith("data-dependent"), str(report)
    assert any("data-dependent" in b[2] for b in report.boundaries()), str(report)
    d = _decision(report, "gather")   # the gather itself joins its consumer
    assert d.fused and d.rule == "injective", str(report)


def test_gather_with_repeated_indices(fusion, arrays):
    v = arrays["v"]
    idx = np.array([3, 3, 3, 0, 7, 7])
    got = _values(lambda v, i: (qt.exp(v) * 2.0)[i] + qt.exp(v)[i], qt.asarray(v), qt.asarray(idx))[0]
    np.testing.assert_allclose(got, (np.exp(v) * 2.0)[idx] + np.exp(v)[idx], rtol=1e-13)


GATHER_VIEWS = {"shifted": lambda x: x[1:], "strided": lambda x: x[::2], "reversed": lambda x: x[::-1],
                "transposed": lambda x: x.T, "reshaped": lambda x: x.reshape(16, 4),
                "transposed-strided": lambda x: x.T[::2]}


@pytest.mark.parametrize("view", sorted(GATHER_VIEWS))
def test_gather_through_a_view_of_a_computed_source(view, arrays):
    """Regression: with fusion on, a gather whose source is a view (slice, transpose,
    reshape) of a computed value crashed in partitioning
    (``AttributeError: 'str' object has no attribute 'const'``: the data-dependent read
    marker was passed on through the view's index map, ``partition.reads_in`` ->
    ``access.view_index``; fixed in 312ffc3)."""
    m, idx = arrays["m"], np.array([1, 0, 3, 3])

    def fn(m, idx):
        return GATHER_VIEWS[view](m * 2.0)[idx] + 1.0

    _check(fn, lambda m, idx: GATHER_VIEWS[view](m * 2.0)[idx] + 1.0, [m, idx])
    report = _explain(fn, m, idx)
    d = _decision(report, "multiply")
    assert not d.fused and "data-dependent" in d.rule, str(report)


def test_gather_through_two_views_of_an_input(fusion, arrays):
    """Regression (same cause): ``m.T[::2][idx]`` of an *input* ``m`` crashed with fusion on
    (one view of an input was fine; a chain of two was not)."""
    m, idx = arrays["m"], np.array([1, 0, 3])
    got = _values(lambda m, idx: m.T[::2][idx] + 1.0, qt.asarray(m), qt.asarray(idx))[0]
    np.testing.assert_array_equal(got, m.T[::2][idx] + 1.0)


# -- reductions, scatters ------------------------------------------------------------------
def test_reduction_fuses_its_producers(arrays):
    m, v = arrays["m"], arrays["v"]

    def fn(m, v):
        return qt.sum(qt.exp(m) * v, axis=1), qt.max(qt.sin(m).T - v, axis=0, keepdims=True)

    _check(fn, lambda m, v: (np.sum(np.exp(m) * v, axis=1), np.max(np.sin(m).T - v, axis=0, keepdims=True)),
           [m, v], exact=False)
    report = _explain(fn, m, v)
    for prim in ("exp", "multiply", "sin", "subtract"):
        d = _decision(report, prim)
        assert d.fused and d.rule == "injective", str(report)
        assert d.consumer.prim in ("reduce_sum", "reduce_max"), str(report)
    kinds = sorted(t.kind for t in report.tasks)
    assert kinds.count("reduce") == 2, str(report)
    assert all(t.kind == "reduce" or t.ops in (["reshape"], ["broadcast"]) for t in report.tasks), str(report)


def test_reduction_over_all_axes_and_mean(fusion, arrays):
    m = arrays["m"]
    got = _values(lambda m: (qt.mean(qt.tanh(m) * 2.0), qt.sum(m * m, axis=(0, 1), keepdims=True),
                             m - qt.max(m, axis=1, keepdims=True)), qt.asarray(m))
    ref = (np.mean(np.tanh(m) * 2.0), np.sum(m * m, axis=(0, 1), keepdims=True),
           m - np.max(m, axis=1, keepdims=True))
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14)


def test_scatter_add_with_repeated_indices(fusion, arrays):
    v, w = arrays["v"], arrays["w"]
    idx = np.array([0, 0, 5, 5, 5, 7, 0, 2])

    def fn(v, w, idx):
        y = qt.exp(v).at[idx].add(w * 2.0)
        return y, y[1:] + y[:-1]

    got = _values(fn, qt.asarray(v), qt.asarray(w), qt.asarray(idx))
    y = np.exp(v)
    np.add.at(y, idx, w * 2.0)
    # (atol: exp is within an ulp of NumPy's, and exp(v) + 2w can cancel to near zero)
    np.testing.assert_allclose(got[0], y, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(got[1], y[1:] + y[:-1], rtol=1e-13, atol=1e-14)


# -- stored members: outputs also read by the task that computes them -----------------------
def test_output_consumed_at_a_shifted_index_is_stored_correctly(fusion, arrays):
    v = arrays["v"]

    def fn(v):
        x = qt.sin(v) * 2.0
        return x, x[1:] + x[:-1], x[::-1] * 3.0

    def ref(v):
        x = np.sin(v) * 2.0
        return x, x[1:] + x[:-1], x[::-1] * 3.0

    got = _values(fn, qt.asarray(v))
    for g, r in zip(got, ref(v)):
        np.testing.assert_allclose(g, r, rtol=1e-13, atol=1e-15)


def test_output_consumed_at_a_shifted_index_is_materialized(arrays):
    v = arrays["v"]

    def fn(v):
        x = v * 2.0
        return x, x[1:] + x[:-1]

    _check(fn, lambda v: (v * 2.0, (v * 2.0)[1:] + (v * 2.0)[:-1]), [v])
    report = _explain(fn, v)
    d = _decision(report, "multiply")
    assert not d.fused and "output read at another index" in d.rule, str(report)
    assert report.n_kernels == 2, str(report)


@pytest.mark.parametrize("read", ["same", "transposed", "reversed"])
def test_output_read_at_an_injective_index_is_stored_from_the_same_kernel(read, arrays):
    m = arrays["m"]
    views = {"same": lambda x: x, "transposed": lambda x: x.T, "reversed": lambda x: x[::-1, ::-1]}

    def fn(m):
        x = qt.exp(m) - 1.0
        return views[read](x) * m, x

    def ref(m):
        x = np.exp(m) - 1.0
        return views[read](x) * m, x

    _check(fn, ref, [m])
    report = _explain(fn, m)
    assert report.n_kernels == 1, str(report)
    d = _decision(report, "subtract")
    assert d.fused and d.rule == "injective", str(report)
    assert len(report.tasks[0].writes) == 2, str(report)
    qt.config.fusion = True
    _, launches = _launches(fn, qt.asarray(m))
    assert launches == 1


# -- empty results ----------------------------------------------------------------------
@pytest.mark.parametrize("case", ["view of a computed value", "beside another kernel"])
def test_empty_output_is_an_empty_array(case, fusion, arrays):
    """Regression: a plan left with exactly one kernel to launch (its empty-domain tasks
    skipped) takes the single-kernel fast path, which returned ``None`` for the empty
    output (``array(None, dtype=object)`` from ``.numpy()``; after ``qt.eval`` the tensor
    raised ``TracerError``). Which plans hit it depends on fusion: the first case with
    fusion off (``exp`` and the empty slice are two tasks), the second with it on."""
    v = arrays["v"]
    if case == "view of a computed value":
        def fn(v):
            return qt.exp(v)[3:3], qt.exp(v)[3:3] + 1.0
        ref = (np.exp(v)[3:3], np.exp(v)[3:3] + 1.0)
    else:
        def fn(v):
            return qt.exp(v) * 2.0, qt.sin(v)[3:3] + 1.0
        ref = (np.exp(v) * 2.0, np.sin(v)[3:3] + 1.0)
    got = _values(fn, qt.asarray(v))
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype, (g, r)
        np.testing.assert_allclose(g, r, rtol=1e-13)
    direct = fn(qt.asarray(v))[1].numpy()   # one output, no qt.eval
    assert direct.shape == ref[1].shape and direct.dtype == ref[1].dtype, repr(direct)


# -- horizontal fusion ------------------------------------------------------------------
def _ten_updates(*xs):
    return tuple(qt.sin(x) * (k + 1.0) + x * x for k, x in enumerate(xs))


def test_horizontal_fusion_of_independent_updates(rng):
    n = 100_000
    ins = [rng.uniform(-1, 1, n) for _ in range(10)]
    results = {}
    for fusion in (True, False):
        qt.config.fusion = fusion
        results[fusion] = _launches(_ten_updates, *[qt.asarray(a) for a in ins])
    (fused, on), (unfused, off) = results[True], results[False]
    assert on == 1, f"fusion on: {on} launches"
    assert off >= 10, f"fusion off: {off} launches"
    for k, (f, u, a) in enumerate(zip(fused, unfused, ins)):
        np.testing.assert_array_equal(f.view(np.uint8), u.view(np.uint8), err_msg=f"output {k}")
        np.testing.assert_allclose(f, np.sin(a) * (k + 1.0) + a * a, rtol=1e-13, atol=1e-15)
    report = _explain(_ten_updates, *ins)
    assert report.n_kernels == 1, str(report)
    assert len(report.horizontal) == 9 and all(why is None for _, _, why in report.horizontal), str(report)
    assert len(report.tasks[0].writes) == 10, str(report)


def _many_updates(*xs):
    return tuple(qt.tanh(x) * (k + 1.0) - qt.sin(x) for k, x in enumerate(xs))


def test_horizontal_merges_are_bounded_by_task_cost(rng):
    """30 independent updates do not become one kernel: each merged kernel stays within
    the task cost limit (what bounds LLVM's time), and the values match NumPy."""
    ins = [rng.uniform(-1, 1, 40_000) for _ in range(30)]
    outs = _check(_many_updates, lambda *xs: tuple(np.tanh(x) * (k + 1.0) - np.sin(x)
                                                 for k, x in enumerate(xs)), ins, exact=False)
    assert len(outs) == 30
    report = _explain(_many_updates, *ins)
    limited = [why for _, _, why in report.horizontal if why and "task size limit" in why]
    assert limited and report.n_kernels == len(limited) + 1, str(report)
    costs = [step.task.cost for step in report.spec.steps if step.task is not None]
    assert all(c <= MAX_TASK_COST for c in costs), costs
    assert len(report.horizontal) - len(limited) == 30 - report.n_kernels, str(report)


def test_small_independent_tasks_stay_separate_and_share_one_kernel(fusion, rng):
    """Products of elements (``[[x[i] * y[j] ...]]``, small and sharing no buffer) are not
    merged into one kernel per count: every product runs the same compiled kernel."""
    x, y = rng.normal(size=7), rng.normal(size=9)
    tx, ty = qt.asarray(x), qt.asarray(y)
    qt.asarray([[tx[0] * ty[0]]])  # compiles the product kernel
    for n, m in ((3, 4), (7, 9)):
        before = qt.stats()["compiles"]
        got = qt.asarray([[tx[i] * ty[j] for j in range(m)] for i in range(n)])
        np.testing.assert_array_equal(got.numpy(), np.outer(x[:n], y[:m]))
        assert qt.stats()["compiles"] == before, f"{n}x{m}: a kernel compiled per shape"
    report = _explain(lambda a, b: (a + 1.0, b - 1.0), x[:3], y[:3])
    (_, _, why), = report.horizontal
    assert why is not None and "small independent" in why and report.n_kernels == 2, str(report)
    report = _explain(lambda a, b: (a + 1.0, a * b), x[:3], y[:3])  # sharing a buffer: merged
    (_, _, why), = report.horizontal
    assert why is None and report.n_kernels == 1, str(report)


def test_horizontal_merge_forwards_a_value_read_at_the_same_index(arrays):
    """``exp(v)`` is materialized (its consumers are in two tasks); the task computing
    ``e * 3 - w`` reads it at the index the ``exp`` task writes it, so the two [8] tasks
    merge and the value is forwarded in registers."""
    v, w = arrays["v"], arrays["w"]

    def fn(v, w):
        e = qt.exp(v)
        return e[:, None] * w[None, :], e * 3.0 - w

    _check(fn, lambda v, w: (np.exp(v)[:, None] * w[None, :], np.exp(v) * 3.0 - w), [v, w])
    report = _explain(fn, v, w)
    d = _decision(report, "exp")
    assert not d.fused and d.rule == "consumers in several tasks", str(report)
    assert report.n_kernels == 2, str(report)
    (_, _, why), = report.horizontal
    assert why is None, str(report)
    assert sorted(report.tasks[0].writes) == ["exp[8]:float64", "subtract[8]:float64"], str(report)


def test_task_reading_another_tasks_output_through_a_gather_is_not_merged(arrays):
    v, idx = arrays["v"], np.array([7, 6, 5, 4, 3, 2, 1, 0])

    def fn(v, idx):
        return qt.exp(v)[idx] + 1.0

    _check(fn, lambda v, idx: np.exp(v)[idx] + 1.0, [v, idx])
    report = _explain(fn, v, idx)
    assert report.n_kernels == 2, str(report)
    (task, into, why), = report.horizontal
    assert why is not None and "reads a buffer the other task writes" in why, str(report)
    assert [n.prim for n in into.nodes] == ["exp"], str(report)   # the earlier task: exp
    assert "gather" in [n.prim for n in task.nodes], str(report)  # the later one reads it at %k


# -- diagnostics ------------------------------------------------------------------------
def test_fusion_diag_prints_decisions(capfd, rng):
    qt.config.fusion = True
    qt.config.fusion_diag = True
    # shapes unique to this test: the plan must be compiled here (decisions print then)
    v, w = qt.asarray(rng.uniform(-1, 1, 13)), qt.asarray(rng.uniform(-1, 1, 11))
    out = (qt.exp(v)[:, None] + w[None, :]) * 2.0
    # (atol: exp is within an ulp of NumPy's, and exp(v) + w can cancel to near zero)
    np.testing.assert_allclose(out.numpy(), (np.exp(v.numpy())[:, None] + w.numpy()[None, :]) * 2.0,
                               rtol=1e-13, atol=1e-14)
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("[qtrace fusion]")]
    assert any("fused" in ln and "injective" in ln for ln in lines), err
    assert any("boundary" in ln and "broadcast read" in ln for ln in lines), err


def test_fusion_diag_prints_horizontal_decisions(capfd, rng):
    """Horizontal merges and their refusals print too (merged, a task size limit)."""
    qt.config.fusion = True
    qt.config.fusion_diag = True
    ins = [rng.uniform(-1, 1, 40_001) for _ in range(30)]  # a size unique to this test
    outs = _many_updates(*[qt.asarray(a) for a in ins])
    qt.eval(*outs)
    np.testing.assert_allclose(outs[3].numpy(), np.tanh(ins[3]) * 4.0 - np.sin(ins[3]), rtol=1e-14)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("[qtrace fusion] horizontal")]
    assert any(ln.endswith(": merged") for ln in lines), lines
    assert any("separate: task size limit" in ln for ln in lines), lines


def test_fusion_diag_environment_variable():
    code = ("import numpy as np, qtrace as qt\n"
            "v = qt.asarray(np.linspace(0, 1, 9))\n"
            "x = qt.exp(v)\n"
            "y = (x[1:] + x[:-1]) * x[::-1][1:] + qt.broadcast_to(x[:, None], (9, 2)).reshape(-1)[:8]\n"
            "print(float(qt.sum(y)))\n")
    env = dict(os.environ, QTRACE_FUSION_DIAG="1", QTRACE_FUSION="1")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("[qtrace fusion]")]
    assert any(" fused (" in ln for ln in lines), proc.stderr
    assert any(" boundary (" in ln and "floor division" in ln for ln in lines), proc.stderr


def test_explain_svg_marks_a_direct_boundary(arrays):
    v, idx = arrays["v"], arrays["idx"]
    report = _explain(lambda v, idx: (qt.exp(v) * 2.0)[idx], v, idx)
    text = str(report)
    assert "fusion decisions:" in text and "boundary (data-dependent" in text, text
    svg = report.svg()
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "#d62728" in svg and "data-dependent" in svg, svg


def test_explain_svg_marks_a_boundary_read_through_a_view(arrays):
    """The diagram draws rejected producer -> consumer edges in red with their rule, also
    when the consumer reads the producer through a (free) view such as a broadcast."""
    v, w = arrays["v"], arrays["w"]
    report = _explain(lambda v, w: qt.exp(v)[:, None] + w[None, :], v, w)
    assert "boundary (broadcast read" in str(report), str(report)
    svg = report.svg()
    assert "#d62728" in svg and "broadcast read" in svg, svg


def test_horizontal_merge_waits_for_every_piece_of_a_concatenation(fusion):
    """A concatenation is written by one task per piece; a task reading it may only be merged
    into an earlier task once the last piece is written (found through chained ``roll``)."""
    t = qt.asarray([1.5, 2.0, 3.0, 0.5])
    c = qt.concatenate([qt.ones(1), t[:3]])
    g = qt.concatenate([qt.ones(2), c[:2]]) * 2.0
    out = g * c + qt.concatenate([g[1:], qt.zeros(1)])
    a = np.array([1.5, 2.0, 3.0, 0.5])
    cn = np.concatenate([np.ones(1), a[:3]])
    gn = np.concatenate([np.ones(2), cn[:2]]) * 2.0
    np.testing.assert_array_equal(out.numpy(), gn * cn + np.concatenate([gn[1:], np.zeros(1)]))


@pytest.fixture
def regions(device, monkeypatch):
    """The test device, its target making region tasks over bases of the CPU's smallest
    size: a GPU's target makes them only over bases of megabytes (there a launch costs more
    than a pass over a smaller array), so its in-place code is tested on these sizes too."""
    target = target_for(device)
    monkeypatch.setattr(target, "lowering", dataclasses.replace(target.lowering, region_bytes=REGION_BYTES))
    return device


def test_boundary_conditions_written_one_after_another_are_written_in_place(regions, rng):
    """Neumann walls then a Dirichlet row (the cavity flow's pressure boundary): each
    write reads the previous array at one row or column. The interior update is the one
    task over the whole array; each wall is a region task over its row or column that
    writes into that array's buffer in place (before: the walls fused by recomputation,
    a pass over the whole array for four lines)."""
    p0 = rng.standard_normal((24, 24))

    def walls(p):
        p = p.copy()
        p[1:-1, 1:-1] = qt.exp(p[1:-1, 2:]) + qt.exp(p[1:-1, :-2])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
        return p

    def ref(p):
        p = p.copy()
        p[1:-1, 1:-1] = np.exp(p[1:-1, 2:]) + np.exp(p[1:-1, :-2])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
        return p

    _check(walls, ref, [p0])
    report = _explain(walls, p0)
    assert [(list(t.bounds), "in place" in t.name) for t in report.tasks] == \
        [([24, 24], False)] + [([24], True)] * 4, str(report)
    rules = [d.rule for d in report.decisions if not d.fused]
    assert rules == ["the base of a region slice assignment, which writes into it in place"] * 4, str(report)


# Region slice assignments: (program, how many of its writes are region tasks in place).
# Each takes the array module, a (16, 40) and a (6, 8, 40) array and returns arrays (big
# enough for a row, a column or a plane to touch at most half of an array's cache lines).
def _walls(xp, x, x3):
    y = x * 2.0
    y[:, -1] = y[:, -2]
    y[0, :] = y[1, :]
    y[:, 0] = y[:, 1] + y[:, 0]
    y[-1, :] = 0
    return (y,)


def _same_index(xp, x, x3):
    y = x * 2.0
    y[:, 0] = y[:, 0] * 3.0 + 1.0   # each element reads itself: in place
    return (y,)


def _shifted_overlap(xp, x, x3):
    y = x * 2.0
    y[0, 1:] = y[0, :-1]            # reads what other elements write: not in place
    return (y,)


def _reversed_overlap(xp, x, x3):
    y = x * 2.0
    y[0, :] = y[0, ::-1] - 1.0
    return (y,)


def _strided(xp, x, x3):
    y = x * 2.0
    y[::2, 0] = y[::2, 1]           # y is also read by the next write: a plain task
    y[::-3, -1] = y[::-3, 0] + y[::-3, -1]   # in place (a disjoint and a same-index read)
    return (y,)


def _base_read_elsewhere(xp, x, x3):
    y = x * 2.0
    z = xp.exp(y)                   # reads the old base everywhere: not in place
    y[0, :] = y[1, :]
    return y, z


def _base_is_an_output(xp, x, x3):
    y = x * 2.0
    z = y.copy()                    # (a copy of a computed value is that value)
    z[0, :] = z[1, :]               # its base y is an output: not in place
    return y, z


def _member_output(xp, x, x3):
    y = x * 2.0
    w = y[:2, :] * 2.0              # computed in the region task, stored as well
    y[:2, :] = w + 1.0
    return y, w


def _three_d(xp, x, x3):
    y = x3 + 1.0
    y[:, :, 0] = y[:, :, 1]
    y[0] = y[1] * 0.5
    y[:, -1, :] = y[:, 0, :]
    return y, xp.sum(y, axis=2)


REGION_PROGRAMS = {"walls": (_walls, 4), "same index": (_same_index, 1),
                   "shifted overlap": (_shifted_overlap, 0), "reversed overlap": (_reversed_overlap, 0),
                   "strided": (_strided, 1), "base read elsewhere": (_base_read_elsewhere, 0),
                   "base is an output": (_base_is_an_output, 0), "member output": (_member_output, 1),
                   "three axes": (_three_d, 3)}


@pytest.mark.parametrize("name", list(REGION_PROGRAMS))
def test_region_slice_assignments_write_in_place_only_where_safe(name, regions, rng):
    """Eager (fused and unfused: bitwise equal) and jitted results match NumPy, and exactly the
    writes that may (nothing else reads the base; every read of it is of the element the
    same iteration writes, or outside the region) are region tasks in place."""
    prog, in_place = REGION_PROGRAMS[name]
    x, x3 = rng.standard_normal((16, 40)), rng.standard_normal((6, 8, 40))
    expected = prog(np, x.copy(), x3.copy())
    _check(lambda a, b: prog(qt, a, b), lambda a, b: prog(np, a.copy(), b.copy()), [x, x3])
    jitted = qt.jit(lambda a, b: prog(qt, a, b))
    for got, want in zip(jitted(x, x3), expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    report = _explain(lambda a, b: prog(qt, a, b), x, x3)
    assert sum("in place" in t.name for t in report.tasks) == in_place, str(report)
    assert all(t.bounds != tuple(x.shape) for t in report.tasks if "in place" in t.name)


@pytest.mark.parametrize("attempts", [4, 1])
def test_region_tasks_that_cannot_write_in_place_are_partitioned_again(attempts, regions, rng,
                                                                       monkeypatch):
    """Partitioning drops region tasks that cannot write in place and partitions again, a
    bounded number of rounds (``REGION_ATTEMPTS``); past the bound, with no region task."""
    monkeypatch.setattr(partition_module, "REGION_ATTEMPTS", attempts)
    x = rng.standard_normal((16, 40))

    def prog(xp, a):
        y = a * 2.0
        y[0, 1:] = y[0, :-1]      # a shifted overlap: not in place, so a second round
        y[:, -1] = y[:, -2]       # in place (in the second round)
        return y

    _check(lambda a: prog(qt, a), lambda a: prog(np, a.copy()), [x])
    report = _explain(lambda a: prog(qt, a), x)
    assert sum("in place" in t.name for t in report.tasks) == (1 if attempts > 1 else 0), str(report)


@pytest.mark.parametrize("special", [1e20, np.nan, np.inf])
def test_region_assignment_in_place_reruns_no_exact_trigonometry(special, regions, rng):
    """A region task in place whose values read the element they replace through sin/cos,
    with one argument outside the fast range (on the CPU, fast sin/cos run the range, then
    the exact functions re-run it if an argument was large: that re-run would read what the
    first run wrote, so a task in place computes exactly, once)."""
    x = rng.standard_normal((64, 16))
    x[5, 0] = special

    def prog(xp, a):
        p = a * 1.0
        p[:, 0] = xp.cos(p[:, 0]) + xp.sin(p[:, 0]) * 2.0
        return p

    def ref(a):
        with np.errstate(invalid="ignore"):  # (sin and cos of inf are NaN)
            return prog(np, a.copy())

    _check(lambda a: prog(qt, a), ref, [x], exact=False)
    np.testing.assert_allclose(qt.jit(lambda a: prog(qt, a))(x).numpy(), ref(x), rtol=1e-12)
    report = _explain(lambda a: prog(qt, a), x)
    assert sum("in place" in t.name for t in report.tasks) == 1, str(report)


def test_trip_counts_written_in_place_size_the_adstack(regions, rng):
    """The reverse of a per-element ``fori_loop`` whose trip counts are an array written by
    a region assignment in place: the host reads the counts (to size the stacks) from the
    buffer the assignment shares with its base."""
    a, x0 = rng.uniform(0.1, 2.0, 1024), rng.uniform(0.5, 1.5, 1024)

    def f(x, a):
        n = qt.floor(a * 3.0).astype(qt.int64)
        n[0] = n[1] + 1
        return qt.sum(qt.fori_loop(0, n, lambda i, v: v * 1.1, x))

    counts = np.floor(a * 3.0).astype(np.int64)
    counts[0] = counts[1] + 1
    for fusion in (True, False):
        qt.config.fusion = fusion
        for g in (qt.grad(f), qt.jit(qt.grad(f))):
            np.testing.assert_allclose(g(qt.asarray(x0), qt.asarray(a)).numpy(), 1.1 ** counts, rtol=1e-13)
    qt.config.fusion = True
    report = qt.explain(qt.grad(f), qt.asarray(x0), qt.asarray(a))
    assert any("in place" in t.name for t in report.tasks), str(report)


def test_streaming_step_of_a_lattice_method_is_one_task(rng):
    """Each component rolled and written back in turn (lattice-Boltzmann streaming): a
    read of a component reads through the writes to the others (disjoint regions), and
    ``roll`` is two region writes, so the rolls are one task (merged side by side) and the
    nine writes another (computing a roll inside the writes would evaluate it once per
    component: 9x its work). Before: one concatenation task per roll, one copy per write."""
    f0 = rng.random((6, 10, 9))
    shifts = [(0, 0), (0, 1), (1, 0), (0, -1), (-1, 0), (1, 1), (1, -1), (-1, -1), (-1, 1)]

    def stream(xp, f):
        f = f.copy()
        for i, (cy, cx) in enumerate(shifts):
            f[:, :, i] = xp.roll(f[:, :, i], cx, axis=1)
            f[:, :, i] = xp.roll(f[:, :, i], cy, axis=0)
        return f

    _check(lambda f: stream(qt, f), lambda f: stream(np, f), [f0])
    report = _explain(lambda f: stream(qt, f), f0)
    assert report.n_kernels == 2, str(report)
    assert "concatenate" not in str(report), str(report)


def test_matrix_products_read_transposed_operands_in_place(rng):
    """``x.T @ y``: the transpose (and any chain of views) of a materialized operand is a
    strided view handed to BLAS, not a copy; a computed operand is stored once, then viewed."""
    x, y, w = rng.standard_normal((30, 4)), rng.standard_normal((30, 5)), rng.standard_normal((12, 6))

    def fn(x, y, w):
        return (x.T @ y, qt.exp(x).T @ y,
                qt.reshape(w, (6, 12)).T[2:, ::-1] @ w[:6, :].T[::-1].T.T)

    def ref(x, y, w):
        return (x.T @ y, np.exp(x).T @ y, np.reshape(w, (6, 12)).T[2:, ::-1] @ w[:6, :].T[::-1].T.T)

    _check(fn, ref, [x, y, w], exact=False)
    report = _explain(lambda x, y: x.T @ y, x, y)
    assert report.n_kernels == 0 and "view, in place" in str(report), str(report)
    report = _explain(lambda x, y: qt.exp(x).T @ y, x, y)
    assert report.n_kernels == 1, str(report)   # exp stored once, then viewed transposed
    assert any("matrix product reads it through a view" in d.rule for d in report.decisions), str(report)


def test_gradient_of_a_transposed_product_matches_jax(fusion, rng):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    x, y = rng.standard_normal((8, 3)), rng.standard_normal((8, 5))

    def loss(xp, x, y):
        return xp.sum(xp.tanh(x.T @ y) ** 2)

    got = qt.grad(lambda x, y: loss(qt, x, y), argnums=(0, 1))(qt.asarray(x), qt.asarray(y))
    want = jax.grad(lambda x, y: loss(jnp, x, y), argnums=(0, 1))(x, y)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12, atol=1e-14)
