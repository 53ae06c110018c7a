"""``matmul`` / ``dot`` (a library task: the device's BLAS), with NumPy's stacks of matrices."""

from __future__ import annotations

from ..graph.primitives import broadcast_shapes
from .context import record
from .convert import operand, place, promote, wrap
from .views import reshape_node


def matmul(a, b):
    """``numpy.matmul``: matrix products of 1-D, 2-D and stacked (>= 3-D) operands.

    A 1-D first operand is a row vector, a 1-D second operand a column vector (the added
    dimension is removed from the result); the leading (batch) dimensions of stacked
    operands broadcast against each other as in NumPy.

    Example:
        >>> import qtrace as qt
        >>> (qt.ones((2, 3)) @ qt.ones(3)).tolist()
        [3.0, 3.0]
        >>> qt.matmul(qt.ones((4, 2, 3)), qt.ones((3, 5))).shape
        (4, 2, 5)
    """
    ops = [operand(a, "matmul"), operand(b, "matmul")]
    for o in ops:
        if o.node is None or o.node.ndim == 0:
            raise ValueError("qt.matmul: operands must be at least 1-D tensors, not scalars")
    dt = promote(ops, "matmul")
    x, y = place(ops, [dt, dt], "matmul")
    xs = x.shape if x.ndim >= 2 else (1,) + x.shape
    ys = y.shape if y.ndim >= 2 else y.shape + (1,)
    if xs[-1] != ys[-2]:
        raise ValueError(f"qt.matmul: mismatch in contracted dimension: shapes {x.shape} and {y.shape}")
    batch = broadcast_shapes("qt.matmul", xs[:-2], ys[:-2])
    x2 = x if x.ndim >= 2 else reshape_node(x, xs)
    y2 = y if y.ndim >= 2 else reshape_node(y, ys)
    out = record("matmul", (x2, y2), (), batch + (xs[-2], ys[-1]), dt)
    shape = batch + tuple(d for d, keep in ((xs[-2], x.ndim >= 2), (ys[-1], y.ndim >= 2)) if keep)
    return wrap(reshape_node(out, shape))   # (fresh values, as NumPy's results: no views)


def dot(a, b):
    """``numpy.dot`` for 1-D and 2-D operands (scalars multiply)."""
    oa, ob = operand(a, "dot"), operand(b, "dot")
    if (oa.node is None or oa.node.ndim == 0) or (ob.node is None or ob.node.ndim == 0):
        from .elementwise import apply
        return apply("multiply", a, b)
    if oa.node.ndim > 2 or ob.node.ndim > 2:
        raise ValueError(f"qt.dot: only 1-D and 2-D operands are supported (use qt.matmul or "
                         f"qt.tensordot for stacks), got shapes {oa.node.shape} and {ob.node.shape}")
    return matmul(a, b)
