"""Numerical routines over arrays: einsum, convolution, interpolation, differences and polynomials.

Every function is built from recorded qtrace operations (nothing is evaluated behind the
caller's back), so it works inside ``qt.jit`` and is differentiated by ``qt.grad``.
Contractions (``einsum``, ``vdot``, ``convolve``/``correlate``) are matrix products
(``qt.matmul``: the device's BLAS for large operands); index arrays that depend only on
shapes are built with NumPy at record time. Parameters that decide a result's shape
(``deg``, ``m``, ``edge_order``, modes, subscripts) must be Python or NumPy values. One
result's shape depends on the data: ``polymul`` drops leading zero coefficients as NumPy
does, reading its inputs' values (``qt.TracerError`` inside ``qt.jit``), unless
``trim_leading_zeros=False``.

``NUMPY_FUNCTIONS`` maps NumPy's functions to these (``__array_function__``),
``NUMPY_UFUNCS`` the NumPy ufuncs among them (``__array_ufunc__``).

Example:
    >>> import qtrace as qt
    >>> a = qt.arange(6.0).reshape(2, 3)
    >>> qt.einsum("ij,j->i", a, qt.ones(3)).tolist()
    [3.0, 12.0]
    >>> qt.polyval(qt.asarray([1.0, 0.0, -1.0]), qt.asarray([2.0, 3.0])).tolist()
    [3.0, 8.0]
"""

from __future__ import annotations

import math
import operator
import string

import numpy as np

from ..errors import TracerError
from . import dtypes
from . import elementwise as _ew
from . import reductions as _red
from .array_api import complex_from_parts
from .array_api import imag as _imag
from .array_api import real as _real
from .composites import _along, _atleast, _diagonal, _int, _no_out, _tensor
from .composites import diff as _diff
from .context import tracing
from .convert import astype
from .creation import arange, zeros
from .creation import full as _full
from .linalg import matmul
from .linalg_ext import pinv
from .shape_ops import broadcast_to, concatenate, normalize_axis, ravel, reshape, transpose
from .sorting import argsort, searchsorted
from .tensor import Tensor

_ap = _ew.apply


def _cast(t: Tensor, dt) -> Tensor:
    return t if t.dtype == dt else astype(t, dt)


def _sum(t: Tensor, axes, dt) -> Tensor:
    """Sum over ``axes`` keeping dtype ``dt`` (NumPy's einsum accumulates in the operand
    dtype; for bools a sum of products is a logical or)."""
    if not axes:
        return t
    if dt == dtypes.bool_:
        return _red.any(t, axis=tuple(axes))
    return _red.sum(t, axis=tuple(axes), dtype=dt)


# --- einsum ----------------------------------------------------------------------------
_LETTERS = string.ascii_uppercase + string.ascii_lowercase   # the operand-list form's 0..51


def _sublist(sub, op: str) -> str:
    """An operand-list subscript sequence as subscript letters (``Ellipsis`` as ``...``)."""
    out = []
    for s in sub:
        if s is Ellipsis:
            out.append("...")
            continue
        if isinstance(s, Tensor):
            raise TypeError(f"qt.{op}: subscripts must be Python integers or Ellipsis, not a qt.Tensor")
        try:
            i = operator.index(s)
        except TypeError:
            raise TypeError(f"qt.{op}: subscripts in the operand-list form must be integers or "
                            f"Ellipsis, got {s!r}") from None
        if not 0 <= i < 52:
            raise ValueError(f"qt.{op}: subscript {i} is not within the valid range [0, 52)")
        out.append(_LETTERS[i])
    return "".join(out)


def _parse_term(term: str, ndim: int, k: int) -> list:
    """The labels of operand ``k``: letters, and ``-1 .. -e`` for its ellipsis dimensions
    (counted from the right, so that the ellipses of all operands broadcast)."""
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise ValueError(f"qt.einsum: invalid ellipsis in the subscripts {term!r} of operand {k} "
                         "(at most one '...')")
    head, dots, tail = term.partition("...")
    for c in head + tail:
        if c not in _LETTERS:
            raise ValueError(f"qt.einsum: invalid subscript {c!r} in the einstein sum subscripts "
                             "string, subscripts must be letters")
    named = len(head) + len(tail)
    if not dots and named != ndim:
        raise ValueError(f"qt.einsum: operand {k} has {ndim} dimensions but its subscripts "
                         f"{term!r} name {named} (use '...' to broadcast the others)")
    if named > ndim:
        raise ValueError(f"qt.einsum: subscripts {term!r} name {named} dimensions, more than "
                         f"operand {k} has ({ndim})")
    e = ndim - named
    return list(head) + list(range(-e, 0)) + list(tail)


def _parse(subscripts: str, ops: list) -> tuple:
    """Input label lists and the output label list of a subscripts string."""
    s = subscripts.replace(" ", "")
    if s.count("->") > 1 or s.replace("->", "").count("-") or s.replace("->", "").count(">"):
        raise ValueError(f"qt.einsum: subscripts {subscripts!r} may hold one '->' only")
    ins, arrow, out = s.partition("->")
    terms = ins.split(",")
    if len(terms) != len(ops):
        raise ValueError(f"qt.einsum: the subscripts {subscripts!r} name {len(terms)} operands, "
                         f"{len(ops)} given")
    labels = [_parse_term(term, t.ndim, k) for k, (term, t) in enumerate(zip(terms, ops))]
    ell = max((-min((c for c in ls if isinstance(c, int)), default=0) for ls in labels), default=0)
    if not arrow:
        counts: dict = {}
        for ls in labels:
            for c in ls:
                if isinstance(c, str):
                    counts[c] = counts.get(c, 0) + 1
        return labels, list(range(-ell, 0)) + sorted(c for c, n in counts.items() if n == 1)
    if "." in out.replace("...", "") or out.count("...") > 1:
        raise ValueError(f"qt.einsum: invalid ellipsis in the output subscripts {out!r}")
    head, dots, tail = out.partition("...")
    if ell and not dots:
        raise ValueError("qt.einsum: output has more dimensions than subscripts given in einstein "
                         f"sum, but no '...' ellipsis provided to broadcast the extra dimensions ({out!r})")
    seen = set()
    for c in head + tail:
        if c not in _LETTERS:
            raise ValueError(f"qt.einsum: invalid subscript {c!r} in the output subscripts {out!r}, "
                             "subscripts must be letters")
        if c in seen:
            raise ValueError(f"qt.einsum: output subscript {c!r} appears more than once in {out!r}")
        if not any(c in ls for ls in labels):
            raise ValueError(f"qt.einsum: output subscript {c!r} never appeared in an input")
        seen.add(c)
    return labels, list(head) + (list(range(-ell, 0)) if dots else []) + list(tail)


def _take_diagonals(t: Tensor, labels: list, k: int) -> tuple:
    """A label repeated within one operand: its diagonal (the label once, as the last axis)."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        p = labels.index(c)
        q = labels.index(c, p + 1)
        if t.shape[p] != t.shape[q]:
            raise ValueError(f"qt.einsum: dimensions in operand {k} for collapsing index {c!r} don't "
                             f"match ({t.shape[p]} != {t.shape[q]})")
        t = _diagonal(t, 0, p, q, "einsum")
        labels = [lab for i, lab in enumerate(labels) if i not in (p, q)] + [c]
    return t, labels


def _contract(a: tuple, b: tuple, keep: set, dt) -> tuple:
    """The product of two labelled operands summed over their shared labels not in ``keep``:
    one (batched) matrix product, or a broadcast product (and a sum) where nothing is summed
    or nothing but the summed labels is left on either side."""
    (x, lx), (y, ly) = a, b
    size = dict(zip(lx, x.shape)) | dict(zip(ly, y.shape))
    shared = [c for c in lx if c in ly]
    batch = [c for c in shared if c in keep]
    summed = [c for c in shared if c not in keep]
    fx = [c for c in lx if c not in ly]
    fy = [c for c in ly if c not in lx]
    out = batch + fx + fy
    bs = tuple(size[c] for c in batch)
    xs, ys = tuple(size[c] for c in fx), tuple(size[c] for c in fy)
    if not summed or not fx and not fy:
        # nothing summed, or nothing but sums (row-wise dot products): a broadcast product
        # (fused with the sum) rather than a stack of 1 x 1 matrix products
        xt = reshape(transpose(x, [lx.index(c) for c in batch + fx + summed]),
                     bs + xs + (1,) * len(fy) + tuple(size[c] for c in summed))
        yt = reshape(transpose(y, [ly.index(c) for c in batch + fy + summed]),
                     bs + (1,) * len(fx) + ys + tuple(size[c] for c in summed))
        prod = _cast(_ap("multiply", xt, yt), dt)
        return _sum(prod, list(range(len(out), len(out) + len(summed))), dt), out
    cs = math.prod(size[c] for c in summed)
    xt = reshape(transpose(x, [lx.index(c) for c in batch + fx + summed]), bs + (math.prod(xs), cs))
    yt = reshape(transpose(y, [ly.index(c) for c in batch + summed + fy]), bs + (cs, math.prod(ys)))
    return reshape(matmul(xt, yt), bs + xs + ys), out


def _order(operands: list, keep_out: set) -> tuple:
    """The pair to contract next: the one with the smallest result (greedy)."""
    best = None
    for i in range(len(operands)):
        for j in range(i + 1, len(operands)):
            keep = keep_out.union(*(operands[m][1] for m in range(len(operands)) if m not in (i, j)))
            li, lj = operands[i][1], operands[j][1]
            size = dict(zip(li, operands[i][0].shape)) | dict(zip(lj, operands[j][0].shape))
            labels = {c for c in li + lj if c in keep}
            cost = (math.prod(size[c] for c in labels), not set(li) & set(lj))
            if best is None or cost < best[0]:
                best = (cost, i, j, keep)
    return best[1:]


def einsum(*operands, out=None, optimize=False, dtype=None, order="K", casting="safe") -> Tensor:
    """``numpy.einsum``: Einstein summation over the subscripts string (explicit ``->`` or
    implicit output, ``...`` broadcasting, repeated subscripts within an operand taking
    diagonals) or the operand-list form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``.

    Operands are contracted pairwise (greedily, smallest intermediate first): with
    ``qt.matmul`` where summed subscripts meet free ones (the BLAS path for large
    contractions), by broadcast products and ``qt.sum`` otherwise, in the operands' common
    dtype (``dtype=`` with ``casting=``; integer sums wrap as NumPy's, bools or-reduce).
    ``optimize`` is accepted and ignored (the order is always the greedy one); ``order``
    is ignored; ``out=`` is not supported. A result that only rearranges one operand
    (``'ij->ji'``, ``'ii->i'``) is a view of it, as in NumPy.

    Example:
        >>> import qtrace as qt
        >>> a = qt.arange(4.0).reshape(2, 2)
        >>> qt.einsum("ij,jk->ik", a, a).tolist()
        [[2.0, 3.0], [6.0, 11.0]]
        >>> qt.einsum("ii", a).item()
        3.0
        >>> qt.einsum(a, [0, 1], [1, 0]).tolist()
        [[0.0, 2.0], [1.0, 3.0]]
    """
    _no_out(out, "einsum")
    if not operands:
        raise ValueError("qt.einsum: must specify the einstein sum subscripts string and at least "
                         "one operand")
    if isinstance(operands[0], str):
        subscripts, arrays = operands[0], list(operands[1:])
    else:
        arrays = list(operands[0::2])
        subs = [_sublist(s, "einsum") for s in operands[1::2]]
        if len(operands) % 2:      # a trailing output sublist
            subscripts = ",".join(subs) + "->" + _sublist(operands[-1], "einsum")
            arrays = arrays[:-1]
        else:
            subscripts = ",".join(subs)
    if not arrays:
        raise ValueError("qt.einsum: at least one operand is needed")
    if order not in ("K", "A", "C", "F"):
        raise ValueError(f"qt.einsum: order must be one of 'C', 'F', 'A' or 'K', got {order!r}")
    ts = [_tensor(a, "einsum") for a in arrays]
    if dtype is not None:
        dt = dtypes.canonical(dtype, "qt.einsum")
        for k, t in enumerate(ts):
            if not np.can_cast(t.dtype, dt, casting=casting):
                raise TypeError(f"qt.einsum: cannot cast operand {k} from dtype {t.dtype} to {dt} "
                                f"according to the rule {casting!r}")
    else:
        dt = np.result_type(*(t.dtype for t in ts))
    dtypes.check("qt.einsum", dt)
    labels, out_labels = _parse(subscripts, ts)
    sizes: dict = {}
    work = []
    for k, (t, ls) in enumerate(zip(ts, labels)):
        t, ls = _take_diagonals(_cast(t, dt), ls, k)
        for c, n in zip(ls, t.shape):
            m = sizes.get(c, 1)
            if n != 1 and m != 1 and n != m:
                raise ValueError(f"qt.einsum: operands could not be broadcast together: subscript "
                                 f"{c if isinstance(c, str) else '...'!r} has size {m} and {n} "
                                 f"(operand {k} of shape {t.shape})")
            sizes[c] = n if m == 1 else m
        work.append((t, ls))
    keep_out = set(out_labels)
    for k, (t, ls) in enumerate(work):
        # broadcast (size-1) dimensions leave the operand; labels found nowhere else are summed
        squeeze = [i for i, c in enumerate(ls) if t.shape[i] == 1 and sizes[c] != 1]
        if squeeze:
            t = reshape(t, tuple(n for i, n in enumerate(t.shape) if i not in squeeze))
            ls = [c for i, c in enumerate(ls) if i not in squeeze]
        others = keep_out.union(*(work[m][1] for m in range(len(work)) if m != k))
        alone = [i for i, c in enumerate(ls) if c not in others]
        t = _sum(t, alone, dt)
        work[k] = (t, [c for i, c in enumerate(ls) if i not in alone])
    while len(work) > 1:
        i, j, keep = _order(work, keep_out)
        pair = _contract(work[i], work[j], keep, dt)
        work = [w for m, w in enumerate(work) if m not in (i, j)] + [pair]
    t, ls = work[0]
    result = transpose(t, [ls.index(c) for c in out_labels])
    shape = tuple(sizes[c] for c in out_labels)
    return result if result.shape == shape else broadcast_to(result, shape)


def vdot(a, b, /) -> Tensor:
    """``numpy.vdot``: the dot product of the flattened inputs, the first one conjugated.

    Both must have the same number of elements; the result is 0-d, in their common dtype.

    Example:
        >>> import qtrace as qt
        >>> qt.vdot(qt.asarray([1 + 2j, 3j]), qt.asarray([1.0, 1.0])).item()
        (1-5j)
    """
    x, y = ravel(_tensor(a, "vdot")), ravel(_tensor(b, "vdot"))
    if x.size != y.size:
        raise ValueError(f"qt.vdot: vectors have different lengths ({x.size} and {y.size} elements)")
    dt = np.result_type(x.dtype, y.dtype)
    dtypes.check("qt.vdot", dt)
    x, y = _cast(x, dt), _cast(y, dt)
    if dt.kind == "c":
        x = _ew.conj(x)
    n = x.shape[0]
    return reshape(matmul(reshape(x, (1, n)), reshape(y, (n, 1))), ())


# --- convolution -----------------------------------------------------------------------
_MODES = ("full", "same", "valid")


def _vector(x, op: str, what: str) -> Tensor:
    t = _tensor(x, op)
    if t.ndim > 1:
        raise ValueError(f"qt.{op}: {what} must be 1-D, got shape {t.shape}")
    if t.size == 0:
        raise ValueError(f"qt.{op}: {what} cannot be empty")
    return reshape(t, (t.size,))


def _mode(mode, op: str) -> str:
    if isinstance(mode, int) and not isinstance(mode, bool) and 0 <= mode <= 2:
        return _MODES[2 - mode]     # NumPy's old integer codes: 0 valid, 1 same, 2 full
    if mode not in _MODES:
        raise ValueError(f"qt.{op}: mode must be one of 'full', 'same' or 'valid', got {mode!r}")
    return mode


def _full_rows(x: Tensor, w: Tensor, lo: int, count: int) -> Tensor:
    """Rows ``lo .. lo + count`` of the full convolution ``out[k] = sum_j x[k - j] * w[j]``:
    the Toeplitz matrix of ``x`` (a gather of the zero-padded signal) times ``w``."""
    m = w.shape[0]
    padded = concatenate([zeros((m - 1,), x.dtype, device=x.device), x,
                          zeros((m - 1,), x.dtype, device=x.device)])
    rows = np.arange(lo, lo + count, dtype=np.int64)[:, None] + (m - 1) - np.arange(m, dtype=np.int64)
    return matmul(_along(padded, 0, rows), w)


def _convolve(a, v, mode, op: str, correlate: bool) -> Tensor:
    x, w = _vector(a, op, "a"), _vector(v, op, "v")
    mode = _mode(mode, op)
    dt = np.result_type(x.dtype, w.dtype)
    dtypes.check(f"qt.{op}", dt)
    x, w = _cast(x, dt), _cast(w, dt)
    n, m = x.shape[0], w.shape[0]
    if correlate:  # correlate(a, v)[k] = sum_n a[n + k] * conj(v[n]): a convolution with conj(v[::-1])
        w = _along(_ew.conj(w) if dt.kind == "c" else w, 0, slice(None, None, -1))
    short = min(n, m)
    if mode == "full":
        lo, count = 0, n + m - 1
    elif mode == "same":
        # NumPy centres on the shorter input; correlate swaps a shorter a with v, moving it
        lo, count = (short // 2 if correlate and n < m else (short - 1) // 2), max(n, m)
    else:
        lo, count = short - 1, max(n, m) - short + 1
    if n < m:   # gather the longer input, multiply by the shorter one
        x, w = w, x
    return _full_rows(x, w, lo, count)


def convolve(a, v, mode="full") -> Tensor:
    """``numpy.convolve``: the discrete linear convolution of two 1-D sequences, with modes
    ``'full'`` (length ``N + M - 1``), ``'same'`` (``max(N, M)``) and ``'valid'``
    (``max(N, M) - min(N, M) + 1``); the inputs are interchangeable, as in NumPy.

    One matrix product of the (gathered) Toeplitz matrix of the longer input with the
    shorter one. Inputs must be 1-D (0-d counts as length 1) and non-empty.

    Example:
        >>> import qtrace as qt
        >>> qt.convolve(qt.asarray([1.0, 2.0, 3.0]), qt.asarray([0.0, 1.0, 0.5])).tolist()
        [0.0, 1.0, 2.5, 4.0, 1.5]
        >>> qt.convolve(qt.asarray([1, 2, 3]), qt.asarray([1, 1]), mode="valid").tolist()
        [3, 5]
    """
    return _convolve(a, v, mode, "convolve", False)


def correlate(a, v, mode="valid") -> Tensor:
    """``numpy.correlate``: the cross-correlation ``c[k] = sum_n a[n + k] * conj(v[n])`` of
    two 1-D sequences (modes as ``convolve``; default ``'valid'``). Where ``v`` is the
    longer input the ``'same'`` window shifts as NumPy's (which swaps the inputs).

    Example:
        >>> import qtrace as qt
        >>> qt.correlate(qt.asarray([1.0, 2.0, 3.0]), qt.asarray([0.0, 1.0, 0.5]), "full").tolist()
        [0.5, 2.0, 3.5, 3.0, 0.0]
    """
    return _convolve(a, v, mode, "correlate", True)


# --- interpolation ---------------------------------------------------------------------
def _interp_real(x: Tensor, xp: Tensor, fp: Tensor, left, right) -> Tensor:
    """Piecewise-linear interpolation of real ``fp`` (float64) at ``x`` (float64)."""
    n = xp.shape[0]
    last = fp[n - 1]
    left = fp[0] if left is None else left
    right = last if right is None else right
    if n == 1:
        inside = fp[0]
    else:
        j = _ap("subtract", searchsorted(xp, x, side="right"), 1)   # xp[j] <= x < xp[j + 1]
        j = _ew.clip(j, 0, n - 2)
        j1 = _ap("add", j, 1)
        x0, x1, y0, y1 = _along(xp, 0, j), _along(xp, 0, j1), _along(fp, 0, j), _along(fp, 0, j1)
        slope = _ap("divide", _ap("subtract", y1, y0), _ap("subtract", x1, x0))
        inside = _ap("add", _ap("multiply", slope, _ap("subtract", x, x0)), y0)
        # where that is NaN (infinite slope or values), interpolate from the right end of
        # the interval, and where both ends hold the same value take it
        from_right = _ap("add", _ap("multiply", slope, _ap("subtract", x, x1)), y1)
        flat = _ap("logical_and", _ap("isnan", from_right), _ap("equal", y0, y1))
        inside = _ew.where(_ap("isnan", inside), _ew.where(flat, y0, from_right), inside)
        inside = _ew.where(_ap("equal", x, x0), y0, inside)
    out = _ew.where(_ap("greater_equal", x, xp[n - 1]), last, inside)
    out = _ew.where(_ap("greater", x, xp[n - 1]), right, out)
    out = _ew.where(_ap("less", x, xp[0]), left, out)
    return _ew.where(_ap("isnan", x), x, out)


_PARTS = {"real": _real, "imag": _imag}


def _part(v, part: str):
    """The real or imaginary part of a ``left``/``right`` value (``None`` stays)."""
    if v is None:
        return None
    t = v if isinstance(v, Tensor) else _tensor(v, "interp")
    if t.dtype.kind == "c":
        return _PARTS[part](t)
    return t if part == "real" else zeros((), dtypes.float64, device=t.device)


def interp(x, xp, fp, left=None, right=None, period=None) -> Tensor:
    """``numpy.interp``: the piecewise-linear interpolant of the points ``(xp, fp)`` at ``x``.

    ``xp`` must be increasing (not checked, as in NumPy) unless ``period`` is given (then
    ``x`` and ``xp`` are taken modulo ``period``, ``xp`` sorted, ``left``/``right``
    ignored); outside ``[xp[0], xp[-1]]`` the result is ``left``/``right`` (default
    ``fp[0]``/``fp[-1]``). The result is float64 (complex128 for complex ``fp``) of
    ``x``'s shape. Differentiable with respect to ``x``, ``xp``, ``fp``, ``left``, ``right``.

    Example:
        >>> import qtrace as qt
        >>> qt.interp(qt.asarray([0.0, 1.5, 3.0]), qt.asarray([1.0, 2.0]), qt.asarray([10.0, 20.0])).tolist()
        [10.0, 15.0, 20.0]
    """
    xt, xpt, fpt = (_tensor(v, "interp") for v in (x, xp, fp))
    for name, t in (("x", xt), ("xp", xpt)):
        if t.dtype.kind == "c":
            raise TypeError(f"qt.interp: {name} must be real, got dtype {t.dtype}")
    if xpt.ndim != 1 or fpt.ndim != 1:
        raise ValueError(f"qt.interp: xp and fp must be 1-D sequences, got shapes {xpt.shape} and "
                         f"{fpt.shape}")
    if xpt.shape[0] != fpt.shape[0]:
        raise ValueError(f"qt.interp: fp and xp are not of the same length ({fpt.shape[0]} and "
                         f"{xpt.shape[0]})")
    if xpt.shape[0] == 0:
        raise ValueError("qt.interp: array of sample points (xp) is empty")
    xt, xpt = _cast(xt, dtypes.float64), _cast(xpt, dtypes.float64)
    fdt = dtypes.complex128 if fpt.dtype.kind == "c" else dtypes.float64
    fpt = _cast(fpt, fdt)
    if period is not None:
        if isinstance(period, Tensor):
            raise TypeError("qt.interp: period must be a Python or NumPy number, not a qt.Tensor")
        if period == 0:
            raise ValueError("qt.interp: period must be a non-zero value")
        period = abs(float(period))
        left = right = None
        xt = _ap("remainder", xt, period)
        xpt = _ap("remainder", xpt, period)
        order = argsort(xpt)
        xpt, fpt = _along(xpt, 0, order), _along(fpt, 0, order)
        xpt = concatenate([_ap("subtract", xpt[-1:], period), xpt, _ap("add", xpt[:1], period)])
        fpt = concatenate([fpt[-1:], fpt, fpt[:1]])
    if fdt.kind != "c":
        return _interp_real(xt, xpt, fpt, _part(left, "real"), _part(right, "real"))
    re, im = (_interp_real(xt, xpt, _PARTS[p](fpt), _part(left, p), _part(right, p)) for p in _PARTS)
    return complex_from_parts(re, im)


# --- differences and integrals -----------------------------------------------------------
def _spacing(d, n: int, ax: int, op: str):
    """A ``gradient`` spacing: a scalar (returned as is) or the differences of 1-D coordinates."""
    if isinstance(d, Tensor):
        t = d
    elif np.ndim(d) == 0:
        return d
    else:
        t = _tensor(d, op)
    if t.ndim == 0:
        return t
    if t.ndim != 1:
        raise ValueError(f"qt.{op}: distances must be either scalars or 1-D, got shape {t.shape}")
    if t.shape[0] != n:
        raise ValueError(f"qt.{op}: when 1-D, distances must match the length of the corresponding "
                         f"dimension ({t.shape[0]} coordinates for axis {ax} of length {n})")
    if t.dtype.kind in "iub":
        t = astype(t, dtypes.float64)
    return _ap("subtract", t[1:], t[:-1])


def _weighted(terms, ax: int, nd: int) -> Tensor:
    """``sum(c * f)`` over ``(coefficient, values)`` pairs, 1-D coefficients laid along ``ax``."""
    total = None
    for c, f in terms:
        if isinstance(c, Tensor) and c.ndim == 1:
            c = reshape(c, tuple(c.shape[0] if a == ax else 1 for a in range(nd)))
        term = _ap("multiply", c, f)
        total = term if total is None else _ap("add", total, term)
    return total


def _derivative(f: Tensor, h, ax: int, edge_order: int) -> Tensor:
    """The derivative of ``f`` along ``ax``: central differences inside, one-sided of order
    ``edge_order`` at the ends; ``h`` a scalar spacing or the 1-D coordinate differences."""
    nd = f.ndim

    def at(part):
        return _along(f, ax, part)

    ap = _ap
    if isinstance(h, Tensor) and h.ndim == 1:
        d1, d2 = h[:-1], h[1:]   # the spacings left and right of each interior point
        s = ap("add", d1, d2)
        inner = _weighted([(ap("divide", ap("negative", d2), ap("multiply", d1, s)), at(slice(None, -2))),
                           (ap("divide", ap("subtract", d2, d1), ap("multiply", d1, d2)), at(slice(1, -1))),
                           (ap("divide", d1, ap("multiply", d2, s)), at(slice(2, None)))], ax, nd)
        if edge_order == 1:
            first = ap("divide", ap("subtract", at(slice(1, 2)), at(slice(0, 1))), h[0])
            last = ap("divide", ap("subtract", at(slice(-1, None)), at(slice(-2, -1))), h[-1])
        else:
            a, b = h[0], h[1]
            ab = ap("add", a, b)
            first = _weighted([(ap("divide", ap("negative", ap("add", ap("multiply", a, 2.0), b)),
                                   ap("multiply", a, ab)), at(slice(0, 1))),
                               (ap("divide", ab, ap("multiply", a, b)), at(slice(1, 2))),
                               (ap("divide", ap("negative", a), ap("multiply", b, ab)), at(slice(2, 3)))],
                              ax, nd)
            a, b = h[-2], h[-1]
            ab = ap("add", a, b)
            last = _weighted([(ap("divide", b, ap("multiply", a, ab)), at(slice(-3, -2))),
                              (ap("divide", ap("negative", ab), ap("multiply", a, b)), at(slice(-2, -1))),
                              (ap("divide", ap("add", ap("multiply", b, 2.0), a), ap("multiply", b, ab)),
                               at(slice(-1, None)))], ax, nd)
        return concatenate([first, inner, last], ax)
    inner = ap("divide", ap("subtract", at(slice(2, None)), at(slice(None, -2))), ap("multiply", h, 2.0))
    if edge_order == 1:
        first = ap("divide", ap("subtract", at(slice(1, 2)), at(slice(0, 1))), h)
        last = ap("divide", ap("subtract", at(slice(-1, None)), at(slice(-2, -1))), h)
    else:
        first = ap("divide", _weighted([(-1.5, at(slice(0, 1))), (2.0, at(slice(1, 2))),
                                        (-0.5, at(slice(2, 3)))], ax, nd), h)
        last = ap("divide", _weighted([(0.5, at(slice(-3, -2))), (-2.0, at(slice(-2, -1))),
                                       (1.5, at(slice(-1, None)))], ax, nd), h)
    return concatenate([first, inner, last], ax)


def gradient(f, *varargs, axis=None, edge_order=1):
    """``numpy.gradient``: the derivative of sampled values ``f`` along each of ``axis``
    (default all), by central differences inside and one-sided differences of order
    ``edge_order`` (1 or 2) at the ends.

    ``varargs``: nothing (unit spacing), one scalar for every axis, or one scalar or 1-D
    coordinate array per axis (uneven spacing). A tensor for one axis, a tuple for
    several. Integer inputs give float64; float inputs keep their dtype. Coordinates are
    never tested for even spacing (NumPy's shortcut): the uneven formulas give the same
    values up to rounding.

    Example:
        >>> import qtrace as qt
        >>> qt.gradient(qt.asarray([1.0, 2.0, 4.0, 7.0])).tolist()
        [1.0, 1.5, 2.5, 3.0]
        >>> qt.gradient(qt.asarray([0.0, 1.0, 4.0]), qt.asarray([0.0, 1.0, 2.0]), edge_order=2).tolist()
        [0.0, 2.0, 4.0]
    """
    t = _tensor(f, "gradient")
    if t.dtype == dtypes.bool_:
        raise TypeError("qt.gradient: boolean input is not supported (NumPy cannot subtract booleans)")
    if axis is None:
        axes = tuple(range(t.ndim))
    else:   # in the order given (the results follow it)
        axes = tuple(normalize_axis(a, t.ndim, "gradient")
                     for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        if len(set(axes)) != len(axes):
            raise ValueError(f"qt.gradient: repeated axis in {axis!r}")
    edge_order = _int(edge_order, "gradient", "edge_order")
    if edge_order not in (1, 2):
        raise ValueError(f"qt.gradient: edge_order must be 1 or 2, got {edge_order}")
    if not varargs:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacing = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise TypeError(f"qt.gradient: invalid number of arguments: {len(varargs)} spacings for "
                        f"{len(axes)} axes")
    otype = t.dtype if t.dtype.kind in "fc" else dtypes.float64
    t = _cast(t, otype)
    outs = []
    for ax, d in zip(axes, spacing):
        n = t.shape[ax]
        if n < edge_order + 1:
            raise ValueError(f"qt.gradient: shape of array too small to calculate a numerical gradient, "
                             f"at least (edge_order + 1) = {edge_order + 1} elements are required "
                             f"along axis {ax} (shape {t.shape})")
        h = _spacing(d, n, ax, "gradient")
        outs.append(_cast(_derivative(t, h, ax, edge_order), otype))
    return outs[0] if len(axes) == 1 else tuple(outs)


def trapezoid(y, x=None, dx=1.0, axis=-1) -> Tensor:
    """``numpy.trapezoid``: the integral of ``y`` along ``axis`` by the trapezoidal rule,
    with sample points ``x`` (1-D along ``axis``, or of ``y``'s shape) or spacing ``dx``.

    Example:
        >>> import qtrace as qt
        >>> qt.trapezoid(qt.asarray([1.0, 2.0, 3.0])).item()
        4.0
        >>> qt.trapezoid(qt.asarray([1.0, 2.0, 3.0]), x=qt.asarray([0.0, 1.0, 3.0])).item()
        6.5
    """
    t = _tensor(y, "trapezoid")
    ax = normalize_axis(axis, t.ndim, "trapezoid")
    if x is None:
        d = dx if isinstance(dx, Tensor) or np.ndim(dx) == 0 else _tensor(dx, "trapezoid")
    else:
        xt = _tensor(x, "trapezoid")
        if xt.ndim == 1:
            if xt.shape[0] != t.shape[ax]:
                raise ValueError(f"qt.trapezoid: x of length {xt.shape[0]} does not match axis {ax} "
                                 f"of y (shape {t.shape})")
            d = _diff(xt)
            d = reshape(d, tuple(d.shape[0] if a == ax else 1 for a in range(t.ndim)))
        else:
            d = _diff(xt, axis=ax)
    pairs = _ap("add", _along(t, ax, slice(1, None)), _along(t, ax, slice(None, -1)))
    return _red.sum(_ap("divide", _ap("multiply", d, pairs), 2.0), axis=ax)


# --- polynomials -----------------------------------------------------------------------
def _coefficients(p, op: str, what: str = "p") -> Tensor:
    t = _tensor(p, op)
    if t.ndim == 0:
        raise TypeError(f"qt.{op}: {what} must be a sequence of coefficients (at least 1-D), got a "
                        "0-d array")
    return t


def polyval(p, x) -> Tensor:
    """``numpy.polyval``: the polynomial with coefficients ``p`` (highest power first) at
    ``x``, by Horner's scheme; the result dtype is NumPy's (``x``'s with ``p``'s).
    ``poly1d`` objects are not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.polyval(qt.asarray([3, 0, 1]), qt.asarray([1, 2])).tolist()
        [4, 13]
    """
    c = _coefficients(p, "polyval")
    xt = _tensor(x, "polyval")
    y = zeros(xt.shape, xt.dtype, device=xt.device)
    for i in range(c.shape[0]):
        y = _ap("add", _ap("multiply", y, xt), c[i])
    return y


def _poly_pair(a1, a2, op: str, prim: str) -> Tensor:
    x = _atleast(_tensor(a1, op), 1)
    y = _atleast(_tensor(a2, op), 1)
    diff = y.shape[0] - x.shape[0]
    if diff and (x.ndim > 1 or y.ndim > 1):
        raise ValueError(f"qt.{op}: coefficient arrays of shapes {x.shape} and {y.shape} cannot be "
                         "aligned (only 1-D ones of different lengths are padded)")
    if diff > 0:
        x = concatenate([zeros((diff,), x.dtype, device=x.device), x])
    elif diff < 0:
        y = concatenate([zeros((-diff,), y.dtype, device=y.device), y])
    return _ap(prim, x, y)


def polyadd(a1, a2) -> Tensor:
    """``numpy.polyadd``: the sum of two polynomials (coefficients highest power first; the
    shorter is padded with leading zeros). ``poly1d`` objects are not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.polyadd(qt.asarray([1, 2]), qt.asarray([9, 5, 4])).tolist()
        [9, 6, 6]
    """
    return _poly_pair(a1, a2, "polyadd", "add")


def polysub(a1, a2) -> Tensor:
    """``numpy.polysub``: the difference of two polynomials (``a1 - a2``, coefficients
    highest power first). ``poly1d`` objects are not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.polysub(qt.asarray([2, 10, -2]), qt.asarray([3, 10, -4])).tolist()
        [-1, 0, 2]
    """
    return _poly_pair(a1, a2, "polysub", "subtract")


def _trimmed(t: Tensor) -> Tensor:
    """``t`` (made 1-D) without its leading zeros (``numpy.poly1d``'s; all zeros leave one):
    how many there are is read from the values, which a traced function cannot do."""
    t = _atleast(t, 1)
    if t.ndim > 1:
        raise ValueError(f"qt.polymul: polynomials must be 1-D, got shape {t.shape}")
    if tracing():
        raise TracerError("qt.polymul: NumPy drops the leading zeros of the coefficients, so the "
                          "result's length depends on the data, which a function traced by qt.jit "
                          "cannot have; pass trim_leading_zeros=False (as JAX's default) or call it "
                          "outside qt.jit")
    nonzero = np.flatnonzero(np.asarray(t))
    lead = int(nonzero[0]) if nonzero.size else t.shape[0] - 1
    return t[lead:] if lead else t


def polymul(a1, a2, *, trim_leading_zeros=True) -> Tensor:
    """``numpy.polymul``: the product of two polynomials (the convolution of their
    coefficients, highest power first). ``poly1d`` objects are not supported.

    As NumPy (which makes ``poly1d`` objects of the inputs) leading zero coefficients are
    dropped first: that reads the inputs' values (they are evaluated), and inside
    ``qt.jit`` raises ``qt.TracerError``. ``trim_leading_zeros=False`` (qtrace's and JAX's
    keyword) keeps them: lazy, traceable, a result of length ``len(a1) + len(a2) - 1``.

    Example:
        >>> import qtrace as qt
        >>> qt.polymul(qt.asarray([1.0, 2.0, 3.0]), qt.asarray([9.0, 5.0, 1.0])).tolist()
        [9.0, 23.0, 38.0, 17.0, 3.0]
        >>> qt.polymul(qt.asarray([0, 1, 2]), qt.asarray([1, 1])).tolist()
        [1, 3, 2]
    """
    x, y = _tensor(a1, "polymul"), _tensor(a2, "polymul")
    if trim_leading_zeros:
        x, y = _trimmed(x), _trimmed(y)
    return _convolve(_atleast(x, 1), _atleast(y, 1), "full", "polymul", False)


def _outside_jit(op: str, why: str) -> None:
    if tracing():
        raise TracerError(f"qt.{op}: {why}, which a function traced by qt.jit cannot have; call "
                          "it outside qt.jit")


def poly(seq_of_zeros):
    """``numpy.poly``: the coefficients (highest power first, leading 1) of the monic
    polynomial with the given roots, in NumPy's dtype (float64 for integers; real for
    complex roots that come in conjugate pairs). An empty sequence gives ``1.0``.

    The characteristic polynomial of a square matrix (NumPy's 2-D form) needs general
    eigenvalues, which qtrace does not compute: it raises ``TypeError``. For complex roots,
    whether the result is real depends on their values: they are evaluated (inside
    ``qt.jit`` it raises ``TracerError``).

    Example:
        >>> import qtrace as qt
        >>> qt.poly(qt.asarray([1.0, 2.0, 3.0])).tolist()
        [1.0, -6.0, 11.0, -6.0]
    """
    z = _atleast(_tensor(seq_of_zeros, "poly"), 1)
    if z.ndim != 1:
        if z.ndim == 2 and z.shape[0] == z.shape[1] and z.shape[0]:
            raise TypeError("qt.poly: the characteristic polynomial of a matrix needs its general "
                            "eigenvalues, which qtrace does not compute (qt.linalg.eigvalsh gives a "
                            "symmetric matrix's: pass those)")
        raise ValueError(f"qt.poly: input must be 1d or non-empty square 2d array, got shape {z.shape}")
    if z.shape[0] == 0:
        return 1.0
    dt = np.dtype(np.mintypecode(z.dtype.char))
    z = astype(z, dt)
    a = _full((1,), 1, dt, device=z.device)
    for i in range(z.shape[0]):   # a(x) * (x - z_i)
        zero = zeros((1,), dt, device=z.device)
        a = _ap("subtract", concatenate([a, zero]), _ap("multiply", z[i], concatenate([zero, a])))
    if dt.kind == "c":
        _outside_jit("poly", "whether the coefficients are real depends on the roots' values")
        roots = np.asarray(z)
        if np.all(np.sort(roots) == np.sort(roots.conjugate())):
            a = _real(a)
    return a


def polydiv(u, v) -> tuple:
    """``numpy.polydiv``: quotient and remainder of dividing polynomial ``u`` by ``v``
    (coefficients highest power first), as floats of NumPy's dtype. ``poly1d`` objects are
    not supported.

    As NumPy, leading remainder coefficients within ``1e-8`` of zero are dropped: the
    remainder's length depends on the values, so they are evaluated (inside ``qt.jit`` it
    raises ``TracerError``). The quotient is differentiable in ``u`` and ``v``.

    Example:
        >>> import qtrace as qt
        >>> q, r = qt.polydiv(qt.asarray([1.0, 3.0, 2.0]), qt.asarray([1.0, 1.0]))
        >>> q.tolist(), r.tolist()
        ([1.0, 2.0], [0.0])
    """
    x, y = _atleast(_tensor(u, "polydiv"), 1), _atleast(_tensor(v, "polydiv"), 1)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"qt.polydiv: polynomials must be 1-D, got shapes {x.shape} and {y.shape}")
    _outside_jit("polydiv", "the remainder's length depends on the data")
    dt = np.result_type(np.result_type(x.dtype, 0.0), np.result_type(y.dtype, 0.0))
    x, y = astype(x, dt), astype(y, dt)
    m, n = x.shape[0] - 1, y.shape[0] - 1
    scale = _ap("divide", 1.0, y[0])
    q = [None] * max(m - n + 1, 1)
    r = x
    for k in range(m - n + 1):
        d = _ap("multiply", scale, r[k])
        q[k] = d
        r = concatenate([r[:k], _ap("subtract", r[k:k + n + 1], _ap("multiply", d, y)), r[k + n + 1:]])
    quotient = reshape(concatenate([_atleast(e, 1) if e is not None else zeros((1,), dt, device=x.device)
                                    for e in q]), (len(q),))
    values = np.asarray(r)
    lead = 0
    while lead < values.shape[0] - 1 and np.allclose(values[lead], 0, rtol=1e-14):
        lead += 1
    return quotient, r[lead:]


def polyder(p, m=1) -> Tensor:
    """``numpy.polyder``: the ``m``-th derivative of a polynomial (coefficients highest power
    first; ``m`` a Python integer). ``poly1d`` objects are not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.polyder(qt.asarray([1, 1, 1, 1])).tolist()
        [3, 2, 1]
        >>> qt.polyder(qt.asarray([1.0, 1.0, 1.0, 1.0]), 2).tolist()
        [6.0, 2.0]
    """
    m = _int(m, "polyder", "m")
    if m < 0:
        raise ValueError(f"qt.polyder: order of derivative must be non-negative (see polyint), got m={m}")
    c = _coefficients(p, "polyder")
    for _ in range(m):
        n = c.shape[0] - 1
        c = _ap("multiply", c[:-1], arange(n, 0, -1, dtype=dtypes.int64, device=c.device))
    return c


def polyint(p, m=1, k=None) -> Tensor:
    """``numpy.polyint``: the ``m``-th antiderivative of a polynomial, with integration
    constants ``k`` (a scalar or one per integration, lowest order first; default zeros).
    ``poly1d`` objects are not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.polyint(qt.asarray([3.0, 2.0, 1.0])).tolist()
        [1.0, 1.0, 1.0, 0.0]
        >>> qt.polyint(qt.asarray([2.0]), 2, k=[1.0, 5.0]).tolist()
        [1.0, 1.0, 5.0]
    """
    m = _int(m, "polyint", "m")
    if m < 0:
        raise ValueError(f"qt.polyint: order of integral must be non-negative (see polyder), got m={m}")
    c = _coefficients(p, "polyint")
    ks = zeros((m,), dtypes.float64, device=c.device) if k is None else _atleast(_tensor(k, "polyint"), 1)
    if ks.ndim != 1:
        raise ValueError(f"qt.polyint: k must be a scalar or a 1-D array, got shape {ks.shape}")
    if ks.shape[0] == 1 and m > 1:
        ks = _ap("multiply", ks[0], _full((m,), 1.0, dtypes.float64, device=c.device))
    if ks.shape[0] < m:
        raise ValueError(f"qt.polyint: k must be a scalar or a rank-1 array of length 1 or >= m "
                         f"({m}), got length {ks.shape[0]}")
    for i in range(m):
        n = c.shape[0]
        c = _ap("divide", c, arange(n, 0, -1, dtype=dtypes.int64, device=c.device))
        dt = np.result_type(c.dtype, ks.dtype)
        c = concatenate([_cast(c, dt), _cast(ks[i:i + 1], dt)])
    return c


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False) -> Tensor:
    """``numpy.polyfit``: the least-squares polynomial of degree ``deg`` through the points
    ``(x, y)`` (``y`` 1-D, or 2-D for several fits), coefficients highest power first,
    optionally weighted by ``w``.

    Solved as NumPy does (columns of the Vandermonde matrix scaled to unit norm, singular
    values below ``rcond`` times the largest dropped) by the SVD pseudo-inverse
    (``qt.linalg.pinv``): lazy and differentiable (for a fixed rank). ``full=True`` and
    ``cov`` are not supported, and no ``RankWarning`` is given (that needs the values).
    Real inputs give float64 (as NumPy's), complex ones complex128.

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([0.0, 1.0, 2.0, 3.0])
        >>> [round(c, 10) + 0.0 for c in qt.polyfit(x, 2.0 * x * x - 1.0, 2).tolist()]
        [2.0, 0.0, -1.0]
    """
    if full:
        raise TypeError("qt.polyfit: full=True is not supported (residuals, rank and singular values)")
    if cov:
        raise TypeError("qt.polyfit: cov is not supported")
    deg = _int(deg, "polyfit", "deg")
    if deg < 0:
        raise ValueError(f"qt.polyfit: expected deg >= 0, got {deg}")
    xt, yt = _tensor(x, "polyfit"), _tensor(y, "polyfit")
    xdt, ydt = np.result_type(xt.dtype, 0.0), np.result_type(yt.dtype, 0.0)
    if xt.ndim != 1:
        raise TypeError(f"qt.polyfit: expected 1-D vector for x, got shape {xt.shape}")
    if xt.size == 0:
        raise TypeError("qt.polyfit: expected non-empty vector for x")
    if yt.ndim < 1 or yt.ndim > 2:
        raise TypeError(f"qt.polyfit: expected 1-D or 2-D array for y, got shape {yt.shape}")
    if xt.shape[0] != yt.shape[0]:
        raise TypeError(f"qt.polyfit: expected x and y to have same length, got {xt.shape[0]} and "
                        f"{yt.shape[0]}")
    if rcond is None:
        rcond = xt.shape[0] * float(np.finfo(xdt).eps)
    ldt = np.promote_types(xdt, dtypes.int64)     # NumPy's Vandermonde matrix
    xt = _cast(xt, ldt)
    powers = [_full(xt.shape, 1, ldt, device=xt.device)]
    for _ in range(deg):
        powers.append(_ap("multiply", powers[-1], xt))
    lhs = transpose(concatenate([reshape(q, (1, q.shape[0])) for q in powers[::-1]]))
    rhs = _cast(yt, ydt)
    if w is not None:
        wt = _tensor(w, "polyfit")
        wt = _cast(wt, np.result_type(wt.dtype, 0.0))
        if wt.ndim != 1:
            raise TypeError(f"qt.polyfit: expected a 1-D array for weights, got shape {wt.shape}")
        if wt.shape[0] != yt.shape[0]:
            raise TypeError(f"qt.polyfit: expected w and y to have the same length, got {wt.shape[0]} "
                            f"and {yt.shape[0]}")
        col = reshape(wt, (wt.shape[0], 1))
        lhs = _cast(_ap("multiply", lhs, col), ldt)
        rhs = _cast(_ap("multiply", rhs, col if rhs.ndim == 2 else wt), ydt)
    scale = _ap("sqrt", _red.sum(_ap("multiply", lhs, lhs), axis=0))
    lhs = _ap("divide", lhs, scale)
    cdt = np.result_type(ldt, ydt)
    c = matmul(pinv(_cast(lhs, cdt), rtol=rcond), _cast(rhs, cdt))
    return _ap("divide", c, scale if c.ndim == 1 else reshape(scale, (scale.shape[0], 1)))


NUMPY_FUNCTIONS: dict = {
    np.einsum: einsum, np.vdot: vdot, np.convolve: convolve, np.correlate: correlate,
    np.interp: interp, np.gradient: gradient, np.trapezoid: trapezoid, np.polyval: polyval,
    np.polyadd: polyadd, np.polysub: polysub, np.polymul: polymul, np.polyder: polyder,
    np.polyint: polyint, np.polyfit: polyfit, np.poly: poly, np.polydiv: polydiv,
}
NUMPY_UFUNCS: dict = {}

__all__: list[str] = [
    "convolve", "correlate", "einsum", "gradient", "interp", "poly", "polyadd", "polyder",
    "polydiv", "polyfit", "polyint", "polymul", "polysub", "polyval", "trapezoid", "vdot",
]
