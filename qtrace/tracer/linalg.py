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


def _vector(t, op: str, position: int, need: int):
    if t.ndim < need:
        raise ValueError(f"qt.{op}: operand {position} has {t.ndim} dimension(s), it needs at least "
                         f"{need} (shape {t.shape})")
    return t


def matvec(x1, x2, /):
    """``numpy.matvec``: matrix-vector products ``x1 @ x2`` of stacks, signature
    ``(m,n),(n)->(m)`` (the leading axes broadcast). NumPy's ufunc keywords (``out``,
    ``axes``, ...) are not accepted.

    Example:
        >>> import qtrace as qt
        >>> qt.matvec(qt.asarray([[1.0, 2.0], [3.0, 4.0]]), qt.asarray([1.0, 1.0])).tolist()
        [3.0, 7.0]
    """
    from .shape_ops import as_tensor, expand_dims
    a = _vector(as_tensor(x1, "matvec"), "matvec", 0, 2)
    v = _vector(as_tensor(x2, "matvec"), "matvec", 1, 1)
    return matmul(a, expand_dims(v, -1))[..., 0]


def vecmat(x1, x2, /):
    """``numpy.vecmat``: vector-matrix products ``conj(x1) @ x2`` of stacks, signature
    ``(n),(n,m)->(m)`` (the vector is conjugated, as NumPy does; the leading axes
    broadcast). NumPy's ufunc keywords are not accepted.

    Example:
        >>> import qtrace as qt
        >>> qt.vecmat(qt.asarray([1.0, 1.0]), qt.asarray([[1.0, 2.0], [3.0, 4.0]])).tolist()
        [4.0, 6.0]
    """
    from .elementwise import conj
    from .shape_ops import as_tensor, expand_dims
    v = _vector(as_tensor(x1, "vecmat"), "vecmat", 0, 1)
    a = _vector(as_tensor(x2, "vecmat"), "vecmat", 1, 2)
    if v.dtype.kind == "c":
        v = conj(v)
    return matmul(expand_dims(v, -2), a)[..., 0, :]
