"""NumPy indexing: ``x[key]``, ``x[key] = v`` and JAX-style ``x.at[key].set/add/...``.

Basic indices (integers, slices with steps, ``None``, ``...``) become views. When the
key holds integer arrays (or boolean masks, in eager code), every indexed axis is
described by an integer coordinate tensor of the result's shape — slices contribute a
broadcast ``arange``, integers a constant, arrays themselves placed where NumPy puts
advanced-index dimensions — and the access becomes one ``gather`` (or ``scatter``)
over those coordinates. Coordinates are bounds-checked in the kernel: nothing outside
a buffer is ever read or written, and an out-of-range index raises ``IndexError``
naming the operation at evaluation (``qt.config.check_bounds = False`` skips the report).
"""

from __future__ import annotations

import operator

import numpy as np

from ..errors import TracerError
from .context import record, tracing
from .convert import cast, const_node, input_node, operand, wrap
from .elementwise import apply
from .shape_ops import as_tensor, broadcast_to, reshape, slice_view
from .tensor import Tensor

SCATTER_MODES = ("set", "add", "multiply", "min", "max")


def _is_bool_array(k) -> bool:
    if isinstance(k, Tensor):
        return k.dtype == np.bool_
    if isinstance(k, np.ndarray):
        return k.dtype == np.bool_
    if isinstance(k, list):
        arr = np.asarray(k)
        return arr.dtype == np.bool_ and arr.ndim > 0
    return False


def _is_array(k) -> bool:
    return isinstance(k, (Tensor, np.ndarray, list))


def _expand(key, ndim: int, op: str) -> list:
    """The key as a list of entries with the ellipsis expanded and masks turned into arrays."""
    if not isinstance(key, tuple):
        key = (key,)
    entries = []
    for k in key:
        if _is_bool_array(k) or isinstance(k, (bool, np.bool_)):
            if tracing():
                raise TracerError(
                    f"{op}: boolean mask indexing inside qt.jit gives a result whose shape depends "
                    "on data; use qt.where(mask, x, other) instead")
            mask = np.asarray(k.numpy() if isinstance(k, Tensor) else k, dtype=bool)
            if mask.ndim == 0:  # a new axis of length 1 or 0, indexed like an advanced index
                entries.append(("sbool", bool(mask)))
                continue
            entries.extend(np.nonzero(mask))
            entries[-mask.ndim:] = [("mask", a, mask.shape[i]) for i, a in enumerate(entries[-mask.ndim:])]
        else:
            entries.append(k)
    n_ellipsis = sum(1 for k in entries if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in entries if k is not None and k is not Ellipsis and not _marker(k, "sbool"))
    if consumed > ndim:
        raise IndexError(f"{op}: too many indices for array: array is {ndim}-dimensional, "
                         f"but {consumed} were indexed")
    if n_ellipsis:
        i = next(j for j, k in enumerate(entries) if k is Ellipsis)
        # an ellipsis standing for no axes still separates advanced indices (NumPy)
        entries[i:i + 1] = [slice(None)] * (ndim - consumed) or [("sep",)]
    else:
        entries.extend([slice(None)] * (ndim - consumed))
    return entries


def _marker(k, name: str) -> bool:
    return isinstance(k, tuple) and len(k) > 0 and k[0] == name


def _int_index(k, size: int, axis: int, op: str) -> int:
    try:
        i = operator.index(k)
    except TypeError:
        raise IndexError(f"{op}: only integers, slices (`:`), ellipsis (`...`), None and integer "
                         f"or boolean arrays are valid indices, got {type(k).__name__}") from None
    if not -size <= i < size:
        raise IndexError(f"{op}: index {i} is out of bounds for axis {axis} with size {size}")
    return i % size


def _index_tensor(k, op: str) -> Tensor:
    if isinstance(k, tuple) and k and k[0] == "mask":
        k = k[1]
    t = k if isinstance(k, Tensor) else wrap(input_node(np.asarray(k), op))
    if t.dtype.kind not in "iu":
        raise IndexError(f"{op}: arrays used as indices must be of integer (or boolean) type, "
                         f"got {t.dtype}")
    return t


def _plan(x: Tensor, key, op: str, coords_always: bool = False):
    """Decompose ``key``: a basic view, or (result shape, one coordinate tensor per axis of x).

    With ``coords_always`` a basic key is described by coordinates too (for scatters).
    """
    entries = _expand(key, x.ndim, op)
    kinds = ["none" if k is None else "sep" if _marker(k, "sep") else "sbool" if _marker(k, "sbool")
             else "slice" if isinstance(k, slice)
             else "array" if _is_array(k) or _marker(k, "mask")
             else "int" for k in entries]
    has_arrays = "array" in kinds or "sbool" in kinds
    if not has_arrays and not coords_always:
        return _basic(x, entries, op), None
    # integers count as (0-d) advanced indices once any array is present (NumPy's rule)
    adv = [i for i, kind in enumerate(kinds)
           if kind in ("array", "sbool") or (has_arrays and kind == "int")]
    adjacent = not adv or adv == list(range(adv[0], adv[-1] + 1))
    fixed, axis_of = {}, {}
    axis = 0
    for i, k in enumerate(entries):
        if kinds[i] in ("none", "sep"):
            continue
        if kinds[i] == "sbool":  # no axis of x: only a (1,) or (0,) broadcast shape
            fixed[i] = (1,) if k[1] else (0,)
            continue
        axis_of[i] = axis
        size = x.shape[axis]
        if kinds[i] == "array":
            fixed[i] = _index_tensor(k, op)
        elif kinds[i] == "int":
            fixed[i] = _int_index(k, size, axis, op)
        else:
            fixed[i] = range(*k.indices(size))
        axis += 1
    bshape = tuple(np.broadcast_shapes(*[fixed[i].shape if isinstance(fixed[i], Tensor)
                                         else fixed[i] if kinds[i] == "sbool" else ()
                                         for i in adv]))
    shape, where = [], {}
    if adv and not adjacent:
        where["B"] = 0
        shape.extend(bshape)
    for i, kind in enumerate(kinds):
        if kind == "none":
            shape.append(1)
        elif kind == "slice":
            where[i] = len(shape)
            shape.append(len(fixed[i]))
        elif i in adv and adjacent and i == adv[0]:
            where["B"] = len(shape)
            shape.extend(bshape)
    shape = tuple(shape)
    coords = []
    for i, kind in enumerate(kinds):
        if kind in ("none", "sep", "sbool"):
            continue
        f = fixed[i]
        if isinstance(f, range):
            pos = where[i]
            a = np.arange(f.start, f.stop, f.step, dtype=np.int64)
            a = wrap(input_node(a.reshape((1,) * pos + (len(f),) + (1,) * (len(shape) - pos - 1)), op))
        elif isinstance(f, Tensor):
            lead = where["B"]
            trail = len(shape) - lead - len(bshape)
            a = reshape(broadcast_to(f, bshape), (1,) * lead + bshape + (1,) * trail)
        else:
            a = wrap(input_node(np.array(f, dtype=np.int64), op))
        coords.append(broadcast_to(a, shape))
    return None, (shape, coords)


def _basic(x: Tensor, entries: list, op: str) -> Tensor:
    starts, steps, dims, out_shape = [], [], [], []
    axis = 0
    for k in entries:
        if k is None:
            out_shape.append(1)
            continue
        if _marker(k, "sep"):
            continue
        size = x.shape[axis]
        if isinstance(k, slice):
            r = range(*k.indices(size))
            starts.append(r.start if len(r) else 0)
            steps.append(r.step)
            dims.append(len(r))
            out_shape.append(len(r))
        else:
            starts.append(_int_index(k, size, axis, op))
            steps.append(1)
            dims.append(1)
        axis += 1
    view = slice_view(x, tuple(starts), tuple(steps), tuple(dims))
    return reshape(view, tuple(out_shape))


def getitem(x, key) -> Tensor:
    """``x[key]`` with NumPy semantics (views for basic indices, a gather for arrays)."""
    t = as_tensor(x, "getitem")
    view, adv = _plan(t, key, "qt.Tensor.__getitem__")
    if view is not None:
        return view
    shape, coords = adv
    nodes = (t._node,) + tuple(c._node for c in coords)
    return wrap(record("gather", nodes, (), shape, t.dtype, weak=t._node.weak))


def scatter(x, key, values, mode: str) -> Tensor:
    """A copy of ``x`` with ``x[key]`` combined with ``values`` by ``mode`` (see ``.at``)."""
    if mode not in SCATTER_MODES:
        raise ValueError(f"qt scatter: unknown mode {mode!r}")
    op = f"qt.Tensor.at[...].{mode}"
    t = as_tensor(x, op)
    _, (shape, coords) = _plan(t, key, op, coords_always=True)
    v = operand(values, op)
    v_node = v.node if v.node is not None else const_node(v.value, t.dtype, t.device)
    v_node = cast(v_node, t.dtype, weak=False)
    try:
        v_t = broadcast_to(wrap(v_node), shape)
    except ValueError:
        raise ValueError(f"{op}: values of shape {v_node.shape} cannot be broadcast to the indexed "
                         f"shape {shape}") from None
    if t.ndim == 0:
        return wrap(v_t._node) if mode == "set" else _scalar_update(t, v_t, mode)
    nodes = (t._node, v_t._node) + tuple(c._node for c in coords)
    return wrap(record("scatter", nodes, (mode,), t.shape, t.dtype, weak=t._node.weak))


def _scalar_update(t: Tensor, v: Tensor, mode: str) -> Tensor:
    fn = {"add": "add", "multiply": "multiply", "min": "minimum", "max": "maximum"}[mode]
    return apply(fn, t, v)


class _AtIndex:
    __slots__ = ("_x", "_key")

    def __init__(self, x, key):
        self._x, self._key = x, key

    def set(self, values) -> Tensor:
        """A copy with ``x[key] = values`` (duplicates: one of the values wins)."""
        return scatter(self._x, self._key, values, "set")

    def add(self, values) -> Tensor:
        """A copy with ``values`` added at ``key``; repeated indices accumulate."""
        return scatter(self._x, self._key, values, "add")

    def multiply(self, values) -> Tensor:
        """A copy with elements at ``key`` multiplied by ``values`` (duplicates accumulate)."""
        return scatter(self._x, self._key, values, "multiply")

    def min(self, values) -> Tensor:
        """A copy with ``minimum(x[key], values)`` at ``key``."""
        return scatter(self._x, self._key, values, "min")

    def max(self, values) -> Tensor:
        """A copy with ``maximum(x[key], values)`` at ``key``."""
        return scatter(self._x, self._key, values, "max")

    def get(self) -> Tensor:
        return getitem(self._x, self._key)


class AtProperty:
    """``x.at[key]``: functional updates in JAX's spelling.

    Example:
        >>> import qtrace as qt
        >>> qt.zeros(3).at[qt.asarray([0, 0, 2])].add(1.0).tolist()
        [2.0, 0.0, 1.0]
    """

    __slots__ = ("_x",)

    def __init__(self, x):
        self._x = x

    def __getitem__(self, key) -> _AtIndex:
        return _AtIndex(self._x, key)


def setitem(x: Tensor, key, value) -> None:
    """``x[key] = value``: rebinds ``x`` to an updated copy (other references keep the old value)."""
    x._node = scatter(x, key, value, "set")._node


def gather_at(x: Tensor, coords: list) -> Tensor:
    """``x`` read at integer coordinate tensors (one per axis, all of the result's shape)."""
    nodes = (x._node,) + tuple(c._node for c in coords)
    return wrap(record("gather", nodes, (), coords[0].shape if coords else (), x.dtype))


def scatter_at(x: Tensor, values: Tensor, coords: list, mode: str) -> Tensor:
    """A copy of ``x`` updated at coordinate tensors (the primitive behind ``.at``)."""
    shape = coords[0].shape
    v = broadcast_to(wrap(cast(as_tensor(values, "scatter")._node, x.dtype, weak=False)), shape)
    nodes = (x._node, v._node) + tuple(c._node for c in coords)
    return wrap(record("scatter", nodes, (mode,), x.shape, x.dtype))
