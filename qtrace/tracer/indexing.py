"""NumPy indexing: ``x[key]``, ``x[key] = v`` and JAX-style ``x.at[key].set/add/...``.

Basic indices (integers, slices with steps, ``None``, ``...``) become views. When the
key holds integer arrays (or boolean masks, in eager code), every indexed axis is
described by an integer coordinate tensor of the result's shape — slices contribute a
broadcast ``arange``, integers a constant, arrays themselves placed where NumPy puts
advanced-index dimensions — and the access becomes one ``gather`` (or ``scatter``)
over those coordinates. Host index data (NumPy arrays, lists, masks, slices) is
checked when recorded: an out-of-range index raises ``IndexError`` at that line, as in
NumPy, and the kernel then reads without checks (so it vectorizes). Tensor indices are
bounds-checked in the kernel: nothing outside a buffer is ever read or written, and an
out-of-range index raises ``IndexError`` naming the operation and the recording line at
evaluation. ``qt.config.check_bounds = False`` skips the report:
reads then clamp to the nearest element (JAX's default gather mode) and out-of-range
updates are dropped.
"""

from __future__ import annotations

import operator
import weakref

import numpy as np

from ..config import config
from ..errors import TracerError
from ..graph import origins
from ..graph.node import Node
from ..graph.primitives import IN_RANGE, PRIMITIVES, broadcast_shapes
from . import dtypes, selections, views
from .context import ad_level, record, tracing
from .convert import cast, const_node, input_node, number_key, operand, wrap
from .elementwise import apply
from .selections import Selection
from .shape_ops import as_tensor, broadcast_to, transpose
from .tensor import Tensor

SCATTER_MODES = ("set", "add", "multiply", "min", "max")
_SCALARS = frozenset((int, float, bool))


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
            entries[-mask.ndim:] = [("mask", a, mask.shape[i], mask.size)
                                    for i, a in enumerate(entries[-mask.ndim:])]
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


def _index_tensor(k, size: int, axis: int, op: str, device) -> tuple[Tensor, bool]:
    """The index array ``k`` for an axis of ``size`` (of a tensor on ``device``, where host
    data goes) as a tensor, and whether its values are known to lie in ``[0, size)`` (the
    kernel then reads without checking or clamping).

    Host data is checked here, at the line that indexes (as NumPy does; with
    ``qt.config.check_bounds`` off, out-of-range host data is left to the kernel, which
    clamps), and normalised to non-negative int64 in a copy qtrace owns; a mask's
    coordinates (``np.nonzero``) are in range by construction. A tensor index is checked
    in the kernel, at evaluation.
    """
    if isinstance(k, tuple) and k and k[0] == "mask":
        return wrap(input_node(k[1], op, owned=True, device=device)), True
    a = k if isinstance(k, Tensor) else np.asarray(k)
    if a.dtype.kind not in "iu":
        raise IndexError(f"{op}: arrays used as indices must be of integer (or boolean) type, "
                         f"got {a.dtype}")
    if isinstance(a, Tensor):
        return a, False
    if a.size:
        lo, hi = int(a.min()), int(a.max())
        bad = lo if lo < -size else hi if hi >= size else None
        if bad is not None:
            if not config.check_bounds:  # the kernel clamps reads and drops updates
                return wrap(input_node(a, op, device=device)), False
            raise IndexError(f"{op}: index {bad} is out of bounds for axis {axis} with size {size}")
    fresh = a.astype(np.int64, copy=True)
    if a.size and lo < 0:
        fresh[fresh < 0] += size
    return wrap(input_node(fresh, op, owned=True, device=device)), True


def _plan(x: Tensor, key, op: str, coords_always: bool = False):
    """Decompose ``key``: a basic view, or (result shape, one coordinate tensor per axis of
    x, whether every coordinate is known to be in range, the result's memory order).

    The memory order is NumPy's layout of the result, as a permutation of its axes
    (outermost first), or None for C order: where the advanced indices are adjacent and
    follow a slice (``x[:, idx]``), NumPy lays the indexed axes out first, so the result
    is not C-contiguous and, e.g., reshaping it copies.

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
    axis, in_range = 0, True
    for i, k in enumerate(entries):
        if kinds[i] in ("none", "sep"):
            continue
        if kinds[i] == "sbool":  # no axis of x: only a (1,) or (0,) broadcast shape
            fixed[i] = (1,) if k[1] else (0,)
            continue
        axis_of[i] = axis
        size = x.shape[axis]
        if kinds[i] == "array":
            if _marker(k, "mask") and k[2] not in (size, 0):  # an axis of length 0 matches (NumPy)
                raise IndexError(f"{op}: boolean index did not match indexed array along axis {axis}; "
                                 f"size of axis is {size} but size of corresponding boolean axis is {k[2]}")
            fixed[i], known = _index_tensor(k, size, axis, op, x.device)
            in_range = in_range and known
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
            a = wrap(input_node(a.reshape((1,) * pos + (len(f),) + (1,) * (len(shape) - pos - 1)), op,
                                owned=True, device=x.device))
        elif isinstance(f, Tensor):
            lead = where["B"]
            trail = len(shape) - lead - len(bshape)
            a = wrap(views.reshape_node(views.broadcast_node(f._node, bshape),
                                        (1,) * lead + bshape + (1,) * trail))
        else:
            a = wrap(input_node(np.array(f, dtype=np.int64), op, owned=True, device=x.device))
        # (coordinates as values, not views: internal, never written through)
        coords.append(wrap(views.broadcast_node(a._node, shape)))
    order = None
    lead = where.get("B", 0)
    if adjacent and lead and bshape:
        nb = len(bshape)
        order = (*range(lead, lead + nb), *range(lead), *range(lead + nb, len(shape)))
    return None, (shape, coords, in_range, order)


def basic_key(shape: tuple, key):
    """``(starts, steps, counts, result shape)`` of a basic index into ``shape`` (integers,
    slices, ``None``, ``...``), or ``None`` if ``key`` holds arrays or masks.

    Integers are slices of one element (``counts`` 1) that the result shape drops.
    """
    if type(key) is not tuple:
        key = (key,)
    n = len(shape)
    if len(key) == n:  # the common case: one slice or integer per axis
        starts, steps, counts, out = [], [], [], []
        for k, size in zip(key, shape):
            tk = type(k)
            if tk is slice:
                start, stop, step = k.indices(size)
                if step > 0:
                    count = (stop - start + step - 1) // step if stop > start else 0
                else:
                    count = (start - stop - step - 1) // -step if start > stop else 0
                starts.append(start if count else 0)
                steps.append(step)
                counts.append(count)
                out.append(count)
            elif tk is int and -size <= k < size:
                starts.append(k % size)
                steps.append(1)
                counts.append(1)
            else:
                break
        else:
            counts = tuple(counts)
            return tuple(starts), tuple(steps), counts, counts if len(out) == n else tuple(out)
    return _general_basic_key(shape, key)


def _general_basic_key(shape: tuple, key: tuple):
    n = len(shape)
    consumed, ellipsis = 0, False
    for k in key:
        tk = type(k)
        if tk is slice or tk is int:
            consumed += 1
        elif k is None:
            pass
        elif k is Ellipsis:
            if ellipsis:
                raise IndexError("an index can only have a single ellipsis ('...')")
            ellipsis = True
        elif isinstance(k, (np.integer, int)) and not isinstance(k, (bool, np.bool_)):
            consumed += 1
        else:
            return None
    if consumed > n:
        raise IndexError(f"too many indices for array: array is {n}-dimensional, but {consumed} "
                         "were indexed")
    starts, steps, counts, out = [], [], [], []
    axis = 0
    for k in key:
        if k is None:
            out.append(1)
            continue
        if k is Ellipsis:
            for _ in range(n - consumed):
                d = shape[axis]
                starts.append(0)
                steps.append(1)
                counts.append(d)
                out.append(d)
                axis += 1
            continue
        size = shape[axis]
        if type(k) is slice:
            start, stop, step = k.indices(size)
            count = len(range(start, stop, step))
            starts.append(start if count else 0)
            steps.append(step)
            counts.append(count)
            out.append(count)
        else:
            i = int(k)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
            starts.append(i % size)
            steps.append(1)
            counts.append(1)
        axis += 1
    while axis < n:
        d = shape[axis]
        starts.append(0)
        steps.append(1)
        counts.append(d)
        out.append(d)
        axis += 1
    return tuple(starts), tuple(steps), tuple(counts), tuple(out)


def _integers_only(key) -> bool:
    return all(k is not Ellipsis and k is not None for k in (key if type(key) is tuple else (key,)))


def _basic_steps(shape: tuple, plan) -> tuple:
    """The view steps of a basic index (see :mod:`qtrace.tracer.views`)."""
    starts, steps, counts, out = plan
    chain = ()
    if counts != shape or any(starts) or any(s != 1 for s in steps):
        chain = (("slice", starts, steps, counts),)
    if out != counts:
        chain += (("reshape", out),)
    return chain


def _basic(x: Tensor, entries: list, op: str) -> Tensor:
    key = tuple(slice(None) if _marker(k, "sep") else k for k in entries)
    plan = basic_key(x.shape, key)
    if plan is None:
        bad = next(k for k in key if not (k is None or k is Ellipsis or isinstance(k, slice) or (
            isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)))))
        raise IndexError(f"{op}: only integers, slices (`:`), ellipsis (`...`), None and integer "
                         f"or boolean arrays are valid indices, got {type(bad).__name__}")
    return views.view_chain(x, _basic_steps(x.shape, plan))


def getitem(x, key) -> Tensor:
    """``x[key]`` with NumPy semantics (views for basic indices, a gather for arrays)."""
    t = x if type(x) is Tensor else as_tensor(x, "getitem")
    try:
        plan = basic_key(t.shape, key)
    except IndexError as err:
        raise IndexError(f"qt.Tensor.__getitem__: {err}") from None
    if plan is not None:
        if not plan[3] and t.ndim and _integers_only(key):  # x[1, 2]: NumPy gives a scalar (a copy)
            return _element(t, views.reshape_node(views.slice_node(t._node, plan[0], plan[1], plan[2]), ()))
        return views.view_chain(t, _basic_steps(t.shape, plan))
    selected = _selection_of_selection(t, key)
    if selected is not None:
        return selected
    if tracing():
        mask = _leading_mask(t, key, "qt.Tensor.__getitem__")
        if mask is not None and mask.ndim:  # x[mask] inside qt.jit: its length depends on the data
            return Selection(t, mask._node)
    view, adv = _plan(t, key, "qt.Tensor.__getitem__")
    if view is not None:
        return view
    shape, coords, known, order = adv
    if order is not None:  # gathered in NumPy's memory order, seen through a transpose
        coords = [transpose(c, order) for c in coords]
        shape = tuple(shape[a] for a in order)
    nodes = (t._node,) + tuple(c._node for c in coords)
    params = (IN_RANGE,) if known else ()
    out = wrap(origins.remember(record("gather", nodes, params, shape, t.dtype, weak=t._node.weak)))
    if order is not None:
        return views.view(out, ("transpose", tuple(order.index(a) for a in range(len(order)))))
    mask = _leading_mask_key(t, key)
    if mask is not None:
        _selections[out._node] = (t._node, mask)
    return out


def _element(t: Tensor, node: Node) -> Tensor:
    """``x[i, j]`` (``node``: the element as a view of ``t``), a copy as in NumPy.

    An element of evaluated memory is read now into a 0-d leaf: what uses it is then keyed
    by shapes alone, so a loop over ``x[i]`` compiles once rather than once per ``i``
    (a view's offset is part of its kernel). Inside ``qt.jit`` or while differentiating
    the element stays a view node, connected to its graph.
    """
    if t._node.weak or ad_level():
        return wrap(node)
    arr = views.array_of(node)
    if arr is None:
        return wrap(node)
    return wrap(input_node(arr.copy(), "getitem", device=node.device, owned=True))


# Selections ``x[mask]`` (a mask over leading axes), remembered so that ``y[mask] = f(x[mask])``
# writes ``where(mask, f(x), y)``: no gather, no per-element rank, no shape that depends on
# the number of True elements (node of the selection -> (node of x, the mask's values)).
_selections: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _leading_mask_key(t: Tensor, key):
    """The mask's values (NumPy) when ``key`` is one boolean mask over leading axes of ``t``,
    followed by nothing or full slices; else None."""
    parts = key if type(key) is tuple else (key,)
    if not parts or not _is_bool_array(parts[0]) or isinstance(parts[0], (bool, np.bool_)):
        return None
    if any(not (isinstance(k, slice) and k == slice(None)) for k in parts[1:]):
        return None
    m = parts[0]
    arr = m.numpy() if isinstance(m, Tensor) else np.asarray(m, dtype=bool)
    return arr if arr.ndim and arr.shape == t.shape[:arr.ndim] else None


def _selection_of_selection(t: Tensor, key):
    """``x[mask][:, k...]``: the same selection of ``x[..., k...]`` (stays a selection)."""
    tag = _selections.get(t._node)
    parts = key if type(key) is tuple else (key,)
    if tag is None or not parts or not (isinstance(parts[0], slice) and parts[0] == slice(None)):
        return None
    src, mask = tag
    if any(_is_bool_array(k) for k in parts[1:]):
        return None
    full = getitem(wrap(src), (slice(None),) * mask.ndim + tuple(parts[1:]))
    return getitem(full, mask)


def _unselect(rows: Node, mask: np.ndarray):
    """``rows`` (a function of selections ``x[mask]``) computed on the whole of each ``x``:
    the node whose elements where ``mask`` is True are ``rows``'s, in order; None if
    ``rows`` is not elementwise in selections by this very mask."""
    return _unselected(rows, mask, {})


def _unselected(n: Node, mask: np.ndarray, memo: dict):
    """:func:`_unselect` of ``n``, memoized in ``memo`` (a module function, not a recursive
    closure: that would be a reference cycle keeping the nodes in ``memo``, and the buffers
    of their leaves, alive until a collection)."""
    got = memo.get(id(n))
    if got is not None:
        return got
    tag = _selections.get(n)
    if tag is not None:
        src, m = tag
        out = src if (m is mask or np.array_equal(m, mask)) else None
    elif n.ndim == 0:
        out = n
    elif PRIMITIVES[n.prim].kind == "elementwise":
        inputs = [_unselected(i, mask, memo) for i in n.inputs]
        if any(i is None for i in inputs):
            return None
        shape = broadcast_shapes(f"qt.{n.prim}", *(i.shape for i in inputs))
        out = record(n.prim, tuple(inputs), n.params, shape, n.dtype, weak=n.weak)
    else:
        out = None
    memo[id(n)] = out
    return out


def scatter(x, key, values, mode: str, op: str | None = None) -> Tensor:
    """A copy of ``x`` with ``x[key]`` combined with ``values`` by ``mode`` (see ``.at``);
    ``op`` names the operation in errors (default ``qt.Tensor.at[...].<mode>``)."""
    if mode not in SCATTER_MODES:
        raise ValueError(f"qt scatter: unknown mode {mode!r}")
    op = op or f"qt.Tensor.at[...].{mode}"
    t = as_tensor(x, op)
    _, (shape, coords, known, _) = _plan(t, key, op, coords_always=True)
    v = operand(values, op)
    v_node = v.node if v.node is not None else const_node(v.value, t.dtype, t.device)
    v_node = cast(v_node, t.dtype, weak=False)
    if len(v_node.shape) > len(shape) and all(n == 1 for n in v_node.shape[:len(v_node.shape) - len(shape)]):
        v_node = views.reshape_node(v_node, v_node.shape[len(v_node.shape) - len(shape):])   # (NumPy's)
    try:
        v_t = broadcast_to(wrap(v_node), shape)
    except ValueError:
        raise ValueError(f"{op}: values of shape {v_node.shape} cannot be broadcast to the indexed "
                         f"shape {shape}") from None
    if t.ndim == 0:
        return wrap(v_t._node) if mode == "set" else _scalar_update(t, v_t, mode)
    nodes = (t._node, v_t._node) + tuple(c._node for c in coords)
    params = (mode, IN_RANGE) if known else (mode,)
    return wrap(origins.remember(record("scatter", nodes, params, t.shape, t.dtype, weak=t._node.weak)))


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
    """``x[key] = value`` as NumPy does it: the write is seen by ``x``, its base and every
    view of that memory (see :mod:`qtrace.tracer.views`).

    Basic indices write a strided region (``slice_update``), a boolean mask of ``x``'s
    leading shape selects (``where``: no data-dependent shape, no recompilation for a new
    number of ``True``), integer arrays scatter.
    """
    op = "qt.Tensor.__setitem__"
    if views.is_read_only(x):
        raise ValueError(f"{op}: {views.READ_ONLY_MESSAGE}")
    try:
        plan = basic_key(x.shape, key)
    except IndexError as err:
        raise IndexError(f"{op}: {err}") from None
    if plan is not None:
        starts, steps, counts, out = plan
        src = views.reshape_node(assigned_values(x, value, out, op), counts)
        views.write(x, lambda node: views.update_node(node, src, starts, steps))
        return
    mask = _leading_mask(x, key, op)
    if mask is not None:
        if mask.shape != x.shape[:mask.ndim]:  # an empty mask (an axis of length 0): selects nothing
            assigned_values(x, value, (0,) + x.shape[mask.ndim:], op)  # still checks the value
            return
        views.write(x, lambda _: _masked_update(x, mask, value, op))
        return
    key, value = _last_writes_only(x, key, value, op)
    views.write(x, lambda _: scatter(x, key, value, "set", op)._node)


def last_writes(positions: np.ndarray) -> np.ndarray | None:
    """Which of the flat element ``positions`` to write so that an element named more than
    once gets its last value, as NumPy's assignments do (a scatter leaves unspecified which
    of several writes to one element wins: on a GPU, and across CPU workers, they race):
    the sorted indices of each element's last occurrence, or None if none repeats."""
    _, last = np.unique(positions[::-1], return_index=True)
    if last.size == positions.size:
        return None
    return np.sort(positions.size - 1 - last)


def _last_writes_only(x: Tensor, key, value, op: str) -> tuple:
    """``(key, value)`` for ``x[key] = value`` that write each element the key's host
    integer arrays name more than once only once, with its last value (:func:`last_writes`):
    the arrays keep those positions, ``value`` those rows. Keys with tensor indices or
    masks are left as they are (a mask names each element once; a tensor's values are not
    on the host), and so are keys the scatter will refuse (it says why)."""
    entries = _expand(key, x.ndim, op)
    axis, adv = 0, []
    for i, k in enumerate(entries):
        if k is None or _marker(k, "sep"):
            continue
        if isinstance(k, Tensor) or _marker(k, "mask") or _marker(k, "sbool"):
            return key, value
        if not isinstance(k, slice):
            adv.append((i, x.shape[axis]))
        axis += 1
    try:
        arrays = np.broadcast_arrays(*[np.asarray(entries[i]) for i, _ in adv])
    except ValueError:
        return key, value
    sizes = [size for _, size in adv]
    if arrays[0].size < 2 or any(a.dtype.kind not in "iu" or a.min() < -s or a.max() >= s
                                 for a, s in zip(arrays, sizes)):
        return key, value
    keep = last_writes(np.ravel_multi_index([a % s for a, s in zip(arrays, sizes)], sizes).reshape(-1))
    if keep is None:
        return key, value
    # (an ellipsis that stands for no axes is a marker among the entries: an ellipsis again)
    new = [Ellipsis if _marker(k, "sep") else k for k in entries]
    for (i, _), a in zip(adv, arrays):
        new[i] = a.reshape(-1)[keep]
    if np.ndim(value) == 0:
        return tuple(new), value
    # the rows of value: broadcast to the indexed shape, the indices' axes merged into one
    # (the shape read from an array of x's shape with elements of no bytes: nothing allocated)
    shape = np.empty(x.shape, np.dtype([]))[key].shape
    first = [i for i, _ in adv]
    adjacent = first == list(range(first[0], first[-1] + 1))
    lead = sum(1 for k in entries[:first[0]] if k is None or isinstance(k, slice)) if adjacent else 0
    rows = shape[:lead] + (-1,) + shape[lead + arrays[0].ndim:]
    v = value if isinstance(value, Tensor) else np.asarray(value)
    while v.ndim > len(shape) and v.shape[0] == 1:   # (NumPy drops leading axes of length 1)
        v = v[0]
    try:
        v = broadcast_to(v, shape) if isinstance(v, Tensor) else np.broadcast_to(v, shape)
    except ValueError:
        return key, value
    v = v.reshape(rows)[(slice(None),) * lead + (keep,)]
    return tuple(new), v


# the nodes of Python numbers assigned to regions (number, dtype, device, region shape ->
# broadcast constant): converting the number NumPy's way is most of an assignment's cost
_assigned_numbers: dict = {}


def assigned_values(x: Tensor, value, shape: tuple, op: str) -> Node:
    """``value`` converted to ``x``'s dtype (NumPy's assignment casting) and broadcast to
    ``shape`` (leading axes of length 1 in ``value`` may go, as in NumPy)."""
    if type(value) in _SCALARS:  # the common case: a Python number (a boundary condition)
        device = x._node.device
        key = (*number_key(value), x.dtype, device, shape)
        node = _assigned_numbers.get(key)
        if node is None:
            node = views.broadcast_node(const_node(dtypes.assignable(value, x.dtype, op), x.dtype,
                                                   device), shape)
            if len(_assigned_numbers) > 4096:  # a program assigns few distinct numbers
                _assigned_numbers.clear()
            _assigned_numbers[key] = node
        return node
    v = operand(value, op)
    if v.node is None:
        node = const_node(dtypes.assignable(v.value, x.dtype, op), x.dtype, x.device)
    else:
        node = cast(v.node, x.dtype, weak=False)
    vs = node.shape
    while len(vs) > len(shape) and vs[0] == 1:
        vs = vs[1:]
    if vs != node.shape:
        node = views.reshape_node(node, vs)
    try:
        ok = broadcast_shapes(op, vs, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        shown = v.node.shape if v.node is not None else ()
        raise ValueError(f"{op}: could not broadcast input array from shape {shown} into shape {shape}")
    return views.broadcast_node(node, shape)


def _leading_mask(x: Tensor, key, op: str):
    """The boolean mask tensor when ``key`` is one mask over leading axes of ``x``, else None.

    A mask whose shape does not match those axes raises ``IndexError`` (as NumPy).
    """
    parts = key if type(key) is tuple else (key,)
    if not parts or any(not (isinstance(k, slice) and k == slice(None)) for k in parts[1:]):
        return None
    k = parts[0]
    if not _is_bool_array(k) and not isinstance(k, (bool, np.bool_)):
        return None
    m = k if isinstance(k, Tensor) else wrap(input_node(np.asarray(k, dtype=bool), op, device=x.device))
    if m.ndim + len(parts) - 1 > x.ndim:
        return None  # too many indices: the general path says so
    check_mask(x.shape, m.shape, op)
    return m


def check_mask(shape: tuple, mask_shape: tuple, op: str) -> None:
    """NumPy's rule: a boolean index matches the axes it indexes, each exactly or with
    length 0 (an empty mask, which selects nothing)."""
    if len(mask_shape) > len(shape):
        raise IndexError(f"{op}: too many indices for array: array is {len(shape)}-dimensional, "
                         f"but the boolean index is {len(mask_shape)}-dimensional")
    for axis, (d, m) in enumerate(zip(shape, mask_shape)):
        if m not in (d, 0):
            raise IndexError(f"{op}: boolean index did not match indexed array along axis {axis}; "
                             f"size of axis is {d} but size of corresponding boolean axis is {m}")


def _masked_update(x: Tensor, mask: Tensor, value, op: str) -> Node:
    """``x`` with the elements where ``mask`` (over leading axes) is True replaced by ``value``.

    A value broadcastable to ``x[mask]``'s trailing shape is written by a select; a value
    with one row per True element (``x[mask] = x[mask] ** 2``) is placed by rank (the
    ``k``-th True element takes row ``k``).
    """
    trail = x.shape[mask.ndim:]
    m = views.broadcast_node(views.reshape_node(mask._node, mask.shape + (1,) * len(trail)), x.shape)
    if type(value) is Selection:  # y[mask] = f(x[mask]) inside qt.jit
        new = cast(selections.written_under(mask, value, x.shape, op), x.dtype, weak=False)
        return record("select", (m, new, x._node), (), x.shape, x.dtype, weak=x._node.weak)
    v = operand(value, op)
    vshape = () if v.node is None else v.node.shape
    per_true = len(vshape) > len(trail) and (len(vshape) - len(trail) > 1 or vshape[0] != 1)
    if per_true:
        rows = cast(v.node, x.dtype, weak=False)
        whole = _unselect(rows, _mask_values(mask)) if _selections else None
        if whole is not None and whole.shape == x.shape:
            new = whole
        else:
            new = _by_rank(x, mask, rows, op)
    else:
        new = assigned_values(x, value, x.shape, op)
    return record("select", (m, new, x._node), (), x.shape, x.dtype, weak=x._node.weak)


def _mask_values(mask: Tensor) -> np.ndarray:
    if tracing():
        raise TracerError("qt.Tensor.__setitem__: assigning one value per True element of a mask "
                          "inside qt.jit needs the number of True elements; use qt.where(mask, values, x)")
    return mask.numpy()


def _by_rank(x: Tensor, mask: Tensor, rows: Node, op: str) -> Node:
    """``rows[k]`` placed at the ``k``-th True element of ``mask`` (the others: row 0)."""
    if tracing():
        raise TracerError(f"{op}: assigning one value per True element of a mask inside qt.jit needs "
                          "the number of True elements; use qt.where(mask, values, x)")
    flat = views.reshape_node(mask._node, (mask.size,))
    count = int(np.count_nonzero(wrap(flat).numpy()))
    if rows.shape[0] != count:
        raise ValueError(f"{op}: NumPy boolean array indexing assignment cannot assign {rows.shape[0]} "
                         f"input values to the {count} output values where the mask is true")
    if count == 0:  # nothing is selected: nothing is written
        return x._node
    ranks = record("cumsum", (cast(flat, dtypes.int64, weak=False),), (0,), (mask.size,), dtypes.int64)
    rank = apply("maximum", apply("subtract", wrap(ranks), 1), 0)
    picked = getitem(wrap(rows), wrap(views.reshape_node(rank._node, mask.shape)))
    return views.broadcast_node(picked._node, x.shape)


def gather_at(x: Tensor, coords: list, known: bool = False) -> Tensor:
    """``x`` read at integer coordinate tensors (one per axis, all of the result's shape);
    ``known``: they are known to be in range (the coordinates of an in-range gather or
    scatter of an array of ``x``'s shape)."""
    nodes = (x._node,) + tuple(c._node for c in coords)
    params = (IN_RANGE,) if known else ()
    return wrap(record("gather", nodes, params, coords[0].shape if coords else (), x.dtype))


def scatter_at(x: Tensor, values: Tensor, coords: list, mode: str, known: bool = False) -> Tensor:
    """A copy of ``x`` updated at coordinate tensors (the primitive behind ``.at``);
    ``known`` as for :func:`gather_at`."""
    shape = coords[0].shape
    v = broadcast_to(wrap(cast(as_tensor(values, "scatter")._node, x.dtype, weak=False)), shape)
    nodes = (x._node, v._node) + tuple(c._node for c in coords)
    params = (mode, IN_RANGE) if known else (mode,)
    return wrap(record("scatter", nodes, params, x.shape, x.dtype))
