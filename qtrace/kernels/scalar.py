"""Scalar lowering of every elementwise primitive to LLVM IR (one block per primitive).

Each rule takes ``(builder, args, in_dtypes, out_dtype)`` — ``args`` are IR values of
the input dtypes (bool as ``i1``) — and returns an IR value of ``out_dtype``. Integer
semantics follow NumPy exactly where C leaves them undefined (division by zero gives
0, shifts past the width give 0 or -1, ``floor_divide``/``remainder`` round toward
-inf; float ``floor_divide`` with an infinite operand is ``floor(x / y)``, the Array
API's special cases, where NumPy gives NaN), and nothing emits LLVM poison.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from . import complexmath
from . import mathlib_bridge as mathlib
from .intrinsics import intrinsic

I1 = ir.IntType(1)


def ir_type(dtype: np.dtype) -> ir.Type:
    """The register type of ``dtype`` (bool is ``i1``; in memory it is ``i8``)."""
    if dtype.kind == "b":
        return I1
    if dtype.kind in "iu":
        return ir.IntType(dtype.itemsize * 8)
    if dtype == np.float32:
        return ir.FloatType()
    if dtype == np.float64:
        return ir.DoubleType()
    raise TypeError(f"qtrace codegen: unsupported dtype {dtype}")


def const(dtype: np.dtype, value) -> ir.Constant:
    if dtype.kind == "c":
        return complexmath.const(dtype, value)
    ty = ir_type(dtype)
    if dtype.kind == "f":
        return ir.Constant(ty, float(value))
    if dtype.kind == "b":
        return ir.Constant(ty, int(bool(value)))
    return ir.Constant(ty, int(value) & ((1 << (dtype.itemsize * 8)) - 1))


def _intrinsic(b: ir.IRBuilder, name: str, args: list, ty: ir.Type) -> ir.Value:
    return intrinsic(b, name[len("llvm."):], args, [ty])


def _is_signed(dt: np.dtype) -> bool:
    return dt.kind == "i"


def _truthy(b: ir.IRBuilder, v: ir.Value, dt: np.dtype) -> ir.Value:
    if dt.kind == "b":
        return v
    if dt.kind == "f":
        return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
    return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))


RULES: dict = {}


def rule(*names):
    def deco(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return deco


def lower(b: ir.IRBuilder, prim: str, args: list, in_dts: list, out_dt: np.dtype) -> ir.Value:
    if out_dt.kind == "c" or any(dt.kind == "c" for dt in in_dts):
        return complexmath.lower(b, prim, args, in_dts, out_dt)
    try:
        fn = RULES[prim]
    except KeyError:
        raise NotImplementedError(f"qtrace: no lowering rule for primitive {prim!r}") from None
    return fn(b, prim, args, in_dts, out_dt)


@rule("add", "subtract", "multiply")
def _arith(b, prim, args, dts, out):
    x, y = args
    if out.kind == "f":
        return {"add": b.fadd, "subtract": b.fsub, "multiply": b.fmul}[prim](x, y)
    if out.kind == "b":  # NumPy: bool + bool is or, bool * bool is and
        return b.or_(x, y) if prim == "add" else b.and_(x, y)
    return {"add": b.add, "subtract": b.sub, "multiply": b.mul}[prim](x, y)


@rule("divide")
def _divide(b, prim, args, dts, out):
    return b.fdiv(*args)


def _int_divmod(b, x, y, dt):
    """NumPy floor division and remainder of integers, with /0 giving 0 for both."""
    ty = x.type
    zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
    y_zero = b.icmp_unsigned("==", y, zero)
    if not _is_signed(dt):
        safe = b.select(y_zero, one, y)
        return b.select(y_zero, zero, b.udiv(x, safe)), b.select(y_zero, zero, b.urem(x, safe))
    minus_one = ir.Constant(ty, -1)
    overflow = b.and_(b.icmp_signed("==", x, ir.Constant(ty, -(1 << (ty.width - 1)))),
                      b.icmp_signed("==", y, minus_one))
    safe = b.select(b.or_(y_zero, overflow), one, y)
    q = b.sdiv(x, safe)
    r = b.srem(x, safe)
    adjust = b.and_(b.icmp_signed("!=", r, zero),
                    b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", safe, zero)))
    q = b.select(adjust, b.sub(q, one), q)
    r = b.select(adjust, b.add(r, safe), r)
    q = b.select(overflow, x, q)
    return b.select(y_zero, zero, q), b.select(b.or_(y_zero, overflow), zero, r)


def _float_divmod(b, x, y):
    """NumPy's ``npy_divmod`` for floats: (floor quotient, remainder with the divisor's sign)."""
    ty = x.type
    zero = ir.Constant(ty, 0.0)
    m = mathlib.fmod(b, x, y)
    div = b.fdiv(b.fsub(x, m), y)
    fix = b.and_(b.fcmp_ordered("!=", m, zero),
                 b.icmp_unsigned("!=", b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", m, zero)))
    m_fixed = b.select(fix, b.fadd(m, y), m)
    m_zero = _intrinsic(b, "llvm.copysign", [zero, y], ty)
    rem = b.select(b.fcmp_ordered("!=", m, zero), m_fixed, m_zero)
    rem = b.select(b.fcmp_unordered("uno", m, m), m, rem)
    div = b.select(fix, b.fsub(div, ir.Constant(ty, 1.0)), div)
    floordiv = _intrinsic(b, "llvm.floor", [div], ty)
    bump = b.fcmp_ordered(">", b.fsub(div, floordiv), ir.Constant(ty, 0.5))
    floordiv = b.select(bump, b.fadd(floordiv, ir.Constant(ty, 1.0)), floordiv)
    # div == 0: NumPy returns copysign(0, x/y)
    q0 = _intrinsic(b, "llvm.copysign", [zero, b.fdiv(x, y)], ty)
    floordiv = b.select(b.fcmp_ordered("==", div, zero), q0, floordiv)
    y_zero = b.fcmp_ordered("==", y, zero)
    floordiv = b.select(y_zero, b.fdiv(x, y), floordiv)
    return floordiv, rem


@rule("floor_divide")
def _floor_divide(b, prim, args, dts, out):
    if out.kind == "f":
        # an infinite operand: floor(x / y) as the Array API specifies (inf // 2 = inf,
        # -1 // inf = -0), where NumPy's divmod gives NaN and -1
        x, y = args
        ty = x.type
        inf = ir.Constant(ty, float("inf"))
        either_inf = b.or_(b.fcmp_ordered("==", _intrinsic(b, "llvm.fabs", [x], ty), inf),
                           b.fcmp_ordered("==", _intrinsic(b, "llvm.fabs", [y], ty), inf))
        return b.select(either_inf, _intrinsic(b, "llvm.floor", [b.fdiv(x, y)], ty),
                        _float_divmod(b, x, y)[0])
    return _int_divmod(b, *args, out)[0]


@rule("remainder")
def _remainder(b, prim, args, dts, out):
    if out.kind == "f":
        return _float_divmod(b, *args)[1]
    return _int_divmod(b, *args, out)[1]


@rule("power")
def _power(b, prim, args, dts, out):
    x, y = args
    if out.kind == "f":
        return mathlib.call(b, "power", [x, y])
    # exponentiation by squaring, unrolled over the exponent's bits (no branches)
    ty = x.type
    one, zero = ir.Constant(ty, 1), ir.Constant(ty, 0)
    result, base, e = one, x, y
    for _ in range(ty.width if _is_signed(out) else ty.width):
        bit = b.icmp_unsigned("!=", b.and_(e, one), zero)
        result = b.select(bit, b.mul(result, base), result)
        base = b.mul(base, base)
        e = b.lshr(e, one)
    if _is_signed(out):  # negative exponents: 1 for base 1, ±1 for base -1, else 0
        neg = b.icmp_signed("<", y, zero)
        odd = b.icmp_unsigned("!=", b.and_(y, one), zero)
        special = b.select(b.icmp_signed("==", x, one), one,
                           b.select(b.icmp_signed("==", x, ir.Constant(ty, -1)),
                                    b.select(odd, ir.Constant(ty, -1), one), zero))
        result = b.select(neg, special, result)
    return result


@rule("negative")
def _negative(b, prim, args, dts, out):
    (x,) = args
    return b.fneg(x) if out.kind == "f" else b.neg(x)


@rule("positive", "wrt", "stop_gradient", "conj")
def _positive(b, prim, args, dts, out):
    return args[0]


@rule("abs")
def _abs(b, prim, args, dts, out):
    (x,) = args
    if out.kind == "f":
        return _intrinsic(b, "llvm.fabs", [x], x.type)
    if out.kind in "ub":
        return x
    return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)


@rule("sqrt")
def _sqrt(b, prim, args, dts, out):
    return _intrinsic(b, "llvm.sqrt", args, args[0].type)


@rule("square")
def _square(b, prim, args, dts, out):
    (x,) = args
    if out.kind == "f":
        return b.fmul(x, x)
    return b.and_(x, x) if out.kind == "b" else b.mul(x, x)


@rule("reciprocal")
def _reciprocal(b, prim, args, dts, out):
    (x,) = args
    if out.kind == "f":
        return b.fdiv(ir.Constant(x.type, 1.0), x)
    # C integer division 1 / x (truncating), as NumPy computes it; 1 / 0 gives 0 here
    zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
    is_zero = b.icmp_unsigned("==", x, zero)
    safe = b.select(is_zero, one, x)
    q = b.sdiv(one, safe) if out.kind == "i" else b.udiv(one, safe)
    return b.select(is_zero, zero, q)


@rule("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
      "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh",
      "arccosh", "arctanh", "hypot", "cbrt")
def _transcendental(b, prim, args, dts, out):
    return mathlib.call(b, prim, list(args))


@rule("floor", "ceil", "trunc", "rint")
def _rounding(b, prim, args, dts, out):
    (x,) = args
    if out.kind != "f":
        return x
    return _intrinsic(b, {"floor": "llvm.floor", "ceil": "llvm.ceil", "trunc": "llvm.trunc",
                          "rint": "llvm.rint"}[prim], [x], x.type)


@rule("sign")
def _sign(b, prim, args, dts, out):
    (x,) = args
    ty = x.type
    if out.kind == "f":
        zero = ir.Constant(ty, 0.0)
        r = b.select(b.fcmp_ordered("==", x, zero), zero, x)
        r = b.select(b.fcmp_ordered("<", x, zero), ir.Constant(ty, -1.0), r)
        return b.select(b.fcmp_ordered(">", x, zero), ir.Constant(ty, 1.0), r)
    zero = ir.Constant(ty, 0)
    if out.kind == "u":
        return b.zext(b.icmp_unsigned("!=", x, zero), ty)
    r = b.select(b.icmp_signed("<", x, zero), ir.Constant(ty, -1), zero)
    return b.select(b.icmp_signed(">", x, zero), ir.Constant(ty, 1), r)


@rule("minimum", "maximum")
def _minmax(b, prim, args, dts, out):
    x, y = args
    return select_minmax(b, prim == "minimum", x, y, out)


def select_minmax(b, is_min: bool, x, y, dt: np.dtype):
    """NumPy ``minimum``/``maximum``: NaN in either operand gives NaN."""
    if dt.kind == "f":
        better = b.fcmp_ordered("<" if is_min else ">", x, y)
        return b.select(b.or_(better, b.fcmp_unordered("uno", x, x)), x, y)
    if dt.kind == "i":
        return b.select(b.icmp_signed("<" if is_min else ">", x, y), x, y)
    return b.select(b.icmp_unsigned("<" if is_min else ">", x, y), x, y)


@rule("isnan", "isinf", "isfinite")
def _predicates(b, prim, args, dts, out):
    (x,) = args
    if dts[0].kind != "f":
        return ir.Constant(I1, int(prim == "isfinite"))
    if prim == "isnan":
        return b.fcmp_unordered("uno", x, x)
    ax = _intrinsic(b, "llvm.fabs", [x], x.type)
    inf = ir.Constant(x.type, float("inf"))
    return b.fcmp_ordered("==" if prim == "isinf" else "<", ax, inf)


@rule("logical_and", "logical_or", "logical_xor", "logical_not")
def _logical(b, prim, args, dts, out):
    vs = [_truthy(b, v, dt) for v, dt in zip(args, dts)]
    if prim == "logical_not":
        return b.not_(vs[0])
    return {"logical_and": b.and_, "logical_or": b.or_, "logical_xor": b.xor}[prim](*vs)


_CMP = {"equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=", "greater": ">",
        "greater_equal": ">="}


@rule(*_CMP)
def _compare(b, prim, args, dts, out):
    x, y = args
    op = _CMP[prim]
    dt = dts[0]
    if dt.kind == "f":
        return b.fcmp_unordered(op, x, y) if prim == "not_equal" else b.fcmp_ordered(op, x, y)
    if dts[0].kind in "iu" and dts[1].kind in "iu" and dts[0].kind != dts[1].kind:
        # NumPy compares uint64 with int64 exactly: a negative signed value decides alone
        signed, neg_means_greater = (y, True) if dts[1].kind == "i" else (x, False)
        negative = b.icmp_signed("<", signed, ir.Constant(signed.type, 0))
        truth_if_negative = op in ((">", ">=", "!=") if neg_means_greater else ("<", "<=", "!="))
        return b.select(negative, ir.Constant(I1, int(truth_if_negative)), b.icmp_unsigned(op, x, y))
    if dt.kind == "i":
        return b.icmp_signed(op, x, y)
    return b.icmp_unsigned(op, x, y)


@rule("copysign")
def _copysign(b, prim, args, dts, out):
    return _intrinsic(b, "llvm.copysign", list(args), args[0].type)


@rule("signbit")
def _signbit(b, prim, args, dts, out):
    (x,) = args
    if dts[0].kind == "f":  # the sign bit itself: -0.0 and negative NaNs too
        ity = ir.IntType(x.type.width if isinstance(x.type, ir.IntType) else
                         (32 if isinstance(x.type, ir.FloatType) else 64))
        return b.icmp_signed("<", b.bitcast(x, ity), ir.Constant(ity, 0))
    if dts[0].kind == "i":
        return b.icmp_signed("<", x, ir.Constant(x.type, 0))
    return ir.Constant(I1, 0)


@rule("bitwise_and", "bitwise_or", "bitwise_xor")
def _bitwise(b, prim, args, dts, out):
    return {"bitwise_and": b.and_, "bitwise_or": b.or_, "bitwise_xor": b.xor}[prim](*args)


@rule("invert")
def _invert(b, prim, args, dts, out):
    return b.not_(args[0])


@rule("left_shift", "right_shift")
def _shift(b, prim, args, dts, out):
    x, y = args
    ty = x.type
    width = ir.Constant(ty, ty.width)
    in_range = b.icmp_unsigned("<", y, width)
    safe = b.select(in_range, y, ir.Constant(ty, 0))
    if prim == "left_shift":
        return b.select(in_range, b.shl(x, safe), ir.Constant(ty, 0))
    if _is_signed(out):
        past = b.select(b.icmp_signed("<", x, ir.Constant(ty, 0)), ir.Constant(ty, -1), ir.Constant(ty, 0))
        return b.select(in_range, b.ashr(x, safe), past)
    return b.select(in_range, b.lshr(x, safe), ir.Constant(ty, 0))


@rule("fmod")
def _fmod(b, prim, args, dts, out):
    x, y = args
    if out.kind == "f":
        return mathlib.fmod(b, x, y)
    # C's truncated remainder. NumPy gives 0 for a zero divisor, and MIN % -1 is 0: both
    # divide by 1 instead (x % 1 == 0), so neither traps
    ty = x.type
    one = ir.Constant(ty, 1)
    bad = b.icmp_unsigned("==", y, ir.Constant(ty, 0))
    if not _is_signed(out):
        return b.urem(x, b.select(bad, one, y))
    bad = b.or_(bad, b.and_(b.icmp_signed("==", x, ir.Constant(ty, -(1 << (ty.width - 1)))),
                            b.icmp_signed("==", y, ir.Constant(ty, -1))))
    return b.srem(x, b.select(bad, one, y))


# IEEE binary formats: (exponent bias = largest exponent, smallest normal exponent,
# significand bits with the implicit one, storage bits)
_FORMATS = {32: (127, -126, 24), 64: (1023, -1022, 53)}


def _format(ty: ir.Type):
    bits = 32 if isinstance(ty, ir.FloatType) else 64
    return (bits, *_FORMATS[bits])


def _pow2(b, n, ty):
    """``2.0**n`` of an i32 ``n`` in the normal exponents' range, built from its bits."""
    bits, emax, _, p = _format(ty)
    ity = ir.IntType(bits)
    n = b.sext(n, ity) if bits > 32 else n
    return b.bitcast(b.shl(b.add(n, ir.Constant(ity, emax)), ir.Constant(ity, p - 1)), ty)


def ldexp(b: ir.IRBuilder, x: ir.Value, n: ir.Value) -> ir.Value:
    """``x * 2**n`` rounded once (C's ``ldexp``), branch-free on every target, for an
    integer ``n`` of any width.

    ``n`` is clamped to a range past which every finite result over- or underflows;
    up to two exact scalings by a power of two bring the rest into the normal exponents.
    A downward step scales by ``2**(emin + p)``, not ``2**emin``, so an intermediate result
    that is already subnormal (and so rounded) leaves a last factor small enough to give 0.
    """
    ty = x.type
    _, emax, emin, p = _format(ty)
    i32 = ir.IntType(32)
    limit = 2200 if p == 53 else 300   # (> the 2098 / 277 exponents a finite x spans)
    nty = n.type
    n = b.select(b.icmp_signed(">", n, ir.Constant(nty, limit)), ir.Constant(nty, limit), n)
    n = b.select(b.icmp_signed("<", n, ir.Constant(nty, -limit)), ir.Constant(nty, -limit), n)
    if nty.width > 32:
        n = b.trunc(n, i32)
    elif nty.width < 32:
        n = b.sext(n, i32)
    down = emin + p
    for _ in range(2):
        up, low = (b.icmp_signed(">", n, ir.Constant(i32, emax)),
                   b.icmp_signed("<", n, ir.Constant(i32, emin)))
        step = b.select(up, ir.Constant(i32, emax), b.select(low, ir.Constant(i32, down),
                                                             ir.Constant(i32, 0)))
        x = b.fmul(x, _pow2(b, step, ty))
        n = b.sub(n, step)
    return b.fmul(x, _pow2(b, n, ty))


def frexp(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """C's ``frexp``: ``(m, e)`` with ``x = m * 2**e``, ``0.5 <= |m| < 1`` and ``e`` an i32;
    zeros, infinities and NaN give ``(x, 0)``. Subnormals are scaled into the normal range
    first. Bit operations only (the same on every target)."""
    ty = x.type
    bits, emax, emin, p = _format(ty)
    ity = ir.IntType(bits)
    ax = _intrinsic(b, "llvm.fabs", [x], ty)
    tiny = b.fcmp_ordered("<", ax, ir.Constant(ty, 2.0 ** emin))
    shift = p + 1
    scaled = b.select(tiny, b.fmul(x, ir.Constant(ty, 2.0 ** shift)), x)
    raw = b.bitcast(scaled, ity)
    field = ir.Constant(ity, (2 * emax + 1) << (p - 1))          # the exponent bits
    biased = b.lshr(b.and_(raw, field), ir.Constant(ity, p - 1))
    e = b.sub(biased, b.select(tiny, ir.Constant(ity, emax - 1 + shift), ir.Constant(ity, emax - 1)))
    half = ir.Constant(ity, (emax - 1) << (p - 1))                # the exponent field of 0.5
    m = b.bitcast(b.or_(b.and_(raw, b.not_(field)), half), ty)
    special = b.or_(b.fcmp_ordered("==", x, ir.Constant(ty, 0.0)),
                    b.fcmp_unordered(">=", ax, ir.Constant(ty, float("inf"))))
    e = b.trunc(e, ir.IntType(32)) if bits > 32 else e
    return b.select(special, x, m), b.select(special, ir.Constant(ir.IntType(32), 0), e)


@rule("ldexp")
def _ldexp(b, prim, args, dts, out):
    return ldexp(b, *args)


@rule("frexp")
def _frexp(b, prim, args, dts, out):
    return frexp(b, args[0])[0]


@rule("frexp_exponent")
def _frexp_exponent(b, prim, args, dts, out):
    return frexp(b, args[0])[1]


def _magnitude(b, x, dt):
    """``|x|`` of an integer as its unsigned bits (``|MIN|`` is ``2**(width-1)``)."""
    if not _is_signed(dt):
        return x
    return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)


def _gcd(b, u, v):
    """The greatest common divisor of unsigned ``u`` and ``v`` (0 for two zeros): Stein's
    binary algorithm, unrolled and branch-free.

    With the common factors of two set aside, both are made odd; each step replaces the
    pair by (smaller, (larger - smaller) with its factors of two removed), so the sum of
    their bit lengths drops by one at least until one is 0; a pair (0, g) stays as it is.
    """
    ty = u.type
    w = ty.width
    mask = ir.Constant(ty, w - 1)   # cttz(0) == w: masked to a shift by 0 (0 stays 0)

    def odd(v):
        return b.lshr(v, b.and_(intrinsic(b, "cttz", [v, ir.Constant(I1, 0)]), mask))
    twos = b.and_(intrinsic(b, "cttz", [b.or_(u, v), ir.Constant(I1, 0)]), mask)
    a, c = odd(u), odd(v)
    for _ in range(2 * w - 1):
        lo, hi = intrinsic(b, "umin", [a, c]), intrinsic(b, "umax", [a, c])
        a, c = lo, odd(b.sub(hi, lo))
    return b.shl(b.or_(a, c), twos)


@rule("gcd", "lcm")
def _gcd_lcm(b, prim, args, dts, out):
    x, y = (_magnitude(b, v, dt) for v, dt in zip(args, dts))
    g = _gcd(b, x, y)
    if prim == "gcd":
        return g
    # |x| / gcd * |y| (wrapping as NumPy's), 0 where both are 0
    zero = ir.Constant(g.type, 0)
    is_zero = b.icmp_unsigned("==", g, zero)
    q = b.udiv(x, b.select(is_zero, ir.Constant(g.type, 1), g))
    return b.select(is_zero, zero, b.mul(q, y))


@rule("bitwise_count")
def _bitwise_count(b, prim, args, dts, out):
    # the 1-bits of |x| (NumPy's definition for signed integers), as uint8
    n = intrinsic(b, "ctpop", [_magnitude(b, args[0], dts[0])])
    return b.trunc(n, ir.IntType(8)) if n.type.width > 8 else n


@rule("select")
def _select(b, prim, args, dts, out):
    c, x, y = args
    return b.select(c, x, y)


@rule("convert")
def _convert(b, prim, args, dts, out):
    return convert(b, args[0], dts[0], out)


def convert(b: ir.IRBuilder, x: ir.Value, src: np.dtype, dst: np.dtype) -> ir.Value:
    """NumPy ``astype``: C conversions; float to int saturates (NaN gives 0) instead of poison."""
    if src == dst:
        return x
    if src.kind == "c" or dst.kind == "c":
        return complexmath.convert(b, x, src, dst)
    ty = ir_type(dst)
    if dst.kind == "b":
        return _truthy(b, x, src)
    if src.kind == "b":
        return b.uitofp(x, ty) if dst.kind == "f" else b.zext(x, ty)
    if src.kind == "f" and dst.kind == "f":
        return b.fpext(x, ty) if dst.itemsize > src.itemsize else b.fptrunc(x, ty)
    if src.kind == "f":
        if dst.kind == "i":
            # as NumPy on x86: NaN and out-of-range values become the minimum ("integer
            # indefinite"), never LLVM poison
            sat = intrinsic(b, "fptosi.sat", [x], [ty, x.type], ret=ty)
            lo = float(np.iinfo(dst).min)
            hi = float(np.iinfo(dst).max) + 1.0
            ok = b.and_(b.fcmp_ordered(">=", x, ir.Constant(x.type, lo)),
                        b.fcmp_ordered("<", x, ir.Constant(x.type, hi)))
            return b.select(ok, sat, ir.Constant(ty, int(np.iinfo(dst).min)))
        return intrinsic(b, "fptoui.sat", [x], [ty, x.type], ret=ty)
    if dst.kind == "f":
        return b.sitofp(x, ty) if src.kind == "i" else b.uitofp(x, ty)
    if dst.itemsize < src.itemsize:
        return b.trunc(x, ty)
    if dst.itemsize > src.itemsize:
        return b.sext(x, ty) if src.kind == "i" else b.zext(x, ty)
    return x


# Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3";
# the generator JAX uses): a keyed bijection of 64-bit counters, so each element's bits
# depend only on the key and its own counter, on every device.
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA


def threefry2x32(b: ir.IRBuilder, k0, k1, x0, x1):
    """The two 32-bit output words of Threefry-2x32 (20 rounds) for counter ``(x0, x1)``."""
    i32 = ir.IntType(32)
    ks = (k0, k1, b.xor(b.xor(k0, k1), ir.Constant(i32, _PARITY)))

    def rotl(v, r):
        return b.or_(b.shl(v, ir.Constant(i32, r)), b.lshr(v, ir.Constant(i32, 32 - r)))

    x0, x1 = b.add(x0, ks[0]), b.add(x1, ks[1])
    for block in range(5):
        for r in _ROTATIONS[4 * (block % 2):4 * (block % 2) + 4]:
            x0 = b.add(x0, x1)
            x1 = b.xor(rotl(x1, r), x0)
        x0 = b.add(x0, ks[(block + 1) % 3])
        x1 = b.add(b.add(x1, ks[(block + 2) % 3]), ir.Constant(i32, block + 1))
    return x0, x1


@rule("random_bits")
def _random_bits(b, prim, args, dts, out):
    k0, k1, counter = args
    i32, i64 = ir.IntType(32), ir.IntType(64)
    lo = b.trunc(counter, i32)
    hi = b.trunc(b.lshr(counter, ir.Constant(i64, 32)), i32)
    y0, y1 = threefry2x32(b, k0, k1, lo, hi)
    return b.or_(b.zext(y0, i64), b.shl(b.zext(y1, i64), ir.Constant(i64, 32)))
