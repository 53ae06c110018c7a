"""Random numbers: a counter-based generator (Threefry-2x32, as JAX), computed inside kernels.

**Keys, not hidden state.** A key is a ``uint32`` tensor of shape ``(2,)``
(``qt.random.key(seed)``). Every function takes a key and returns values that depend only
on the key, the shape and the position of each element: element ``i`` (C order) of a draw
is made from the 64 bits Threefry-2x32 gives for counter ``i`` under the key. ``split``
derives independent keys (counters with the high word all ones, never used by draws).
Because a draw is an ordinary elementwise node of its counter, it fuses into its
consumers (``x + 0.1 * normal(key, x.shape)`` is one kernel, nothing stored) and gives the
same numbers on every device and with fusion on or off. Keys are tensors, so a new key
does not compile a new kernel, and inside ``qt.jit`` a key passed as an argument draws new
numbers on every call.

**For NumPy programs**, ``qt.random.default_rng(seed)`` returns a :class:`Generator` with
NumPy's method names (``random``, ``uniform``, ``normal``, ``standard_normal``,
``integers``, ``choice``, ``permutation``, ``shuffle`` is not provided); it holds a key
and splits it at every call. It cannot be used inside ``qt.jit`` (its key would be
frozen into the trace): pass keys there.

Conversions: a ``float64`` uniform takes the top 53 bits (``[0, 1)``, multiples of
``2**-53``), ``float32`` the top 24; normals are Box-Muller pairs from two split keys;
``integers`` reduce 64 bits modulo the range (bias below ``range / 2**64``).

Example:
    >>> import qtrace as qt
    >>> k = qt.random.key(0)
    >>> u = qt.random.uniform(k, (3,))
    >>> bool(((u >= 0) & (u < 1)).all())
    True
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import TracerError
from . import dtypes
from . import elementwise as ew
from .context import record, tracing
from .convert import astype, cast, input_node, wrap
from .creation import arange
from .shape_ops import as_tensor, reshape
from .tensor import Tensor

_MASK32 = (1 << 32) - 1
_SPLIT = 0xFFFFFFFF << 32   # counter high word of derived keys (draws use small counters)


def key(seed: int) -> Tensor:
    """A key for ``seed`` (an integer below ``2**64``): ``[seed >> 32, seed & 0xffffffff]``.

    Example:
        >>> import qtrace as qt
        >>> qt.random.key(7).tolist()
        [0, 7]
    """
    seed = int(seed)
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"qt.random.key: seed must be in [0, 2**64), got {seed}")
    return wrap(input_node(np.array([seed >> 32, seed & _MASK32], dtype=np.uint32), "random.key"))


def _key(k, op: str) -> Tensor:
    t = as_tensor(k, op)
    if t.shape != (2,) or t.dtype != np.uint32:
        raise TypeError(f"qt.random.{op}: a key is a uint32 tensor of shape (2,) (qt.random.key), "
                        f"got {t.dtype} {t.shape}")
    return t


def _shape(shape) -> tuple:
    if shape is None:
        return ()
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def bits(key, shape=()) -> Tensor:
    """64 random bits per element (``uint64``), element ``i`` from counter ``i``."""
    k = _key(key, "bits")
    return _bits((k[0], k[1]), _shape(shape))


def _bits(words: tuple, shape: tuple) -> Tensor:
    counter = wrap(record("iota", (), (), shape, dtypes.int64))
    return _threefry(words, astype(counter, dtypes.uint64))


def _threefry(words: tuple, counter: Tensor) -> Tensor:
    nodes = (words[0]._node, words[1]._node, counter._node)
    return wrap(record("random_bits", nodes, (), counter.shape, dtypes.uint64))


def _subkey(k: Tensor, j: int) -> tuple:
    """The two words of ``split(k)[j]``, as 0-d values (computed where they are used)."""
    w = _threefry((k[0], k[1]), wrap(input_node(np.array(_SPLIT | j, dtype=np.uint64), "split")))
    lo = astype(ew.apply2("bitwise_and", w, np.uint64(_MASK32)), dtypes.uint32)
    return lo, astype(ew.apply2("right_shift", w, np.uint64(32)), dtypes.uint32)


def split(key, num: int = 2) -> Tensor:
    """``num`` new keys (shape ``(num, 2)``), independent of each other and of ``key``'s draws.

    Example:
        >>> import qtrace as qt
        >>> qt.random.split(qt.random.key(0), 3).shape
        (3, 2)
    """
    k = _key(key, "split")
    counter = ew.apply2("bitwise_or", astype(arange(int(num)), dtypes.uint64), np.uint64(_SPLIT))
    words = _threefry((k[0], k[1]), counter)
    lo = astype(ew.apply2("bitwise_and", words, np.uint64(_MASK32)), dtypes.uint32)
    hi = astype(ew.apply2("right_shift", words, np.uint64(32)), dtypes.uint32)
    from .shape_ops import stack
    return stack([lo, hi], axis=1)


def _float_dtype(dtype, op: str) -> np.dtype:
    dt = dtypes.canonical(dtype if dtype is not None else dtypes.float64, f"qt.random.{op}")
    if dt.kind != "f":
        raise TypeError(f"qt.random.{op}: dtype must be floating-point, got {dt}")
    return dt


def _unit(key, shape, dt: np.dtype) -> Tensor:
    """Uniform in ``[0, 1)`` with the dtype's full precision (``key``: a key or its words)."""
    b = _bits(key, shape) if isinstance(key, tuple) else bits(key, shape)
    keep = 53 if dt == np.float64 else 24
    mant = ew.apply2("right_shift", b, np.uint64(64 - keep))
    return ew.apply2("multiply", astype(mant, dt), float(2.0 ** -keep))


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0) -> Tensor:
    """Uniform floats in ``[minval, maxval)``.

    Example:
        >>> import qtrace as qt
        >>> qt.random.uniform(qt.random.key(1), (2, 3), minval=-1.0).shape
        (2, 3)
    """
    dt = _float_dtype(dtype, "uniform")
    u = _unit(key, _shape(shape), dt)
    if minval == 0.0 and maxval == 1.0:
        return u
    return ew.apply2("add", ew.apply2("multiply", u, ew.apply2("subtract", maxval, minval)), minval)


def normal(key, shape=(), dtype=None) -> Tensor:
    """Standard normal floats (Box-Muller from two independent uniforms).

    Example:
        >>> import qtrace as qt
        >>> abs(float(qt.random.normal(qt.random.key(2), (20000,)).mean())) < 0.05
        True
    """
    dt = _float_dtype(dtype, "normal")
    shape = _shape(shape)
    k = _key(key, "normal")
    u1 = _unit(_subkey(k, 0), shape, dt)
    u2 = _unit(_subkey(k, 1), shape, dt)
    radius = ew.apply1("sqrt", ew.apply2("multiply", -2.0, ew.apply1("log1p", ew.apply1("negative", u1))))
    return ew.apply2("multiply", radius, ew.apply1("cos", ew.apply2("multiply", u2, 2.0 * math.pi)))


def integers(key, minval, maxval=None, shape=(), dtype=None) -> Tensor:
    """Integers in ``[minval, maxval)`` (``integers(key, n)`` draws from ``[0, n)``).

    Example:
        >>> import qtrace as qt
        >>> v = qt.random.integers(qt.random.key(3), 5, 10, (100,))
        >>> int(v.min()) >= 5 and int(v.max()) < 10
        True
    """
    if maxval is None:
        minval, maxval = 0, minval
    dt = dtypes.canonical(dtype if dtype is not None else dtypes.int64, "qt.random.integers")
    if dt.kind not in "iu":
        raise TypeError(f"qt.random.integers: dtype must be an integer type, got {dt}")
    lo, hi = int(minval), int(maxval)
    if hi <= lo:
        raise ValueError(f"qt.random.integers: empty range [{lo}, {hi})")
    span = hi - lo
    r = ew.apply2("remainder", bits(key, _shape(shape)), np.uint64(span))
    return astype(ew.apply2("add", astype(r, dtypes.int64), lo) if lo else r, dt)


def bernoulli(key, p=0.5, shape=None) -> Tensor:
    """``True`` with probability ``p`` (a number or a tensor broadcast to ``shape``)."""
    pt = p if isinstance(p, Tensor) else None
    shape = _shape(shape if shape is not None else (pt.shape if pt is not None else ()))
    return ew.apply2("less", _unit(key, shape, dtypes.float64), p)


def permutation(key, x) -> Tensor:
    """A random permutation of ``range(x)`` (an int) or of ``x``'s first axis."""
    from .sorting import argsort, take
    n = int(x) if not isinstance(x, (Tensor, np.ndarray, list)) else as_tensor(x, "permutation").shape[0]
    order = argsort(bits(key, (n,)))
    if isinstance(x, (Tensor, np.ndarray, list)):
        return take(as_tensor(x, "permutation"), order, axis=0)
    return order


def choice(key, a, shape=(), replace: bool = True, p=None) -> Tensor:
    """Samples of ``a`` (an int ``n`` means ``range(n)``): with replacement by default,
    with probabilities ``p`` if given, or without replacement (a permutation's prefix)."""
    from .reductions import cumsum
    from .sorting import searchsorted, take
    pool = as_tensor(a, "choice") if isinstance(a, (Tensor, np.ndarray, list)) else None
    n = pool.shape[0] if pool is not None else int(a)
    shape = _shape(shape)
    size = int(np.prod(shape, dtype=np.int64))
    if not replace:
        if p is not None:
            raise NotImplementedError("qt.random.choice: replace=False with p= is not supported")
        if size > n:
            raise ValueError(f"qt.random.choice: cannot take {size} samples from {n} without replacement")
        idx = reshape(permutation(key, n)[:size], shape)
    elif p is not None:
        cdf = cumsum(as_tensor(p, "choice"))
        u = ew.apply2("multiply", _unit(key, shape, dtypes.float64), cdf[-1])
        idx = ew.apply2("minimum", searchsorted(cdf, reshape(u, -1), side="right"), n - 1)
        idx = reshape(idx, shape)
    else:
        idx = integers(key, 0, n, shape)
    return take(pool, reshape(idx, -1), axis=0).reshape(shape + pool.shape[1:]) if pool is not None else idx


class Generator:
    """NumPy-``Generator``-like convenience: holds a key and splits it at every call.

    Example:
        >>> import qtrace as qt
        >>> rng = qt.random.default_rng(0)
        >>> rng.random((2, 2)).shape
        (2, 2)
    """

    def __init__(self, seed: int = 0):
        self._key = key(seed)

    def _next(self) -> Tensor:
        if tracing():
            raise TracerError("qt.random.Generator inside qt.jit: its key would be frozen into the "
                              "trace (the same numbers on every call); pass a key argument and use "
                              "qt.random.uniform(key, ...) / split(key) instead")
        pair = split(self._key, 2)
        self._key, sub = pair[0], pair[1]
        return cast_key(sub)

    def random(self, size=None, dtype=None) -> Tensor:
        return uniform(self._next(), _shape(size), dtype)

    def uniform(self, low=0.0, high=1.0, size=None) -> Tensor:
        return uniform(self._next(), _shape(size), None, low, high)

    def standard_normal(self, size=None, dtype=None) -> Tensor:
        return normal(self._next(), _shape(size), dtype)

    def normal(self, loc=0.0, scale=1.0, size=None) -> Tensor:
        z = normal(self._next(), _shape(size))
        return ew.apply2("add", ew.apply2("multiply", z, scale), loc)

    def integers(self, low, high=None, size=None, dtype=None) -> Tensor:
        return integers(self._next(), low, high, _shape(size), dtype)

    def choice(self, a, size=None, replace: bool = True, p=None) -> Tensor:
        return choice(self._next(), a, _shape(size), replace, p)

    def permutation(self, x) -> Tensor:
        return permutation(self._next(), x)


def cast_key(k: Tensor) -> Tensor:
    return wrap(cast(k._node, dtypes.uint32, weak=False))


def default_rng(seed: int = 0) -> Generator:
    """A :class:`Generator` seeded with ``seed`` (NumPy's spelling)."""
    return Generator(seed)
