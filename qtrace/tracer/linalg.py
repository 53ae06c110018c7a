"""``matmul`` / ``dot`` for 1-D and 2-D operands (a library task: the device's BLAS)."""

from __future__ import annotations

from .context import record
from .convert import operand, place, promote, wrap
from .shape_ops import reshape


def matmul(a, b):
    """``numpy.matmul`` for 1-D and 2-D operands.

    Example:
        >>> import qtrace as qt
        >>> (qt.ones((2, 3)) @ qt.ones(3)).tolist()
        [3.0, 3.0]
    """
    ops = [operand(a, "matmul"), operand(b, "matmul")]
    for o in ops:
        if o.node is None or o.node.ndim == 0:
            raise ValueError("qt.matmul: operands must be 1-D or 2-D tensors, not scalars")
        if o.node.ndim > 2:
            raise ValueError(f"qt.matmul: only 1-D and 2-D operands are supported, got shape "
                             f"{o.node.shape}")
    dt = promote(ops, "matmul")
    x, y = place(ops, [dt, dt], "matmul")
    xs = x.shape if x.ndim == 2 else (1,) + x.shape
    ys = y.shape if y.ndim == 2 else y.shape + (1,)
    if xs[1] != ys[0]:
        raise ValueError(f"qt.matmul: mismatch in contracted dimension: shapes {x.shape} and {y.shape}")
    x2 = x if x.ndim == 2 else reshape(wrap(x), xs)._node
    y2 = y if y.ndim == 2 else reshape(wrap(y), ys)._node
    out = wrap(record("matmul", (x2, y2), (), (xs[0], ys[1]), dt))
    shape = tuple(d for d, keep in ((xs[0], x.ndim == 2), (ys[1], y.ndim == 2)) if keep)
    return reshape(out, shape) if shape != out.shape else out


def dot(a, b):
    """``numpy.dot`` for 1-D and 2-D operands (scalars multiply)."""
    oa, ob = operand(a, "dot"), operand(b, "dot")
    if (oa.node is None or oa.node.ndim == 0) or (ob.node is None or ob.node.ndim == 0):
        from .elementwise import apply
        return apply("multiply", a, b)
    return matmul(a, b)
