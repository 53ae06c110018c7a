"""Order statistics, NaN-aware reductions, histograms and correlation, as NumPy computes them.

Every function is built from recorded qtrace operations (nothing is evaluated behind the
caller's back), so it works inside ``qt.jit`` and is differentiated by ``qt.grad``.
``NUMPY_FUNCTIONS`` maps NumPy's functions to these (``__array_function__``),
``NUMPY_UFUNCS`` the NumPy ufuncs among them (``__array_ufunc__``).

Order statistics (``median``, ``quantile``, ...) sort the reduced axes once (``qt.sort``)
and gather the order statistics NumPy's method picks; their gradient flows to the picked
elements. Checks NumPy makes on values (quantiles in ``[0, 1]``, non-negative weights,
monotonic bins) are made where those values are concrete (Python numbers, NumPy arrays);
given as tensors they are taken as valid. Warnings NumPy gives on values (all-NaN slices,
degrees of freedom <= 0) are not given for lazy results. ``bincount`` alone evaluates its
input (the length of its result depends on the data; see its docstring).

Example:
    >>> import qtrace as qt
    >>> x = qt.asarray([[1.0, 5.0, 2.0], [4.0, float("nan"), 3.0]])
    >>> qt.median(x, axis=1).tolist(), qt.nanmedian(x, axis=1).tolist()
    ([2.0, nan], [2.0, 3.5])
"""

from __future__ import annotations

import builtins
import math
import warnings

import numpy as np

from ..errors import TracerError
from . import dtypes
from . import elementwise as _ew
from . import reductions as _red
from .array_api import abs_squared, complex_from_parts
from .array_api import imag as _imag
from .array_api import real as _real_part
from .composites import _NOVALUE, _given, _int, _no_out, _tensor, average, cumprod, var
from .context import tracing
from .convert import astype, input_node, wrap
from .creation import arange, full, zeros
from .indexing import scatter_at
from .linalg import matmul
from .shape_ops import (
    broadcast_to,
    concatenate,
    normalize_axes,
    normalize_axis,
    reshape,
    squeeze,
    transpose,
)
from .sorting import argsort, searchsorted, sort, take_along_axis
from .tensor import Tensor

_ap = _ew.apply


# --- helpers ---------------------------------------------------------------------------
def _keep(keepdims) -> bool:
    return False if keepdims is np._NoValue or keepdims is _NOVALUE else bool(keepdims)


def _no_where(where, op: str) -> None:
    if _given(where) and where is not True:
        raise TypeError(f"qt.{op}: where= is not supported")


def _const(value, dtype, like: Tensor) -> Tensor:
    """A 0-d constant on ``like``'s device."""
    return full((), value, dtype, device=like.device)


def _concrete(x, like: Tensor, op: str) -> Tensor:
    """A NumPy value (already checked) as a tensor on ``like``'s device."""
    return wrap(input_node(np.asarray(x), op, device=like.device, owned=True))


def _rows(t: Tensor, axis, op: str):
    """``t`` with the reduced axes flattened into one last axis: ``(rows, kept, keep_shape)``,
    ``kept`` the shape of the other axes (in order), ``keep_shape`` the ``keepdims`` shape."""
    if axis is None:
        return reshape(t, (t.size,)), (), (1,) * t.ndim
    axes = normalize_axes(axis, t.ndim, op)
    others = [a for a in range(t.ndim) if a not in axes]
    kept = tuple(t.shape[a] for a in others)
    n = math.prod(t.shape[a] for a in axes)
    x = reshape(transpose(t, others + list(axes)), kept + (n,))
    return x, kept, tuple(1 if a in axes else d for a, d in enumerate(t.shape))


def _pick(s: Tensor, idx: Tensor, qshape: tuple) -> Tensor:
    """``s`` (``K + (n,)``) read along its last axis at ``idx`` (broadcast to ``Q + K``)."""
    kept = s.shape[:-1]
    nq, nk = len(qshape), len(kept)
    idx = broadcast_to(idx, qshape + kept)
    idx = transpose(idx, list(range(nq, nq + nk)) + list(range(nq)))
    out = take_along_axis(s, reshape(idx, kept + (math.prod(qshape),)), axis=-1)
    out = reshape(out, kept + qshape)
    return transpose(out, list(range(nk, nk + nq)) + list(range(nk)))


def _nan_rows(s: Tensor) -> Tensor:
    """Whether each row of the sorted ``s`` holds a NaN (they sort last)."""
    return _ap("isnan", s[..., s.shape[-1] - 1])


def _real(t: Tensor, op: str) -> None:
    if t.dtype.kind == "c":
        raise TypeError(f"qt.{op}: a must be an array of real numbers, got dtype {t.dtype}")


# --- ptp -------------------------------------------------------------------------------
def ptp(a, axis=None, out=None, keepdims=np._NoValue) -> Tensor:
    """``numpy.ptp``: the range (maximum - minimum) of the values along ``axis``.

    Integers wrap around as in NumPy; booleans are refused (NumPy cannot subtract them).

    Example:
        >>> import qtrace as qt
        >>> qt.ptp(qt.asarray([[4.0, 9.0, 2.0], [1.0, 1.5, 3.0]]), axis=1).tolist()
        [7.0, 2.0]
    """
    _no_out(out, "ptp")
    t = _tensor(a, "ptp")
    if t.dtype == dtypes.bool_:
        raise TypeError("qt.ptp: boolean subtract is not supported (NumPy's rule), got dtype bool")
    keep = _keep(keepdims)
    hi = _red.reduce_as("reduce_max", "ptp", t, axis, keepdims=keep)
    lo = _red.reduce_as("reduce_min", "ptp", t, axis, keepdims=keep)
    return _ap("subtract", hi, lo)


# --- order statistics ------------------------------------------------------------------
_METHODS = ("inverted_cdf", "averaged_inverted_cdf", "closest_observation",
            "interpolated_inverted_cdf", "hazen", "weibull", "linear", "median_unbiased",
            "normal_unbiased", "lower", "higher", "midpoint", "nearest")
_ALPHA_BETA = {"interpolated_inverted_cdf": (0.0, 1.0), "hazen": (0.5, 0.5), "weibull": (0.0, 0.0),
               "median_unbiased": (1 / 3.0, 1 / 3.0), "normal_unbiased": (3 / 8.0, 3 / 8.0)}
_PICKING = ("inverted_cdf", "closest_observation", "lower", "higher", "nearest")


def _quantiles(q, t: Tensor, op: str, percent: bool):
    """``q`` as a tensor with NumPy's dtype (a concrete ``q`` is checked to lie in range), and
    whether it was a Python number (NumPy then interpolates with a weak Python float)."""
    if isinstance(q, Tensor) or (isinstance(q, (list, tuple)) and any(isinstance(v, Tensor) for v in q)):
        qt_ = _tensor(q, op)
        if qt_.dtype.kind not in "iufb":
            raise TypeError(f"qt.{op}: q must be real numbers, got dtype {qt_.dtype}")
        return (_ap("divide", qt_, 100) if percent else qt_), False
    qa = np.asanyarray(np.true_divide(q, 100) if percent else q)
    if qa.dtype.kind not in "iufb":
        raise TypeError(f"qt.{op}: q must be real numbers, got {q!r}")
    with np.errstate(invalid="ignore"):
        if not (np.all(qa >= 0) and np.all(qa <= 1)):
            what = "Percentiles must be in the range [0, 100]" if percent else \
                "Quantiles must be in the range [0, 1]"
            raise ValueError(f"qt.{op}: {what}, got q={q!r}")
    return _concrete(qa, t, op), type(q) in (int, float)


def _virtual_index(method: str, n, q: Tensor) -> Tensor:
    """NumPy's (0-based, fractional) index of quantile ``q`` among ``n`` sorted values
    (``n`` a Python int or a tensor in ``q``'s dtype)."""
    if method in ("linear", "lower", "higher", "nearest", "midpoint"):
        v = _ap("multiply", n - 1 if isinstance(n, int) else _ap("subtract", n, 1), q)
        if method == "midpoint":
            v = _ap("multiply", 0.5, _ap("add", _ap("floor", v), _ap("ceil", v)))
        return v
    nq = _ap("multiply", n, q)
    if method in ("inverted_cdf", "averaged_inverted_cdf"):
        return _ap("subtract", nq, 1)
    if method == "closest_observation":
        return _ap("subtract", _ap("subtract", nq, 1), 0.5)
    alpha, beta = _ALPHA_BETA[method]
    return _ap("subtract", _ap("add", nq, _ap("add", alpha, _ap("multiply", q, 1 - alpha - beta))), 1)


def _clamped(idx: Tensor, last) -> Tensor:
    """Integer indices limited to ``[0, last]``."""
    return _ap("maximum", _ap("minimum", astype(idx, dtypes.int64), last), 0)


def _order_statistic(s: Tensor, q: Tensor, method: str, count, weak: bool) -> Tensor:
    """Quantiles ``q`` of the sorted rows ``s`` (``K + (n,)``), by NumPy's ``method``; the
    rows hold ``count`` valid values (a Python int, or a ``K``-shaped integer tensor);
    ``weak``: interpolate in ``s``'s dtype (a Python number ``q``). Returns ``Q + K``."""
    qshape = q.shape
    q = reshape(q, qshape + (1,) * (s.ndim - 1))
    if isinstance(count, int):
        n, last = count, count - 1
    else:
        n = astype(count, q.dtype) if q.dtype.kind == "f" else count
        last = _ap("subtract", count, 1)
    if method == "linear" and q.dtype.kind in "iub":     # whole indices: no interpolation
        return _pick(s, _clamped(_virtual_index(method, n, q), last), qshape)
    v = _virtual_index(method, n, q)
    if method in _PICKING:
        if method == "lower":
            idx = _ap("floor", v)
        elif method == "higher":
            idx = _ap("ceil", v)
        elif method == "nearest":
            idx = _ap("rint", v)
        else:
            before = _ap("floor", v)
            take_before = _ap("equal", _ap("subtract", v, before), 0)
            if method == "closest_observation":
                take_before = _ap("logical_and", take_before, _ap("equal", _ap("remainder", before, 2), 1))
            idx = _ew.where(take_before, before, _ap("add", before, 1))
        return _pick(s, _clamped(idx, last), qshape)
    before = _ap("floor", v)
    above = _ap("greater_equal", v, last if isinstance(last, int) else astype(last, v.dtype))
    below = _ap("less", v, 0)
    bad = _ap("isnan", v)
    minus1 = _const(-1, v.dtype, v)
    prev = _ew.where(bad, minus1, _ew.where(below, _const(0, v.dtype, v), _ew.where(above, minus1, before)))
    nxt = _ew.where(bad, minus1, _ew.where(below, _const(0, v.dtype, v),
                                           _ew.where(above, minus1, _ap("add", before, 1))))
    gamma = _ap("subtract", v, prev)
    if method == "averaged_inverted_cdf":
        gamma = _ew.where(_ap("equal", gamma, 0), _const(0.5, v.dtype, v), _const(1.0, v.dtype, v))
    elif method == "midpoint":
        gamma = _ew.where(_ap("equal", _ap("remainder", v, 1), 0), _const(0.0, v.dtype, v),
                          _const(0.5, v.dtype, v))

    def index(i):
        return _clamped(_ew.where(_ap("equal", i, -1), last, i), last)
    a, b = _pick(s, index(prev), qshape), _pick(s, index(nxt), qshape)
    # NumPy's lerp: a + (b - a) * t, or b - (b - a) * (1 - t) from t = 0.5 on
    diff = _ap("subtract", b, a)
    t, rest = gamma, _ap("subtract", 1, gamma)
    if weak:   # NumPy's gamma is then a Python float
        rdt = s.dtype if s.dtype.kind == "f" else dtypes.float64
        t, rest = astype(t, rdt), astype(rest, rdt)
    low = _ap("add", a, _ap("multiply", diff, t))
    high = _ap("subtract", b, _ap("multiply", diff, rest))
    return _ew.where(_ap("greater_equal", gamma, 0.5), high, low)


def _weighted(x: Tensor, w: Tensor, q: Tensor, valid) -> Tensor:
    """The weighted ``inverted_cdf`` quantiles of rows ``x`` (``K + (n,)``, weights ``w``):
    the first sorted value whose cumulative weight reaches ``q`` of the total."""
    order = argsort(x, axis=-1)
    s, ws = take_along_axis(x, order, axis=-1), take_along_axis(w, order, axis=-1)
    cdf = _red.cumsum(ws, axis=-1, dtype=dtypes.float64)
    cdf = _ap("divide", cdf, cdf[..., cdf.shape[-1] - 1:])
    bad = _ap("isnan", cdf[..., cdf.shape[-1] - 1])   # weights summing to 0 or inf (NumPy raises)
    if q.dtype.kind == "f":
        cdf = astype(cdf, q.dtype)
    cdf = _ew.where(_ap("equal", cdf, 0), _const(-1, cdf.dtype, cdf), cdf)  # leading zero weights
    qshape, nk = q.shape, x.ndim - 1
    below = _ap("less", reshape(cdf, (1,) * len(qshape) + cdf.shape), reshape(q, qshape + (1,) * (nk + 1)))
    idx = _red.sum(below, axis=-1, dtype=dtypes.int64)
    r = _pick(s, _clamped(idx, x.shape[-1] - 1 if valid is None else _ap("subtract", valid, 1)), qshape)
    if r.dtype.kind != "f":
        return r
    return _ew.where(bad, _const(math.nan, r.dtype, r), r)


def _weights_for(t: Tensor, weights, axis, op: str) -> Tensor:
    """``weights`` broadcast against ``t`` (NumPy's rules for ``quantile``'s weights)."""
    w = _tensor(weights, op)
    if not isinstance(weights, Tensor):
        values = np.asarray(weights)
        if values.dtype.kind in "iuf" and np.any(values < 0):
            raise ValueError(f"qt.{op}: Weights must be non-negative")
        if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
            raise ValueError(f"qt.{op}: Weights included NaN or inf")
    if w.shape == t.shape:
        return w
    if axis is None:
        raise TypeError(f"qt.{op}: axis must be specified when shapes of a {t.shape} and weights "
                        f"{w.shape} differ")
    given = tuple(normalize_axis(ax, t.ndim, op)
                  for ax in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if w.shape != tuple(t.shape[ax] for ax in given):
        raise ValueError(f"qt.{op}: shape of weights {w.shape} must be consistent with shape of a "
                         f"{t.shape} along axis {axis}")
    w = transpose(w, [int(i) for i in np.argsort(given)])
    w = reshape(w, tuple(s if ax in given else 1 for ax, s in enumerate(t.shape)))
    return broadcast_to(w, t.shape)


def _quantile(op: str, a, q, axis, out, method, keepdims, weights, percent: bool, nan: bool) -> Tensor:
    _no_out(out, op)
    t = _tensor(a, op)
    _real(t, op)
    if method not in _METHODS:
        raise ValueError(f"qt.{op}: {method!r} is not a valid method; use one of {', '.join(_METHODS)}")
    if weights is not None and method != "inverted_cdf":
        raise ValueError(f"qt.{op}: only method 'inverted_cdf' supports weights, got method {method!r}")
    if t.dtype == dtypes.bool_ and method not in _PICKING and not (method == "linear" and weights is None
                                                                   and _int_q(q)):
        raise TypeError(f"qt.{op}: boolean subtract is not supported (NumPy's rule): method {method!r} "
                        "interpolates; use method='lower', 'higher' or 'nearest' for bools")
    qq, weak = _quantiles(q, t, op, percent)
    w = None if weights is None else _weights_for(t, weights, axis, op)
    if nan and t.size == 0:   # NumPy's answer: nanmean's (NaN per slice, no q axes)
        return nanmean(t, axis=axis, keepdims=keepdims)
    x, kept, keep_shape = _rows(t, axis, op)
    nan = nan and t.dtype.kind == "f"
    if x.shape[-1] == 0:
        raise IndexError(f"qt.{op}: cannot take quantiles of an empty slice (shape {t.shape}, axis {axis})")
    valid = _red.sum(_ap("logical_not", _ap("isnan", x)), axis=-1, dtype=dtypes.int64) if nan else None
    if w is not None:
        w = _rows(w, axis, op)[0]
        if nan:
            w = _ew.where(_ap("isnan", x), _const(0, w.dtype, w), w)
        r = _weighted(x, w, qq, valid)
        missing = _red.any(_ap("isnan", x), axis=-1)
    else:
        s = sort(x, axis=-1)
        r = _order_statistic(s, qq, method, x.shape[-1] if valid is None else valid, weak)
        missing = _nan_rows(s)
    if t.dtype.kind == "f":
        if nan:
            missing = _ap("equal", valid, 0)
        r = _ew.where(missing, _const(math.nan, r.dtype, r), r)
    return reshape(r, qq.shape + keep_shape) if _keep(keepdims) else r


def _int_q(q) -> bool:
    if isinstance(q, Tensor):
        return q.dtype.kind in "iub"
    return np.asarray(q).dtype.kind in "iub" and not isinstance(q, float)


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
             weights=None) -> Tensor:
    """``numpy.quantile``: the ``q``-th quantiles along ``axis`` (an int, a tuple or None),
    by any of NumPy's 13 ``method``s.

    ``q`` is a number, a sequence or a tensor; the result's shape is ``q``'s shape followed
    by the reduced shape. A NaN in a slice makes its quantiles NaN. ``weights`` (the
    shape of ``a``, or of the reduced axes) are accepted with ``method='inverted_cdf'``
    only, as in NumPy; a slice whose weights sum to zero gives NaN (NumPy raises, which
    would need the values). A ``q`` (or weights) given as a tensor is not checked to lie
    in ``[0, 1]`` (be non-negative); ``out=`` is not supported, ``overwrite_input`` is
    ignored.

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([[3.0, 1.0, 4.0, 1.5], [5.0, 9.0, 2.0, 6.0]])
        >>> qt.quantile(x, 0.5, axis=1).tolist()
        [2.25, 5.5]
        >>> qt.quantile(x, [0.0, 1.0], axis=1, method="lower").tolist()
        [[1.0, 2.0], [4.0, 9.0]]
    """
    return _quantile("quantile", a, q, axis, out, method, keepdims, weights, False, False)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
               weights=None) -> Tensor:
    """``numpy.percentile``: ``quantile`` with ``q`` in percent (``[0, 100]``).

    Same arguments, methods and restrictions as ``quantile``.

    Example:
        >>> import qtrace as qt
        >>> qt.percentile(qt.arange(11.0), [10, 95]).tolist()
        [1.0, 9.5]
    """
    return _quantile("percentile", a, q, axis, out, method, keepdims, weights, True, False)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=np._NoValue, *, weights=None) -> Tensor:
    """``numpy.nanquantile``: ``quantile`` ignoring NaNs (the quantiles of each slice's
    non-NaN values; an all-NaN slice gives NaN, without NumPy's RuntimeWarning).

    Same arguments, methods and restrictions as ``quantile``.

    Example:
        >>> import qtrace as qt
        >>> qt.nanquantile(qt.asarray([1.0, float("nan"), 3.0, 2.0]), 0.25).item()
        1.5
    """
    return _quantile("nanquantile", a, q, axis, out, method, keepdims, weights, False, True)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=np._NoValue, *, weights=None) -> Tensor:
    """``numpy.nanpercentile``: ``percentile`` ignoring NaNs (all-NaN slices give NaN).

    Same arguments, methods and restrictions as ``quantile``.

    Example:
        >>> import qtrace as qt
        >>> qt.nanpercentile(qt.asarray([1.0, float("nan"), 3.0]), 50).item()
        2.0
    """
    return _quantile("nanpercentile", a, q, axis, out, method, keepdims, weights, True, True)


def _mean_dtype(t: Tensor) -> np.dtype:
    return t.dtype if t.dtype.kind == "f" else dtypes.float64


def _middle(lo: Tensor, hi: Tensor, dt, same) -> Tensor:
    """The mean of the two middle values as NumPy's median computes it."""
    lo, hi = astype(lo, dt), astype(hi, dt)
    mid = _ap("divide", _ap("add", lo, hi), 2.0)
    if same is True:
        return lo
    if same is False:
        return mid
    return _ew.where(same, lo, mid)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False) -> Tensor:
    """``numpy.median``: the middle value along ``axis`` (an int, a tuple or None); the
    mean of the two middle values for an even count (float64 for integer inputs).

    A NaN in a slice makes its median NaN; an empty slice gives NaN (without NumPy's
    RuntimeWarning). ``out=`` is not supported, ``overwrite_input`` is ignored.

    Example:
        >>> import qtrace as qt
        >>> qt.median(qt.asarray([[1, 7, 3, 4], [2, 2, 9, 0]]), axis=1).tolist()
        [3.5, 2.0]
    """
    _no_out(out, "median")
    t = _tensor(a, "median")
    _real(t, "median")
    x, kept, keep_shape = _rows(t, axis, "median")
    dt = _mean_dtype(t)
    n = x.shape[-1]
    if n == 0:
        r = full(kept, math.nan, dt, device=t.device)
    else:
        s = sort(x, axis=-1)
        lo, hi = (n - 1) // 2, n // 2
        r = _middle(s[..., lo], s[..., hi], dt, lo == hi)
        if t.dtype.kind == "f":
            r = _ew.where(_nan_rows(s), _const(math.nan, dt, r), r)
    return reshape(r, keep_shape) if _keep(keepdims) else r


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=np._NoValue) -> Tensor:
    """``numpy.nanmedian``: ``median`` of each slice's non-NaN values (all-NaN and empty
    slices give NaN, without NumPy's RuntimeWarning).

    ``out=`` is not supported, ``overwrite_input`` is ignored.

    Example:
        >>> import qtrace as qt
        >>> qt.nanmedian(qt.asarray([[1.0, float("nan"), 4.0], [float("nan")] * 3]), axis=1).tolist()
        [2.5, nan]
    """
    _no_out(out, "nanmedian")
    t = _tensor(a, "nanmedian")
    if t.dtype.kind != "f":
        return median(t, axis=axis, keepdims=_keep(keepdims))
    x, kept, keep_shape = _rows(t, axis, "nanmedian")
    if x.shape[-1] == 0:
        r = full(kept, math.nan, t.dtype, device=t.device)
    else:
        s = sort(x, axis=-1)
        k = _red.sum(_ap("logical_not", _ap("isnan", s)), axis=-1, dtype=dtypes.int64)
        lo = _ap("floor_divide", _ap("subtract", k, 1), 2)
        hi = _ap("floor_divide", k, 2)
        last = s.shape[-1] - 1
        pick_lo = _pick(s, _clamped(lo, last), ())
        pick_hi = _pick(s, _clamped(hi, last), ())
        r = _middle(pick_lo, pick_hi, t.dtype, _ap("equal", lo, hi))
        r = _ew.where(_ap("equal", k, 0), _const(math.nan, t.dtype, r), r)
    return reshape(r, keep_shape) if _keep(keepdims) else r


# --- NaN-aware reductions ----------------------------------------------------------------
def _nan_filled(t: Tensor, value) -> Tensor:
    """``t`` with NaNs replaced by ``value`` (non-float tensors as they are)."""
    if t.dtype.kind not in "fc":
        return t
    return _ew.where(_ap("isnan", t), _const(value, t.dtype, t), t)


def _with_initial(r: Tensor, initial, prim: str) -> Tensor:
    if not _given(initial):
        return r
    if isinstance(initial, Tensor):
        raise TypeError(f"qt.{prim}: initial must be a Python or NumPy number, not a qt.Tensor")
    return _ap(prim, r, _const(initial, r.dtype, r))


def _nan_reduce(op: str, prim: str, fill, combine: str, a, axis, dtype, out, keepdims, initial,
                where) -> Tensor:
    """``op`` (``nansum``/``nanprod``): reduction ``prim`` of ``a`` with NaNs replaced by
    ``fill``, then NumPy's ``initial`` combined by ``combine``."""
    _no_out(out, op)
    _no_where(where, op)
    t = _nan_filled(_tensor(a, op), fill)
    r = _red.reduce_as(prim, op, t, axis, dtype, _keep(keepdims))
    return _with_initial(r, initial, combine)


def nansum(a, axis=None, dtype=None, out=None, keepdims=np._NoValue, initial=np._NoValue,
           where=np._NoValue) -> Tensor:
    """``numpy.nansum``: ``sum`` treating NaNs as zero (``where=`` and ``out=`` are not supported).

    Example:
        >>> import qtrace as qt
        >>> qt.nansum(qt.asarray([1.0, float("nan"), 2.5])).item()
        3.5
    """
    return _nan_reduce("nansum", "reduce_sum", 0, "add", a, axis, dtype, out, keepdims, initial, where)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=np._NoValue, initial=np._NoValue,
            where=np._NoValue) -> Tensor:
    """``numpy.nanprod``: ``prod`` treating NaNs as one (``where=`` and ``out=`` are not supported).

    Example:
        >>> import qtrace as qt
        >>> qt.nanprod(qt.asarray([2.0, float("nan"), 3.0])).item()
        6.0
    """
    return _nan_reduce("nanprod", "reduce_prod", 1, "multiply", a, axis, dtype, out, keepdims, initial,
                       where)


def nancumsum(a, axis=None, dtype=None, out=None) -> Tensor:
    """``numpy.nancumsum``: ``cumsum`` treating NaNs as zero (``out=`` is not supported).

    Example:
        >>> import qtrace as qt
        >>> qt.nancumsum(qt.asarray([1.0, float("nan"), 2.0])).tolist()
        [1.0, 1.0, 3.0]
    """
    _no_out(out, "nancumsum")
    return _red.cumsum(_nan_filled(_tensor(a, "nancumsum"), 0), axis=axis, dtype=dtype)


def nancumprod(a, axis=None, dtype=None, out=None) -> Tensor:
    """``numpy.nancumprod``: ``cumprod`` treating NaNs as one (``out=`` is not supported).

    Example:
        >>> import qtrace as qt
        >>> qt.nancumprod(qt.asarray([2.0, float("nan"), 3.0])).tolist()
        [2.0, 2.0, 6.0]
    """
    _no_out(out, "nancumprod")
    return cumprod(_nan_filled(_tensor(a, "nancumprod"), 1), axis=axis, dtype=dtype)


def _count(t: Tensor, axis, keepdims: bool) -> Tensor:
    """How many non-NaN values each slice holds (int64)."""
    return _red.sum(_ap("logical_not", _ap("isnan", t)), axis=axis, dtype=dtypes.int64, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=np._NoValue, *, where=np._NoValue) -> Tensor:
    """``numpy.nanmean``: the mean of the non-NaN values (all-NaN slices give NaN, without
    NumPy's RuntimeWarning; ``where=`` and ``out=`` are not supported).

    Example:
        >>> import qtrace as qt
        >>> qt.nanmean(qt.asarray([[1.0, float("nan")], [2.0, 4.0]]), axis=1).tolist()
        [1.0, 3.0]
    """
    _no_out(out, "nanmean")
    _no_where(where, "nanmean")
    t = _tensor(a, "nanmean")
    keep = _keep(keepdims)
    if t.dtype.kind not in "fc":
        return _red.mean(t, axis=axis, dtype=dtype, keepdims=keep)
    _nan_dtype(dtype, "nanmean")
    total = _red.reduce_as("reduce_sum", "nanmean", _nan_filled(t, 0), axis, dtype, keep)
    return _ap("divide", total, astype(_count(t, axis, keep), total.dtype))


def _nan_dtype(dtype, op: str) -> None:
    if dtype is not None and dtypes.canonical(dtype, f"qt.{op}").kind not in "fc":
        raise TypeError(f"qt.{op}: if a is inexact, then dtype must be inexact, got {np.dtype(dtype)}")


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=np._NoValue, *, where=np._NoValue,
           mean=np._NoValue, correction=np._NoValue) -> Tensor:
    """``numpy.nanvar``: the variance of the non-NaN values, divided by ``count - ddof``
    (NaN where that is not positive, without NumPy's RuntimeWarning; ``where=`` and
    ``out=`` are not supported).

    Example:
        >>> import qtrace as qt
        >>> qt.nanvar(qt.asarray([1.0, float("nan"), 3.0])).item()
        1.0
    """
    return _nanvar("nanvar", a, axis, dtype, out, ddof, keepdims, where, mean, correction)


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=np._NoValue, *, where=np._NoValue,
           mean=np._NoValue, correction=np._NoValue) -> Tensor:
    """``numpy.nanstd``: the square root of ``nanvar``.

    Example:
        >>> import qtrace as qt
        >>> qt.nanstd(qt.asarray([1.0, float("nan"), 3.0])).item()
        1.0
    """
    return _ap("sqrt", _nanvar("nanstd", a, axis, dtype, out, ddof, keepdims, where, mean, correction))


def _nanvar(op, a, axis, dtype, out, ddof, keepdims, where, mean, correction) -> Tensor:
    _no_out(out, op)
    _no_where(where, op)
    t = _tensor(a, op)
    keep = _keep(keepdims)
    given_mean = mean if _given(mean) else None
    if t.dtype.kind not in "fc":
        return var(t, axis=axis, dtype=dtype, ddof=ddof, keepdims=keep, mean=given_mean,
                   correction=correction if _given(correction) else None)
    _nan_dtype(dtype, op)
    if _given(correction):
        if ddof != 0:
            raise ValueError(f"qt.{op}: ddof and correction can't be provided simultaneously")
        ddof = correction
    if isinstance(ddof, Tensor):
        raise TypeError(f"qt.{op}: ddof must be a Python number, not a qt.Tensor")
    filled = _nan_filled(t, 0)
    cnt = _count(t, axis, True)
    if given_mean is not None:
        avg = _tensor(given_mean, op)
    else:
        avg = _red.reduce_as("reduce_sum", op, filled, axis, dtype, True)
        avg = _ap("divide", avg, astype(cnt, avg.dtype))
    d = _ap("subtract", filled, avg)
    if d.dtype != t.dtype:   # (NumPy subtracts in place)
        d = astype(d, t.dtype)
    d = _ew.where(_ap("isnan", t), _const(0, d.dtype, d), d)
    total = _red.reduce_as("reduce_sum", op, abs_squared(d), axis, dtype, keep)
    dof = _ap("subtract", cnt if keep else reshape(cnt, total.shape), ddof)
    r = _ap("divide", total, astype(dof, total.dtype))
    return _ew.where(_ap("less_equal", dof, 0), _const(math.nan, r.dtype, r), r)


def _nan_extreme(op: str, prim: str, fill: float, a, axis, out, keepdims, initial, where) -> Tensor:
    _no_out(out, op)
    _no_where(where, op)
    t = _tensor(a, op)
    keep = _keep(keepdims)
    pair = "maximum" if prim == "reduce_max" else "minimum"
    axes = normalize_axes(axis, t.ndim, op)
    if _given(initial) and any(t.shape[ax] == 0 for ax in axes):
        shape = tuple(1 if ax in axes else d for ax, d in enumerate(t.shape)) if keep else \
            tuple(d for ax, d in enumerate(t.shape) if ax not in axes)
        return full(shape, initial, t.dtype, device=t.device)
    if t.dtype.kind != "f":
        return _with_initial(_red.reduce_as(prim, op, t, axis, keepdims=keep), initial, pair)
    isnan = _ap("isnan", t)
    r = _red.reduce_as(prim, op, _ew.where(isnan, _const(fill, t.dtype, t), t), axis, keepdims=keep)
    r = _ew.where(_red.all(isnan, axis=axis, keepdims=keep), _const(math.nan, t.dtype, r), r)
    if _given(initial):  # fmax/fmin with the initial value: NaN gives way
        init = _const(initial, t.dtype, r)
        r = _ew.where(_ap("isnan", r), init, _ap(pair, r, init))
    return r


def nanmax(a, axis=None, out=None, keepdims=np._NoValue, initial=np._NoValue, where=np._NoValue) -> Tensor:
    """``numpy.nanmax``: the maximum ignoring NaNs (all-NaN slices give NaN, without NumPy's
    RuntimeWarning; ``where=`` and ``out=`` are not supported).

    Example:
        >>> import qtrace as qt
        >>> qt.nanmax(qt.asarray([1.0, float("nan"), 3.0])).item()
        3.0
    """
    return _nan_extreme("nanmax", "reduce_max", -math.inf, a, axis, out, keepdims, initial, where)


def nanmin(a, axis=None, out=None, keepdims=np._NoValue, initial=np._NoValue, where=np._NoValue) -> Tensor:
    """``numpy.nanmin``: the minimum ignoring NaNs (all-NaN slices give NaN, without NumPy's
    RuntimeWarning; ``where=`` and ``out=`` are not supported).

    Example:
        >>> import qtrace as qt
        >>> qt.nanmin(qt.asarray([1.0, float("nan"), 3.0])).item()
        1.0
    """
    return _nan_extreme("nanmin", "reduce_min", math.inf, a, axis, out, keepdims, initial, where)


def _nan_arg(op: str, prim: str, fill: float, a, axis, out, keepdims) -> Tensor:
    _no_out(out, op)
    t = _tensor(a, op)
    keep = _keep(keepdims)
    if t.dtype.kind != "f":
        return _red._arg(prim, op, t, axis, keep)
    isnan = _ap("isnan", t)
    r = _red._arg(prim, op, _ew.where(isnan, _const(fill, t.dtype, t), t), axis, keep)
    if axis is None:
        every = reshape(_red.all(isnan), (1,) * t.ndim if keep else ())
    else:
        every = _red.all(isnan, axis=axis, keepdims=keep)
    return _ew.where(every, _const(-1, dtypes.int64, r), r)


def nanargmax(a, axis=None, out=None, *, keepdims=np._NoValue) -> Tensor:
    """``numpy.nanargmax``: the index of the maximum ignoring NaNs.

    Unlike NumPy, an all-NaN slice does not raise ``ValueError`` (that would need the
    values): its index is ``-1`` (as in JAX). ``out=`` is not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.nanargmax(qt.asarray([[1.0, float("nan"), 3.0], [float("nan")] * 3]), axis=1).tolist()
        [2, -1]
    """
    return _nan_arg("nanargmax", "argmax", -math.inf, a, axis, out, keepdims)


def nanargmin(a, axis=None, out=None, *, keepdims=np._NoValue) -> Tensor:
    """``numpy.nanargmin``: the index of the minimum ignoring NaNs.

    Unlike NumPy, an all-NaN slice does not raise ``ValueError`` (that would need the
    values): its index is ``-1`` (as in JAX). ``out=`` is not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.nanargmin(qt.asarray([2.0, float("nan"), 1.0])).item()
        2
    """
    return _nan_arg("nanargmin", "argmin", math.inf, a, axis, out, keepdims)


# --- covariance --------------------------------------------------------------------------
def _atleast_rows(t: Tensor, dt) -> Tensor:
    t = astype(t, dt) if t.dtype != dt else t
    return reshape(t, (1,) * (2 - t.ndim) + t.shape) if t.ndim < 2 else t


def _cov_weights(weights, n: int, what: str, integral: bool, like: Tensor):
    if weights is None:
        return None
    w = _tensor(weights, "cov")
    if w.ndim > 1:
        raise RuntimeError(f"qt.cov: cannot handle multidimensional {what}, got shape {w.shape}")
    if w.shape[0] != n:
        raise RuntimeError(f"qt.cov: incompatible numbers of samples ({n}) and {what} ({w.shape[0]})")
    if not isinstance(weights, Tensor):
        values = np.asarray(weights, dtype=float)
        if integral and not np.all(values == np.around(values)):
            raise TypeError(f"qt.cov: {what} must be integer, got {weights!r}")
        if np.any(values < 0):
            raise ValueError(f"qt.cov: {what} cannot be negative, got {weights!r}")
    return astype(w, dtypes.float64)


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None) -> Tensor:
    """``numpy.cov``: the covariance matrix of the variables (rows, or columns with
    ``rowvar=False``), with frequency and reliability weights.

    Weights given as tensors are not checked (integral, non-negative) and degrees of
    freedom <= 0 give inf/NaN without NumPy's RuntimeWarning.

    Example:
        >>> import qtrace as qt
        >>> qt.cov(qt.asarray([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])).tolist()
        [[1.0, -1.0], [-1.0, 1.0]]
    """
    if ddof is not None:
        if isinstance(ddof, Tensor) or ddof != int(ddof):
            raise ValueError(f"qt.cov: ddof must be integer, got {ddof!r}")
        ddof = int(ddof)
    t = _tensor(m, "cov")
    if t.ndim > 2:
        raise ValueError(f"qt.cov: m has more than 2 dimensions (shape {t.shape})")
    u = None
    if y is not None:
        u = _tensor(y, "cov")
        if u.ndim > 2:
            raise ValueError(f"qt.cov: y has more than 2 dimensions (shape {u.shape})")
    if dtype is None:
        dt = np.result_type(t.dtype, dtypes.float64) if u is None else \
            np.result_type(t.dtype, u.dtype, dtypes.float64)
    else:
        dt = dtypes.canonical(dtype, "qt.cov")
    X = _atleast_rows(t, dt)
    if not rowvar and t.ndim != 1:
        X = transpose(X)
    if X.shape[0] == 0:
        return zeros((0, 0), dtypes.float64, device=t.device)
    if u is not None:
        Y = _atleast_rows(u, dt)
        if not rowvar and Y.shape[0] != 1:
            Y = transpose(Y)
        if Y.shape[1] != X.shape[1]:
            raise ValueError(f"qt.cov: m and y must have the same number of observations, got "
                             f"{X.shape[1]} and {Y.shape[1]}")
        X = concatenate([X, Y], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    n = X.shape[1]
    fw = _cov_weights(fweights, n, "fweights", True, X)
    aw = _cov_weights(aweights, n, "aweights", False, X)
    w = fw if aw is None else aw if fw is None else _ap("multiply", fw, aw)
    avg, w_sum = average(X, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        fact = n - ddof
    elif ddof == 0:
        fact = w_sum
    elif aw is None:
        fact = _ap("subtract", w_sum, ddof)
    else:
        fact = _ap("subtract", w_sum, _ap("divide", _ap("multiply", ddof, _red.sum(_ap("multiply", w, aw))),
                                          w_sum))
    if isinstance(fact, int):
        if fact <= 0:
            warnings.warn("qt.cov: degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
            fact = 0
        scale = 1 / fact if fact else math.inf
    else:
        fact = _ew.where(_ap("less_equal", fact, 0), _const(0.0, fact.dtype, fact), fact)
        scale = _ap("divide", 1.0, fact)
    Xc = _ap("subtract", X, reshape(avg, (avg.shape[0], 1)))
    if Xc.dtype != X.dtype:
        Xc = astype(Xc, X.dtype)
    Xw = Xc if w is None else _ap("multiply", Xc, w)
    common = np.result_type(Xc.dtype, Xw.dtype)
    Xw = astype(Xw, common)
    c = matmul(astype(Xc, common), transpose(_ap("conj", Xw) if common.kind == "c" else Xw))
    c = astype(_ap("multiply", c, scale), c.dtype)
    return squeeze(c)


def corrcoef(x, y=None, rowvar=True, *, dtype=None) -> Tensor:
    """``numpy.corrcoef``: Pearson correlation coefficients (the covariance matrix divided by
    the outer product of the standard deviations, clipped to ``[-1, 1]``).

    Example:
        >>> import qtrace as qt
        >>> qt.corrcoef(qt.asarray([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])).tolist()
        [[1.0, -1.0], [-1.0, 1.0]]
    """
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return _ap("divide", c, c)
    n = c.shape[0]
    d = reshape(c, (n * n,))[:: n + 1] if n else reshape(c, (0,))
    std = _ap("sqrt", _real_part(d))
    c = _ap("divide", _ap("divide", c, reshape(std, (n, 1))), reshape(std, (1, n)))
    if c.dtype.kind == "c":   # (NumPy clips the two parts)
        return complex_from_parts(_ew.clip(_real_part(c), -1, 1), _ew.clip(_imag(c), -1, 1))
    return _ew.clip(c, -1, 1)


# --- histograms --------------------------------------------------------------------------
def _hist_input(a, weights, op: str):
    """The data (and weights) flattened; bools as uint8 (NumPy converts them, warning)."""
    t = _tensor(a, op)
    _real(t, op)
    w = None
    if weights is not None:
        w = _tensor(weights, op)
        if w.shape != t.shape:
            raise ValueError(f"qt.{op}: weights should have the same shape as a, got {w.shape} and "
                             f"{t.shape}")
        w = reshape(w, (-1,))
    t = reshape(t, (-1,))
    return (astype(t, dtypes.uint8) if t.dtype == dtypes.bool_ else t), w


def _edges(t: Tensor, bins, range, op: str):
    """The bin edges (a tensor), and ``(first, last)`` for equal bins (else None)."""
    if isinstance(bins, str):
        raise ValueError(f"qt.{op}: string bin estimators ({bins!r}) are not supported; pass the "
                         "number of bins or the edges")
    if isinstance(bins, Tensor) and bins.ndim == 0:
        _int(bins, op, "bins")
    if isinstance(bins, Tensor) or np.ndim(bins) > 0:
        edges = bins if isinstance(bins, Tensor) else np.asarray(bins)
        if edges.ndim != 1:
            raise ValueError(f"qt.{op}: bins must be 1d, when an array, got shape {edges.shape}")
        if not isinstance(edges, Tensor):
            if np.any(edges[:-1] > edges[1:]):
                raise ValueError(f"qt.{op}: bins must increase monotonically, when an array, got {bins!r}")
            edges = _concrete(edges, t, op)
        return edges, None
    try:
        nbins = int(np.asarray(bins).item()) if isinstance(bins, np.ndarray) else _int(bins, op, "bins")
    except TypeError:
        raise TypeError(f"qt.{op}: bins must be an integer, a string, or an array, got {bins!r}") from None
    if nbins < 1:
        raise ValueError(f"qt.{op}: bins must be positive, when an integer, got {nbins}")
    if range is not None or t.size == 0:
        if range is not None:
            if any(isinstance(v, Tensor) for v in range):
                raise TypeError(f"qt.{op}: range must be numbers, not tensors")
            first, last = range
            if first > last:
                raise ValueError(f"qt.{op}: max must be larger than min in range parameter, got {range!r}")
            if not (np.isfinite(first) and np.isfinite(last)):
                raise ValueError(f"qt.{op}: supplied range of [{first}, {last}] is not finite")
        else:
            first, last = 0, 1
        if first == last:
            first, last = first - 0.5, last + 0.5
        bin_type = np.result_type(first, last, t.dtype)
        if bin_type.kind in "iub":
            bin_type = np.result_type(bin_type, float)
        edges = np.linspace(first, last, nbins + 1, endpoint=True, dtype=bin_type)
        if np.any(edges[:-1] >= edges[1:]):
            raise ValueError(f"qt.{op}: too many bins for data range; cannot create {nbins} "
                             "finite-sized bins")
        return _concrete(edges, t, op), (first, last)
    # edges from the data's range, computed lazily as NumPy's linspace does
    first = _red.reduce_as("reduce_min", op, t, None)
    last = _red.reduce_as("reduce_max", op, t, None)
    dt = t.dtype if t.dtype.kind == "f" else dtypes.float64
    first, last = astype(first, dt), astype(last, dt)
    same = _ap("equal", first, last)
    first = _ew.where(same, _ap("subtract", first, 0.5), first)
    last = _ew.where(same, _ap("add", last, 0.5), last)
    step = _ap("divide", _ap("subtract", last, first), nbins)
    edges = _ap("add", _ap("multiply", astype(arange(nbins + 1, device=t.device), dt), step), first)
    edges = concatenate([edges[:nbins], reshape(last, (1,))])
    return edges, (first, last)


def histogram_bin_edges(a, bins=10, range=None, weights=None) -> Tensor:  # noqa: A002 - NumPy's name
    """``numpy.histogram_bin_edges``: the edges ``histogram`` uses.

    ``bins`` is the number of equal bins (from ``range``, or lazily from the data's minimum
    and maximum: no values are read), or the edges themselves (a sequence or 1-D tensor).
    String estimators (``'auto'``, ...) are not supported. Data holding NaN or inf with no
    ``range`` gives non-finite edges (NumPy raises ``ValueError``; that needs the values).

    Example:
        >>> import qtrace as qt
        >>> qt.histogram_bin_edges(qt.asarray([1.0, 2.0, 5.0]), bins=4).tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0]
    """
    t, _ = _hist_input(a, weights, "histogram_bin_edges")
    return _edges(t, bins, range, "histogram_bin_edges")[0]


def histogram(a, bins=10, range=None, density=None, weights=None):  # noqa: A002 - NumPy's name
    """``numpy.histogram``: counts (or summed ``weights``) of the values in each bin, and the
    bin edges; bins hold ``edges[i] <= x < edges[i + 1]``, the last one also its right edge.

    ``bins`` as for ``histogram_bin_edges`` (the edges of an integer ``bins`` come lazily
    from the data's range, so the counts stay lazy too); ``density=True`` normalises to a
    probability density. Counts are int64, or the dtype of ``weights``.

    Example:
        >>> import qtrace as qt
        >>> counts, edges = qt.histogram(qt.asarray([0.5, 1.0, 1.5, 4.0]), bins=3, range=(0, 3))
        >>> counts.tolist(), edges.tolist()
        ([1, 2, 0], [0.0, 1.0, 2.0, 3.0])
    """
    t, w = _hist_input(a, weights, "histogram")
    edges, bounds = _edges(t, bins, range, "histogram")
    idx, keep = _bin_of(t, edges, bounds)
    nb = edges.shape[0] - 1
    ntype = dtypes.int64 if w is None else w.dtype
    ones = astype(keep, ntype) if w is None else _ew.where(keep, w, _const(0, ntype, w))
    n = scatter_at(zeros((max(nb, 0),), ntype, device=t.device), ones, [idx], "add")
    if density:
        n = _ap("divide", _ap("divide", n, _widths(edges)), _red.sum(n))
    return n, edges


def _bin_of(t: Tensor, edges: Tensor, bounds) -> tuple:
    """``(index, inside)``: the bin of each value of 1-D ``t`` (``edges[i] <= x < edges[i+1]``,
    the last bin also holding its right edge) and whether it lies in any bin."""
    nb = edges.shape[0] - 1
    x = astype(t, edges.dtype) if bounds is not None and t.dtype != edges.dtype else t
    first, last = bounds if bounds is not None else (edges[0], edges[nb])
    inside = _ap("logical_and", _ap("greater_equal", t, first), _ap("less_equal", t, last))
    if nb > 1:
        inner = reshape(edges[1:nb], (1, nb - 1))
        idx = _red.sum(_ap("greater_equal", reshape(x, (x.shape[0], 1)), inner), axis=1, dtype=dtypes.int64)
    else:
        idx = zeros(x.shape, dtypes.int64, device=t.device)
    return idx, inside


def _widths(edges: Tensor) -> Tensor:
    return astype(_ap("subtract", edges[1:], edges[:-1]), dtypes.float64)


def histogramdd(sample, bins=10, range=None, density=None, weights=None):  # noqa: A002 - NumPy's name
    """``numpy.histogramdd``: counts (or summed ``weights``) of ``D``-dimensional points in the
    cells of a grid of bins, as float64, and the list of each dimension's edges.

    ``sample`` is an ``(N, D)`` array, or a sequence of ``D`` coordinate arrays of ``N``
    points; ``bins`` an integer (every dimension), or one per dimension (an integer or the
    edges); ``range`` one ``(min, max)`` (or None) per dimension. Each dimension is binned
    as :func:`histogram` bins (its last bin holds its right edge; points outside any bin are
    left out); with integer bins and no range the edges come lazily from the data, so the
    counts stay lazy. ``density=True`` divides by the total and each cell's volume.

    Example:
        >>> import qtrace as qt
        >>> h, (ex, ey) = qt.histogramdd(qt.asarray([[0.0, 0.0], [1.0, 1.0], [1.0, 0.2]]), bins=2)
        >>> h.tolist()
        [[1.0, 0.0], [1.0, 1.0]]
    """
    op = "histogramdd"
    if isinstance(sample, (Tensor, np.ndarray)):
        pts = _tensor(sample, op)
        if pts.ndim != 2:
            raise ValueError(f"qt.{op}: sample must be an (N, D) array or a sequence of D arrays, "
                             f"got shape {pts.shape}")
        cols = [pts[:, d] for d in builtins.range(pts.shape[1])]
    else:
        cols = [reshape(_tensor(c, op), (-1,)) for c in sample]
        if len({c.shape[0] for c in cols}) > 1:
            raise ValueError(f"qt.{op}: the coordinate arrays differ in length: "
                             f"{[c.shape[0] for c in cols]}")
    dims = len(cols)
    for c in cols:
        _real(c, op)
    try:   # (NumPy's rule: anything with a length is one entry per dimension)
        bins_d = list(bins) if len(bins) == dims else None
    except TypeError:
        bins_d = [bins] * dims
    if bins_d is None:
        raise ValueError(f"qt.{op}: the dimension of bins must be equal to the dimension of the "
                         f"sample x ({dims}), got {len(bins)}")
    ranges = [None] * dims if range is None else list(range)
    if len(ranges) != dims:
        raise ValueError(f"qt.{op}: range must have one entry per dimension ({dims}), got {len(ranges)}")
    w = None
    if weights is not None:
        w = reshape(astype(_tensor(weights, op), dtypes.float64), (-1,))
        if cols and w.shape[0] != cols[0].shape[0]:
            raise ValueError(f"qt.{op}: weights must have one entry per point ({cols[0].shape[0]}), "
                             f"got {w.shape[0]}")
    edges_d, flat, inside, size = [], None, None, 1
    for c, b, r in zip(cols, bins_d, ranges):
        if r is not None and not isinstance(b, Tensor) and np.ndim(b) == 0:
            c = astype(c, dtypes.float64)   # (NumPy's linspace of the range's numbers: float64)
        edges, bounds = _edges(c, b, r, op)
        idx, keep = _bin_of(c, edges, bounds)
        nb = edges.shape[0] - 1
        flat = idx if flat is None else _ap("add", _ap("multiply", flat, nb), idx)
        inside = keep if inside is None else _ap("logical_and", inside, keep)
        edges_d.append(edges)
        size *= max(nb, 0)
    shape = tuple(e.shape[0] - 1 for e in edges_d)
    device = cols[0].device if cols else None
    ones = astype(inside, dtypes.float64) if w is None else _ew.where(inside, w, 0.0)
    hist = reshape(scatter_at(zeros((size,), dtypes.float64, device=device), ones, [flat], "add"), shape)
    if density:
        volume = None
        for d, e in enumerate(edges_d):
            wd = reshape(_widths(e), tuple(-1 if k == d else 1 for k in builtins.range(dims)))
            volume = wd if volume is None else _ap("multiply", volume, wd)
        hist = _ap("divide", _ap("divide", hist, _red.sum(hist)), volume)
    return hist, edges_d


def histogram2d(x, y, bins=10, range=None, density=None, weights=None):  # noqa: A002 - NumPy's name
    """``numpy.histogram2d``: :func:`histogramdd` of the points ``(x[i], y[i])``, returned as
    ``(H, xedges, yedges)``; ``bins`` an integer, a pair of integers, edges for both, or a
    pair of edges.

    Example:
        >>> import qtrace as qt
        >>> h, xe, ye = qt.histogram2d(qt.asarray([0.0, 1.0, 1.0]), qt.asarray([0.0, 1.0, 0.2]), bins=2)
        >>> h.tolist()
        [[1.0, 0.0], [1.0, 1.0]]
    """
    try:   # (NumPy's rule: a length other than 1 or 2 is one array of edges for both)
        if len(bins) not in (1, 2):
            bins = [bins, bins]
    except TypeError:
        pass
    hist, (xedges, yedges) = histogramdd([x, y], bins, range, density, weights)
    return hist, xedges, yedges


def bincount(x, /, weights=None, minlength=0) -> Tensor:
    """``numpy.bincount``: how often each non-negative integer occurs in the 1-D ``x`` (the
    sum of ``weights`` at its positions, float64, when given; the gradient reaches them).

    The result's length is ``max(x.max() + 1, minlength)``, which depends on the data: outside
    ``qt.jit`` ``x`` is evaluated to find it (and checked for negative values). Inside
    ``qt.jit`` a ``minlength`` > 0 fixes the length (values >= ``minlength`` and negative
    values are then not counted, as with JAX's ``length=``); without it
    ``qt.TracerError`` is raised.

    Example:
        >>> import qtrace as qt
        >>> qt.bincount(qt.asarray([0, 1, 1, 3])).tolist()
        [1, 2, 0, 1]
    """
    t = _tensor(x, "bincount")
    if t.ndim != 1:
        raise ValueError(f"qt.bincount: x must be 1-D, got shape {t.shape}")
    if t.dtype.kind not in "iub" or not (np.can_cast(t.dtype, dtypes.int64) or t.dtype == np.uint64):
        raise TypeError(f"qt.bincount: cannot cast array data from {t.dtype} to int64 according to the "
                        "rule 'safe'")
    minlength = _int(minlength, "bincount", "minlength")
    if minlength < 0:
        raise ValueError(f"qt.bincount: minlength must not be negative, got {minlength}")
    w = None
    if weights is not None:
        w = astype(_tensor(weights, "bincount"), dtypes.float64)
        if w.shape != t.shape:
            raise ValueError(f"qt.bincount: the weights and list don't have the same length "
                             f"({w.shape} and {t.shape})")
    idx = astype(t, dtypes.int64)
    if tracing():
        if minlength == 0:
            raise TracerError("qt.bincount: the result's length depends on the data, which a function "
                              "traced by qt.jit cannot have; pass minlength= (the length) or call it "
                              "outside qt.jit")
        length = minlength
        inside = _ap("logical_and", _ap("greater_equal", idx, 0), _ap("less", idx, length))
        idx = _ew.where(inside, idx, 0)
    else:
        values = np.asarray(t)
        if values.size and values.min() < 0:
            raise ValueError("qt.bincount: x must have no negative elements")
        length = max(int(values.max()) + 1 if values.size else 0, minlength)
        inside = None
    if w is None:
        ones = full(t.shape, 1, dtypes.int64, device=t.device) if inside is None else \
            astype(inside, dtypes.int64)
        dt = dtypes.int64
    else:
        ones = w if inside is None else _ew.where(inside, w, _const(0.0, dtypes.float64, w))
        dt = dtypes.float64
    return scatter_at(zeros((length,), dt, device=t.device), ones, [idx], "add")


def digitize(x, bins, right=False) -> Tensor:
    """``numpy.digitize``: the index of the bin each value falls in, for increasing or
    decreasing ``bins`` (``right=True``: bins include their right edge), as int64.

    ``bins`` given as a tensor is not checked to be monotonic; its direction is read from
    its first and last values, lazily.

    Example:
        >>> import qtrace as qt
        >>> qt.digitize(qt.asarray([0.5, 1.0, 2.5, 9.0]), [1.0, 2.0, 3.0]).tolist()
        [0, 1, 2, 3]
        >>> qt.digitize(qt.asarray([0.5, 2.5]), [3.0, 2.0, 1.0], right=True).tolist()
        [3, 1]
    """
    t = _tensor(x, "digitize")
    if t.dtype.kind == "c":
        raise TypeError(f"qt.digitize: x may not be complex, got dtype {t.dtype}")
    side = "left" if right else "right"
    if not isinstance(bins, Tensor):
        b = np.asarray(bins)
        if b.ndim != 1:
            raise ValueError(f"qt.digitize: bins must be 1-D, got shape {b.shape}")
        step = np.diff(b)
        if np.all(step >= 0):
            return searchsorted(_concrete(b, t, "digitize"), t, side=side)
        if np.all(step <= 0):
            rev = _concrete(b[::-1].copy(), t, "digitize")
            return _ap("subtract", b.shape[0], searchsorted(rev, t, side=side))
        raise ValueError(f"qt.digitize: bins must be monotonically increasing or decreasing, got {bins!r}")
    if bins.ndim != 1:
        raise ValueError(f"qt.digitize: bins must be 1-D, got shape {bins.shape}")
    n = bins.shape[0]
    up = searchsorted(bins, t, side=side)
    if n < 2:
        return up
    down = _ap("subtract", n, searchsorted(bins[::-1], t, side=side))
    return _ew.where(_ap("less", bins[n - 1], bins[0]), down, up)


NUMPY_FUNCTIONS: dict = {
    np.ptp: ptp, np.median: median, np.quantile: quantile, np.percentile: percentile,
    np.nanquantile: nanquantile, np.nanpercentile: nanpercentile, np.nanmedian: nanmedian,
    np.nansum: nansum, np.nanprod: nanprod, np.nancumsum: nancumsum, np.nancumprod: nancumprod,
    np.nanmean: nanmean, np.nanvar: nanvar, np.nanstd: nanstd, np.nanmax: nanmax, np.nanmin: nanmin,
    np.nanargmax: nanargmax, np.nanargmin: nanargmin, np.cov: cov, np.corrcoef: corrcoef,
    np.histogram: histogram, np.histogram_bin_edges: histogram_bin_edges, np.bincount: bincount,
    np.digitize: digitize, np.histogramdd: histogramdd, np.histogram2d: histogram2d,
}
NUMPY_UFUNCS: dict = {}

__all__: list[str] = [
    "bincount", "corrcoef", "cov", "digitize", "histogram", "histogram2d", "histogram_bin_edges",
    "histogramdd", "median",
    "nanargmax", "nanargmin", "nancumprod", "nancumsum", "nanmax", "nanmean", "nanmedian",
    "nanmin", "nanpercentile", "nanprod", "nanquantile", "nanstd", "nansum", "nanvar",
    "percentile", "ptp", "quantile",
]
