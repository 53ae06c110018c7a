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
globals().update(FUNCTIONS)
absolute = FUNCTIONS["abs"]
true_divide = FUNCTIONS["divide"]
mod = FUNCTIONS["remainder"]
conjugate = FUNCTIONS["conj"]


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
