"""NumPy interoperability: ``__array_ufunc__``, ``__array_function__`` and DLPack."""

from __future__ import annotations

import numpy as np

from ..graph import buffers
from ..graph.primitives import ELEMENTWISE_UFUNCS
from . import composites, creation, elementwise, linalg, reductions, shape_ops
from .convert import astype
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


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """``np.sin(t)`` and ``ndarray + t`` return tensors; other ufunc uses defer to NumPy."""
    fn = UFUNC_TO_QT.get(ufunc)
    if method != "__call__" or fn is None or kwargs.get("out") is not None:
        return _numpy_fallback(getattr(ufunc, method), inputs, kwargs)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("casting", None)
    if kwargs:
        return NotImplemented
    out = fn(*inputs)
    return astype(out, dtype) if dtype is not None else out


def array_function(self, func, types, args, kwargs):
    """NumPy functions qtrace has run on tensors; others run in NumPy on the values."""
    fn = FUNCTIONS.get(func)
    if fn is None:
        return _numpy_fallback(func, args, kwargs)
    return fn(*args, **kwargs)


def _to_numpy(x):
    if isinstance(x, Tensor):
        return x.numpy()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_numpy(v) for v in x)
    return x


def _numpy_fallback(func, args, kwargs):
    args = _to_numpy(args)
    kwargs = {k: _to_numpy(v) for k, v in kwargs.items()}
    return func(*args, **kwargs)


def dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """Export the (computed) value through DLPack; NumPy's implementation does the work.

    The consumer may write through the export, so the buffer is marked as written:
    caches keyed on its data (adstack depths) are not trusted afterwards.
    """
    buf = self._materialize()
    buffers.mark_written(buf)
    kwargs = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    if copy is not None:
        kwargs["copy"] = copy
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    return buf.__dlpack__(stream=stream, **kwargs)


def dlpack_device(self):
    return (1, 0)  # kDLCPU


Tensor.__array_ufunc__ = array_ufunc
Tensor.__array_function__ = array_function
Tensor.__dlpack__ = dlpack
Tensor.__dlpack_device__ = dlpack_device
FUNCTIONS.update(composites.NUMPY_FUNCTIONS)
