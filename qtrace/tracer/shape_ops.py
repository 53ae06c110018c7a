"""Shape functions: views (reshape, transpose, broadcast, slices) and concatenation."""

from __future__ import annotations

import math
import operator

import numpy as np

from ..config import config
from ..graph.device import Device
from ..graph.primitives import broadcast_shapes
from . import views
from .context import record
from .convert import const_node, operand, place, promote, wrap
from .tensor import Tensor
from .views import broadcast_node, reshape_node, slice_node, transpose_node  # noqa: F401


def as_tensor(x, op: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    o = operand(x, op)
    if o.node is None:
        return wrap(const_node(o.value, o.dtype, Device(config.device), weak=True))
    return wrap(o.node)


def normalize_axis(axis, ndim: int, op: str) -> int:
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"qt.{op}: axis must be an integer, got {axis!r}") from None
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(f"qt.{op}: axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


def normalize_axes(axis, ndim: int, op: str) -> tuple:
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, ndim, op) for a in axis)
        if len(set(axes)) != len(axes):
            raise ValueError(f"qt.{op}: repeated axis in {axis}")
        return tuple(sorted(axes))
    return (normalize_axis(axis, ndim, op),)


def _shape_arg(shape) -> tuple:
    if isinstance(shape, (tuple, list)):
        return tuple(operator.index(d) for d in shape)
    return (operator.index(shape),)


def reshape(x, /, shape, *, copy=None) -> Tensor:
    """``numpy.reshape`` (C order; one dimension may be -1): a view where NumPy makes one.

    Like NumPy, the result shares ``x``'s memory when the new shape can be laid over the
    old strides (always for a contiguous ``x``), and is a copy otherwise.

    Example:
        >>> import qtrace as qt
        >>> qt.arange(6).reshape(2, -1).shape
        (2, 3)
    """
    t = as_tensor(x, "reshape")
    shape = resolve_shape(_shape_arg(shape), t.size, "reshape")
    if shape == t.shape and copy is not True:
        return views.alias(t)
    if copy is True:
        return wrap(reshape_node(t._node, shape))
    return views.view(t, ("reshape", shape), copy is False)


def resolve_shape(shape: tuple, size: int, op: str) -> tuple:
    """``shape`` with its ``-1`` resolved against ``size``; ``ValueError`` if it does not fit."""
    if shape.count(-1) > 1:
        raise ValueError(f"qt.{op}: can only specify one unknown dimension, got {shape}")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ValueError(f"qt.{op}: cannot reshape array of size {size} into shape {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    if any(d < 0 for d in shape) or math.prod(shape) != size:
        raise ValueError(f"qt.{op}: cannot reshape array of size {size} into shape {shape}")
    return shape


def ravel(x) -> Tensor:
    """``numpy.ravel``: the elements as a 1-D tensor, C order: a view of a C-contiguous
    array, a copy otherwise (``reshape(-1)`` views more often, as in NumPy)."""
    t = as_tensor(x, "ravel")
    if not views.is_c_contiguous(t):
        return wrap(reshape_node(t._node, (t.size,)))
    return reshape(t, -1)


def flatten(x) -> Tensor:
    """``ndarray.flatten``: a 1-D copy of the elements (C order)."""
    t = as_tensor(x, "flatten")
    return wrap(reshape_node(t._node, (t.size,)))


def transpose(x, axes=None) -> Tensor:
    """``numpy.transpose``: permute axes (reverse them when ``axes`` is None); a view."""
    t = as_tensor(x, "transpose")
    nd = t.ndim
    if axes is None:
        perm = tuple(reversed(range(nd)))
    else:
        perm = tuple(normalize_axis(a, nd, "transpose") for a in axes)
        if sorted(perm) != list(range(nd)):
            raise ValueError(f"qt.transpose: axes {tuple(axes)} don't match array of dimension {nd}")
    if perm == tuple(range(nd)):
        return views.alias(t)
    return views.view(t, ("transpose", perm))


def permute_dims(x, axes) -> Tensor:
    """``permute_dims`` (Array API; ``numpy.permute_dims``): ``transpose`` with the axes given.

    Example:
        >>> import qtrace as qt
        >>> qt.permute_dims(qt.zeros((2, 3, 4)), (2, 0, 1)).shape
        (4, 2, 3)
    """
    return transpose(x, axes)


def swapaxes(x, axis1: int, axis2: int) -> Tensor:
    """``numpy.swapaxes``."""
    t = as_tensor(x, "swapaxes")
    a = normalize_axis(axis1, t.ndim, "swapaxes")
    b = normalize_axis(axis2, t.ndim, "swapaxes")
    perm = list(range(t.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(t, perm)


def moveaxis(x, source, destination) -> Tensor:
    """``numpy.moveaxis``: move axes (an int or a sequence each) to new positions; a view."""
    t = as_tensor(x, "moveaxis")
    src = source if isinstance(source, (tuple, list)) else (source,)
    dst = destination if isinstance(destination, (tuple, list)) else (destination,)
    if len(src) != len(dst):
        raise ValueError("qt.moveaxis: `source` and `destination` arguments must have the same number "
                         "of elements")
    src = [normalize_axis(a, t.ndim, "moveaxis") for a in src]
    dst = [normalize_axis(a, t.ndim, "moveaxis") for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("qt.moveaxis: repeated axis in `source` or `destination`")
    perm = [a for a in range(t.ndim) if a not in src]
    for d, s_ in sorted(zip(dst, src)):
        perm.insert(d, s_)
    return transpose(t, perm)


def expand_dims(x, axis) -> Tensor:
    """``numpy.expand_dims``: insert size-1 axes."""
    t = as_tensor(x, "expand_dims")
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    nd = t.ndim + len(axes)
    axes = normalize_axes(tuple(axes), nd, "expand_dims")
    it = iter(t.shape)
    shape = tuple(1 if a in axes else next(it) for a in range(nd))
    return reshape(t, shape)


def squeeze(x, axis=None) -> Tensor:
    """``numpy.squeeze``: remove size-1 axes (all of them, or those in ``axis``)."""
    t = as_tensor(x, "squeeze")
    if axis is None:
        axes = tuple(a for a, d in enumerate(t.shape) if d == 1)
    else:
        axes = normalize_axes(axis, t.ndim, "squeeze")
        for a in axes:
            if t.shape[a] != 1:
                raise ValueError(f"qt.squeeze: cannot select an axis to squeeze out which has size "
                                 f"not equal to one (axis {a} of shape {t.shape})")
    return reshape(t, tuple(d for a, d in enumerate(t.shape) if a not in axes))


def broadcast_to(x, shape) -> Tensor:
    """``numpy.broadcast_to``: a read-only broadcast view (writing through it raises)."""
    t = as_tensor(x, "broadcast_to")
    shape = _shape_arg(shape)
    if broadcast_shapes("qt.broadcast_to", t.shape, shape) != shape:
        raise ValueError(f"qt.broadcast_to: cannot broadcast shape {t.shape} to {shape}")
    return views.view(t, ("broadcast", shape))


def broadcast_arrays(*args) -> list:
    """``numpy.broadcast_arrays``."""
    ts = [as_tensor(a, "broadcast_arrays") for a in args]
    shape = broadcast_shapes("qt.broadcast_arrays", *(t.shape for t in ts))
    return [broadcast_to(t, shape) for t in ts]


def slice_view(t: Tensor, starts: tuple, steps: tuple, shape: tuple) -> Tensor:
    """Strided sub-view: element ``i`` of axis ``k`` is input element ``starts[k] + i*steps[k]``."""
    return views.view(t, ("slice", tuple(starts), tuple(steps), tuple(shape)))


def flip(x, axis=None) -> Tensor:
    """``numpy.flip``: reverse the order of elements along ``axis`` (all axes if None); a view."""
    t = as_tensor(x, "flip")
    axes = normalize_axes(axis, t.ndim, "flip")
    starts = tuple(t.shape[a] - 1 if a in axes and t.shape[a] else 0 for a in range(t.ndim))
    steps = tuple(-1 if a in axes else 1 for a in range(t.ndim))
    return slice_view(t, starts, steps, t.shape)


def concatenate(arrays, axis: int | None = 0) -> Tensor:
    """``numpy.concatenate`` (``axis=None`` flattens first).

    Example:
        >>> import qtrace as qt
        >>> qt.concatenate([qt.zeros(2), qt.ones(1)]).tolist()
        [0.0, 0.0, 1.0]
    """
    ts = [as_tensor(a, "concatenate") for a in arrays]
    if not ts:
        raise ValueError("qt.concatenate: need at least one array to concatenate")
    if axis is None:
        ts = [ravel(t) for t in ts]
        axis = 0
    nd = ts[0].ndim
    if nd == 0:
        raise ValueError("qt.concatenate: zero-dimensional arrays cannot be concatenated")
    for t in ts:
        if t.ndim != nd:
            raise ValueError(f"qt.concatenate: all the input arrays must have same number of "
                             f"dimensions, got shapes {[x.shape for x in ts]}")
    ax = normalize_axis(axis, nd, "concatenate")
    for t in ts:
        if t.shape[:ax] + t.shape[ax + 1:] != ts[0].shape[:ax] + ts[0].shape[ax + 1:]:
            raise ValueError(f"qt.concatenate: shapes {[x.shape for x in ts]} differ outside "
                             f"axis {ax}")
    ops = [operand(t, "concatenate") for t in ts]
    dt = promote(ops, "concatenate")
    nodes = place(ops, [dt] * len(ops), "concatenate")
    if len(nodes) == 1:
        return wrap(nodes[0])
    shape = list(ts[0].shape)
    shape[ax] = sum(t.shape[ax] for t in ts)
    return wrap(record("concatenate", tuple(nodes), (ax,), tuple(shape), dt))


def stack(arrays, axis: int = 0) -> Tensor:
    """``numpy.stack``: join along a new axis."""
    ts = [as_tensor(a, "stack") for a in arrays]
    if not ts:
        raise ValueError("qt.stack: need at least one array to stack")
    shapes = {t.shape for t in ts}
    if len(shapes) != 1:
        raise ValueError(f"qt.stack: all input arrays must have the same shape, got {[t.shape for t in ts]}")
    ax = normalize_axis(axis, ts[0].ndim + 1, "stack")
    return concatenate([expand_dims(t, ax) for t in ts], axis=ax)
