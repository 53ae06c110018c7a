"""Reverse mode through library functions (``lib`` nodes): one rule per function name.

A rule takes the node (any component), the cotangents of the components that reach the
output (``{component: tensor}``), its inputs and its outputs (tensors, one per
component) and returns one cotangent (or None) per input. Rules are written with public
qtrace operations and library calls, so the backward graph is an ordinary graph.
"""

from __future__ import annotations

from ..tracer.convert import wrap
from ..tracer.library import component

LIB_VJP: dict = {}
NONDIFFERENTIABLE: set = set()   # functions whose outputs carry no gradient (argsort, ...)


def lib_rule(*names):
    def deco(fn):
        for n in names:
            LIB_VJP[n] = fn
        return fn
    return deco


def lib_vjp(node, cts: dict) -> list:
    name, static, specs, _ = node.params
    if name in NONDIFFERENTIABLE:
        return [None] * len(node.inputs)
    rule = LIB_VJP.get(name)
    if rule is None:
        raise NotImplementedError(f"qtrace: library function {name!r} has no VJP rule (reverse mode)")
    outs = [wrap(component(node.inputs, name, static, specs, k, node.device)) for k in range(len(specs))]
    return rule(node, cts, [wrap(i) for i in node.inputs], outs)


@lib_rule("cumsum")
def _cumsum(node, cts, xs, outs):
    """Every input element adds to the running sums from its position on: its cotangent
    is the sum of theirs, the reversed cumsum of the cotangent."""
    from ..tracer.reductions import cumsum
    from ..tracer.shape_ops import flip
    ct = cts.get(0)
    if ct is None:
        return [None]
    axis = node.params[1][0]
    return [flip(cumsum(flip(ct, axis), axis), axis)]


# --- sorting ---------------------------------------------------------------------------
NONDIFFERENTIABLE.update({"searchsorted", "isin", "nextafter"})


@lib_rule("sort")
def _sort(node, cts, xs, outs):
    """The sorted values' cotangent goes back to where each value came from."""
    from ..tracer import indexing, sorting
    from ..tracer.creation import zeros_like
    ct = cts.get(0)
    if ct is None:
        return [None]
    axis = node.params[1][0]
    coords = sorting._coordinates(xs[0].shape, axis, outs[1])
    return [indexing.scatter_at(zeros_like(xs[0]), ct, coords, "add")]
