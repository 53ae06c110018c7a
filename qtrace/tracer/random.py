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
NumPy's method names and rules (``random``, ``uniform``, ``normal``, ``standard_normal``,
``integers``, ``choice``, ``permutation``, ``shuffle``, ``exponential``,
``standard_exponential``); it holds a key on the host and splits it at every call. It
cannot be used inside ``qt.jit`` (its key would be frozen into the trace): pass keys there.

**NumPy's legacy global-state API** (``np.random.seed``, ``rand``, ``randn``, ``randint``,
``random``/``random_sample``/``ranf``/``sample``, ``standard_normal``, ``normal``,
``uniform``, ``exponential``, ``choice``, ``permutation``, ``shuffle``) draws from one
process-wide hidden generator: a key held on the host that ``seed(s)`` sets to
``key(s)`` and that every call splits, under a lock (threads calling at once each get
their own subkey; which thread gets which is up to the scheduler). ``seed(s)`` followed by
legacy calls gives the same numbers as ``default_rng(s)``'s methods of the same names.
**The stream is this counter-based generator, not NumPy's MT19937**: a seed gives the
same numbers in qtrace on every run, device and fusion setting, but not the numbers
NumPy gives for that seed. Results are ``qt.Tensor``s, ``float64`` (or ``int64``) by
default as in NumPy; where NumPy returns a Python scalar (no ``size``, scalar
parameters) they are 0-d tensors. Arguments are validated as NumPy does (a tensor
argument whose values are checked, such as ``scale``, is evaluated). Without ``seed``
the hidden key starts from the operating system's entropy, as NumPy's does. Inside
``qt.jit`` these functions raise ``qt.TracerError``: pass a key instead.

``normal``, ``uniform``, ``choice`` and ``permutation`` exist in both forms and dispatch on
their first argument: a key (a ``uint32`` tensor or NumPy array of shape ``(2,)``,
positional or ``key=``), or a keyword only the key form has (``shape``, ``dtype``,
``minval``, ``maxval``), selects the key form, unchanged; anything else is NumPy's legacy
signature. ``normal``/``uniform`` also read a call whose first argument is a
``(2,)``-shaped array and whose second is a tuple of integers (``normal(x, (3,))``) as
the key form, so that a wrong key is reported (``TypeError``) rather than read as
``loc``/``scale``: pass such a ``scale``/``high`` as a list or an array, or by keyword.

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
import operator
import os
import threading

import numpy as np

from ..errors import TracerError
from . import dtypes
from . import elementwise as ew
from .context import record, tracing
from .convert import astype, input_node, wrap
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


def _keyed_uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0) -> Tensor:
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


def _keyed_normal(key, shape=(), dtype=None) -> Tensor:
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


def _keyed_permutation(key, x) -> Tensor:
    """A random permutation of ``range(x)`` (an int) or of ``x``'s first axis."""
    from .sorting import argsort, take
    n = int(x) if not isinstance(x, (Tensor, np.ndarray, list)) else as_tensor(x, "permutation").shape[0]
    order = argsort(bits(key, (n,)))
    if isinstance(x, (Tensor, np.ndarray, list)):
        return take(as_tensor(x, "permutation"), order, axis=0)
    return order


def _keyed_choice(key, a, shape=(), replace: bool = True, p=None) -> Tensor:
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
        idx = reshape(_keyed_permutation(key, n)[:size], shape)
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

    def __init__(self, seed: int | None = None):
        words = None
        if seed is not None:
            w = key(seed).tolist()   # (the checks and words of key(seed))
            words = (int(w[0]), int(w[1]))
        self._key = _HostKey(words, "qt.random.Generator", "its key")

    def _live(self) -> _HostKey:
        """The key, after refusing a call inside ``qt.jit`` (before the arguments are read)."""
        _refuse_in_jit(self._key.what, self._key.whose)
        return self._key

    def _next(self) -> Tensor:
        return self._live().next("Generator")

    def random(self, size=None, dtype=None) -> Tensor:
        return _keyed_uniform(self._next(), _shape(size), dtype)

    def uniform(self, low=0.0, high=1.0, size=None) -> Tensor:
        return _legacy_uniform(low, high, size, self._live())

    def standard_normal(self, size=None, dtype=None) -> Tensor:
        return _keyed_normal(self._next(), _shape(size), dtype)

    def normal(self, loc=0.0, scale=1.0, size=None) -> Tensor:
        return _legacy_normal(loc, scale, size, self._live())

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint: bool = False) -> Tensor:
        return _randint(low, high, size, np.int64 if dtype is None else dtype, self._live(), endpoint,
                        "Generator.integers")

    def choice(self, a, size=None, replace: bool = True, p=None) -> Tensor:
        """Samples of ``a`` (an int ``n``: ``range(n)``; an array: its rows, as NumPy's
        ``Generator.choice`` with ``axis=0``), as :func:`choice`."""
        return _legacy_choice(a, size, replace, p, self._live(), rows=True)

    def permutation(self, x) -> Tensor:
        return _legacy_permutation(x, self._live())

    def shuffle(self, x) -> None:
        """Permute ``x`` in place along its first axis (as :func:`shuffle`)."""
        _shuffle(x, self._live(), "Generator.shuffle")

    def exponential(self, scale=1.0, size=None) -> Tensor:
        return _exponential(scale, size, self._live(), "Generator.exponential")

    def standard_exponential(self, size=None) -> Tensor:
        return _exponential(1.0, size, self._live(), "Generator.standard_exponential")


def default_rng(seed: int | None = None) -> Generator:
    """A :class:`Generator` seeded with ``seed`` (NumPy's spelling; ``None``: from the
    operating system's entropy, as NumPy's)."""
    return Generator(seed)


def _refuse_in_jit(what: str, whose: str) -> None:
    """``qt.TracerError`` inside ``qt.jit``: state held outside the trace (a Generator's or
    the hidden generator's key) would be frozen into it, the same numbers on every call."""
    if tracing():
        raise TracerError(f"{what} inside qt.jit: {whose} would be frozen into the trace (the same "
                          "numbers on every call); pass a key argument and use "
                          "qt.random.uniform(key, ...) / split(key) instead")


# --- NumPy's legacy global-state API: one hidden generator for the process -------------------
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)   # Threefry-2x32 (qtrace.kernels.scalar's)
_PARITY = 0x1BD11BDA


def _threefry_host(k0: int, k1: int, x0: int, x1: int) -> tuple:
    """Threefry-2x32 (20 rounds) of counter words ``(x0, x1)`` under key ``(k0, k1)``, in
    Python: the hidden key is split on the host, so a legacy draw's key is a plain input."""
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = (x0 + ks[0]) & _MASK32, (x1 + ks[1]) & _MASK32
    for block in range(5):
        for r in _ROTATIONS[4 * (block % 2):4 * (block % 2) + 4]:
            x0 = (x0 + x1) & _MASK32
            x1 = (((x1 << r) | (x1 >> (32 - r))) & _MASK32) ^ x0
        x0 = (x0 + ks[(block + 1) % 3]) & _MASK32
        x1 = (x1 + ks[(block + 2) % 3] + block + 1) & _MASK32
    return x0, x1


class _HostKey:
    """A key held on the host as its two words (None: drawn from the operating system's
    entropy at first use), split under a lock: each :meth:`next` is ``split(key, 2)`` — the
    key becomes ``[0]``, the draw gets ``[1]`` — computed in Python, so a draw's key is a
    plain input (no chain of pending splits grows with the number of draws)."""

    def __init__(self, words: tuple | None, what: str, whose: str):
        self.lock = threading.Lock()
        self.words = words
        self.what, self.whose = what, whose   # (how a call inside qt.jit is refused)

    def next(self, op: str) -> Tensor:
        _refuse_in_jit(self.what.format(op=op), self.whose)
        with self.lock:
            words = self.words if self.words is not None else _entropy()
            sub = _threefry_host(words[0], words[1], 1, _MASK32)
            self.words = _threefry_host(words[0], words[1], 0, _MASK32)
        return wrap(input_node(np.array(sub, dtype=np.uint32), f"random.{op}", owned=True))


_hidden = _HostKey(None, "qt.random.{op} (NumPy's legacy global-state API)",   # the legacy
                   "the hidden generator's key")                                # functions'



def _entropy() -> tuple:
    v = int.from_bytes(os.urandom(8), "little")
    return v >> 32, v & _MASK32


def _legacy(op: str) -> None:
    """Refuse a legacy call inside ``qt.jit`` before its arguments are looked at."""
    _refuse_in_jit(_hidden.what.format(op=op), _hidden.whose)


def _draw_key(op: str, source: _HostKey | None = None) -> Tensor:
    """A fresh key from ``source`` (a Generator's; default: the hidden generator),
    atomically (under its lock)."""
    return (source or _hidden).next(op)


def _size(size, op: str) -> tuple | None:
    """NumPy's ``size``: None, an integer or a sequence of integers (none negative)."""
    if size is None:
        return None
    try:
        dims = (operator.index(size),)
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in size)
        except TypeError:
            raise TypeError(f"qt.random.{op}: expected a sequence of integers or a single integer "
                            f"for size, got {size!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"qt.random.{op}: negative dimensions are not allowed")
    return dims


def _dims(shape: tuple, op: str) -> tuple | None:
    """``rand(*shape)``'s dimensions (each an integer, as NumPy's)."""
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError as e:
        raise TypeError(f"qt.random.{op}: {e}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"qt.random.{op}: negative dimensions are not allowed")
    return dims or None


def _float_param(v, op: str):
    """A distribution parameter: a tensor (as float64) or host data (a float64 array)."""
    if isinstance(v, Tensor):
        return v if v.dtype == dtypes.float64 else astype(v, dtypes.float64)
    try:
        return np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"qt.random.{op}: parameters must be numbers or arrays of numbers ({e})") from None


def _host(v) -> np.ndarray:
    """The values of a parameter, for NumPy's checks (a tensor is evaluated)."""
    return np.asarray(v)


def _out_shape(op: str, size: tuple | None, *params) -> tuple:
    """NumPy's result shape: the parameters' broadcast shape, or ``size``, which that shape
    must broadcast to."""
    try:
        shape = np.broadcast_shapes(*(np.shape(p) if not isinstance(p, Tensor) else p.shape
                                      for p in params))
        if size is None:
            return shape
        full = np.broadcast_shapes(size, shape)
    except ValueError as e:
        raise ValueError(f"qt.random.{op}: {e}") from None
    if full != size:
        raise ValueError(f"qt.random.{op}: Output size {size} is not compatible with broadcast "
                         f"dimensions of inputs {full}.")
    return size


def _is(v, value: float) -> bool:
    """``v`` is the host scalar ``value`` (the arithmetic with it can be left out)."""
    return not isinstance(v, Tensor) and v.ndim == 0 and float(v) == value


def _nonnegative(v, op: str, name: str) -> None:
    if np.any(np.less(_host(v), 0)):
        raise ValueError(f"qt.random.{op}: {name} < 0")


def seed(seed=None) -> None:
    """``numpy.random.seed``: set the hidden generator of the legacy functions (``rand``,
    ``normal``, ``shuffle``...) to ``key(seed)``; ``None`` draws a seed from the operating
    system's entropy.

    ``seed`` is an integer in ``[0, 2**32)`` or a sequence of them (folded into a key by
    ``numpy.random.SeedSequence``), as NumPy's. The numbers are qtrace's counter-based
    stream (the same on every run), not NumPy's MT19937: ``seed(s)`` then ``rand(3)``
    equals ``default_rng(s).random(3)``, not NumPy's ``rand(3)`` after its ``seed(s)``.

    Example:
        >>> import qtrace as qt
        >>> qt.random.seed(0)
        >>> a = qt.random.rand(3)
        >>> qt.random.seed(0)
        >>> a.tolist() == qt.random.rand(3).tolist()
        True
    """
    _legacy("seed")
    if seed is None:
        words = _entropy()
    else:
        value = np.asarray(seed)
        if value.ndim == 1 and value.size == 0:
            raise ValueError("qt.random.seed: Seed must be non-empty")
        if value.dtype.kind not in "iub" or value.ndim > 1:
            raise TypeError(f"qt.random.seed: seed must be an integer or a 1-d sequence of integers, "
                            f"got {seed!r}")
        ints = [int(v) for v in value.reshape(-1)]
        if any(not 0 <= v <= _MASK32 for v in ints):
            raise ValueError("qt.random.seed: Seed must be between 0 and 2**32 - 1")
        if value.ndim == 0:
            words = (0, ints[0])          # key(seed)
        else:
            lo, hi = np.random.SeedSequence(ints).generate_state(2, np.uint32)
            words = (int(lo), int(hi))
    with _hidden.lock:
        _hidden.words = words


def random_sample(size=None) -> Tensor:
    """``numpy.random.random_sample`` (also ``random``, ``ranf``, ``sample``): ``float64``
    uniform in ``[0, 1)`` of shape ``size`` from the hidden generator (``size=None``: a
    0-d tensor, where NumPy returns a float).

    Example:
        >>> import qtrace as qt
        >>> qt.random.seed(1)
        >>> u = qt.random.random((2, 3))
        >>> u.shape, str(u.dtype), bool(((u >= 0) & (u < 1)).all())
        ((2, 3), 'float64', True)
    """
    _legacy("random_sample")
    shape = _size(size, "random_sample")
    return _unit(_draw_key("random_sample"), shape or (), dtypes.float64)


random = ranf = sample = random_sample


def rand(*shape) -> Tensor:
    """``numpy.random.rand``: ``float64`` uniform in ``[0, 1)`` of shape ``shape`` (integers,
    not a tuple, as NumPy's) from the hidden generator; ``rand()`` is a 0-d tensor.

    Example:
        >>> import qtrace as qt
        >>> qt.random.seed(2)
        >>> qt.random.rand(3, 4).shape
        (3, 4)
    """
    _legacy("rand")
    return random_sample(_dims(shape, "rand"))


def standard_normal(size=None) -> Tensor:
    """``numpy.random.standard_normal``: ``float64`` standard normals of shape ``size`` from
    the hidden generator (``size=None``: a 0-d tensor).

    Example:
        >>> import qtrace as qt
        >>> qt.random.seed(3)
        >>> abs(float(qt.random.standard_normal(20000).mean())) < 0.05
        True
    """
    _legacy("standard_normal")
    shape = _size(size, "standard_normal")
    return _keyed_normal(_draw_key("standard_normal"), shape or ())


def randn(*shape) -> Tensor:
    """``numpy.random.randn``: ``float64`` standard normals of shape ``shape`` (integers, as
    NumPy's) from the hidden generator; ``randn()`` is a 0-d tensor.

    Example:
        >>> import qtrace as qt
        >>> qt.random.seed(4)
        >>> qt.random.randn(5).shape
        (5,)
    """
    _legacy("randn")
    return standard_normal(_dims(shape, "randn"))


def exponential(scale=1.0, size=None) -> Tensor:
    """``numpy.random.exponential``: exponential variates of mean ``scale`` (broadcast against
    ``size``; negative ``scale`` raises ``ValueError``) from the hidden generator, ``float64``.

    Example:
        >>> import qtrace as qt
        >>> qt.random.seed(5)
        >>> e = qt.random.exponential(2.0, size=20000)
        >>> bool((e >= 0).all()), abs(float(e.mean()) - 2.0) < 0.1
        (True, True)
    """
    _legacy("exponential")
    return _exponential(scale, size)


def _exponential(scale=1.0, size=None, source: _HostKey | None = None,
                 op: str = "exponential") -> Tensor:
    """``exponential`` drawing from ``source`` (default: the hidden generator)."""
    sizes = _size(size, op)
    s = _float_param(scale, op)
    _nonnegative(s, op, "scale")
    shape = _out_shape(op, sizes, s)
    u = _unit(_draw_key(op, source), shape, dtypes.float64)
    e = ew.apply1("negative", ew.apply1("log1p", ew.apply1("negative", u)))
    return e if _is(s, 1.0) else ew.apply2("multiply", e, s)


def _legacy_normal(loc=0.0, scale=1.0, size=None, source: _HostKey | None = None) -> Tensor:
    sizes = _size(size, "normal")
    mu, sigma = _float_param(loc, "normal"), _float_param(scale, "normal")
    _nonnegative(sigma, "normal", "scale")
    shape = _out_shape("normal", sizes, mu, sigma)
    z = _keyed_normal(_draw_key("normal", source), shape)
    z = z if _is(sigma, 1.0) else ew.apply2("multiply", z, sigma)
    return z if _is(mu, 0.0) else ew.apply2("add", z, mu)


def _legacy_uniform(low=0.0, high=1.0, size=None, source: _HostKey | None = None) -> Tensor:
    sizes = _size(size, "uniform")
    lo, hi = _float_param(low, "uniform"), _float_param(high, "uniform")
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.all(np.isfinite(np.subtract(_host(hi), _host(lo))))
    if not finite:
        raise OverflowError("qt.random.uniform: Range exceeds valid bounds")
    shape = _out_shape("uniform", sizes, lo, hi)
    u = _unit(_draw_key("uniform", source), shape, dtypes.float64)
    if _is(lo, 0.0) and _is(hi, 1.0):
        return u
    return ew.apply2("add", lo, ew.apply2("multiply", u, ew.apply2("subtract", hi, lo)))


def _int_values(v, op: str) -> np.ndarray:
    """``randint``'s bounds as an array of Python integers (floats truncated, as NumPy)."""
    arr = _host(v)
    if arr.dtype.kind not in "iubfO":   # (O: Python integers beyond 64 bits, as 2**64)
        raise TypeError(f"qt.random.{op}: bounds must be integers, got dtype {arr.dtype}")
    return np.asarray(np.frompyfunc(int, 1, 1)(arr), dtype=object).reshape(arr.shape)


def randint(low, high=None, size=None, dtype=int) -> Tensor:
    """``numpy.random.randint``: integers in ``[low, high)`` (``high=None``: ``[0, low)``) of
    dtype ``dtype`` (``int``: ``int64``) from the hidden generator.

    ``low``/``high`` broadcast against each other and ``size`` (``size=None`` with scalar
    bounds: a 0-d tensor). ``ValueError`` for an empty range (``low >= high``, ``high <= 0``)
    or bounds outside ``dtype``. Each value is 64 random bits modulo the range (bias below
    ``range / 2**64``).

    Example:
        >>> import qtrace as qt
        >>> qt.random.seed(6)
        >>> v = qt.random.randint(5, 10, size=100)
        >>> str(v.dtype), int(v.min()) >= 5 and int(v.max()) < 10
        ('int64', True)
    """
    _legacy("randint")
    return _randint(low, high, size, dtype)


def _randint(low, high=None, size=None, dtype=int, source: _HostKey | None = None,
             endpoint: bool = False, op: str = "randint") -> Tensor:
    """``randint`` drawing from ``source`` (default: the hidden generator); ``endpoint``:
    ``high`` included (``Generator.integers``)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"qt.random.{op}: data type {dtype!r} not understood") from None
    if dt.kind not in "iub" or dt not in dtypes.SUPPORTED:
        raise TypeError(f"qt.random.{op}: Unsupported dtype {dt!r} for {op}")
    sizes = _size(size, op)
    lo, hi = (_int_values(0, op), _int_values(low, op)) if high is None else \
        (_int_values(low, op), _int_values(high, op))
    if endpoint:
        hi = np.asarray(hi + 1, dtype=object)   # (a 0-d array plus one is a Python int)
    least, most = (0, 1) if dt.kind == "b" else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
    if np.any(lo < least):
        raise ValueError(f"qt.random.{op}: low is out of bounds for {dt}")
    if np.any(hi > most + 1):
        raise ValueError(f"qt.random.{op}: high is out of bounds for {dt}")
    if np.any(lo >= hi):
        raise ValueError(f"qt.random.{op}: high <= 0" if high is None else f"qt.random.{op}: low >= high")
    shape = _out_shape(op, sizes, lo, hi)
    bits64 = bits(_draw_key(op, source), shape)
    span = hi - lo                                   # in [1, 2**64]: 2**64 takes every bit pattern
    if lo.ndim == 0 and hi.ndim == 0:
        r = bits64 if span == 1 << 64 else ew.apply2("remainder", bits64, np.uint64(span))
        offset = int(lo) % (1 << 64)
        out = ew.apply2("add", r, np.uint64(offset)) if offset else r
    else:
        span = np.broadcast_to(span, shape)
        full = np.array([int(s) == 1 << 64 for s in span.reshape(-1)], dtype=bool).reshape(shape)
        span_u = np.array([int(s) % (1 << 64) or 1 for s in span.reshape(-1)], dtype=np.uint64).reshape(shape)
        r = ew.apply2("remainder", bits64, span_u)
        if full.any():
            r = ew.where(full, bits64, r)
        offset = np.array([int(v) % (1 << 64) for v in np.broadcast_to(lo, shape).reshape(-1)],
                          dtype=np.uint64).reshape(shape)
        out = ew.apply2("add", r, offset)
    return out if dt == dtypes.uint64 else astype(out, dt)   # (modulo 2**64: exact in dt's range)


def _legacy_choice(a, size=None, replace: bool = True, p=None,
                   source: _HostKey | None = None, rows: bool = False) -> Tensor:
    """``choice`` drawing from ``source`` (default: the hidden generator); ``rows``: an
    array of several dimensions gives rows (``Generator.choice``'s ``axis=0``)."""
    from .sorting import argsort, take
    sizes = _size(size, "choice")
    shape = sizes if sizes is not None else ()
    count = int(np.prod(shape, dtype=np.int64))
    pool = None
    if isinstance(a, Tensor) and (a.ndim == 1 or (rows and a.ndim > 1)):
        pool, n = a, a.shape[0]
    else:
        arr = np.asarray(a)
        if arr.ndim == 0:
            try:
                n = operator.index(arr.item())
            except TypeError:
                raise ValueError("qt.random.choice: a must be 1-dimensional or an integer") from None
        elif arr.ndim > 1 and not rows:
            raise ValueError("qt.random.choice: a must be 1-dimensional")
        else:
            pool, n = arr, arr.shape[0]
    if n <= 0 and count:
        raise ValueError("qt.random.choice: a must be greater than 0 unless no samples are taken"
                         if pool is None else
                         "qt.random.choice: 'a' cannot be empty unless no samples are taken")
    probs = None
    if p is not None:
        given = _host(p)
        probs = np.asarray(given, dtype=np.float64)
        if probs.ndim != 1:
            raise ValueError("qt.random.choice: 'p' must be 1-dimensional")
        if probs.size != n:
            raise ValueError("qt.random.choice: 'a' and 'p' must have same size")
        if np.isnan(probs).any():
            raise ValueError("qt.random.choice: probabilities contain NaN")
        if (probs < 0).any():
            raise ValueError("qt.random.choice: probabilities are not non-negative")
        eps = max(np.finfo(np.float64).eps, np.finfo(given.dtype).eps if given.dtype.kind == "f" else 0)
        if abs(math.fsum(probs) - 1.0) > math.sqrt(eps):   # (NumPy's tolerance: p's own precision)
            raise ValueError("qt.random.choice: probabilities do not sum to 1")
    if not replace:
        if count > n:
            raise ValueError("qt.random.choice: Cannot take a larger sample than population when "
                             "'replace=False'")
        if probs is not None and np.count_nonzero(probs > 0) < count:
            raise ValueError("qt.random.choice: Fewer non-zero entries in p than size")
    if pool is not None and not isinstance(pool, Tensor):
        pool = as_tensor(pool, "random.choice")
    if count == 0:
        idx = wrap(input_node(np.zeros(shape, dtype=np.int64), "random.choice", owned=True))
    elif replace or probs is None:
        idx = _keyed_choice(_draw_key("choice", source), n, shape, replace, probs)
    else:   # without replacement, weighted: the smallest of Exp(1) / p (an exponential race)
        e = ew.apply1("negative", ew.apply1("log1p", ew.apply1("negative", _unit(
            _draw_key("choice", source), (n,), dtypes.float64))))
        race = ew.where(probs > 0, ew.apply2("divide", e, probs), math.inf)
        idx = reshape(argsort(race)[:count], shape)
    if pool is None:
        return idx
    return reshape(take(pool, reshape(idx, -1), axis=0), tuple(shape) + tuple(pool.shape[1:]))


def _legacy_permutation(x, source: _HostKey | None = None) -> Tensor:
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        n = int(x)
        if n <= 0:
            return arange(0)
        return _keyed_permutation(_draw_key("permutation", source), n)
    t = x if isinstance(x, Tensor) else as_tensor(np.asarray(x), "random.permutation")
    if t.ndim == 0:
        raise IndexError("qt.random.permutation: x must be an integer or at least 1-dimensional")
    return _keyed_permutation(_draw_key("permutation", source), t)


def shuffle(x) -> None:
    """``numpy.random.shuffle``: permute ``x`` in place along its first axis (hidden generator).

    A ``qt.Tensor`` is written as ``x[...] = x[order]`` is, through qtrace's views: its base
    and every view of that memory see the shuffle (a read-only view refuses it). A NumPy
    array or a list is shuffled now (its permutation is computed).

    Example:
        >>> import qtrace as qt
        >>> qt.random.seed(7)
        >>> x = qt.arange(10.0)
        >>> v = x[:]
        >>> qt.random.shuffle(x)
        >>> sorted(v.tolist()) == list(range(10)) and v.tolist() == x.tolist()
        True
    """
    _legacy("shuffle")
    _shuffle(x)


def _shuffle(x, source: _HostKey | None = None, op: str = "shuffle") -> None:
    """``shuffle`` drawing from ``source`` (default: the hidden generator)."""
    from .selecting import _write
    from .sorting import take
    if isinstance(x, (Tensor, np.ndarray)):
        if x.ndim == 0:
            raise TypeError(f"qt.random.{op}: len() of unsized object")
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            raise ValueError(f"qt.random.{op}: assignment destination is read-only")
        order = _keyed_permutation(_draw_key(op, source), x.shape[0])
        if isinstance(x, Tensor):
            _write(x, f"random.{op}", lambda cur: take(cur, order, axis=0))
            return None
        from ..graph import buffers
        x[...] = x[np.asarray(order)]
        buffers.bump(x)
        return None
    if isinstance(x, list):
        order = np.asarray(_keyed_permutation(_draw_key(op, source), len(x)))
        x[:] = [x[i] for i in order]
        return None
    raise TypeError(f"qt.random.{op}: x must be a qt.Tensor, a NumPy array or a list, got "
                    f"{type(x).__name__}")


# --- the names in both APIs: a key selects the key form ----------------------------------
_KEY_ONLY = {"normal": {"shape", "dtype"}, "uniform": {"shape", "dtype", "minval", "maxval"},
             "choice": {"shape"}, "permutation": set()}
_LEGACY_POSITIONAL = {"normal": 3, "uniform": 3, "choice": 4, "permutation": 1}


def _is_key(x) -> bool:
    return isinstance(x, (Tensor, np.ndarray)) and x.shape == (2,) and x.dtype == np.uint32


def _is_shape(v) -> bool:
    return isinstance(v, tuple) and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                        for d in v)


def _keyed_form(op: str, args: tuple, kwargs: dict) -> bool:
    """Whether a call of a name both APIs have is the key form (see the module docstring)."""
    if "key" in kwargs or _KEY_ONLY[op] & kwargs.keys():
        return True
    if not args:
        return False
    if _is_key(args[0]) or len(args) > _LEGACY_POSITIONAL[op]:
        return True
    if op in ("normal", "uniform") and len(args) >= 2 and _is_shape(args[1]) \
            and np.shape(args[0]) == (2,):   # (a tensor, an array or a list of two)
        try:
            _key(args[0], op)
        except TypeError as e:
            raise TypeError(f"{e} (a (2,)-shaped first argument and a shape tuple second read as "
                            f"the key form qt.random.{op}(key, shape); for NumPy's legacy {op} pass "
                            "the second parameter as a list or an array, or by keyword)") from None
        return True
    return False


def normal(*args, **kwargs) -> Tensor:
    """Normal floats: ``normal(key, shape=(), dtype=None)`` (standard normals from a key) or
    NumPy's legacy ``normal(loc=0.0, scale=1.0, size=None)`` (hidden generator).

    The key form (a key first, or ``key=``/``shape=``/``dtype=``) draws Box-Muller pairs
    from two independent uniforms; it fuses and works inside ``qt.jit``. The legacy form
    broadcasts ``loc``/``scale`` against ``size`` as NumPy does (``float64``; no ``size``
    with scalar parameters: a 0-d tensor); negative ``scale`` raises ``ValueError``.

    Example:
        >>> import qtrace as qt
        >>> abs(float(qt.random.normal(qt.random.key(2), (20000,)).mean())) < 0.05
        True
        >>> qt.random.seed(8)
        >>> qt.random.normal(10.0, [1.0, 2.0], size=(3, 2)).shape
        (3, 2)
    """
    if _keyed_form("normal", args, kwargs):
        return _keyed_normal(*args, **kwargs)
    _legacy("normal")
    return _legacy_normal(*args, **kwargs)


def uniform(*args, **kwargs) -> Tensor:
    """Uniform floats: ``uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0)`` (in
    ``[minval, maxval)`` from a key) or NumPy's legacy ``uniform(low=0.0, high=1.0,
    size=None)`` (hidden generator).

    The key form (a key first, or ``key=``/``shape=``/``dtype=``/``minval=``/``maxval=``)
    fuses and works inside ``qt.jit``. The legacy form broadcasts ``low``/``high`` against
    ``size`` (``float64``; no ``size`` with scalar bounds: a 0-d tensor); a non-finite
    ``high - low`` raises ``OverflowError``, as in NumPy.

    Example:
        >>> import qtrace as qt
        >>> qt.random.uniform(qt.random.key(1), (2, 3), minval=-1.0).shape
        (2, 3)
        >>> qt.random.seed(9)
        >>> u = qt.random.uniform(-1, 1, (1000,))
        >>> bool(((u >= -1) & (u < 1)).all())
        True
    """
    if _keyed_form("uniform", args, kwargs):
        return _keyed_uniform(*args, **kwargs)
    _legacy("uniform")
    return _legacy_uniform(*args, **kwargs)


def choice(*args, **kwargs) -> Tensor:
    """Samples of ``a`` (an int ``n`` means ``range(n)``): ``choice(key, a, shape=(),
    replace=True, p=None)`` or NumPy's legacy ``choice(a, size=None, replace=True, p=None)``
    (hidden generator).

    Both draw with replacement by default, with probabilities ``p`` if given, or without
    replacement (a permutation's prefix). The legacy form checks its arguments as NumPy
    (``a`` 1-d or a positive integer; ``p`` 1-d, of ``a``'s size, non-negative, summing to
    1), also takes ``p`` with ``replace=False`` (successive weighted draws, as NumPy's), and
    with ``size=None`` returns one sample as a 0-d tensor.

    Example:
        >>> import qtrace as qt
        >>> qt.random.choice(qt.random.key(0), 5, (3,)).shape
        (3,)
        >>> qt.random.seed(10)
        >>> sorted(qt.random.choice(4, 4, replace=False).tolist())
        [0, 1, 2, 3]
    """
    if _keyed_form("choice", args, kwargs):
        return _keyed_choice(*args, **kwargs)
    _legacy("choice")
    return _legacy_choice(*args, **kwargs)


def permutation(*args, **kwargs) -> Tensor:
    """A random permutation of ``range(x)`` (an int) or of ``x``'s first axis (a copy):
    ``permutation(key, x)`` or NumPy's legacy ``permutation(x)`` (hidden generator).

    Example:
        >>> import qtrace as qt
        >>> sorted(qt.random.permutation(qt.random.key(0), 5).tolist())
        [0, 1, 2, 3, 4]
        >>> qt.random.seed(11)
        >>> sorted(qt.random.permutation([10, 20, 30]).tolist())
        [10, 20, 30]
    """
    if _keyed_form("permutation", args, kwargs):
        return _keyed_permutation(*args, **kwargs)
    _legacy("permutation")
    return _legacy_permutation(*args, **kwargs)
