"""Transcendental functions: the IR math library where it has the function, libm otherwise.

IR implementations keep element loops vectorizable; a libm call is a scalar call the
loop vectorizer cannot widen, but it is exact to the C library's accuracy.
"""

from __future__ import annotations

from llvmlite import ir

from . import fastmath, outline
from .builder import KernelBuilder, lowering_of
from .intrinsics import libdevice, libm

try:
    from . import mathlib as _ir_math
    IR_FUNCTIONS = frozenset(_ir_math.SUPPORTED)
except ImportError:  # pragma: no cover - the IR library is part of the package
    _ir_math = None
    IR_FUNCTIONS = frozenset()

C_NAMES = {
    "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
    "log10": "log10", "log1p": "log1p", "sin": "sin", "cos": "cos", "tan": "tan",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2", "sinh": "sinh",
    "cosh": "cosh", "tanh": "tanh", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh",
    "hypot": "hypot", "power": "pow", "cbrt": "cbrt",
}


# functions whose libdevice version misses NumPy's values: qtrace's IR version (branch-free
# arithmetic, valid on every target) is used on the GPU too.
# hypot: libdevice's __nv_hypot(1, DBL_MAX) overflows to inf (NumPy: DBL_MAX).
NOT_FROM_LIBDEVICE = frozenset({"hypot"})
FLOATS = (ir.FloatType, ir.DoubleType)   # the types with a fast trigonometry pass


def call(b: ir.IRBuilder, name: str, args: list) -> ir.Value:
    """``name(*args)``: IR where code may vectorize, libm inside scalar code (loop bodies).

    A per-element loop body runs one element at a time, so there is no vector width to
    win, and the C library's scalar routines are shorter than branch-free IR versions.
    Kernels that outline (:mod:`qtrace.kernels.outline`) call the IR functions, defined
    once per module.
    """
    lowering = lowering_of(b)
    if lowering.math == "libdevice":
        if name in NOT_FROM_LIBDEVICE:
            return _ir_math.emit_math(b, name, args)
        return libdevice(b, C_NAMES[name], args)
    emission = b.emission if isinstance(b, KernelBuilder) else None
    if emission is not None and name in fastmath.FAST and isinstance(args[0].type, FLOATS):
        if emission.trig_flags is not None:
            if emission.outline:   # (the range check stays inline: it sets the kernel's flag)
                value = outline.call(b, name + "_fast", args,
                                     lambda fb, a: fastmath.fast_value(fb, a[0], name))
                ok = fastmath.in_range(b, args[0])
            else:
                value, ok = fastmath.sincos(b, args[0], name)
            emission.trig_flags.append(ok)
            return value
        if emission.rare:   # the exact re-run of a range with a large argument
            return libm(b, C_NAMES[name], args)
    if name in IR_FUNCTIONS and not lowering.scalar:
        if emission is not None and emission.outline:
            return outline.call(b, name, args, lambda fb, a: _ir_math.emit_math(fb, name, a))
        return _ir_math.emit_math(b, name, args)
    return libm(b, C_NAMES[name], args)


def fmod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """C ``fmod`` (exact): LLVM's ``frem`` on the CPU (a libm call), libdevice's on a GPU,
    where NVPTX expands ``frem`` into an inexact ``x - trunc(x/y)*y``."""
    if lowering_of(b).math == "libdevice":
        return libdevice(b, "fmod", [x, y])
    return b.frem(x, y)
