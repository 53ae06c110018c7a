"""Matrix products and reductions over a few elements, unrolled into elementwise operations.

A product ``a @ b`` of an ``[M, K]`` and a ``[K, N]`` matrix with ``K`` of a few elements
(``X @ W1`` with two input features, ``dscores @ W2.T`` with three classes) is a poor
library call: the BLAS spends its time on the ``M x N`` result it writes, which the next
task reads back. Written as ``a[:, 0:1] * b[0:1, :] + a[:, 1:2] * b[1:2, :] + ...`` (slices
and broadcasts are free views; multiply and add are elementwise), it fuses into its
consumer like any elementwise chain: ``tanh(X @ W1 + b1)`` becomes one kernel that reads
``X``, ``W1`` and ``b1`` and writes only the ``tanh``. Likewise a reduction over axes of a
few elements in all (a softmax's ``max`` and ``sum`` over three classes) is a task of its
own whose loop runs three times per output; written as ``maximum(maximum(x[:, 0],
x[:, 1]), x[:, 2])`` it is computed where it is read.

The rewrite runs on the graph a plan is built for, after differentiation (so gradients
are the library's and the reductions' own rules: the backward products keep their long
contracted dimension), and only with fusion on: ``QTRACE_FUSION=0`` keeps the library call
and the reduction task, the reference the fused plan is compared against. Terms are
combined in order (``k = 0, 1, ...``), as the reduction kernels and NumPy combine a short
axis; a product rounds once per multiply and per add (a BLAS may round differently: the
results agree to a few units in the last place, not bit for bit).
"""

from __future__ import annotations

import itertools
import math

from .node import Node, make_node, substitute

MAX_TERMS = 4   # the most terms unrolled (a product: 2 operations per term; a reduction: 1)

# each unrolled reduction's elementwise combination (the reduction kernels' own semantics:
# NaN propagates through max/min as through maximum/minimum)
COMBINE = {"reduce_sum": "add", "reduce_prod": "multiply", "reduce_max": "maximum",
           "reduce_min": "minimum", "reduce_any": "logical_or", "reduce_all": "logical_and"}


def terms(node: Node) -> int | None:
    """The number of terms if ``node`` is unrolled here, else None: a matmul of two 2-D
    operands of the result's numeric dtype (not bool) with ``1 <= K <= MAX_TERMS``; a
    reduction of :data:`COMBINE` over axes of ``1..MAX_TERMS`` elements in all, of an
    operand of its own dtype. Never an empty result."""
    if node.size == 0 or not node.inputs:
        return None
    src = node.inputs[0]
    if node.prim == "matmul":
        if len(node.inputs) != 2 or src.ndim != 2 or node.inputs[1].ndim != 2:
            return None
        if node.dtype.kind not in "fciu" or any(i.dtype != node.dtype for i in node.inputs):
            return None
        k = src.shape[1]
    elif node.prim in COMBINE:
        if src.dtype != node.dtype:
            return None
        k = math.prod(src.shape[a] for a in node.params[0])
    else:
        return None
    return k if 1 <= k <= MAX_TERMS else None


def _view(prim: str, params: tuple, shape: tuple, src: Node) -> Node:
    return make_node(prim, params, shape, src.dtype, (src,), src.device, src.weak)


def _elementwise(prim: str, x: Node, y: Node, like: Node) -> Node:
    return make_node(prim, (), like.shape, like.dtype, (x, y), like.device, like.weak)


def multiply_adds(node: Node, a: Node, b: Node) -> Node:
    """The product ``node`` (see :func:`terms`) of ``a`` and ``b`` (its operands, or their
    rewritten equals) as a sum of ``K`` broadcast products."""
    m, n = node.shape
    total = None
    for k in range(a.shape[1]):
        col = _view("broadcast", (node.shape,), node.shape,
                    _view("slice", ((0, k), (1, 1)), (m, 1), a))
        row = _view("broadcast", (node.shape,), node.shape,
                    _view("slice", ((k, 0), (1, 1)), (1, n), b))
        term = _elementwise("multiply", col, row, node)
        total = term if total is None else _elementwise("add", total, term, node)
    return total


def combined(node: Node, src: Node) -> Node:
    """The reduction ``node`` (see :func:`terms`) of ``src`` (its operand, or its rewritten
    equal) as its elements combined in C order, each a slice reshaped to the result."""
    axes = node.params[0]
    picked = tuple(1 if a in axes else d for a, d in enumerate(src.shape))
    total = None
    for at in itertools.product(*(range(src.shape[a]) for a in axes)):
        where = dict(zip(axes, at))
        starts = tuple(where.get(a, 0) for a in range(src.ndim))
        term = _view("reshape", (node.shape,), node.shape,
                     _view("slice", (starts, (1,) * src.ndim), picked, src))
        total = term if total is None else _elementwise(COMBINE[node.prim], total, term, node)
    return total


def unroll(outputs: tuple) -> tuple[tuple, list]:
    """``outputs`` with every product and reduction of at most :data:`MAX_TERMS` terms
    rewritten as elementwise operations, and ``(node, reason)`` for each rewritten node
    (the plan's fusion report)."""
    found = []

    def rewrite(node: Node, inputs: tuple):
        k = terms(node)
        if k is None:
            return None
        if node.prim == "matmul":
            found.append((node, f"contracted extent {k} <= {MAX_TERMS}: multiply-adds"))
            return multiply_adds(node, *inputs)
        found.append((node, f"{k} element(s) per result <= {MAX_TERMS}: unrolled"))
        return combined(node, inputs[0])

    return substitute(outputs, {}, rewrite), found
