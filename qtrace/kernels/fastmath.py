"""Fast float32 sin/cos/tan for the common argument range, with a verified fallback.

Exact trigonometry for *every* float needs a Payne-Hanek reduction, which dominates
the cost of a vectorized ``sin``. Almost all arguments are small, though, so a kernel
that uses float32 ``sin``/``cos``/``tan`` runs its range twice if it must:

1. a fast pass, entirely in float32 (:func:`qtrace.kernels.mathlib_f32.sincos_reduced`):
   Cody-Waite reduction with pi/2 in three float parts (the first product exact by an
   fma, the second split exactly and subtracted with a two-sum, so the reduced argument
   is a float-float) and minimax kernels (``tan``: ``r + r^3 T(r^2)`` as a
   float-float, and ``-1/tan(r)`` with the division corrected by its fma residual in
   the odd quadrants), plus an or-reduction of "some argument was outside
   ``|x| < 2**19``";
2. only if that flag is set, the same range again with the exact functions
   (:mod:`qtrace.kernels.mathlib`, a table-free Payne-Hanek in double precision),
   overwriting every output of the range.

Both passes are straight-line and vectorize; in the fast range the results are within
1 ulp of the float64 reference (correctly rounded in >99% of cases).
"""

from __future__ import annotations

from llvmlite import ir

from .mathlib_f32 import E32, sincos_reduced, tan_reduced

LIMIT = 2.0 ** 19


FAST = ("sin", "cos", "tan")


def sincos_f32(b: ir.IRBuilder, x: ir.Value, which: str):
    """``(value, in_range)`` of float32 ``sin``/``cos``/``tan`` of ``x`` (``in_range`` an i1)."""
    return fast_value(b, x, which), in_range(b, x)


def in_range(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """i1: whether :func:`fast_value` of ``x`` is exact, ``|x| < 2**19`` (NaN/Inf arguments
    take the exact path too: they give NaN there)."""
    E = E32(b)
    return E.cmp("<", E.abs(x), LIMIT)


def fast_value(b: ir.IRBuilder, x: ir.Value, which: str) -> ir.Value:
    """Float32 ``sin``/``cos``/``tan`` of ``x`` in the fast range (see the module doc)."""
    E = E32(b)
    if which == "tan":
        ax = E.abs(x)
        return E.sel(E.cmp("<", ax, 2.0 ** -12), x, tan_reduced(E, x))  # keeps -0
    q, s, c = sincos_reduced(E, x)
    if which == "cos":
        q = b.add(q, E.ki(1))
    use_cos = b.icmp_unsigned("!=", b.and_(q, E.ki(1)), E.ki(0))
    negate = b.icmp_unsigned("!=", b.and_(q, E.ki(2)), E.ki(0))
    v = E.sel(use_cos, c, s)
    v = E.sel(negate, E.neg(v), v)
    if which == "sin":  # sin(x) = x (keeps -0 and avoids underflow in z = r^2)
        v = E.sel(E.cmp("<", E.abs(x), 2.0 ** -12), x, v)
    return v
