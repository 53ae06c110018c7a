"""``Tensor.flat``: NumPy's flat iterator over a tensor, in C order.

``x.flat[k]`` reads element ``k`` of ``x`` counted in C order whatever ``x``'s layout;
``x.flat[k] = v`` writes it into ``x`` (and so into every view sharing its memory, as
NumPy's ``flat`` writes into the array); ``x.flat = v`` fills ``x``; ``for v in x.flat``
and ``next(it)`` visit the elements (``it.index`` and ``it.coords`` say where the iterator
is); ``x.flat == v`` and the other comparisons compare every element. As NumPy's, a value
shorter than the elements it is assigned to is repeated (``x.flat[[0, 1, 2]] = [7, 8]``
writes 7, 8, 7), and of several writes to one position the last wins — for keys given as
Python or NumPy values; a tensor key repeating a position leaves unspecified which value
wins (a scatter's writes race on a GPU).

Example:
    >>> import numpy as np
    >>> import qtrace as qt
    >>> x = qt.asarray(np.arange(6.0).reshape(2, 3))
    >>> x.T.flat[1].item()            # the transpose's second element in C order
    3.0
    >>> x.flat[[0, 4]] = -1.0
    >>> x.tolist()
    [[-1.0, 1.0, 2.0], [3.0, -1.0, 5.0]]
"""

from __future__ import annotations

import numpy as np

from . import elementwise, selecting, shape_ops
from .tensor import Tensor


class FlatIter:
    """What ``x.flat`` returns: indexing it reads and writes ``x``'s elements by their
    position in C order (see the module's documentation)."""

    __slots__ = ("base", "index")

    def __init__(self, base: Tensor):
        self.base = base
        self.index = 0   # the position of the element ``next`` returns

    def __len__(self) -> int:
        return self.base.size

    def __iter__(self):
        return self   # (NumPy's flat iterator is its own iterator)

    def __next__(self) -> Tensor:
        if self.index >= self.base.size:
            raise StopIteration
        self.index += 1
        return self._flat()[self.index - 1]

    @property
    def coords(self) -> tuple:
        """The coordinates in ``base`` of the element ``next`` returns (past the end: the
        first axis's length, then zeros, as NumPy's)."""
        shape = self.base.shape
        if self.index >= self.base.size:
            return tuple(shape[:1]) + (0,) * (len(shape) - 1)
        return tuple(int(c) for c in np.unravel_index(self.index, shape))

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self.base).reshape(-1)
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"qtrace flat iterator over a tensor of shape {self.base.shape}"

    def copy(self) -> Tensor:
        """A new 1-d tensor of the elements in C order (``ndarray.flat.copy``)."""
        return self._flat().copy()

    def __getitem__(self, key):
        return self._flat()[_flat_key(key)]

    def __setitem__(self, key, value) -> None:
        x = self.base
        key = _flat_key(key)
        if np.ndim(key) == 0 and not isinstance(key, slice) and np.ndim(value) != 0:
            raise ValueError(f"qt.Tensor.flat: one element takes a scalar, got a value of shape "
                             f"{np.shape(value)} (as NumPy's)")
        if isinstance(key, Tensor) and key.dtype == np.bool_:
            if key.shape != (x.size,):
                raise IndexError(f"qt.Tensor.flat: a boolean index must have shape ({x.size},), "
                                 f"got {key.shape}")
            if np.ndim(value) == 0:   # a mask write (jit-able: no count needed)
                x[shape_ops.reshape(key, x.shape)] = value
                return
            positions = np.flatnonzero(np.asarray(key))   # (their number shapes the write)
        elif isinstance(key, Tensor):
            positions = elementwise.where(key < 0, key + x.size, key)
        else:
            positions = _host_positions(key, x.size)
        if (value.size if isinstance(value, Tensor) else np.size(value)) == 0:
            return   # (NumPy: an empty value writes nothing)
        values = _repeated(value, positions)
        target = x if x.ndim else shape_ops.reshape(x, (1,))   # (a view: writes reach x)
        target[_coordinates(positions, target.shape)] = values

    def _flat(self) -> Tensor:
        return shape_ops.reshape(self.base, (-1,))

    # comparisons compare every element, as NumPy's (a 1-d result)
    def __eq__(self, other):
        return self._flat() == other

    def __ne__(self, other):
        return self._flat() != other

    def __lt__(self, other):
        return self._flat() < other

    def __le__(self, other):
        return self._flat() <= other

    def __gt__(self, other):
        return self._flat() > other

    def __ge__(self, other):
        return self._flat() >= other

    __hash__ = None


def assign_all(x: Tensor, value) -> None:
    """``x.flat = value``: every element of ``x`` from ``value`` (repeated as needed)."""
    FlatIter(x)[...] = value


def _flat_key(key):
    """A key of ``flat``: integers, slices, ``...``, integer sequences (lists, NumPy arrays,
    tensors), boolean NumPy arrays and tensors. Tuples index one axis only, as NumPy's
    ``flat``; a boolean scalar or list, ``None`` and floats are refused, as NumPy's."""
    if isinstance(key, tuple):
        if len(key) != 1:
            raise IndexError(f"qt.Tensor.flat: one index expected (the array is seen as 1-d), got {key!r}")
        key = key[0]
    if key is Ellipsis:
        return slice(None)
    if key is None or isinstance(key, (bool, np.bool_)):
        raise IndexError(f"qt.Tensor.flat: unsupported index {key!r} (as NumPy's flat iterator)")
    if isinstance(key, list):
        host = np.asarray(key, dtype=np.int64 if not key else None)
        if host.dtype == np.bool_:
            raise IndexError("qt.Tensor.flat: boolean lists are not supported (as NumPy's flat "
                             "iterator): pass a boolean array")
        key = host
    if isinstance(key, np.ndarray) and key.dtype != np.bool_ and not np.issubdtype(key.dtype, np.integer):
        raise IndexError(f"qt.Tensor.flat: indices must be integers or booleans, got {key.dtype}")
    return key


def _host_positions(key, size: int):
    """The C-order positions a host key selects in ``size`` elements: an integer, or an
    integer array of the key's shape (negative positions counted from the end)."""
    if isinstance(key, slice):
        return np.arange(*key.indices(size))
    if isinstance(key, np.ndarray) and key.dtype == np.bool_:
        if key.shape != (size,):
            raise IndexError(f"qt.Tensor.flat: a boolean index must have shape ({size},), got {key.shape}")
        return np.flatnonzero(key)
    positions = np.asarray(key, dtype=np.int64)
    bad = (positions < -size) | (positions >= size)
    if bad.any():
        raise IndexError(f"qt.Tensor.flat: index {int(positions[bad].flat[0])} is out of bounds for "
                         f"size {size}")
    positions = np.where(positions < 0, positions + size, positions)
    return int(positions) if positions.ndim == 0 else positions


def _coordinates(positions, shape: tuple) -> tuple:
    if isinstance(positions, Tensor):
        return selecting.unravel_index(positions, shape)
    return np.unravel_index(positions, shape)


def _repeated(value, positions):
    """``value`` for the elements at ``positions``: as it is when it is a scalar or has one
    value per position, else repeated (or cut) to their number, as NumPy's ``flat``."""
    count = int(np.size(positions)) if not isinstance(positions, Tensor) else positions.size
    shape = np.shape(positions) if not isinstance(positions, Tensor) else positions.shape
    if isinstance(value, Tensor):
        if value.ndim == 0 or value.size == count:
            return shape_ops.reshape(value, shape) if value.ndim else value
        flat = shape_ops.reshape(value, (-1,))
    else:
        host = np.asarray(value)
        if host.ndim == 0 or host.size == count:
            return host.reshape(shape) if host.ndim else value
        flat = host.reshape(-1)
    return flat[np.arange(count) % flat.shape[0]].reshape(shape)
