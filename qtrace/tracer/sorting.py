"""Sorting, searching and set functions: ``sort``, ``argsort``, ``searchsorted``,
``take``, ``take_along_axis``, ``count_nonzero``, ``nonzero``, ``unique_*``, ``isin``.

``sort`` and ``argsort`` are one library call (NumPy's stable sort on the CPU) returning
both the sorted values and the permutation, so a program using both sorts once; the
gradient of ``sort`` scatters the cotangent back through the permutation. Functions
whose result's shape depends on the data (``nonzero``, ``unique_*``) evaluate their
input eagerly and raise ``qt.TracerError`` inside ``qt.jit`` (``size=`` fixes the shape
and makes them traceable, padding with ``fill_value``, as in JAX).
"""

from __future__ import annotations

import numpy as np

from ..errors import TracerError
from . import dtypes, library
from .context import tracing
from .convert import astype, input_node, wrap
from .creation import arange, full
from .elementwise import apply, where
from .indexing import gather_at
from .reductions import sum as _sum
from .shape_ops import as_tensor, broadcast_to, concatenate, normalize_axis, reshape
from .tensor import Tensor


def _sort_pair(x: Tensor, axis: int, descending: bool) -> list:
    """Sorted values and the stable permutation that sorts (one library call)."""
    return library.call("sort", [x], (axis, bool(descending)),
                        [(x.shape, x.dtype), (x.shape, dtypes.int64)])


def sort(x, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """``sort`` (Array API; ``numpy.sort``): sorted along ``axis`` (stable; NaNs last).

    Example:
        >>> import qtrace as qt
        >>> qt.sort(qt.asarray([3.0, 1.0, 2.0])).tolist()
        [1.0, 2.0, 3.0]
    """
    t = as_tensor(x, "sort")
    if t.ndim == 0:
        raise ValueError("qt.sort: a 0-d array cannot be sorted along an axis")
    return _sort_pair(t, normalize_axis(axis, t.ndim, "sort"), descending)[0]



def sort_complex(a) -> Tensor:
    """``numpy.sort_complex``: sorted along the last axis by real part, then imaginary part,
    as a complex array (complex64 for int8/int16/uint8/uint16 input, else complex128, as
    NumPy converts).

    Example:
        >>> import qtrace as qt
        >>> qt.sort_complex(qt.asarray([3, 1, 2])).tolist()
        [(1+0j), (2+0j), (3+0j)]
    """
    t = as_tensor(a, "sort_complex")
    s = sort(t)
    if t.dtype.kind == "c":
        return s
    return astype(s, np.complex64 if t.dtype.char in "bhBH" else np.complex128)

def argsort(x, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """``argsort`` (Array API; ``numpy.argsort``): the stable permutation sorting ``axis``.

    Example:
        >>> import qtrace as qt
        >>> qt.argsort(qt.asarray([3.0, 1.0, 2.0])).tolist()
        [1, 2, 0]
    """
    t = as_tensor(x, "argsort")
    if t.ndim == 0:
        raise ValueError("qt.argsort: a 0-d array cannot be sorted along an axis")
    return _sort_pair(t, normalize_axis(axis, t.ndim, "argsort"), descending)[1]


def numpy_sort(a, axis=-1, kind=None, order=None, *, stable=None) -> Tensor:
    """``numpy.sort``'s signature (``axis=None`` sorts the flattened array)."""
    if order is not None:
        raise TypeError("qt.sort: order= (structured arrays) is not supported")
    t = as_tensor(a, "sort")
    return sort(reshape(t, -1) if axis is None else t, axis=-1 if axis is None else axis)


def numpy_argsort(a, axis=-1, kind=None, order=None, *, stable=None) -> Tensor:
    """``numpy.argsort``'s signature (always stable)."""
    if order is not None:
        raise TypeError("qt.argsort: order= (structured arrays) is not supported")
    t = as_tensor(a, "argsort")
    return argsort(reshape(t, -1) if axis is None else t, axis=-1 if axis is None else axis)


def searchsorted(x1, x2, /, side: str = "left", sorter=None) -> Tensor:
    """``searchsorted`` (Array API; ``numpy.searchsorted``): indices inserting ``x2`` into the
    sorted 1-D ``x1`` (``side`` and ``sorter`` may be given by position, as NumPy allows).

    Example:
        >>> import qtrace as qt
        >>> qt.searchsorted(qt.asarray([1.0, 2.0, 3.0]), qt.asarray([2.5, 0.0])).tolist()
        [2, 0]
    """
    a, v = as_tensor(x1, "searchsorted"), as_tensor(x2, "searchsorted")
    if a.ndim != 1:
        raise ValueError(f"qt.searchsorted: x1 must be 1-D, got shape {a.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"qt.searchsorted: side must be 'left' or 'right', got {side!r}")
    if sorter is not None:
        a = take(a, sorter)
    dt = np.result_type(a.dtype, v.dtype)
    a, v = astype(a, dt), astype(v, dt)
    return library.call("searchsorted", [a, v], (side,), [(v.shape, dtypes.int64)])[0]


def _coordinates(shape: tuple, axis: int, along: Tensor) -> list:
    """Coordinates reading ``along`` on ``axis`` and the element's own index elsewhere."""
    coords = []
    for a, d in enumerate(shape):
        if a == axis:
            coords.append(along)
        else:
            r = reshape(arange(d), tuple(d if b == a else 1 for b in range(len(shape))))
            coords.append(broadcast_to(r, shape))
    return coords


def take_along_axis(x, indices, /, *, axis: int = -1) -> Tensor:
    """``take_along_axis`` (Array API; ``numpy.take_along_axis``).

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([[10.0, 30.0, 20.0]])
        >>> qt.take_along_axis(x, qt.argsort(x), axis=1).tolist()
        [[10.0, 20.0, 30.0]]
    """
    t, idx = as_tensor(x, "take_along_axis"), as_tensor(indices, "take_along_axis")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"qt.take_along_axis: indices must be integers, got {idx.dtype}")
    if idx.ndim != t.ndim:
        raise ValueError(f"qt.take_along_axis: indices of shape {idx.shape} and array of shape "
                         f"{t.shape} must have the same number of dimensions")
    ax = normalize_axis(axis, t.ndim, "take_along_axis")
    shape = tuple(i if a == ax else np.broadcast_shapes((d,), (i,))[0]
                  for a, (d, i) in enumerate(zip(t.shape, idx.shape)))
    idx = broadcast_to(idx, shape)
    return gather_at(t, _coordinates(shape, ax, idx))



def numpy_take_along_axis(arr, indices, axis=-1) -> Tensor:
    """``numpy.take_along_axis(arr, indices, axis)`` on tensors: ``axis`` positional too,
    ``None`` for the flattened array (``indices`` 1-D), as NumPy's."""
    if axis is None:
        from .shape_ops import reshape
        return take_along_axis(reshape(as_tensor(arr, "take_along_axis"), (-1,)), indices, axis=0)
    return take_along_axis(arr, indices, axis=axis)

def take(x, indices, /, axis: int | None = None, out=None, mode: str = "raise") -> Tensor:
    """``take`` (Array API; ``numpy.take``): elements at ``indices`` along ``axis`` (of the
    flattened array for ``axis=None``). ``mode``: ``'raise'`` (an index out of range raises
    ``IndexError``, found by the kernel for indices held in tensors), ``'wrap'`` (indices
    modulo the axis length) or ``'clip'`` (clipped into the axis). ``out=`` is not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.take(qt.asarray([5, 6, 7]), qt.asarray([2, 0])).tolist()
        [7, 5]
        >>> qt.take(qt.asarray([5, 6, 7]), [4, -4], mode="wrap").tolist()
        [6, 6]
    """
    if out is not None:
        raise TypeError("qt.take: out= is not supported (assign the result instead)")
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"qt.take: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    t, idx = as_tensor(x, "take"), as_tensor(indices, "take")
    if axis is None:
        if t.ndim > 1:
            t = reshape(t, -1)
        axis = 0
    ax = normalize_axis(axis, t.ndim, "take")
    if mode != "raise":
        n = t.shape[ax]
        if n == 0:
            if idx.size:
                raise IndexError("qt.take: cannot do a non-empty take from an empty axis")
        elif mode == "wrap":
            idx = apply("remainder", idx, n)
        else:
            idx = apply("minimum", apply("maximum", idx, 0), n - 1)
    return t[(slice(None),) * ax + (idx,)]


def count_nonzero(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    """``count_nonzero`` (Array API): how many elements are not zero (int64).

    Example:
        >>> import qtrace as qt
        >>> int(qt.count_nonzero(qt.asarray([0, 3, 0, 1])))
        2
    """
    t = as_tensor(x, "count_nonzero")
    return _sum(apply("not_equal", t, False if t.dtype == np.bool_ else 0), axis=axis,
                keepdims=keepdims, dtype=dtypes.int64)


def _eager(x: Tensor, op: str) -> np.ndarray:
    if tracing():
        raise TracerError(f"qt.{op}: the result's shape depends on the data, which a function traced "
                          f"by qt.jit cannot have; pass size= for a fixed shape, or call it outside qt.jit")
    return np.asarray(x)


def nonzero(x, /, *, size: int | None = None, fill_value: int = 0) -> tuple:
    """``nonzero`` (Array API): the indices of the non-zero elements, one array per axis.

    Without ``size`` the input is evaluated (the count depends on the data); with ``size``
    the result has that many entries (the first ``size`` non-zero elements, padded with
    ``fill_value``) and stays lazy, also inside ``qt.jit``.

    Example:
        >>> import qtrace as qt
        >>> [i.tolist() for i in qt.nonzero(qt.asarray([0, 3, 0, 1]))]
        [[1, 3]]
    """
    t = as_tensor(x, "nonzero")
    if t.ndim == 0:
        raise ValueError("qt.nonzero: 0-d arrays are not supported (the standard forbids them)")
    if size is None:
        found = np.nonzero(_eager(t, "nonzero"))
        return tuple(wrap(input_node(a.astype(np.int64), "nonzero", owned=True)) for a in found)
    flat = reshape(apply("not_equal", t, False if t.dtype == np.bool_ else 0), -1)
    order = argsort(apply("logical_not", flat), axis=0)  # non-zero positions first, in order
    pos = order[:size]
    keep = apply("less", arange(pos.shape[0]), _sum(flat, dtype=dtypes.int64))
    out = []
    for k in range(t.ndim):
        stride = int(np.prod(t.shape[k + 1:], dtype=np.int64))
        coord = where(keep, apply("remainder", apply("floor_divide", pos, stride), t.shape[k]), fill_value)
        if size > pos.shape[0]:
            coord = concatenate([coord, full((size - pos.shape[0],), fill_value, dtypes.int64)])
        out.append(coord)
    return tuple(out)


def _unique(x, op: str):
    t = as_tensor(x, op)
    return np.unique(_eager(t, op).reshape(-1), return_index=True, return_inverse=True,
                     return_counts=True, equal_nan=False)


def _as_tensors(*arrays, dtypes_=None):
    return tuple(wrap(input_node(a if d is None else a.astype(d), "unique", owned=True))
                 for a, d in zip(arrays, dtypes_ or [None] * len(arrays)))


def unique_values(x, /) -> Tensor:
    """``unique_values`` (Array API): the distinct values, sorted (evaluates ``x``).

    Example:
        >>> import qtrace as qt
        >>> qt.unique_values(qt.asarray([3, 1, 3])).tolist()
        [1, 3]
    """
    values, _, _, _ = _unique(x, "unique_values")
    return _as_tensors(values)[0]


def unique_counts(x, /):
    """``unique_counts`` (Array API): ``(values, counts)``."""
    from collections import namedtuple
    values, _, _, counts = _unique(x, "unique_counts")
    result = namedtuple("UniqueCountsResult", ["values", "counts"])
    return result(*_as_tensors(values, counts, dtypes_=[None, np.int64]))


def unique_inverse(x, /):
    """``unique_inverse`` (Array API): ``(values, inverse_indices)`` (inverse in ``x``'s shape)."""
    from collections import namedtuple
    t = as_tensor(x, "unique_inverse")
    values, _, inverse, _ = _unique(t, "unique_inverse")
    result = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])
    return result(*_as_tensors(values, inverse.reshape(t.shape), dtypes_=[None, np.int64]))


def unique_all(x, /):
    """``unique_all`` (Array API): ``(values, indices, inverse_indices, counts)``."""
    from collections import namedtuple
    t = as_tensor(x, "unique_all")
    values, index, inverse, counts = _unique(t, "unique_all")
    result = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])
    return result(*_as_tensors(values, index, inverse.reshape(t.shape), counts,
                               dtypes_=[None, np.int64, np.int64, np.int64]))


def isin(x1, x2, /, *, invert: bool = False) -> Tensor:
    """``isin`` (Array API): whether each element of ``x1`` occurs in ``x2`` (a library call).

    Example:
        >>> import qtrace as qt
        >>> qt.isin(qt.asarray([1, 2, 3]), qt.asarray([3, 1])).tolist()
        [True, False, True]
    """
    a, b = as_tensor(x1, "isin"), as_tensor(x2, "isin")
    return library.call("isin", [a, b], (bool(invert),), [(a.shape, dtypes.bool_)])[0]
