"""Elementwise functions with NumPy names, dtypes (NEP 50) and broadcasting.

Each function records one primitive of ``qtrace.graph.primitives.ELEMENTWISE_UFUNCS``
after converting its operands to the loop dtypes NumPy's own type resolution picks.

Example:
    >>> import qtrace as qt, numpy as np
    >>> x = qt.asarray(np.array([1.0, 4.0], dtype=np.float32))
    >>> y = qt.sqrt(x) * 2.0          # Python float is weak: stays float32
    >>> str(y.dtype), y.tolist()
    ('float32', [2.0, 4.0])
"""

from __future__ import annotations

import math

import numpy as np

from ..graph.primitives import COMPARISONS, ELEMENTWISE_UFUNCS, broadcast_shapes, ufunc_of
from . import dtypes, selections
from .context import record, record_checked
from .convert import astype, cast, const_node, operand, place, promote, scalar_node, wrap
from .creation import asarray, full
from .selections import Selection
from .tensor import Tensor


def apply(name: str, *args) -> Tensor:
    """Record elementwise primitive ``name`` on ``args`` (tensors, arrays, Python scalars)."""
    if len(args) == 2:
        return apply2(name, args[0], args[1])
    if len(args) == 1:
        return apply1(name, args[0])
    return _apply(name, args)


def _apply(name: str, args) -> Tensor:
    """The general path: any operands, every check (errors are raised from here)."""
    if any(type(a) is Selection for a in args):  # x[mask] inside qt.jit
        return selections.elementwise(name, args)
    ops = [operand(a, name) for a in args]
    loop = dtypes.resolve_ufunc(name, ufunc_of(name), [(o.dtype, o.weak) for o in ops])
    if name in COMPARISONS:
        outside = _out_of_range_comparison(name, ops, loop)
        if outside is not None:
            return outside
    if name == "power" and loop[0].kind in "iu" and ops[1].node is None \
            and type(ops[1].value) is int and ops[1].value < 0:
        raise ValueError("qt.power: Integers to negative integer powers are not allowed.")
    nodes = place(ops, loop[: len(ops)], name)
    shape = broadcast_shapes(f"qt.{name}", *(n.shape for n in nodes))
    out_dtype = loop[len(ops)]
    weak = all(o.weak for o in ops)
    if all(n.prim == "const" for n in nodes):
        return wrap(fold(name, nodes, out_dtype, weak))
    return wrap(record(name, tuple(nodes), (), shape, out_dtype, weak=weak))


# The recording fast path. An elementwise op on tensors and Python scalars is decided by
# the operands' dtypes, weak flags and scalar types alone (the value of a scalar matters
# only for integer range checks, done per call), so its loop dtypes are looked up in
# ``_recipes`` keyed by exactly those; anything else (arrays, NumPy scalars, constants
# on both sides, comparisons with Python ints and integer powers of Python ints, whose
# rules depend on the value, operands on different devices) takes the general path,
# which also raises every error.
_recipes: dict = {}   # (name, (dtype, weak) or (scalar type, None) per operand) -> recipe
# (entries are only ever added, never changed or removed: the compiled recorder keeps a
# table of them by the identity of the key's parts)
_SCALARS = frozenset(dtypes.PY_SCALARS)


def _recipe(key: tuple, name: str, specs):
    """Loop dtypes of ``(name, operand specs...)`` for the fast path; ``None``: not eligible."""
    operands = [(dt, w) if w is not None else (dtypes.weak_dtype(dt()), True) for dt, w in specs]
    loop = dtypes.resolve_ufunc(name, ufunc_of(name), operands)  # raises for bad dtypes
    int_scalar = [w is None and dt is int for dt, w in specs]
    recipe = None
    if not (name in COMPARISONS and any(int_scalar)
            or name == "power" and loop[0].kind in "iu" and int_scalar[1]):
        weak = all(w for _, w in operands)
        # an int scalar placed as an integer constant needs the per-value range check
        checks = tuple(s and loop[i].kind in "iu" for i, s in enumerate(int_scalar))
        recipe = (tuple(loop), weak, checks)
    _recipes[key] = recipe
    return recipe


def apply2(name: str, x, y) -> Tensor:
    """A binary elementwise op (the recording fast path; see ``_recipes``)."""
    tx, ty = type(x), type(y)
    if tx is Tensor:
        nx = x._node
        kx, wx = nx.dtype, nx.weak
    elif tx in _SCALARS:
        nx, kx, wx = None, tx, None
    else:
        return _apply(name, (x, y))
    if ty is Tensor:
        ny = y._node
        ky, wy = ny.dtype, ny.weak
    elif ty in _SCALARS:
        ny, ky, wy = None, ty, None
    else:
        return _apply(name, (x, y))
    key = (name, kx, wx, ky, wy)
    recipe = _recipes.get(key)
    if recipe is None:
        if key in _recipes or _recipe(key, name, ((kx, wx), (ky, wy))) is None:
            return _apply(name, (x, y))
        recipe = _recipes[key]
    loop, weak, checks = recipe
    if nx is None:
        if ny is None or ny.prim == "const":
            return _apply(name, (x, y))
        device = ny.device
        if checks[0]:
            dtypes.check_int_fits(name, x, loop[0])
        nx = scalar_node(x, loop[0], device)
        shape = ny.shape
    elif ny is None:
        if nx.prim == "const":
            return _apply(name, (x, y))
        device = nx.device
        if checks[1]:
            dtypes.check_int_fits(name, y, loop[1])
        ny = scalar_node(y, loop[1], device)
        shape = nx.shape
    else:
        device = nx.device
        if ny.device is not device or (nx.prim == "const" and ny.prim == "const"):
            return _apply(name, (x, y))
        shape = nx.shape
        if ny.shape != shape:
            shape = broadcast_shapes(f"qt.{name}", shape, ny.shape)
    if nx.dtype != loop[0]:
        nx = cast(nx, loop[0], weak=False)
    if ny.dtype != loop[1]:
        ny = cast(ny, loop[1], weak=False)
    return Tensor(record_checked(name, (nx, ny), shape, loop[2], weak, device))


def apply1(name: str, x) -> Tensor:
    """A unary elementwise op (the recording fast path; see ``_recipes``)."""
    if type(x) is not Tensor:
        return _apply(name, (x,))
    nx = x._node
    if nx.prim == "const":
        return _apply(name, (x,))
    key = (name, nx.dtype, nx.weak)
    recipe = _recipes.get(key)
    if recipe is None:
        if key in _recipes or _recipe(key, name, ((nx.dtype, nx.weak),)) is None:
            return _apply(name, (x,))
        recipe = _recipes[key]
    loop, weak = recipe[0], recipe[1]
    if nx.dtype != loop[0]:
        nx = cast(nx, loop[0], weak=False)
    return Tensor(record_checked(name, (nx,), nx.shape, loop[1], weak, nx.device))


_FLIP = {"less": "greater", "less_equal": "greater_equal", "greater": "less",
         "greater_equal": "less_equal", "equal": "equal", "not_equal": "not_equal"}
_TRUE_IF_BELOW = {"greater", "greater_equal", "not_equal"}   # x op v, v below x's range


def _out_of_range_comparison(name: str, ops, loop):
    """NumPy 2 compares an integer array with an out-of-range Python int exactly: constant."""
    if len(ops) != 2:
        return None
    for j, (o, other) in enumerate(((ops[1], ops[0]), (ops[0], ops[1]))):
        if o.node is not None or type(o.value) is not int or other.node is None:
            continue
        dt = other.dtype
        if dt.kind not in "iu":
            continue
        info = np.iinfo(dt)
        if info.min <= o.value <= info.max:
            continue
        op = name if j == 0 else _FLIP[name]  # now "array op value"
        below = o.value < info.min
        truth = (op in _TRUE_IF_BELOW) if below else (op in {"less", "less_equal", "not_equal"})
        return full(other.node.shape, truth, dtypes.bool_, other.node.device)
    return None


def fold(name: str, nodes, out_dtype, weak: bool):
    """Constant folding: compute an op on constants now, with NumPy."""
    values = [np.array(n.params[0], dtype=n.dtype) for n in nodes]
    with np.errstate(all="ignore"):
        result = ufunc_of(name)(*values)
    if isinstance(result, tuple):  # frexp: the primitive is the first output
        result = result[0]
    return const_node(result.item(), out_dtype, nodes[0].device, weak)


def _make(name: str):
    nin = ufunc_of(name).nin
    ufunc_name = ELEMENTWISE_UFUNCS[name]
    if nin == 1:
        def fn(x):
            return apply1(name, x)
    else:
        def fn(x1, x2):
            return apply2(name, x1, x2)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``numpy.{ufunc_name}``: same dtypes, broadcasting and special "
                  f"values as NumPy.\n\n    Example:\n        >>> import qtrace as qt\n"
                  f"        >>> qt.{name}({'qt.ones(2)' if nin == 1 else 'qt.ones(2), 2.0'}).shape\n"
                  f"        (2,)\n")
    return fn


FUNCTIONS = {name: _make(name) for name in ELEMENTWISE_UFUNCS}


def _signbit(x) -> Tensor:
    """Elementwise ``numpy.signbit``: the sign bit (``-0.0`` and negative NaNs have it;
    integers: ``x < 0``, what NumPy's float loops give them)."""
    if isinstance(x, Tensor) and x.dtype.kind in "iub":
        return apply2("less", x, 0) if x.dtype.kind == "i" else full(x.shape, False, dtypes.bool_)
    return apply1("signbit", x)


FUNCTIONS["signbit"] = _signbit


def _composites():
    from . import composites  # (imported when called: composites is built on this module)
    return composites


def _loop_operands(name: str, *args):
    """The operands converted to the loop dtypes of ``numpy.<name>``, and its (first) output dtype."""
    return _composites()._ufunc_operands(name, getattr(np, name), *args)


def frexp_exponent(t: Tensor) -> Tensor:
    """The int32 exponent of ``numpy.frexp`` of a float tensor (primitive ``frexp_exponent``)."""
    n = t._node
    return wrap(record("frexp_exponent", (n,), (), n.shape, dtypes.int32))


def frexp(x, /) -> tuple:
    """``numpy.frexp``: ``(mantissa, exponent)`` with ``x == mantissa * 2**exponent``,
    ``0.5 <= |mantissa| < 1`` and an int32 exponent; zeros, infinities and NaN give
    ``(x, 0)``. Integers are converted to float64. No ``out=``.

    Example:
        >>> import qtrace as qt
        >>> m, e = qt.frexp(qt.asarray([8.0, -0.75]))
        >>> m.tolist(), e.tolist(), str(e.dtype)
        ([0.5, -0.75], [4, 0], 'int32')
    """
    (t,), _ = _loop_operands("frexp", x)
    return apply1("frexp", t), frexp_exponent(t)


FUNCTIONS["frexp"] = frexp
_DOCS = {  # examples for the primitives the generic docstring's example does not fit
    "fmod": ("the remainder of C's truncated division: it has the sign of ``x1`` (``remainder`` "
             "has the divisor's); an integer divisor of 0 gives 0",
             "qt.fmod(qt.asarray([-7, 7]), 3).tolist()", "[-1, 1]"),
    "ldexp": ("``x1 * 2**x2`` for an integer ``x2`` (rounded once, exact where representable)",
              "qt.ldexp(qt.asarray([0.75, 1.0]), qt.asarray([2, -3])).tolist()", "[3.0, 0.125]"),
    "gcd": ("the greatest common divisor of the absolute values (integers only; gcd(0, 0) is 0)",
            "qt.gcd(qt.asarray([12, -20, 0]), 8).tolist()", "[4, 4, 8]"),
    "lcm": ("the least common multiple of the absolute values (integers only; 0 with a 0 "
            "operand; wraps on overflow as NumPy's)", "qt.lcm(qt.asarray([4, -6, 0]), 6).tolist()",
            "[12, 6, 0]"),
    "bitwise_count": ("the number of 1-bits of ``|x|`` (integers only), as uint8",
                      "qt.bitwise_count(qt.asarray([7, -1, 0])).tolist()", "[3, 1, 0]"),
    "cbrt": ("the real cube root (negative for negative ``x``)",
             "qt.cbrt(qt.asarray([-8.0, 27.0])).tolist()", "[-2.0, 3.0]"),
    # integer-only functions of SPEC §2 (the generic example's float operands do not fit)
    "invert": ("bitwise NOT (``numpy.bitwise_not`` is the same ufunc; logical NOT for bools)",
               "qt.invert(qt.asarray([0, 5])).tolist()", "[-1, -6]"),
    "bitwise_and": ("bitwise AND of integers or bools", "qt.bitwise_and(qt.asarray([12, 5]), 6).tolist()",
                    "[4, 4]"),
    "bitwise_or": ("bitwise OR of integers or bools", "qt.bitwise_or(qt.asarray([12, 5]), 6).tolist()",
                   "[14, 7]"),
    "bitwise_xor": ("bitwise XOR of integers or bools", "qt.bitwise_xor(qt.asarray([12, 5]), 6).tolist()",
                    "[10, 3]"),
    "left_shift": ("``x1 << x2`` for integers (0 past the width)",
                   "qt.left_shift(qt.asarray([1, 3]), 2).tolist()", "[4, 12]"),
    "right_shift": ("``x1 >> x2`` for integers, arithmetic for signed ones",
                    "qt.right_shift(qt.asarray([16, -16]), 2).tolist()", "[4, -4]"),
}
for _name, (_what, _call, _shown) in _DOCS.items():
    FUNCTIONS[_name].__doc__ = (
        f"Elementwise ``numpy.{_name}``: {_what}. Same dtypes, broadcasting and special values "
        f"as NumPy; no ``out=``.\n\n    Example:\n        >>> import qtrace as qt\n"
        f"        >>> {_call}\n        {_shown}\n")
globals().update(FUNCTIONS)
absolute = FUNCTIONS["abs"]
true_divide = FUNCTIONS["divide"]
mod = FUNCTIONS["remainder"]
conjugate = FUNCTIONS["conj"]
bitwise_not = FUNCTIONS["invert"]   # NumPy's alias (``numpy.bitwise_not is numpy.invert``)


# --- NumPy ufuncs and functions composed of the primitives above -----------------------
def fabs(x, /) -> Tensor:
    """``numpy.fabs``: the absolute value as a float (integers become float64; complex
    numbers are refused, as NumPy does). Its gradient at 0 is 1 (JAX's). No ``out=``.

    Example:
        >>> import qtrace as qt
        >>> t = qt.fabs(qt.asarray([-3, 2]))
        >>> t.tolist(), str(t.dtype)
        ([3.0, 2.0], 'float64')
    """
    (t,), _ = _loop_operands("fabs", x)
    # |t| as copysign(t + 0, 1): its gradient is JAX's, 1 at both zeros (-0 + 0 is +0)
    return apply2("copysign", apply2("add", t, 0.0), 1.0)


def divmod(x1, x2, /) -> tuple:  # noqa: A001 - NumPy's name
    """``numpy.divmod``: ``(x1 // x2, x1 % x2)``, NumPy's ``floor_divide`` and ``remainder``.
    As ``qt.floor_divide``, a float quotient with an infinite operand is ``floor(x1 / x2)``
    (the Array API's special cases; NumPy gives NaN there). No ``out=``.

    Example:
        >>> import qtrace as qt
        >>> q, r = qt.divmod(qt.asarray([7, -7]), 2)
        >>> q.tolist(), r.tolist()
        ([3, -4], [1, 1])
    """
    (x, y), _ = _loop_operands("divmod", x1, x2)
    return apply2("floor_divide", x, y), apply2("remainder", x, y)


def modf(x, /) -> tuple:
    """``numpy.modf``: ``(fractional part, integral part)``, both with ``x``'s sign
    (``modf(-2.0)`` is ``(-0.0, -2.0)``, ``modf(inf)`` is ``(0.0, inf)``); integers become
    float64. The fractional part's gradient is 1, the integral part's 0 (as JAX). No ``out=``.

    Example:
        >>> import qtrace as qt
        >>> f, i = qt.modf(qt.asarray([2.5, -1.25]))
        >>> f.tolist(), i.tolist()
        ([0.5, -0.25], [2.0, -1.0])
    """
    (t,), _ = _loop_operands("modf", x)
    whole = apply1("trunc", t)
    # t - trunc(t) is exact; at integers it is +0, and -(trunc(t) - t) is -0: the one of
    # t's sign is kept (both have derivative 1)
    frac = where(_signbit(t), apply1("negative", apply2("subtract", whole, t)),
                 apply2("subtract", t, whole))
    zero = apply2("copysign", 0.0, t)   # (no gradient reaches t through the sign)
    return where(apply1("isinf", t), zero, frac), whole


def float_power(x1, x2, /) -> Tensor:
    """``numpy.float_power``: ``x1 ** x2`` computed in float64 (complex128 for complex
    operands), whatever the input dtypes. No ``out=``.

    Example:
        >>> import qtrace as qt
        >>> t = qt.float_power(qt.asarray([2, 4]), -1)
        >>> t.tolist(), str(t.dtype)
        ([0.5, 0.25], 'float64')
    """
    (x, y), _ = _loop_operands("float_power", x1, x2)
    return apply2("power", x, y)


def _array(x, out, op: str) -> Tensor:
    """``x`` as a tensor (as ``numpy.asanyarray``); ``out=`` refused, naming ``op``."""
    helpers = _composites()
    helpers._no_out(out, op)
    return helpers._tensor(x, op)


def fix(x, out=None) -> Tensor:
    """``numpy.fix``: round towards zero (``trunc``); integers and bools are returned as they
    are, in their dtype. Complex input and ``out=`` are not accepted.

    Example:
        >>> import qtrace as qt
        >>> qt.fix(qt.asarray([2.7, -2.7, -0.2])).tolist()
        [2.0, -2.0, -0.0]
    """
    t = _array(x, out, "fix")
    if t.dtype.kind == "c":
        raise TypeError(f"qt.fix: not supported for complex dtype {t.dtype}: complex numbers have "
                        "no rounding towards zero")
    return apply1("trunc", t)


def isposinf(x, out=None) -> Tensor:
    """``numpy.isposinf``: where ``x`` is +inf (bool; all False for integers). Complex input
    (ambiguous, as NumPy says) and ``out=`` are not accepted.

    Example:
        >>> import qtrace as qt
        >>> qt.isposinf(qt.asarray([float("inf"), float("-inf"), 1.0])).tolist()
        [True, False, False]
    """
    return _isinf_signed(x, out, "isposinf", math.inf)


def isneginf(x, out=None) -> Tensor:
    """``numpy.isneginf``: where ``x`` is -inf (bool; all False for integers). Complex input
    (ambiguous, as NumPy says) and ``out=`` are not accepted.

    Example:
        >>> import qtrace as qt
        >>> qt.isneginf(qt.asarray([float("inf"), float("-inf"), 1.0])).tolist()
        [False, True, False]
    """
    return _isinf_signed(x, out, "isneginf", -math.inf)


def _isinf_signed(x, out, op: str, inf: float) -> Tensor:
    t = _array(x, out, op)
    if t.dtype.kind == "c":
        raise TypeError(f"qt.{op}: This operation is not supported for {t.dtype} values because "
                        "it would be ambiguous.")
    if t.dtype.kind != "f":
        return full(t.shape, False, dtypes.bool_, t.device)
    return apply2("equal", t, inf)


def _to_float(t: Tensor) -> Tensor:
    """Integers and bools as float64 (floats and complex as they are), as NumPy's
    ``sinc``/``i0`` compute them."""
    return t if t.dtype.kind in "fc" else astype(t, dtypes.float64)


def sinc(x) -> Tensor:
    """``numpy.sinc``: the normalized sinc ``sin(pi x) / (pi x)``, 1 at 0; integers become
    float64. Within ``|pi x| < 1e-3`` its Maclaurin polynomial is used (the quotient's
    derivative cancels there): the gradient at 0 is 0, the second derivative ``-pi**2 / 3``,
    as JAX's.

    Example:
        >>> import qtrace as qt
        >>> qt.sinc(qt.asarray([0.0, 0.5, 1.0])).numpy().round(6).tolist()
        [1.0, 0.63662, 0.0]
    """
    t = _to_float(_array(x, None, "sinc"))
    pix = apply2("multiply", t, math.pi)
    # near 0, 1 - y^2/6 + y^4/120 (its truncation is below y^6/5040 < 1e-22 there): the
    # quotient's own derivative cancels catastrophically, and rounds differently per device
    near = apply2("less", apply1("abs", pix), 1e-3)
    y = where(near, 1.0, pix)   # (no 0/0 in either branch)
    y2 = apply2("multiply", pix, pix)
    taylor = apply2("add", 1.0, apply2("multiply", y2, apply2("add", -1.0 / 6.0,
                                                                apply2("multiply", y2, 1.0 / 120.0))))
    return where(near, taylor, apply2("divide", apply1("sin", y), y))


# i0: the power series sum (x**2/4)**k / (k!)**2 below _I0_SPLIT, the asymptotic series
# exp(x) / sqrt(2 pi x) * sum ((2k-1)!!)**2 / (k! (8x)**k) above (both relative error
# below 1e-16 there: 36 and 30 terms); both have positive terms only
_I0_SPLIT = 20.0
_I0_SERIES = [1.0 / math.factorial(k) ** 2 for k in range(37)]
_I0_ASYMPTOTIC = [math.prod(range(1, 2 * k, 2)) ** 2 / (math.factorial(k) * 8.0 ** k)
                  for k in range(31)]


def _horner(t: Tensor, coeffs) -> Tensor:
    acc = full((), coeffs[-1], t.dtype, t.device)
    for c in reversed(coeffs[:-1]):
        acc = apply2("add", apply2("multiply", acc, t), c)
    return acc


def i0(x) -> Tensor:
    """``numpy.i0``: the modified Bessel function of the first kind of order 0 (integers
    become float64; float32 is computed in float64 and rounded). Complex input is not
    accepted (as NumPy). Large arguments overflow to inf as NumPy's do (from ``x`` ≈ 709.8).
    Its gradient is ``i1(x)``, through the series.

    Example:
        >>> import qtrace as qt
        >>> qt.i0(qt.asarray([0.0, 1.0, -2.0])).numpy().round(6).tolist()
        [1.0, 1.266066, 2.279585]
    """
    t = _array(x, None, "i0")
    if t.dtype.kind == "c":
        raise TypeError(f"qt.i0: not supported for complex values (dtype {t.dtype})")
    dt = _to_float(t).dtype
    a = apply1("abs", astype(t, dtypes.float64))
    small = apply2("less_equal", a, _I0_SPLIT)
    s = where(small, a, 0.0)   # each branch sees arguments of its own range only
    series = _horner(apply2("multiply", apply2("multiply", s, s), 0.25), _I0_SERIES)
    big = where(small, _I0_SPLIT, a)
    tail = _horner(apply1("reciprocal", big), _I0_ASYMPTOTIC)
    # (exp(x) * ...) / sqrt(x): inf where exp(x) overflows, as NumPy's
    scaled = apply2("multiply", apply1("exp", big), apply2("multiply", tail, 1 / math.sqrt(2 * math.pi)))
    asymptotic = apply2("divide", scaled, apply1("sqrt", big))
    r = where(small, series, asymptotic)
    return r if r.dtype == dt else astype(r, dt)


def spacing(x, /) -> Tensor:
    """``numpy.spacing``: the distance from ``x`` to the next float away from zero (the
    smallest subnormal, positive, at ±0; ``±inf`` at ``±max``; NaN at infinities and NaN);
    integers become float64. Zero gradient. No ``out=``.

    Example:
        >>> import qtrace as qt
        >>> qt.spacing(qt.asarray([1.0, -4.0])).tolist() == [2.0 ** -52, -(2.0 ** -50)]
        True
    """
    (t,), dt = _loop_operands("spacing", x)
    fi = np.finfo(dt)
    p = fi.nmant + 1
    e = frexp_exponent(t)   # |x| in [2**(e-1), 2**e): its ulp is 2**(e - p)
    tiniest = int(fi.minexp) - p + 1   # the exponent of the smallest subnormal (also at 0)
    k = where(apply2("equal", t, 0), tiniest, apply2("maximum", apply2("subtract", e, p), tiniest))
    sign = where(apply2("less", t, 0), full((), -1.0, dt, t.device), full((), 1.0, dt, t.device))
    r = apply2("ldexp", sign, k)
    r = where(apply2("equal", apply1("abs", t), float(fi.max)), apply2("multiply", sign, math.inf), r)
    return where(apply1("isfinite", t), r, math.nan)


NUMPY_UFUNCS = {np.fabs: fabs, np.divmod: divmod, np.modf: modf, np.float_power: float_power,
                np.spacing: spacing}
NUMPY_FUNCTIONS = {np.fix: fix, np.isposinf: isposinf, np.isneginf: isneginf, np.sinc: sinc,
                   np.i0: i0}


def stop_gradient(x) -> Tensor:
    """``x``'s value, through which no gradient flows (JAX's ``lax.stop_gradient``): in
    reverse mode it is a constant.

    Example:
        >>> import qtrace as qt
        >>> qt.grad(lambda x: x * qt.stop_gradient(x))(qt.asarray(3.0)).item()
        3.0
    """
    n = (x if isinstance(x, Tensor) else asarray(x))._node
    return wrap(record("stop_gradient", (n,), (), n.shape, n.dtype, weak=n.weak))


def where(condition, x, y) -> Tensor:
    """``numpy.where(condition, x, y)``: elements of ``x`` where ``condition`` else ``y``.

    Example:
        >>> import qtrace as qt
        >>> qt.where(qt.arange(4) > 1, 1.0, 0.0).tolist()
        [0.0, 0.0, 1.0, 1.0]
    """
    c = operand(condition, "where")
    a, b = operand(x, "where"), operand(y, "where")
    dt = promote([a, b], "where")
    device = next((o.node.device for o in (c, a, b) if o.node is not None), None)
    (cnode,) = place([c], [dtypes.bool_], "where", device)
    anode, bnode = place([a, b], [dt, dt], "where", device)
    shape = broadcast_shapes("qt.where", cnode.shape, anode.shape, bnode.shape)
    weak = a.weak and b.weak
    if cnode.prim == "const":
        chosen = anode if cnode.params[0] else bnode
        from .shape_ops import broadcast_to
        return broadcast_to(wrap(chosen), shape) if chosen.shape != shape else wrap(chosen)
    return wrap(record("select", (cnode, anode, bnode), (), shape, dt, weak=weak))


def clip(x, /, min=None, max=None, *, a_min=None, a_max=None) -> Tensor:  # noqa: A002
    """The Array API's ``clip(x, min, max)`` / ``numpy.clip(a, a_min, a_max)``: limit values to
    ``[min, max]`` (either may be None; both None returns a copy). The result keeps
    ``x``'s dtype, as the standard asks, when the bounds are Python scalars.

    Example:
        >>> import qtrace as qt
        >>> qt.clip(qt.asarray([-2.0, 0.5, 3.0]), max=1.0).tolist()
        [-2.0, 0.5, 1.0]
    """
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    out = x if isinstance(x, Tensor) else wrap(operand(x, "clip").node)
    if lo is None and hi is None:
        return Tensor(out._node)
    kinds = [operand(v, "clip").dtype.kind for v in (out, lo, hi) if v is not None]
    if "c" in kinds:  # named here, not as the maximum/minimum it is made of
        raise TypeError("qt.clip: not supported for complex dtypes: complex numbers have no order")
    if lo is not None:
        out = apply("maximum", out, lo)
    if hi is not None:
        out = apply("minimum", out, hi)
    return out


def round(x, decimals: int = 0) -> Tensor:  # noqa: A001 - NumPy's name
    """``numpy.round``: round half to even, to ``decimals`` places."""
    t = x if isinstance(x, Tensor) else wrap(operand(x, "round").node)
    if t.dtype.kind == "b":
        raise TypeError("qt.round: not supported for dtype bool")
    if t.dtype.kind in "iu":
        if decimals >= 0:
            return t
        factor = 10.0 ** (-decimals)  # NumPy: rint(x / f) * f in float64, cast back
        return astype(apply("multiply", apply("rint", apply("divide", t, factor)), factor), t.dtype)
    if decimals == 0:
        return apply("rint", t)
    if t.dtype.kind == "c":  # each part rounded as a real number (NumPy)
        from .array_api import complex_from_parts, imag, real
        return complex_from_parts(round(real(t), decimals), round(imag(t), decimals))
    if decimals > 0:
        scale = 10.0 ** decimals
        return apply("divide", apply("rint", apply("multiply", t, scale)), scale)
    factor = 10.0 ** (-decimals)
    return apply("multiply", apply("rint", apply("divide", t, factor)), factor)


around = round
