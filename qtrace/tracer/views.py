"""NumPy's views for lazy tensors: storages shared by views, writes seen through all of them.

A tensor that has views, or is one, points to a :class:`Storage`: the current value of
the array they share (the *base*, a graph node) and weak references to the tensors
viewing it. Each of those tensors also holds its *steps*, the view operations that
derive it from the base:

    ``("slice", starts, steps, shape)``  basic indexing (integers are size-1 slices
                                         followed by a reshape)
    ``("reshape", shape)``               a reshape NumPy would make without copying
    ``("transpose", perm)``              ``.T``, ``transpose``, ``swapaxes``, ``moveaxis``
    ``("broadcast", shape)``             ``broadcast_to`` (read-only, as in NumPy)
    ``("diagonal", offset, axis1, axis2, shape)``  ``numpy.diagonal`` (followed by a
                                         ``broadcast`` to its own shape: read-only)

A write through any of them (``v[key] = x``, ``v += x``) is *functionalized*, as
PyTorch's lazy back ends do it: the view's new value is pushed back through the inverse
of each step — a slice becomes a ``slice_update`` of its parent, reshapes and transposes
invert — the storage's base becomes the result, and every live view derives its value
from the new base again. Nothing is copied eagerly: the updates are graph nodes that
fuse like any other. Views of an evaluated base are view nodes over its leaf (index
remaps that kernels read in place) and hold no pending work; reading one returns a
NumPy view of the base's buffer.

Tensors that nobody viewed have no storage: a write rebinds them to the updated value.
"""

from __future__ import annotations

import operator
import threading
import weakref

import numpy as np

from ..graph.node import Leaf, Node, c_strides, leaf_like, make_input, make_node
from . import tensor as tensor_module
from .context import record, special
from .tensor import Tensor

READ_ONLY = "broadcast"
READ_ONLY_MESSAGE = ("assignment destination is read-only (a qt.broadcast_to or qt.diagonal view, "
                     "or the .real/.imag of a complex tensor: write the whole tensor instead)")


_views_lock = threading.RLock()   # guards every Storage's list of views


def views_lock():
    """The lock of every storage's views and value (``_views_lock``, which the compiled
    recorder replaces with its own lock of the same behaviour)."""
    return _views_lock


class Storage:
    """The memory that a base tensor and its views share (its current value: ``node``)."""

    __slots__ = ("node", "views", "prune_at", "noted", "__weakref__")

    def __init__(self, node: Node, first: Tensor):
        self.node = node
        self.views: list = [weakref.ref(first)]   # weak references to every tensor on this storage
        self.prune_at = 16
        self.noted = None   # the epoch of the pending list it is listed in (pending.note)

    def add(self, t: Tensor) -> None:
        """Register view ``t``. References to views that died are dropped whenever the list
        has doubled since it was last pruned: a loop reading ``x[i]`` of a base it never
        writes keeps the list as long as its live views, not as long as the loop. (Under a
        lock: a view another thread adds meanwhile is not lost.)"""
        with _views_lock:
            views = self.views
            views.append(weakref.ref(t))
            if len(views) >= self.prune_at:
                self.views = views = [r for r in views if r() is not None]
                self.prune_at = 2 * len(views) + 16

    def __repr__(self) -> str:
        return f"Storage({self.node!r}, {len(self.views)} views)"


# -- graph nodes of view operations (one definition each; the tensor functions use them) --
def reshape_node(n: Node, shape: tuple) -> Node:
    """The graph node of ``n`` reshaped (C order) to ``shape`` (same size)."""
    if shape == n.shape:
        return n
    if n.prim == "const":
        return record("broadcast", (n,), (shape,), shape, n.dtype, weak=n.weak)
    if n.prim == "reshape":
        n = n.inputs[0]
        if n.shape == shape:
            return n
    return make_node("reshape", (shape,), shape, n.dtype, (n,), n.device, n.weak)


def transpose_node(n: Node, perm: tuple) -> Node:
    """The graph node of ``n`` with its axes permuted by ``perm``."""
    if n.prim == "transpose":
        inner = n.params[0]
        perm = tuple(inner[p] for p in perm)
        n = n.inputs[0]
    if perm == tuple(range(n.ndim)):
        return n
    shape = tuple(n.shape[p] for p in perm)
    return record("transpose", (n,), (perm,), shape, n.dtype, weak=n.weak)


def broadcast_node(n: Node, shape: tuple) -> Node:
    """The graph node of ``n`` broadcast (NumPy rules, already checked) to ``shape``."""
    if shape == n.shape:
        return n
    return make_node("broadcast", (shape,), shape, n.dtype, (n,), n.device, n.weak)


def slice_node(n: Node, starts: tuple, steps: tuple, shape: tuple) -> Node:
    """The node of the strided sub-view of ``n``: element ``i`` of axis ``k`` is element
    ``starts[k] + i*steps[k]`` of ``n`` (a slice of a slice is one slice)."""
    if shape == n.shape and not any(starts) and all(s == 1 for s in steps):
        return n
    if n.prim == "slice":
        s0, st0 = n.params
        starts = tuple(a + b * c for a, b, c in zip(s0, starts, st0))
        steps = tuple(b * c for b, c in zip(steps, st0))
        n = n.inputs[0]
    while n.prim == "slice_update" and 0 not in shape:
        # reading through a region write: a slice of another plane reads what was there
        # before; one inside the written region reads the written values (so x[:, :, i]
        # after writes to other components reads the original, and the writes can fuse)
        r_starts, r_steps = n.params
        region = n.inputs[1]
        if 1 in shape and _disjoint(starts, shape, r_starts, region.shape):
            n = n.inputs[0]
            continue
        inner = _within(starts, steps, shape, r_starts, r_steps, region.shape)
        if inner is not None:
            return slice_node(region, inner[0], inner[1], shape)
        break
    return make_node("slice", (starts, steps), shape, n.dtype, (n,), n.device, n.weak)


def _disjoint(starts, shape, r_starts, r_shape) -> bool:
    """Whether a slice and a written region are different planes: on some axis each is one
    index, and not the same one (components of a struct-of-arrays, ``f[:, :, i]`` and
    ``f[:, :, j]``). Other disjoint pairs — a stencil's interior and a boundary row — keep
    reading the latest value: reading past the boundary writes would give the interior
    update several versions of the array to read, each then materialized."""
    for k in range(len(shape)):
        if shape[k] == 1 and r_shape[k] == 1 and starts[k] != r_starts[k]:
            return True
    return False


def _within(starts, steps, shape, r_starts, r_steps, r_shape):
    """``(starts, steps)`` of the slice within the written values when the slice lies on
    the region's elements (same or coarser stride), else None."""
    inner_starts, inner_steps = [], []
    for a, s, n, b, t, m in zip(starts, steps, shape, r_starts, r_steps, r_shape):
        if (a - b) % t or (n > 1 and s % t):
            return None
        k, ks = (a - b) // t, (s // t if n > 1 else 1)
        last = k + (n - 1) * ks
        if not (0 <= k < m and 0 <= last < m):
            return None
        inner_starts.append(k)
        inner_steps.append(ks)
    return tuple(inner_starts), tuple(inner_steps)


def diagonal_node(n: Node, offset: int, axis1: int, axis2: int, shape: tuple) -> Node:
    """The node of the ``offset`` diagonal of ``n``'s axes ``axis1``/``axis2`` (non-negative,
    different), as the last axis of ``shape``: the other axes, then the two flattened, then
    every ``cols + 1``-th element from the diagonal's first."""
    perm = tuple(a for a in range(n.ndim) if a not in (axis1, axis2)) + (axis1, axis2)
    x = transpose_node(n, perm)
    rows, cols = x.shape[-2:]
    flat = reshape_node(x, x.shape[:-2] + (rows * cols,))
    start = (offset if offset >= 0 else -offset * cols) if shape[-1] else 0
    lead = len(shape) - 1
    return slice_node(flat, (0,) * lead + (start,), (1,) * lead + (cols + 1,), shape)


def update_node(parent: Node, new: Node, starts: tuple, steps: tuple) -> Node:
    """``parent`` with the strided region ``starts + k*steps`` (``new``'s shape) replaced by ``new``."""
    if new.shape == parent.shape and not any(starts) and all(s == 1 for s in steps):
        return new
    if 0 in new.shape:  # an empty region: nothing is written
        return parent
    if parent.prim == "slice_update" and parent.params == (starts, steps) \
            and parent.inputs[1].shape == new.shape:
        parent = parent.inputs[0]  # the same region written again: the first write is gone
    return make_node("slice_update", (starts, steps), parent.shape, parent.dtype, (parent, new),
                     parent.device, parent.weak)


def apply_step(n: Node, step: tuple) -> Node:
    """The node of the view ``step`` of ``n``."""
    kind = step[0]
    if kind == "slice":
        return slice_node(n, step[1], step[2], step[3])
    if kind == "reshape":
        return reshape_node(n, step[1])
    if kind == "transpose":
        return transpose_node(n, step[1])
    if kind == "diagonal":
        return diagonal_node(n, *step[1:])
    return broadcast_node(n, step[1])


def undo_step(parent: Node, step: tuple, new: Node) -> Node:
    """``parent``'s value after its view ``step`` was overwritten with ``new``."""
    kind = step[0]
    if kind == "slice":
        return update_node(parent, new, step[1], step[2])
    if kind == "reshape":
        return reshape_node(new, parent.shape)
    if kind == "transpose":
        inverse = [0] * len(step[1])
        for i, p in enumerate(step[1]):
            inverse[p] = i
        return transpose_node(new, tuple(inverse))
    raise AssertionError(kind)  # broadcasts are read-only: refused before


def _array_step(arr: np.ndarray, step: tuple) -> np.ndarray:
    """The NumPy view ``step`` of ``arr`` (never a copy: a reshape NumPy cannot view raises
    ValueError)."""
    op, arg = _NUMPY_STEP[step[0]](step)
    return op(arr, arg)


def derive(base: Node, steps: tuple) -> Node:
    """The node of the view ``steps`` of ``base`` (view nodes: free index remaps in kernels)."""
    n = base
    for step in steps:
        n = apply_step(n, step)
    return n


_STEP_OF = {
    "slice": lambda n: ("slice", n.params[0], n.params[1], n.shape),
    "reshape": lambda n: ("reshape", n.shape),
    "transpose": lambda n: ("transpose", n.params[0]),
    "broadcast": lambda n: ("broadcast", n.shape),
}


def array_of(node: Node):
    """The value of ``node`` as a NumPy view, when it is view nodes over an evaluated leaf
    (reading ``x[i, j]`` of computed data then needs no kernel); else None."""
    steps = []
    while node.prim in _STEP_OF:
        steps.append(_STEP_OF[node.prim](node))
        node = node.inputs[0]
    if node.prim != "input" or node.buffer is None or not steps:
        return None
    arr = node.buffer
    try:
        for step in reversed(steps):
            arr = _array_step(arr, step)
    except ValueError:
        return None
    return arr


def array_view(t: Tensor):
    """``t``'s value as a NumPy view of its evaluated base's buffer, or None (no storage, a
    pending base, or a layout NumPy cannot view)."""
    v = t._view
    if v is None or v[0].node.prim != "input" or v[0].node.buffer is None:
        return None
    arr = v[0].node.buffer
    try:
        for step in v[1]:
            arr = _array_step(arr, step)
    except ValueError:
        return None
    return arr


# -- the tensors' side ------------------------------------------------------------------
def _storage(t: Tensor) -> tuple:
    """``(storage, steps)`` of ``t``, giving it a storage of its own first if it has none."""
    v = t._view
    if v is None:
        with _views_lock:   # (two threads slicing a new array at once make it one storage)
            v = t._view
            if v is None:
                v = t._view = (Storage(t._node, t), ())
    return v


def view(t: Tensor, step: tuple, must_view: bool = False) -> Tensor:
    """A new tensor viewing ``t`` through ``step``.

    A reshape whose result NumPy could not lay over ``t``'s strides is a copy instead
    (``must_view``: raise, like ``numpy.reshape(copy=False)``).
    """
    if step[0] == "reshape":
        st, steps = _storage(t)
        # (a reshape of a whole array, the common case, is always a view)
        if steps and strides_of(st.node.shape, steps, step[1]) is None:
            if must_view:
                raise ValueError(f"qt.reshape: cannot reshape a non-contiguous view of shape "
                                 f"{t.shape} to {step[1]} without copying")
            return Tensor(reshape_node(t._node, step[1]))
    return view_chain(t, (step,))


def view_chain(t: Tensor, chain: tuple) -> Tensor:
    """A new tensor viewing ``t`` through the view steps ``chain`` (each valid as a view)."""
    st, steps = _storage(t)
    # from reading t's value to listing the view, under the lock: a write by another thread
    # in between would re-derive the storage's views without this one, which would keep
    # the old value (and write it back through a later write of its own)
    with _views_lock:
        if len(chain) == 1 and chain[0][0] == "slice":  # the common case, without the layers
            _, starts, steps_, shape = chain[0]
            node = slice_node(t._node, starts, steps_, shape)
        else:
            node = derive(t._node, chain)
        out = Tensor.__new__(Tensor)
        pending = st.node.prim != "input"
        if pending:  # a view of a pending base: its storage is the pending work (what an
            out._node = node  # evaluation computes for the view too), listed once
        else:  # a view of evaluated memory: no pending work to note
            out._node = _leaf_view(st.node, steps + chain) or node
        out._view = (st, steps + chain)
        st.add(out)
    if pending:
        tensor_module._note(st)   # (outside the lock: a note may evaluate)
    return out


def _leaf_view(base: Node, steps: tuple):
    """The view ``steps`` of evaluated ``base`` as an input of its own over the NumPy view of
    base's buffer (zero copy), or None (no buffer, a layout NumPy cannot view, or while
    tracing or differentiating, where the view stays connected to its graph).

    An input is keyed by its shape and strides, a view node by its offset too: so ``x[i]``
    for every ``i`` of a loop runs one compiled kernel instead of one per ``i``."""
    if base.buffer is None or special():
        return None
    # the leaf views of each evaluated base, so the same view is the same node (shared
    # within a graph, like any common subexpression): {steps: leaf or None} on the base
    known = getattr(base, "_views", None)
    if known is None:
        known = {}
        if isinstance(base, Leaf):
            base._views = known
    leaf = known.get(steps)
    if leaf is None:
        leaf = _new_leaf_view(base, steps)
        if len(known) >= LEAF_VIEWS_CAP:  # a loop over rows: keep the recent ones
            known.clear()
        known[steps] = leaf
    return leaf


LEAF_VIEWS_CAP = 256   # leaf views kept per base (the compiled recorder leaves a full table to
                       # this function)


def _new_leaf_view(base: Node, steps: tuple):
    """The leaf of the view ``steps`` of evaluated ``base`` (see :func:`_leaf_view`), or None.

    Everything but the NumPy view itself depends only on ``base``'s structure (shape,
    element strides, dtype): it is worked out once per structure and view, and the leaf of
    each new base (every evaluation makes one) copies it."""
    key = (base.struct, steps)
    how = _view_recipes.get(key)
    if how is None:
        return _first_leaf_view(base, steps, key)
    ops, template, flag_aligned = how
    arr = base.buffer
    for op, arg in ops:
        arr = op(arr, arg)
    if type(arr) is not np.ndarray:   # (a subclass of ndarray as the base's buffer)
        return None
    if not (arr.flags.aligned if flag_aligned else arr.ctypes.data % arr.dtype.itemsize == 0):
        return None
    return leaf_like(template, arr)


def _first_leaf_view(base: Node, steps: tuple, key: tuple):
    arr = base.buffer
    try:
        for step in steps:
            arr = _array_step(arr, step)
    except ValueError:
        return None
    if type(arr) is not np.ndarray:  # NumPy gave a scalar (a copy), not a view
        return None
    item = arr.dtype.itemsize
    if arr.ctypes.data % item or any(st % item for st in arr.strides):
        return None
    strides = tuple(st // item for st in arr.strides)
    ops = _recipe_ops(base.buffer, steps, arr)
    if type(base.buffer) is np.ndarray:
        if len(_view_recipes) >= 4096:
            _view_recipes.clear()
        # (NumPy's aligned flag is this check where the dtype's alignment is its size)
        _view_recipes[key] = (ops, make_input(arr.shape, arr.dtype, base.device, strides=strides,
                                              weak=base.weak), arr.dtype.alignment == item)
    return make_input(arr.shape, arr.dtype, base.device, strides=strides, buffer=arr, weak=base.weak)


def _recipe_ops(buffer: np.ndarray, steps: tuple, arr: np.ndarray) -> tuple:
    """The NumPy steps of a view recipe: one per view step, except that a slice followed by
    a reshape that only drops axes of length 1 (``x[:, k]``, ``x[i]``: integer indices are
    size-1 slices then a reshape) is one ``getitem`` with those axes indexed by integers —
    one C call where the reshape was a Python function (0.8 µs per view of an evaluated
    array). Taken only where it gives ``arr``'s very view of ``buffer`` (the recipe then
    serves every base of ``buffer``'s structure)."""
    ops = [_NUMPY_STEP[step[0]](step) for step in steps]
    for i in range(len(steps) - 1):
        key = _integer_key(steps[i], steps[i + 1])
        if key is None:
            continue
        fused = [*ops[:i], (operator.getitem, key), *ops[i + 2:]]
        got = buffer
        for op, a in fused:
            got = op(got, a)
        if (type(got) is np.ndarray and got.shape == arr.shape and got.strides == arr.strides
                and got.ctypes.data == arr.ctypes.data):
            return tuple(fused)
    return tuple(ops)


def _integer_key(step: tuple, then: tuple) -> tuple | None:
    """``step`` (a slice) and ``then`` (a reshape) as one NumPy key with integers for the
    size-1 axes the reshape drops (the leftmost such axes), or None if ``then`` does
    anything else."""
    if step[0] != "slice" or then[0] != "reshape":
        return None
    sliced, target = tuple(step[3]), tuple(then[1])
    dropped, k = [], 0
    for axis, n in enumerate(sliced):
        if k < len(target) and target[k] == n and not (n == 1 and len(sliced) - axis > len(target) - k):
            k += 1
        elif n == 1:
            dropped.append(axis)
        else:
            return None
    if k != len(target) or not dropped:
        return None
    key = list(_slice_key(step))
    for axis in dropped:
        key[axis] = step[1][axis]
    return tuple(key)


def _slice_key(step: tuple) -> tuple:
    return tuple(slice(start, start + st * n if start + st * n >= 0 else None, st) if n else slice(0, 0)
                 for start, st, n in zip(step[1], step[2], step[3]))


def _reshape_view(arr: np.ndarray, shape: tuple) -> np.ndarray:
    if type(arr) is np.ndarray:   # (the method: np.reshape's dispatch cost 0.5 µs more)
        return arr.reshape(shape, copy=False)
    return np.reshape(arr, shape, copy=False)


def _transpose_view(arr: np.ndarray, axes: tuple) -> np.ndarray:
    return arr.transpose(axes)


# each view step as (function, its argument), the argument built once for a recipe; the
# functions take NumPy and CuPy arrays alike (a GPU tensor's buffer is a CuPy array)
_NUMPY_STEP = {
    "slice": lambda step: (operator.getitem, _slice_key(step)),
    "reshape": lambda step: (_reshape_view, step[1]),
    "transpose": lambda step: (_transpose_view, step[1]),
    "broadcast": lambda step: (np.broadcast_to, step[1]),
    "diagonal": lambda step: (_diagonal_view, step[1:4]),
}


def _diagonal_view(arr, how: tuple):
    """``arr.diagonal(offset, axis1, axis2)``: a read-only view (NumPy and CuPy arrays)."""
    return arr.diagonal(*how)


# (struct of a base, view steps) -> (NumPy steps, a leaf without buffer with the view's
# signature, whether NumPy's aligned flag is the alignment check)
_view_recipes: dict = {}


def alias(t: Tensor) -> Tensor:
    """A new tensor for all of ``t`` (``t[...]``): another view of the same memory."""
    return view_chain(t, ())


def strides_of(base_shape: tuple, steps: tuple, reshape_to: tuple | None = None):
    """Element strides of the view ``steps`` of a C-contiguous array of ``base_shape``
    (then reshaped to ``reshape_to``, if given): ``None`` if that reshape needs a copy."""
    shape, strides = base_shape, c_strides(base_shape)
    for step in steps + ((("reshape", reshape_to),) if reshape_to is not None else ()):
        kind = step[0]
        if kind == "slice":
            strides = tuple(s * st for s, st in zip(strides, step[2]))
            shape = step[3]
        elif kind == "transpose":
            strides = tuple(strides[p] for p in step[1])
            shape = tuple(shape[p] for p in step[1])
        elif kind == "broadcast":
            lead = len(step[1]) - len(shape)
            strides = (0,) * lead + tuple(0 if d == 1 and n != 1 else s
                                          for s, d, n in zip(strides, shape, step[1][lead:]))
            shape = step[1]
        elif kind == "diagonal":
            _, _, a1, a2, shape = step
            strides = tuple(s for a, s in enumerate(strides) if a not in (a1, a2)) + (
                strides[a1] + strides[a2],)
        else:
            strides = _reshaped_strides(shape, strides, step[1])
            if strides is None:
                return None
            shape = step[1]
    return strides


def _reshaped_strides(shape: tuple, strides: tuple, new: tuple):
    """Strides for viewing an array of ``shape``/``strides`` as ``new``, or None if NumPy
    would have to copy (the rule of NumPy's ``_attempt_nocopy_reshape``)."""
    if 0 in shape:
        return c_strides(new)
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    out = [0] * len(new)
    oi, ni = 0, 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        op, np_ = old[oi][0], new[ni]
        while op != np_:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):  # the old axes merged here must be contiguous
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        oi, ni = oj, nj
    last = out[ni - 1] if ni else 1
    for k in range(ni, len(new)):  # trailing size-1 axes
        out[k] = last
    return tuple(out)


def is_c_contiguous(t: Tensor) -> bool:
    """Whether ``t``'s elements lie in its memory in C order with no gaps (as NumPy's flag;
    a tensor with no views is its own C-contiguous memory)."""
    v = t._view
    if v is None or not v[1]:
        return True
    strides = strides_of(v[0].node.shape, v[1])
    want = c_strides(t.shape)
    return all(s == w for s, w, d in zip(strides, want, t.shape) if d != 1)


def is_read_only(t: Tensor) -> bool:
    v = t._view
    return v is not None and any(step[0] == READ_ONLY for step in v[1])


def assign(t: Tensor, new: Node) -> None:
    """Make ``new`` (``t``'s shape and dtype) the value of ``t`` and of all that shares its memory."""
    with _views_lock:
        owner = _write(t, new)
    tensor_module._note(owner)   # qtrace.tracer.pending.note (installed there: it imports this module)


def write(t: Tensor, update) -> None:
    """Give ``t`` (and all that shares its memory) the value ``update(node)`` computes from
    its current value ``node``, atomically for other threads writing the same memory: the
    value is read and replaced under the views lock (a write computed from a value that
    another thread replaced meanwhile would undo that thread's write — NumPy keeps both
    writes to different elements)."""
    with _views_lock:
        owner = _write(t, update(t._node))
    tensor_module._note(owner)


def _write(t: Tensor, new: Node):
    """:func:`assign` under the views lock; returns the owner the new value is noted on."""
    v = t._view
    if v is None:
        t._node = new
        return t
    st, steps = v
    if any(step[0] == READ_ONLY for step in steps):
        raise ValueError(READ_ONLY_MESSAGE)
    parents = [st.node]
    for step in steps[:-1]:
        parents.append(apply_step(parents[-1], step))
    for step, parent in zip(reversed(steps), reversed(parents)):
        new = undo_step(parent, step, new)
    set_base(st, new)
    return st


def set_base(st: Storage, base: Node) -> None:
    """Give storage ``st`` the value ``base`` and every live view of it its new value.

    A view lying wholly outside the region that ``base`` rewrote keeps its node: its
    elements did not change (``p[:, -1] = p[:, -2]``: the right-hand side, a view of ``p``
    still alive during the write, is not derived again). Such a view then reads the base as
    it was before the write — the older version :func:`slice_node` avoids reading for new
    views (see :func:`_disjoint`); measured on a sweep that keeps a boundary view across two
    writes and reads it after them, the plans have the same tasks and run 5–10% faster."""
    with _views_lock:
        region = written_region(st.node, base)
        st.node = base
        live = []
        for ref in st.views:
            t = ref()
            if t is not None:
                steps = t._view[1]
                if region is None or not outside(steps, region):
                    t._node = derive(base, steps)
                live.append(ref)
        st.views = live
        st.prune_at = 2 * len(live) + 16


def written_region(old: Node, new: Node):
    """``(starts, steps, counts)`` of the strided region outside which ``new`` equals
    ``old`` (a slice assignment of ``old``, or of what ``old`` assigned the same region
    of), else None."""
    if new.prim != "slice_update":
        return None
    parent = new.inputs[0]
    if parent is not old and not (old.prim == "slice_update" and old.params == new.params
                                  and old.inputs[0] is parent
                                  and old.inputs[1].shape == new.inputs[1].shape):
        return None   # (a smaller write of the same start undoes the rest of old's region)
    starts, steps = new.params
    return starts, steps, new.inputs[1].shape


def outside(steps: tuple, region: tuple) -> bool:
    """Whether the view ``steps`` (of a storage's base) lies outside ``region``: its first
    step is a slice, and along some axis the slice's and the region's index intervals do
    not meet."""
    if not steps or steps[0][0] != "slice":
        return False
    _, starts, strides, counts = steps[0]
    for a, s, c, b, t, m in zip(starts, strides, counts, *region):
        if c == 0 or m == 0:
            return True
        lo, hi = sorted((a, a + (c - 1) * s))
        rlo, rhi = sorted((b, b + (m - 1) * t))
        if hi < rlo or rhi < lo:
            return True
    return False
