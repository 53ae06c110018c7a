"""Operators and array methods of ``qt.Tensor``, attached in one table."""

from __future__ import annotations

from . import elementwise as ew
from . import indexing, linalg, reductions, shape_ops
from .convert import astype
from .tensor import Tensor


def _binary(name: str, reflected: bool = False):
    apply2 = ew.apply2
    if reflected:
        def op(self, other):
            return apply2(name, other, self)
    else:
        def op(self, other):
            return apply2(name, self, other)
    return op


_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "and": "bitwise_and",
    "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift", "rshift": "right_shift",
}
for _dunder, _prim in _BINARY.items():
    setattr(Tensor, f"__{_dunder}__", _binary(_prim))
    setattr(Tensor, f"__r{_dunder}__", _binary(_prim, reflected=True))
    # x += y rebinds x to a new tensor (Python falls back to __add__ when __iadd__ is absent)

for _dunder, _prim in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                       "gt": "greater", "ge": "greater_equal"}.items():
    setattr(Tensor, f"__{_dunder}__", _binary(_prim))

Tensor.__matmul__ = lambda self, other: linalg.matmul(self, other)
Tensor.__rmatmul__ = lambda self, other: linalg.matmul(other, self)
Tensor.__neg__ = lambda self: ew.apply1("negative", self)
Tensor.__pos__ = lambda self: ew.apply1("positive", self)
Tensor.__abs__ = lambda self: ew.apply1("abs", self)
Tensor.__invert__ = lambda self: ew.apply1("invert", self)
Tensor.__getitem__ = indexing.getitem
Tensor.__setitem__ = indexing.setitem
Tensor.at = property(indexing.AtProperty,
                     doc="Functional updates: ``x.at[idx].set/add/multiply/min/max(v)``.")

Tensor.T = property(lambda self: shape_ops.transpose(self), doc="The transpose (axes reversed).")
Tensor.mT = property(lambda self: shape_ops.swapaxes(self, -1, -2), doc="Transpose of the last two axes.")


def _reshape(self, *shape, order: str = "C"):
    if order != "C":
        raise NotImplementedError("qt.Tensor.reshape: only order='C' is supported")
    return shape_ops.reshape(self, *shape)


def _transpose(self, *axes):
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)) or not axes:
        axes = axes[0] if axes else None
    return shape_ops.transpose(self, axes)


Tensor.reshape = _reshape
Tensor.transpose = _transpose
Tensor.astype = astype
Tensor.ravel = shape_ops.ravel
Tensor.flatten = shape_ops.ravel
Tensor.squeeze = shape_ops.squeeze
Tensor.swapaxes = shape_ops.swapaxes
Tensor.flip = shape_ops.flip
Tensor.sum = reductions.sum
Tensor.prod = reductions.prod
Tensor.mean = reductions.mean
Tensor.max = reductions.max
Tensor.min = reductions.min
Tensor.argmax = reductions.argmax
Tensor.argmin = reductions.argmin
Tensor.any = reductions.any
Tensor.all = reductions.all
Tensor.cumsum = reductions.cumsum
Tensor.clip = ew.clip
Tensor.round = ew.round
Tensor.dot = linalg.dot
Tensor.copy = lambda self: Tensor(self._node)
