"""Reverse mode through per-element loops: the ``loop`` VJP builds a ``loop_vjp`` node.

The reverse body is the forward body differentiated by the ordinary graph rules
(:mod:`qtrace.ad.rules`) with respect to the carried state and to the per-element
reads of captured values; the adjoint kernel (``qtrace.kernels.codegen``) replays each
element's loop onto the adstack and runs this reverse body once per iteration, popping.
"""

from __future__ import annotations

import threading

from ..graph.loops import body_outputs, depth_source, layout, nesting
from ..graph.node import make_input, make_node, substitute, toposort
from ..graph.primitives import PRIMITIVES
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


def _read_per_element(loop, value) -> bool:
    """Whether nested ``loop`` reads its input ``value`` per element: as its state or a
    bound, or a captured value its body (or a loop nested there) reads elementwise — not
    only as a table gathered from."""
    sub, first = loop.params[2], layout(loop).captured.start
    for k, i in enumerate(loop.inputs):
        if i is not value:
            continue
        if k < first:
            return True
        inner = sub.leaf(("captured", k - first))
        for n in toposort(sub.outputs):
            if not any(x is inner for x in n.inputs):
                continue
            kind = PRIMITIVES[n.prim].kind
            if kind == "elementwise" or n.prim == "broadcast":
                return True
            if kind == "loop" and _read_per_element(n, inner):
                return True
        return False
    return False


def _refuse_smaller_nested_read(sub: Subgraph, j: int, shape: tuple) -> None:
    """Raise where captured value ``j``, of a smaller shape than the loop's, is read per
    element by a loop nested in the body: its gradient has no per-element target there (it
    came out zero)."""
    leaf = sub.leaf(("captured", j))
    if leaf is None or leaf.shape == shape:
        return
    for n in toposort(sub.outputs):
        if (PRIMITIVES[n.prim].kind == "loop" and any(x is leaf for x in n.inputs)
                and _read_per_element(n, leaf)):
            raise NotImplementedError(
                f"qtrace: the gradient of a tensor of shape {leaf.shape} that a nested loop reads "
                f"per element of shape {shape} is not supported; broadcast it to {shape} before "
                "the loops (qt.broadcast_to)")


def _captured_gathers(sub: Subgraph, shape: tuple) -> dict:
    """For each captured placeholder: the gathers that read it (``table[idx]`` in the body).

    Their cotangents are scattered into the table's gradient by atomic adds inside the
    adjoint kernel. A float value read any other way than per element or by a direct
    gather (e.g. sliced, then gathered) has no rule yet: ``NotImplementedError`` (not
    checked when ``shape``, the loop's, is None).
    """
    nodes = toposort(sub.outputs)
    out = {}
    for role, leaf in sub.placeholders.values():
        if role[0] != "captured":
            continue
        readers = [n for n in nodes if any(i is leaf for i in n.inputs)]
        out[role[1]] = [n for n in readers if PRIMITIVES[n.prim].kind == "gather" and n.inputs[0] is leaf]
        if leaf.dtype.kind not in "fc" or shape is None:
            continue
        for n in readers:
            kind = PRIMITIVES[n.prim].kind
            per_element = n.shape == shape and (n.prim == "broadcast" or kind == "elementwise")
            if not per_element and kind != "loop" and not any(n is g for g in out[role[1]]):
                raise NotImplementedError(
                    f"qtrace: the gradient of a tensor read inside a loop body through {n.prim} "
                    f"(shape {leaf.shape} -> {n.shape}) is not supported; read it per element or "
                    "gather from it directly (table[idx])")
    return out


def gathered_tables(kind: str, sub: Subgraph) -> set:
    """The captured values ``j`` of a loop body that some loop gathers from: the body itself
    (``table[idx]``), or a loop nested in it at any depth, to which the body passes the
    table on as a captured value of its own.

    A table's gradient is a loop adjoint component of its own (zeros, then atomic adds of
    every gathered read's cotangent, however deep the loop that reads it): the nested
    loops' adjoints add into the same buffer when they run inside this loop's reverse."""
    out = {j for j, readers in _captured_gathers(sub, None).items() if readers}
    leaf_j = {id(leaf): role[1] for role, leaf in sub.placeholders.values() if role[0] == "captured"}
    for n in toposort(body_outputs(kind, sub)):
        if n.prim != "loop":
            continue
        inner = layout(n)
        deeper = gathered_tables(inner.kind, n.params[2])
        for jj, c in enumerate(n.inputs[inner.captured]):
            if jj in deeper and id(c) in leaf_j:
                out.add(leaf_j[id(c)])
    return out


# Whether this thread is differentiating a loop body (building a reverse body). A loop
# nested in the body then leaves its gathered tables' gradients to the enclosing loop's
# table task, whose adjoint runs the nested adjoints and their atomic adds (a table-wide
# gradient is no per-element value of the body).
_in_body = threading.local()


def reverse_body(sub: Subgraph, kind: str, dts: list, shape: tuple, device) -> tuple:
    """The reverse body of a loop body: cotangents of the state and of captured reads.

    Outputs: the state's cotangents, one per-element cotangent per captured value (zero
    for values only gathered), then for every gather from a captured table its indices
    and its cotangent. Returns the body and ``scatters``: ``(captured j, number of
    indices)`` per gather, in output order.
    """
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
    gathers = _captured_gathers(sub, shape)
    wrt = list(state) + [targets[j] for j in range(n_cap) if targets[j] is not None]
    wrt += [g for j in range(n_cap) for g in gathers[j]]
    ct_tensors = [wrap(c) if dts[k].kind == "f" else None for k, c in enumerate(cts)]
    _in_body.depth = getattr(_in_body, "depth", 0) + 1
    try:
        grads = reverse.backward(list(outs), ct_tensors, wrt)
    finally:
        _in_body.depth -= 1
    results = []
    for k, dt in enumerate(dts):
        g = grads[k] if dt.kind == "f" else None
        results.append(g._node if g is not None else zeros(shape, dt, device)._node)
    it = iter(grads[m:])
    for j in range(n_cap):
        leaf = sub.leaf(("captured", j))
        if targets[j] is None:
            results.append(zeros(shape, leaf.dtype, device)._node)
            continue
        g = next(it)
        if g is not None and g.shape != shape:
            g = ew.add(g, zeros(shape, g.dtype, device))
        results.append(g._node if g is not None else zeros(shape, leaf.dtype, device)._node)
    scatters = []
    for j in range(n_cap):
        for gather in gathers[j]:
            g = next(it)
            if g is None:
                continue
            if g.shape != shape:
                g = ew.add(g, zeros(shape, g.dtype, device))
            results += list(gather.inputs[1:]) + [g._node]
            scatters.append((j, len(gather.inputs) - 1))
    used = {id(leaf) for n in toposort(tuple(results)) for leaf in n.leaves}
    used |= {id(n) for n in results if n.is_leaf}
    return Subgraph(tuple(results), {i: r for i, r in roles.items() if i in used}), tuple(scatters)


def reuse_replays(nodes: tuple) -> tuple:
    """``nodes`` reading forward loop results from their adjoint's replay where possible.

    The adjoint kernel replays each element's loop before running it backwards, so the
    final state is computed there anyway. When nothing the adjoint needs depends on the
    forward loop (its cotangents do not, and its depth is known without running it), the
    loop's results are read from the adjoint instead (components after its cotangents)
    and the forward loop never runs: ``value_and_grad`` of a loop costs one loop task.
    """
    order = toposort(nodes)
    forward: dict = {}
    for n in order:
        if n.prim == "loop":
            forward.setdefault(_forward_key(n.params[:3], n.inputs), []).append(n)
    mapping: dict = {}
    for v in order:
        if v.prim != "loop_vjp" or v.params[-1] < 0:
            continue
        lay = layout(v)
        key = _forward_key(v.params[:3], v.inputs[:lay.captured.stop])
        loops = [n for n in forward.get(key, []) if n.params[-1] < lay.n_state]
        if not loops or id(loops[0]) in mapping or _depends_on(v.inputs[lay.captured.stop:], key):
            continue
        first = lay.n_state + lay.n_captured
        for n in loops:
            mapping[id(n)] = make_node("loop_vjp", v.params[:-1] + (first + n.params[-1],), n.shape,
                                       n.dtype, v.inputs, v.device)
    return substitute(tuple(nodes), mapping) if mapping else tuple(nodes)


def _forward_key(params: tuple, inputs: tuple) -> tuple:
    return (params, tuple(id(i) for i in inputs))


def _depends_on(nodes: tuple, key: tuple) -> bool:
    """Whether any of ``nodes`` is computed from a component of the loop ``key`` names."""
    for n in toposort(nodes):
        if n.prim == "loop" and _forward_key(n.params[:3], n.inputs) == key:
            return True
    return False


ADJOINTS = [0]  # loop adjoints recorded so far (a reverse pass without them has no replays to share)


def loop_vjp(node, cts: dict, needed: set | None = None) -> list:
    """Input cotangents of a loop node given the cotangents of its components (``needed``:
    the positions of the inputs whose cotangents are wanted; None: all)."""
    ADJOINTS[0] += 1
    lay = layout(node)
    kind, m, sub = node.params[0], node.params[1], node.params[2]
    inputs = node.inputs
    init = inputs[lay.init]
    dts = [n.dtype for n in init]
    shape = node.shape
    rsub, scatters = reverse_body(sub, kind, dts, shape, node.device)
    ct_nodes = []
    for k, dt in enumerate(dts):
        c = cts.get(k)
        ct_nodes.append(c._node if c is not None and dt.kind == "f" else zeros(shape, dt, node.device)._node)
    if kind == "fori":
        # from the bounds before broadcasting: constants fold, scalars stay 0-d (host-sized)
        lo, hi = (depth_source(n) for n in inputs[lay.bounds])
        if lo.prim == "const" and lo.params[0] == 0:
            depth = hi  # the sizing clamps at 0: nothing to compute, the counts are read as they are
        else:
            depth = ew.maximum(ew.subtract(wrap(hi), wrap(lo)), 0)._node
    else:
        depth = record("loop", inputs, (kind, m, sub, m), shape, dtypes.int64)
    rin = tuple(inputs) + tuple(ct_nodes) + (depth,)
    # loops nested in the body: their reverses stack above ours, one level per depth of
    # nesting, each sized by the largest trip count at that depth, which the forward loop
    # records (its components m + 1, m + 2, ...)
    rin += tuple(record("loop", inputs, (kind, m, sub, m + level), shape, dtypes.int64)
                 for level in range(1, nesting(kind, sub) + 1))
    captured = inputs[lay.captured]
    targets = _captured_targets(sub, shape)
    tables = gathered_tables(kind, sub)
    params = (kind, m, sub, rsub, scatters)
    grads = []
    for k, dt in enumerate(dts):
        if dt.kind != "f":
            grads.append(None)
            continue
        grads.append(wrap(record("loop_vjp", rin, params + (k,), shape, dt)))
    grads += [None] * (lay.bounds.stop - lay.bounds.start)
    for j, cap in enumerate(captured):
        if cap.dtype.kind != "f":
            grads.append(None)
            continue
        g = None
        if targets[j] is not None:
            per_element = wrap(record("loop_vjp", rin, params + (m + j,), shape, cap.dtype))
            g = unbroadcast(per_element, cap.shape)
        if j in tables and not getattr(_in_body, "depth", 0):
            # the table's gradient: zeros, then atomic adds at the gathered indices (its own task)
            table = wrap(record("loop_vjp", rin, params + (-1 - j,), cap.shape, cap.dtype))
            g = table if g is None else ew.add(g, table)
        if g is None and (needed is None or lay.captured.start + j in needed):
            _refuse_smaller_nested_read(sub, j, shape)
        grads.append(g)
    return grads
