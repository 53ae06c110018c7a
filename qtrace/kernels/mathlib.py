"""Vectorizable scalar math functions emitted as LLVM IR.

Why IR and not libm
-------------------
A kernel's element loop that calls ``sin``/``exp``/... from libm cannot be
vectorized by LLVM's loop vectorizer (a call to an opaque function is at best
scalarized lane by lane).  The functions here are emitted *inline* as
straight-line IR -- arithmetic, ``fcmp``/``icmp``, ``select``, bitcasts,
``fptosi``/``sitofp`` and the intrinsics ``llvm.fabs``, ``llvm.floor``,
``llvm.trunc``, ``llvm.roundeven``, ``llvm.fma``, ``llvm.fmuladd``,
``llvm.copysign``, ``llvm.sqrt`` -- so a loop that uses them vectorizes like
any other arithmetic loop (e.g. ``<4 x double>`` or ``<8 x double>`` on x86-64).
There are no branches, no basic blocks, no loads and no global tables: every
constant is an immediate.  No fast-math flags are set, so NaN/Inf/signed-zero
behaviour is exact IEEE and denormals are handled (no flush-to-zero assumed).

API
---
``emit_math(builder, name, args)`` emits ``name(*args)`` for scalar ``float``
or ``double`` operands (all of the same type) at the builder's position and
returns the result value (same type).  ``SUPPORTED`` lists the names.
Intrinsics are declared in ``builder.module`` on first use and reused after
(looked up by their mangled name, e.g. ``llvm.fma.f64``), so any number of
functions can be emitted into one module.

Semantics are NumPy's (C99 Annex F): NaN in -> NaN out, domain errors -> NaN,
overflow -> +-inf, underflow -> +-0/denormal, signed zeros and infinities as
NumPy returns them (``log(0) = -inf``, ``tanh(+-inf) = +-1``, ``arctan2`` of
signed zeros, ``hypot(inf, nan) = inf``, the C99 ``pow`` special cases, ...).

Implementation
--------------
float32 ``exp exp2 expm1 log log2 log10 log1p tanh sinh cosh arctan arctan2
arcsin arccos arcsinh arccosh arctanh hypot cbrt power`` are computed
natively in float32 (:mod:`qtrace.kernels.mathlib_f32`): the same designs in
``float`` arithmetic with ``i32`` bit manipulation and float32 polynomials, so
a float32 loop vectorizes at full width (``<8 x float>`` on AVX2, not two
``<4 x double>``).  The float32 reductions stay exact without double:
``fma(-k, ln2_hi, x)`` with ``ln2_hi = float(ln2)`` is exact (both terms are
multiples of 2^-24/2^-25 and the result is below 1/2), ``log`` adds
``e*ln2_hi`` inside an fma, ``tanh`` is an odd polynomial below 0.625 and
``1 - 2/(e^(2|x|) + 1)`` above (one division; the quotient is below 0.45, so its
error reaches the result at most halved), ``sinh`` uses its odd
polynomial up to ``|x| < 2`` (less cancellation in ``h - 1/(4h)``); the
arctangents correct the roundings of the numerator, the denominator and the
quotient and add float-float offsets; arcsinh/arccosh/arctanh pass their
``log1p`` argument as a float-float; ``power`` uses a float-float ``log2``
(relative error ~2^-40), an exact product by ``y`` and ``2^(rh + rl)``.  The
float32 ``sin``/``cos``/``tan`` *fast pass* that kernels run first
(:mod:`qtrace.kernels.fastmath`, ``|x| < 2^19``) is float32-native too:
``fma(-k, float(pi/2), x)`` exact, ``k * pi2_2`` split exactly by an fma and
subtracted with a fast two-sum (exact: the first remainder is a multiple of
``ulp(k * pi2_2)``), ``k * pi2_3`` added to the tail, giving a
float-float reduced argument (~2^-48).  ``emit_math``'s own float32
``sin``/``cos``/``tan`` (the exact fallback for any argument, Payne-Hanek) are
computed in double precision with lower-degree polynomials and rounded to
float once at the end (the vector loop then runs at half width).  float64 uses
the double algorithms with full-degree polynomials plus double-double
corrections where the last bits matter.  Algorithms (own code, classic
designs):

* exp/exp2/expm1: Cody-Waite reduction ``x = k ln2 + r`` with ``ln2`` split in
  a 32-bit head (exact ``k*ln2_hi``) and a tail; minimax polynomial on
  ``|r| <= ln2/2``; ``2^k`` built from exponent bits in two factors, so
  gradual underflow rounds once.  expm1 reconstructs ``2^k(1+p) - 1`` with an
  fma and keeps the ``k = 0`` result exact (fdlibm-style).
* log family: ``x = 2^e m`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` by integer
  arithmetic on the bits (denormals pre-scaled by ``2^54``),
  ``log(m) = 2 atanh(s)``, ``s = f/(2+f)`` (fdlibm ``e_log.c`` form); log2 and
  log10 multiply the head/tail split of ``log1p(f)`` by a double-double
  constant; log1p adds the rounding error of ``1+x`` as ``c/u``.
* sin/cos/tan: Payne-Hanek reduction for *every* finite argument, without a
  table: the bits of 2/pi are held as 53-bit chunks (immediates), the window
  of 5 chunks needed for the argument's exponent is chosen by a log-depth
  ``select`` tree (a barrel shifter on the window index), the chunk that
  straddles the binary point is cut with an exact ``trunc``, products are
  exact via ``fma`` and the sum mod 4 is accumulated error-free with
  Rump-style extraction (``(t + 3*2^k) - 3*2^k``) into fixed-point levels.
  The reduced argument is a double-double; fdlibm-style kernels (minimax in
  ``r^2`` on ``|r| <= pi/4``) finish.  float32 uses a 3-chunk, 2-window
  version with two two-sums.  Kernels compute float64 sin/cos/tan with
  :func:`trig_fast` first (:mod:`qtrace.kernels.fastmath`): a Cody-Waite
  reduction by pi/2 in three doubles for ``|x| < 2^20`` and the same kernels;
  a range holding a larger argument is recomputed by the C library.
* arctan/arctan2/arcsin/arccos: three-interval reduction
  (``tan(pi/8)``, ``tan(3pi/8)``) done as *one* division of selected
  numerator/denominator (``(y-x)/(y+x)``, ``-x/y``, ``y/x``), minimax odd
  polynomial, double-double offsets (0, pi/4, pi/2, 3pi/4, pi) and C99 quadrant
  rules; for float64 the roundings of ``y+x`` and of the quotient are
  corrected with an exact fma residual.  ``arcsin x = atan2(x, w)``,
  ``arccos x = atan2(w, x)`` with ``w = sqrt(1-x^2)``, ``1-x^2`` rounded once.
* sinh/cosh/tanh: ``exp(|x|)/2`` computed with the exponent shift (no
  premature overflow), small-argument odd polynomial for sinh,
  ``tanh`` an odd polynomial below 0.625 and ``1 - 2/(e^(2|x|) + 1)`` above
  (float64 and float32 alike, see above).  arcsinh/arccosh/arctanh: log1p-based fdlibm formulas, and
  ``log(x) + ln2`` (as exponent + 1) for huge arguments.
* hypot: scaled ``sqrt(fma(big, big, small*small))``.  cbrt: exponent/3 seed,
  Halley iterations, and for float64 a final Newton step on an exact
  double-double residual.  power: ``exp2(y*log2|x|)`` (double precision for
  float32; double-double log2/exp2 reduction for float64) plus all C99
  special cases by ``select``.

Polynomial coefficients were fitted with a Remez exchange in 256-bit
arithmetic (mpmath) for this module; constants of 2/pi, pi and ln2 were
generated the same way.  References: W. J. Cody & W. Waite, *Software Manual
for the Elementary Functions* (1980); M. Payne & R. Hanek, "Radian reduction
for trigonometric functions" (1983); K. C. Ng, "Argument reduction for huge
arguments: good to the last bit" (1992); Sun fdlibm and S. Moshier's Cephes
(algorithm structure); N. Shibata & F. Petrogalli, "SLEEF" (2020, straight
line vector formulation); S. M. Rump, T. Ogita, S. Oishi, "Accurate floating
point summation" (2008, error-free extraction).

Accuracy: max error in ulp of the exact result, measured on ~2*10^6 random
inputs per function and dtype (uniform and log-uniform over wide ranges incl.
|x| <= 1e5 and the whole finite range for trig, the whole finite range incl.
denormals for the exp/log families), float32 against NumPy float64, float64
against NumPy long double (x87 80-bit).  Entries marked ``*`` are the
float32-native versions, measured on every 1024th float32 bit pattern plus
6*10^6 values in [-105, 100] (all normal results; the error of denormal
results is <= 0.76 ulp of the denormal spacing); as distance to the float64
reference rounded to float32 they are all <= 1 ulp there (92-99.8% correctly
rounded), and an exhaustive check of sinh on 0.5 <= |x| <= 8 found 26 inputs
at 2 ulp (tanh: every float32 checked, max 1.33 ulp, 99.7% correctly rounded).
sin/cos/tan* are the fast pass (|x| < 2^19, incl. the float32 values
nearest to multiples of pi/2); larger arguments take the exact double path
(0.50); sin, cos and exp* (since their shorter reduction and polynomials) are the
maxima over every float32 of the fast range / of [-104, 89] (exhaustive: within 1 ulp
of the rounded reference, 96.5-97% correctly rounded).  The inverse
trigonometric/hyperbolic functions, tan, hypot, cbrt and power* were measured
on every 1024th bit pattern plus 6*10^6 values in their
natural range (binary: 1.2*10^7 pairs, incl. power's results near overflow and
in the denormals); an exhaustive check of every float32 found arctan, arcsin,
arccos, arcsinh, arccosh and arctanh within 1 ulp of the rounded reference
(97.6-99.98% correctly rounded; arcsin/arccos before their last change) and cbrt
correctly rounded everywhere:

==========  =======  =======     ==========  =======  =======
name        float32  float64     name        float32  float64
==========  =======  =======     ==========  =======  =======
exp         1.04*    0.82        arcsin      0.64*    1.59
exp2        0.77*    0.86        arccos      0.61*    1.87
expm1       1.39*    1.81        arctan      0.62*    1.19
log         0.81*    0.81        arctan2     0.74*    1.15
log2        0.81*    0.79        arcsinh     0.80*    1.52
log10       0.69*    0.72        arccosh     0.81*    2.05
log1p       0.81*    0.82        arctanh     0.82*    1.60
sin         0.93*    0.88        tanh        1.33*    1.31
cos         0.91*    0.95        sinh        1.51*    1.60
tan         1.18*    2.29        cosh        1.46*    1.27
hypot       0.99*    0.94        power       0.88*    0.90
cbrt        0.50*    0.68
==========  =======  =======     ==========  =======  =======

float32 results computed in double are the double-precision result rounded
once, so they are within 0.5 ulp + < 0.02 ulp (i.e. correctly rounded except
in rare near-tie cases); the float32-native ones have the errors marked ``*``
(the final rounding plus the error of float32 intermediates: in ``expm1``
``2^k (1 + em) - 1``, in ``tanh`` the ``exp`` and the quotient, in ``sinh``/``cosh`` the
``exp`` and the final add, in ``tan`` the polynomial part, in ``hypot`` the
rounding of ``small^2`` and of the fma before the sqrt).  No float32 function is
left on the double path for accuracy: only the exact sin/cos/tan fallback is.
The tests assert <= 2 ulp (float32) and <= 4 ulp (float64) against the
reference rounded to the dtype.

libm: no function emits a libm call.  float64 ``power`` is
``2^(y log2|x|)`` with ``log2`` as a double-double (relative error ~2^-65) and
a double-double exp2 reduction, which keeps the result within 1 ulp up to
overflow.  ``_LIBM_F64`` is the (empty) hook that would route a float64 name
to a libm symbol (declared ``nounwind readnone`` so LLVM can still vectorize
the loop and scalarize the call) should an IR version ever be dropped.

Performance notes for the integrator: the bodies are long dependency chains
(float64 sin/cos ~250 instructions per vector: the table-free Payne-Hanek
costs about as much as the rest); the loop vectorizer picks interleave 1 for
such bodies, and on AVX-512 hosts that prefer 256-bit vectors it picks
``<4 x double>``.  Loop metadata ``llvm.loop.vectorize.width`` 8-16 and/or
``llvm.loop.interleave.count`` 2-4 on math-heavy loops measured up to 2.5x
faster here.  The error-free transforms need a true fused ``llvm.fma``:
native on x86-64-v3 / AArch64; on a target without FMA hardware LLVM lowers
it to a (correct but slow) libm ``fma`` call per use.
"""

from __future__ import annotations

from llvmlite import ir

from .builder import lowering_of

__all__ = ["SUPPORTED", "emit_math"]

_F64 = ir.DoubleType()
_F32 = ir.FloatType()
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)

_UNARY = (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
    "sin", "cos", "tan", "tanh", "sinh", "cosh",
    "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "cbrt",
)
_BINARY = ("arctan2", "hypot", "power")

SUPPORTED: frozenset[str] = frozenset(_UNARY + _BINARY)

# float64 names implemented by a call to the C library (symbol name).
_LIBM_F64: dict[str, str] = {}

# ---------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------

_LN2_HI = 0.6931471803691238  # 32 significant bits: k*_LN2_HI exact for |k| < 2^21
_LN2_LO = 1.9082149292705877e-10
_INVLN2 = 1.4426950408889634
_INVLN2_LO = 2.0355273740931033e-17
_LN2 = 0.6931471805599453
_LN2_TAIL = 2.3190468138462996e-17
_LOG10E = 0.4342944819032518
_LOG10E_LO = 1.098319650216765e-17
_LOG10_2_HI = 0.3010299955494702  # 32 significant bits
_LOG10_2_LO = 1.1451100898021838e-10
_PIO2 = (1.5707963267948966, 6.123233995736766e-17)
_PIO4 = (0.7853981633974483, 3.061616997868383e-17)
_PI3O4 = (2.356194490192345, 9.184850993605148e-17)
_PI = (3.141592653589793, 1.2246467991473532e-16)
_PIO2_PARTS = (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)  # each
# the double nearest to pi/2 minus the ones before it (pi/2 - their sum ~ 5.6e-50)
_TWO_OVER_PI = 0.6366197723675814
FAST_TRIG_LIMIT = 2.0 ** 20  # float64 sin/cos/tan: the Cody-Waite reduction's range
_TAN_PI8 = 0.41421356237309503
_TAN_3PI8 = 2.414213562373095

# 2/pi to 1280 bits (hex digits after the binary point).
_TWO_OVER_PI_HEX = (
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561"
    "b7246e3a424dd2e006492eea09d1921cfe1deb1cb129a73ee88235f52ebb4484"
    "e99c7026b45f7e413991d639835339f49c845f8bbdf9283b1ff897ffde05980f"
    "ef2f118b5a0a6d1f6d367ecf27cb09b74f463f669e5fea2d7527bac7ebe5f17b"
    "3d0739f78a5292ea6bfb5fb11f8d5d0856033046fc7b6babf0cfbc209af4361d"
)


def _two_over_pi_chunks(n: int) -> list[float]:
    """C[m] = (bits m*53+1 .. m*53+53 of 2/pi after the point) as a value in [0, 1)."""
    bits = int(_TWO_OVER_PI_HEX, 16)
    nbits = 4 * len(_TWO_OVER_PI_HEX)
    out = []
    for m in range(n):
        shift = nbits - 53 * (m + 1)
        word = (bits >> shift) & ((1 << 53) - 1)
        out.append(float(word) * 2.0 ** -53)  # exact: word < 2^53
    return out


_PH_CHUNKS = _two_over_pi_chunks(24)

# Minimax coefficients (Remez, relative/absolute error noted), lowest order first.
# exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2 + 0.002
_EXP_D = (0.5, 0.1666666666666667, 0.041666666666666685, 0.008333333333325801,
          0.0013888888888873728, 0.00019841269875980506, 2.4801587348920692e-05,
          2.7557253937585153e-06, 2.755725139309761e-07, 2.5105822219581072e-08,
          2.0922100232016293e-09)  # |err P| 1.7e-18
_EXP_F = (0.5000000013934967, 0.1666666675957392, 0.04166646027852915,
          0.00833328491925263, 0.0013934162083354695, 0.00019908342589330138)  # 1.4e-9
# expm1(r) = r + r^2/2 + r^3 Q(r)
_EXPM1_D = (0.16666666666666666, 0.04166666666666667, 0.008333333333333335,
            0.001388888888888351, 0.00019841269841259734, 2.4801587326375894e-05,
            2.7557319255536464e-06, 2.755727259878248e-07, 2.505206317159388e-08,
            2.0915119104169288e-09, 1.6089269159713572e-10)  # 1e-17
_EXPM1_F = (0.16666666697630272, 0.04166655203135411, 0.008333300213414612,
            0.0013926610560095103, 0.00019899951008710404)  # 8e-9
# 2 atanh(s) = 2 s + s z R(z), z = s^2 <= 0.0295
_LOG_D = (0.6666666666666666, 0.400000000000009, 0.28571428570790364,
          0.2222222239459788, 0.181817953424484, 0.1538625541761835,
          0.132683631262789, 0.13090816417058052)  # 3.7e-17
_LOG_F = (0.6666666655207923, 0.4000012351769628, 0.2855065086174048,
          0.23334721333847516)  # 1.2e-9
# float64 pow: 2 atanh(s) = 2 s + (2/3) s^3 + s^3 z Q(z)
_LOGQ_D = (0.4, 0.28571428571429386, 0.2222222222164419, 0.1818181833793513,
           0.15384594700434032, 0.13334818513497015, 0.11705876143573736,
           0.11726856358811658)  # 2.6e-17
_TWO3 = (0.6666666666666666, 3.700743415417188e-17)
# sin(r) = r + r^3 S(z), z = r^2, |r| <= 0.786
_SIN_D = (-0.16666666666666666, 0.008333333333330932, -0.00019841269836733344,
          2.75573160893155e-06, -2.5051129062451172e-08, 1.591792748590735e-10)  # 3.2e-17
_SIN_F = (-0.1666666666384364, 0.00833333186963912, -0.00019840083821568124,
          2.7249533027281167e-06)  # 2.8e-11
# cos(r) = 1 - z/2 + z^2 C(z)
_COS_D = (0.041666666666666664, -0.00138888888888872, 2.480158729851042e-05,
          -2.7557317155938293e-07, 2.0876124781223077e-09, -1.1381234778158426e-11)  # 2.7e-18
_COS_F = (0.0416666666638793, -0.0013888887545665228, 2.480054603360786e-05,
          -2.729508094950986e-07)  # 2.8e-12
# atan(t) = t + t^3 A(z), z = t^2, |t| <= 0.4145
_ATAN_D = (-0.3333333333333333, 0.19999999999999812, -0.14285714285661827,
           0.11111111105331885, -0.09090908761480017, 0.07692296585414793,
           -0.06666428341510636, 0.05878965424651296, -0.052307007176220166,
           0.04552627583274765, -0.03459507077930652, 0.016310806961536008)  # 1.9e-17
_ATAN_F = (-0.3333333328246112, 0.19999978161857357, -0.14284191968249155,
           0.11072009680424937, -0.08628836318166272, 0.050575320131709164)  # 5e-10
# tanh(x) = x + x^3 T(z), z = x^2, |x| < 0.625 (Chebyshev fit, mpmath, 200 bits)
_TANH_D = (-0.3333333333333333, 0.13333333333333042, -0.05396825396789699,
           0.021869488519008305, -0.008863235103240878, 0.0035921217511549622,
           -0.0014557754120478055, 0.0005896606577757043, -0.0002375906496055562,
           9.257116129556769e-05, -3.12011014257974e-05, 6.485163482793113e-06)  # 2e-18 rel
# sinh(x) = x + x^3 H(z), z = x^2, |x| <= 1
_SINH_D = (0.16666666666666666, 0.008333333333333299, 0.00019841269841324268,
           2.7557319191350556e-06, 2.5052117702216713e-08, 1.6057679038110046e-10,
           7.746198945935068e-13)  # 1.1e-17
_SINH_F = (0.16666666646770542, 0.008333339689285126, 0.00019838098276101922,
           2.8063057259571706e-06)  # 2e-10


# ---------------------------------------------------------------------------
# emission helper
# ---------------------------------------------------------------------------


class _E:
    """Thin wrapper over IRBuilder for scalar double arithmetic.

    ``lowp`` is True when the result will be rounded to float32 (cheaper
    polynomials and reductions are enough).
    """

    def __init__(self, builder: ir.IRBuilder, lowp: bool):
        self.b = builder
        self.mod = builder.module
        self.lowp = lowp

    # -- values -------------------------------------------------------------
    @staticmethod
    def k(v: float) -> ir.Constant:
        return ir.Constant(_F64, float(v))

    @staticmethod
    def ki(v: int, ty: ir.IntType = _I64) -> ir.Constant:
        return ir.Constant(ty, int(v))

    def v(self, x):
        return x if isinstance(x, ir.Value) else self.k(x)

    # -- intrinsics ---------------------------------------------------------
    def intr(self, name: str, *args):
        full = name + ".f64"
        fn = self.mod.globals.get(full)
        if fn is None:
            fnty = ir.FunctionType(_F64, [_F64] * len(args))
            fn = ir.Function(self.mod, fnty, name=full)
        return self.b.call(fn, [self.v(a) for a in args])

    # -- float arithmetic ---------------------------------------------------
    def add(self, a, b):
        return self.b.fadd(self.v(a), self.v(b))

    def sub(self, a, b):
        return self.b.fsub(self.v(a), self.v(b))

    def mul(self, a, b):
        return self.b.fmul(self.v(a), self.v(b))

    def div(self, a, b):
        return self.b.fdiv(self.v(a), self.v(b))

    def neg(self, a):
        return self.b.fneg(self.v(a))

    def fma(self, a, b, c):
        """Exact single-rounding a*b + c (needed for error-free transforms)."""
        return self.intr("llvm.fma", a, b, c)

    def mad(self, a, b, c):
        """a*b + c, fused if the target can (polynomials)."""
        return self.intr("llvm.fmuladd", a, b, c)

    def abs(self, a):
        return self.intr("llvm.fabs", a)

    def floor(self, a):
        return self.intr("llvm.floor", a)

    def trunc(self, a):
        return self.intr("llvm.trunc", a)

    def rint(self, a):
        return self.intr("llvm.roundeven", a)

    def sqrt(self, a):
        return self.intr("llvm.sqrt", a)

    def copysign(self, mag, sgn):
        return self.intr("llvm.copysign", mag, sgn)

    def poly(self, x, coeffs):
        acc = self.k(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.mad(acc, x, c)
        return acc

    # -- comparisons / selects ----------------------------------------------
    def cmp(self, op, a, b):
        """Ordered comparison (false when either is NaN)."""
        return self.b.fcmp_ordered(op, self.v(a), self.v(b))

    def ucmp(self, op, a, b):
        """Unordered comparison (true when either is NaN)."""
        return self.b.fcmp_unordered(op, self.v(a), self.v(b))

    def isnan(self, a):
        return self.b.fcmp_unordered("uno", a, a)

    def isinf(self, a):
        return self.cmp("==", self.abs(a), float("inf"))

    def isfinite(self, a):
        return self.cmp("<", self.abs(a), float("inf"))

    def sel(self, c, a, b):
        return self.b.select(c, self.v(a), self.v(b))

    def and_(self, a, b):
        return self.b.and_(a, b)

    def or_(self, a, b):
        return self.b.or_(a, b)

    def not_(self, a):
        return self.b.not_(a)

    def clamp(self, x, lo, hi):
        """min(max(x, lo), hi) with NaN -> lo (result never NaN)."""
        x = self.sel(self.cmp(">=", x, lo), x, lo)
        return self.sel(self.cmp("<=", x, hi), x, hi)

    def signbit(self, x):
        return self.b.icmp_signed("<", self.bits(x), self.ki(0))

    # -- integer helpers ----------------------------------------------------
    def bits(self, x):
        return self.b.bitcast(self.v(x), _I64)

    def from_bits(self, i):
        return self.b.bitcast(i, _F64)

    def to_i32(self, x):
        """fptosi to i32; caller guarantees x is finite and in range."""
        return self.b.fptosi(x, _I32)

    def i32_to_f(self, i):
        return self.b.sitofp(i, _F64)

    def pow2(self, n32):
        """2.0**n for i32 n in [-1022, 1023], built from exponent bits."""
        n = self.b.sext(n32, _I64)
        return self.from_bits(self.b.shl(self.b.add(n, self.ki(1023)), self.ki(52)))

    def scale2(self, y, n32, narrow: bool = False):
        """y * 2**n for n in [-2044, 2046] (float32: [-252, 254]) with a single final
        rounding; ``narrow``: n is known to lie in the normal exponents' range, so
        2**n is one number. Where the lowering has ``ldexp``, one ``llvm.ldexp``."""
        if lowering_of(self.b).ldexp:
            ty = self.k(0.0).type
            name = f"llvm.ldexp.{'f32' if ty == ir.FloatType() else 'f64'}.i32"
            fn = self.mod.globals.get(name)
            if fn is None:
                fn = ir.Function(self.mod, ir.FunctionType(ty, [ty, _I32]), name=name)
            return self.b.call(fn, [self.v(y), n32])
        if narrow:
            return self.mul(y, self.pow2(n32))
        n1 = self.b.ashr(n32, self.ki(1, _I32))
        n2 = self.b.sub(n32, n1)
        return self.mul(self.mul(y, self.pow2(n1)), self.pow2(n2))

    # -- error-free transforms ------------------------------------------------
    def two_sum(self, a, b):
        s = self.add(a, b)
        bb = self.sub(s, a)
        err = self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))
        return s, err

    def fast_two_sum(self, a, b):
        """Requires |a| >= |b| (or a == 0)."""
        s = self.add(a, b)
        return s, self.sub(b, self.sub(s, a))


_INF = float("inf")
_NAN = float("nan")
_FALSE = ir.Constant(ir.IntType(1), 0)


# ---------------------------------------------------------------------------
# cores (all operate on double values)
# ---------------------------------------------------------------------------


def _exp_core(E: _E, x, shift: int = 0):
    """e^x * 2^shift for x already clamped to [-746, 712] (never NaN)."""
    k = E.rint(E.mul(x, _INVLN2))
    rh = E.fma(E.neg(k), _LN2_HI, x)  # exact
    if E.lowp:
        r = E.fma(E.neg(k), _LN2_LO, rh)
        p = E.add(1.0, E.mad(E.mul(r, r), E.poly(r, _EXP_F), r))
    else:
        rl = E.mul(E.neg(k), _LN2_LO)
        r, rl = E.fast_two_sum(rh, rl)
        p = E.add(1.0, E.add(r, E.mad(E.mul(r, r), E.poly(r, _EXP_D), rl)))
    ki = E.to_i32(k)
    if shift:
        ki = E.b.add(ki, E.ki(shift, _I32))
    return E.scale2(p, ki)


def _expm1_core(E: _E, x):
    """expm1(x) for x clamped to [-60, 710] (never NaN)."""
    k = E.rint(E.mul(x, _INVLN2))
    nk = E.neg(k)
    rh = E.fma(nk, _LN2_HI, x)  # exact; == x when k == 0
    t = E.mul(nk, _LN2_LO)
    r = E.add(rh, t)
    c = E.add(E.sub(rh, r), t)  # rounding error of r
    r2 = E.mul(r, r)
    coeffs = _EXPM1_F if E.lowp else _EXPM1_D
    em = E.add(r, E.mad(E.mul(r2, r), E.poly(r, coeffs), E.mul(0.5, r2)))
    em = E.add(em, E.mad(c, em, c))  # e^(r+c)-1 ~ em + c(1+em)
    ki = E.to_i32(k)
    km1 = E.b.sub(ki, E.ki(1, _I32))
    s = E.pow2(km1)  # 2^(k-1), k in [-87, 1024]
    y = E.mul(E.fma(s, em, E.sub(s, 0.5)), 2.0)
    return E.sel(E.cmp("==", k, 0.0), em, y)


def _log_parts(E: _E, u, parts_only: bool = False):
    """Decompose u > 0 (finite; garbage otherwise) as 2^e (1 + f), 1 + f in [sqrt(1/2), sqrt(2)).

    Returns (e as double, f, s, hfsq, R) with log(u) = e ln2 + f - hfsq + s (hfsq + R),
    or only (e, f) if parts_only.
    """
    sub = E.cmp("<", u, 2.2250738585072014e-308)
    u2 = E.sel(sub, E.mul(u, 18014398509481984.0), u)  # * 2^54
    ix = E.bits(u2)
    bias = 0x3FE6A09E667F3BCD  # bits of sqrt(1/2)
    t = E.b.sub(ix, E.ki(bias))
    ei = E.b.trunc(E.b.ashr(t, E.ki(52)), _I32)
    mb = E.b.add(E.b.and_(t, E.ki(0x000FFFFFFFFFFFFF)), E.ki(bias))
    f = E.sub(E.from_bits(mb), 1.0)
    e = E.add(E.i32_to_f(ei), E.sel(sub, -54.0, 0.0))
    if parts_only:
        return e, f
    s = E.div(f, E.add(2.0, f))
    z = E.mul(s, s)
    coeffs = _LOG_F if E.lowp else _LOG_D
    R = E.mul(z, E.poly(z, coeffs))
    hfsq = E.mul(E.mul(0.5, f), f)
    return e, f, s, hfsq, R


def _log_val(E: _E, u, corr=None, e_add=None):
    """log(u) + corr (corr tiny, |corr| < ulp-level of log1p(f) terms)."""
    e, f, s, hfsq, R = _log_parts(E, u)
    if e_add is not None:
        e = E.add(e, e_add)
    lo = E.mul(e, _LN2_LO)
    if corr is not None:
        lo = E.add(lo, corr)
    inner = E.sub(hfsq, E.mad(s, E.add(hfsq, R), lo))
    return E.mad(e, _LN2_HI, E.sub(f, inner))


def _log1p_arg(E: _E, v):
    """u = 1 + v and the correction c/u with log1p(v) = log(u) + c/u."""
    u = E.add(1.0, v)
    big = E.cmp(">=", u, 2.0)
    c = E.sel(big, E.sub(1.0, E.sub(u, v)), E.sub(v, E.sub(u, 1.0)))
    return u, E.div(c, u)


def _log1p_val(E: _E, v):
    """log1p(v) for v > -1 finite (garbage elsewhere; callers select)."""
    u, c = _log1p_arg(E, v)
    return _log_val(E, u, c)


def _log_scaled(E: _E, x, c_hi, c_lo, e_hi, e_lo):
    """log(x) * C where C = c_hi + c_lo and ln2 * C = e_hi + e_lo (e_hi short)."""
    return _log_scaled_parts(E, _log_parts(E, x), c_hi, c_lo, e_hi, e_lo)


def _log_scaled_parts(E: _E, parts, c_hi, c_lo, e_hi, e_lo):
    """_log_scaled from the parts (e, f, s, hfsq, R) of x (any float type)."""
    e, f, s, hfsq, R = parts
    hi = E.sub(f, hfsq)
    lo = E.add(E.sub(E.sub(f, hi), hfsq), E.mul(s, E.add(hfsq, R)))
    vh = E.mul(hi, c_hi)
    ve = E.fma(hi, c_hi, E.neg(vh))
    vl = E.add(ve, E.mad(hi, c_lo, E.mul(lo, c_hi)))
    # e*e_hi is exact (e_hi == 1 or has 32 significant bits); |e*e_hi| >= |vh| unless e == 0
    eh = e if e_hi == 1.0 else E.mul(e, e_hi)
    w, err = E.fast_two_sum(eh, vh)
    tail = E.add(err, vl)
    if e_lo:
        tail = E.mad(e, e_lo, tail)
    return E.add(w, tail)


def _reduce_pio2(E: _E, ax, e32, mant: int):
    """Payne-Hanek: ax = M 2^e (M < 2^mant integer, ax >= 0 finite).

    Returns (q, rh, rl): ax = (4n + q) pi/2 + (rh + rl), |rh| <= ~pi/4.
    """
    nch = 3 if mant <= 24 else 5
    emax = 104 if mant <= 24 else 971
    nwin = (emax - 2) // 53 + 1
    e = e32
    # window of chunks: j0 = max(0, floor((e - 2) / 53)); vals[i] = C[j0 + i].
    # Selected with a barrel shifter over the bits of j0 (log-depth select tree:
    # 51 selects and 23 distinct constants for float64 instead of a 95-select chain).
    nbits = (nwin - 1).bit_length()
    if nbits:
        em2 = E.b.sub(e, E.ki(2, _I32))
        em2 = E.b.select(E.b.icmp_signed("<", em2, E.ki(0, _I32)), E.ki(0, _I32), em2)
        j0 = E.b.udiv(em2, E.ki(53, _I32))
        arr = [E.k(_PH_CHUNKS[m]) if m < len(_PH_CHUNKS) else E.k(0.0)
               for m in range(nch + (1 << nbits) - 1)]
        for st in reversed(range(nbits)):
            sh = 1 << st
            bit = E.b.icmp_unsigned("!=", E.b.and_(j0, E.ki(sh, _I32)), E.ki(0, _I32))
            need = nch + sh - 1
            arr = [E.sel(bit, arr[i + sh], arr[i]) for i in range(need)]
        vals = [arr[0]] + [E.mul(arr[i], 2.0 ** (-53 * i)) for i in range(1, nch)]
        s53 = E.b.mul(j0, E.ki(53, _I32))
        # xs = ax 2^(-53 j0) = M 2^ep (exact)
        xs = E.mul(ax, E.pow2(E.b.sub(E.ki(0, _I32), s53)))
        ep = E.b.sub(e, s53)
    else:
        vals = [E.k(_PH_CHUNKS[i] * 2.0 ** (-53 * i)) for i in range(nch)]
        xs, ep = ax, e
    # cut the bits of the first chunk worth >= 2^(2-ep) (they give multiples of 4)
    epc = E.b.select(E.b.icmp_signed("<", ep, E.ki(2, _I32)), E.ki(2, _I32), ep)
    sc = E.pow2(E.b.sub(epc, E.ki(2, _I32)))
    isc = E.pow2(E.b.sub(E.ki(2, _I32), epc))
    c0 = vals[0]
    vals[0] = E.sub(c0, E.mul(E.trunc(E.mul(c0, sc)), isc))
    ph, pl = [], []
    for c in vals[:-1]:
        h = E.mul(xs, c)
        ph.append(h)
        pl.append(E.fma(xs, c, E.neg(h)))  # xs*c == h + l exactly
    ph.append(E.mul(xs, vals[-1]))  # last product: rounding error is below 2^-150

    def cmod4(t):  # t - 4*round(t/4), exact, in [-2, 2]
        return E.fma(E.rint(E.mul(t, 0.25)), -4.0, t)

    if nch == 3:
        # float32 argument (24-bit M): needed absolute accuracy ~2^-62.  The exact
        # sum is a0 + pl0 + a1 + pl1 + ph2; two two-sums keep the large part exact.
        a, ae = E.two_sum(cmod4(ph[0]), pl[0])
        s, se = E.two_sum(a, cmod4(ph[1]))
        k = E.rint(s)
        fh = E.sub(s, k)  # exact
        lo = E.add(E.add(ae, se), E.add(pl[1], ph[2]))
        rh = E.mul(E.add(fh, lo), _PIO2[0])
        rl = None
    else:
        # float64: needed absolute accuracy ~2^-116 (the closest double to a multiple of
        # pi/2 is ~2^-61 away).  Error-free extraction into fixed-point levels of 2^-49
        # and 2^-99; sums of the extracted parts are exact in any order.
        terms1 = [cmod4(ph[0]), pl[0], cmod4(ph[1]), pl[1], ph[2]]  # each |t| <= 2
        q1, rem = [], []
        for t in terms1:  # sigma = 1.5 * 2^3: q = t rounded to a multiple of 2^-49
            q = E.sub(E.add(t, 12.0), 12.0)
            q1.append(q)
            rem.append(E.sub(t, q))  # |rem| <= 2^-50
        Q = _tree_sum(E, q1)  # exact: multiples of 2^-49, |Q| <= 10
        k = E.rint(Q)
        fh = E.sub(Q, k)  # exact, |fh| <= 1/2
        sig2 = 1.5 * 2.0 ** -47  # multiples of 2^-99
        q2, rem2 = [], [pl[3], ph[4]]
        for t in rem + [pl[2], ph[3]]:  # each |t| <= 2^-50
            q = E.sub(E.add(t, sig2), sig2)
            q2.append(q)
            rem2.append(E.sub(t, q))
        F2 = _tree_sum(E, q2)  # exact: |F2| < 2^-47
        F3 = _tree_sum(E, rem2)  # tiny: rounding errors ~2^-150
        s, t = E.two_sum(fh, F2)
        fhi, flo = E.fast_two_sum(s, E.add(t, F3))
        rh = E.mul(fhi, _PIO2[0])
        rl = E.add(E.fma(fhi, _PIO2[0], E.neg(rh)),
                   E.mad(fhi, _PIO2[1], E.mul(flo, _PIO2[0])))
    q = E.b.and_(E.to_i32(k), E.ki(3, _I32))
    return q, rh, rl


def _tree_sum(E: _E, xs):
    xs = list(xs)
    while len(xs) > 1:
        xs = [E.add(xs[i], xs[i + 1]) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
    return xs[0]


def _exponent_for_reduction(E: _E, ax, lowp: bool):
    """e (i32) with ax = M 2^e, M < 2^53 (or 2^24 for float32-origin values)."""
    ef = E.b.trunc(E.b.lshr(E.bits(ax), E.ki(52)), _I32)  # ax >= 0: no sign bit
    ef = E.b.select(E.b.icmp_signed("<", ef, E.ki(1, _I32)), E.ki(1, _I32), ef)
    # double: e = ef - 1075.  float32 value: mantissa has 24 bits -> e = ef - 1023 - 23,
    # but a float32 denormal (ef - 1023 < -126) is M 2^-149 with M < 2^23.
    if lowp:
        e = E.b.sub(ef, E.ki(1023 + 23, _I32))
        lo = E.ki(-149, _I32)
        return E.b.select(E.b.icmp_signed("<", e, lo), lo, e)
    return E.b.sub(ef, E.ki(1075, _I32))


def _sincos_kernels(E: _E, rh, rl):
    z = E.mul(rh, rh)
    if E.lowp:
        s = E.mad(E.mul(rh, z), E.poly(z, _SIN_F), rh)
        c = E.add(E.sub(1.0, E.mul(0.5, z)), E.mul(E.mul(z, z), E.poly(z, _COS_F)))
        return s, c
    s = E.add(rh, E.mad(E.mul(rh, z), E.poly(z, _SIN_D), rl))
    hz = E.mul(0.5, z)
    w = E.sub(1.0, hz)
    tail = E.sub(E.mul(E.mul(z, z), E.poly(z, _COS_D)), E.mul(rh, rl))
    c = E.add(w, E.add(E.sub(E.sub(1.0, w), hz), tail))
    return s, c


def _reduce_pio2_fast(E: _E, ax):
    """Cody-Waite, for float64 ``0 <= ax < FAST_TRIG_LIMIT``: ``(q, rh, rl)`` with
    ``ax = (4n + q) pi/2 + (rh + rl)`` as :func:`_reduce_pio2` gives them.

    ``k = rint(ax 2/pi) < 2^20``; ``ax - k P1`` is exact in one fma (both are multiples of
    ``ulp(P1) = 2^-52`` when ``ax >= 1``, of ``2^-53`` when ``k <= 1``, and the difference is
    below 1); ``k P2`` is split exactly by an fma and subtracted with a two-sum; ``k P3``
    joins the tail. The part of pi/2 left out is ``k * 2^-163`` at most, and the reduced
    argument of a double below 2^20 is far larger than 2^-100 (the tests check the doubles
    nearest to multiples of pi/2), so ``rh + rl`` is accurate to ~2^-60 relative at worst.
    """
    p1, p2, p3 = _PIO2_PARTS
    k = E.rint(E.mul(ax, _TWO_OVER_PI))
    r1 = E.fma(E.neg(k), p1, ax)  # exact
    th = E.mul(k, p2)
    tl = E.fma(k, p2, E.neg(th))  # k p2 = th + tl exactly
    s, se = E.two_sum(r1, E.neg(th))
    lo = E.sub(E.sub(se, tl), E.mul(k, p3))
    rh, rl = E.two_sum(s, lo)
    q = E.b.and_(E.to_i32(k), E.ki(3, _I32))
    return q, rh, rl


def _trig(E: _E, x, which: str, fast: bool = False):
    """sin/cos/tan of any argument (Payne-Hanek); ``fast``: float64 only, correct for
    ``|x| < FAST_TRIG_LIMIT`` (Cody-Waite; other arguments give a finite garbage value:
    the caller runs the exact version for them, :mod:`qtrace.kernels.fastmath`)."""
    ax = E.abs(x)
    if fast:
        fin = None
        q, rh, rl = _reduce_pio2_fast(E, E.sel(E.cmp("<", ax, FAST_TRIG_LIMIT), ax, 0.0))
    else:
        fin = E.isfinite(x)
        ax = E.sel(fin, ax, 0.0)
        e = _exponent_for_reduction(E, ax, E.lowp)
        q, rh, rl = _reduce_pio2(E, ax, e, 24 if E.lowp else 53)
    s, c = _sincos_kernels(E, rh, rl)
    odd = E.b.icmp_unsigned("!=", E.b.and_(q, E.ki(1, _I32)), E.ki(0, _I32))
    xneg = E.signbit(x)
    if which == "cos":
        v = E.sel(odd, s, c)
        qn = E.b.and_(E.b.add(q, E.ki(1, _I32)), E.ki(2, _I32))
        neg = E.b.icmp_unsigned("!=", qn, E.ki(0, _I32))
    else:
        if which == "sin":
            v = E.sel(odd, c, s)
        else:
            num = E.sel(odd, E.neg(c), s)
            den = E.sel(odd, s, c)
            v = E.div(num, den)
        if which == "sin":
            qn = E.b.and_(q, E.ki(2, _I32))
            neg = E.b.icmp_unsigned("!=", qn, E.ki(0, _I32))
            neg = E.b.xor(neg, xneg)
        else:
            neg = xneg
    v = E.sel(neg, E.neg(v), v)
    if which != "cos":
        v = E.sel(E.cmp("<", E.abs(x), 2.0 ** -27), x, v)
    return v if fin is None else E.sel(fin, v, _NAN)


def trig_fast(builder: ir.IRBuilder, which: str, x: ir.Value) -> ir.Value:
    """float64 ``sin``/``cos``/``tan`` of ``x``, correct for ``|x| < FAST_TRIG_LIMIT``
    (a finite garbage value elsewhere): the fast pass of :mod:`qtrace.kernels.fastmath`."""
    return _trig(_E(builder, lowp=False), x, which, fast=True)


def _atan2_core(E: _E, ay, ax, xneg):
    """atan2(|y|, |x|) folded with the x-sign rule: result in [0, pi] (or NaN).

    One division: t = ay/ax, (ay-ax)/(ay+ax) or -ax/ay, so |t| <= tan(pi/8);
    atan2 = offset + atan(t) with offset in {0, pi/4, pi/2} (pi - that if x < 0).
    """
    if not E.lowp:  # keep ay + ax finite and 1/den normal
        mx = E.sel(E.cmp(">", ay, ax), ay, ax)
        sc = E.sel(E.cmp(">", mx, 2.0 ** 1000), 2.0 ** -8,
                   E.sel(E.cmp("<", mx, 2.0 ** -1000), 2.0 ** 100, 1.0))
        ay = E.mul(ay, sc)
        ax = E.mul(ax, sc)
    bothinf = E.and_(E.isinf(ay), E.isinf(ax))
    nbi = E.not_(bothinf)
    ra = E.and_(E.cmp("<=", ay, E.mul(ax, _TAN_PI8)), nbi)
    rc = E.and_(E.cmp(">=", ay, E.mul(ax, _TAN_3PI8)), nbi)
    num = E.sel(ra, ay, E.sel(rc, E.neg(ax), E.sub(ay, ax)))  # ay - ax is exact in range B
    dsum = E.add(ay, ax)
    den = E.sel(ra, ax, E.sel(rc, ay, dsum))
    num = E.sel(bothinf, 0.0, num)
    den = E.sel(bothinf, 1.0, den)
    den = E.sel(E.cmp("==", den, 0.0), 1.0, den)

    def pick(i):
        a = E.sel(xneg, _PI[i], 0.0)
        b = E.sel(xneg, _PI3O4[i], _PIO4[i])
        return E.sel(ra, a, E.sel(rc, _PIO2[i], b))

    ohi, olo = pick(0), pick(1)
    if E.lowp:
        t = E.div(num, den)
        z = E.mul(t, t)
        p = E.mad(E.mul(t, z), E.poly(z, _ATAN_F), t)
        sp = E.sel(xneg, E.neg(p), p)
        return E.add(ohi, E.add(sp, olo))
    # t + tl = num / (ay + ax) to ~2^-100: the rounding of ay + ax and of the
    # quotient are both corrected (exact residual via fma).
    isb = E.not_(E.or_(E.or_(ra, rc), bothinf))
    dl = E.sel(isb, E.two_sum(ay, ax)[1], 0.0)  # ay + ax == den + dl exactly
    inv = E.div(1.0, den)
    t = E.mul(num, inv)
    res = E.fma(E.neg(t), den, num)
    tl = E.mul(E.fma(E.neg(t), dl, res), inv)
    # no correction where the residual is not exact (t near the denormal range) or
    # meaningless (den = inf, t = +-0 exactly)
    tl = E.sel(E.cmp(">", E.abs(t), 2.0 ** -960), tl, 0.0)
    z = E.mul(t, t)
    # atan(t + tl) = atan(t) + tl / (1 + t^2) + ...
    small = E.mad(E.mul(t, z), E.poly(z, _ATAN_D), E.mul(tl, E.mad(z, E.sub(z, 1.0), 1.0)))
    pt = E.sel(xneg, E.neg(t), t)
    pc = E.sel(xneg, E.neg(small), small)
    h, err = E.fast_two_sum(ohi, pt)  # |ohi| >= |t| or ohi == 0
    return E.add(h, E.add(err, E.add(pc, olo)))


# ---------------------------------------------------------------------------
# public functions (double in, double out)
# ---------------------------------------------------------------------------


def _f_exp(E, x):
    xc = E.clamp(x, -746.0, 710.0)
    return E.sel(E.isnan(x), x, _exp_core(E, xc))


def _f_exp2(E, x):
    xc = E.clamp(x, -1080.0, 1025.0)
    k = E.rint(xc)
    r = E.sub(xc, k)  # exact
    rh = E.mul(r, _LN2)
    if E.lowp:
        p = E.add(1.0, E.mad(E.mul(rh, rh), E.poly(rh, _EXP_F), rh))
    else:
        rl = E.add(E.fma(r, _LN2, E.neg(rh)), E.mul(r, _LN2_TAIL))
        p = E.add(1.0, E.add(rh, E.mad(E.mul(rh, rh), E.poly(rh, _EXP_D), rl)))
    res = E.scale2(p, E.to_i32(k))
    return E.sel(E.isnan(x), x, res)


def _f_expm1(E, x):
    xc = E.clamp(x, -60.0, 710.0)
    res = _expm1_core(E, xc)
    res = E.sel(E.cmp("<", E.abs(x), 2.0 ** -54), x, res)
    return E.sel(E.isnan(x), x, res)


def _log_specials(E, x, res):
    res = E.sel(E.cmp("==", x, _INF), x, res)
    res = E.sel(E.cmp("==", x, 0.0), -_INF, res)
    return E.sel(E.ucmp("<", x, 0.0), _NAN, res)  # x < 0 or NaN


def _f_log(E, x):
    return _log_specials(E, x, _log_val(E, x))


def _f_log2(E, x):
    res = _log_scaled(E, x, _INVLN2, _INVLN2_LO, 1.0, 0.0)
    return _log_specials(E, x, res)


def _f_log10(E, x):
    res = _log_scaled(E, x, _LOG10E, _LOG10E_LO, _LOG10_2_HI, _LOG10_2_LO)
    return _log_specials(E, x, res)


def _f_log1p(E, x):
    res = _log1p_val(E, x)
    res = E.sel(E.cmp("==", x, _INF), x, res)
    res = E.sel(E.cmp("<", E.abs(x), 2.0 ** -54), x, res)
    res = E.sel(E.cmp("==", x, -1.0), -_INF, res)
    return E.sel(E.ucmp("<", x, -1.0), _NAN, res)


def _f_sin(E, x):
    return _trig(E, x, "sin")


def _f_cos(E, x):
    return _trig(E, x, "cos")


def _f_tan(E, x):
    return _trig(E, x, "tan")


def _f_tanh(E, x):
    ax = E.abs(x)
    axc = E.clamp(ax, 0.0, 20.0)
    if E.lowp:
        em = _expm1_core(E, E.mul(2.0, axc))
        small = E.cmp("<", ax, 0.55)
        res = E.div(E.sel(small, em, 2.0), E.add(em, 2.0))
        res = E.sel(small, res, E.sub(1.0, res))
    else:
        # |x| < 0.625: x + x^3 T(x^2); above, 1 - 2/(e^(2|x|) + 1) with the rounding of
        # 1 - q corrected (q <= 0.45: the errors of exp, of e + 1 and of the quotient reach
        # the result at most ~0.8 ulp; measured max 1.31 ulp, 95% correctly rounded, where
        # correcting e + 1 and the quotient too gave 0.81 ulp at 25% more time); e^40:
        # tanh rounds to 1
        z = E.mul(ax, ax)
        small = E.mad(E.mul(ax, z), E.poly(z, _TANH_D), ax)
        q = E.div(2.0, E.add(_exp_core(E, E.mul(2.0, axc)), 1.0))
        s = E.sub(1.0, q)
        big = E.add(s, E.sub(E.sub(1.0, s), q))   # (1 - s) - q: exact
        res = E.sel(E.cmp("<", ax, 0.625), small, big)
    res = E.copysign(res, x)
    res = E.sel(E.cmp("<", ax, 2.0 ** -27), x, res)
    return E.sel(E.isnan(x), x, res)


def _half_exp_abs(E, ax):
    """e^|x| / 2 without premature overflow."""
    return _exp_core(E, E.clamp(ax, 0.0, 712.0), shift=-1)


def _f_sinh(E, x):
    ax = E.abs(x)
    z = E.mul(x, x)
    ps = E.mad(E.mul(ax, z), E.poly(z, _SINH_F if E.lowp else _SINH_D), ax)
    h = _half_exp_abs(E, ax)
    pl = E.sub(h, E.div(0.25, h))
    res = E.sel(E.cmp("<", ax, 1.0), ps, pl)
    res = E.copysign(res, x)
    return E.sel(E.isnan(x), x, res)


def _f_cosh(E, x):
    h = _half_exp_abs(E, E.abs(x))
    res = E.add(h, E.div(0.25, h))
    return E.sel(E.isnan(x), x, res)


def _f_arctan(E, x):
    r = _atan2_core(E, E.abs(x), E.k(1.0), _FALSE)
    r = E.copysign(r, x)
    return E.sel(E.isnan(x), x, r)


def _f_arctan2(E, y, x):
    r = _atan2_core(E, E.abs(y), E.abs(x), E.signbit(x))
    r = E.copysign(r, y)
    return E.sel(E.or_(E.isnan(x), E.isnan(y)), _NAN, r)


def _asin_w(E, ax):
    """sqrt(1 - ax^2) accurately (NaN for ax > 1)."""
    # 1 - ax^2 correctly rounded: fma(-ax, ax, 1), or with d = 1 - ax (exact for
    # ax >= 1/2) as d (2 - d) = fma(-d, d, 2d)
    d = E.sub(1.0, ax)
    w2 = E.sel(E.cmp("<", ax, 0.5), E.fma(E.neg(ax), ax, 1.0), E.fma(E.neg(d), d, E.add(d, d)))
    return E.sqrt(w2)


def _f_arcsin(E, x):
    ax = E.abs(x)
    w = _asin_w(E, ax)
    r = _atan2_core(E, ax, w, _FALSE)
    r = E.copysign(r, x)
    r = E.sel(E.cmp("<", ax, 2.0 ** -27), x, r)
    return E.sel(E.ucmp(">", ax, 1.0), _NAN, r)


def _f_arccos(E, x):
    ax = E.abs(x)
    w = _asin_w(E, ax)
    r = _atan2_core(E, w, ax, E.signbit(x))
    return E.sel(E.ucmp(">", ax, 1.0), _NAN, r)


def _f_arcsinh(E, x):
    ax = E.abs(x)
    big = E.cmp(">", ax, 2.0 ** 28)
    t = E.mul(ax, ax)
    v = E.add(ax, E.div(t, E.add(1.0, E.sqrt(E.add(1.0, t)))))
    u, c = _log1p_arg(E, v)
    u = E.sel(big, ax, u)
    c = E.sel(big, 0.0, c)
    res = _log_val(E, u, c, E.sel(big, 1.0, 0.0))
    res = E.sel(E.isinf(x), ax, res)
    res = E.copysign(res, x)
    res = E.sel(E.cmp("<", ax, 2.0 ** -28), x, res)
    return E.sel(E.isnan(x), x, res)


def _f_arccosh(E, x):
    big = E.cmp(">", x, 2.0 ** 28)
    t = E.sub(x, 1.0)
    v = E.add(t, E.sqrt(E.fma(t, t, E.add(t, t))))  # t (2 + t), one rounding
    u, c = _log1p_arg(E, v)
    u = E.sel(big, x, u)
    c = E.sel(big, 0.0, c)
    res = _log_val(E, u, c, E.sel(big, 1.0, 0.0))
    res = E.sel(E.cmp("==", x, _INF), x, res)
    return E.sel(E.ucmp("<", x, 1.0), _NAN, res)


def _f_arctanh(E, x):
    ax = E.abs(x)
    small = E.cmp("<", ax, 0.5)
    t2 = E.add(ax, ax)
    num = E.sel(small, E.mul(t2, ax), t2)
    q = E.div(num, E.sub(1.0, ax))
    t = E.sel(small, E.add(t2, q), q)
    res = E.mul(0.5, _log1p_val(E, t))
    res = E.sel(E.cmp("==", ax, 1.0), _INF, res)
    res = E.copysign(res, x)
    res = E.sel(E.cmp("<", ax, 2.0 ** -28), x, res)
    return E.sel(E.ucmp(">", ax, 1.0), _NAN, res)


def _f_hypot(E, x, y):
    ax, ay = E.abs(x), E.abs(y)
    gt = E.cmp(">", ax, ay)
    big = E.sel(gt, ax, ay)
    small = E.sel(gt, ay, ax)
    if E.lowp:
        res = E.sqrt(E.fma(big, big, E.mul(small, small)))
    else:
        up = E.cmp("<", big, 2.0 ** -500)
        sc = E.sel(E.cmp(">", big, 2.0 ** 500), 2.0 ** -600, E.sel(up, 2.0 ** 600, 1.0))
        isc = E.sel(E.cmp(">", big, 2.0 ** 500), 2.0 ** 600, E.sel(up, 2.0 ** -600, 1.0))
        b, s = E.mul(big, sc), E.mul(small, sc)
        res = E.mul(E.sqrt(E.fma(b, b, E.mul(s, s))), isc)
    return E.sel(E.or_(E.isinf(x), E.isinf(y)), _INF, res)


def _f_cbrt(E, x):
    ax = E.abs(x)
    # bring a into [2^-1022, 2^1000] so that 2 t^3 + a cannot overflow
    sub = E.cmp("<", ax, 2.2250738585072014e-308)
    huge = E.cmp(">", ax, 2.0 ** 1000)
    a = E.mul(ax, E.sel(sub, 2.0 ** 54, E.sel(huge, 2.0 ** -99, 1.0)))
    post = E.sel(sub, 2.0 ** -18, E.sel(huge, 2.0 ** 33, 1.0))
    hx = E.b.trunc(E.b.lshr(E.bits(a), E.ki(32)), _I32)
    th = E.b.add(E.b.udiv(hx, E.ki(3, _I32)), E.ki(715094163, _I32))
    t = E.from_bits(E.b.shl(E.b.zext(th, _I64), E.ki(32)))
    a2 = E.add(a, a)
    for _ in range(2 if E.lowp else 3):  # Halley: 5 -> 15 -> 45 -> 135 bits
        t3 = E.mul(E.mul(t, t), t)
        t = E.mul(t, E.div(E.add(t3, a2), E.add(E.add(t3, t3), a)))
    if not E.lowp:
        y2 = E.mul(t, t)
        y2e = E.fma(t, t, E.neg(y2))
        y3 = E.mul(y2, t)
        y3e = E.mad(y2e, t, E.fma(y2, t, E.neg(y3)))
        r = E.sub(E.sub(a, y3), y3e)
        t = E.add(t, E.div(r, E.mul(3.0, y2)))
    t = E.mul(t, post)
    res = E.copysign(t, x)
    special = E.or_(E.cmp("==", ax, 0.0), E.ucmp("==", ax, _INF))  # 0, inf, nan
    return E.sel(special, x, res)


def _log2_dd(E: _E, ax):
    """log2(ax) as a double-double (relative error ~2^-65) for float64 pow."""
    e, f = _log_parts(E, ax, parts_only=True)
    # s = f / (2 + f) as s_h + s_l (one division)
    dh, dl = E.fast_two_sum(2.0, f)
    inv = E.div(1.0, dh)
    sh = E.mul(f, inv)
    res = E.fma(E.neg(sh), dh, f)  # exact residual
    sl = E.mul(E.fma(E.neg(sh), dl, res), inv)
    # log(m) = 2 s + (2/3) s^3 + s^3 z Q(z)
    s2h = E.mul(sh, sh)
    s2l = E.fma(sh, sh, E.neg(s2h))
    s3h = E.mul(s2h, sh)
    s3l = E.add(E.fma(s2h, sh, E.neg(s3h)), E.mad(s2l, sh, E.mul(3.0, E.mul(s2h, sl))))
    t1h = E.mul(s3h, _TWO3[0])
    t1l = E.add(E.fma(s3h, _TWO3[0], E.neg(t1h)), E.mad(s3h, _TWO3[1], E.mul(s3l, _TWO3[0])))
    t2 = E.mul(E.mul(s3h, s2h), E.poly(s2h, _LOGQ_D))
    lh, ll = E.fast_two_sum(E.mul(2.0, sh), t1h)
    lh, ll = E.fast_two_sum(lh, E.add(ll, E.add(E.mad(2.0, sl, t1l), t2)))
    # times 1/ln2 (double-double), plus the exponent
    th = E.mul(lh, _INVLN2)
    tl = E.add(E.fma(lh, _INVLN2, E.neg(th)), E.mad(lh, _INVLN2_LO, E.mul(ll, _INVLN2)))
    w, wl = E.fast_two_sum(e, th)
    return E.fast_two_sum(w, E.add(wl, tl))


def _pow_finish(E: _E, x, y, r):
    """C99 pow special cases around r = |x|^y (NaN-propagating)."""
    fy = E.floor(y)
    yint = E.cmp("==", fy, y)
    hy = E.mul(y, 0.5)
    yodd = E.and_(E.and_(yint, E.isfinite(y)), E.cmp("!=", E.floor(hy), hy))
    r = E.sel(E.and_(yodd, E.signbit(x)), E.neg(r), r)
    bad = E.and_(E.and_(E.cmp("<", x, 0.0), E.isfinite(x)),
                 E.and_(E.not_(yint), E.isfinite(y)))
    r = E.sel(bad, _NAN, r)
    r = E.sel(E.and_(E.cmp("==", x, -1.0), E.isinf(y)), 1.0, r)
    one = E.or_(E.cmp("==", y, 0.0), E.cmp("==", x, 1.0))
    return E.sel(one, 1.0, r)


def _f_power(E, x, y):
    """pow(x, y) = 2^(y log2|x|) with C99 special cases."""
    ax = E.abs(x)
    zero, infnan = E.cmp("==", ax, 0.0), E.ucmp("==", ax, _INF)
    if E.lowp:
        # float32 operands: log2 in double with the low-degree kernel (relative error of
        # log1p(f) ~3e-11, so |y log2 x| < 150 gives < 0.1 ulp(float)) and a double exp2
        L = _log_scaled(E, ax, _INVLN2, _INVLN2_LO, 1.0, 0.0)
        L = E.sel(zero, -_INF, E.sel(infnan, ax, L))
        r = _f_exp2(E, E.mul(y, L))
        return _pow_finish(E, x, y, r)
    wh0, wl0 = _log2_dd(E, ax)
    wh0 = E.sel(zero, -_INF, E.sel(infnan, ax, wh0))
    wh = E.mul(y, wh0)
    wl = E.mad(y, wl0, E.fma(y, wh0, E.neg(wh)))
    wl = E.sel(E.isfinite(wh), wl, 0.0)
    wh, wl = E.fast_two_sum(wh, wl)
    wl = E.sel(E.cmp("<", E.abs(wh), 1100.0), wl, 0.0)  # wh is clamped below
    # 2^(wh + wl)
    whc = E.clamp(wh, -1100.0, 1100.0)
    k = E.rint(whc)
    rh0, wl = E.fast_two_sum(E.sub(whc, k), wl)  # whc - k is exact
    rh = E.mul(rh0, _LN2)
    rl = E.add(E.fma(rh0, _LN2, E.neg(rh)), E.mad(rh0, _LN2_TAIL, E.mul(wl, _LN2)))
    p = E.add(1.0, E.add(rh, E.mad(E.mul(rh, rh), E.poly(rh, _EXP_D), rl)))
    r = E.scale2(p, E.to_i32(k))
    r = E.sel(E.isnan(wh), _NAN, r)
    return _pow_finish(E, x, y, r)


_IMPL = {
    "exp": _f_exp, "exp2": _f_exp2, "expm1": _f_expm1,
    "log": _f_log, "log2": _f_log2, "log10": _f_log10, "log1p": _f_log1p,
    "sin": _f_sin, "cos": _f_cos, "tan": _f_tan,
    "tanh": _f_tanh, "sinh": _f_sinh, "cosh": _f_cosh,
    "arcsin": _f_arcsin, "arccos": _f_arccos, "arctan": _f_arctan,
    "arctan2": _f_arctan2, "arcsinh": _f_arcsinh, "arccosh": _f_arccosh,
    "arctanh": _f_arctanh, "hypot": _f_hypot, "cbrt": _f_cbrt, "power": _f_power,
}
assert set(_IMPL) == SUPPORTED


def _libm_call(builder: ir.IRBuilder, sym: str, args):
    mod = builder.module
    fn = mod.globals.get(sym)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(_F64, [_F64] * len(args)), name=sym)
        fn.attributes.add("nounwind")
        fn.attributes.add("readnone")
    return builder.call(fn, list(args))


def emit_math(builder: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    """Emit ``name(*args)`` for scalar float/double args (all the same type).

    Returns a value of the same type.  Straight-line code; intrinsics are
    declared in ``builder.module`` on first use.
    """
    if name not in SUPPORTED:
        raise ValueError(f"mathlib: unsupported function {name!r}")
    nargs = 2 if name in _BINARY else 1
    args = list(args)
    if len(args) != nargs:
        raise TypeError(f"mathlib: {name} takes {nargs} argument(s), got {len(args)}")
    ty = args[0].type
    if any(a.type != ty for a in args):
        raise TypeError(f"mathlib: {name}: all arguments must have the same type")
    if isinstance(ty, ir.DoubleType):
        sym = _LIBM_F64.get(name)
        if sym is not None:
            return _libm_call(builder, sym, args)
        return _IMPL[name](_E(builder, lowp=False), *args)
    if isinstance(ty, ir.FloatType):
        from . import mathlib_f32  # (imports this module)

        native = mathlib_f32.NATIVE.get(name)
        if native is not None:
            return native(mathlib_f32.E32(builder), *args)
        dargs = [builder.fpext(a, _F64) for a in args]
        res = _IMPL[name](_E(builder, lowp=True), *dargs)
        return builder.fptrunc(res, _F32)
    raise TypeError(f"mathlib: {name}: unsupported type {ty} (need float or double)")
