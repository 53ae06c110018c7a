"""NumPy's array rearrangements: flips, rotations, insertion and deletion, splits, diagonals.

Every function is built from recorded qtrace operations (nothing is evaluated behind the
caller's back), so it works inside ``qt.jit`` and is differentiated by ``qt.grad``.
``NUMPY_FUNCTIONS`` maps NumPy's functions to these (``__array_function__``),
``NUMPY_UFUNCS`` the NumPy ufuncs among them (``__array_ufunc__``).

Parameters that decide the result's shape (split points, ``resize``'s shape, offsets) must
be concrete. Where the shape depends on a tensor's values — ``delete``'s ``obj`` (how many
distinct indices), a boolean ``obj`` of ``insert``, the data of ``trim_zeros`` — that
tensor is evaluated eagerly outside ``qt.jit``, and a ``qt.TracerError`` naming the
function is raised inside it. An integer tensor ``obj`` of ``insert`` stays lazy (only its
shape decides the result's). ``diagonal`` is a read-only view, as in NumPy.

Example:
    >>> import qtrace as qt
    >>> qt.rot90(qt.arange(4).reshape(2, 2)).tolist()
    [[1, 3], [0, 2]]
    >>> qt.insert(qt.arange(3), 1, 9).tolist()
    [0, 9, 1, 2]
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import TracerError
from . import dtypes, views
from . import elementwise as _ew
from . import reductions as _red
from .composites import (
    _along,
    _holds_tensor,
    _int,
    _ints,
    _split,
    _tensor,
    _written_values,
    diag,
    read_only_diagonal,
)
from .context import tracing
from .convert import astype
from .creation import arange, copy, zeros
from .shape_ops import (
    broadcast_to,
    concatenate,
    flip,
    moveaxis,
    normalize_axes,
    normalize_axis,
    ravel,
    reshape,
    transpose,
)
from .sorting import argsort
from .tensor import Tensor


def _concrete(x, op: str, what: str) -> np.ndarray:
    """The values of ``x`` now (a tensor is evaluated: the result's shape depends on them);
    inside ``qt.jit`` a tensor is refused by name."""
    if isinstance(x, Tensor):
        if tracing():
            raise TracerError(f"qt.{op}: {what} decides the result's shape, which a function traced "
                              f"by qt.jit cannot take from a traced value; pass it as a static "
                              f"Python/NumPy value, or call qt.{op} outside qt.jit")
    return np.asarray(x)


# --- flips and rotations ---------------------------------------------------------------
def fliplr(m) -> Tensor:
    """``numpy.fliplr``: reverse the order of the columns (axis 1); a view. Needs at least 2-D.

    Example:
        >>> import qtrace as qt
        >>> qt.fliplr(qt.arange(4).reshape(2, 2)).tolist()
        [[1, 0], [3, 2]]
    """
    t = _tensor(m, "fliplr")
    if t.ndim < 2:
        raise ValueError(f"qt.fliplr: input must be >= 2-d, got shape {t.shape}")
    return flip(t, 1)


def flipud(m) -> Tensor:
    """``numpy.flipud``: reverse the order of the rows (axis 0); a view. Needs at least 1-D.

    Example:
        >>> import qtrace as qt
        >>> qt.flipud(qt.arange(3)).tolist()
        [2, 1, 0]
    """
    t = _tensor(m, "flipud")
    if t.ndim < 1:
        raise ValueError("qt.flipud: input must be >= 1-d, got shape ()")
    return flip(t, 0)


def rot90(m, k=1, axes=(0, 1)) -> Tensor:
    """``numpy.rot90``: rotate by 90 degrees ``k`` times in the plane of ``axes`` (from the
    first axis towards the second); a view.

    Example:
        >>> import qtrace as qt
        >>> qt.rot90(qt.arange(4).reshape(2, 2), k=-1).tolist()
        [[2, 0], [3, 1]]
    """
    t = _tensor(m, "rot90")
    axes = _ints(axes, "rot90", "axes")
    if len(axes) != 2:
        raise ValueError(f"qt.rot90: len(axes) must be 2, got axes {axes}")
    nd = t.ndim
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == nd:
        raise ValueError(f"qt.rot90: axes must be different, got axes {axes}")
    if not all(-nd <= a < nd for a in axes):
        raise ValueError(f"qt.rot90: axes={axes} out of range for array of ndim={nd}")
    a0, a1 = axes[0] % nd, axes[1] % nd
    k = _int(k, "rot90", "k") % 4
    if k == 0:
        return views.alias(t)
    if k == 2:
        return flip(t, (a0, a1))
    perm = list(range(nd))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return transpose(flip(t, a1), perm)
    return flip(transpose(t, perm), a1)


def rollaxis(a, axis, start=0) -> Tensor:
    """``numpy.rollaxis``: move ``axis`` to sit before position ``start``; a view
    (``numpy.moveaxis`` is the clearer spelling).

    Example:
        >>> import qtrace as qt
        >>> qt.rollaxis(qt.zeros((2, 3, 4)), 2).shape
        (4, 2, 3)
    """
    t = _tensor(a, "rollaxis")
    n = t.ndim
    ax = normalize_axis(axis, n, "rollaxis")
    start = _int(start, "rollaxis", "start")
    if start < 0:
        start += n
    if not 0 <= start < n + 1:
        raise np.exceptions.AxisError(f"qt.rollaxis: 'start' arg requires {-n} <= start < {n + 1}, "
                                      f"but {start} was passed in")
    if ax < start:
        start -= 1
    if ax == start:
        return views.alias(t)
    perm = [i for i in range(n) if i != ax]
    perm.insert(start, ax)
    return transpose(t, perm)


# --- appending, deleting, inserting ----------------------------------------------------
def append(arr, values, axis=None) -> Tensor:
    """``numpy.append``: ``values`` joined to the end of ``arr`` (both flattened when ``axis``
    is None; otherwise the shapes must match except along ``axis``). Always a new tensor.

    Example:
        >>> import qtrace as qt
        >>> qt.append(qt.arange(2), [[5, 6]]).tolist()
        [0, 1, 5, 6]
    """
    t, v = _tensor(arr, "append"), _tensor(values, "append")
    if axis is None:
        return concatenate([ravel(t), ravel(v)])
    if t.ndim == 0:
        raise ValueError("qt.append: zero-dimensional arrays cannot be concatenated (arr has shape ())")
    ax = normalize_axis(axis, t.ndim, "append")
    if v.ndim != t.ndim:
        raise ValueError(f"qt.append: all the input arrays must have same number of dimensions, "
                         f"but arr has shape {t.shape} and values has shape {v.shape}")
    return concatenate([t, v], ax)


def _index_values(obj, op: str) -> np.ndarray:
    """``obj`` of ``delete``/``insert`` (not a slice) as a NumPy array (a tensor evaluated)."""
    idx = _concrete(obj, op, "obj")
    if idx.dtype.kind not in "iub" and idx.size:
        raise IndexError(f"qt.{op}: obj must be integers or booleans (arrays used as indices must "
                         f"be of integer or boolean type), got {idx.dtype}")
    return idx


def _flat_or_axis(arr, axis, op: str) -> tuple:
    """``(t, ax)``: ``arr`` as a tensor and the axis ``op`` works along — the flattened
    array's only axis for ``axis=None``, as NumPy's ``delete``/``insert``."""
    t = _tensor(arr, op)
    if axis is None:
        return (ravel(t) if t.ndim != 1 else t), 0
    return t, normalize_axis(axis, t.ndim, op)


def delete(arr, obj, axis=None) -> Tensor:
    """``numpy.delete``: ``arr`` without the sub-arrays at ``obj`` (an index, a slice, an
    integer array, or a boolean mask as long as the axis) along ``axis`` (flattened if None).

    A new tensor (a copy of one slice, or a gather); the gradient flows to ``arr``.
    A tensor ``obj`` is evaluated (the result's shape depends on it): not inside ``qt.jit``.

    Example:
        >>> import qtrace as qt
        >>> qt.delete(qt.arange(6).reshape(2, 3), [0, 2], axis=1).tolist()
        [[1], [4]]
    """
    t, ax = _flat_or_axis(arr, axis, "delete")
    n = t.shape[ax]
    keep = np.ones(n, dtype=bool)
    if isinstance(obj, slice):
        keep[obj] = False
    else:
        idx = _index_values(obj, "delete")
        if idx.dtype == np.bool_:
            if idx.shape != (n,):
                raise ValueError(f"qt.delete: boolean array argument obj to delete must be one "
                                 f"dimensional and match the axis length of {n}, got shape {idx.shape}")
            keep = ~idx
        else:
            idx = idx.astype(np.int64).reshape(-1)
            bad = (idx < -n) | (idx >= n)
            if bad.any():
                raise IndexError(f"qt.delete: index {int(idx[bad][0])} is out of bounds for axis {ax} "
                                 f"with size {n}")
            keep[idx] = False
    kept = np.flatnonzero(keep)
    if kept.size == 0:
        return copy(_along(t, ax, slice(0, 0)))
    step = int(kept[1] - kept[0]) if kept.size > 1 else 1
    if step > 0 and np.array_equal(np.diff(kept), np.full(kept.size - 1, step)):
        return copy(_along(t, ax, slice(int(kept[0]), int(kept[-1]) + 1, step)))
    return _along(t, ax, kept)


def insert(arr, obj, values, axis=None) -> Tensor:
    """``numpy.insert``: ``values`` inserted before the index or indices ``obj`` along
    ``axis`` (flattened if None); always a new tensor.

    ``obj`` is an integer, a slice, an integer sequence or a boolean mask (its ``True``
    positions); ``values`` are cast to ``arr``'s dtype as NumPy casts them and broadcast
    the way NumPy's assignment broadcasts them. The result joins ``arr`` and ``values``
    (a concatenation or gather), so gradients flow to both.

    An integer tensor ``obj`` stays lazy (the result's shape depends only on its shape),
    also inside ``qt.jit``; its values are not checked (that would need them): an index
    out of range is clipped into ``[-n, n]``. A boolean tensor ``obj`` is evaluated (its
    ``True`` count decides the shape): not inside ``qt.jit``.

    Example:
        >>> import qtrace as qt
        >>> qt.insert(qt.arange(4), [1, 3], [8, 9]).tolist()
        [0, 8, 1, 2, 9, 3]
    """
    t, ax = _flat_or_axis(arr, axis, "insert")
    n = t.shape[ax]
    v = _written_values(values, t.dtype, "insert", t.device)
    if v.dtype != t.dtype:
        v = astype(v, t.dtype)
    if v.ndim < t.ndim:
        v = reshape(v, (1,) * (t.ndim - v.ndim) + v.shape)
    if isinstance(obj, Tensor) and obj.dtype.kind in "iu":
        if obj.ndim > 1:
            raise ValueError(f"qt.insert: index array argument obj to insert must be one dimensional "
                             f"or scalar, got shape {obj.shape}")
        idx = astype(reshape(obj, (obj.size,)), dtypes.int64)
        idx = _ew.clip(_ew.where(_ew.apply("less", idx, 0), _ew.apply("add", idx, n), idx), 0, n)
        if obj.size == 1:
            v = _fit(moveaxis(v, 0, ax) if obj.ndim == 0 else v, ax, t.shape, None)
            pos = _ew.apply("add", idx, arange(v.shape[ax]))
        else:
            v = _fit(v, ax, t.shape, obj.size)
            pos = _ew.apply("add", idx, argsort(argsort(idx)))  # each shifted by those before it
        return _merge(t, v, ax, pos)
    if isinstance(obj, slice):
        idx = np.arange(*obj.indices(n), dtype=np.int64)
    else:
        if np.ndim(obj) == 0 and not isinstance(obj, (Tensor, int, np.integer)):
            raise TypeError(f"qt.insert: obj must be an integer, a slice or a sequence, got {obj!r}")
        idx = _index_values(obj, "insert")
        if idx.dtype == np.bool_:
            if idx.ndim != 1:
                raise ValueError(f"qt.insert: boolean array argument obj to insert must be one "
                                 f"dimensional, got shape {idx.shape}")
            idx = np.flatnonzero(idx)
        elif idx.ndim > 1:
            raise ValueError(f"qt.insert: index array argument obj to insert must be one dimensional "
                             f"or scalar, got shape {idx.shape}")
        idx = idx.astype(np.int64)
    bad = (idx < -n) | (idx > n)
    if bad.any():
        raise IndexError(f"qt.insert: index {int(idx[bad][0])} is out of bounds for axis {ax} with "
                         f"size {n}")
    idx = np.where(idx < 0, idx + n, idx)
    if idx.size == 1:
        index = int(idx.reshape(-1)[0])
        v = _fit(moveaxis(v, 0, ax) if idx.ndim == 0 else v, ax, t.shape, None)
        return concatenate([_along(t, ax, slice(0, index)), v, _along(t, ax, slice(index, None))], ax)
    count = idx.size
    v = _fit(v, ax, t.shape, count)
    if count == 0:
        return copy(t)
    pos = idx.copy()
    pos[np.argsort(idx, kind="stable")] += np.arange(count)
    source = np.empty(n + count, dtype=np.int64)  # position in concatenate([arr, values])
    is_new = np.zeros(n + count, dtype=bool)
    is_new[pos] = True
    source[~is_new] = np.arange(n)
    source[pos] = n + np.arange(count)
    return _along(concatenate([t, v], ax), ax, source)


def _merge(t: Tensor, v: Tensor, ax: int, pos: Tensor) -> Tensor:
    """``t`` with the slices of ``v`` along ``ax`` at the (distinct) result positions ``pos``
    (a traced tensor), the slices of ``t`` in order around them: a gather from both."""
    n, count = t.shape[ax], pos.shape[0]
    at = reshape(arange(n + count), (n + count, 1))
    hit = _ew.apply("equal", at, reshape(pos, (1, count)))
    before = _red.sum(_ew.apply("less", reshape(pos, (1, count)), at), axis=1, dtype=dtypes.int64)
    which = _red.sum(_ew.where(hit, reshape(arange(count), (1, count)), 0), axis=1)  # (one hit at most)
    source = _ew.where(_red.any(hit, axis=1), _ew.apply("add", which, n),
                       _ew.apply("subtract", arange(n + count), before))
    return _along(concatenate([t, v], ax), ax, source)


def _fit(v: Tensor, ax: int, shape: tuple, count) -> Tensor:
    """``v`` broadcast to ``shape`` with ``count`` (``v``'s own length if None) along ``ax``,
    as an assignment broadcasts (leading size-1 axes of ``v`` may be dropped)."""
    shape = shape[:ax] + (v.shape[ax] if count is None else count,) + shape[ax + 1:]
    while v.ndim > len(shape) and v.shape[0] == 1:
        v = reshape(v, v.shape[1:])
    try:
        ok = np.broadcast_shapes(v.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"qt.insert: could not broadcast values of shape {v.shape} into shape {shape}")
    return broadcast_to(v, shape) if v.shape != shape else v


# --- diagonals -------------------------------------------------------------------------
def diagonal(a, offset=0, axis1=0, axis2=1) -> Tensor:
    """``numpy.diagonal``: the ``offset`` diagonal of axes ``axis1``/``axis2``, as the last
    axis (the other axes first, in order).

    As in NumPy the result is a read-only view: it follows later writes to ``a``, and a
    write through it raises ``ValueError`` (copy it first to get a writable array).

    Example:
        >>> import qtrace as qt
        >>> qt.diagonal(qt.arange(9).reshape(3, 3), offset=1).tolist()
        [1, 5]
    """
    t = _tensor(a, "diagonal")
    if t.ndim < 2:
        raise ValueError(f"qt.diagonal: diag requires an array of at least two dimensions, got "
                         f"shape {t.shape}")
    return read_only_diagonal(t, _int(offset, "diagonal", "offset"), axis1, axis2, "diagonal")


def diagflat(v, k=0) -> Tensor:
    """``numpy.diagflat``: a 2-D array with the flattened input on its ``k``-th diagonal.

    Example:
        >>> import qtrace as qt
        >>> qt.diagflat(qt.asarray([[1, 2]]), k=-1).tolist()
        [[0, 0, 0], [1, 0, 0], [0, 2, 0]]
    """
    return diag(ravel(_tensor(v, "diagflat")), _int(k, "diagflat", "k"))


# --- block -----------------------------------------------------------------------------
def _block_depth(x, index: list) -> tuple:
    """``(index path of the first leaf, list depth, largest leaf ndim)`` of nested lists."""
    if type(x) is tuple:
        raise TypeError(f"qt.block: {_where(index)} is a tuple. Only lists can be used to arrange "
                        "blocks, and qt.block does not allow implicit conversion from tuple to ndarray")
    if type(x) is not list:
        return index, len(index), _tensor(x, "block").ndim
    if not x:
        raise ValueError(f"qt.block: List at {_where(index)} cannot be empty")
    first, depth, nd = _block_depth(x[0], index + [0])
    for i, item in enumerate(x[1:], 1):
        where, d, n = _block_depth(item, index + [i])
        if d != depth:
            raise ValueError(f"qt.block: List depths are mismatched. First element was at depth "
                             f"{depth}, but there is an element at depth {d} ({_where(where)})")
        nd = max(nd, n)
    return first, depth, nd


def _where(index: list) -> str:
    return "arrays" + "".join(f"[{i}]" for i in index)


def _block_join(x, depth: int, list_depth: int, nd: int) -> Tensor:
    if depth == list_depth:
        t = _tensor(x, "block")
        return reshape(t, (1,) * (nd - t.ndim) + t.shape)
    parts = [_block_join(item, depth + 1, list_depth, nd) for item in x]
    ax = nd - (list_depth - depth)
    ref = parts[0].shape
    for p in parts[1:]:
        if p.shape[:ax] + p.shape[ax + 1:] != ref[:ax] + ref[ax + 1:]:
            raise ValueError(f"qt.block: all the input array dimensions except for the concatenation "
                             f"axis {ax} must match, got shapes {[q.shape for q in parts]}")
    return concatenate(parts, ax)


def block(arrays) -> Tensor:
    """``numpy.block``: assemble an array from nested lists of blocks (the innermost lists
    join along the last axis, the next along the one before, ...). Tuples are refused, as
    in NumPy; list depths must match.

    Example:
        >>> import qtrace as qt
        >>> qt.block([[qt.eye(2), qt.zeros((2, 1))], [qt.ones((1, 3))]]).shape
        (3, 3)
    """
    _, list_depth, nd = _block_depth(arrays, [])
    return copy(_block_join(arrays, 0, list_depth, max(nd, list_depth)))  # (never a view)


# --- splits ----------------------------------------------------------------------------
def vsplit(ary, indices_or_sections) -> list:
    """``numpy.vsplit``: ``split`` along axis 0 (needs at least 2-D).

    Example:
        >>> import qtrace as qt
        >>> [p.shape for p in qt.vsplit(qt.zeros((4, 2)), 2)]
        [(2, 2), (2, 2)]
    """
    t = _tensor(ary, "vsplit")
    if t.ndim < 2:
        raise ValueError(f"qt.vsplit: vsplit only works on arrays of 2 or more dimensions, got shape "
                         f"{t.shape}")
    return _split(t, indices_or_sections, 0, "split")


def hsplit(ary, indices_or_sections) -> list:
    """``numpy.hsplit``: ``split`` along axis 1 (axis 0 for 1-D inputs).

    Example:
        >>> import qtrace as qt
        >>> [p.tolist() for p in qt.hsplit(qt.arange(4), [1])]
        [[0], [1, 2, 3]]
    """
    t = _tensor(ary, "hsplit")
    if t.ndim == 0:
        raise ValueError("qt.hsplit: hsplit only works on arrays of 1 or more dimensions, got shape ()")
    return _split(t, indices_or_sections, 1 if t.ndim > 1 else 0, "split")


def dsplit(ary, indices_or_sections) -> list:
    """``numpy.dsplit``: ``split`` along axis 2 (needs at least 3-D).

    Example:
        >>> import qtrace as qt
        >>> [p.shape for p in qt.dsplit(qt.zeros((1, 2, 4)), 2)]
        [(1, 2, 2), (1, 2, 2)]
    """
    t = _tensor(ary, "dsplit")
    if t.ndim < 3:
        raise ValueError(f"qt.dsplit: dsplit only works on arrays of 3 or more dimensions, got shape "
                         f"{t.shape}")
    return _split(t, indices_or_sections, 2, "split")


# --- differences, resizing, trimming ---------------------------------------------------
def ediff1d(ary, to_end=None, to_begin=None) -> Tensor:
    """``numpy.ediff1d``: differences of consecutive elements of the flattened input, with
    ``to_begin``/``to_end`` (cast to the input's dtype; ``same_kind`` required) around them.
    Boolean input is refused, as NumPy refuses subtracting booleans.

    Example:
        >>> import qtrace as qt
        >>> qt.ediff1d(qt.asarray([1, 4, 9]), to_begin=0).tolist()
        [0, 3, 5]
    """
    t = ravel(_tensor(ary, "ediff1d"))
    if t.dtype == dtypes.bool_:
        raise TypeError("qt.ediff1d: numpy boolean subtract, the `-` operator, is not supported for "
                        "the bool input; use a different dtype")
    m = t.shape[0]
    parts = [_ew.apply("subtract", _along(t, 0, slice(1, None)), _along(t, 0, slice(0, max(m - 1, 0))))]
    for extra, name, first in ((to_begin, "to_begin", True), (to_end, "to_end", False)):
        if extra is None:
            continue
        e = ravel(_tensor(extra, "ediff1d"))
        if not np.can_cast(e.dtype, t.dtype, casting="same_kind"):
            raise TypeError(f"qt.ediff1d: dtype of `{name}` ({e.dtype}) must be compatible with input "
                            f"`ary` ({t.dtype}) under the `same_kind` rule")
        e = astype(e, t.dtype) if e.dtype != t.dtype else e
        parts.insert(0, e) if first else parts.append(e)
    return concatenate(parts) if len(parts) > 1 else parts[0]


def resize(a, new_shape) -> Tensor:
    """``numpy.resize`` (the function): the flattened input repeated (or cut) to fill
    ``new_shape``; zeros if the input is empty. (The method ``ndarray.resize``, which
    changes an array in place, is not this.)

    Example:
        >>> import qtrace as qt
        >>> qt.resize(qt.arange(3), (2, 4)).tolist()
        [[0, 1, 2, 0], [1, 2, 0, 1]]
    """
    t = ravel(_tensor(a, "resize"))
    shape = _ints(new_shape, "resize", "new_shape")
    if any(d < 0 for d in shape):
        raise ValueError(f"qt.resize: all elements of `new_shape` must be non-negative, got {shape}")
    size = math.prod(shape)
    if t.size == 0 or size == 0:
        return zeros(shape, t.dtype, t.device)
    reps = -(-size // t.size)
    if reps > 1:
        t = reshape(broadcast_to(reshape(t, (1, t.size)), (reps, t.size)), (reps * t.size,))
    if t.size != size:
        t = t[:size]
    return copy(reshape(t, shape))   # (a new array, never a view of the input)


def trim_zeros(filt, trim="fb", axis=None) -> Tensor:
    """``numpy.trim_zeros``: drop the leading (``'f'``) and/or trailing (``'b'``) zeros along
    ``axis`` (all axes if None: the bounding box of the non-zero elements).

    The result is a slice (a view; gradients flow to ``filt``), but where it starts and
    ends depends on the values: ``filt`` is evaluated to find them, so this cannot be
    traced by ``qt.jit`` (``qt.TracerError``). Returns a tensor also for list input.

    Example:
        >>> import qtrace as qt
        >>> qt.trim_zeros(qt.asarray([0, 0, 1, 2, 0])).tolist()
        [1, 2]
    """
    t = _tensor(filt, "trim_zeros")
    if not isinstance(trim, str) or trim.lower() not in ("fb", "bf", "f", "b"):
        raise ValueError(f"qt.trim_zeros: unexpected character(s) in `trim`: {trim!r}")
    trim = trim.lower()
    axes = normalize_axes(axis, t.ndim, "trim_zeros")
    if not axes:
        return t
    if tracing():
        raise TracerError("qt.trim_zeros: the result's shape depends on the data, which a function "
                          "traced by qt.jit cannot have; call it outside qt.jit")
    found = np.argwhere(np.asarray(t))
    if found.size == 0:
        key = tuple(slice(0, 0) if ax in axes else slice(None) for ax in range(t.ndim))
        return t[key]
    lo, hi = found.min(axis=0), found.max(axis=0) + 1
    key = tuple(slice(int(lo[ax]) if "f" in trim else None, int(hi[ax]) if "b" in trim else None)
                if ax in axes else slice(None) for ax in range(t.ndim))
    return t[key]


# --- what an array is ------------------------------------------------------------------
def ndim(a) -> int:
    """``numpy.ndim``: the number of dimensions of ``a`` (any array-like), a Python int.

    Example:
        >>> import qtrace as qt
        >>> qt.ndim(qt.zeros((2, 3))), qt.ndim([[1, 2]]), qt.ndim(5.0)
        (2, 2, 0)
    """
    if isinstance(a, Tensor) or _holds_tensor(a):
        return _tensor(a, "ndim").ndim
    return np.ndim(a)


def shape(a) -> tuple:
    """``numpy.shape``: the shape of ``a`` (any array-like), a tuple of Python ints.

    Example:
        >>> import qtrace as qt
        >>> qt.shape(qt.zeros((2, 3))), qt.shape([1, 2, 3])
        ((2, 3), (3,))
    """
    if isinstance(a, Tensor) or _holds_tensor(a):
        return _tensor(a, "shape").shape
    return np.shape(a)


def size(a, axis=None) -> int:
    """``numpy.size``: the number of elements of ``a`` (any array-like), or along ``axis``
    (an int, or a tuple of ints whose lengths multiply), a Python int.

    Example:
        >>> import qtrace as qt
        >>> qt.size(qt.zeros((2, 3))), qt.size(qt.zeros((2, 3)), axis=1)
        (6, 3)
    """
    if _holds_tensor(a):   # (a list of tensors: stacked lazily, never evaluated)
        a = _tensor(a, "size")
    if not isinstance(a, Tensor):
        return np.size(a, axis)
    if axis is None:
        return a.size
    axes = axis if isinstance(axis, tuple) else (axis,)
    return math.prod(a.shape[normalize_axis(ax, a.ndim, "size")] for ax in axes)


def isscalar(element) -> bool:
    """``numpy.isscalar``: whether ``element`` is a scalar (a Python or NumPy number, string,
    ...). A tensor is never one, a 0-d tensor included (as a 0-d NumPy array is not).

    Example:
        >>> import qtrace as qt
        >>> qt.isscalar(3.0), qt.isscalar(qt.asarray(3.0))
        (True, False)
    """
    if isinstance(element, Tensor):
        return False
    return bool(np.isscalar(element))


NUMPY_FUNCTIONS = {
    np.fliplr: fliplr, np.flipud: flipud, np.rot90: rot90, np.append: append, np.delete: delete,
    np.insert: insert, np.rollaxis: rollaxis, np.diagonal: diagonal, np.diagflat: diagflat,
    np.block: block, np.vsplit: vsplit, np.hsplit: hsplit, np.dsplit: dsplit,
    np.ediff1d: ediff1d, np.resize: resize, np.trim_zeros: trim_zeros, np.ndim: ndim,
    np.shape: shape, np.size: size, np.isscalar: isscalar,
}
NUMPY_UFUNCS: dict = {}

__all__: list[str] = [
    "append", "block", "delete", "diagflat", "diagonal", "dsplit", "ediff1d", "fliplr", "flipud",
    "hsplit", "insert", "isscalar", "ndim", "resize", "rollaxis", "rot90", "shape", "size",
    "trim_zeros", "vsplit",
]
