"""Reverse mode through per-element loops: the ``loop`` VJP builds a ``loop_vjp`` node.

The reverse body is the forward body differentiated by the ordinary graph rules
(:mod:`qtrace.ad.rules`) with respect to the carried state and to the per-element
reads of captured values; the adjoint kernel (``qtrace.kernels.codegen``) replays each
element's loop onto the adstack and runs this reverse body once per iteration, popping.
"""

from __future__ import annotations

from ..graph.loops import depth_source, layout
from ..graph.node import make_input, toposort
from ..graph.subgraph import Subgraph
from ..tracer import dtypes
from ..tracer import elementwise as ew
from ..tracer.context import record
from ..tracer.convert import wrap
from ..tracer.creation import zeros
from . import reverse
from .rules import unbroadcast


def _captured_targets(sub: Subgraph, shape: tuple) -> dict:
    """For each captured placeholder: the node whose per-element cotangent we want."""
    targets = {}
    nodes = toposort(sub.outputs)
    for role, leaf in sub.placeholders.values():
        if role[0] != "captured":
            continue
        j = role[1]
        if leaf.shape == shape:
            targets[j] = leaf
        for n in nodes:
            if n.prim == "broadcast" and n.inputs[0] is leaf and n.shape == shape:
                targets[j] = n
        if j not in targets:
            targets[j] = None  # read only through gathers: see the rule below
    return targets


def reverse_body(sub: Subgraph, kind: str, dts: list, shape: tuple, device) -> Subgraph:
    """The reverse body of a loop body: cotangents of the state and of captured reads."""
    m = len(dts)
    roles = {i: r for i, (r, _) in sub.placeholders.items()}
    state = []
    for k, dt in enumerate(dts):
        leaf = sub.leaf(("state", k))
        if leaf is None:
            leaf = make_input(shape, dt, device, buffer=None)
            roles[id(leaf)] = ("state", k)
        state.append(leaf)
    cts = []
    for k, dt in enumerate(dts):
        leaf = make_input(shape, dt, device, buffer=None)
        roles[id(leaf)] = ("ct", k)
        cts.append(leaf)
    outs = sub.outputs[1:] if kind == "while" else sub.outputs
    n_cap = sum(1 for r in sub.roles if r[0] == "captured")
    targets = _captured_targets(sub, shape)
    wrt = list(state) + [targets[j] for j in range(n_cap) if targets[j] is not None]
    ct_tensors = [wrap(c) if dts[k].kind == "f" else None for k, c in enumerate(cts)]
    grads = reverse.backward(list(outs), ct_tensors, wrt)
    results = []
    for k, dt in enumerate(dts):
        g = grads[k] if dt.kind == "f" else None
        results.append(g._node if g is not None else zeros(shape, dt)._node)
    it = iter(grads[m:])
    for j in range(n_cap):
        leaf = sub.leaf(("captured", j))
        if targets[j] is None:
            results.append(zeros(shape, leaf.dtype)._node)
            continue
        g = next(it)
        if g is not None and g.shape != shape:
            g = ew.add(g, zeros(shape, g.dtype))
        results.append(g._node if g is not None else zeros(shape, leaf.dtype)._node)
    used = {id(leaf) for n in toposort(tuple(results)) for leaf in n.leaves}
    used |= {id(n) for n in results if n.is_leaf}
    return Subgraph(tuple(results), {i: r for i, r in roles.items() if i in used})


def loop_vjp(node, cts: dict) -> list:
    """Input cotangents of a loop node given the cotangents of its components."""
    lay = layout(node)
    kind, m, sub = node.params[0], node.params[1], node.params[2]
    inputs = node.inputs
    init = inputs[lay.init]
    dts = [n.dtype for n in init]
    shape = node.shape
    rsub = reverse_body(sub, kind, dts, shape, node.device)
    ct_nodes = []
    for k, dt in enumerate(dts):
        c = cts.get(k)
        ct_nodes.append(c._node if c is not None and dt.kind == "f" else zeros(shape, dt)._node)
    if kind == "fori":
        # from the bounds before broadcasting: constants fold, scalars stay 0-d (host-sized)
        lo, hi = (depth_source(n) for n in inputs[lay.bounds])
        depth = ew.maximum(ew.subtract(wrap(hi), wrap(lo)), 0)._node
    else:
        depth = record("loop", inputs, (kind, m, sub, m), shape, dtypes.int64)
    rin = tuple(inputs) + tuple(ct_nodes) + (depth,)
    captured = inputs[lay.captured]
    targets = _captured_targets(sub, shape)
    grads = []
    for k, dt in enumerate(dts):
        if dt.kind != "f":
            grads.append(None)
            continue
        grads.append(wrap(record("loop_vjp", rin, (kind, m, sub, rsub, k), shape, dt)))
    grads += [None] * (lay.bounds.stop - lay.bounds.start)
    for j, cap in enumerate(captured):
        if cap.dtype.kind != "f":
            grads.append(None)
        elif targets[j] is None:
            grads.append(wrap(record("loop_vjp", rin, (kind, m, sub, rsub, -1 - j), cap.shape, cap.dtype)))
        else:
            per_element = wrap(record("loop_vjp", rin, (kind, m, sub, rsub, m + j), shape, cap.dtype))
            grads.append(unbroadcast(per_element, cap.shape))
    return grads
