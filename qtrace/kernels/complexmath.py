"""Complex numbers in kernels: a value is a pair ``(re, im)`` of float IR values.

``complex64`` is a pair of ``float``, ``complex128`` a pair of ``double``; in memory they
are interleaved (NumPy's layout), so a kernel loads and stores the two parts at element
``2*i`` and ``2*i + 1`` of the part type, which the loop vectorizer handles as an
interleaved access group. Every operation is written on the parts with the real
operations and math library, one rule per primitive (like ``scalar``'s). Formulas follow
C99 Annex G / NumPy's ``npy_math`` for the finite cases; special values (infinities,
signed zeros on branch cuts) are not all treated as Annex G does.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from . import mathlib_bridge as mathlib
from .intrinsics import intrinsic

I1 = ir.IntType(1)


def is_complex(dt: np.dtype) -> bool:
    return dt.kind == "c"


def part_dtype(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dt.itemsize == 8 else np.dtype(np.float64)


def part_type(dt: np.dtype) -> ir.Type:
    return ir.FloatType() if dt.itemsize == 8 else ir.DoubleType()


def const(dt: np.dtype, value) -> tuple:
    z = complex(value)
    ty = part_type(dt)
    return ir.Constant(ty, z.real), ir.Constant(ty, z.imag)


def load(b: ir.IRBuilder, base, index, dt: np.dtype) -> tuple:
    ty = part_type(dt)
    two = b.mul(index, ir.Constant(ir.IntType(64), 2))
    re = b.load(b.gep(base, [two], inbounds=True, source_etype=ty), typ=ty)
    im = b.load(b.gep(base, [b.add(two, ir.Constant(ir.IntType(64), 1))], inbounds=True,
                      source_etype=ty), typ=ty)
    return re, im


def part_pointers(b: ir.IRBuilder, base, index, dt: np.dtype) -> tuple:
    ty = part_type(dt)
    two = b.mul(index, ir.Constant(ir.IntType(64), 2))
    return (b.gep(base, [two], inbounds=True, source_etype=ty),
            b.gep(base, [b.add(two, ir.Constant(ir.IntType(64), 1))], inbounds=True, source_etype=ty))


def _f(b, name: str, *args):
    return mathlib.call(b, name, list(args))


def _intr(b, name: str, args, ty):
    return intrinsic(b, name, args, [ty])


def _k(x, value) -> ir.Constant:
    """The constant ``value`` of ``x``'s type."""
    return ir.Constant(x.type, value)


def _fabs(b, x):
    return _intr(b, "fabs", [x], x.type)


def _copysign(b, x, sign):
    return _intr(b, "copysign", [x, sign], x.type)


def _fma(b, x, y, z):
    return _intr(b, "fma", [x, y, z], x.type)


def _is_zero(b, x):
    return b.fcmp_ordered("==", x, _k(x, 0.0))


def _is_inf(b, x):
    return b.fcmp_ordered("==", _fabs(b, x), _k(x, float("inf")))


def _is_nan(b, x):
    return b.fcmp_unordered("uno", x, x)


def _not_finite(b, x):  # inf or NaN
    return b.fcmp_unordered("uge", _fabs(b, x), _k(x, float("inf")))


def _select2(b, cond, x, y) -> tuple:
    return b.select(cond, x[0], y[0]), b.select(cond, x[1], y[1])


def mul(b, x, y) -> tuple:
    """The textbook product with one fused multiply-add per part (NumPy's SIMD loops on
    FMA hardware: the same special values, e.g. ``(1e300+1e300j)**2 = -inf+infj``)."""
    (a, c), (d, e) = x, y
    return _fma(b, a, d, b.fneg(b.fmul(c, e))), _fma(b, a, e, b.fmul(c, d))


def div(b, x, y) -> tuple:
    """NumPy's quotient: Smith's algorithm (scaled by the larger part of the divisor: no
    spurious overflow); a zero divisor gives ``(a/0, c/0)`` (complex inf or NaN)."""
    (a, c), (d, e) = x, y
    abs_d, abs_e = _fabs(b, d), _fabs(b, e)
    one = _k(a, 1.0)
    big_d = b.fcmp_ordered(">=", abs_d, abs_e)
    # |d| >= |e|: r = e/d, s = 1/(d + e r) ; else r = d/e, s = 1/(d r + e)
    r1 = b.fdiv(e, d)
    s1 = b.fdiv(one, b.fadd(d, b.fmul(e, r1)))
    q1 = b.fmul(b.fadd(a, b.fmul(c, r1)), s1), b.fmul(b.fsub(c, b.fmul(a, r1)), s1)
    r2 = b.fdiv(d, e)
    s2 = b.fdiv(one, b.fadd(b.fmul(d, r2), e))
    q2 = b.fmul(b.fadd(b.fmul(a, r2), c), s2), b.fmul(b.fsub(b.fmul(c, r2), a), s2)
    zero = b.and_(_is_zero(b, d), _is_zero(b, e))
    q1 = _select2(b, zero, (b.fdiv(a, abs_d), b.fdiv(c, abs_d)), q1)
    return _select2(b, big_d, q1, q2)


def absolute(b, z):
    return _f(b, "hypot", z[0], z[1])


def _exp_times(b, x, f):
    """``exp(x) * f`` without overflow in ``exp(x)`` where the product is finite (``x`` up
    to twice exp's overflow threshold: ``(f * exp(x/2)) * exp(x/2)``)."""
    big = b.fcmp_ordered(">", x, _k(x, 700.0))
    h = _f(b, "exp", b.select(big, b.fmul(x, _k(x, 0.5)), x))
    fh = b.fmul(f, h)
    return b.select(big, b.fmul(fh, h), fh)


def exp(b, z) -> tuple:
    x, y = z
    re = _exp_times(b, x, _f(b, "cos", y))
    im = _exp_times(b, x, _f(b, "sin", y))
    im = b.select(_is_zero(b, y), y, im)  # exp(x ± i0) = exp(x) ± i0, x inf or NaN too
    # exp(±inf + i inf or NaN): inf + i NaN, 0 ± i0
    pos = b.fcmp_ordered(">", x, _k(x, 0.0))
    edge = b.and_(_is_inf(b, x), _not_finite(b, y))
    at_edge = (b.select(pos, x, _k(x, 0.0)), b.select(pos, b.fsub(y, y), _copysign(b, _k(x, 0.0), y)))
    return _select2(b, edge, at_edge, (re, im))


def _log_modulus(b, x, y):
    """``log |x + iy|``; near the unit circle as ``log1p(|z|^2 - 1) / 2`` with ``|z|^2 - 1``
    summed exactly from its parts (fused multiply-add remainders); parts beyond 2^±1000
    scaled first."""
    ax, ay = _fabs(b, x), _fabs(b, y)
    larger = b.fcmp_ordered(">=", ax, ay)
    big, small = b.select(larger, ax, ay), b.select(larger, ay, ax)  # NaN: lands in both paths
    a = b.fsub(big, _k(x, 1.0))  # exact for big in [0.5, 2]
    p, q = b.fmul(a, a), b.fmul(small, small)
    pe, qe = _fma(b, a, a, b.fneg(p)), _fma(b, small, small, b.fneg(q))
    t = b.fadd(b.fadd(b.fadd(b.fadd(a, a), q), p), b.fadd(pe, qe))
    near = b.and_(b.fcmp_ordered(">=", big, _k(x, 0.5)), b.fcmp_ordered("<=", big, _k(x, 2.0)))
    huge = b.fcmp_ordered(">", big, _k(x, 2.0 ** 1000))
    tiny = b.fcmp_ordered("<", big, _k(x, 2.0 ** -1000))  # subnormal parts: scaled by 2^54
    s = b.select(huge, _k(x, 0.5), b.select(tiny, _k(x, 2.0 ** 54), _k(x, 1.0)))
    shift = b.select(huge, _k(x, np.log(2.0)), b.select(tiny, _k(x, -54 * np.log(2.0)), _k(x, 0.0)))
    far = b.fadd(_f(b, "log", _f(b, "hypot", b.fmul(x, s), b.fmul(y, s))), shift)
    return b.select(near, b.fmul(_f(b, "log1p", t), _k(x, 0.5)), far)


def log(b, z) -> tuple:
    return _log_modulus(b, z[0], z[1]), _f(b, "arctan2", z[1], z[0])


def sqrt(b, z) -> tuple:
    """Principal square root: ``t = sqrt((|z| + |re|) / 2)``; the result's parts from ``t``.
    Parts beyond 2^±1000 are scaled by 4^∓k first; an infinite imaginary part gives
    ``inf + i im`` (C99 Annex G)."""
    x, y = z
    ty = x.type
    m = _intr(b, "maxnum", [_fabs(b, x), _fabs(b, y)], ty)
    huge = b.fcmp_ordered(">", m, ir.Constant(ty, 2.0 ** 1000))
    tiny = b.fcmp_ordered("<", m, ir.Constant(ty, 2.0 ** -1000))
    s_in = b.select(huge, ir.Constant(ty, 0.25), b.select(tiny, ir.Constant(ty, 2.0 ** 200),
                                                           ir.Constant(ty, 1.0)))
    s_out = b.select(huge, ir.Constant(ty, 2.0), b.select(tiny, ir.Constant(ty, 2.0 ** -100),
                                                           ir.Constant(ty, 1.0)))
    xs, ys = b.fmul(x, s_in), b.fmul(y, s_in)
    half, zero = ir.Constant(ty, 0.5), ir.Constant(ty, 0.0)
    t = _intr(b, "sqrt", [b.fmul(b.fadd(absolute(b, (xs, ys)), _fabs(b, xs)), half)], ty)
    pos = b.fcmp_ordered(">=", x, zero)
    two_t = b.fmul(t, ir.Constant(ty, 2.0))
    zero_t = _is_zero(b, t)
    other = b.select(zero_t, zero, b.fdiv(_fabs(b, ys), two_t))
    out_re = b.fmul(b.select(pos, t, other), s_out)
    out_im = b.fmul(b.select(pos, b.select(zero_t, y, b.fdiv(ys, two_t)), _copysign(b, t, y)), s_out)
    inf_y = b.fcmp_ordered("==", _fabs(b, y), ir.Constant(ty, float("inf")))
    return b.select(inf_y, ir.Constant(ty, float("inf")), out_re), b.select(inf_y, y, out_im)


def _i_times(b, z) -> tuple:
    return b.fneg(z[1]), z[0]


def _times_minus_i(b, z) -> tuple:
    return z[1], b.fneg(z[0])


def _cosh_sinh_times(b, x, f, g) -> tuple:
    """``(cosh(x) * f, sinh(x) * g)``, finite where the products are (``exp(|x|/2)``
    factors past cosh's overflow threshold)."""
    ax = _fabs(b, x)
    big = b.fcmp_ordered(">", ax, _k(x, 700.0))
    h = _f(b, "exp", b.select(big, b.fmul(ax, _k(x, 0.5)), _k(x, 0.0)))
    hh = b.fmul(h, _k(x, 0.5))
    ch = b.select(big, b.fmul(b.fmul(f, h), hh), b.fmul(_f(b, "cosh", x), f))
    sh = b.select(big, b.fmul(b.fmul(g, h), _copysign(b, hh, x)), b.fmul(_f(b, "sinh", x), g))
    return ch, sh


def sinh(b, z) -> tuple:
    x, y = z
    im, re = _cosh_sinh_times(b, x, _f(b, "sin", y), _f(b, "cos", y))
    # sinh(±0 + i inf or NaN) = ±0 + i NaN, sinh(±inf + i inf or NaN) = inf + i NaN
    bad_y = _not_finite(b, y)
    re = b.select(b.and_(bad_y, _is_zero(b, x)), x, re)
    re = b.select(b.and_(bad_y, _is_inf(b, x)), _fabs(b, x), re)
    return re, b.select(_is_zero(b, y), y, im)  # sinh(x ± i0) = sinh(x) ± i0


def cosh(b, z) -> tuple:
    x, y = z
    re, im = _cosh_sinh_times(b, x, _f(b, "cos", y), _f(b, "sin", y))
    zero_im = b.select(_is_nan(b, x), y, b.fmul(y, _copysign(b, _k(x, 1.0), x)))  # sign(x) * ±0
    # cosh(±inf + i inf or NaN) = inf + i NaN, cosh(±0 + i inf or NaN) = NaN + i0
    bad_y = _not_finite(b, y)
    re = b.select(b.and_(bad_y, _is_inf(b, x)), _fabs(b, x), re)
    im = b.select(b.and_(bad_y, _is_zero(b, x)), _k(x, 0.0), im)
    return re, b.select(_is_zero(b, y), zero_im, im)


def sin(b, z) -> tuple:
    return _times_minus_i(b, sinh(b, _i_times(b, z)))  # sin z = -i sinh(iz)


def cos(b, z) -> tuple:
    return cosh(b, _i_times(b, z))  # cos z = cosh(iz)


def tanh(b, z) -> tuple:
    """``(sinh x cosh x + i sin y cos y) / (sinh^2 x + cos^2 y)`` (no cancellation near the
    poles); for ``|x| > 22``, where ``tanh x`` rounds to ±1, the imaginary part is
    ``4 sin y cos y exp(-2|x|)``."""
    x, y = z
    s, c, sn = _f(b, "sinh", x), _f(b, "cos", y), _f(b, "sin", y)
    den = b.fadd(b.fmul(s, s), b.fmul(c, c))
    out_re = b.fdiv(b.fmul(s, _f(b, "cosh", x)), den)
    sc = b.fmul(sn, c)
    out_im = b.fdiv(sc, den)
    ax = _fabs(b, x)
    big = b.fcmp_ordered(">", ax, _k(x, 22.0))
    out_re = b.select(big, _copysign(b, _k(x, 1.0), x), out_re)
    far = b.fmul(b.fmul(sc, _k(x, 4.0)), _f(b, "exp", b.fmul(ax, _k(x, -2.0))))
    out_im = b.select(big, far, out_im)
    # y inf or NaN: ±1 + i0 (sign of y) for infinite x, ±0 + i NaN for x = ±0, else NaN
    bad_y, inf_x, nan = _not_finite(b, y), _is_inf(b, x), _k(x, float("nan"))
    out_re = b.select(bad_y, b.select(inf_x, _copysign(b, _k(x, 1.0), x),
                                      b.select(_is_zero(b, x), x, nan)), out_re)
    out_im = b.select(bad_y, b.select(inf_x, _copysign(b, _k(x, 0.0), y), nan), out_im)
    return out_re, b.select(_is_zero(b, y), y, out_im)


def tan(b, z) -> tuple:
    return _times_minus_i(b, tanh(b, _i_times(b, z)))  # tan z = -i tanh(iz)


def _asin_acos(b, x, y) -> tuple:
    """``(Re asin(x+iy), Re acos(x+iy), |Im asin(x+iy)|)`` for ``x, y >= 0``: Hull, Fairgrieve
    and Tang's algorithm (ACM TOMS 23, 1997), with ``asin z = z`` below 2^-27 and
    ``-i log(2iz)`` above 2^64."""
    one, half = _k(x, 1.0), _k(x, 0.5)
    r = _f(b, "hypot", b.fadd(x, one), y)
    s = _f(b, "hypot", b.fsub(x, one), y)
    a = b.fmul(b.fadd(r, s), half)
    apx = b.fadd(a, x)
    yy = b.fmul(y, y)
    rx1 = b.fadd(r, b.fadd(x, one))
    le1 = b.fcmp_ordered("<=", x, one)
    d_le = _intr(b, "sqrt", [b.fmul(b.fmul(apx, half), b.fadd(b.fdiv(yy, rx1), b.fadd(s, b.fsub(one, x))))],
                 x.type)
    d_gt = b.fmul(y, _intr(b, "sqrt", [b.fmul(half, b.fadd(b.fdiv(apx, rx1),
                                                           b.fdiv(apx, b.fadd(s, b.fsub(x, one)))))],
                           x.type))
    d = b.select(le1, d_le, d_gt)
    bq = b.fdiv(x, a)
    small_b = b.fcmp_ordered("<=", bq, _k(x, 0.6417))
    re_asin = b.select(small_b, _f(b, "arcsin", bq), _f(b, "arctan2", x, d))
    re_acos = b.select(small_b, _f(b, "arccos", bq), _f(b, "arctan2", d, x))
    lt1 = b.fcmp_ordered("<", x, one)
    am2 = b.fadd(b.fdiv(yy, rx1), b.select(lt1, b.fdiv(yy, b.fadd(s, b.fsub(one, x))),
                                           b.fadd(s, b.fsub(x, one))))  # 2 (A - 1)
    root = _intr(b, "sqrt", [b.fmul(b.fmul(am2, b.fadd(a, one)), half)], x.type)
    im_near = _f(b, "log1p", b.fadd(b.fmul(am2, half), root))
    im_far = _f(b, "log", b.fadd(a, _intr(b, "sqrt", [b.fsub(b.fmul(a, a), one)], x.type)))
    im = b.select(b.fcmp_ordered("<=", a, _k(x, 1.5)), im_near, im_far)
    tiny = b.and_(b.fcmp_ordered("<", x, _k(x, 2.0 ** -27)), b.fcmp_ordered("<", y, _k(x, 2.0 ** -27)))
    huge = b.fcmp_ordered(">", _intr(b, "maxnum", [x, y], x.type), _k(x, 2.0 ** 64))
    log2z = b.fadd(_log_modulus(b, x, y), _k(x, np.log(2.0)))
    re_asin = b.select(tiny, x, b.select(huge, _f(b, "arctan2", x, y), re_asin))
    re_acos = b.select(tiny, b.fsub(_k(x, np.pi / 2), x), b.select(huge, _f(b, "arctan2", y, x), re_acos))
    im = b.select(tiny, y, b.select(huge, log2z, im))
    zero_nan = b.and_(_is_zero(b, x), _is_nan(b, y))  # asin(±0 + i NaN) = ±0 + i NaN
    re_asin = b.select(zero_nan, x, re_asin)
    re_acos = b.select(zero_nan, _k(x, np.pi / 2), re_acos)
    return re_asin, re_acos, im


def _acos_re(b, rc, x):
    """Re acos(x + iy) from Re acos(|x| + iy): ``pi - ...`` for negative ``x``."""
    neg = b.fcmp_ordered("<", _copysign(b, _k(x, 1.0), x), _k(x, 0.0))
    return b.select(neg, b.fsub(_k(x, np.pi), rc), rc)


def arcsin(b, z) -> tuple:
    x, y = z
    ra, _, im = _asin_acos(b, _fabs(b, x), _fabs(b, y))
    return _copysign(b, ra, x), _copysign(b, im, y)


def arccos(b, z) -> tuple:
    x, y = z
    _, rc, im = _asin_acos(b, _fabs(b, x), _fabs(b, y))
    return _acos_re(b, rc, x), _copysign(b, im, b.fneg(y))


def arcsinh(b, z) -> tuple:
    # asinh(x + iy) = Im asin(y + ix) + i Re asin(y + ix)
    x, y = z
    ra, _, im = _asin_acos(b, _fabs(b, y), _fabs(b, x))
    return _copysign(b, im, x), _copysign(b, ra, y)


def arccosh(b, z) -> tuple:
    # acosh z = ±i acos z, the sign making the real part >= 0
    x, y = z
    _, rc, im = _asin_acos(b, _fabs(b, x), _fabs(b, y))
    return im, _copysign(b, _acos_re(b, rc, x), y)


def arctanh(b, z) -> tuple:
    """``atanh(x+iy) = log1p(4x / ((1-x)^2 + y^2)) / 4 + i atan2(2y, (1-x)(1+x) - y^2) / 2``;
    beyond 2^60, ``1/z ± i pi/2``; next to ±1 the real part from two logarithms."""
    x, y = z
    ax, ay = _fabs(b, x), _fabs(b, y)
    one = _k(x, 1.0)
    omx = b.fsub(one, ax)
    den_q = b.fadd(b.fmul(omx, omx), b.fmul(ay, ay))
    re = b.fmul(_f(b, "log1p", b.fdiv(b.fmul(ax, _k(x, 4.0)), den_q)), _k(x, 0.25))
    # next to ±1, where den_q underflows: (log|1 + z| - log|1 - z|) / 2
    near = b.fcmp_ordered("<", den_q, _k(x, 2.0 ** -900))
    re = b.select(near, b.fmul(b.fsub(_log_modulus(b, b.fadd(one, ax), ay),
                                      _log_modulus(b, omx, ay)), _k(x, 0.5)), re)
    den = b.fsub(b.fmul(omx, b.fadd(one, ax)), b.fmul(ay, ay))
    im = b.fmul(_f(b, "arctan2", b.fmul(y, _k(x, 2.0)), den), _k(x, 0.5))
    huge = b.fcmp_ordered(">", _intr(b, "maxnum", [ax, ay], x.type), _k(x, 2.0 ** 60))
    h = _f(b, "hypot", ax, ay)
    far_re = b.select(_is_inf(b, h), _k(x, 0.0), b.fdiv(b.fdiv(ax, h), h))
    re = b.select(huge, far_re, re)
    nan_in = b.and_(b.fcmp_unordered("uno", x, y), b.not_(_is_inf(b, y)))  # but NaN ± i inf
    far_im = b.select(nan_in, _k(x, float("nan")), _copysign(b, _k(x, np.pi / 2), y))
    im = b.select(huge, far_im, im)
    re = b.select(_is_zero(b, ax), ax, re)  # atanh(±0 + iy) = ±0 + i atan(y), y NaN too
    return _copysign(b, re, x), im


def arctan(b, z) -> tuple:
    return _times_minus_i(b, arctanh(b, _i_times(b, z)))  # atan z = -i atanh(iz)


def expm1(b, z) -> tuple:
    """NumPy's ``(expm1(x) cos y - 2 sin^2(y/2)) + i exp(x) sin y`` for finite ``z``; for an
    infinite or NaN part, ``exp(z) - 1``: the Array API's special cases (``expm1(inf + 0j)
    = inf + 0j``, ``expm1(-inf + i y) = -1 + 0j``, ...), where NumPy's formula gives NaN."""
    x, y = z
    h = _f(b, "sin", b.fmul(y, _k(y, 0.5)))
    re = b.fsub(b.fmul(_f(b, "expm1", x), _f(b, "cos", y)), b.fmul(b.fmul(h, h), _k(y, 2.0)))
    re = b.fadd(re, _k(x, 0.0))  # expm1(-0 + 0j) = +0 + 0j (the Array API; NumPy gives -0)
    im = b.fmul(_f(b, "exp", x), _f(b, "sin", y))
    inf = _k(x, float("inf"))
    finite = b.and_(b.fcmp_ordered("<", _intr(b, "fabs", [x], x.type), inf),
                    b.fcmp_ordered("<", _intr(b, "fabs", [y], y.type), inf))
    e = exp(b, z)
    return _select2(b, finite, (re, im), (b.fsub(e[0], _k(x, 1.0)), e[1]))


def _add(b, x, y) -> tuple:
    return b.fadd(x[0], y[0]), b.fadd(x[1], y[1])


def _sub(b, x, y) -> tuple:
    return b.fsub(x[0], y[0]), b.fsub(x[1], y[1])


def power(b, x, y) -> tuple:
    """NumPy's ``x ** y``: 1 for ``y == 0``; for ``x == 0``, 0 if ``Re y > 0``, NaN otherwise;
    ``x`` for ``y == 1``; else ``exp(y log x)``."""
    zero, one, nan = _k(x[0], 0.0), _k(x[0], 1.0), _k(x[0], float("nan"))
    r = exp(b, mul(b, y, log(b, x)))
    real_y = _is_zero(b, y[1])
    x_zero = b.and_(_is_zero(b, x[0]), _is_zero(b, x[1]))
    at_zero = b.select(b.fcmp_ordered(">", y[0], zero), zero, nan)
    r = _select2(b, b.and_(real_y, b.fcmp_ordered("==", y[0], one)), x, r)
    r = _select2(b, x_zero, (at_zero, at_zero), r)
    return _select2(b, b.and_(real_y, _is_zero(b, y[0])), (one, zero), r)


def _reciprocal(b, z) -> tuple:
    """NumPy's ``1/z``: ``r = im/re, d = re + im r, (1/d, -r/d)`` (parts swapped when
    ``|im| > |re|``)."""
    x, y = z
    one = _k(x, 1.0)
    le = b.fcmp_ordered("<=", _fabs(b, y), _fabs(b, x))
    r1 = b.fdiv(y, x)
    d1 = b.fadd(x, b.fmul(y, r1))
    r2 = b.fdiv(x, y)
    d2 = b.fadd(b.fmul(x, r2), y)
    return _select2(b, le, (b.fdiv(one, d1), b.fdiv(b.fneg(r1), d1)),
                    (b.fdiv(r2, d2), b.fdiv(b.fneg(one), d2)))


def _sign(b, z) -> tuple:
    """NumPy 2's ``z / |z|``: ``+0`` for zero; with ``|z| = inf``, ``±1`` along an infinite
    part (NaN if both are), else ``±1j`` (``|z|`` overflowed: the imaginary part's sign)."""
    x, y = z
    zero = _k(x, 0.0)
    m = absolute(b, z)
    safe = b.select(_is_zero(b, m), _k(x, 1.0), m)
    out = _select2(b, _is_zero(b, m), (zero, zero), (b.fdiv(x, safe), b.fdiv(y, safe)))
    inf_x, inf_y = _is_inf(b, x), _is_inf(b, y)
    one_x, one_y = _copysign(b, _k(x, 1.0), x), _copysign(b, _k(x, 1.0), y)
    nan = _k(x, float("nan"))
    at_inf = _select2(b, b.and_(inf_x, inf_y), (nan, nan),
                      _select2(b, inf_x, (one_x, zero), (zero, one_y)))
    return _select2(b, _is_inf(b, m), at_inf, out)


def _log1p(b, z) -> tuple:  # NumPy's log(1 + z)
    return log(b, (b.fadd(z[0], _k(z[0], 1.0)), z[1]))


def _scaled_log(k: float):
    def fn(b, z) -> tuple:
        w = log(b, z)
        return b.fmul(w[0], _k(w[0], k)), b.fmul(w[1], _k(w[1], k))
    return fn


def _exp2(b, z) -> tuple:  # NumPy's exp(z ln 2)
    ln2 = _k(z[0], np.log(2.0))
    return exp(b, (b.fmul(z[0], ln2), b.fmul(z[1], ln2)))


# the complex-valued primitives past add/subtract; complex64 ones are evaluated on double
# parts and rounded once (no overflow or loss in intermediate float values)
_FUNCS = {"exp": exp, "log": log, "sqrt": sqrt, "sin": sin, "cos": cos, "tan": tan,
          "sinh": sinh, "cosh": cosh, "tanh": tanh, "arcsin": arcsin, "arccos": arccos,
          "arctan": arctan, "arcsinh": arcsinh, "arccosh": arccosh, "arctanh": arctanh,
          "expm1": expm1, "log1p": _log1p, "log2": _scaled_log(1.0 / np.log(2.0)),
          "log10": _scaled_log(1.0 / np.log(10.0)), "exp2": _exp2, "power": power,
          "multiply": mul, "divide": div, "square": lambda b, z: mul(b, z, z),
          "reciprocal": _reciprocal, "sign": _sign}


def _on_doubles(b, fn, args: list) -> tuple:
    dbl, flt = ir.DoubleType(), ir.FloatType()
    out = fn(b, *[(b.fpext(re, dbl), b.fpext(im, dbl)) for re, im in args])
    return b.fptrunc(out[0], flt), b.fptrunc(out[1], flt)


def lower(b: ir.IRBuilder, prim: str, args: list, dts: list, out: np.dtype):
    """The IR of elementwise primitive ``prim`` with complex operands or result."""
    if prim == "convert":
        return convert(b, args[0], dts[0], out)
    if prim in ("add", "subtract"):
        return (_add if prim == "add" else _sub)(b, args[0], args[1])
    if prim in _FUNCS:
        if out == np.complex64:
            return _on_doubles(b, _FUNCS[prim], args)
        return _FUNCS[prim](b, *args)
    if prim in ("positive", "wrt", "stop_gradient"):
        return args[0]
    if prim == "negative":
        return b.fneg(args[0][0]), b.fneg(args[0][1])
    if prim == "conj":
        return args[0][0], b.fneg(args[0][1])
    if prim == "rint":  # round(): each part to the nearest integer, ties to even (NumPy)
        ty = args[0][0].type
        return _intr(b, "rint", [args[0][0]], ty), _intr(b, "rint", [args[0][1]], ty)
    if prim == "abs":
        return absolute(b, args[0])
    if prim == "complex":  # parts already of the part type: exact, whatever their values
        return args[0], args[1]
    if prim == "real":
        return args[0][0]
    if prim == "imag":
        return args[0][1]
    if prim == "angle":
        return _f(b, "arctan2", args[0][1], args[0][0])
    if prim in ("equal", "not_equal"):
        (a, c), (d, e) = args
        same = b.and_(b.fcmp_ordered("==", a, d), b.fcmp_ordered("==", c, e))
        return same if prim == "equal" else b.not_(same)
    if prim == "isnan":
        z = args[0]
        return b.or_(b.fcmp_unordered("uno", z[0], z[0]), b.fcmp_unordered("uno", z[1], z[1]))
    if prim in ("isinf", "isfinite"):
        z = args[0]
        ty = z[0].type
        inf = ir.Constant(ty, float("inf"))
        a0, a1 = _intr(b, "fabs", [z[0]], ty), _intr(b, "fabs", [z[1]], ty)
        if prim == "isinf":
            return b.or_(b.fcmp_ordered("==", a0, inf), b.fcmp_ordered("==", a1, inf))
        return b.and_(b.fcmp_ordered("<", a0, inf), b.fcmp_ordered("<", a1, inf))
    if prim in ("logical_and", "logical_or", "logical_xor", "logical_not"):
        vs = [truthy(b, v) if is_complex(dt) else v for v, dt in zip(args, dts)]
        if prim == "logical_not":
            return b.not_(vs[0])
        return {"logical_and": b.and_, "logical_or": b.or_, "logical_xor": b.xor}[prim](*vs)
    if prim == "select":
        c, x, y = args
        return b.select(c, x[0], y[0]), b.select(c, x[1], y[1])
    raise NotImplementedError(f"qtrace: primitive {prim!r} is not defined for complex dtypes")


def truthy(b, z):
    ty = z[0].type
    zero = ir.Constant(ty, 0.0)
    return b.or_(b.fcmp_unordered("!=", z[0], zero), b.fcmp_unordered("!=", z[1], zero))


def convert(b, x, src: np.dtype, dst: np.dtype):
    """Casts to and from complex (NumPy's: a real becomes ``(x, 0)``, a complex keeps its real part)."""
    from .scalar import convert as real_convert
    if is_complex(src) and is_complex(dst):
        pt = part_dtype(src)
        return (real_convert(b, x[0], pt, part_dtype(dst)), real_convert(b, x[1], pt, part_dtype(dst)))
    if is_complex(dst):
        pt = part_dtype(dst)
        return real_convert(b, x, src, pt), ir.Constant(part_type(dst), 0.0)
    if dst.kind == "b":
        return truthy(b, x)
    return real_convert(b, x[0], part_dtype(src), dst)
