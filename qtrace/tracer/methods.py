"""Operators and array methods of ``qt.Tensor``, attached in one table."""

from __future__ import annotations

import numpy as np

from ..config import config
from ..graph import buffers
from ..graph import native as graph_native
from ..graph import node as graph_node
from . import (
    array_api,
    composites,
    context,
    convert,
    flatiter,
    indexing,
    linalg,
    pending,
    protocols,
    rearrange,
    selecting,
    shape_ops,
    sorting,
    views,
)
from . import elementwise as ew
from . import tensor as tensor_module
from .convert import astype, cast
from .tensor import Tensor


def _binary(name: str, reflected: bool = False):
    apply2 = ew.apply2
    if reflected:
        def op(self, other):
            return apply2(name, other, self)
    else:
        def op(self, other):
            return apply2(name, self, other)
    return _fast("binary", op, name, reflected)


def _fast(kind: str, op, *args):
    """``op``, or the compiled recorder's method of that kind when present: its fast path
    in C, falling back to ``op`` itself (qtrace.graph.native)."""
    native = graph_native.module()
    return op if native is None else native.Method(kind, op, *args)


def _bind_native() -> None:
    """Hand the compiled recorder the classes, tables and Python definitions it follows
    (and falls back to), then put its functions in their place: the note hook, slice
    assignment's ``views.assign``, ``views.view_chain`` and the elementwise
    ``apply1``/``apply2`` (every caller reads them as module attributes). Runs once, at
    import."""
    native = graph_native.module()
    if native is None:
        return
    native.bind_tensors(Tensor, context.ThreadState, context._local, context.state, config,
                        pending._consider_cut, ew._recipes, ew.apply2, convert.scalar_node,
                        convert._scalars, convert._consts)
    config.watch("max_pending_nodes", native.set_pending_limit)
    views._views_lock = native.ViewsLock()   # (taken in C without calling Python)
    buffers._lock = native.ViewsLock()       # (likewise: a CUDA graph's replay, jit._graph_spec)
    native.bind_views(views.Storage, views._storage, views._leaf_view, views.reshape_node,
                      views._views_lock, views.view_chain, views._view_recipes, views.LEAF_VIEWS_CAP)
    native.bind_assign(indexing.assigned_values, views.apply_step, views.undo_step,
                       views.assign, ew.apply1)
    native.bind_flush(graph_node.graph_struct, graph_node.result_leaf, views.array_view,
                      pending._flush, graph_node.Struct, graph_node._recent)
    pending.native_flush = native.flush
    tensor_module.install(native.note, pending.flush, views.array_view, views.array_of)
    views.assign, views.view_chain = native.assign, native.view_chain
    ew.apply1, ew.apply2 = native.apply1, native.apply2


_bind_native()


_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "and": "bitwise_and",
    "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift", "rshift": "right_shift",
}


def _inplace(name: str, dunder: str, fn=None):
    """``x op= y``: NumPy's ``op(x, y, out=x)`` — the result is written into ``x`` (and so seen
    by every view of its memory), keeping ``x``'s shape and dtype."""
    compute = fn or (lambda x, y: ew.apply2(name, x, y))

    def op(self, other):
        r = compute(self, other)
        where = f"qt.Tensor.__i{dunder}__"
        if r.shape != self.shape:
            raise ValueError(f"{where}: non-broadcastable output operand with shape {self.shape} "
                             f"doesn't match the broadcast shape {r.shape}")
        if r.dtype != self.dtype and not np.can_cast(r.dtype, self.dtype, "same_kind"):
            raise TypeError(f"{where}: Cannot cast ufunc '{name}' output from {r.dtype!r} to "
                            f"{self.dtype!r} with casting rule 'same_kind'")
        views.assign(self, cast(r._node, self.dtype, weak=self._node.weak))
        return self
    return op


_FAST_POWERS = {2: "square", 0.5: "sqrt", -1: "reciprocal", 1: "positive"}


def _pow(self, other):
    """``x ** p``: NumPy's fast scalar powers (``x ** 2`` is ``square(x)``, ``0.5`` ``sqrt``,
    ``-1`` ``reciprocal``, ``1`` a copy: exactly what NumPy computes for ``ndarray ** p``)."""
    if type(other) in (int, float) and type(self) is Tensor:
        fast = _FAST_POWERS.get(other)
        kind = self.dtype.kind
        if fast is not None and (kind == "f" or (kind in "iu" and fast == "square" and type(other) is int)):
            return ew.apply1(fast, self)
    return ew.apply2("power", self, other)


for _dunder, _prim in _BINARY.items():
    setattr(Tensor, f"__{_dunder}__", _binary(_prim))
    setattr(Tensor, f"__r{_dunder}__", _binary(_prim, reflected=True))
    setattr(Tensor, f"__i{_dunder}__", _inplace(_prim, _dunder))

for _dunder, _prim in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                       "gt": "greater", "ge": "greater_equal"}.items():
    setattr(Tensor, f"__{_dunder}__", _binary(_prim))

Tensor.__pow__ = _pow
Tensor.__ipow__ = _inplace("power", "pow", _pow)
Tensor.__matmul__ = lambda self, other: linalg.matmul(self, other)
Tensor.__imatmul__ = _inplace("matmul", "matmul", linalg.matmul)
Tensor.__rmatmul__ = lambda self, other: linalg.matmul(other, self)
Tensor.__neg__ = lambda self: ew.apply1("negative", self)
Tensor.__pos__ = lambda self: ew.apply1("positive", self)
Tensor.__abs__ = lambda self: ew.apply1("abs", self)
Tensor.__invert__ = lambda self: ew.apply1("invert", self)
Tensor.__divmod__ = lambda self, other: ew.divmod(self, other)
Tensor.__rdivmod__ = lambda self, other: ew.divmod(other, self)
Tensor.__getitem__ = _fast("getitem", indexing.getitem)
Tensor.__setitem__ = _fast("setitem", indexing.setitem)
Tensor.at = property(indexing.AtProperty,
                     doc="Functional updates: ``x.at[idx].set/add/multiply/min/max(v)``.")

Tensor.T = property(lambda self: shape_ops.transpose(self), doc="The transpose (axes reversed).")
Tensor.flat = property(flatiter.FlatIter, flatiter.assign_all,
                       doc="NumPy's flat iterator: elements read and written by C-order position.")
Tensor.mT = property(lambda self: shape_ops.swapaxes(self, -1, -2), doc="Transpose of the last two axes.")


def _reshape(self, *shape, order: str = "C", copy=None):
    """``ndarray.reshape``: ``x.reshape(2, 3)`` or ``x.reshape((2, 3))``."""
    if order != "C":
        raise NotImplementedError("qt.Tensor.reshape: only order='C' is supported")
    return shape_ops.reshape(self, shape[0] if len(shape) == 1 else shape, copy=copy)


def _transpose(self, *axes):
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)) or not axes:
        axes = axes[0] if axes else None
    return shape_ops.transpose(self, axes)


Tensor.reshape = _reshape
Tensor.transpose = _transpose
Tensor.astype = astype
Tensor.ravel = shape_ops.ravel
Tensor.flatten = shape_ops.flatten
Tensor.squeeze = shape_ops.squeeze
Tensor.swapaxes = shape_ops.swapaxes
Tensor.flip = shape_ops.flip


def _numpy_method(func, positions: tuple = ()):
    """``ndarray.<name>`` for NumPy's function ``func``: qtrace's function of ``func`` on the
    tensor, taking NumPy's ``out=`` (by keyword, or by position in the method's NumPy
    signature: ``x.sum(0, None, buf)``) with NumPy's casting and accumulation rules
    (:func:`qtrace.tracer.protocols.call`); ``x.max(axis=0, out=x[0])`` writes into the
    view, seen by ``x``. ``positions``: the method's leading parameters where they are not
    the function's after its array (``ndarray.any(axis, dtype, out)``)."""
    fn = protocols.FUNCTIONS[func]
    out_at = (positions or protocols.parameters(func)[1:]).index("out")
    name = f"qt.Tensor.{func.__name__}"

    def method(self, *args, **kwargs):
        if "out" in kwargs or len(args) > out_at:
            if positions:   # (by the method's names, then as the function's keywords)
                if len(args) > len(positions):
                    raise TypeError(f"{name}: at most {len(positions)} positional arguments, "
                                    f"got {len(args)}")
                kwargs = {**dict(zip(positions, args)), **kwargs}
                if "dtype" not in protocols.parameters(func) and kwargs.pop("dtype", None) is not None:
                    raise TypeError(f"{name}: dtype= is not supported (the result is boolean)")
                args = ()
            return protocols.call(func, (self, *args), kwargs, name)
        return fn(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = func.__name__
    method.__doc__ = f"``ndarray.{func.__name__}``: ``{fn.__module__}.{fn.__name__}`` of the tensor, with " \
        "NumPy's ``out=``.\n\n" + (fn.__doc__ or "")
    return method


for _func in (np.sum, np.prod, np.mean, np.max, np.min, np.argmax, np.argmin, np.cumsum, np.cumprod,
              np.var, np.std, np.trace, np.round, np.dot, np.clip, np.take, np.choose):
    setattr(Tensor, _func.__name__, _numpy_method(_func))
for _func in (np.any, np.all):   # (NumPy's methods read a dtype before out=, unlike np.any)
    setattr(Tensor, _func.__name__, _numpy_method(_func, ("axis", "dtype", "out", "keepdims")))
Tensor.repeat = composites.repeat
Tensor.diagonal = rearrange.diagonal


def _read_only(t: Tensor) -> Tensor:
    """``t`` as a read-only view: a write through it raises instead of being lost."""
    return views.view(t, (views.READ_ONLY, t.shape))


def _real_attr(self) -> Tensor:
    """``ndarray.real``. Of a real tensor: a view of it (writes land in it, as in NumPy).
    Of a complex one: the real parts, read-only — NumPy's writable view into the complex
    memory is not offered, and a write through a copy would be silently lost."""
    if self.dtype.kind != "c":
        return shape_ops.reshape(self, self.shape)
    return _read_only(array_api.real(self))


def _imag_attr(self) -> Tensor:
    """``ndarray.imag``: the imaginary parts, read-only (zeros for a real tensor, as in NumPy)."""
    return _read_only(array_api.imag(self))


Tensor.real = property(_real_attr)
Tensor.imag = property(_imag_attr)
Tensor.conj = Tensor.conjugate = lambda self: array_api.conj(self)


def _fill(self, value) -> None:
    """``ndarray.fill``: set every element to ``value`` (in place, seen by every view)."""
    indexing.setitem(self, Ellipsis, value)


def _sort(self, axis=-1, kind=None, order=None, *, stable=None) -> None:
    """``ndarray.sort``: sorted along ``axis`` in place (seen by every view)."""
    indexing.setitem(self, Ellipsis, sorting.numpy_sort(self, axis, kind, order, stable=stable))


def _partition(self, kth, axis=-1, kind="introselect", order=None) -> None:
    """``ndarray.partition``: partitioned around ``kth`` in place (a full sort, one of the
    partitions NumPy allows; seen by every view)."""
    indexing.setitem(self, Ellipsis, selecting.partition(self, kth, axis, kind, order))


Tensor.fill = _fill
Tensor.sort = _sort
Tensor.partition = _partition
Tensor.argsort = sorting.numpy_argsort
Tensor.argpartition = selecting.argpartition
Tensor.searchsorted = sorting.searchsorted
Tensor.nonzero = sorting.nonzero
Tensor.put = selecting.put
Tensor.compress = lambda self, condition, axis=None, out=None: selecting.compress(condition, self, axis, out)


def _copy(self) -> Tensor:
    """``ndarray.copy``: a new array with this one's value (values are immutable nodes: a
    new owner of the node is a copy; nothing is computed or moved until it is needed)."""
    return Tensor(self._node)


Tensor.copy = _fast("copy", _copy)


def _array_namespace(self, /, *, api_version=None):
    """The Array API namespace of this tensor: ``qtrace`` itself."""
    import qtrace
    if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12", "2024.12"):
        raise ValueError(f"qt.Tensor.__array_namespace__: unsupported api_version {api_version!r}")
    return qtrace


def _to_device(self, device, /, *, stream=None):
    """``to_device`` (Array API): this tensor on ``device``."""
    if stream is not None:
        raise ValueError("qt.Tensor.to_device: stream is not supported on the CPU")
    return self.to(device)


Tensor.__array_namespace__ = _array_namespace
Tensor.to_device = _to_device


def _direct_slots() -> None:
    """The operators' fast paths straight from ``Tensor``'s type slots (after every dunder
    above is set: assigning one again gives its slot back to Python)."""
    native = graph_native.module()   # (a build of this ABI or none: it has direct_slots)
    if native is not None:
        native.direct_slots(Tensor)


_direct_slots()
