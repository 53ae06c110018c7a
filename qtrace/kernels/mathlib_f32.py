"""float32-native versions of :mod:`qtrace.kernels.mathlib` functions.

All arithmetic is in ``float`` (``llvm.fma.f32`` and friends) and the bit
manipulation in ``i32``, so a float32 loop vectorizes at full width
(``<8 x float>`` / ``<16 x float>``) instead of converting every lane to
double.  Same rules as the double library: straight-line IR, ``select`` for
special cases, no loads, no tables, no fast-math flags (IEEE NaN/Inf/signed
zeros, gradual underflow).  The algorithms and the measured accuracy are
described in the :mod:`qtrace.kernels.mathlib` docstring.

Where float32 intermediates would cost the last bit, the rounding errors are
carried as float-floats (``hi + lo``, error-free transforms with ``llvm.fma.f32``):

* arctan/arctan2/arcsin/arccos: the double design (one division of selected
  numerator/denominator, offsets 0, pi/4, pi/2, 3pi/4, pi) with the roundings of
  ``|y| - |x|``, ``|y| + |x|`` and of the quotient corrected by fma residuals, the
  offsets as float-floats, operands scaled by powers of 2 away from overflow and
  denormals; arcsin/arccos are ``atan2(|x|, w)``/``atan2(w, x)`` with
  ``w = sqrt(1 - x^2)`` as a float-float (``1 - x^2`` exact as ``h + l``, the
  sqrt corrected by its residual) whose low part enters the quotient's correction;
* tan (fast pass, :mod:`qtrace.kernels.fastmath`): ``tan(r) = r + r^3 T(r^2)``
  as a float-float on the sin/cos reduction (``|r| <= 0.84``: ``k`` is rounded in
  float32), ``-1/tan(r)`` for odd ``k`` with the division's residual;
* power: ``log2|x|`` as a float-float (``s = f/(2+f)`` as ``sh + sl``,
  ``2/3 s^3`` as a float-float, times ``1/ln2`` as a float-float, plus the
  exponent), ``y log2|x|`` exactly as ``wh + wl``, ``2^(wh+wl) = 2^k 2^rh
  (1 + rl ln2)``; the C99 special cases are the double library's selects;
* arcsinh/arccosh/arctanh: the double library's ``log1p`` formulas with the
  argument ``v`` as a float-float (squares split by fma, sqrt and quotients
  corrected by their residuals), ``log1p(vh + vl) = log(u) + (c + vl)/u``;
* hypot: ``sqrt(fma(big, big, small^2))`` scaled by 2^-70 / 2^90 outside
  ``[2^-60, 2^60]``;
* cbrt: ``bits/3 + magic`` seed, two Halley steps, one Newton step on the exact
  residual ``a - t^3`` (arguments scaled into ``[2^-77, 2^101]`` by cubes):
  correctly rounded on every float32 (checked exhaustively).

Polynomial coefficients: ``docs/fit_f32_polys.py`` (weighted minimax by
Lawson's iteration in float64, rounded to float32).
"""

from __future__ import annotations

from llvmlite import ir

from . import mathlib as _m
from .mathlib import _E, _FALSE, _log1p_arg, _log_specials

_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_INF = float("inf")
_NAN = float("nan")

# ln2 = _LN2_HI + _LN2_LO; _LN2_HI = float(ln2) (24 bits, multiple of 2^-24): for
# |k| <= 150 and |x - k ln2| < 1/2, fma(-k, _LN2_HI, x) is exact.
_LN2_HI = 0.6931471824645996
_LN2_LO = -1.9046542121259336e-09
_INVLN2 = 1.4426950216293335
_INVLN2_LO = 1.925963033500011e-08
_LOG10E = 0.4342944920063019
_LOG10E_LO = -1.0103049952192578e-08
_LOG10_2_HI = 0.301025390625  # 11 significant bits: e * _LOG10_2_HI exact
_LOG10_2_LO = 4.605039066518657e-06
# pi/2 = _PIO2_1 + _PIO2_2 + _PIO2_3 + O(2^-73), each part a float32
_PIO2 = (1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15)
_TWO_OVER_PI = 0.6366197466850281
# multiples of pi/4 as float32 head + tail (the tail the float32 nearest to the rest)
_PIO4_2 = (0.7853981852531433, -2.1855694143368964e-08)
_PI3O4_2 = (2.356194496154785, -5.962440319251527e-09)
_PI_2 = (3.1415927410125732, -8.742277657347586e-08)
_TAN_PI8 = 0.41421356  # float32(tan(pi/8)); only selects the interval
_TAN_3PI8 = 2.4142137

# Minimax coefficients, lowest order first (docs/fit_f32_polys.py; relative error of
# the function with float32-rounded coefficients, evaluated exactly).
# exp(r) = 1 + r + r^2 P(r), |r| <= 0.35                                 2^-27.6
_EXP = (0.5, 0.16666515171527863, 0.04166637733578682, 0.008369391784071922, 0.0013942922232672572)
# 2^r = 1 + r Q(r), |r| <= 0.5                                           2^-32.0
_EXP2 = (0.6931471824645996, 0.24022650718688965, 0.05550406128168106, 0.009618088603019714,
         0.0013336667325347662, 0.00015451414219569415, 1.4670755263068713e-05)
# expm1(r) = r + r^2/2 + r^3 Q(r), |r| <= 0.35                           2^-30.8
_EXPM1 = (0.1666666716337204, 0.041666481643915176, 0.008333208039402962, 0.0013933562440797687,
          0.00019944264204241335)
# 2 atanh(s) = 2 s + s z R(z), z = s^2 <= 0.0295                         2^-35.2
_LOG = (0.6666666269302368, 0.40000972151756287, 0.2849879264831543, 0.2427881807088852)
# sin(r) = r + r^3 S(z), z = r^2, |r| <= 0.83                            2^-27.2
_SIN = (-0.16666650772094727, 0.008331910707056522, -0.00019481332856230438)
# cos(r) = 1 - z/2 + z^2 C(z)                                            2^-31.9
_COS = (0.04166663810610771, -0.0013886947417631745, 2.4391503757215105e-05)
# tanh(x) = x + x^3 P(z), z = x^2, |x| <= 0.625                         2^-27.7
_TANH = (-0.3333328366279602, 0.133314847946167, -0.05374298617243767, 0.020648976787924767,
         -0.0057152872905135155)
# sinh(x) = x + x^3 H(z), z = x^2, |x| <= 2                              2^-31.1
_SINH = (0.1666666716337204, 0.008333316072821617, 0.00019843215704895556, 2.7461790068628034e-06,
         2.7169164695806103e-08, -9.984507144678023e-12)
# atan(t) = t + t^3 A(z), z = t^2, |t| <= tan(pi/8)                   2^-33.8
_ATAN = (-0.3333333134651184, 0.19999802112579346, -0.1427912712097168, 0.11009465903043747,
         -0.08282185345888138, 0.04348523169755936)
# tan(r) = r + r^3 T(z), z = r^2, |r| <= 0.84 (error relative to T)    2^-25.0
_TAN = (0.3333333432674408, 0.13333211839199066, 0.0539923757314682, 0.021695777773857117,
        0.009411973878741264, 0.002894260920584202, 0.0014345350209623575, 0.0012686882400885224)
# power's log2: 2 atanh(s) = 2 s + (2/3) s^3 + s^3 z Q(z), z = s^2 <= 0.0295 (relative
# to Q; the s^3 z Q term is below 2^-12.5 of the result)                2^-26.0
_LOGQ = (0.4000000059604645, 0.28571152687072754, 0.22237464785575867, 0.184015154838562)
_TWO3 = (0.6666666865348816, -1.9868215517249155e-08)  # 2/3 as float-float


class E32(_E):
    """The double library's emitter, retyped: float constants/intrinsics, i32 bits."""

    def __init__(self, builder: ir.IRBuilder):
        super().__init__(builder, lowp=True)

    @staticmethod
    def k(v: float) -> ir.Constant:
        return ir.Constant(_F32, float(v))

    @staticmethod
    def ki(v: int, ty: ir.IntType = _I32) -> ir.Constant:
        return ir.Constant(ty, int(v))

    def intr(self, name: str, *args):
        full = name + ".f32"
        fn = self.mod.globals.get(full)
        if fn is None:
            fn = ir.Function(self.mod, ir.FunctionType(_F32, [_F32] * len(args)), name=full)
        return self.b.call(fn, [self.v(a) for a in args])

    def bits(self, x):
        return self.b.bitcast(self.v(x), _I32)

    def from_bits(self, i):
        return self.b.bitcast(i, _F32)

    def i32_to_f(self, i):
        return self.b.sitofp(i, _F32)

    def pow2(self, n32):
        """2.0**n for i32 n in [-126, 127], built from exponent bits."""
        return self.from_bits(self.b.shl(self.b.add(n32, self.ki(127)), self.ki(23)))



# ---------------------------------------------------------------------------
# cores
# ---------------------------------------------------------------------------


def _reduce_ln2(E: E32, x):
    """(k, r_hi, t) with x = k ln2 + r_hi + t: r_hi exact, t = -k _LN2_LO (rounded)."""
    k = E.rint(E.mul(x, _INVLN2))
    nk = E.neg(k)
    return k, E.fma(nk, _LN2_HI, x), E.mul(nk, _LN2_LO)


def _exp_core(E: E32, x, shift: int = 0, narrow: bool = False):
    """e^x * 2^shift for x clamped to [-104, 90] (never NaN); ``narrow``: x is known
    to lie in [-87, 87], so one power of two scales it.

    x = k ln2 + r, ``r = fma(-k, _LN2_LO, fma(-k, _LN2_HI, x))`` (the first exact),
    e^r = 1 + r + r^2 P(r) with P of degree 4 (2^-27.6), times 2^k in one rounding.
    exp: max 1 ulp over every float32 in [-104, 89] (exhaustive; 96.6-96.9% correctly rounded).
    """
    k = E.rint(E.mul(x, _INVLN2))
    nk = E.neg(k)
    r = E.fma(nk, _LN2_LO, E.fma(nk, _LN2_HI, x))
    p = E.add(1.0, E.mad(E.mul(r, r), E.poly(r, _EXP), r))
    ki = E.to_i32(k)
    if shift:
        ki = E.b.add(ki, E.ki(shift))
    return E.scale2(p, ki, narrow)


def _expm1_core(E: E32, x):
    """expm1(x) for x clamped to [-30, 89] (never NaN); +0 at x = -0."""
    k, rh, t = _reduce_ln2(E, x)
    r = E.add(rh, t)
    c = E.add(E.sub(rh, r), t)  # rounding error of r
    r2 = E.mul(r, r)
    em = E.add(r, E.mad(E.mul(r2, r), E.poly(r, _EXPM1), E.mul(0.5, r2)))
    em = E.add(em, E.mad(c, em, c))  # e^(r+c)-1 ~ em + c(1+em)
    s = E.pow2(E.b.sub(E.to_i32(k), E.ki(1)))  # 2^(k-1), k in [-44, 128]
    y = E.mul(E.fma(s, em, E.sub(s, 0.5)), 2.0)
    return E.sel(E.cmp("==", k, 0.0), em, y)


def _log_parts(E: E32, u):
    """u = 2^e (1 + f), 1 + f in [sqrt(1/2), sqrt(2)) for u > 0 finite.

    Returns (e as float, f, s, hfsq, R) with log(u) = e ln2 + f - hfsq + s (hfsq + R).
    """
    sub = E.cmp("<", u, 2.0 ** -126)
    u2 = E.sel(sub, E.mul(u, 2.0 ** 25), u)
    bias = 0x3F3504F3  # bits of float(sqrt(1/2))
    t = E.b.sub(E.bits(u2), E.ki(bias))
    ei = E.b.ashr(t, E.ki(23))
    f = E.sub(E.from_bits(E.b.add(E.b.and_(t, E.ki(0x7FFFFF)), E.ki(bias))), 1.0)
    e = E.add(E.i32_to_f(ei), E.sel(sub, -25.0, 0.0))
    s = E.div(f, E.add(2.0, f))
    z = E.mul(s, s)
    R = E.mul(z, E.poly(z, _LOG))
    hfsq = E.mul(E.mul(0.5, f), f)
    return e, f, s, hfsq, R


def _log_val(E: E32, u, corr=None, e_add=None):
    """log(u) + corr (corr tiny: the log1p correction) + e_add ln2."""
    e, f, s, hfsq, R = _log_parts(E, u)
    if e_add is not None:
        e = E.add(e, e_add)
    lo = E.mul(e, _LN2_LO)
    if corr is not None:
        lo = E.add(lo, corr)
    inner = E.sub(hfsq, E.mad(s, E.add(hfsq, R), lo))
    return E.fma(e, _LN2_HI, E.sub(f, inner))  # e * _LN2_HI exact inside the fma


def _log_scaled(E: E32, x, c_hi, c_lo, e_hi, e_lo):
    """log(x) * C with C = c_hi + c_lo and ln2 C = e_hi + e_lo (e * e_hi exact)."""
    return _m._log_scaled_parts(E, _log_parts(E, x), c_hi, c_lo, e_hi, e_lo)


def reduce_pio2(E: E32, x):
    """Cody-Waite for |x| < 2^19: (k, rh, rl) with x = k pi/2 + (rh + rl), |rl| small.

    ``fma(-k, _PIO2_1, x)`` = r1 is exact (both are multiples of 2^-23 or x < 1, and
    the result is below 1); ``k * _PIO2_2`` is split exactly into ``th + tl`` with an
    fma, and ``r1 - th`` by a fast two-sum, exact because r1 is a multiple of ulp(th)
    (|th| < 2^-6: ulp(th) <= 2^-30); the rest, ``e - tl - k _PIO2_3``, is rl (not
    renormalised: rh + rl is good to ~2^-48 relative, and the kernels need no more).
    """
    k = E.rint(E.mul(x, _TWO_OVER_PI))
    nk = E.neg(k)
    r1 = E.fma(nk, _PIO2[0], x)
    th = E.mul(k, _PIO2[1])
    tl = E.fma(k, _PIO2[1], E.neg(th))
    rh, e = E.fast_two_sum(r1, E.neg(th))
    return k, rh, E.fma(nk, _PIO2[2], E.sub(e, tl))


def sincos_reduced(E: E32, x):
    """(q, sin r, cos r) with x = (4n + q) pi/2 + r, |x| < 2^19 (:func:`reduce_pio2`).

    sin r = rh + (rh^3 S(z) + rl), z = rh^2; cos r = 1 + z' (-1/2 + z C(z)) with
    z' = (rh + rl)^2 to first order, ``fma(rh, rh, 2 rh rl)``, so the fma's one rounding
    also carries rl's first-order term (z' is off the polynomial's dependency chain).
    Max error over every float32 in [2^-12, 2^19) (exhaustive; sin(x) = x below): 1 ulp
    of the float64 result rounded to float32 (sin 96.5%, cos 96.7% correctly rounded).
    """
    k, rh, rl = reduce_pio2(E, x)
    z = E.mul(rh, rh)
    s = E.add(rh, E.mad(E.mul(rh, z), E.poly(z, _SIN), rl))
    z1 = E.fma(rh, rh, E.mul(E.add(rh, rh), rl))
    c = E.fma(z1, E.poly(z, (-0.5, *_COS)), 1.0)
    q = E.b.and_(E.to_i32(k), E.ki(3))
    return q, s, c


def tan_reduced(E: E32, x):
    """tan(x) for |x| < 2^19 (garbage elsewhere): tan(r) or -1/tan(r), r = x - k pi/2.

    tan(r) = rh + p as a float-float (p = rh^3 T(rh^2) + rl (1 + tan^2), at most 27% of
    the result); for odd k the quotient -1/(th + tl) is corrected by its fma residual.
    """
    k, rh, rl = reduce_pio2(E, x)
    z = E.mul(rh, rh)
    p0 = E.mul(E.mul(rh, z), E.poly(z, _TAN))
    t0 = E.add(rh, p0)
    p = E.mad(rl, E.mad(t0, t0, 1.0), p0)  # tan(rh + rl) ~ tan(rh) + rl (1 + tan^2 rh)
    th, tl = E.fast_two_sum(rh, p)
    v = E.div(-1.0, th)
    res = E.fma(v, th, 1.0)  # exact: v th = -1 + res
    w = E.mad(v, E.mad(tl, v, res), v)  # -1/(th + tl) = v (1 + res + tl v) + O(2^-46)
    odd = E.b.icmp_unsigned("!=", E.b.and_(E.to_i32(k), E.ki(1)), E.ki(0))
    return E.sel(odd, w, E.add(th, tl))


# ---------------------------------------------------------------------------
# public functions (float in, float out)
# ---------------------------------------------------------------------------


def _keep_nan(E: E32, x, res):
    return E.sel(E.isnan(x), x, res)


def _f_exp(E, x):
    return _keep_nan(E, x, _exp_core(E, E.clamp(x, -104.0, 90.0)))


def _f_exp2(E, x):
    xc = E.clamp(x, -151.0, 129.0)
    k = E.rint(xc)
    r = E.sub(xc, k)  # exact
    p = E.mad(r, E.poly(r, _EXP2), 1.0)
    return _keep_nan(E, x, E.scale2(p, E.to_i32(k)))


def _f_expm1(E, x):
    res = _expm1_core(E, E.clamp(x, -30.0, 89.0))
    res = E.sel(E.cmp("<", E.abs(x), 2.0 ** -25), x, res)  # also keeps -0
    return _keep_nan(E, x, res)


def _f_log(E, x):
    return _log_specials(E, x, _log_val(E, x))


def _f_log2(E, x):
    return _log_specials(E, x, _log_scaled(E, x, _INVLN2, _INVLN2_LO, 1.0, 0.0))


def _f_log10(E, x):
    res = _log_scaled(E, x, _LOG10E, _LOG10E_LO, _LOG10_2_HI, _LOG10_2_LO)
    return _log_specials(E, x, res)


def _f_log1p(E, x):
    u, c = _log1p_arg(E, x)
    res = _log_val(E, u, c)
    res = E.sel(E.cmp("==", x, _INF), x, res)
    res = E.sel(E.cmp("<", E.abs(x), 2.0 ** -25), x, res)
    res = E.sel(E.cmp("==", x, -1.0), -_INF, res)
    return E.sel(E.ucmp("<", x, -1.0), _NAN, res)


def _f_tanh(E, x):
    """|x| < 0.625: x + x^3 P(x^2); above, 1 - 2/(e^(2|x|) + 1), where the quotient is
    below 0.45 so its ~2 ulp reach the result as <= 1 ulp (e^20: tanh rounds to 1)."""
    ax = E.abs(x)
    z = E.mul(ax, ax)
    small = E.mad(E.mul(ax, z), E.poly(z, _TANH), ax)
    e = _exp_core(E, E.mul(2.0, E.clamp(ax, 0.0, 10.0)), narrow=True)
    big = E.sub(1.0, E.div(2.0, E.add(e, 1.0)))
    res = E.copysign(E.sel(E.cmp("<", ax, 0.625), small, big), x)
    return _keep_nan(E, x, res)


def _half_exp_abs(E: E32, ax):
    """e^|x| / 2 without premature overflow."""
    return _exp_core(E, E.clamp(ax, 0.0, 90.0), shift=-1)


def _f_sinh(E, x):
    ax = E.abs(x)
    z = E.mul(x, x)
    ps = E.mad(E.mul(ax, z), E.poly(z, _SINH), ax)
    h = _half_exp_abs(E, ax)
    res = E.sel(E.cmp("<", ax, 2.0), ps, E.sub(h, E.div(0.25, h)))
    return _keep_nan(E, x, E.copysign(res, x))


def _f_cosh(E, x):
    h = _half_exp_abs(E, E.abs(x))
    return _keep_nan(E, x, E.add(h, E.div(0.25, h)))


def _atan2_core(E: E32, ay, ax, xneg, lows=None):
    """atan2(|y|, |x|) folded with the x-sign rule: result in [0, pi] (or NaN).

    The double design (one division of selected numerator/denominator, offsets
    0, pi/4, pi/2, 3pi/4, pi) with the roundings of ``ay + ax`` and of the quotient
    corrected by fma residuals, and the offsets as float-float.  ``lows``: optional
    ``(ayl, axl)``, low parts of float-float operands ``ay + ayl``, ``ax + axl``
    (finite operands in ``[0, 1]``).
    """
    # scale so that ay + ax cannot overflow and range-B operands are normal
    mx = E.sel(E.cmp(">", ay, ax), ay, ax)
    sc = E.sel(E.cmp(">", mx, 2.0 ** 100), 2.0 ** -8,
               E.sel(E.cmp("<", mx, 2.0 ** -60), 2.0 ** 60, 1.0))
    ay = E.mul(ay, sc)
    ax = E.mul(ax, sc)
    bothinf = E.and_(E.isinf(ay), E.isinf(ax))
    nbi = E.not_(bothinf)
    ra = E.and_(E.cmp("<=", ay, E.mul(ax, _TAN_PI8)), nbi)
    rc = E.and_(E.cmp(">=", ay, E.mul(ax, _TAN_3PI8)), nbi)
    nb, nl = E.two_sum(ay, E.neg(ax))  # ay - ax is inexact for ay < ax/2
    num = E.sel(ra, ay, E.sel(rc, E.neg(ax), nb))
    dsum, dl = E.two_sum(ay, ax)
    den = E.sel(ra, ax, E.sel(rc, ay, dsum))
    num = E.sel(bothinf, 0.0, num)
    den = E.sel(bothinf, 1.0, den)
    den = E.sel(E.cmp("==", den, 0.0), 1.0, den)
    isb = E.not_(E.or_(E.or_(ra, rc), bothinf))
    if lows is None:
        nl = E.sel(isb, nl, 0.0)  # num + nl, den + dl: the exact numerator and denominator
        dl = E.sel(isb, dl, 0.0)
    else:
        ayl, axl = (E.mul(v, sc) for v in lows)
        nl = E.sel(ra, ayl, E.sel(rc, E.neg(axl), E.add(nl, E.sub(ayl, axl))))
        dl = E.sel(ra, axl, E.sel(rc, ayl, E.add(dl, E.add(ayl, axl))))

    def pick(i):
        a = E.sel(xneg, _PI_2[i], 0.0)
        b = E.sel(xneg, _PI3O4_2[i], _PIO4_2[i])
        return E.sel(ra, a, E.sel(rc, _PIO2[i], b))

    ohi, olo = pick(0), pick(1)
    t = E.div(num, den)
    res = E.fma(E.neg(t), den, num)
    tl = E.div(E.add(E.fma(E.neg(t), dl, res), nl), den)
    tl = E.sel(E.cmp(">", E.abs(t), 2.0 ** -100), tl, 0.0)
    z = E.mul(t, t)
    # atan(t + tl) = atan(t) + tl / (1 + t^2) + ...
    small = E.mad(E.mul(t, z), E.poly(z, _ATAN), E.mul(tl, E.mad(z, E.sub(z, 1.0), 1.0)))
    pt = E.sel(xneg, E.neg(t), t)
    pc = E.sel(xneg, E.neg(small), small)
    h, err = E.fast_two_sum(ohi, pt)  # |ohi| >= |t| or ohi == 0
    return E.add(h, E.add(err, E.add(pc, olo)))


def _f_arctan(E, x):
    r = _atan2_core(E, E.abs(x), E.k(1.0), _FALSE)
    r = E.copysign(r, x)
    return _keep_nan(E, x, r)


def _f_arctan2(E, y, x):
    r = _atan2_core(E, E.abs(y), E.abs(x), E.signbit(x))
    r = E.copysign(r, y)
    return E.sel(E.or_(E.isnan(x), E.isnan(y)), _NAN, r)


def _asin_w(E: E32, ax):
    """sqrt(1 - ax^2) as a float-float (w, wl) (NaN for ax > 1).

    1 - ax^2 exactly as h + l: ``1 - p - pl`` with ``ax^2 = p + pl`` (fma), or with
    d = 1 - ax (exact for ax >= 1/2) as ``2d - d^2``; the sqrt corrected by its residual.
    """
    p = E.mul(ax, ax)
    pl = E.fma(ax, ax, E.neg(p))
    h1, l1 = E.fast_two_sum(1.0, E.neg(p))
    d = E.sub(1.0, ax)
    q = E.mul(d, d)
    ql = E.fma(d, d, E.neg(q))
    h2, l2 = E.fast_two_sum(E.add(d, d), E.neg(q))  # 2d >= d^2
    lo = E.cmp("<", ax, 0.5)
    h = E.sel(lo, h1, h2)
    l = E.sub(E.sel(lo, l1, l2), E.sel(lo, pl, ql))  # noqa: E741
    w = E.sqrt(h)
    wl = E.div(E.add(E.fma(E.neg(w), w, h), l), E.add(w, w))
    return w, E.sel(E.cmp(">", w, 0.0), wl, 0.0)


def _f_arcsin(E, x):
    ax = E.abs(x)
    w, wl = _asin_w(E, ax)
    r = _atan2_core(E, ax, w, _FALSE, (E.k(0.0), wl))
    r = E.copysign(r, x)
    r = E.sel(E.cmp("<", ax, 2.0 ** -12), x, r)
    return E.sel(E.ucmp(">", ax, 1.0), _NAN, r)


def _f_arccos(E, x):
    ax = E.abs(x)
    w, wl = _asin_w(E, ax)
    r = _atan2_core(E, w, ax, E.signbit(x), (wl, E.k(0.0)))
    return E.sel(E.ucmp(">", ax, 1.0), _NAN, r)


def _log2_ff(E: E32, ax):
    """log2(ax) as a float-float (relative error ~2^-40) for ax > 0 finite.

    fdlibm's s = f / (2 + f) as sh + sl (one division, fma residual), the cubic term
    2/3 s^3 as a float-float, the rest s^3 z Q(z) in float; times 1/ln2 as a
    float-float, plus the exponent.
    """
    e, f, _s, _hfsq, _R = _log_parts(E, ax)
    dh, dl = E.fast_two_sum(2.0, f)
    sh = E.div(f, dh)
    sl = E.div(E.fma(E.neg(sh), dl, E.fma(E.neg(sh), dh, f)), dh)
    s2h = E.mul(sh, sh)
    s2l = E.fma(sh, sh, E.neg(s2h))
    s3h = E.mul(s2h, sh)
    s3l = E.add(E.fma(s2h, sh, E.neg(s3h)), E.mad(s2l, sh, E.mul(3.0, E.mul(s2h, sl))))
    t1h = E.mul(s3h, _TWO3[0])
    t1l = E.add(E.fma(s3h, _TWO3[0], E.neg(t1h)), E.mad(s3h, _TWO3[1], E.mul(s3l, _TWO3[0])))
    t2 = E.mul(E.mul(s3h, s2h), E.poly(s2h, _LOGQ))
    lh, ll = E.fast_two_sum(E.mul(2.0, sh), t1h)
    lh, ll = E.fast_two_sum(lh, E.add(ll, E.add(E.mad(2.0, sl, t1l), t2)))
    th = E.mul(lh, _INVLN2)
    tl = E.add(E.fma(lh, _INVLN2, E.neg(th)), E.mad(lh, _INVLN2_LO, E.mul(ll, _INVLN2)))
    w, wl = E.fast_two_sum(e, th)  # |e| >= 1 > |th| or e == 0
    return E.fast_two_sum(w, E.add(wl, tl))


def _f_power(E, x, y):
    """pow(x, y) = 2^(y log2|x|): log2 and the product as float-floats, 2^(rh + rl)."""
    ax = E.abs(x)
    zero, infnan = E.cmp("==", ax, 0.0), E.ucmp("==", ax, _INF)
    lh, ll = _log2_ff(E, ax)
    lh = E.sel(zero, -_INF, E.sel(infnan, ax, lh))
    wh = E.mul(y, lh)
    wl = E.mad(y, ll, E.fma(y, lh, E.neg(wh)))
    # 2^(wh + wl); wl only where wh is finite and not clamped
    whc = E.clamp(wh, -160.0, 130.0)
    wl = E.sel(E.cmp("==", whc, wh), wl, 0.0)
    k = E.rint(whc)
    rh, rl = E.fast_two_sum(E.sub(whc, k), wl)  # whc - k exact; |whc - k| >= |wl| or 0
    p = E.mad(rh, E.poly(rh, _EXP2), 1.0)
    p = E.mad(p, E.mul(rl, _LN2_HI), p)  # 2^rl = 1 + rl ln2 + O(2^-48)
    r = E.scale2(p, E.to_i32(k))
    r = E.sel(E.isnan(wh), _NAN, r)
    return _m._pow_finish(E, x, y, r)


def _log1p_val(E: E32, v, corr=None):
    """log1p(v + corr) for v > -1 finite, corr tiny (the rounding error of v)."""
    u, c = _log1p_arg(E, v)
    if corr is not None:
        c = E.add(c, E.div(corr, u))
    return _log_val(E, u, c)


def _div_ff(E: E32, nh, nl, dh, dl):
    """(nh + nl) / (dh + dl) as q + ql (the quotient's rounding corrected by its residual)."""
    q = E.div(nh, dh)
    ql = E.div(E.add(E.fma(E.neg(q), dh, nh), E.fma(E.neg(q), dl, nl)), dh)
    return q, ql


def _f_arcsinh(E, x):
    """log1p(v), v = |x| + x^2 / (1 + sqrt(1 + x^2)) as a float-float (vh + vl)."""
    ax = E.abs(x)
    big = E.cmp(">", ax, 2.0 ** 28)
    th = E.mul(ax, ax)
    tl = E.fma(ax, ax, E.neg(th))
    ah, al = E.two_sum(1.0, th)
    r = E.sqrt(ah)
    rl = E.div(E.add(E.fma(E.neg(r), r, ah), al), E.add(r, r))  # sqrt(ah + al) = r + rl
    dh, dl = E.fast_two_sum(r, 1.0)  # r >= 1
    q, ql = _div_ff(E, th, tl, dh, E.add(dl, rl))
    vh, vl = E.fast_two_sum(ax, q)  # q < ax
    vl = E.add(vl, ql)
    u, c = _log1p_arg(E, vh)
    c = E.add(c, E.div(vl, u))
    u = E.sel(big, ax, u)
    c = E.sel(big, 0.0, c)
    res = _log_val(E, u, c, E.sel(big, 1.0, 0.0))
    res = E.sel(E.isinf(x), ax, res)
    res = E.copysign(res, x)
    res = E.sel(E.cmp("<", ax, 2.0 ** -12), x, res)
    return _keep_nan(E, x, res)


def _f_arccosh(E, x):
    """log1p(v), v = t + sqrt(t (2 + t)), t = x - 1, as a float-float (vh + vl)."""
    big = E.cmp(">", x, 2.0 ** 28)
    t, tl = E.two_sum(x, -1.0)  # tl != 0 only for x > 2
    ph = E.mul(t, t)
    pl = E.fma(t, t, E.neg(ph))
    wh, wl = E.two_sum(E.add(t, t), ph)
    wl = E.add(wl, pl)  # t (2 + t) = wh + wl
    r = E.sqrt(wh)
    rl = E.div(E.add(E.fma(E.neg(r), r, wh), wl), E.add(r, r))
    rl = E.sel(E.cmp(">", r, 0.0), rl, 0.0)
    vh, vl = E.two_sum(t, r)
    vl = E.add(vl, E.add(rl, E.mul(2.0, tl)))  # dv/dt ~ 2 where tl != 0
    u, c = _log1p_arg(E, vh)
    c = E.add(c, E.div(vl, u))
    u = E.sel(big, x, u)
    c = E.sel(big, 0.0, c)
    res = _log_val(E, u, c, E.sel(big, 1.0, 0.0))
    res = E.sel(E.cmp("==", x, _INF), x, res)
    return E.sel(E.ucmp("<", x, 1.0), _NAN, res)


def _f_arctanh(E, x):
    """log1p(t) / 2, t = 2|x| + 2x^2 / (1 - |x|) (|x| < 1/2) or 2|x| / (1 - |x|), as a
    float-float."""
    ax = E.abs(x)
    small = E.cmp("<", ax, 0.5)
    t2 = E.add(ax, ax)
    nh = E.mul(t2, ax)
    nl = E.fma(t2, ax, E.neg(nh))
    dh, dl = E.fast_two_sum(1.0, E.neg(ax))  # exact (dl == 0) for |x| >= 1/2
    q, ql = _div_ff(E, E.sel(small, nh, t2), E.sel(small, nl, 0.0), dh, dl)
    sh, sl = E.fast_two_sum(t2, q)  # q <= t2 for |x| <= 1/2
    th = E.sel(small, sh, q)
    tl = E.sel(small, E.add(sl, ql), ql)
    u, c = _log1p_arg(E, th)
    c = E.add(c, E.div(tl, u))
    res = E.mul(0.5, _log_val(E, u, c))
    res = E.sel(E.cmp("==", ax, 1.0), _INF, res)
    res = E.copysign(res, x)
    res = E.sel(E.cmp("<", ax, 2.0 ** -12), x, res)
    return E.sel(E.ucmp(">", ax, 1.0), _NAN, res)


def _f_hypot(E, x, y):
    """sqrt(fma(big, big, small^2)), scaled by a power of 2 away from over/underflow."""
    ax, ay = E.abs(x), E.abs(y)
    gt = E.cmp(">", ax, ay)
    big = E.sel(gt, ax, ay)
    small = E.sel(gt, ay, ax)
    hi, lo = E.cmp(">", big, 2.0 ** 60), E.cmp("<", big, 2.0 ** -60)
    sc = E.sel(hi, 2.0 ** -70, E.sel(lo, 2.0 ** 90, 1.0))
    isc = E.sel(hi, 2.0 ** 70, E.sel(lo, 2.0 ** -90, 1.0))
    b, s = E.mul(big, sc), E.mul(small, sc)
    res = E.mul(E.sqrt(E.fma(b, b, E.mul(s, s))), isc)
    return E.sel(E.or_(E.isinf(x), E.isinf(y)), _INF, res)


def _f_cbrt(E, x):
    """Exponent/3 seed, two Halley steps, a Newton step on the exact residual a - t^3."""
    ax = E.abs(x)
    # a in [2^-77, 2^101]: 2 t^3 + a cannot overflow, and the residual's low parts
    # (~2^-48 a) stay normal; the scale factors are cubes
    sub = E.cmp("<", ax, 2.0 ** -60)
    huge = E.cmp(">", ax, 2.0 ** 100)
    a = E.mul(ax, E.sel(sub, 2.0 ** 72, E.sel(huge, 2.0 ** -42, 1.0)))
    post = E.sel(sub, 2.0 ** -24, E.sel(huge, 2.0 ** 14, 1.0))
    t = E.from_bits(E.b.add(E.b.udiv(E.bits(a), E.ki(3)), E.ki(709958130)))  # ~5 bits
    a2 = E.add(a, a)
    for _ in range(2):  # Halley: 5 -> 15 -> ~24 bits
        t3 = E.mul(E.mul(t, t), t)
        t = E.mul(t, E.div(E.add(t3, a2), E.add(E.add(t3, t3), a)))
    y2 = E.mul(t, t)
    y2e = E.fma(t, t, E.neg(y2))
    y3 = E.mul(y2, t)
    y3e = E.mad(y2e, t, E.fma(y2, t, E.neg(y3)))
    r = E.sub(E.sub(a, y3), y3e)  # a - t^3 (a - y3 exact: Sterbenz)
    t = E.add(t, E.div(r, E.mul(3.0, y2)))
    res = E.copysign(E.mul(t, post), x)
    special = E.or_(E.cmp("==", ax, 0.0), E.ucmp("==", ax, _INF))  # 0, inf, nan
    return E.sel(special, x, res)


NATIVE = {
    "exp": _f_exp, "exp2": _f_exp2, "expm1": _f_expm1,
    "log": _f_log, "log2": _f_log2, "log10": _f_log10, "log1p": _f_log1p,
    "tanh": _f_tanh, "sinh": _f_sinh, "cosh": _f_cosh,
    "arctan": _f_arctan, "arctan2": _f_arctan2, "arcsin": _f_arcsin, "arccos": _f_arccos,
    "power": _f_power, "arcsinh": _f_arcsinh, "arccosh": _f_arccosh, "arctanh": _f_arctanh,
    "hypot": _f_hypot, "cbrt": _f_cbrt,
}
