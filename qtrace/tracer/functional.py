"""Functions that apply a Python function over an array's slices or axes, as NumPy's
``apply_along_axis`` and ``apply_over_axes`` do.

The function is called on tensors (slices or the whole array), so what it records is
recorded like any other operation: the result stays lazy, works inside ``qt.jit`` and is
differentiated by ``qt.grad`` through the function. As in NumPy, ``apply_along_axis``
calls the function once per 1-d slice (a Python loop over the other axes), so it suits
arrays with few slices; a function written with whole-array operations and an ``axis``
argument is faster.

``NUMPY_FUNCTIONS`` maps NumPy's functions to these (``__array_function__``).

Example:
    >>> import qtrace as qt
    >>> x = qt.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    >>> qt.apply_along_axis(lambda v: v - qt.mean(v), 1, x).tolist()
    [[-1.0, 0.0, 1.0], [-1.0, 0.0, 1.0]]
"""

from __future__ import annotations

import itertools

import numpy as np

from .composites import _ints, _tensor
from .convert import astype
from .shape_ops import expand_dims, normalize_axis, reshape, stack, transpose
from .tensor import Tensor


def apply_along_axis(func1d, axis, arr, *args, **kwargs) -> Tensor:
    """``numpy.apply_along_axis``: ``func1d(v, *args, **kwargs)`` for every 1-d slice ``v``
    of ``arr`` along ``axis``.

    The results of all slices must have the shape of the first; they take the first's
    dtype (NumPy fills a buffer of that dtype). The result's axes are ``arr``'s axes before
    ``axis``, then the function result's axes, then ``arr``'s axes after ``axis``. An
    ``arr`` with a zero-length axis other than ``axis`` raises ``ValueError`` (as NumPy).

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([[3.0, 1.0], [2.0, 5.0]])
        >>> qt.apply_along_axis(qt.sort, 0, x).tolist()
        [[2.0, 1.0], [3.0, 5.0]]
    """
    t = _tensor(arr, "apply_along_axis")
    if t.ndim == 0:
        raise np.exceptions.AxisError(
            "qt.apply_along_axis: axis is out of bounds for a 0-d array (it needs at least one axis)")
    axis = normalize_axis(axis, t.ndim, "apply_along_axis")
    others = [k for k in range(t.ndim) if k != axis]
    outer = tuple(t.shape[k] for k in others)
    if 0 in outer:
        raise ValueError("qt.apply_along_axis: cannot apply along an axis when another axis has "
                         f"length 0 (array shape {t.shape})")
    moved = transpose(t, (*others, axis))
    results = []
    for index in itertools.product(*(range(n) for n in outer)):
        res = _tensor(func1d(moved[index], *args, **kwargs), "apply_along_axis")
        if results:
            if res.shape != results[0].shape:
                raise ValueError(
                    f"qt.apply_along_axis: the function returned shape {res.shape} for slice "
                    f"{index}, but {results[0].shape} for the first slice; every slice's result "
                    "must have the same shape")
            res = astype(res, results[0].dtype)
        results.append(res)
    first = results[0]
    out = reshape(stack(results), outer + first.shape)
    # (outer axes before `axis`, the result's axes, the outer axes after `axis`)
    n_out = len(outer)
    res_axes = list(range(n_out, n_out + first.ndim))
    return transpose(out, (*range(axis), *res_axes, *range(axis, n_out)))


def apply_over_axes(func, a, axes) -> Tensor:
    """``numpy.apply_over_axes``: ``func(a, axis)`` for each axis of ``axes`` in turn, each
    call on the previous result.

    ``func`` must return an array of the same number of dimensions, or of one fewer (then
    the axis is put back with length 1, as ``keepdims`` would); anything else raises
    ``ValueError``. Negative axes count from the end of ``a``.

    Example:
        >>> import qtrace as qt
        >>> x = qt.reshape(qt.arange(6.0), (2, 3))
        >>> qt.apply_over_axes(qt.sum, x, [0, 1]).tolist()
        [[15.0]]
    """
    val = _tensor(a, "apply_over_axes")
    n = val.ndim
    for axis in _ints(axes, "apply_over_axes", "axes"):
        axis = axis + n if axis < 0 else axis
        res = _tensor(func(val, axis), "apply_over_axes")
        if res.ndim != val.ndim:
            res = expand_dims(res, axis)
            if res.ndim != val.ndim:
                raise ValueError(f"qt.apply_over_axes: the function returned an array of {res.ndim - 1} "
                                 f"dimensions for axis {axis}; it must return {val.ndim} or {val.ndim - 1}")
        val = res
    return val


NUMPY_FUNCTIONS = {np.apply_along_axis: apply_along_axis, np.apply_over_axes: apply_over_axes}
NUMPY_UFUNCS: dict = {}

__all__ = ["apply_along_axis", "apply_over_axes"]
