"""Reductions (``sum prod mean max min argmax argmin any all``) and ``cumsum``."""

from __future__ import annotations

import builtins
import functools

import numpy as np

from . import dtypes, selections
from .context import record
from .convert import cast, wrap
from .elementwise import apply
from .selections import Selection
from .shape_ops import as_tensor, normalize_axes, normalize_axis, reshape
from .views import reshape_node

_NUMPY = {"reduce_sum": np.sum, "reduce_prod": np.prod, "reduce_max": np.max,
          "reduce_min": np.min, "reduce_any": np.any, "reduce_all": np.all}
_IDENTITY = {"reduce_max": "maximum", "reduce_min": "minimum"}


@functools.cache
def _result_dtype(prim: str, dtype: np.dtype) -> np.dtype:
    return np.dtype(_NUMPY[prim](np.ones((1,), dtype)).dtype)


def _ordered(t, name: str) -> None:
    """Reductions that compare elements refuse complex numbers (they have no order; the Array
    API leaves them undefined), at record time as ``maximum`` does."""
    if t.dtype.kind == "c":
        raise TypeError(f"qt.{name}: not supported for complex dtypes ({t.dtype}): complex numbers "
                        "have no order")


def _reduce(prim: str, name: str, x, axis, keepdims: bool, dtype=None):
    if type(x) is Selection:  # x[mask] inside qt.jit
        return selections.reduce(prim, name, x, axis, keepdims, dtype)
    return reduce_as(prim, name, x, axis, dtype, keepdims)


def reduce_as(prim: str, name: str, x, axis, dtype=None, keepdims: bool = False):
    """Reduction primitive ``prim`` of ``x`` over ``axis`` (reported as ``qt.<name>``)."""
    t = as_tensor(x, name)
    if prim in _IDENTITY:
        _ordered(t, name)
    axes = normalize_axes(axis, t.ndim, name)
    out_dtype = dtypes.canonical(dtype, f"qt.{name}") if dtype is not None else _result_dtype(prim, t.dtype)
    if prim in _IDENTITY and builtins.any(t.shape[a] == 0 for a in axes):
        raise ValueError(f"qt.{name}: zero-size array to reduction operation {_IDENTITY[prim]} "
                         f"which has no identity (shape {t.shape}, axis {axis})")
    node = cast(t._node, out_dtype, weak=False)
    kept = tuple(d for a, d in enumerate(t.shape) if a not in axes)
    if axes:
        node = record(prim, (node,), (axes,), kept, out_dtype)
    if keepdims:  # (a fresh value, as NumPy's: not a view of one nobody else holds)
        node = reshape_node(node, tuple(1 if a in axes else d for a, d in enumerate(t.shape)))
    return wrap(node)


def sum(x, axis=None, dtype=None, keepdims: bool = False):  # noqa: A001 - NumPy's name
    """``numpy.sum``: int/bool inputs sum in int64, float32 accumulates in float64.

    Example:
        >>> import qtrace as qt
        >>> qt.sum(qt.ones((2, 3)), axis=1).tolist()
        [3.0, 3.0]
    """
    return _reduce("reduce_sum", "sum", x, axis, keepdims, dtype)


def prod(x, axis=None, dtype=None, keepdims: bool = False):
    """``numpy.prod``."""
    return _reduce("reduce_prod", "prod", x, axis, keepdims, dtype)


def max(x, axis=None, keepdims: bool = False):  # noqa: A001
    """``numpy.max`` (NaN propagates)."""
    return _reduce("reduce_max", "max", x, axis, keepdims)


def min(x, axis=None, keepdims: bool = False):  # noqa: A001
    """``numpy.min`` (NaN propagates)."""
    return _reduce("reduce_min", "min", x, axis, keepdims)


def any(x, axis=None, keepdims: bool = False):  # noqa: A001
    """``numpy.any``."""
    return _reduce("reduce_any", "any", x, axis, keepdims, dtypes.bool_)


def all(x, axis=None, keepdims: bool = False):  # noqa: A001
    """``numpy.all``."""
    return _reduce("reduce_all", "all", x, axis, keepdims, dtypes.bool_)


amax, amin = max, min


def mean(x, axis=None, dtype=None, keepdims: bool = False):
    """``numpy.mean`` (int inputs give float64)."""
    if type(x) is Selection:  # x[mask] inside qt.jit
        return x.mean(axis, dtype, keepdims)
    t = as_tensor(x, "mean")
    axes = normalize_axes(axis, t.ndim, "mean")
    if dtype is None:
        dtype = t.dtype if t.dtype.kind in "fc" else dtypes.float64
    count = 1
    for a in axes:
        count *= t.shape[a]
    total = _reduce("reduce_sum", "mean", t, axis, keepdims, dtype)
    return apply("divide", total, float(count)) if count else apply("multiply", total, float("nan"))


def _arg(prim: str, name: str, x, axis, keepdims: bool):
    t = as_tensor(x, name)
    _ordered(t, name)
    if axis is None:
        flat = reshape(t, -1)
        out = _arg(prim, name, flat, 0, False)
        return reshape(out, (1,) * t.ndim) if keepdims else out
    ax = normalize_axis(axis, t.ndim, name)
    if t.shape[ax] == 0:
        raise ValueError(f"qt.{name}: attempt to get {name} of an empty sequence (shape {t.shape})")
    kept = tuple(d for a, d in enumerate(t.shape) if a != ax)
    node = record(prim, (t._node,), ((ax,),), kept, dtypes.int64)
    if keepdims:
        node = reshape_node(node, tuple(1 if a == ax else d for a, d in enumerate(t.shape)))
    return wrap(node)


def argmax(x, axis=None, keepdims: bool = False):
    """``numpy.argmax``: index of the first maximum (first NaN if any)."""
    return _arg("argmax", "argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims: bool = False):
    """``numpy.argmin``: index of the first minimum (first NaN if any)."""
    return _arg("argmin", "argmin", x, axis, keepdims)


def cumsum(x, axis=None, dtype=None):
    """``numpy.cumsum`` (``axis=None`` flattens first)."""
    t = as_tensor(x, "cumsum")
    if axis is None:
        t, ax = reshape(t, -1), 0
    else:
        ax = normalize_axis(axis, t.ndim, "cumsum")
    if dtype is None:
        out_dtype = _result_dtype("reduce_sum", t.dtype)
    else:
        out_dtype = dtypes.canonical(dtype, "qt.cumsum")
    node = cast(t._node, out_dtype, weak=False)
    if _library_scan(t, ax):
        from .library import call
        return call("cumsum", [wrap(node)], (ax,), [(t.shape, out_dtype)])[0]
    return wrap(record("cumsum", (node,), (ax,), t.shape, out_dtype))


SCAN_SPLIT = 1 << 17        # rows at least this long are scanned by the device library ...
SCAN_FEW_ROWS = 8           # ... when there are fewer rows than this


def _library_scan(t, ax: int) -> bool:
    """Whether ``cumsum`` along ``ax`` runs as the device library's parallel scan (on a GPU,
    CuPy's: CUB's single-pass decoupled look-back) rather than a scan task: a scan task is
    one thread per row, so a few long rows would run serially (fatal on a GPU; a CPU
    splits long rows itself, ``qtrace.kernels.split_scan``). A library step reads its
    input materialized and is a fusion boundary; its gradient is the reversed cumsum of
    the cotangent (``qtrace.ad.library``)."""
    rows = t.size // builtins.max(t.shape[ax], 1)
    return t.shape[ax] >= SCAN_SPLIT and rows < SCAN_FEW_ROWS and t.device.kind != "cpu"


def cumulative_sum(x, /, *, axis: int | None = None, dtype=None, include_initial: bool = False):
    """``cumulative_sum`` (Array API): running sums along ``axis`` (required beyond 1-D);
    ``include_initial`` starts with a zero.

    Example:
        >>> import qtrace as qt
        >>> qt.cumulative_sum(qt.asarray([1, 2, 3]), include_initial=True).tolist()
        [0, 1, 3, 6]
    """
    return _cumulative("cumulative_sum", cumsum, 0, x, axis, dtype, include_initial)


def cumulative_prod(x, /, *, axis: int | None = None, dtype=None, include_initial: bool = False):
    """``cumulative_prod`` (Array API): running products along ``axis``."""
    from .composites import cumprod
    return _cumulative("cumulative_prod", cumprod, 1, x, axis, dtype, include_initial)


def _cumulative(name, fn, initial, x, axis, dtype, include_initial):
    t = as_tensor(x, name)
    if axis is None:
        if t.ndim > 1:
            raise ValueError(f"qt.{name}: axis is required for arrays of more than one dimension "
                             f"(shape {t.shape})")
        axis = 0
    if t.ndim == 0:
        raise ValueError(f"qt.{name}: 0-d arrays have no axis to accumulate along")
    ax = normalize_axis(axis, t.ndim, name)
    out = fn(t, axis=ax, dtype=dtype)
    if include_initial:
        from .creation import full
        from .shape_ops import concatenate
        shape = tuple(1 if a == ax else d for a, d in enumerate(out.shape))
        out = concatenate([full(shape, initial, out.dtype), out], axis=ax)
    return out
