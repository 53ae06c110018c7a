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
from . import dtypes
from .context import record
from .convert import astype, const_node, operand, place, promote, wrap
from .creation import full
from .tensor import Tensor


def apply(name: str, *args) -> Tensor:
    """Record elementwise primitive ``name`` on ``args`` (tensors, arrays, Python scalars)."""
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
            return apply(name, x)
    else:
        def fn(x1, x2):
            return apply(name, x1, x2)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``numpy.{ufunc_name}``: same dtypes, broadcasting and special "
                  f"values as NumPy.\n\n    Example:\n        >>> import qtrace as qt\n"
                  f"        >>> qt.{name}({'qt.ones(2)' if nin == 1 else 'qt.ones(2), 2.0'}).shape\n"
                  f"        (2,)\n")
    return fn


FUNCTIONS = {name: _make(name) for name in ELEMENTWISE_UFUNCS}
globals().update(FUNCTIONS)
absolute = FUNCTIONS["abs"]
true_divide = FUNCTIONS["divide"]
mod = FUNCTIONS["remainder"]
conjugate = FUNCTIONS["positive"]


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


def clip(x, a_min=None, a_max=None) -> Tensor:
    """``numpy.clip``: limit values to ``[a_min, a_max]`` (either may be ``None``)."""
    if a_min is None and a_max is None:
        raise ValueError("qt.clip: one of a_min and a_max must be given")
    out = x
    if a_min is not None:
        out = apply("maximum", out, a_min)
    if a_max is not None:
        out = apply("minimum", out, a_max)
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
    if decimals > 0:
        scale = 10.0 ** decimals
        return apply("divide", apply("rint", apply("multiply", t, scale)), scale)
    factor = 10.0 ** (-decimals)
    return apply("multiply", apply("rint", apply("divide", t, factor)), factor)


around = round
