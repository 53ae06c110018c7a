"""Index grids, triangular index sets, spaced sequences and window functions, as NumPy builds them.

Every function is built from recorded qtrace operations (nothing is evaluated behind the
caller's back), so it works inside ``qt.jit`` and is differentiated by ``qt.grad``.
``NUMPY_FUNCTIONS`` maps NumPy's functions to these (``__array_function__``),
``NUMPY_UFUNCS`` the NumPy ufuncs among them (``__array_ufunc__``).

Sizes (``N``, ``M``, ``num``, ``dimensions``, window lengths) decide the result's shape and
must be Python or NumPy numbers. The creation functions take ``device=`` like
``qt.zeros``; where NumPy has ``like=``, only ``like=None`` is accepted (``np.tri(3,
like=tensor)`` dispatches here without it). The values of ``logspace``/``geomspace`` may be
tensors (gradients flow to them); so may ``vander``'s ``x``.

Example:
    >>> import qtrace as qt
    >>> qt.tri(3, dtype=int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    >>> qt.logspace(0, 2, 3).tolist()
    [1.0, 10.0, 100.0]
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import TracerError
from . import dtypes
from . import elementwise as _ew
from . import reductions as _red
from .composites import _holds_tensor, _int, _ints, _offset, _tensor, cumprod
from .context import tracing
from .convert import astype, input_node, operand, place, promote, wrap
from .creation import _device, arange, full, ones
from .shape_ops import broadcast_to, concatenate, expand_dims, moveaxis, normalize_axis, reshape, stack
from .sorting import nonzero
from .tensor import Tensor


def _no_like(like, op: str) -> None:
    if like is not None:
        raise TypeError(f"qt.{op}: like= must be None (a NumPy call with like=tensor dispatches "
                        f"to qt.{op} already), got {type(like).__name__}")


def _constant(values: np.ndarray, dev, op: str) -> Tensor:
    """A tensor of index values worked out from concrete sizes (no tensor's values)."""
    return wrap(input_node(values, op, device=dev, owned=True))


# --- triangles and index grids ---------------------------------------------------------
def tri(N, M=None, k=0, dtype=float, *, device=None, like=None) -> Tensor:
    """``numpy.tri``: ones at and below the ``k``-th diagonal of an ``N x M`` array, zeros
    above (``k`` may also be a 0-d integer tensor). Sizes and ``k`` must be integers (NumPy
    takes floats, with odd results); negative sizes give an empty array, as in NumPy.

    Example:
        >>> import qtrace as qt
        >>> qt.tri(2, 3, k=1).tolist()
        [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    """
    _no_like(like, "tri")
    n = _int(N, "tri", "N")
    m = n if M is None else _int(M, "tri", "M")
    n, m = max(n, 0), max(m, 0)   # (as NumPy's arange of a negative size: empty)
    dt = dtypes.canonical(dtype if dtype is not None else float, "qt.tri")
    dev = _device(device)
    cols = reshape(arange(m, dtype=dtypes.int64, device=dev), (1, m))
    rows = reshape(arange(n, dtype=dtypes.int64, device=dev), (n, 1))
    mask = _ew.apply("less_equal", _ew.apply("subtract", cols, rows), _offset(k, "tri"))
    return mask if dt == dtypes.bool_ else astype(mask, dt)


def vander(x, N=None, increasing=False) -> Tensor:
    """``numpy.vander``: the Vandermonde matrix of the 1-D ``x``, columns ``x**(N-1)`` down to
    ``x**0`` (up, with ``increasing``). The powers are running products, as in NumPy; integer
    and boolean inputs give int64.

    Example:
        >>> import qtrace as qt
        >>> qt.vander(qt.asarray([1, 2, 3]), 3).tolist()
        [[1, 1, 1], [4, 2, 1], [9, 3, 1]]
    """
    t = _tensor(x, "vander")
    if t.ndim != 1:
        raise ValueError(f"qt.vander: x must be a one-dimensional array or sequence, got shape {t.shape}")
    n = t.shape[0] if N is None else _int(N, "vander", "N")
    if n < 0:
        raise ValueError(f"qt.vander: N must be non-negative, got {n}")
    dt = np.promote_types(t.dtype, dtypes.int64)
    t = astype(t, dt) if t.dtype != dt else t
    first = full((t.shape[0], min(n, 1)), 1, dt, t.device)
    if n <= 1:
        return first
    powers = cumprod(broadcast_to(reshape(t, (t.shape[0], 1)), (t.shape[0], n - 1)), axis=1)
    out = concatenate([first, powers], 1)
    return out if increasing else out[:, ::-1]


def indices(dimensions, dtype=int, sparse=False, *, device=None):
    """``numpy.indices``: the index grid of an array of shape ``dimensions``, one grid per
    axis, stacked into one array (a tuple of broadcastable arrays with ``sparse=True``).

    Example:
        >>> import qtrace as qt
        >>> qt.indices((2, 3))[1].tolist()
        [[0, 1, 2], [0, 1, 2]]
        >>> [g.shape for g in qt.indices((2, 3), sparse=True)]
        [(2, 1), (1, 3)]
    """
    dims = _ints(dimensions, "indices", "dimensions")
    if any(d < 0 for d in dims):
        raise ValueError(f"qt.indices: negative dimensions are not allowed, got {dims}")
    dt = dtypes.canonical(dtype if dtype is not None else float, "qt.indices")
    dev = _device(device)
    nd = len(dims)
    grids = [reshape(arange(d, dtype=dt, device=dev), tuple(d if j == i else 1 for j in range(nd)))
             for i, d in enumerate(dims)]
    if sparse:
        return tuple(grids)
    if not grids:
        return full((0,), 0, dt, dev)
    return stack([broadcast_to(g, dims) for g in grids])


def fromfunction(function, shape, *, dtype=float, device=None, like=None, **kwargs):
    """``numpy.fromfunction``: ``function(*indices(shape, dtype))``, called once with one
    index tensor per axis (not once per element); ``kwargs`` go to ``function``, ``device=``
    is where the index tensors are made.

    Example:
        >>> import qtrace as qt
        >>> qt.fromfunction(lambda i, j: i + 10 * j, (2, 2), dtype=int).tolist()
        [[0, 10], [1, 11]]
    """
    _no_like(like, "fromfunction")
    grids = indices(shape, dtype=dtype, device=device)
    return function(*[grids[i] for i in range(grids.shape[0])], **kwargs)


def ix_(*args) -> tuple:
    """``numpy.ix_``: open-mesh index arrays from 1-D sequences (each reshaped to lie along
    its own axis); a boolean sequence stands for its ``True`` positions.

    A boolean tensor is evaluated (the number of ``True`` decides the shape): not inside
    ``qt.jit``.

    Example:
        >>> import qtrace as qt
        >>> [a.shape for a in qt.ix_([0, 1], [2, 4, 5])]
        [(2, 1), (1, 3)]
    """
    out = []
    nd = len(args)
    for k, seq in enumerate(args):
        t = seq if isinstance(seq, Tensor) else _tensor(np.asarray(seq), "ix_")
        if t.size == 0 and not isinstance(seq, (Tensor, np.ndarray)):
            t = astype(t, dtypes.int64)   # (an empty list indexes nothing: NumPy's intp)
        if t.ndim != 1:
            raise ValueError(f"qt.ix_: Cross index must be 1 dimensional, got argument {k} of shape "
                             f"{t.shape}")
        if t.dtype == dtypes.bool_:
            if isinstance(seq, Tensor) and tracing():
                raise TracerError("qt.ix_: a boolean tensor's True count decides the result's shape, "
                                  "which a function traced by qt.jit cannot have; pass integer "
                                  "indices, or call it outside qt.jit")
            t = _constant(np.flatnonzero(np.asarray(seq)).astype(np.int64), t.device, "ix_")
        out.append(reshape(t, tuple(t.shape[0] if j == k else 1 for j in range(nd))))
    return tuple(out)


def _tri_indices(n, k, m, op: str, lower: bool, dev) -> tuple:
    n = max(_int(n, op, "n"), 0)   # (negative sizes: empty, as in NumPy)
    m = n if m is None else max(_int(m, op, "m"), 0)
    k = _int(k, op, "k")
    cols = np.arange(m) - np.arange(n)[:, None]
    rows_i, cols_i = np.nonzero(cols <= k if lower else cols >= k)
    return tuple(_constant(v.astype(np.int64), dev, op) for v in (rows_i, cols_i))


def tril_indices(n, k=0, m=None, *, device=None) -> tuple:
    """``numpy.tril_indices``: (rows, cols) of the elements at and below the ``k``-th
    diagonal of an ``n x m`` array, row by row (int64).

    Example:
        >>> import qtrace as qt
        >>> [a.tolist() for a in qt.tril_indices(3, k=-1)]
        [[1, 2, 2], [0, 0, 1]]
    """
    return _tri_indices(n, k, m, "tril_indices", True, _device(device))


def triu_indices(n, k=0, m=None, *, device=None) -> tuple:
    """``numpy.triu_indices``: (rows, cols) of the elements at and above the ``k``-th
    diagonal of an ``n x m`` array, row by row (int64).

    Example:
        >>> import qtrace as qt
        >>> [a.tolist() for a in qt.triu_indices(3, k=1)]
        [[0, 0, 1], [1, 2, 2]]
    """
    return _tri_indices(n, k, m, "triu_indices", False, _device(device))


def _matrix(arr, op: str) -> Tensor:
    t = _tensor(arr, op)
    if t.ndim != 2:
        raise ValueError(f"qt.{op}: input array must be 2-d, got shape {t.shape}")
    return t


def tril_indices_from(arr, k=0) -> tuple:
    """``numpy.tril_indices_from``: ``tril_indices`` for the shape of the 2-D ``arr`` (made
    on its device).

    Example:
        >>> import qtrace as qt
        >>> [a.tolist() for a in qt.tril_indices_from(qt.zeros((2, 3)))]
        [[0, 1, 1], [0, 0, 1]]
    """
    t = _matrix(arr, "tril_indices_from")
    return _tri_indices(t.shape[0], k, t.shape[1], "tril_indices_from", True, t.device)


def triu_indices_from(arr, k=0) -> tuple:
    """``numpy.triu_indices_from``: ``triu_indices`` for the shape of the 2-D ``arr`` (made
    on its device).

    Example:
        >>> import qtrace as qt
        >>> [a.tolist() for a in qt.triu_indices_from(qt.zeros((2, 3)))]
        [[0, 0, 0, 1, 1], [0, 1, 2, 1, 2]]
    """
    t = _matrix(arr, "triu_indices_from")
    return _tri_indices(t.shape[0], k, t.shape[1], "triu_indices_from", False, t.device)


def mask_indices(n, mask_func, k=0, *, device=None) -> tuple:
    """``numpy.mask_indices``: the indices (one int64 array per axis) of the non-zero
    elements of ``mask_func(ones((n, n)), k)`` — ``qt.triu``/``qt.tril`` (or NumPy's, which
    dispatch here) give the upper or lower triangle. How many there are depends on the
    mask's values: it is evaluated (inside ``qt.jit`` use :func:`triu_indices`).

    Example:
        >>> import qtrace as qt
        >>> [i.tolist() for i in qt.mask_indices(3, qt.triu, 1)]
        [[0, 0, 1], [1, 2, 2]]
    """
    n = _int(n, "mask_indices", "n")
    mask = mask_func(ones((n, n), dtypes.int64, _device(device)), k)
    return nonzero(_ew.apply("not_equal", _tensor(mask, "mask_indices"), 0))


def diag_indices(n, ndim=2, *, device=None) -> tuple:
    """``numpy.diag_indices``: ``ndim`` copies of ``arange(n)``, indexing the main diagonal
    of an ``n x ... x n`` array.

    Example:
        >>> import qtrace as qt
        >>> [a.tolist() for a in qt.diag_indices(2, 3)]
        [[0, 1], [0, 1], [0, 1]]
    """
    n = max(_int(n, "diag_indices", "n"), 0)   # (negative: empty, as in NumPy)
    nd = _int(ndim, "diag_indices", "ndim")
    idx = arange(n, dtype=dtypes.int64, device=_device(device))
    return (idx,) * nd


def diag_indices_from(arr) -> tuple:
    """``numpy.diag_indices_from``: ``diag_indices`` of an at least 2-D array whose axes all
    have the same length (made on its device).

    Example:
        >>> import qtrace as qt
        >>> [a.tolist() for a in qt.diag_indices_from(qt.zeros((2, 2)))]
        [[0, 1], [0, 1]]
    """
    t = _tensor(arr, "diag_indices_from")
    if t.ndim < 2:
        raise ValueError(f"qt.diag_indices_from: input array must be at least 2-d, got shape {t.shape}")
    if len(set(t.shape)) != 1:
        raise ValueError(f"qt.diag_indices_from: All dimensions of input must be of equal length, got "
                         f"shape {t.shape}")
    idx = arange(t.shape[0], dtype=dtypes.int64, device=t.device)
    return (idx,) * t.ndim


# --- spaced sequences ------------------------------------------------------------------
def _linspace(start, stop, num: int, endpoint: bool, axis: int, dev, op: str) -> Tensor:
    """``numpy.linspace`` of (possibly tensor) ``start``/``stop`` in NumPy's arithmetic:
    ``i * step + start`` (``i / div * delta`` when some step is 0), the last row ``stop``."""
    ops = [operand(v, op) for v in (start, stop)]
    dt = promote(ops, op)
    if dt.kind in "biu":
        dt = dtypes.float64
    given = next((o.node.device for o in ops if o.node is not None), None)
    dev = given if given is not None else dev
    s, e = (wrap(n) for n in place(ops, [dt, dt], op, dev))
    delta = _ew.apply("subtract", e, s)
    div = num - 1 if endpoint else num
    y = reshape(arange(num, dtype=dt, device=dev), (num,) + (1,) * delta.ndim)
    if div > 0:
        step = _ew.apply("divide", delta, div)
        scaled = _ew.apply("multiply", _ew.apply("divide", y, div), delta)
        stepped = _ew.apply("multiply", y, step)
        y = _ew.where(_red.any(_ew.apply("equal", step, 0)), scaled, stepped)
    else:
        y = _ew.apply("multiply", y, delta)
    y = _ew.apply("add", y, s)
    if endpoint and num > 1:
        last = reshape(_ew.apply("equal", arange(num, device=dev), num - 1), (num,) + (1,) * delta.ndim)
        y = _ew.where(last, e, y)
    if axis != 0:
        y = moveaxis(y, 0, normalize_axis(axis, y.ndim, op))
    return y


def _num(num, op: str) -> int:
    n = _int(num, op, "num")
    if n < 0:
        raise ValueError(f"qt.{op}: Number of samples, {n}, must be non-negative")
    return n


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0, *, device=None) -> Tensor:
    """``numpy.logspace``: ``base ** linspace(start, stop, num)`` (``start``, ``stop`` and
    ``base`` may be arrays or tensors; an array ``base`` broadcasts along ``axis``).

    Example:
        >>> import qtrace as qt
        >>> qt.logspace(0, 3, 4, base=2.0).tolist()
        [1.0, 2.0, 4.0, 8.0]
    """
    num = _num(num, "logspace")
    dev = _device(device)
    if not isinstance(base, (float, int)) and np.ndim(base):
        # an array base broadcasts with start and stop (all made arrays: strong dtypes)
        ts = [_tensor(v, "logspace") for v in (start, stop, base)]
        nd = max(v.ndim for v in ts)
        start, stop, base = (reshape(v, (1,) * (nd - v.ndim) + v.shape) for v in ts)
        base = expand_dims(base, normalize_axis(axis, nd + 1, "logspace"))
    y = _linspace(start, stop, num, endpoint, axis, dev, "logspace")
    out = _ew.apply("power", base, y)
    if dtype is None:
        return out
    dt = dtypes.canonical(dtype, "qt.logspace")
    return out if out.dtype == dt else astype(out, dt)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0, *, device=None) -> Tensor:
    """``numpy.geomspace``: a geometric progression from ``start`` to ``stop`` (negative and
    complex endpoints as NumPy handles them: the sequence is built for ``start`` rotated to
    the positive reals, then rotated back); the first and last elements are ``start`` and
    ``stop`` exactly.

    Zero endpoints raise ``ValueError`` when given as numbers or NumPy arrays; for tensor
    endpoints that check would need their values, so it is not made (a zero gives NaN or
    inf elements instead).

    Example:
        >>> import qtrace as qt
        >>> qt.geomspace(1, 1000, 4).tolist()
        [1.0, 10.0, 100.0, 1000.0]
    """
    num = _num(num, "geomspace")
    dev = _device(device)
    for v in (start, stop):
        if not isinstance(v, Tensor) and not _holds_tensor(v) and np.any(np.asarray(v) == 0):
            raise ValueError("qt.geomspace: Geometric sequence cannot include zero")
    s, e = (_tensor(v, "geomspace") if isinstance(v, Tensor) or _holds_tensor(v)
            else wrap(input_node(np.asarray(v), "geomspace", device=dev)) for v in (start, stop))
    want = dtypes.canonical(dtype if dtype is not None else float, "qt.geomspace")
    dt = np.result_type(s.dtype, e.dtype, float(num), want)
    out_dt = dt if dtype is None else want
    s, e = astype(s, dt), astype(e, dt)
    sign = _ew.apply("sign", s)
    s, e = _ew.apply("divide", s, sign), _ew.apply("divide", e, sign)
    y = logspace(_ew.apply("log10", s), _ew.apply("log10", e), num, endpoint, 10.0, dt)
    if num > 0:
        rows = reshape(arange(num, device=s.device), (num,) + (1,) * (y.ndim - 1))
        y = _ew.where(_ew.apply("equal", rows, 0), s, y)
        if num > 1 and endpoint:
            y = _ew.where(_ew.apply("equal", rows, num - 1), e, y)
    y = _ew.apply("multiply", y, sign)
    if axis != 0:
        y = moveaxis(y, 0, normalize_axis(axis, y.ndim, "geomspace"))
    return y if y.dtype == out_dt else astype(y, out_dt)


# --- windows ---------------------------------------------------------------------------
def _window_points(M, op: str, device):
    """``(n, M - 1)`` for a window of ``M`` points, ``n = arange(1 - M, M, 2)`` (float64),
    or the whole (trivial) window when ``M < 2``."""
    if isinstance(M, Tensor):
        raise TypeError(f"qt.{op}: M must be a Python or NumPy number, not a qt.Tensor (it decides "
                        "the result's shape; inside qt.jit mark it static)")
    try:
        m = float(np.asarray(M, dtype=np.float64))
    except (TypeError, ValueError):
        raise TypeError(f"qt.{op}: M must be a real number, got {M!r}") from None
    dev = _device(device)
    if m < 1:
        return None, full((0,), 0.0, dtypes.float64, dev)
    if m == 1:
        return None, ones((1,), dtypes.float64, dev)
    return arange(1 - m, m, 2, dtype=dtypes.float64, device=dev), m - 1


def _cosine_window(M, op: str, device, coeffs: tuple) -> Tensor:
    """``c0 + c1 * cos(pi n / (M - 1)) + c2 * cos(2 pi n / (M - 1))`` (NumPy's order)."""
    n, den = _window_points(M, op, device)
    if n is None:
        return den
    out = None
    for j, c in enumerate(coeffs[1:], 1):
        phase = _ew.apply("divide", _ew.apply("multiply", math.pi if j == 1 else 2.0 * math.pi, n), den)
        term = _ew.apply("multiply", c, _ew.apply("cos", phase))
        out = _ew.apply("add", coeffs[0] if out is None else out, term)
    return out


def bartlett(M, *, device=None) -> Tensor:
    """``numpy.bartlett``: the triangular (Bartlett) window of ``M`` points (float64).

    Example:
        >>> import qtrace as qt
        >>> qt.bartlett(5).tolist()
        [0.0, 0.5, 1.0, 0.5, 0.0]
    """
    n, den = _window_points(M, "bartlett", device)
    if n is None:
        return den
    ramp = _ew.apply("divide", n, den)
    return _ew.where(_ew.apply("less_equal", n, 0), _ew.apply("add", 1, ramp),
                     _ew.apply("subtract", 1, ramp))


def blackman(M, *, device=None) -> Tensor:
    """``numpy.blackman``: the Blackman window of ``M`` points (float64).

    Example:
        >>> import qtrace as qt
        >>> [round(v, 4) for v in qt.blackman(3).tolist()]
        [-0.0, 1.0, -0.0]
    """
    return _cosine_window(M, "blackman", device, (0.42, 0.5, 0.08))


def hamming(M, *, device=None) -> Tensor:
    """``numpy.hamming``: the Hamming window of ``M`` points (float64).

    Example:
        >>> import qtrace as qt
        >>> [round(v, 2) for v in qt.hamming(3).tolist()]
        [0.08, 1.0, 0.08]
    """
    return _cosine_window(M, "hamming", device, (0.54, 0.46))


def hanning(M, *, device=None) -> Tensor:
    """``numpy.hanning``: the Hann window of ``M`` points (float64).

    Example:
        >>> import qtrace as qt
        >>> qt.hanning(3).tolist()
        [0.0, 1.0, 0.0]
    """
    return _cosine_window(M, "hanning", device, (0.5, 0.5))


def kaiser(M, beta, *, device=None) -> Tensor:
    """``numpy.kaiser``: the Kaiser window of ``M`` points with shape parameter ``beta``,
    ``i0(beta * sqrt(1 - (n / (M - 1))**2)) / i0(beta)`` for ``n = 1 - M, 3 - M, ..., M - 1``
    (float64). ``beta`` may be a tensor (0-d): the window is differentiable in it.

    Example:
        >>> import qtrace as qt
        >>> [round(v, 6) for v in qt.kaiser(3, 5.0).tolist()]
        [0.036777, 1.0, 0.036777]
    """
    n, den = _window_points(M, "kaiser", device)
    if n is None:
        return den
    b = astype(_tensor(beta, "kaiser"), dtypes.float64)
    if b.ndim:
        raise ValueError(f"qt.kaiser: beta must be a number (0-d), got shape {b.shape}")
    r = _ew.apply("divide", n, den)
    arg = _ew.apply("multiply", b, _ew.apply("sqrt", _ew.apply("subtract", 1.0, _ew.apply("square", r))))
    return _ew.apply("divide", _ew.i0(arg), _ew.i0(b))


NUMPY_FUNCTIONS = {
    np.tri: tri, np.vander: vander, np.indices: indices, np.ix_: ix_,
    np.tril_indices: tril_indices, np.triu_indices: triu_indices,
    np.tril_indices_from: tril_indices_from, np.triu_indices_from: triu_indices_from,
    np.diag_indices: diag_indices, np.diag_indices_from: diag_indices_from,
    np.logspace: logspace, np.geomspace: geomspace, np.fromfunction: fromfunction,
    np.bartlett: bartlett, np.blackman: blackman, np.hamming: hamming, np.hanning: hanning,
    np.kaiser: kaiser, np.mask_indices: mask_indices,
}
NUMPY_UFUNCS: dict = {}

__all__: list[str] = [
    "bartlett", "blackman", "diag_indices", "diag_indices_from", "fromfunction", "geomspace",
    "hamming", "hanning", "indices", "ix_", "kaiser", "logspace", "mask_indices", "tri",
    "tril_indices", "tril_indices_from", "triu_indices", "triu_indices_from", "vander",
]
