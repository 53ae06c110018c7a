"""Scans of few long rows split in contiguous chunks over CPU workers (``qtrace.kernels.split_scan``).

Pass 1 sums each piece of each chunk (``PIECES`` per chunk), pass 2 scans each chunk's
pieces from the exclusive sum of the earlier pieces' totals (two ordered phases of one
kernel step). Integers are exact; a float prefix is associated differently from the
serial scan, so it is compared with NumPy's float64 scan under the classic error bound
of a recursive sum: every term of the prefix at ``k`` passes through at most
``m = S * PIECES + 2 * chunk`` roundings (the exclusive sum of fewer than
``S * PIECES`` piece totals, a piece total of at most ``chunk`` terms in any association,
the in-order scan within the piece), so ``|got - exact| <= gamma_m * sum(|x_i|, i <= k)``
with ``gamma_m = m u / (1 - m u)`` (``u``: the unit roundoff of the result's dtype).
Results must be bit-identical for any number of workers and run after run.
"""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt
from qtrace.kernels import lowering
from qtrace.kernels.split_scan import PIECES
from qtrace.kernels.target import target_for

C = lowering.CHUNK


def _segments(fn, *args) -> int:
    """The most chunks per row of any scan task of ``fn(*args)``'s plan on the CPU."""
    from qtrace.graph.plan import build_plan
    spec = build_plan((fn(*args)._node,), qt.config.fusion)
    low = target_for(qt.Device("cpu")).lowering
    return max([lowering.scan_segments(t, low) for t in spec.tasks if t.kind == "scan"] or [0])


def _within_bound(got, x, axis, s: int):
    """``got`` (a float scan of ``x`` along ``axis`` in ``s`` chunks per row) is NumPy's
    float64 scan within the error bound of the module docstring."""
    x64 = x.astype(np.float64)
    want = np.cumsum(x64, axis=axis)
    length = x.shape[axis]
    m = s * PIECES + 2 * -(-length // s)
    u = np.finfo(got.dtype).eps / 2
    gamma = m * u / (1 - m * u)
    bound = gamma * np.cumsum(np.abs(x64), axis=axis)
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= bound + np.finfo(got.dtype).tiny), float(np.max(err - bound))
    return want


def _data(rng, shape, dt):
    if np.dtype(dt).kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dt)
    info = np.iinfo(dt)   # wide values: int32 sums wrap as in NumPy (same dtype out)
    return rng.integers(info.min // 4, info.max // 4, shape, dtype=dt)


SIZES = [2 * C - 1, 2 * C, 2 * C + 1, 4 * C - 1, 4 * C + 1, 5 * C + 12_345]
DTYPES = [np.float32, np.float64, np.int32, np.int64]


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", SIZES)
def test_split_cumsum_one_row_matches_numpy(n, dt, device, fusion, rng):
    """Rows around every chunk boundary (chunk - 1, chunk, chunk + 1 elements per chunk,
    several chunks and a remainder); int32 keeps its dtype and wraps as NumPy does."""
    x = _data(rng, n, dt)
    t = qt.asarray(x)
    s = lowering.contiguous_segments(1, n)
    assert s == (1 if n < 2 * C else 2 if n < 4 * C else 4)
    if device.kind == "cpu":
        assert _segments(qt.cumsum, t) == s
    got = qt.cumsum(t, dtype=dt).numpy()
    assert got.dtype == np.dtype(dt)
    if np.dtype(dt).kind == "i":
        np.testing.assert_array_equal(got, np.cumsum(x, dtype=dt))
    else:
        _within_bound(got, x, 0, s)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape, axis, split", [
    ((3, 3 * C + 7), 1, True),        # rows along the last axis
    ((2 * C + 3, 3), 0, True),        # a long strided axis
    ((2, 2 * C + 1, 2), 1, True),     # four rows around a middle axis
    ((3, 3 * C + 7), 0, False),       # a short axis: many short rows, not split
    ((8, 2 * C), 1, False),           # as many rows as a reduction's outputs that do not split
])
def test_split_cumsum_rows_and_axes(shape, axis, split, dt, device, fusion, rng):
    x = _data(rng, shape, dt)
    t = qt.asarray(x)
    s = lowering.contiguous_segments(x.size // shape[axis], shape[axis])
    assert s == (2 if split else 1)
    if device.kind == "cpu":
        assert _segments(lambda v: qt.cumsum(v, axis=axis), t) == s
    got = qt.cumsum(t, axis=axis, dtype=dt).numpy()
    if np.dtype(dt).kind == "i":
        np.testing.assert_array_equal(got, np.cumsum(x, axis=axis, dtype=dt))
    else:
        _within_bound(got, x, axis, s)


def test_split_cumsum_of_a_fused_expression(fusion, rng):
    """The scanned values computed in the scan's kernel (fusion on) or read (off); bool
    input scans to int64 as NumPy's."""
    x = rng.standard_normal(3 * C + 5)
    t = qt.asarray(x)
    got = qt.cumsum(qt.sin(t) * 2.0 + 1.0).numpy()
    _within_bound(got, np.sin(x) * 2.0 + 1.0, 0, 2)
    b = qt.cumsum(t > 0.5).numpy()
    np.testing.assert_array_equal(b, np.cumsum(x > 0.5))
    assert b.dtype == np.cumsum(x > 0.5).dtype
    w = qt.cumulative_sum(t, include_initial=True).numpy()
    assert w[0] == 0 and w.shape == (x.size + 1,)
    _within_bound(w[1:], x, 0, 2)


@pytest.mark.cpu_only("chunks over CPU workers")
def test_split_cumsum_is_deterministic_across_runs_and_threads(fusion, rng):
    x = qt.asarray(rng.standard_normal((2, 9 * C + 77)).astype(np.float32))
    assert _segments(lambda v: qt.cumsum(v, axis=1), x) == 8
    results = set()
    for threads in (1, 2, 1, 2, 2):
        qt.config.num_threads = threads
        results.add(qt.cumsum(x, axis=1).numpy().tobytes())
    assert len(results) == 1


@pytest.mark.cpu_only("chunks over CPU workers")
def test_split_cumsum_is_one_launch(rng):
    """Both passes are phases of one kernel step (one plan step, one scratch block)."""
    qt.config.num_threads = 2
    x = qt.asarray(rng.random(4 * C))
    qt.cumsum(x).numpy()
    qt.reset_stats()
    got = qt.cumsum(x).numpy()
    assert qt.stats()["kernel_launches"] == 1
    _within_bound(got, x.numpy(), 0, 4)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_split_cumsum_nan_and_inf_propagate_as_numpy(dt, fusion, rng):
    """inf in an early chunk makes every later prefix inf, a later -inf makes them NaN,
    and a NaN in a middle chunk makes every later prefix NaN."""
    n = 4 * C + 3
    for places in ({10: np.inf}, {C + 5: np.inf, 3 * C + 1: -np.inf}, {2 * C - 1: np.nan},
                   {2 * C: np.nan, 100: -np.inf}, {n - 1: np.nan}):
        x = rng.standard_normal(n).astype(dt)
        for k, v in places.items():
            x[k] = v
        got = qt.cumsum(qt.asarray(x)).numpy()
        with np.errstate(invalid="ignore"):   # inf - inf
            want = np.cumsum(x)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isinf(want) & (want > 0))
        np.testing.assert_array_equal(np.isinf(got) & (got < 0), np.isinf(want) & (want < 0))
        first = min(places)
        _within_bound(got[:first], x[:first], 0, 4)


def test_split_cumsum_gradient(fusion, rng):
    """The gradient of a cumsum is a reversed cumsum: a long row, split as well."""
    n = 3 * C + 11
    x, w = rng.random(n), rng.random(n)
    g = qt.grad(lambda v: qt.sum(qt.cumsum(v) * qt.asarray(w)))(qt.asarray(x)).numpy()
    want = np.cumsum(w[::-1])[::-1]
    _within_bound(g[::-1], w[::-1], 0, 2)
    np.testing.assert_allclose(g, want, rtol=1e-12)


@pytest.mark.parametrize("dt", [np.uint8, np.int8, np.uint32, np.int16], ids=lambda d: np.dtype(d).name)
def test_split_cumsum_of_narrow_integers_widens_as_numpy(dt, device, fusion, rng):
    x = rng.integers(0, 100, 2 * C + 9).astype(dt)
    t = qt.asarray(x)
    if device.kind == "cpu":
        assert _segments(qt.cumsum, t) == 2
    got = qt.cumsum(t).numpy()
    assert got.dtype == np.cumsum(x).dtype
    np.testing.assert_array_equal(got, np.cumsum(x))


def test_complex_scans_are_not_split(device, fusion, rng):
    x = (rng.standard_normal(2 * C + 9) + 1j * rng.standard_normal(2 * C + 9)).astype(np.complex64)
    t = qt.asarray(x)
    if device.kind == "cpu":
        assert _segments(qt.cumsum, t) == 1
    np.testing.assert_allclose(qt.cumsum(t).numpy(), np.cumsum(x.astype(np.complex128)), rtol=1e-4, atol=1e-2)
