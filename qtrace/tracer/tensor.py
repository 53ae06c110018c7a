"""``qt.Tensor``: the proxy array. Operations record graph nodes; values appear on demand."""

from __future__ import annotations

import numpy as np

from ..graph import evaluate as _evaluate
from ..graph.node import Node
from .context import ad_level, concrete_error, is_abstract

# installed by qtrace.tracer.pending (which imports this module): note, flush, array_view
_note = _flush = _array_view = _array_of = None


def install(note, flush, array_view, array_of) -> None:
    global _note, _flush, _array_view, _array_of
    _note, _flush, _array_view, _array_of = note, flush, array_view, array_of


class Tensor:
    """An n-dimensional array whose operations are recorded, then compiled and run lazily.

    Create tensors with ``qt.array``, ``qt.asarray``, ``qt.zeros`` and friends. Every
    operation returns a new tensor immediately, without computing anything; the value
    is computed when it is needed (``.numpy()``, ``print``, ``float(t)``, ``qt.eval``).

    Example:
        >>> import qtrace as qt
        >>> x = qt.arange(4.0)
        >>> y = qt.sin(x) * 2 + 1      # recorded, not run
        >>> y.shape, str(y.dtype)
        ((4,), 'float64')
        >>> y.numpy().round(3)         # compiled (once) and run now
        array([1.   , 2.683, 2.819, 1.282])
    """

    __slots__ = ("_node", "_view", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, node: Node):
        self._node = node
        self._view = None   # (Storage, steps) once it has views or is one (see views.py)
        if node.inputs:
            _note(self)

    # -- metadata ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._node.shape

    @property
    def dtype(self) -> np.dtype:
        return self._node.dtype

    @property
    def ndim(self) -> int:
        return len(self._node.shape)

    @property
    def size(self) -> int:
        return self._node.size

    @property
    def itemsize(self) -> int:
        return self._node.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self._node.size * self._node.dtype.itemsize

    @property
    def device(self):
        return self._node.device

    @property
    def weak_type(self) -> bool:
        """True for values that promote like Python scalars (traced Python scalar arguments)."""
        return self._node.weak

    def __len__(self) -> int:
        if not self._node.shape:
            raise TypeError("len() of unsized object (a 0-d qt.Tensor)")
        return self._node.shape[0]

    __hash__ = None  # like numpy.ndarray: mutable-looking, so unhashable

    # -- evaluation -------------------------------------------------------------------
    def _materialize(self) -> np.ndarray:
        node = self._node
        if node.prim == "input":
            if node.buffer is None:
                raise concrete_error("qt.Tensor value")
            return node.buffer
        if is_abstract(node):
            raise concrete_error("qt.Tensor value")
        if self._view is not None:  # a view of evaluated memory: a NumPy view of it, no copy
            arr = _array_view(self)
            if arr is not None:
                return arr
        arr = _array_of(node)
        if arr is not None:  # view nodes over computed data: read through NumPy, no kernel
            return arr
        if ad_level():  # while differentiating, the tensor must stay connected to its graph
            (buf,) = _evaluate.evaluate((node,))
            return buf
        return _flush((self,))[0]

    def numpy(self) -> np.ndarray:
        """The value as a read-only NumPy array (computed now if pending), no copy for a
        CPU tensor; a GPU tensor's value is copied to the host.

        For a CPU tensor its base is a read-only memoryview of the tensor's memory, so NumPy
        refuses both writes and ``arr.flags.writeable = True``: this is not an export the
        caller could write behind qtrace's back (``qtrace.graph.buffers``). Copy it to modify
        it. A GPU tensor's host copy is the caller's own, marked read-only all the same.

        Example:
            >>> import qtrace as qt
            >>> (qt.ones(2, dtype=qt.int32) * 3).numpy()
            array([3, 3], dtype=int32)
        """
        buf = self._materialize()
        if not isinstance(buf, np.ndarray):   # a GPU tensor's value, copied here
            arr = _evaluate.to_host(buf)
            arr.flags.writeable = False
            return arr
        if buf.flags.writeable:
            buf = np.asarray(memoryview(buf).toreadonly())
        return buf

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        if copy:
            return arr.copy()
        return arr

    def item(self):
        """The single element as a Python scalar."""
        if self.size != 1:
            raise ValueError(f"qt.Tensor.item: can only convert a tensor of size 1, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        """``operator.index(x)`` (``range(x)``, ``seq[x]``): a 0-d integer tensor as a Python
        int; as in NumPy, any other shape, a bool or a float raises ``TypeError``."""
        if self.ndim != 0 or self.dtype.kind not in "iu":
            raise TypeError(f"only integer scalar tensors can be converted to a scalar index, got "
                            f"shape {self.shape} dtype {self.dtype}")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"The truth value of a qt.Tensor with shape {self.shape} is ambiguous. "
                "Use .any() or .all()")
        return bool(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __repr__(self) -> str:
        if is_abstract(self._node):
            return f"qt.Tensor(<traced>, shape={self.shape}, dtype={self.dtype})"
        body = np.array2string(self.numpy(), separator=", ", prefix="qt.Tensor(")
        extra = f", dtype={self.dtype}" if self.dtype not in (np.float64, np.int64, np.bool_) else ""
        dev = f", device='{self.device}'" if str(self.device) != "cpu" else ""
        return f"qt.Tensor({body}{extra}{dev})"

    def __str__(self) -> str:
        if is_abstract(self._node):
            return repr(self)
        return str(self.numpy())

    def __format__(self, spec: str) -> str:
        if self.ndim == 0 and spec:
            return format(self.item(), spec)
        return str(self) if not spec else format(str(self), spec)

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d qt.Tensor")
        for i in range(self.shape[0]):
            yield self[i]

    def __reduce__(self):
        from .creation import array
        return (array, (np.array(self.numpy()),))


def node_of(x) -> Node:
    return x._node
