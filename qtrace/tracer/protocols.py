"""NumPy interoperability: ``__array_ufunc__``, ``__array_function__`` and DLPack."""

from __future__ import annotations

import functools
import inspect
import itertools

import numpy as np

from ..graph import buffers
from ..graph import evaluate as graph_evaluate
from ..graph.primitives import ELEMENTWISE_UFUNCS
from . import (
    array_api,
    composites,
    creation,
    elementwise,
    fft_ext,
    functional,
    grids,
    indexing,
    linalg,
    linalg_ext,
    linalg_numpy,
    numerical,
    rearrange,
    reductions,
    selecting,
    shape_ops,
    sorting,
    statistics,
    views,
)
from .convert import astype, cast
from .tensor import Tensor

UFUNC_TO_QT = {getattr(np, ufunc): elementwise.FUNCTIONS[name] for name, ufunc in ELEMENTWISE_UFUNCS.items()}
UFUNC_TO_QT[np.matmul] = linalg.matmul  # a gufunc: `ndarray @ tensor` arrives here

FUNCTIONS = {
    np.sum: reductions.sum, np.prod: reductions.prod, np.mean: reductions.mean,
    np.max: reductions.max, np.min: reductions.min, np.amax: reductions.max,
    np.amin: reductions.min, np.argmax: reductions.argmax, np.argmin: reductions.argmin,
    np.any: reductions.any, np.all: reductions.all, np.cumsum: reductions.cumsum,
    np.reshape: shape_ops.reshape, np.transpose: shape_ops.transpose,
    np.swapaxes: shape_ops.swapaxes, np.expand_dims: shape_ops.expand_dims,
    np.squeeze: shape_ops.squeeze, np.broadcast_to: shape_ops.broadcast_to,
    np.concatenate: shape_ops.concatenate, np.stack: shape_ops.stack, np.flip: shape_ops.flip,
    np.ravel: shape_ops.ravel, np.moveaxis: shape_ops.moveaxis, np.where: elementwise.where,
    np.clip: elementwise.clip, np.round: elementwise.round, np.matmul: linalg.matmul,
    np.dot: linalg.dot, np.zeros_like: creation.zeros_like, np.ones_like: creation.ones_like,
    np.full_like: creation.full_like, np.empty_like: creation.empty_like,
    np.copy: creation.copy, np.broadcast_arrays: shape_ops.broadcast_arrays,
}


# ufunc methods: ``np.add.reduce(t)``, ``np.add.accumulate``, ``np.multiply.outer``, ``np.add.at``
_REDUCE = {np.add: reductions.sum, np.multiply: reductions.prod, np.maximum: reductions.max,
           np.minimum: reductions.min, np.logical_and: reductions.all, np.logical_or: reductions.any}
_ACCUMULATE = {np.add: reductions.cumsum, np.multiply: composites.cumprod}
_AT = {np.add: "add", np.multiply: "multiply", np.maximum: "max", np.minimum: "min"}

# NumPy functions that only consume values (printing, saving): they run in NumPy on the
# computed values and return no array, so nothing a derivative needs can be lost
_VALUE_CONSUMERS = frozenset(f for f in (
    np.save, np.savez, np.savez_compressed, np.savetxt, np.array2string, np.array_repr,
    np.array_str) if f is not None)


def _unsupported(what: str) -> TypeError:
    return TypeError(
        f"qtrace: {what} is not implemented for qt.Tensor. qtrace never runs it in NumPy behind "
        "your back (the result would leave the graph: no laziness, no gradient, no jit). Convert "
        "explicitly with np.asarray(t) to compute it in NumPy, or express it with qtrace operations.")


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """``np.sin(t)``, ``ndarray + t`` and ``np.add.reduce(t)`` return tensors; ``out=`` writes
    into its target as NumPy does. Anything else raises ``TypeError`` (never a silent
    fallback to NumPy)."""
    name = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    out = kwargs.pop("out", None)
    if method == "at":
        return _ufunc_at(ufunc, name, *inputs, **kwargs)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("casting", None) if method == "__call__" else None
    if method == "__call__":
        fn = UFUNC_TO_QT.get(ufunc)
        if fn is None or kwargs:
            raise _unsupported(name + (f" with {sorted(kwargs)}" if fn is not None else ""))
        result = fn(*inputs)
    elif method == "reduce" and ufunc in _REDUCE:
        result = _REDUCE[ufunc](inputs[0], axis=kwargs.pop("axis", 0), keepdims=kwargs.pop("keepdims", False))
        if kwargs:
            raise _unsupported(f"{name} with {sorted(kwargs)}")
    elif method == "accumulate" and ufunc in _ACCUMULATE:
        result = _ACCUMULATE[ufunc](inputs[0], axis=kwargs.pop("axis", 0))
        if kwargs:
            raise _unsupported(f"{name} with {sorted(kwargs)}")
    elif method == "outer" and ufunc in UFUNC_TO_QT and not kwargs:
        a, b = (shape_ops.as_tensor(x, name) for x in inputs)
        result = UFUNC_TO_QT[ufunc](shape_ops.reshape(a, a.shape + (1,) * b.ndim), b)
    else:
        raise _unsupported(name)
    if isinstance(result, tuple):  # divmod, modf, frexp: one result per output
        if dtype is not None:
            raise _unsupported(f"{name} with ['dtype']")
        if out is None:
            return result
        targets = out if isinstance(out, tuple) else (out,)
        if len(targets) != len(result):
            raise ValueError(f"{name}: out= needs {len(result)} targets (one per output), got "
                             f"{len(targets)}")
        return tuple(r if t is None else write_out(t, r, name) for t, r in zip(targets, result))
    if dtype is not None:
        result = astype(result, dtype)
    if out is None:
        return result
    return write_out(out[0] if isinstance(out, tuple) else out, result, name)


def write_out(target, result, name: str, casting: str = "same_kind"):
    """NumPy's ``out=``: ``result`` written into ``target`` and ``target`` returned.

    A tensor target takes a result that broadcasts to its shape, cast as NumPy's ``casting``
    (``same_kind``; NumPy's reductions cast ``unsafe``) (``ValueError`` for shapes,
    ``TypeError`` for dtypes, naming ``name``); it and every view of it see the write. A
    NumPy array target asks for the value: computed now and written by ``np.copyto``
    (NumPy's own rules and errors, prefixed with ``name``)."""
    if isinstance(target, np.ndarray):
        try:
            np.copyto(target, np.asarray(result), casting=casting)
        except (TypeError, ValueError) as exc:
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            raise kind(f"{name}: out=: {exc}") from exc
        buffers.bump(target)
        return target
    if not isinstance(target, Tensor):
        raise TypeError(f"{name}: out= must be a qt.Tensor or a NumPy array, got {type(target).__name__}")
    if not np.can_cast(result.dtype, target.dtype, casting):
        raise TypeError(f"{name}: cannot cast a result of dtype {result.dtype} into out= of dtype "
                        f"{target.dtype} ({casting} casting)")
    if result.shape != target.shape:
        try:
            fits = np.broadcast_shapes(result.shape, target.shape) == target.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{name}: cannot write a result of shape {result.shape} into out= of "
                             f"shape {target.shape}")
        result = shape_ops.broadcast_to(result, target.shape)
    views.assign(target, cast(result._node, target.dtype, weak=False))
    return target


def _ufunc_at(ufunc, name: str, a, indices, b=None, **kwargs):
    """``np.add.at(t, idx, v)``: unbuffered in-place update of ``t`` (repeated indices accumulate)."""
    if kwargs or ufunc not in _AT or not isinstance(a, Tensor):
        raise _unsupported(name)
    views.write(a, lambda _: indexing.scatter(a, indices, 1 if b is None else b, _AT[ufunc])._node)


def array_function(self, func, types, args, kwargs):
    """NumPy functions qtrace implements run on tensors (``out=``, by keyword or position:
    the result written into it as NumPy's, see :func:`write_out`; sums, products and means
    accumulate in the common type of their input and of ``out``, and reductions cast into
    ``out`` unsafely, as NumPy's do); value consumers (printing, saving) run in NumPy on the
    computed values; anything else raises ``TypeError``."""
    if func in FUNCTIONS:
        return call(func, args, kwargs, f"{func.__module__}.{func.__name__}")
    if func in _VALUE_CONSUMERS:
        return func(*_to_numpy(args), **{k: _to_numpy(v) for k, v in kwargs.items()})
    raise _unsupported(f"numpy.{func.__name__}")


def call(func, args, kwargs, name: str):
    """qtrace's function of NumPy's ``func`` on ``args``, ``kwargs`` as NumPy's signature
    reads them, ``out=`` included (:func:`array_function`); ``name`` names the call in
    errors."""
    fn = FUNCTIONS[func]
    args, kwargs, target = _take_out(func, args, kwargs)
    if target is None:
        return fn(*args, **kwargs)
    first = None
    if args and isinstance(target, (Tensor, np.ndarray)):
        first = args[0].dtype if isinstance(args[0], Tensor) else np.asarray(args[0]).dtype
        if func in _ACCUMULATE_IN_OUT and not _given(func, "dtype", args, kwargs):
            kwargs["dtype"] = np.result_type(first, target.dtype)
        if func in _START_IN_OUT and not np.can_cast(first, target.dtype, "safe"):
            args, kwargs = _started_in_out(func, args, kwargs, np.dtype(target.dtype))
    result = fn(*args, **kwargs)
    if not isinstance(result, Tensor):
        raise _unsupported(f"{name} with out= (its result is not one array)")
    return write_out(target, result, name, _out_casting(func, first, target))


# NumPy's functions that accumulate in the common type of their input and out= when no
# dtype= is given (float32 data summed into a float64 out= is summed in float64)
_ACCUMULATE_IN_OUT = {np.sum, np.prod, np.mean, np.cumsum, np.cumprod, np.nansum, np.nanprod,
                      np.nanmean, np.nancumsum, np.nancumprod}
# ... and those whose result NumPy casts into out= unsafely (reductions: a float sum into an
# integer out= is truncated, where an elementwise function refuses)
_UNSAFE_OUT = {np.sum, np.prod, np.mean, np.cumsum, np.cumprod, np.max, np.min, np.amax, np.amin,
               np.any, np.all, np.var, np.trace, np.median, np.nanmedian, np.nansum, np.nanprod,
               np.nancumsum, np.nancumprod, np.nanmax, np.nanmin}
_ARG_REDUCTIONS = {np.argmax, np.argmin, np.nanargmax, np.nanargmin}
# ... and those that start from a value held in out='s dtype (they have no identity: NumPy
# starts each output from its first element, written into out= first)
_START_IN_OUT = {np.max, np.min, np.amax, np.amin, np.nanmax, np.nanmin}


def _started_in_out(func, args, kwargs, dtype: np.dtype) -> tuple:
    """``(args, kwargs)`` of a call of ``func`` (max, min, ...) into an out= of ``dtype``
    that cannot hold its input's values, as NumPy computes it: the value each output starts
    from, the first element along the reduced axes (index 0 of each), goes through ``dtype``
    first, the rest is compared in the common type of input and out=, and the result is cast
    into out=. (``np.max([-1, 0], out=bool)`` is True: -1 becomes True, 1 in int32, and
    max(1, 0) = 1.)"""
    names = parameters(func)
    bound = {**dict(zip(names, args)), **kwargs}
    x = creation.asarray(bound[names[0]])
    common = np.result_type(x.dtype, dtype)
    axis = bound.get("axis")
    reduced = (range(x.ndim) if axis is None else
               {a % max(x.ndim, 1) for a in ((axis,) if np.ndim(axis) == 0 else axis)})
    first = tuple(slice(0, 1) if d in reduced else slice(None) for d in range(x.ndim))
    started = astype(x, common)   # (a copy)
    started[first] = astype(astype(x[first], dtype), common)
    return (started, *args[1:]), kwargs   # (call() comes here with the input positional)


def _out_casting(func, first, target) -> str:
    """How NumPy's ``func`` on data of dtype ``first`` casts its result into ``target``."""
    if func in _UNSAFE_OUT:
        return "unsafe"
    if func in _ARG_REDUCTIONS:   # positions: into integers (or booleans) only
        return "unsafe" if np.dtype(target.dtype).kind in "biu" else "no"
    if func in (np.nanmean, np.nanvar) and first is not None and first.kind in "biu":
        return "unsafe"           # (no NaN to skip: NumPy's mean, var)
    return "same_kind"


@functools.cache
def parameters(func) -> tuple:
    """The names of NumPy function ``func``'s leading positional parameters."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in itertools.takewhile(
        lambda p: p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD), params))


def _given(func, name: str, args, kwargs) -> bool:
    names = parameters(func)
    return name in kwargs or (name in names and names.index(name) < len(args))


def _take_out(func, args, kwargs) -> tuple:
    """``(args, kwargs, out)``: NumPy's ``out`` argument taken out of a call of ``func``,
    given by keyword or by position (then the positional arguments after it become
    keywords, by NumPy's names); ``out`` is None when not given (or given as None)."""
    if "out" in kwargs:
        kwargs = dict(kwargs)
        return args, kwargs, kwargs.pop("out")
    names = parameters(func)
    if "out" not in names or len(args) <= names.index("out"):
        return args, kwargs, None
    k = names.index("out")
    return args[:k], {**kwargs, **dict(zip(names[k + 1:], args[k + 1:]))}, args[k]


def _to_numpy(x):
    if isinstance(x, Tensor):
        return x.numpy()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_numpy(v) for v in x)
    return x


def dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """Export the (computed) value through DLPack; NumPy's implementation does the work.

    The consumer may write through the export, so unless it asked for a copy, the
    buffer is volatile while exported (``qtrace.graph.buffers.export``): caches keyed on
    its data (adstack depths) are not trusted until the consumer's arrays are gone, and
    not from before the export after that.
    """
    buf = _exported(self)
    if not copy:
        buf = buffers.export(buf)
    kwargs = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    if copy is not None:
        kwargs["copy"] = copy
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    return buf.__dlpack__(stream=stream, **kwargs)


def dlpack_device(self):
    dev = self.device
    return (1, 0) if dev.kind == "cpu" else (2, dev.index)  # kDLCPU, kDLCUDA


def cuda_array_interface(self) -> dict:
    """``__cuda_array_interface__`` of a GPU tensor's (computed) memory, zero-copy; a CPU
    tensor has none (AttributeError, so ``hasattr`` is False as for NumPy arrays)."""
    if self.device.kind != "cuda":
        raise AttributeError("__cuda_array_interface__: a CPU qt.Tensor has no CUDA memory")
    buf = _exported(self)
    buffers.borrow(buf)   # written by whoever reads the interface, at any time from now on
    return buf.__cuda_array_interface__


def _exported(t):
    """``t``'s computed memory, for a consumer that reads it on the current stream: on a
    GPU, that stream first waits for the qtrace work of other streams."""
    buf = t._materialize()
    if t.device.kind != "cpu":
        graph_evaluate.order_reads(buf)
    return buf


Tensor.__array_ufunc__ = array_ufunc
Tensor.__array_function__ = array_function
Tensor.__dlpack__ = dlpack
Tensor.__dlpack_device__ = dlpack_device
Tensor.__cuda_array_interface__ = property(cuda_array_interface)
for _module in (composites, functional, rearrange, grids, statistics, selecting, numerical, elementwise,
                linalg_numpy):
    FUNCTIONS.update(_module.NUMPY_FUNCTIONS)
    UFUNC_TO_QT.update(_module.NUMPY_UFUNCS)
FUNCTIONS.update({  # numpy.linalg, sorting and complex parts on tensors
    **linalg_ext.NUMPY_FUNCTIONS,  # numpy.linalg (NumPy's positional signatures)
    np.sort: sorting.numpy_sort, np.argsort: sorting.numpy_argsort,
    np.searchsorted: sorting.searchsorted, np.take: sorting.take,
    np.take_along_axis: sorting.numpy_take_along_axis,
    np.count_nonzero: sorting.count_nonzero, np.nonzero: sorting.nonzero, np.isin: sorting.isin,
    np.real: array_api.real, np.imag: array_api.imag, np.angle: array_api.angle,
    np.iscomplex: array_api.iscomplex, np.isreal: array_api.isreal,
    np.real_if_close: array_api.real_if_close, np.sort_complex: sorting.sort_complex,
    **fft_ext.NUMPY_FUNCTIONS,  # numpy.fft (NumPy's positional signatures)
})
# NumPy's gufuncs of vector products (matvec and vecmat are NumPy 2.2's)
UFUNC_TO_QT.update({getattr(np, name): fn for name, fn in (
    ("vecdot", linalg_ext.vecdot), ("matvec", linalg.matvec), ("vecmat", linalg.vecmat))
    if hasattr(np, name)})
# what a program asks of an array without computing anything new
FUNCTIONS.update({
    np.result_type: lambda *xs: np.result_type(*(x.dtype if isinstance(x, Tensor) else x for x in xs)),
    np.iscomplexobj: array_api.iscomplexobj, np.isrealobj: array_api.isrealobj,
    np.may_share_memory: lambda a, b, max_work=None: _shares(a, b),
    np.shares_memory: lambda a, b, max_work=None: _shares(a, b),
})


def _shares(a, b) -> bool:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a is b or (a._view is not None and b._view is not None and a._view[0] is b._view[0])
    return False
