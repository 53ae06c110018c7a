"""Fast sin/cos/tan for the common argument range, with a verified fallback.

Exact trigonometry for *every* float needs a Payne-Hanek reduction, which dominates
the cost of a vectorized ``sin`` (float64: ~250 of its ~300 vector instructions). Almost
all arguments are small, though, so a kernel that uses ``sin``/``cos``/``tan`` runs its
range twice if it must:

1. a fast pass: a Cody-Waite reduction and the usual minimax kernels, plus an
   or-reduction of "some argument was outside the fast range" (``|x| < LIMIT``):

   * float32, entirely in float32 (:func:`qtrace.kernels.mathlib_f32.sincos_reduced`):
     pi/2 in three float parts (the first product exact by an fma, the second split
     exactly and subtracted with a fast two-sum, so the reduced argument is a
     float-float) and minimax kernels (``tan``: ``r + r^3 T(r^2)`` as a float-float, and
     ``-1/tan(r)`` with the division corrected by its fma residual in the odd quadrants),
     ``|x| < 2**19``;
   * float64 (:func:`qtrace.kernels.mathlib.trig_fast`): pi/2 in three double parts the
     same way, a double-double reduced argument and the exact path's own kernels,
     ``|x| < 2**20``;
2. only if that flag is set, the same range again with the exact functions (the C
   library's), overwriting every output of the range.

Both passes are straight-line and vectorize; in the fast range the results are within
1 ulp of the exact value (float32, every float below 2^19 checked: 96.5-97% correctly
rounded).
"""

from __future__ import annotations

from llvmlite import ir

from .mathlib import FAST_TRIG_LIMIT, trig_fast
from .mathlib_f32 import E32, sincos_reduced, tan_reduced

LIMIT = 2.0 ** 19   # float32 (float64: mathlib.FAST_TRIG_LIMIT)


FAST = ("sin", "cos", "tan")


def sincos(b: ir.IRBuilder, x: ir.Value, which: str):
    """``(value, in_range)`` of ``sin``/``cos``/``tan`` of a float32 or float64 ``x``
    (``in_range`` an i1)."""
    return fast_value(b, x, which), in_range(b, x)


def in_range(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """i1: whether :func:`fast_value` of ``x`` is exact, ``|x| < LIMIT`` (float64:
    ``FAST_TRIG_LIMIT``; NaN/Inf arguments take the exact path too: they give NaN there)."""
    limit = LIMIT if isinstance(x.type, ir.FloatType) else FAST_TRIG_LIMIT
    ax = b.call(b.module.declare_intrinsic("llvm.fabs", [x.type]), [x])
    return b.fcmp_ordered("<", ax, ir.Constant(x.type, limit))


def fast_value(b: ir.IRBuilder, x: ir.Value, which: str) -> ir.Value:
    """``sin``/``cos``/``tan`` of a float32 or float64 ``x`` in the fast range (see the
    module doc)."""
    if isinstance(x.type, ir.DoubleType):
        return trig_fast(b, which, x)
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
