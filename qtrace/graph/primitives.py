"""The primitive registry: every operation qtrace records, each declared once.

A primitive has a name, a fusion class and a shape/dtype rule. Elementwise primitives
name the NumPy ufunc whose type resolution they follow (so result dtypes are NumPy's
by construction). Scalar lowerings live in ``qtrace.kernels.scalar`` and VJP rules in
``qtrace.ad``, each a dict keyed by primitive name; a missing entry raises
``NotImplementedError`` naming the primitive and the rule kind.

Fusion classes:
    ``elementwise``  value at index i depends on inputs at (the broadcast of) i;
    ``view``         an index remapping of one input (transpose, slice, reshape, ...);
    ``gather``       reads its first input at data-dependent indices;
    ``scatter``      writes into a copy of its first input at data-dependent indices;
    ``reduce``       folds axes of its input; ``scan`` prefix-folds one axis;
    ``update``       its first input with a strided region replaced by its second (a write
                     through a view: ``x[1:-1, ::2] = v``), computed per element of the
                     output like ``elementwise``: ``inside ? v[(i - start) / step] : x[i]``;
    ``concat``       writes each input into a region of its output;
    ``library``      computed by a device library (BLAS); a fusion boundary;
    ``loop``         a per-element loop (and its adstack reverse) over a traced body;
    ``leaf``         inputs and constants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Primitive:
    name: str
    kind: str
    ufunc: str | None = None
    rule: Callable | None = None


PRIMITIVES: dict[str, Primitive] = {}
KINDS = ("elementwise", "view", "gather", "scatter", "update", "reduce", "scan", "concat", "library",
         "leaf", "loop")


def define(name: str, kind: str, ufunc: str | None = None, rule: Callable | None = None) -> Primitive:
    assert kind in KINDS, kind
    assert name not in PRIMITIVES, f"primitive {name} defined twice"
    prim = PRIMITIVES[name] = Primitive(name, kind, ufunc, rule)
    return prim


def lookup(name: str) -> Primitive:
    try:
        return PRIMITIVES[name]
    except KeyError:
        raise NotImplementedError(f"qtrace: no primitive named {name!r}") from None


def broadcast_shapes(op: str, *shapes: tuple) -> tuple:
    """NumPy broadcasting; ``ValueError`` naming the op and every shape on mismatch."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return first
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        size = 1
        for s in shapes:
            d = s[axis - ndim + len(s)] if axis - ndim + len(s) >= 0 else 1
            if d != 1:
                if size != 1 and d != size:
                    shown = " and ".join(str(tuple(s)) for s in shapes)
                    raise ValueError(f"{op}: operands could not be broadcast together with shapes {shown}")
                size = d
        out.append(size)
    return tuple(out)


# --- elementwise: (primitive name, NumPy ufunc name) ---------------------------------
# One entry per primitive; the tracer exposes each under the NumPy name.
ELEMENTWISE_UFUNCS = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "true_divide",
    "floor_divide": "floor_divide", "remainder": "remainder", "power": "power",
    "negative": "negative", "positive": "positive", "abs": "absolute", "sqrt": "sqrt",
    "square": "square", "reciprocal": "reciprocal", "exp": "exp", "exp2": "exp2",
    "expm1": "expm1", "log": "log", "log2": "log2", "log10": "log10", "log1p": "log1p",
    "sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "arcsin", "arccos": "arccos",
    "arctan": "arctan", "arctan2": "arctan2", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
    "arcsinh": "arcsinh", "arccosh": "arccosh", "arctanh": "arctanh", "floor": "floor",
    "ceil": "ceil", "trunc": "trunc", "rint": "rint", "sign": "sign", "minimum": "minimum",
    "maximum": "maximum", "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite",
    "logical_and": "logical_and", "logical_or": "logical_or", "logical_not": "logical_not",
    "logical_xor": "logical_xor", "equal": "equal", "not_equal": "not_equal", "less": "less",
    "less_equal": "less_equal", "greater": "greater", "greater_equal": "greater_equal",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "invert": "invert", "left_shift": "left_shift", "right_shift": "right_shift",
    "hypot": "hypot", "conj": "conjugate", "copysign": "copysign", "signbit": "signbit",
    "cbrt": "cbrt", "fmod": "fmod", "ldexp": "ldexp", "gcd": "gcd", "lcm": "lcm",
    "bitwise_count": "bitwise_count",
    # frexp: the mantissa (NumPy's first output; the exponent is frexp_exponent below)
    "frexp": "frexp",
}
for _name, _ufunc in ELEMENTWISE_UFUNCS.items():
    define(_name, "elementwise", ufunc=_ufunc)

COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
PREDICATES = frozenset({"isnan", "isinf", "isfinite"})
LOGICAL = frozenset({"logical_and", "logical_or", "logical_not", "logical_xor"})
TRANSCENDENTAL = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "arcsin",
    "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh",
    "hypot", "power", "cbrt", "fmod",
})

define("select", "elementwise")   # select(cond, x, y) == where
# frexp_exponent: the int32 exponent e of x = m * 2**e, 0.5 <= |m| < 1 (numpy.frexp's second
#       output; 0 for zeros, infinities and NaN); the mantissa is primitive ``frexp``
define("frexp_exponent", "elementwise")
# iota: no inputs; the value at each index is the flat (C-order) position, int64 (a generator:
#       computed where it is read, never stored)
define("iota", "elementwise")
# random_bits: inputs (key0, key1, counter): uint32 key words and a uint64 counter, output the
#       64 bits Threefry-2x32 (20 rounds) makes of the counter under the key (JAX's generator)
define("random_bits", "elementwise")
define("convert", "elementwise")  # params: () ; output dtype is the node's dtype
# complex parts (real inputs: the value itself, zeros, zeros); output: the part dtype
define("real", "elementwise")
define("imag", "elementwise")
define("angle", "elementwise")
define("complex", "elementwise")  # complex(x, y) = x + iy exactly, from real parts of one dtype
define("wrt", "view")             # identity marking a differentiated value; params: (level, index)
define("stop_gradient", "view")   # identity through which no gradient flows

# --- leaves ---------------------------------------------------------------------------
define("input", "leaf")
define("const", "leaf")           # params: (python value,)

# --- views: an index remapping of input 0 ---------------------------------------------
define("reshape", "view")         # params: (new shape,)
define("transpose", "view")       # params: (perm,)
define("broadcast", "view")       # params: (new shape,)  NumPy right-aligned broadcast
define("slice", "view")           # params: (starts, steps) ; output shape is the node's

# --- data-dependent indexing ----------------------------------------------------------
define("gather", "gather")        # inputs (x, idx...) ; params: () or (IN_RANGE,)
define("scatter", "scatter")      # inputs (x, values, idx...) ; params: (mode,) or (mode, IN_RANGE)
# IN_RANGE: every coordinate is known to lie in its axis (host-made: np.nonzero of a mask,
# slices, host index arrays checked when recorded): the kernel neither checks nor clamps
IN_RANGE = "in_range"


def in_range(node) -> bool:
    """Whether a gather's or scatter's coordinates are known to be in range."""
    return node.params[-1:] == (IN_RANGE,)

# slice_update: inputs (x, values); params (starts, steps); values has x's rank and holds the
# region: element k of axis a of values replaces x's element starts[a] + k * steps[a]
define("slice_update", "update")

# --- reductions -----------------------------------------------------------------------
REDUCTIONS = ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_any",
              "reduce_all", "argmax", "argmin")
for _name in REDUCTIONS:
    define(_name, "reduce")       # params: (axes,)  (argmax/argmin: one axis)
define("cumsum", "scan")          # params: (axis,)
define("concatenate", "concat")   # params: (axis,)
define("matmul", "library")       # NumPy matmul semantics (2-D operands, or stacks of them)
# lib: a function of a well-kept library (sort, linalg, fft, ...) run by the device runtime;
#      inputs are materialized buffers; params (name, static arguments, (shape, dtype) of
#      every output, component): one node per output component, like loops and calls
define("lib", "library")

# --- per-element loops (one output component per node: params end with the component) --
# loop:     inputs (init..., lower, upper, captured...) for fori, (init..., captured...) for
#           while; params (kind, n_state, body Subgraph, component). Component n_state is
#           the per-element trip count, n_state + 1 the largest trip count of the loops
#           nested in the body (sizes their adstack).
# loop_vjp: inputs (init..., lower, upper | count, captured..., ct..., depth[, nested
#           depth]); params (kind, n_state, body, reverse body, scatters, component):
#           cotangents of init, then per-element cotangents of captured values; a
#           component -1-j is the gradient of captured table j read by gathers (filled by
#           atomic adds; ``scatters`` lists (j, number of indices) per gather).
define("loop", "loop")
define("loop_vjp", "loop")
# call: a qt.jit function called inside a derivative, run as its own cached plan; inputs
#       (args..., captured...); params (body Subgraph with roles ("arg", i) and
#       ("captured", j), number of args, component). Its VJP calls the reverse body.
define("call", "library")


def ufunc_of(name: str) -> np.ufunc:
    return getattr(np, PRIMITIVES[name].ufunc)
