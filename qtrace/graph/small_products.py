"""Matrix products with a small contracted dimension, written as multiply-adds.

A product ``a @ b`` of an ``[M, K]`` and a ``[K, N]`` matrix with ``K`` of a few elements
(``X @ W1`` with two input features, ``dscores @ W2.T`` with three classes) is a poor
library call: the BLAS spends its time on the ``M x N`` result it writes, which the next
task reads back. Written as ``a[:, 0:1] * b[0:1, :] + a[:, 1:2] * b[1:2, :] + ...`` (slices
and broadcasts are free views; multiply and add are elementwise), it fuses into its
consumer like any elementwise chain: ``tanh(X @ W1 + b1)`` becomes one kernel that reads
``X``, ``W1`` and ``b1`` and writes only the ``tanh``.

The rewrite runs on the graph a plan is built for, after differentiation (so gradients
are the library's: the backward products keep their long contracted dimension), and only
with fusion on: ``QTRACE_FUSION=0`` keeps the library call, the reference the fused plan is
compared against. The sum runs in the order ``k = 0, 1, ...``, one rounding per multiply
and per add (a BLAS may round differently: the results agree to a few units in the last
place, not bit for bit).
"""

from __future__ import annotations

from .node import Node, make_node, substitute

MAX_CONTRACTED = 4   # the largest K written as multiply-adds (2K elementwise operations)


def contracted(node: Node) -> int | None:
    """``K`` if ``node`` is a product this module rewrites, else None: a matmul of two 2-D
    operands of the result's numeric dtype (not bool) with ``1 <= K <= MAX_CONTRACTED``
    and a non-empty result."""
    if node.prim != "matmul" or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a.ndim != 2 or b.ndim != 2 or node.size == 0 or node.dtype.kind not in "fciu":
        return None
    if a.dtype != node.dtype or b.dtype != node.dtype:
        return None
    k = a.shape[1]
    return k if 1 <= k <= MAX_CONTRACTED else None


def _view(prim: str, params: tuple, shape: tuple, src: Node) -> Node:
    return make_node(prim, params, shape, src.dtype, (src,), src.device, src.weak)


def multiply_adds(node: Node, a: Node, b: Node) -> Node:
    """The product ``node`` (see :func:`contracted`) of ``a`` and ``b`` (its operands, or
    their rewritten equals) as a sum of ``K`` broadcast products."""
    m, n = node.shape
    total = None
    for k in range(a.shape[1]):
        col = _view("broadcast", (node.shape,), node.shape,
                    _view("slice", ((0, k), (1, 1)), (m, 1), a))
        row = _view("broadcast", (node.shape,), node.shape,
                    _view("slice", ((k, 0), (1, 1)), (1, n), b))
        term = make_node("multiply", (), node.shape, node.dtype, (col, row), node.device, node.weak)
        total = term if total is None else make_node(
            "add", (), node.shape, node.dtype, (total, term), node.device, node.weak)
    return total


def lower_small_products(outputs: tuple) -> tuple[tuple, list]:
    """``outputs`` with every product of a small contracted dimension rewritten as
    multiply-adds, and the rewritten products (for the plan's fusion report)."""
    found = []

    def rewrite(node: Node, inputs: tuple):
        if contracted(node) is None:
            return None
        found.append(node)
        return multiply_adds(node, *inputs)

    return substitute(outputs, {}, rewrite), found
