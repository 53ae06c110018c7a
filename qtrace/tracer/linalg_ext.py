"""The Array API (2024.12) linear-algebra extension: the functions of ``qt.linalg``.

Functions that existing operations express (``matrix_transpose``, ``diagonal``,
``trace``, ``vecdot``, ``tensordot``, ``outer``, ``cross``, ``vector_norm``, the
Frobenius and induced 1/inf ``matrix_norm``, ``matrix_power``, ``matrix_rank``) are
compositions of qtrace operations: lazy, fusable and differentiated through their
parts. Factorizations and solvers (``cholesky``, ``det``, ``slogdet``, ``eigh``,
``eigvalsh``, ``inv``, ``pinv``, ``qr``, ``solve``, ``svd``, ``svdvals``) are library
calls (:mod:`qtrace.tracer.library`): LAPACK through NumPy on the CPU
(:mod:`qtrace.devices.lib_linalg`), fusion boundaries, with reverse-mode rules in
:mod:`qtrace.ad.linalg_rules`.

Every function accepts stacks of matrices (leading batch dimensions) and complex dtypes
(complex64/complex128: conjugate transposes where the standard's math has them, e.g.
``cholesky``'s ``x = L @ L^H``, ``vecdot``'s ``sum(conj(x1) * x2)``). The functions the
standard defines on floating-point arrays take float32, float64, complex64 and
complex128 and, as NumPy does, convert integer and bool inputs to float64 (the standard
leaves them undefined); the ones defined on numeric arrays (``matmul``, ``matrix_power``,
``tensordot``, ``vecdot``, ``outer``, ``cross``, ``trace``, ``diagonal``) keep integer
(and, except ``cross``, bool) dtypes, as NumPy does. Results that are real by definition
(norms, singular values, eigenvalues of ``eigh``/``eigvalsh``, ``slogdet``'s
``logabsdet``) have the real dtype of the input's precision (float32 for complex64,
float64 for complex128); ``matrix_rank`` is int64. Errors name the function:
``qt.linalg.<name>: ...``.

NumPy's extra options are keyword-only parameters here, after the standard's
(``svd``'s ``compute_uv``/``hermitian``, ``pinv``'s ``rcond``/``hermitian``,
``matrix_rank``'s ``tol``/``hermitian``, ``eigh``/``eigvalsh``'s ``UPLO``, ``qr``'s
``mode='r'``); ``NUMPY_FUNCTIONS`` maps ``numpy.linalg``'s functions on tensors to
wrappers with NumPy's positional signatures (``np.linalg.svd(t, False)``).

Example:
    >>> import qtrace as qt
    >>> a = qt.asarray([[4.0, 1.0], [1.0, 3.0]])
    >>> qt.linalg.solve(a, qt.asarray([1.0, 2.0])).tolist()
    [0.09090909090909091, 0.6363636363636364]
"""

from __future__ import annotations

import math
import operator
from typing import NamedTuple

import numpy as np

from ..graph.primitives import broadcast_shapes
from . import dtypes, library
from . import elementwise as _ew
from . import reductions as _red
from .array_api import abs_squared
from .composites import _diagonal
from .composites import cross as _np_cross
from .composites import eye as _eye
from .composites import outer as _np_outer
from .composites import tril as _tril
from .composites import triu as _triu
from .convert import astype, operand, promote
from .creation import array as _copy
from .creation import zeros
from .linalg import matmul
from .shape_ops import as_tensor, broadcast_to, expand_dims, normalize_axes, normalize_axis, reshape
from .shape_ops import swapaxes as _swapaxes
from .shape_ops import transpose as _transpose
from .tensor import Tensor

__all__ = [
    "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm",
    "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve",
    "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm",
    "EighResult", "QRResult", "SlogdetResult", "SVDResult",
]

_UNSET = object()  # NumPy's ``np._NoValue``: an argument not given


# --- results with named fields (the standard's namedtuples) ----------------------------
class EighResult(NamedTuple):
    """``eigh``'s result: ``(eigenvalues, eigenvectors)``."""

    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    """``qr``'s result: ``(Q, R)``."""

    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    """``slogdet``'s result: ``(sign, logabsdet)``."""

    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    """``svd``'s result: ``(U, S, Vh)``."""

    U: Tensor
    S: Tensor
    Vh: Tensor


# --- argument checks -------------------------------------------------------------------
def _tensor(x, name: str) -> Tensor:
    return as_tensor(x, f"linalg.{name}")


def _floating(x, name: str) -> Tensor:
    """``x`` as a tensor of a floating dtype (float32/float64/complex64/complex128): integer
    and bool inputs converted to float64 (NumPy's rule), other dtypes ``TypeError``."""
    t = _tensor(x, name)
    if t.dtype.kind in "biu":
        return astype(t, dtypes.float64)
    if t.dtype.kind not in "fc":
        raise TypeError(f"qt.linalg.{name}: expected a floating-point array (float32, float64, complex64 "
                        f"or complex128), got dtype {t.dtype}")
    if t._node.weak:  # a Python float: float64, like a NumPy array of it
        t = astype(t, t.dtype)
    return t


def _numeric(x, name: str, bool_ok: bool = True) -> Tensor:
    """``x`` as a tensor of a numeric or (``bool_ok``, as NumPy) bool dtype."""
    t = _tensor(x, name)
    if t.dtype == dtypes.bool_ and not bool_ok:
        raise TypeError(f"qt.linalg.{name}: expected a numeric array, got dtype {t.dtype}")
    return t


def real_dtype(dt) -> np.dtype:
    """The real floating dtype of ``dt``'s precision (float32 for complex64)."""
    return np.dtype(np.finfo(dt).dtype)


def _matrix(t: Tensor, name: str) -> Tensor:
    if t.ndim < 2:
        raise ValueError(f"qt.linalg.{name}: expected a matrix or a stack of matrices (at least 2-D), "
                         f"got shape {t.shape}")
    return t


def _square(t: Tensor, name: str) -> Tensor:
    _matrix(t, name)
    if t.shape[-1] != t.shape[-2]:
        raise ValueError(f"qt.linalg.{name}: expected square matrices (last two dimensions equal), "
                         f"got shape {t.shape}")
    return t


def _same_float(ts: list, name: str) -> list:
    """Tensors converted to their promoted floating dtype."""
    dt = promote([operand(t, f"linalg.{name}") for t in ts], f"linalg.{name}")
    return [t if t.dtype == dt else astype(t, dt) for t in ts]


def _lib(name: str, inputs: list, static: tuple, outputs: list) -> list:
    return library.call(f"linalg.{name}", inputs, static, outputs)


def _stacked(t: Tensor) -> Tensor:
    """A single matrix as a stack of one: the runtime returns a 0-d library result as
    shape ``(1,)`` (``np.ascontiguousarray``), so results are never 0-d."""
    return reshape(t, (1,) + t.shape) if t.ndim == 2 else t


def mT(x: Tensor) -> Tensor:
    """The transpose of the last two axes (a view)."""
    return _swapaxes(x, -1, -2)


def mH(x: Tensor) -> Tensor:
    """The conjugate transpose of the last two axes (``mT`` for real dtypes)."""
    return mT(_ew.conj(x)) if x.dtype.kind == "c" else mT(x)


def _rtol(rtol, t: Tensor, name: str, what: str = "rtol"):
    """The relative tolerance of ``matrix_rank``/``pinv`` (or, ``what``, another tolerance
    of the same form): a Python float or a tensor."""
    if rtol is None:
        return max(t.shape[-2:]) * float(np.finfo(t.dtype).eps)
    if isinstance(rtol, (int, float, np.integer, np.floating)) and not isinstance(rtol, (bool, np.bool_)):
        return float(rtol)
    r = _tensor(rtol, name)
    if r.dtype.kind != "f":  # the standard: a real floating-point array
        raise TypeError(f"qt.linalg.{name}: {what} must be a float or a floating-point array, got dtype "
                        f"{r.dtype}")
    if broadcast_shapes(f"qt.linalg.{name}", r.shape, t.shape[:-2]) != t.shape[:-2]:
        raise ValueError(f"qt.linalg.{name}: {what} of shape {r.shape} does not broadcast to the stack "
                         f"shape {t.shape[:-2]}")
    return astype(r, real_dtype(t.dtype))


def _uplo(UPLO, name: str) -> bool:
    """NumPy's ``UPLO`` (``'L'`` or ``'U'``, either case): True for the upper triangle."""
    u = UPLO.upper() if isinstance(UPLO, str) else UPLO
    if u not in ("L", "U"):
        raise ValueError(f"qt.linalg.{name}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return u == "U"


def _hermitian(t: Tensor, name: str) -> Tensor:
    """The symmetric (complex: Hermitian) matrices NumPy's ``hermitian=True`` reads: each
    matrix's lower triangle mirrored, its diagonal's real part (LAPACK's ``eigh``). The
    gradient is the symmetric (Hermitian) one, as ``eigh``'s (and JAX's): the value of the
    mirrored matrix, the derivative of ``(x + x^H) / 2``."""
    _square(t, name)
    low = _tril(t, -1)
    d = _triu(_tril(t))
    if t.dtype.kind == "c":
        d = _ew.multiply(_ew.add(d, _ew.conj(d)), 0.5)
    mirrored = _ew.add(_ew.add(low, mH(low)), d)
    sym = _ew.multiply(_ew.add(t, mH(t)), 0.5)
    return _ew.add(sym, _ew.stop_gradient(_ew.subtract(mirrored, sym)))


# --- compositions of qtrace operations --------------------------------------------------
def matrix_transpose(x, /) -> Tensor:
    """The transpose of each matrix of ``x`` (shape ``(..., M, N)`` to ``(..., N, M)``); a view.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.matrix_transpose(qt.asarray([[1, 2, 3]])).tolist()
        [[1], [2], [3]]
    """
    return mT(_matrix(_tensor(x, "matrix_transpose"), "matrix_transpose"))


def diagonal(x, /, *, offset: int = 0) -> Tensor:
    """The ``offset`` diagonal of each matrix of ``x`` (as the last axis); a strided view.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.diagonal(qt.arange(9).reshape(3, 3), offset=1).tolist()
        [1, 5]
    """
    t = _matrix(_tensor(x, "diagonal"), "diagonal")
    return _diagonal(t, operator.index(offset), -2, -1, "linalg.diagonal")


def trace(x, /, *, offset: int = 0, dtype=None) -> Tensor:
    """The sum of the ``offset`` diagonal of each matrix of ``x``.

    Integer and bool inputs sum in the default integer dtype (int64; unsigned ones in uint64),
    floating (and complex) inputs in their own dtype, unless ``dtype`` is given.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.trace(qt.eye(3)).item()
        3.0
    """
    t = _numeric(x, "trace")
    d = diagonal(t, offset=offset)
    if dtype is None:
        kind = t.dtype.kind
        dtype = t.dtype if kind in "fc" else (dtypes.int64 if kind in "ib" else np.dtype(np.uint64))
    return _red.sum(d, axis=-1, dtype=dtype)


def vecdot(x1, x2, /, *, axis: int = -1) -> Tensor:
    """Dot products of the vectors along ``axis`` (the other axes broadcast):
    ``sum(conj(x1) * x2, axis=axis)`` (the conjugation matters for complex ``x1`` only).

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.vecdot(qt.asarray([[1.0, 2.0], [3.0, 4.0]]), qt.asarray([1.0, 1.0])).tolist()
        [3.0, 7.0]
    """
    a, b = _numeric(x1, "vecdot"), _numeric(x2, "vecdot")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"qt.linalg.vecdot: inputs must be at least 1-D, got shapes {a.shape} and {b.shape}")
    ax = operator.index(axis)
    if ax >= 0:  # the standard asks for a negative axis; count a non-negative one in the result
        ax -= max(a.ndim, b.ndim)
    if not -min(a.ndim, b.ndim) <= ax < 0:
        raise np.exceptions.AxisError(f"qt.linalg.vecdot: axis {axis} is out of bounds for inputs of "
                                      f"shapes {a.shape} and {b.shape}")
    if a.shape[ax] != b.shape[ax]:
        raise ValueError(f"qt.linalg.vecdot: the contracted axis {axis} differs in size: shapes "
                         f"{a.shape} and {b.shape}")
    dt = promote([operand(a, "linalg.vecdot"), operand(b, "linalg.vecdot")], "linalg.vecdot")
    if a.dtype.kind == "c":
        a = _ew.conj(a)
    return _red.sum(_ew.multiply(a, b), axis=ax, dtype=dt)


def _axes_arg(v, nd: int, name: str) -> tuple:
    seq = tuple(v) if isinstance(v, (tuple, list, np.ndarray)) else (v,)
    axes = tuple(normalize_axis(operator.index(a), nd, f"linalg.{name}") for a in seq)
    if len(set(axes)) != len(axes):
        raise ValueError(f"qt.linalg.{name}: repeated axis in {v}")
    return axes


def tensordot(x1, x2, /, *, axes=2) -> Tensor:
    """Contraction of ``x1`` and ``x2`` over ``axes``: the last ``axes`` axes of ``x1`` with the
    first of ``x2`` (an int), or the axes of each (two sequences). One matrix product (no
    conjugation of complex inputs, as NumPy).

    Example:
        >>> import qtrace as qt
        >>> a, b = qt.ones((2, 3, 4)), qt.ones((3, 4, 5))
        >>> qt.linalg.tensordot(a, b, axes=2).shape
        (2, 5)
        >>> qt.linalg.tensordot(a, b, axes=([1], [0])).shape
        (2, 4, 4, 5)
    """
    a, b = _numeric(x1, "tensordot"), _numeric(x2, "tensordot")
    if isinstance(axes, (tuple, list)):
        if len(axes) != 2:
            raise ValueError(f"qt.linalg.tensordot: axes must be an int or a pair of sequences, got {axes}")
        ax_a, ax_b = _axes_arg(axes[0], a.ndim, "tensordot"), _axes_arg(axes[1], b.ndim, "tensordot")
        if len(ax_a) != len(ax_b):
            raise ValueError(f"qt.linalg.tensordot: axes {axes} name different numbers of axes")
    else:
        n = operator.index(axes)
        if n < 0 or n > a.ndim or n > b.ndim:
            raise ValueError(f"qt.linalg.tensordot: axes={n} must be non-negative and at most the rank "
                             f"of each input (shapes {a.shape} and {b.shape})")
        ax_a, ax_b = tuple(range(a.ndim - n, a.ndim)), tuple(range(n))
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"qt.linalg.tensordot: shape mismatch for contracted axes {i} of {a.shape} "
                             f"and {j} of {b.shape}")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [j for j in range(b.ndim) if j not in ax_b]
    fa, fb = tuple(a.shape[i] for i in free_a), tuple(b.shape[j] for j in free_b)
    c = math.prod(a.shape[i] for i in ax_a)
    pa = reshape(_transpose(a, free_a + list(ax_a)), (math.prod(fa), c))
    pb = reshape(_transpose(b, list(ax_b) + free_b), (c, math.prod(fb)))
    return reshape(matmul(pa, pb), fa + fb)


def outer(x1, x2, /) -> Tensor:
    """The outer product of two 1-D arrays: ``out[i, j] = x1[i] * x2[j]``.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.outer(qt.asarray([1, 2]), qt.asarray([1, 10])).tolist()
        [[1, 10], [2, 20]]
    """
    a, b = _numeric(x1, "outer"), _numeric(x2, "outer")
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"qt.linalg.outer: inputs must be 1-D, got shapes {a.shape} and {b.shape}")
    return _np_outer(a, b)


def cross(x1, x2, /, *, axis: int = -1) -> Tensor:
    """Cross products of the 3-vectors along ``axis`` (a negative axis; the others broadcast).

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.cross(qt.asarray([1.0, 0.0, 0.0]), qt.asarray([0.0, 1.0, 0.0])).tolist()
        [0.0, 0.0, 1.0]
    """
    a, b = _numeric(x1, "cross", bool_ok=False), _numeric(x2, "cross", bool_ok=False)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"qt.linalg.cross: inputs must be at least 1-D, got shapes {a.shape} and {b.shape}")
    ax = operator.index(axis)
    if ax >= 0:
        if a.ndim != b.ndim:
            raise ValueError(f"qt.linalg.cross: axis must be negative for inputs of different ranks "
                             f"(shapes {a.shape} and {b.shape}), got {axis}")
        ax -= a.ndim
    if not -min(a.ndim, b.ndim) <= ax < 0:
        raise np.exceptions.AxisError(f"qt.linalg.cross: axis {axis} is out of bounds for inputs of "
                                      f"shapes {a.shape} and {b.shape}")
    if a.shape[ax] != 3 or b.shape[ax] != 3:
        raise ValueError(f"qt.linalg.cross: the vectors along axis {axis} must have 3 elements, got "
                         f"shapes {a.shape} and {b.shape}")
    broadcast_shapes("qt.linalg.cross", a.shape, b.shape)
    return _np_cross(a, b, axisa=ax, axisb=ax, axisc=ax)


def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord=2) -> Tensor:
    """The ``ord``-norm of the vectors along ``axis`` (all elements when ``None``; a tuple of
    axes takes the norm over all of them).

    ``ord``: 2 (Euclidean, default), 1, ``inf``, ``-inf``, 0 (count of non-zeros) and any
    other number ``p`` (``sum(abs(x)**p)**(1/p)``). Complex inputs give the real dtype of
    their precision.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.vector_norm(qt.asarray([3.0, -4.0])).item()
        5.0
        >>> qt.linalg.vector_norm(qt.asarray([[3.0, -4.0]]), axis=1, ord=1).tolist()
        [7.0]
    """
    t = _floating(x, "vector_norm")
    if isinstance(ord, (str, bool)) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise ValueError(f"qt.linalg.vector_norm: invalid norm order {ord!r}")
    axes = normalize_axes(tuple(axis) if isinstance(axis, list) else axis, t.ndim, "linalg.vector_norm")
    red = dict(axis=axes, keepdims=keepdims)
    if ord == 2:
        return _ew.sqrt(_red.sum(abs_squared(t), **red))
    a = _ew.abs(t)
    if ord == 1:
        return _red.sum(a, **red)
    if ord == math.inf:
        return _red.max(a, **red)
    if ord == -math.inf:
        return _red.min(a, **red)
    if ord == 0:
        return _red.sum(astype(_ew.not_equal(t, 0), real_dtype(t.dtype)), **red)
    p = float(ord)
    return _ew.power(_red.sum(_ew.power(a, p), **red), 1.0 / p)


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro") -> Tensor:
    """The ``ord``-norm of each matrix of ``x``.

    ``ord``: ``'fro'`` (Frobenius, default), ``'nuc'`` (sum of singular values), 1 / -1
    (largest / smallest absolute column sum), ``inf`` / ``-inf`` (row sums), 2 / -2
    (largest / smallest singular value). ``keepdims`` keeps the matrix axes as size 1.
    Complex inputs give the real dtype of their precision.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.matrix_norm(qt.asarray([[3.0, 0.0], [0.0, -4.0]])).item()
        5.0
        >>> qt.linalg.matrix_norm(qt.asarray([[3.0, 0.0], [0.0, -4.0]]), ord=2).item()
        4.0
    """
    t = _matrix(_floating(x, "matrix_norm"), "matrix_norm")
    if isinstance(ord, str):
        if ord == "fro":
            out = _ew.sqrt(_red.sum(abs_squared(t), axis=(-2, -1)))
        elif ord == "nuc":
            out = _red.sum(svdvals(t), axis=-1)
        else:
            raise ValueError(f"qt.linalg.matrix_norm: invalid norm order {ord!r}")
    elif isinstance(ord, bool) or ord not in (1, -1, 2, -2, math.inf, -math.inf):
        raise ValueError(f"qt.linalg.matrix_norm: invalid norm order {ord!r} (use 'fro', 'nuc', 1, -1, "
                         "2, -2, inf or -inf)")
    elif ord in (2, -2):
        out = (_red.max if ord == 2 else _red.min)(svdvals(t), axis=-1)
    else:
        sums = _red.sum(_ew.abs(t), axis=-2 if ord in (1, -1) else -1)
        out = (_red.max if ord > 0 else _red.min)(sums, axis=-1)
    return reshape(out, out.shape + (1, 1)) if keepdims else out


def matrix_power(x, n: int, /) -> Tensor:
    """Each square matrix of ``x`` to the integer power ``n`` (repeated squaring; ``n < 0``
    powers the inverse, ``n == 0`` gives identity matrices).

    Integer and bool matrices keep their dtype for ``n >= 0`` (bool: ``matmul``'s logical
    product) and give float64 for ``n < 0`` (the inverse's), as NumPy.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.matrix_power(qt.asarray([[1.0, 1.0], [0.0, 1.0]]), 3).tolist()
        [[1.0, 3.0], [0.0, 1.0]]
        >>> qt.linalg.matrix_power(qt.asarray([[1, 1], [0, 1]]), 2).tolist()
        [[1, 2], [0, 1]]
    """
    t = _tensor(x, "matrix_power")
    t = _square(t if t.dtype.kind in "biu" else _floating(t, "matrix_power"), "matrix_power")
    if isinstance(n, Tensor):
        raise TypeError("qt.linalg.matrix_power: n must be a Python integer, not a qt.Tensor")
    try:
        k = operator.index(n)
    except TypeError:
        raise TypeError(f"qt.linalg.matrix_power: n must be an integer, got {n!r}") from None
    if k == 0:
        return _copy(broadcast_to(_eye(t.shape[-1], dtype=t.dtype), t.shape))
    if k == 1:
        return _copy(t)
    if k < 0:
        t, k = inv(t), -k
    result, base = None, t
    while True:
        if k & 1:
            result = base if result is None else matmul(result, base)
        k >>= 1
        if not k:
            return result
        base = matmul(base, base)


def matrix_rank(x, /, *, rtol=None, tol=None, hermitian: bool = False) -> Tensor:
    """The number of singular values of each matrix larger than ``rtol`` times the largest
    (``rtol`` defaults to ``max(M, N) * eps``; an array broadcasts against the stack), int64.

    NumPy's options: ``tol``, an absolute cutoff instead (a float or an array broadcasting
    against the stack; not with ``rtol``); ``hermitian=True`` reads each matrix as the
    symmetric (complex: Hermitian) one of its lower triangle (its singular values are the
    absolute eigenvalues). A 1-D ``x`` (NumPy) has rank 1 unless all zero.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.matrix_rank(qt.asarray([[1.0, 2.0], [2.0, 4.0]])).item()
        1
        >>> qt.linalg.matrix_rank(qt.asarray([[1.0, 0.0], [0.0, 1e-3]]), tol=1e-2).item()
        1
    """
    t = _floating(x, "matrix_rank")
    if tol is not None and rtol is not None:
        raise ValueError("qt.linalg.matrix_rank: tol and rtol cannot both be given")
    if t.ndim == 1:  # NumPy: a vector has rank 1 unless all zero
        return astype(_red.any(_ew.not_equal(t, 0)), dtypes.int64)
    _matrix(t, "matrix_rank")
    if hermitian:
        t = _hermitian(t, "matrix_rank")
    cut = _rtol(tol, t, "matrix_rank", "tol") if tol is not None else _rtol(rtol, t, "matrix_rank")
    if min(t.shape[-2:]) == 0:
        return zeros(t.shape[:-2], dtypes.int64)
    s = svdvals(t)
    cutoff = cut if tol is not None else _ew.multiply(cut, _red.max(s, axis=-1))
    if not isinstance(cutoff, Tensor):  # an absolute float
        return _red.sum(astype(_ew.greater(s, cutoff), dtypes.int64), axis=-1)
    return _red.sum(astype(_ew.greater(s, expand_dims(cutoff, -1)), dtypes.int64), axis=-1)


# --- library calls ---------------------------------------------------------------------
def cholesky(x, /, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of each symmetric (complex: Hermitian) positive-definite matrix of
    ``x``: lower ``L`` with ``x = L @ L^H`` (``upper=True``: upper ``U`` with ``x = U^H @ U``;
    ``^H`` the conjugate transpose, the transpose for real dtypes).

    Only the lower triangle of ``x`` is read (``upper=True``: the upper one, as NumPy); the
    gradient is the symmetric (Hermitian) one.
    A matrix that is not positive definite raises ``numpy.linalg.LinAlgError`` when the
    factor is computed.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.cholesky(qt.asarray([[4.0, 2.0], [2.0, 5.0]])).tolist()
        [[2.0, 0.0], [1.0, 2.0]]
        >>> qt.linalg.cholesky(qt.asarray([[4.0, 2.0], [0.0, 5.0]]), upper=True).tolist()
        [[2.0, 1.0], [0.0, 2.0]]
    """
    t = _square(_floating(x, "cholesky"), "cholesky")
    if upper:  # U = L^H for L the factor of x^H, whose lower triangle is x's upper one conjugated
        return mH(_lib("cholesky", [mH(t)], (), [(t.shape, t.dtype)])[0])
    return _lib("cholesky", [t], (), [(t.shape, t.dtype)])[0]


def det(x, /) -> Tensor:
    """The determinant of each square matrix of ``x`` (LU factorization).

    Example:
        >>> import qtrace as qt
        >>> round(qt.linalg.det(qt.asarray([[1.0, 2.0], [3.0, 4.0]])).item(), 12)
        -2.0
    """
    t = _square(_floating(x, "det"), "det")
    one = _stacked(t)
    out = _lib("det", [one], (), [(one.shape[:-2], t.dtype)])[0]
    return out if one is t else reshape(out, ())


def slogdet(x, /) -> SlogdetResult:
    """The sign and the log of the absolute value of the determinant of each square matrix
    (sign 0 and logabsdet ``-inf`` for a singular one); a ``(sign, logabsdet)`` namedtuple.
    For complex ``x`` the sign is complex (``det / abs(det)``) and ``logabsdet`` real.

    Example:
        >>> import qtrace as qt
        >>> sign, logabsdet = qt.linalg.slogdet(qt.asarray([[0.0, 2.0], [3.0, 0.0]]))
        >>> sign.item(), round(logabsdet.item(), 12)
        (-1.0, 1.791759469228)
    """
    t = _square(_floating(x, "slogdet"), "slogdet")
    one = _stacked(t)
    batch = one.shape[:-2]
    sign, logabsdet = _lib("slogdet", [one], (), [(batch, t.dtype), (batch, real_dtype(t.dtype))])
    if one is not t:
        sign, logabsdet = reshape(sign, ()), reshape(logabsdet, ())
    return SlogdetResult(sign, logabsdet)


def eigh(x, /, *, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending, real) and orthonormal eigenvectors (columns) of each symmetric
    (complex: Hermitian) matrix of ``x``; an ``(eigenvalues, eigenvectors)`` namedtuple.
    Only the lower triangle is read (NumPy's ``UPLO='U'``: the upper one).

    Eigenvectors are unique up to sign (complex: a phase) only, for distinct eigenvalues;
    the gradient assumes distinct eigenvalues (it divides by their differences), is the
    symmetric (Hermitian) one and, for complex ``x``, needs a loss that does not depend on
    the eigenvectors' phases.

    Example:
        >>> import qtrace as qt
        >>> w, v = qt.linalg.eigh(qt.asarray([[2.0, 0.0], [0.0, 1.0]]))
        >>> w.tolist(), abs(v).tolist()
        ([1.0, 2.0], [[0.0, 1.0], [1.0, 0.0]])
        >>> qt.linalg.eigh(qt.asarray([[2.0, 1.0], [0.0, 2.0]]), UPLO="U").eigenvalues.tolist()
        [1.0, 3.0]
    """
    t = _square(_floating(x, "eigh"), "eigh")
    if _uplo(UPLO, "eigh"):  # x^H's lower triangle is x's upper one, conjugated
        t = mH(t)
    return EighResult(*_lib("eigh", [t], (), [(t.shape[:-1], real_dtype(t.dtype)), (t.shape, t.dtype)]))


def eigvalsh(x, /, *, UPLO: str = "L") -> Tensor:
    """The eigenvalues (ascending, real) of each symmetric (complex: Hermitian) matrix of
    ``x`` (lower triangle read; NumPy's ``UPLO='U'``: the upper one).

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.eigvalsh(qt.asarray([[2.0, 1.0], [1.0, 2.0]])).tolist()
        [1.0, 3.0]
        >>> qt.linalg.eigvalsh(qt.asarray([[2.0, 0.0], [1.0, 2.0]]), UPLO="U").tolist()
        [2.0, 2.0]
    """
    t = _square(_floating(x, "eigvalsh"), "eigvalsh")
    if _uplo(UPLO, "eigvalsh"):
        t = mH(t)
    return _lib("eigvalsh", [t], (), [(t.shape[:-1], real_dtype(t.dtype))])[0]


def inv(x, /) -> Tensor:
    """The inverse of each square matrix of ``x`` (a singular one raises
    ``numpy.linalg.LinAlgError`` when the inverse is computed).

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.inv(qt.asarray([[2.0, 0.0], [0.0, 4.0]])).tolist()
        [[0.5, 0.0], [0.0, 0.25]]
    """
    t = _square(_floating(x, "inv"), "inv")
    return _lib("inv", [t], (), [(t.shape, t.dtype)])[0]


def pinv(x, /, *, rtol=None, rcond=None, hermitian: bool = False) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix of ``x`` (shape ``(..., N, M)``): by
    SVD, singular values at most ``rtol`` times the largest count as zero (``rtol``
    defaults to ``max(M, N) * eps``; an array broadcasts against the stack).

    NumPy's options: ``rcond``, the same relative cutoff under NumPy's older name (not
    with ``rtol``; ``numpy.linalg.pinv``'s default ``1e-15`` applies only through NumPy's
    signature, ``np.linalg.pinv(t)``); ``hermitian=True`` reads each matrix as the
    symmetric (complex: Hermitian) one of its lower triangle.

    The gradient is the one of constant rank (Golub and Pereyra).

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.pinv(qt.asarray([[1.0, 0.0], [0.0, 0.0]])).tolist()
        [[1.0, 0.0], [0.0, 0.0]]
        >>> qt.linalg.pinv(qt.asarray([[1.0, 0.0], [0.0, 1e-3]]), rcond=1e-2).tolist()
        [[1.0, 0.0], [0.0, 0.0]]
    """
    t = _matrix(_floating(x, "pinv"), "pinv")
    if rcond is not None:
        if rtol is not None:
            raise ValueError(_PINV_BOTH)
        rtol = rcond
    if hermitian:
        t = _hermitian(t, "pinv")
    tol = _rtol(rtol, t, "pinv")
    out = [(t.shape[:-2] + (t.shape[-1], t.shape[-2]), t.dtype)]
    if isinstance(tol, Tensor):
        return _lib("pinv", [t, tol], (None,), out)[0]
    return _lib("pinv", [t], (tol,), out)[0]


def qr(x, /, *, mode: str = "reduced"):
    """The QR decomposition of each matrix of ``x``: ``Q`` with orthonormal columns and upper
    triangular ``R`` (with a real diagonal for complex ``x``); a ``(Q, R)`` namedtuple.
    ``mode='reduced'``: shapes ``(..., M, K)`` and ``(..., K, N)`` with ``K = min(M, N)``;
    ``'complete'``: ``(..., M, M)``, ``(..., M, N)``; NumPy's ``'r'``: ``R`` alone (a
    tensor, shape ``(..., K, N)``). NumPy's ``'raw'`` (LAPACK's Householder reflectors)
    raises ``NotImplementedError``.

    Unique up to the signs of ``R``'s diagonal (Householder, as LAPACK). Gradients: both
    modes of square and wide matrices, reduced mode of tall ones (complete mode of a tall
    matrix: through ``R`` only; its extra columns of ``Q`` are not a function of ``x``).

    Example:
        >>> import qtrace as qt
        >>> q, r = qt.linalg.qr(qt.asarray([[3.0, 1.0], [4.0, 2.0]]))
        >>> abs(r).round(12).tolist()
        [[5.0, 2.2], [0.0, 0.4]]
        >>> abs(qt.linalg.qr(qt.asarray([[3.0], [4.0]]), mode="r")).tolist()
        [[5.0]]
    """
    t = _matrix(_floating(x, "qr"), "qr")
    if mode == "raw":
        raise NotImplementedError("qt.linalg.qr: mode='raw' (LAPACK's Householder reflectors and tau) "
                                  "is not supported; use 'reduced', 'complete' or 'r'")
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qt.linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    *batch, m, n = t.shape
    batch = tuple(batch)
    lib_mode = "reduced" if mode == "r" else mode
    q = m if mode == "complete" else min(m, n)
    res = QRResult(*_lib("qr", [t], (lib_mode,), [(batch + (m, q), t.dtype), (batch + (q, n), t.dtype)]))
    return res.R if mode == "r" else res


def solve(x1, x2, /) -> Tensor:
    """The solution ``X`` of ``x1 @ X = x2`` for each square matrix of ``x1`` (LU with partial
    pivoting). A 1-D ``x2`` of shape ``(M,)`` is one right-hand side (result
    ``shape(x1)[:-1]``); otherwise ``x2`` has shape ``(..., M, K)`` and the stacks broadcast.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.solve(qt.asarray([[2.0, 0.0], [0.0, 4.0]]), qt.asarray([1.0, 1.0])).tolist()
        [0.5, 0.25]
    """
    a = _square(_floating(x1, "solve"), "solve")
    b = _floating(x2, "solve")
    a, b = _same_float([a, b], "solve")
    given = b.shape
    m = a.shape[-1]
    if b.ndim == 0:
        raise ValueError("qt.linalg.solve: x2 must be at least 1-D, got a 0-d array")
    vector = b.ndim == 1
    if vector:
        b = reshape(b, (b.shape[0], 1))
    if b.shape[-2] != m:
        raise ValueError(f"qt.linalg.solve: x2 has {b.shape[-2]} rows, the matrices of x1 are {m} x {m} "
                         f"(shapes {a.shape} and {given})")
    batch = broadcast_shapes("qt.linalg.solve", a.shape[:-2], b.shape[:-2])
    out = _lib("solve", [a, b], (), [(batch + b.shape[-2:], a.dtype)])[0]
    return reshape(out, batch + (m,)) if vector else out


def svd(x, /, *, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False):
    """The singular value decomposition ``x = U @ diag(S) @ Vh`` of each matrix of ``x``; a
    ``(U, S, Vh)`` namedtuple with ``S`` descending (real, also for complex ``x``).
    ``full_matrices=True``: ``U`` is ``(..., M, M)`` and ``Vh`` ``(..., N, N)``; ``False``:
    ``(..., M, K)`` and ``(..., K, N)``.

    NumPy's options: ``compute_uv=False`` returns ``S`` alone (``svdvals``);
    ``hermitian=True`` reads each (square) matrix as the symmetric (complex: Hermitian)
    one of its lower triangle, as NumPy's ``eigh``-based path does (the singular vectors
    may differ from NumPy's in sign or phase, as always).

    Singular vectors are unique up to sign (complex: a phase shared by a column of ``U``
    and a row of ``Vh``), for distinct singular values. Gradients of ``U`` and ``Vh``
    divide by the differences of squared singular values: they are infinite/NaN for
    repeated singular values (the gradient of ``S`` alone is always defined); for complex
    ``x`` they need a loss that does not depend on the singular vectors' phases. With
    ``full_matrices=True`` and a non-square matrix, only ``S`` is differentiable (the
    extra singular vectors are not a function of ``x``), as in JAX.

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.svd(qt.asarray([[3.0, 0.0], [0.0, -4.0]])).S.tolist()
        [4.0, 3.0]
        >>> qt.linalg.svd(qt.asarray([[3.0, 0.0], [0.0, -4.0]]), compute_uv=False).tolist()
        [4.0, 3.0]
    """
    t = _matrix(_floating(x, "svd"), "svd")
    if hermitian:
        t = _hermitian(t, "svd")
    if not compute_uv:
        return svdvals(t)
    *batch, m, n = t.shape
    batch, k = tuple(batch), min(m, n)
    u, v = (m, n) if full_matrices else (k, k)
    specs = [(batch + (m, u), t.dtype), (batch + (k,), real_dtype(t.dtype)), (batch + (v, n), t.dtype)]
    return SVDResult(*_lib("svd", [t], (bool(full_matrices),), specs))


def svdvals(x, /) -> Tensor:
    """The singular values of each matrix of ``x``, descending (shape ``(..., min(M, N))``;
    real, also for complex ``x``).

    Example:
        >>> import qtrace as qt
        >>> qt.linalg.svdvals(qt.asarray([[0.0, 2.0], [1.0, 0.0]])).tolist()
        [2.0, 1.0]
    """
    t = _matrix(_floating(x, "svdvals"), "svdvals")
    return _lib("svdvals", [t], (), [(t.shape[:-2] + (min(t.shape[-2:]),), real_dtype(t.dtype))])[0]


# --- numpy.linalg on tensors: NumPy's signatures, mapped onto the functions above --------
def _numpy_svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    return svd(a, full_matrices=full_matrices, compute_uv=compute_uv, hermitian=hermitian)


_PINV_BOTH = "qt.linalg.pinv: rtol and rcond cannot both be given (rcond is NumPy's name of rtol)"


def _numpy_pinv(a, rcond=None, hermitian=False, *, rtol=_UNSET):
    if rtol is _UNSET:  # NumPy 2's default: rcond=1e-15 unless rtol is given
        return pinv(a, rcond=1e-15 if rcond is None else rcond, hermitian=hermitian)
    if rcond is not None:   # (NumPy refuses both, rtol=None included)
        raise ValueError(_PINV_BOTH)
    return pinv(a, rtol=rtol, hermitian=hermitian)


def _numpy_matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    return matrix_rank(A, rtol=rtol, tol=tol, hermitian=hermitian)


def _numpy_qr(a, mode="reduced"):
    return qr(a, mode=mode)


def _numpy_eigh(a, UPLO="L"):
    return eigh(a, UPLO=UPLO)


def _numpy_eigvalsh(a, UPLO="L"):
    return eigvalsh(a, UPLO=UPLO)


for _fn in (_numpy_svd, _numpy_pinv, _numpy_matrix_rank, _numpy_qr, _numpy_eigh, _numpy_eigvalsh):
    _name = _fn.__name__.removeprefix("_numpy_")
    _fn.__name__ = _fn.__qualname__ = f"numpy_{_name}"
    _fn.__doc__ = f"``numpy.linalg.{_name}`` on tensors, NumPy's signature (see ``{_name}``)."

# numpy.linalg's functions on tensors (``__array_function__``); NumPy 2's Array API ones
# have the standard's signatures, the others NumPy's (the wrappers above)
NUMPY_FUNCTIONS: dict = {
    np.linalg.inv: inv, np.linalg.det: det, np.linalg.solve: solve, np.linalg.slogdet: slogdet,
    np.linalg.cholesky: cholesky, np.linalg.matrix_power: matrix_power,
    np.linalg.eigh: _numpy_eigh, np.linalg.eigvalsh: _numpy_eigvalsh, np.linalg.pinv: _numpy_pinv,
    np.linalg.qr: _numpy_qr, np.linalg.svd: _numpy_svd, np.linalg.matrix_rank: _numpy_matrix_rank,
    **{getattr(np.linalg, name): fn for name, fn in (
        ("svdvals", svdvals), ("matrix_norm", matrix_norm), ("vector_norm", vector_norm),
        ("matrix_transpose", matrix_transpose), ("diagonal", diagonal), ("trace", trace),
        ("outer", outer), ("cross", cross), ("tensordot", tensordot), ("vecdot", vecdot),
        ("matmul", matmul)) if hasattr(np.linalg, name)},
}
