"""Fast float32 sin/cos for the common argument range, with a verified fallback.

Exact trigonometry for *every* float needs a Payne-Hanek reduction, which dominates
the cost of a vectorized ``sin``. Almost all arguments are small, though, so a kernel
that uses float32 ``sin``/``cos`` runs its range twice if it must:

1. a fast pass: Cody-Waite reduction in double precision (pi/2 in three 33-bit parts,
   so ``k * part`` is exact for ``|k| < 2**20``) and fdlibm's kernel polynomials,
   plus an or-reduction of "some argument was outside ``|x| < 2**19``";
2. only if that flag is set, the same range again with the exact functions
   (:mod:`qtrace.kernels.mathlib`), overwriting every output of the range.

Both passes are straight-line and vectorize; in the fast range the results are
correctly rounded or within 1 ulp of the float64 reference.
"""

from __future__ import annotations

from llvmlite import ir

from .intrinsics import intrinsic

LIMIT = 2.0 ** 19
TWO_OVER_PI = 6.36619772367581382433e-01
PIO2_1 = 1.57079632673412561417e+00   # first 33 bits of pi/2
PIO2_2 = 6.07710050630396597660e-11   # next 33 bits
PIO2_3 = 2.02226624871116645580e-21   # next 33 bits
S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
     2.75573137070700676789e-06, -2.50507602534068634195e-08)
C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
     -2.75573143513906633035e-07, 2.08757232129817482790e-09)

D = ir.DoubleType()
I64 = ir.IntType(64)


def _c(v: float) -> ir.Constant:
    return ir.Constant(D, v)


def _horner(b: ir.IRBuilder, z, coeffs):
    acc = _c(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = intrinsic(b, "fma", [acc, z, _c(c)])
    return acc


def sincos_f32(b: ir.IRBuilder, x: ir.Value, which: str):
    """``(value, in_range)`` of float32 ``sin``/``cos`` of ``x`` (``in_range`` an i1)."""
    xd = b.fpext(x, D)
    k = intrinsic(b, "rint", [b.fmul(xd, _c(TWO_OVER_PI))])
    r = intrinsic(b, "fma", [b.fneg(k), _c(PIO2_1), xd])
    r = intrinsic(b, "fma", [b.fneg(k), _c(PIO2_2), r])
    r = intrinsic(b, "fma", [b.fneg(k), _c(PIO2_3), r])
    z = b.fmul(r, r)
    sin_r = intrinsic(b, "fma", [b.fmul(z, r), _horner(b, z, S), r])
    cos_r = intrinsic(b, "fma", [b.fmul(z, z), _horner(b, z, C), b.fsub(_c(1.0), b.fmul(z, _c(0.5)))])
    q = b.fptosi(k, I64)
    if which == "cos":
        q = b.add(q, ir.Constant(I64, 1))
    use_cos = b.icmp_unsigned("!=", b.and_(q, ir.Constant(I64, 1)), ir.Constant(I64, 0))
    negate = b.icmp_unsigned("!=", b.and_(q, ir.Constant(I64, 2)), ir.Constant(I64, 0))
    v = b.select(use_cos, cos_r, sin_r)
    v = b.select(negate, b.fneg(v), v)
    ax = intrinsic(b, "fabs", [xd])
    in_range = b.fcmp_ordered("<", ax, _c(LIMIT))
    # NaN/Inf arguments take the exact path too (they give NaN there)
    return b.fptrunc(v, ir.FloatType()), in_range
