"""Order statistics, NaN-aware reductions, histograms and correlation
(``qtrace/tracer/statistics.py``).

Each case is one callable ``fn(xp, *arrays)`` run with ``xp`` = ``qt``, ``np`` and
``jax.numpy`` (the harness: ``composite_cases.py``): forward against NumPy (dtype and
shape exactly, values against NumPy in float64) on fresh random inputs, and ``qt.grad``
against ``jax.grad`` (float64) or central finite differences. Gradient inputs are
continuous random data (no ties: at ties JAX may pick another element). Every test runs
with fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from composite_cases import (
    Case,
    _check_forward,
    forward_params,
    gradient_params,
    normal,
    positive,
    run_forward,
    run_gradient,
    separated,
    specials,
)

import qtrace as qt

F = ("float64", "float32")
FI = ("float64", "float32", "int32")
METHODS = ("inverted_cdf", "averaged_inverted_cdf", "closest_observation", "interpolated_inverted_cdf",
           "hazen", "weibull", "linear", "median_unbiased", "normal_unbiased", "lower", "higher",
           "midpoint", "nearest")


def nans(rng, shape, dtype):
    """``specials`` with more NaNs (floats only), and an all-NaN last row."""
    x = specials(rng, shape, dtype)
    if np.dtype(dtype).kind != "f" or x.size == 0:
        return x
    x[rng.random(shape) < 0.25] = np.nan
    if x.ndim == 2:
        x[-1] = np.nan
    return x


def some_nans(rng, shape, dtype):
    """Normal values with every fourth NaN (floats only): no slice of 2 or more all NaN."""
    x = normal(rng, shape, dtype)
    if np.dtype(dtype).kind == "f":
        x.reshape(-1)[1::4] = np.nan
    return x


def counts(rng, shape, dtype):
    return rng.integers(0, 7, shape).astype(dtype)


def ints(rng, shape, dtype):
    """Few distinct values: ties (forward only)."""
    return rng.integers(-3, 4, shape).astype(dtype)


def _by_method(xp, x, m):
    """Quantiles of rows of 8 (with ties for ints), of a flat row, and NaN-aware ones (the
    values above 1 made NaN, but for the first column: no row is all NaN, whose quantile
    would be NaN and make a finite-difference reference NaN everywhere)."""
    qs = [0.0, 0.1, 0.37, 0.5, 0.9, 1.0]
    with_nans = xp.where((x > 1.0) & (xp.arange(x.shape[-1]) > 0), xp.nan, x)
    return (xp.quantile(x, qs, axis=1, method=m), xp.quantile(x[0], 0.25, method=m),
            xp.quantile(x, 1, axis=0, method=m), xp.nanquantile(with_nans, qs[1:4], axis=-1, method=m))


def _flat_hist(result) -> tuple:
    """``histogramdd``'s ``(hist, [edges, ...])`` as one flat tuple of arrays."""
    hist, edges = result
    return (hist, *edges)


def C(*args, **kwargs) -> Case:
    """A case whose gradient is checked by finite differences (JAX: ``JAX_GRADS``), on
    well-separated values unless the case draws its own (a near-tie within the step would
    swap the order statistics between the two evaluations)."""
    kwargs.setdefault("grad", "fd")
    if kwargs.get("gen") in (None, positive):
        kwargs.setdefault("grad_gen", separated)
    return Case(*args, **kwargs)


D = ("float64",)    # cases there for their gradient (the forward pass is checked elsewhere)
HIST = dict(grad=None)


def _weighted_q(xp, x, w):
    return (xp.quantile(x, [0.0, 0.3, 0.5, 1.0], weights=w, method="inverted_cdf"),
            xp.quantile(x, 0.6, axis=1, weights=w[0], method="inverted_cdf"),
            xp.quantile(x, [0.25, 0.8], axis=0, weights=w, method="inverted_cdf", keepdims=True),
            xp.percentile(x, [10, 60], axis=-1, weights=w, method="inverted_cdf"))


CASES = [
    # ptp
    C("ptp", lambda xp, x: (xp.ptp(x), xp.ptp(x, axis=-1), xp.ptp(x, axis=(0, 2), keepdims=True)),
      [(2, 3, 4)], dtypes=("float64", "int32", "uint8")),
    C("ptp-0d-special", lambda xp, x, y: (xp.ptp(x), xp.ptp(y, axis=0)), [(), (6, 3)], dtypes=F,
      gen=specials, grad=None),
    # median
    C("median", lambda xp, x: (xp.median(x), xp.median(x, axis=1), xp.median(x, axis=(0, 2)),
                               xp.median(x, axis=0, keepdims=True), xp.median(x, keepdims=True)),
      [(3, 5, 2)], dtypes=("float64", "float32", "int32", "bool")),
    C("median-nan", lambda xp, x: (xp.median(x, axis=1), xp.median(x)), [(4, 5)], dtypes=F, gen=nans,
      grad=None),
    C("median-empty", lambda xp, e: (xp.median(e, axis=0), xp.nanmedian(e, axis=0), xp.nanmedian(e, axis=1),
                                     xp.nanquantile(e, [0.5, 0.2], axis=0), xp.nanpercentile(e, 50),
                                     xp.quantile(e, 0.3, axis=1)), [(0, 3)], dtypes=F, grad=None),
    C("median-ties", lambda xp, x: xp.median(x, axis=0), [(8, 3)], dtypes=("float64", "int32"), gen=ints,
      grad=None),
    # quantile / percentile
    C("quantile", lambda xp, x: (xp.quantile(x, 0.3), xp.quantile(x, 0.75, axis=0),
                                 xp.quantile(x, [0.1, 0.5, 0.99], axis=(0, -1)),
                                 xp.quantile(x, np.array([[0.2, 0.4], [0.6, 1.0]]), axis=1, keepdims=True),
                                 xp.quantile(x, np.float32(0.3), axis=0)),
      [(3, 5, 2)]),
    C("quantile-q-int", lambda xp, x: (xp.quantile(x, 1, axis=0), xp.quantile(x, [0, 1], axis=0)),
      [(4, 3)]),
    C("quantile-q-tensor", lambda xp, x, q: xp.quantile(x, q, axis=-1), [(3, 6), (4,)],
      gen=lambda rng, s, dt: positive(rng, s, dt) * 0.6 if len(s) == 1 else normal(rng, s, dt),
      dtypes=F, grad_args=(0,)),
    C("quantile-nan", lambda xp, x: (xp.quantile(x, [0.0, 0.2, 0.9, 1.0], axis=1), xp.quantile(x, 0.5)),
      [(4, 6)], dtypes=F, gen=nans, grad=None),
    C("quantile-0d", lambda xp, x: xp.quantile(x, 0.4), [()], grad=None),
    C("quantile-weights", _weighted_q, [(3, 5), (3, 5)], dtypes=F, gen=positive, grad_args=(0,)),
    C("quantile-weights-ties", _weighted_q, [(6, 4), (6, 4)], dtypes=("int32",), gen=counts,
      grad=None),
    C("quantile-weights-nan", lambda xp, x, w: xp.quantile(xp.where(w > 1.0, xp.nan, x), 0.5, axis=1,
                                                           weights=xp.abs(w), method="inverted_cdf"),
      [(3, 4), (3, 4)], dtypes=F, grad=None),
    C("percentile", lambda xp, x: (xp.percentile(x, [5, 50, 95], axis=-1),
                                   xp.percentile(x, 37.5, axis=0, method="hazen")), [(2, 7)]),
    # (the gradients of linear, lower and higher: JAX_GRADS and the cases above)
    *[C(f"quantile-{m}", lambda xp, x, m=m: _by_method(xp, x, m), [(3, 8)], dtypes=("float64", "int32"),
        grad=None if m in ("linear", "lower", "higher", "closest_observation") else "fd")
      for m in METHODS],
    # NaN-aware order statistics
    C("nanmedian", lambda xp, x: (xp.nanmedian(x, axis=1), xp.nanmedian(x),
                                  xp.nanmedian(x.reshape(2, 2, 6), axis=(0, 2), keepdims=True)),
      [(4, 6)], gen=nans, grad=None),
    # (a scalar q over a tuple of axes: with a list, NumPy's result dtype for float32 data is
    # float32 when its first slice is all NaN and float64 otherwise — it depends on the data)
    C("nanquantile", lambda xp, x: (xp.nanquantile(x, [0.1, 0.5], axis=1),
                                    xp.nanpercentile(x.reshape(2, 2, 6), 25, axis=(0, 1),
                                                     keepdims=True),
                                    xp.nanpercentile(x, 40.0)),
      [(4, 6)], gen=nans, grad=None),
    C("nan-order-grad", lambda xp, x: (xp.nanmedian(x, axis=0), xp.nanquantile(x, [0.3, 0.8], axis=1),
                                       xp.nanpercentile(x, 40.0)), [(4, 5)], dtypes=D, gen=some_nans),
    C("nanquantile-weights", lambda xp, x, w: xp.nanquantile(x, [0.2, 0.7], axis=-1, weights=w,
                                                             method="inverted_cdf"),
      [(4, 5), (4, 5)], dtypes=F, gen=lambda rng, s, dt: np.abs(some_nans(rng, s, dt)), grad=None),
    # NaN-aware reductions
    C("nansum-nanprod", lambda xp, x: (xp.nansum(x), xp.nansum(x, axis=1, keepdims=True),
                                       xp.nansum(x, axis=0, dtype=np.float32), xp.nanprod(x, axis=-1),
                                       xp.nanprod(x, axis=(0, 1))), [(4, 3)], gen=nans, grad=None),
    C("nansum-initial", lambda xp, x: (xp.nansum(x, axis=1, keepdims=True), xp.nansum(x, axis=0, initial=2.5),
                                       xp.nanprod(x, axis=-1, initial=-1.5)), [(3, 4)], dtypes=F,
      gen=some_nans),
    C("nancumsum-nancumprod", lambda xp, x: (xp.nancumsum(x), xp.nancumsum(x, axis=0),
                                             xp.nancumprod(x, axis=1)),
      [(4, 3)], gen=nans, grad=None),
    C("nancum-grad", lambda xp, x: (xp.nancumsum(x), xp.nancumprod(x, axis=1)), [(2, 5)], dtypes=D,
      gen=some_nans),
    C("nanmean-nanvar", lambda xp, x: (xp.nanmean(x, axis=1), xp.nanmean(x), xp.nanvar(x, axis=1),
                                       xp.nanvar(x, axis=1, ddof=3), xp.nanstd(x, axis=-1, keepdims=True),
                                       xp.nanvar(x, axis=0, dtype=np.float64), xp.nanvar(x, correction=1),
                                       xp.nanstd(x, axis=1, mean=xp.nanmean(x, axis=1, keepdims=True))),
      [(4, 5)], gen=nans, grad=None),
    C("nanmean-nanvar-grad", lambda xp, x: (xp.nanmean(x, axis=(0, 2), keepdims=True),
                                            xp.nanvar(x, axis=0, ddof=1), xp.nanvar(x, dtype=np.float64),
                                            xp.nanstd(x)), [(4, 3, 2)], dtypes=D, gen=some_nans),
    C("nanmax-nanmin", lambda xp, x: (xp.nanmax(x, axis=1), xp.nanmax(x, axis=1, initial=0.5),
                                      xp.nanmin(x, axis=(0, 1), keepdims=True), xp.nanmin(x)),
      [(4, 5)], gen=nans, grad=None),
    C("nanmax-grad", lambda xp, x: (xp.nanmax(x, axis=0), xp.nanmin(x)), [(4, 3)], dtypes=D, gen=some_nans),
    C("nanargmax-nanargmin", lambda xp, x: (xp.nanargmax(x, axis=1), xp.nanargmax(x),
                                            xp.nanargmin(x, axis=1, keepdims=True)),
      [(4, 5)], gen=specials, grad=None),
    # covariance
    C("cov", lambda xp, m: (xp.cov(m), xp.cov(m, rowvar=False, bias=True), xp.cov(m, ddof=2), xp.cov(m[0])),
      [(3, 6)]),
    C("cov-y", lambda xp, m, y: (xp.cov(m, y[0]), xp.cov(m.T, y.T, rowvar=False)), [(2, 5), (2, 5)],
      dtypes=F),
    C("cov-dtype", lambda xp, m: xp.cov(m, dtype=np.float32), [(2, 5)], dtypes=("float32",), grad=None),
    C("cov-weights", lambda xp, m, w: (xp.cov(m, fweights=np.array([1, 2, 1, 3, 1])), xp.cov(m, aweights=w),
                                       xp.cov(m, fweights=np.array([2, 1, 1, 3, 1]), aweights=w, ddof=1),
                                       xp.cov(m, aweights=w, bias=True)),
      [(2, 5), (5,)], dtypes=F, gen=positive),
    C("corrcoef", lambda xp, x: (xp.corrcoef(x), xp.corrcoef(x[0])), [(3, 6)], grad=None),
    C("corrcoef-grad", lambda xp, x: (xp.corrcoef(x)[np.triu_indices(3, 1)],
                                      xp.corrcoef(x[0], x[1], rowvar=False)[0, 1]), [(3, 6)], dtypes=D),
    # histograms
    C("histogram", lambda xp, a: (*xp.histogram(a), *xp.histogram(a.reshape(4, 5), bins=4),
                                  *xp.histogram(a, bins=5, range=(-1, 1.5)), *xp.histogram(a, bins=1),
                                  *xp.histogram(a * 0 + 3, bins=3),
                                  xp.histogram_bin_edges(a, 3, range=(0, 1.0))),
      [(20,)], **HIST),
    C("histogram-edges", lambda xp, a: (*xp.histogram(a, bins=[-2.0, -0.5, 0.0, 0.0, 1.0, 2.0]),
                                        *xp.histogram(a, bins=[-5, 0, 3, 9]),
                                        *xp.histogram(a, bins=3, density=True),
                                        *xp.histogram(a, bins=[-1, 0, 2], density=True),
                                        *xp.histogram(a, bins=xp.asarray([-1.0, 0.5, 2.0]))),
      [(20,)], **HIST),
    C("histogram-bool", lambda xp, a: xp.histogram(a, bins=3), [(9,)], dtypes=("bool",), **HIST),
    C("histogram-nan-range", lambda xp, a: xp.histogram(a, bins=3, range=(-1, 1)), [(20,)], dtypes=F,
      gen=specials, **HIST),
    C("histogram-weights", lambda xp, a, w: (*xp.histogram(a, bins=4, weights=w),
                                             *xp.histogram(a, bins=[-1.0, 0.0, 0.5, 2.0], weights=w),
                                             *xp.histogram(a, bins=[-1, 0, 2], density=True, weights=w)),
      [(12,), (12,)], grad_args=(1,)),
    C("histogram_bin_edges", lambda xp, a: xp.histogram_bin_edges(a, bins=6), [(3, 4)]),
    C("histogramdd", lambda xp, p: (*_flat_hist(xp.histogramdd(p, bins=3)),
                                    *_flat_hist(xp.histogramdd(p, bins=[2, [-1.0, 0.0, 1.5], 4],
                                                               range=[(-1, 1), None, None])),
                                    *_flat_hist(xp.histogramdd(p[:, :2], bins=4, density=True))),
      [(30, 3)], **HIST),
    C("histogramdd-seq-weights", lambda xp, x, y, w: (
        *_flat_hist(xp.histogramdd([x, y], bins=(3, 2), weights=w)),
        *_flat_hist(xp.histogramdd([x, y], bins=2, weights=w, density=True))),
      [(15,), (15,), (15,)], dtypes=F, grad_args=(2,)),
    C("histogram2d", lambda xp, x, y: (*xp.histogram2d(x, y), *xp.histogram2d(x, y, bins=[3, 4]),
                                       *xp.histogram2d(x, y, bins=[-2.0, 0.0, 0.5, 2.0]),
                                       *xp.histogram2d(x, y, bins=3, range=[(-1, 1), (-2, 2)])),
      [(25,), (25,)], **HIST),
    # bincount / digitize
    C("bincount", lambda xp, x: (xp.bincount(x), xp.bincount(x, minlength=10)), [(8,)],
      dtypes=("int32", "uint8", "bool"), gen=counts, grad=None),
    C("bincount-empty", lambda xp, x: xp.bincount(x, minlength=2), [(0,)], dtypes=("int64",), grad=None),
    C("digitize", lambda xp, x: (xp.digitize(x, [-1.0, 0.0, 0.5, 1.0]),
                                 xp.digitize(x, [-1, 0, 0, 2], right=True),
                                 xp.digitize(x, [2.0, 0.0, -1.0]), xp.digitize(x, [2, 0, 0, -1], right=True),
                                 xp.digitize(x, xp.asarray([2.0, 0.0, -1.0])),
                                 xp.digitize(x, xp.asarray([-1, 0, 0, 2]), right=True)),
      [(3, 4)], gen=ints, grad=None),
]


# --- forward -------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)


# --- gradients -----------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


JAX_GRADS = [
    ("ptp", lambda xp, x: xp.ptp(x, axis=1)),
    ("median", lambda xp, x: xp.concatenate([xp.median(x, axis=0), xp.median(x, axis=1)])),
    ("quantile", lambda xp, x: xp.quantile(x, xp.asarray([0.1, 0.5, 0.77]), axis=1)),
    ("nanmedian", lambda xp, x: xp.nanmedian(xp.where(x > 1.0, xp.nan, x), axis=1)),
    ("nanmean", lambda xp, x: xp.nanmean(xp.where(x > 1.0, xp.nan, x), axis=0)),
    ("nanvar", lambda xp, x: xp.nanvar(xp.where(x > 1.0, xp.nan, x), axis=1)),
    ("nanmax", lambda xp, x: xp.nanmax(xp.where(x > 1.0, xp.nan, x), axis=1)),
    ("cov", lambda xp, x: xp.cov(x)),
    ("corrcoef", lambda xp, x: xp.corrcoef(x)[0, 1:]),
]


@pytest.mark.parametrize("name,fn", JAX_GRADS, ids=[n for n, _ in JAX_GRADS])
def test_gradient_against_jax(name, fn, rng, fusion):
    """The functions JAX has: ``qt.grad`` equals ``jax.grad`` (float64, continuous data)."""
    x = rng.standard_normal((3, 6))
    x[:, 0] = -0.5   # a row may not be all NaN
    w = rng.standard_normal(np.shape(fn(np, x)))
    got = qt.grad(lambda t: qt.sum(fn(qt, t) * w))(qt.asarray(x)).numpy()
    want = jax.grad(lambda t: jnp.sum(fn(jnp, t) * w))(x)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=name)


def test_bincount_weights_gradient(rng, fusion):
    x = rng.integers(0, 5, 12)
    w = rng.standard_normal(12)
    c = rng.standard_normal(int(x.max()) + 1)
    got = qt.bincount(qt.asarray(x), weights=qt.asarray(w))
    np.testing.assert_allclose(got.numpy(), np.bincount(x, weights=w), rtol=1e-12)
    g = qt.grad(lambda v: qt.sum(qt.bincount(qt.asarray(x), weights=v) * c))(qt.asarray(w))
    np.testing.assert_allclose(g.numpy(), c[x], rtol=1e-12)


# --- NumPy dispatch ------------------------------------------------------------------
def test_numpy_dispatch(rng, fusion):
    """``np.<name>(tensor)`` runs qtrace's function (a qt.Tensor comes back)."""
    x = rng.standard_normal((3, 5))
    x[1, 2] = np.nan
    t = qt.asarray(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for fn, args, kw in [(np.ptp, (), {"axis": 1}), (np.median, (), {"axis": 0}),
                             (np.quantile, (0.3,), {"axis": 1}), (np.percentile, ([10, 90],), {}),
                             (np.nanquantile, (0.3,), {}), (np.nanpercentile, (40,), {"axis": 0}),
                             (np.nanmedian, (), {"axis": 1}), (np.nansum, (), {}), (np.nanprod, (), {}),
                             (np.nancumsum, (), {}), (np.nancumprod, (), {"axis": 1}),
                             (np.nanmean, (), {}), (np.nanvar, (), {"axis": 1}), (np.nanstd, (), {}),
                             (np.nanmax, (), {}), (np.nanmin, (), {"axis": 0}), (np.nanargmax, (), {}),
                             (np.nanargmin, (), {"axis": 1}), (np.cov, (), {}), (np.corrcoef, (), {}),
                             (np.digitize, ([0.0, 1.0],), {})]:
            got = fn(t, *args, **kw)
            assert isinstance(got, qt.Tensor), fn.__name__
            np.testing.assert_allclose(got.numpy(), fn(x, *args, **kw), rtol=1e-12, err_msg=fn.__name__)
        n, e = np.histogram(qt.asarray(x[0]), bins=3)
        np.testing.assert_array_equal(np.histogram_bin_edges(qt.asarray(x[0]), 4).numpy(),
                                      np.histogram_bin_edges(x[0], 4))
        assert isinstance(n, qt.Tensor) and isinstance(e, qt.Tensor)
        np.testing.assert_array_equal(n.numpy(), np.histogram(x[0], bins=3)[0])
        b = np.bincount(qt.asarray([1, 3, 3]))
        assert isinstance(b, qt.Tensor) and b.tolist() == [0, 1, 0, 2]


def test_all_nan_slices(fusion):
    """All-NaN slices: NaN results (NumPy warns), -1 from nanargmax/nanargmin (NumPy raises)."""
    x = np.array([[np.nan, np.nan, np.nan], [1.0, np.nan, 0.5]])
    t = qt.asarray(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for fn in (np.nanmax, np.nanmin, np.nanmean, np.nanvar, np.nanmedian):
            want = fn(x, axis=1)
            _check_forward(getattr(qt, fn.__name__)(t, axis=1), want, want, 0.0, fn.__name__)
        _check_forward(qt.nanquantile(t, 0.3, axis=1), np.nanquantile(x, 0.3, axis=1),
                       np.nanquantile(x, 0.3, axis=1), 0.0, "nanquantile")
    assert qt.nanargmax(t, axis=1).tolist() == [-1, 0]
    assert qt.nanargmin(t, axis=1).tolist() == [-1, 2]
    assert qt.nansum(t, axis=1).tolist() == [0.0, 1.5]


# --- inside qt.jit -------------------------------------------------------------------
def test_inside_jit(rng, fusion):
    @qt.jit
    def step(x, q):
        h, edges = qt.histogram(x, bins=4)
        return (qt.median(x, axis=0) + qt.quantile(x, q, axis=0, method="hazen")
                + qt.nanmean(x, axis=0) + qt.ptp(x, axis=0), h, edges,
                qt.cov(x, rowvar=False), qt.digitize(x, edges[1:-1]))

    def ref(x, q):
        h, edges = np.histogram(x, bins=4)
        return (np.median(x, axis=0) + np.quantile(x, q, axis=0, method="hazen")
                + np.nanmean(x, axis=0) + np.ptp(x, axis=0), h, edges,
                np.cov(x, rowvar=False), np.digitize(x, edges[1:-1]))

    qt.reset_stats()
    for _ in range(2):
        x = rng.standard_normal((7, 3))
        q = rng.uniform(0, 1)
        for got, want in zip(step(qt.asarray(x), qt.asarray(q)), ref(x, q)):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    assert qt.stats()["traces"] == 1


def test_jit_grad(rng, fusion):
    x = rng.standard_normal((4, 5))

    def f(xp, t):
        return xp.sum(xp.quantile(t, xp.asarray([0.2, 0.6]), axis=1) ** 2) + xp.sum(xp.cov(t) * x[:, :4])

    g = qt.jit(qt.grad(lambda t: f(qt, t)))(qt.asarray(x))
    np.testing.assert_allclose(g.numpy(), jax.grad(lambda t: f(jnp, t))(x), rtol=1e-10, atol=1e-12)


def test_bincount_inside_jit(fusion):
    x = qt.asarray([0, 2, 2, 7, -1])

    with pytest.raises(qt.TracerError, match="qt.bincount"):
        qt.jit(lambda v: qt.bincount(v))(x)
    got = qt.jit(lambda v: qt.bincount(v, minlength=4))(x)
    assert got.tolist() == [1, 0, 2, 0]   # values outside [0, minlength) are not counted


# --- errors --------------------------------------------------------------------------
ERRORS = [
    (lambda: qt.ptp(qt.ones(3, dtype=bool)), TypeError, "qt.ptp: .*bool"),
    (lambda: qt.ptp(qt.ones((0, 2)), axis=0), ValueError, "qt.ptp: zero-size"),
    (lambda: qt.ptp(qt.ones(3), out=np.zeros(())), TypeError, "qt.ptp: out="),
    (lambda: qt.median(qt.ones((2, 3)), axis=2), np.exceptions.AxisError, "qt.median: axis 2"),
    (lambda: qt.quantile(qt.ones(3), 1.5), ValueError, r"qt.quantile: Quantiles .*\[0, 1\]"),
    (lambda: qt.quantile(qt.ones(3), [0.5, float("nan")]), ValueError, "qt.quantile: Quantiles"),
    (lambda: qt.percentile(qt.ones(3), -1), ValueError, r"qt.percentile: Percentiles .*\[0, 100\]"),
    (lambda: qt.quantile(qt.ones(3), 0.5, method="fastest"), ValueError, "qt.quantile: 'fastest'"),
    (lambda: qt.quantile(qt.ones(3), 0.5, weights=qt.ones(3)), ValueError,
     "qt.quantile: only method 'inverted_cdf' supports weights"),
    (lambda: qt.nanquantile(qt.ones(3), 0.5, weights=[1, -1, 1], method="inverted_cdf"), ValueError,
     "qt.nanquantile: Weights must be non-negative"),
    (lambda: qt.quantile(qt.ones((2, 3)), 0.5, weights=qt.ones(3), method="inverted_cdf"), TypeError,
     "qt.quantile: axis must be specified"),
    (lambda: qt.quantile(qt.ones((2, 3)), 0.5, axis=0, weights=qt.ones(3), method="inverted_cdf"),
     ValueError, r"qt.quantile: shape of weights \(3,\)"),
    (lambda: qt.quantile(qt.ones(3, dtype=bool), 0.5), TypeError, "qt.quantile: boolean subtract"),
    (lambda: qt.quantile(qt.ones((0,)), 0.5), IndexError, "qt.quantile: .*empty"),
    (lambda: qt.quantile(qt.ones(3) * 1j, 0.5), TypeError, "qt.quantile: a must be an array of real"),
    (lambda: qt.median(qt.ones(3), out=np.zeros(())), TypeError, "qt.median: out="),
    (lambda: qt.nansum(qt.ones(3), where=np.ones(3, bool)), TypeError, "qt.nansum: where="),
    (lambda: qt.nanmean(qt.ones(3), dtype=np.int32), TypeError, "qt.nanmean: .*inexact"),
    (lambda: qt.nanvar(qt.ones(3), ddof=1, correction=1), ValueError, "qt.nanvar: ddof and correction"),
    (lambda: qt.nanmax(qt.ones((0, 2)), axis=0), ValueError, "qt.nanmax: zero-size"),
    (lambda: qt.nanargmin(qt.ones((0, 2)), axis=0), ValueError, "qt.nanargmin: attempt to get"),
    (lambda: qt.cov(qt.ones((2, 2, 2))), ValueError, r"qt.cov: m has more than 2 dimensions \(shape"),
    (lambda: qt.cov(qt.ones((2, 3)), ddof=1.5), ValueError, "qt.cov: ddof must be integer"),
    (lambda: qt.cov(qt.ones((2, 3)), fweights=[1, 2.5, 1]), TypeError, "qt.cov: fweights must be integer"),
    (lambda: qt.cov(qt.ones((2, 3)), aweights=[1, -2, 1]), ValueError, "qt.cov: aweights cannot be negative"),
    (lambda: qt.cov(qt.ones((2, 3)), aweights=[1, 2]), RuntimeError, r"qt.cov: incompatible numbers"),
    (lambda: qt.cov(qt.ones((2, 3)), qt.ones((2, 4))), ValueError, "qt.cov: m and y"),
    (lambda: qt.histogram(qt.ones(3), bins="auto"), ValueError, "qt.histogram: string bin estimators"),
    (lambda: qt.histogramdd(qt.ones((4, 2)), bins=[2, 3, 4]), ValueError,
     r"qt.histogramdd: the dimension of bins must be equal to the dimension of the sample x \(2\), got 3"),
    (lambda: qt.histogramdd(qt.ones((4, 2, 1))), ValueError, r"qt.histogramdd: sample must be an \(N, D\)"),
    (lambda: qt.histogramdd([qt.ones(3), qt.ones(4)]), ValueError, "coordinate arrays differ in length"),
    (lambda: qt.histogramdd(qt.ones((4, 2)), weights=qt.ones(3)), ValueError, "one entry per point"),
    (lambda: qt.histogramdd(qt.ones((4, 2)), range=[(0, 1)]), ValueError, "range must have one entry"),
    (lambda: qt.histogram(qt.ones(3), bins=0), ValueError, "qt.histogram: bins must be positive"),
    (lambda: qt.histogram(qt.ones(3), bins=2.5), TypeError, "qt.histogram: bins"),
    (lambda: qt.histogram(qt.ones(3), bins=qt.asarray(3)), TypeError, "qt.histogram: bins must be a Python"),
    (lambda: qt.histogram(qt.ones(3), bins=[1.0, 0.0]), ValueError, "qt.histogram: bins must increase"),
    (lambda: qt.histogram(qt.ones(3), bins=[[1.0, 2.0]]), ValueError, "qt.histogram: bins must be 1d"),
    (lambda: qt.histogram(qt.ones(3), range=(2, 1)), ValueError, "qt.histogram: max must be larger"),
    (lambda: qt.histogram(qt.ones(3), range=(0, np.inf)), ValueError, "qt.histogram: supplied range"),
    (lambda: qt.histogram(qt.ones(3), weights=qt.ones(2)), ValueError, "qt.histogram: weights should"),
    (lambda: qt.histogram_bin_edges(qt.ones(3), bins="fd"), ValueError, "qt.histogram_bin_edges: string"),
    (lambda: qt.bincount(qt.ones(3)), TypeError, "qt.bincount: cannot cast"),
    (lambda: qt.bincount(qt.ones((2, 2), dtype=int)), ValueError, r"qt.bincount: x must be 1-D"),
    (lambda: qt.bincount(qt.asarray([1, -1])), ValueError, "qt.bincount: x must have no negative"),
    (lambda: qt.bincount(qt.asarray([1]), minlength=-1), ValueError, "qt.bincount: minlength"),
    (lambda: qt.bincount(qt.asarray([1]), minlength=qt.asarray(2)), TypeError, "qt.bincount: minlength"),
    (lambda: qt.bincount(qt.asarray([1, 2]), weights=qt.ones(3)), ValueError, "qt.bincount: the weights"),
    (lambda: qt.digitize(qt.ones(3), [1.0, 3.0, 2.0]), ValueError, "qt.digitize: bins must be monotonically"),
    (lambda: qt.digitize(qt.ones(3), [[1.0, 3.0]]), ValueError, "qt.digitize: bins must be 1-D"),
    (lambda: qt.digitize(qt.ones(3) * 1j, [1.0]), TypeError, "qt.digitize: x may not be complex"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()
