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


def mul(b, x, y) -> tuple:
    (a, c), (d, e) = x, y
    return b.fsub(b.fmul(a, d), b.fmul(c, e)), b.fadd(b.fmul(a, e), b.fmul(c, d))


def div(b, x, y) -> tuple:
    """Smith's algorithm (scales by the larger part of the divisor: no spurious overflow)."""
    (a, c), (d, e) = x, y
    ty = a.type
    abs_d = _intr(b, "fabs", [d], ty)
    abs_e = _intr(b, "fabs", [e], ty)
    big_d = b.fcmp_ordered(">=", abs_d, abs_e)
    # |d| >= |e|: r = e/d, t = d + e*r ; else r = d/e, t = d*r + e
    r1 = b.fdiv(e, d)
    t1 = b.fadd(d, b.fmul(e, r1))
    re1 = b.fdiv(b.fadd(a, b.fmul(c, r1)), t1)
    im1 = b.fdiv(b.fsub(c, b.fmul(a, r1)), t1)
    r2 = b.fdiv(d, e)
    t2 = b.fadd(b.fmul(d, r2), e)
    re2 = b.fdiv(b.fadd(b.fmul(a, r2), c), t2)
    im2 = b.fdiv(b.fsub(b.fmul(c, r2), a), t2)
    return b.select(big_d, re1, re2), b.select(big_d, im1, im2)


def absolute(b, z):
    return _f(b, "hypot", z[0], z[1])


def exp(b, z) -> tuple:
    scale = _f(b, "exp", z[0])
    return b.fmul(scale, _f(b, "cos", z[1])), b.fmul(scale, _f(b, "sin", z[1]))


def log(b, z) -> tuple:
    return _f(b, "log", absolute(b, z)), _f(b, "arctan2", z[1], z[0])


def sqrt(b, z) -> tuple:
    """Principal square root: ``t = sqrt((|z| + |re|) / 2)``; the result's parts from ``t``."""
    re, im = z
    ty = re.type
    half, zero = ir.Constant(ty, 0.5), ir.Constant(ty, 0.0)
    t = _intr(b, "sqrt", [b.fmul(b.fadd(absolute(b, z), _intr(b, "fabs", [re], ty)), half)], ty)
    pos = b.fcmp_ordered(">=", re, zero)
    other = b.fdiv(_intr(b, "fabs", [im], ty), b.fmul(t, ir.Constant(ty, 2.0)))
    zero_t = b.fcmp_ordered("==", t, zero)
    other = b.select(zero_t, zero, other)
    out_re = b.select(pos, t, other)
    out_im = b.select(pos, b.select(zero_t, zero, b.fdiv(im, b.fmul(t, ir.Constant(ty, 2.0)))),
                      _intr(b, "copysign", [t, im], ty))
    return out_re, out_im


def _i_times(b, z) -> tuple:
    return b.fneg(z[1]), z[0]


def sin(b, z) -> tuple:
    re, im = z
    return (b.fmul(_f(b, "sin", re), _f(b, "cosh", im)), b.fmul(_f(b, "cos", re), _f(b, "sinh", im)))


def cos(b, z) -> tuple:
    re, im = z
    return (b.fmul(_f(b, "cos", re), _f(b, "cosh", im)),
            b.fneg(b.fmul(_f(b, "sin", re), _f(b, "sinh", im))))


def sinh(b, z) -> tuple:
    re, im = z
    return (b.fmul(_f(b, "sinh", re), _f(b, "cos", im)), b.fmul(_f(b, "cosh", re), _f(b, "sin", im)))


def cosh(b, z) -> tuple:
    re, im = z
    return (b.fmul(_f(b, "cosh", re), _f(b, "cos", im)), b.fmul(_f(b, "sinh", re), _f(b, "sin", im)))


def tanh(b, z) -> tuple:
    """``(sinh 2x + i sin 2y) / (cosh 2x + cos 2y)``, saturating to ±1 for large |x|."""
    re, im = z
    ty = re.type
    two = ir.Constant(ty, 2.0)
    x2, y2 = b.fmul(re, two), b.fmul(im, two)
    den = b.fadd(_f(b, "cosh", x2), _f(b, "cos", y2))
    out_re = b.fdiv(_f(b, "sinh", x2), den)
    out_im = b.fdiv(_f(b, "sin", y2), den)
    limit = ir.Constant(ty, 20.0 if ty == ir.FloatType() else 355.0)  # cosh overflows past it
    big = b.fcmp_ordered(">", _intr(b, "fabs", [re], ty), limit)
    out_re = b.select(big, _intr(b, "copysign", [ir.Constant(ty, 1.0), re], ty), out_re)
    out_im = b.select(big, _intr(b, "copysign", [ir.Constant(ty, 0.0), im], ty), out_im)
    return out_re, out_im


def tan(b, z) -> tuple:
    # tan z = -i tanh(i z)
    t = tanh(b, _i_times(b, z))
    return t[1], b.fneg(t[0])


def _one_minus_square(b, z) -> tuple:
    re, im = z
    one = ir.Constant(re.type, 1.0)
    sq = mul(b, z, z)
    return b.fsub(one, sq[0]), b.fneg(sq[1])


def arcsin(b, z) -> tuple:
    # asin z = -i log(i z + sqrt(1 - z^2))
    w = log(b, _add(b, _i_times(b, z), sqrt(b, _one_minus_square(b, z))))
    return w[1], b.fneg(w[0])


def arccos(b, z) -> tuple:
    # acos z = pi/2 - asin z
    s = arcsin(b, z)
    return b.fsub(ir.Constant(s[0].type, np.pi / 2), s[0]), b.fneg(s[1])


def arctan(b, z) -> tuple:
    # atan z = i/2 (log(1 - i z) - log(1 + i z))
    iz = _i_times(b, z)
    one = ir.Constant(z[0].type, 1.0)
    a = log(b, (b.fsub(one, iz[0]), b.fneg(iz[1])))
    c = log(b, (b.fadd(one, iz[0]), iz[1]))
    d = _sub(b, a, c)
    half = ir.Constant(z[0].type, 0.5)
    return b.fmul(b.fneg(d[1]), half), b.fmul(d[0], half)


def arcsinh(b, z) -> tuple:
    # asinh z = -i asin(i z)
    s = arcsin(b, _i_times(b, z))
    return s[1], b.fneg(s[0])


def arccosh(b, z) -> tuple:
    # acosh z = log(z + sqrt(z + 1) sqrt(z - 1))
    one = ir.Constant(z[0].type, 1.0)
    p = sqrt(b, (b.fadd(z[0], one), z[1]))
    m = sqrt(b, (b.fsub(z[0], one), z[1]))
    return log(b, _add(b, z, mul(b, p, m)))


def arctanh(b, z) -> tuple:
    # atanh z = -i atan(i z)
    t = arctan(b, _i_times(b, z))
    return t[1], b.fneg(t[0])


def _add(b, x, y) -> tuple:
    return b.fadd(x[0], y[0]), b.fadd(x[1], y[1])


def _sub(b, x, y) -> tuple:
    return b.fsub(x[0], y[0]), b.fsub(x[1], y[1])


def power(b, x, y) -> tuple:
    """``x ** y = exp(y log x)``, with ``0 ** y`` = 0 for ``re(y) > 0`` and 1 for ``y == 0``."""
    ty = x[0].type
    zero, one = ir.Constant(ty, 0.0), ir.Constant(ty, 1.0)
    r = exp(b, mul(b, y, log(b, x)))
    x_zero = b.and_(b.fcmp_ordered("==", x[0], zero), b.fcmp_ordered("==", x[1], zero))
    y_zero = b.and_(b.fcmp_ordered("==", y[0], zero), b.fcmp_ordered("==", y[1], zero))
    re = b.select(y_zero, one, b.select(x_zero, zero, r[0]))
    im = b.select(y_zero, zero, b.select(x_zero, zero, r[1]))
    return re, im


_UNARY = {"exp": exp, "log": log, "sqrt": sqrt, "sin": sin, "cos": cos, "tan": tan, "sinh": sinh,
          "cosh": cosh, "tanh": tanh, "arcsin": arcsin, "arccos": arccos, "arctan": arctan,
          "arcsinh": arcsinh, "arccosh": arccosh, "arctanh": arctanh}


def lower(b: ir.IRBuilder, prim: str, args: list, dts: list, out: np.dtype):
    """The IR of elementwise primitive ``prim`` with complex operands or result."""
    if prim == "convert":
        return convert(b, args[0], dts[0], out)
    if prim in ("add", "subtract"):
        return (_add if prim == "add" else _sub)(b, args[0], args[1])
    if prim == "multiply":
        return mul(b, args[0], args[1])
    if prim == "divide":
        return div(b, args[0], args[1])
    if prim in ("positive", "wrt"):
        return args[0]
    if prim == "negative":
        return b.fneg(args[0][0]), b.fneg(args[0][1])
    if prim == "conj":
        return args[0][0], b.fneg(args[0][1])
    if prim == "square":
        return mul(b, args[0], args[0])
    if prim == "reciprocal":
        ty = args[0][0].type
        return div(b, (ir.Constant(ty, 1.0), ir.Constant(ty, 0.0)), args[0])
    if prim == "abs":
        return absolute(b, args[0])
    if prim == "real":
        return args[0][0]
    if prim == "imag":
        return args[0][1]
    if prim == "angle":
        return _f(b, "arctan2", args[0][1], args[0][0])
    if prim in _UNARY:
        return _UNARY[prim](b, args[0])
    if prim == "expm1":
        e = exp(b, args[0])
        return b.fsub(e[0], ir.Constant(e[0].type, 1.0)), e[1]
    if prim == "log1p":
        one = ir.Constant(args[0][0].type, 1.0)
        return log(b, (b.fadd(args[0][0], one), args[0][1]))
    if prim in ("log2", "log10"):
        w = log(b, args[0])
        k = ir.Constant(w[0].type, 1.0 / np.log(2.0 if prim == "log2" else 10.0))
        return b.fmul(w[0], k), b.fmul(w[1], k)
    if prim == "exp2":
        ln2 = ir.Constant(args[0][0].type, np.log(2.0))
        return exp(b, (b.fmul(args[0][0], ln2), b.fmul(args[0][1], ln2)))
    if prim == "power":
        return power(b, args[0], args[1])
    if prim == "sign":  # NumPy 2: z / |z| (0 for 0)
        z = args[0]
        ty = z[0].type
        m = absolute(b, z)
        zero = b.fcmp_ordered("==", m, ir.Constant(ty, 0.0))
        safe = b.select(zero, ir.Constant(ty, 1.0), m)
        return b.fdiv(z[0], safe), b.fdiv(z[1], safe)
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
