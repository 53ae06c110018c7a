"""NumPy's ``numpy.linalg`` functions beyond the Array API extension: ``norm``, ``cond``,
``multi_dot``, ``lstsq``, ``tensorinv``, ``tensorsolve`` and ``LinAlgError``.

Each is a composition of qtrace operations (the norms and products of
:mod:`qtrace.tracer.linalg_ext`, its ``svd``/``svdvals``/``inv``/``solve`` library
calls), so it is lazy, works inside ``qt.jit`` and on every device, and is
differentiated by ``qt.grad`` through its parts. NumPy's signatures, defaults, result
dtypes and shapes hold: integer (and bool) inputs are computed in float64, complex
inputs give real norms and singular values. ``LinAlgError`` *is* ``numpy.linalg.LinAlgError``
(``except np.linalg.LinAlgError`` catches qtrace's errors; it is a ``ValueError``).
Errors name the function: ``qt.linalg.<name>: ...``. ``lstsq`` alone may read a value:
whether NumPy returns residuals depends on the computed rank (see its docstring).

``NUMPY_FUNCTIONS`` maps NumPy's functions to these (``__array_function__``).

Example:
    >>> import qtrace as qt
    >>> from qtrace.tracer.linalg_numpy import norm, multi_dot
    >>> norm(qt.asarray([[1.0, 2.0], [3.0, 4.0]]), ord=1).item()
    6.0
    >>> multi_dot([qt.ones(2), qt.ones((2, 3)), qt.ones(3)]).item()
    6.0
"""

from __future__ import annotations

import math
import operator

import numpy as np

from . import dtypes
from . import elementwise as _ew
from . import reductions as _red
from .array_api import abs_squared
from .composites import _int, _no_out
from .context import tracing
from .convert import astype
from .creation import full, zeros
from .linalg import dot, matmul
from .linalg_ext import (
    _axes_arg,
    _floating,
    _tensor,
    inv,
    matrix_norm,
    mH,
    real_dtype,
    solve,
    svd,
    svdvals,
    vector_norm,
)
from .shape_ops import moveaxis, normalize_axis, ravel, reshape
from .shape_ops import transpose as _transpose
from .tensor import Tensor

__all__ = ["LinAlgError", "cond", "lstsq", "multi_dot", "norm", "tensorinv", "tensorsolve"]

LinAlgError = np.linalg.LinAlgError

_MATRIX_ORDS = (1, -1, 2, -2, math.inf, -math.inf)


# --- helpers ---------------------------------------------------------------------------
def _result_dtype(*ts: Tensor) -> np.dtype:
    """NumPy's result dtype of its LAPACK solvers: single precision only when every input is
    float32/complex64 (integers count as float64), complex when any input is."""
    single = all(t.dtype in (dtypes.float32, np.dtype(np.complex64)) for t in ts)
    cplx = any(t.dtype.kind == "c" for t in ts)
    return np.dtype((np.complex64 if single else np.complex128) if cplx else
                    (np.float32 if single else np.float64))


def _two_d(ts, name: str) -> None:
    for t in ts:
        if t.ndim != 2:
            raise LinAlgError(f"qt.linalg.{name}: {t.ndim}-dimensional array given (shape {t.shape}). "
                              "Array must be two-dimensional")


def _empty_norm(t: Tensor, axes: tuple, keepdims: bool) -> Tensor:
    """The norms NumPy takes as maxima with ``initial=0`` over empty vectors/matrices: zeros."""
    shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape) if keepdims or i not in axes)
    return zeros(shape, real_dtype(t.dtype), device=t.device)


# --- norm and cond -----------------------------------------------------------------------
def norm(x, ord=None, axis=None, keepdims=False) -> Tensor:
    """``numpy.linalg.norm``: a vector norm (``axis`` an int) or a matrix norm (``axis`` a
    pair; a 2-D ``x`` with ``axis=None`` and ``ord`` given).

    ``ord=None`` with ``axis=None``: the 2-norm of all elements, whatever ``x.ndim``.
    Vectors: ``None``/2, 1, ``inf``, ``-inf``, 0 (the count of non-zeros, as a float) and
    any other number ``p`` (``sum(abs(x)**p)**(1/p)``). Matrices: ``None``/``'fro'``,
    ``'nuc'``, ``inf``, ``-inf``, 1, -1, 2, -2 (the last two and ``'nuc'`` from the
    singular values). Integer inputs give float64, complex ones the real dtype of their
    precision. ``keepdims`` keeps the normed axes as size 1.

    Example:
        >>> import qtrace as qt
        >>> from qtrace.tracer.linalg_numpy import norm
        >>> norm(qt.asarray([3, -4])).item()
        5.0
        >>> norm(qt.asarray([[1.0, -2.0], [3.0, 4.0]]), ord=float("inf"), axis=(1, 0)).item()
        6.0
    """
    t = _floating(x, "norm")
    nd = t.ndim
    if isinstance(ord, (bool, np.bool_)):   # (NumPy compares: True == 1)
        ord = int(ord)
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            return vector_norm(t, keepdims=keepdims)
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        try:
            axis = (operator.index(axis),)
        except TypeError:
            raise TypeError(f"qt.linalg.norm: 'axis' must be None, an integer or a tuple of integers, "
                            f"got {axis!r}") from None
    if len(axis) == 1:
        ax = normalize_axis(axis[0], nd, "linalg.norm")
        if isinstance(ord, str) or not isinstance(ord, (int, float, np.integer, np.floating, type(None))):
            raise ValueError(f"qt.linalg.norm: Invalid norm order {ord!r} for vectors")
        if ord == math.inf and t.shape[ax] == 0:
            return _empty_norm(t, (ax,), keepdims)
        return vector_norm(t, axis=ax, keepdims=keepdims, ord=2 if ord is None else ord)
    if len(axis) != 2:
        raise ValueError(f"qt.linalg.norm: Improper number of dimensions to norm: axis {axis} of an array "
                         f"of shape {t.shape} (an int for vectors, a pair for matrices)")
    row, col = (normalize_axis(a, nd, "linalg.norm") for a in axis)
    if row == col:
        raise ValueError(f"qt.linalg.norm: Duplicate axes given: {axis}")
    if ord in (None, "f"):
        ord = "fro"
    if not (ord in ("fro", "nuc") if isinstance(ord, str) else ord in _MATRIX_ORDS):
        raise ValueError(f"qt.linalg.norm: Invalid norm order {ord!r} for matrices (use None, 'fro', "
                         "'nuc', inf, -inf, 1, -1, 2 or -2)")
    if ord in (1, 2, math.inf) and 0 in (t.shape[row], t.shape[col]):
        return _empty_norm(t, (row, col), keepdims)
    out = matrix_norm(moveaxis(t, (row, col), (-2, -1)), ord=ord)
    if keepdims:
        out = reshape(out, tuple(1 if i in (row, col) else d for i, d in enumerate(t.shape)))
    return out


def cond(x, p=None) -> Tensor:
    """``numpy.linalg.cond``: the condition number of each matrix of ``x`` in the norm ``p``.

    ``p`` ``None``/2/-2: the ratio of the largest and smallest singular values (-2: its
    inverse; any matrix shape). Otherwise (``'fro'``, ``'nuc'``, ``inf``, ``-inf``, 1, -1;
    square matrices) ``norm(x, p) * norm(inv(x), p)``. A NaN result becomes ``inf`` unless
    the matrix holds a NaN, as in NumPy. The result is real (float64 for integers).

    NumPy returns ``inf`` for an exactly singular matrix with ``p`` not in ``None``/2/-2
    (it ignores LAPACK's error); here the inverse raises ``numpy.linalg.LinAlgError``
    when it is computed.

    Example:
        >>> import qtrace as qt
        >>> from qtrace.tracer.linalg_numpy import cond
        >>> cond(qt.asarray([[2.0, 0.0], [0.0, 0.5]])).item()
        4.0
        >>> cond(qt.asarray([[2.0, 0.0], [0.0, 0.5]]), 1).item()
        4.0
    """
    t = _floating(x, "cond")
    if t.ndim < 2:
        raise LinAlgError(f"qt.linalg.cond: {t.ndim}-dimensional array given (shape {t.shape}). Array "
                          "must be at least two-dimensional")
    if t.size == 0 and math.prod(t.shape[-2:]) == 0:
        raise LinAlgError(f"qt.linalg.cond: cond is not defined on empty arrays (shape {t.shape})")
    if p is None or (not isinstance(p, str) and p in (2, -2)):
        s = svdvals(t)
        big, small = s[..., 0], s[..., -1]
        r = _ew.divide(small, big) if p == -2 else _ew.divide(big, small)
    else:
        if t.shape[-1] != t.shape[-2]:
            raise LinAlgError(f"qt.linalg.cond: Last 2 dimensions of the array must be square for p={p!r}, "
                              f"got shape {t.shape}")
        r = _ew.multiply(norm(t, p, axis=(-2, -1)), norm(inv(t), p, axis=(-2, -1)))
    nan_in_x = _red.any(_ew.isnan(t), axis=(-2, -1))
    return _ew.where(_ew.logical_and(_ew.isnan(r), _ew.logical_not(nan_in_x)), math.inf, r)


# --- multi_dot -------------------------------------------------------------------------
def _chain_order(dims: list) -> list:
    """NumPy's matrix-chain dynamic programme: ``split[i][j]`` is where the product of
    matrices ``i..j`` (matrix ``k`` of shape ``(dims[k], dims[k + 1])``) splits to cost the
    fewest scalar multiplications (the first such split on ties, as NumPy)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                q = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if q < cost[i][j]:
                    cost[i][j], split[i][j] = q, k
    return split


def _chain(ts: list, split: list, i: int, j: int) -> Tensor:
    if i == j:
        return ts[i]
    k = split[i][j]
    return matmul(_chain(ts, split, i, k), _chain(ts, split, k + 1, j))


def multi_dot(arrays, *, out=None) -> Tensor:
    """``numpy.linalg.multi_dot``: the product of two or more arrays, in the order of
    multiplications that costs the fewest scalar multiplications (NumPy's dynamic
    programme).

    Two arrays: ``numpy.dot`` (1-D and 2-D operands). More: the first may be 1-D (a row
    vector) and the last 1-D (a column vector), the others 2-D; the result is 2-D, 1-D
    when one end is 1-D, 0-d when both are. ``out=`` is not supported (``TypeError``).

    Example:
        >>> import qtrace as qt
        >>> from qtrace.tracer.linalg_numpy import multi_dot
        >>> multi_dot([qt.ones((2, 3)), qt.ones((3, 4)), qt.ones(4)]).tolist()
        [12.0, 12.0]
    """
    _no_out(out, "linalg.multi_dot")
    ts = [_tensor(a, "multi_dot") for a in arrays]
    n = len(ts)
    if n < 2:
        raise ValueError(f"qt.linalg.multi_dot: Expecting at least two arrays, got {n}")
    if n == 2:
        return dot(ts[0], ts[1])
    first, last = ts[0].ndim, ts[-1].ndim
    if first == 1:
        ts[0] = reshape(ts[0], (1, -1))
    if last == 1:
        ts[-1] = reshape(ts[-1], (-1, 1))
    _two_d(ts, "multi_dot")
    for i, (p, q) in enumerate(zip(ts, ts[1:])):
        if p.shape[1] != q.shape[0]:
            raise ValueError(f"qt.linalg.multi_dot: shapes {p.shape} (array {i}) and {q.shape} (array "
                             f"{i + 1}) not aligned")
    dims = [t.shape[0] for t in ts] + [ts[-1].shape[1]]
    result = _chain(ts, _chain_order(dims), 0, n - 1)
    if first == 1 and last == 1:
        return reshape(result, ())
    return ravel(result) if first == 1 or last == 1 else result


# --- lstsq -----------------------------------------------------------------------------
def _cutoff_ratio(rcond, m: int, n: int):
    """The ratio to the largest singular value at or below which LAPACK's ``gelsd`` counts a
    singular value as zero: ``rcond`` (default ``eps * max(M, N)``, float64's eps: NumPy
    solves in double precision); one outside ``(0, 1)`` means double precision's unit
    roundoff (``2**-53``), as in LAPACK."""
    if rcond is None:
        return float(np.finfo(np.float64).eps) * max(m, n)
    if isinstance(rcond, Tensor):
        return rcond
    r = float(rcond)
    return r if 0.0 < r < 1.0 else 2.0 ** -53


def lstsq(a, b, rcond=None) -> tuple:
    """``numpy.linalg.lstsq``: the least-squares solution ``x`` of ``a @ x = b``; a tuple
    ``(x, residuals, rank, s)`` as NumPy's.

    ``a`` is ``(M, N)``, ``b`` ``(M,)`` or ``(M, K)`` (no stacks, as NumPy). Solved through
    ``a``'s SVD (``qt.linalg.svd``): singular values at most ``rcond`` times the largest
    count as zero (``rcond=None``: ``eps * max(M, N)``). As NumPy, inputs are computed in
    double precision; ``x`` has float32 (complex64) dtype only when both inputs do, ``s``
    and ``residuals`` the real dtype of ``x``'s precision. ``rank`` is a 0-d int32 tensor
    (NumPy: an ``np.int32`` scalar). ``residuals``: the squared 2-norms of the columns of
    ``b - a @ x`` (shape ``(K,)``, ``(1,)`` for a 1-D ``b``) when ``rank == N < M``, else an
    empty array of shape ``(0,)``.

    The shape of ``residuals`` depends on the rank when ``M > N``: outside ``qt.jit`` the
    rank is then computed (evaluating ``a``'s SVD) to decide it; inside ``qt.jit`` it
    cannot be, and ``residuals`` holds the squared norms whatever the rank (as JAX's
    ``lstsq``). Gradients are those of the SVD: they need distinct singular values.

    Example:
        >>> import qtrace as qt
        >>> from qtrace.tracer.linalg_numpy import lstsq
        >>> a = qt.asarray([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
        >>> x, res, rank, s = lstsq(a, qt.asarray([1.0, 2.0, 3.0]))
        >>> x.tolist(), res.tolist(), rank.item()
        ([1.0, 2.0], [9.0], 2)
    """
    at, bt = _floating(a, "lstsq"), _floating(b, "lstsq")
    result = _result_dtype(at, bt)
    vector = bt.ndim == 1
    if vector:
        bt = reshape(bt, (-1, 1))
    _two_d((at, bt), "lstsq")
    (m, n), k = at.shape, bt.shape[1]
    if bt.shape[0] != m:
        raise LinAlgError(f"qt.linalg.lstsq: Incompatible dimensions: a of shape {at.shape}, b with "
                          f"{bt.shape[0]} rows")
    work = np.dtype(np.complex128 if result.kind == "c" else np.float64)
    at, bt = astype(at, work), astype(bt, work)
    if min(m, n) == 0:
        x = zeros((n, k), work, device=at.device)
        s = zeros((0,), np.float64, device=at.device)
        rank = full((), 0, dtypes.int32, device=at.device)
    else:
        u, s, vh = svd(at, full_matrices=False)
        keep = _ew.greater(s, _ew.multiply(_cutoff_ratio(rcond, m, n), s[0]))
        inv_s = _ew.where(keep, _ew.reciprocal(_ew.where(keep, s, 1.0)), 0.0)  # (no NaN gradient)
        x = matmul(mH(vh), _ew.multiply(reshape(inv_s, (-1, 1)), matmul(mH(u), bt)))
        rank = _red.sum(astype(keep, dtypes.int32), dtype=dtypes.int32)
    if m > n and (tracing() or int(rank) == n):
        residuals = _red.sum(abs_squared(_ew.subtract(bt, matmul(at, x))), axis=0)
    else:
        residuals = zeros((0,), np.float64, device=at.device)
    real = real_dtype(result)
    x = astype(reshape(x, (n,)) if vector else x, result)
    return x, astype(residuals, real), rank, astype(s, real)


# --- tensorinv and tensorsolve -----------------------------------------------------------
def tensorinv(a, ind=2) -> Tensor:
    """``numpy.linalg.tensorinv``: the inverse of ``a`` under ``tensordot(.., axes=ind)``:
    ``a`` of shape ``S1 + S2`` (``len(S1) == ind``, ``prod(S1) == prod(S2)``) inverted as a
    ``prod(S2) x prod(S2)`` matrix, result of shape ``S2 + S1``.

    Example:
        >>> import qtrace as qt
        >>> from qtrace.tracer.linalg_numpy import tensorinv
        >>> a = qt.reshape(qt.eye(6) * 2.0, (6, 2, 3))
        >>> tensorinv(a, ind=1).shape
        (2, 3, 6)
    """
    t = _floating(a, "tensorinv")
    ind = _int(ind, "linalg.tensorinv", "ind")
    if ind <= 0:
        raise ValueError(f"qt.linalg.tensorinv: Invalid ind argument {ind} (it must be positive)")
    size = math.prod(t.shape[ind:])
    if math.prod(t.shape[:ind]) != size:
        raise LinAlgError(f"qt.linalg.tensorinv: a of shape {t.shape} with ind={ind} is not square: "
                          f"prod(a.shape[:ind]) must equal prod(a.shape[ind:])")
    return reshape(inv(reshape(t, (size, size))), t.shape[ind:] + t.shape[:ind])


def tensorsolve(a, b, axes=None) -> Tensor:
    """``numpy.linalg.tensorsolve``: ``x`` with ``tensordot(a, x, axes=x.ndim) == b``;
    ``x`` has shape ``a.shape[b.ndim:]`` (after ``axes`` of ``a`` are moved to the end),
    ``a`` is solved as a ``prod(x.shape)`` square matrix.

    Example:
        >>> import qtrace as qt
        >>> from qtrace.tracer.linalg_numpy import tensorsolve
        >>> a = qt.reshape(qt.eye(6) * 2.0, (2, 3, 6))
        >>> tensorsolve(a, qt.ones((2, 3))).tolist()
        [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    """
    at, bt = _floating(a, "tensorsolve"), _floating(b, "tensorsolve")
    an = at.ndim
    if axes is not None:
        moved = _axes_arg(axes, an, "tensorsolve")
        at = _transpose(at, [i for i in range(an) if i not in moved] + list(moved))
    shape = at.shape[-(an - bt.ndim):]
    size = math.prod(shape)
    if at.size != size ** 2:
        raise LinAlgError(f"qt.linalg.tensorsolve: Input arrays must satisfy the requirement "
                          f"prod(a.shape[b.ndim:]) == prod(a.shape[:b.ndim]), got shapes {at.shape} "
                          f"and {bt.shape}")
    return reshape(solve(reshape(at, (size, size)), ravel(bt)), shape)


NUMPY_FUNCTIONS: dict = {
    np.linalg.norm: norm, np.linalg.cond: cond, np.linalg.multi_dot: multi_dot,
    np.linalg.lstsq: lstsq, np.linalg.tensorinv: tensorinv, np.linalg.tensorsolve: tensorsolve,
}
NUMPY_UFUNCS: dict = {}
