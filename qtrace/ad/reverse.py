"""The reverse pass over a graph: cotangents flow from outputs to marked inputs."""

from __future__ import annotations

from ..graph.loops import siblings_key
from ..graph.node import Node, toposort
from ..tracer import elementwise as ew
from ..tracer.convert import astype, held
from . import calls, library, loops
from .rules import rule_for

SIBLINGS = ("loop", "call", "lib")  # multi-output primitives: one node per component


def backward(outputs: list[Node], cotangents: list, wrt: list[Node]) -> list:
    """Cotangents of ``wrt`` given output cotangents (tensors); ``None`` where none flows.

    Only nodes on a path from a ``wrt`` node to an output are visited. Each rule records
    ordinary operations, so the result is a lazy graph like any other. The components
    of one loop are differentiated together, once all their cotangents are known.
    """
    wrt_ids = {id(w) for w in wrt}
    topo = toposort(outputs, stop=wrt_ids)
    needs: set[int] = set(wrt_ids)
    for n in topo:
        if any(id(i) in needs for i in n.inputs):
            needs.add(id(n))
    siblings: dict = {}
    for n in topo:
        if n.prim in SIBLINGS:
            siblings.setdefault(siblings_key(n), []).append(n)
    cts: dict[int, object] = {}

    def accumulate(node: Node, ct) -> None:
        if ct.dtype != node.dtype:
            ct = astype(ct, node.dtype)
        prev = cts.get(id(node))
        cts[id(node)] = ct if prev is None else ew.add(prev, ct)

    for out, ct in zip(outputs, cotangents):
        if ct is not None and id(out) in needs:
            accumulate(out, ct)
    for n in reversed(topo):
        if id(n) in wrt_ids or id(n) not in needs:
            continue
        if n.prim in SIBLINGS:
            group = siblings[siblings_key(n)]
            if group[0] is not n:  # wait for the earliest component: all cotangents are in
                continue
            by_component = {}
            for s in group:
                c = cts.pop(id(s), None)
                if c is not None:
                    by_component[s.params[-1]] = c
            if not by_component:
                in_cts = []
            elif n.prim == "loop":   # (which inputs need cotangents: see loops.loop_vjp)
                needed = {k for k, i in enumerate(n.inputs) if id(i) in needs}
                in_cts = loops.loop_vjp(n, by_component, needed)
            else:
                in_cts = {"call": calls.call_vjp, "lib": library.lib_vjp}[n.prim](n, by_component)
        else:
            ct = cts.pop(id(n), None)
            if ct is None:
                continue
            rule = rule_for(n.prim)
            if rule is None:
                continue
            in_cts = rule(n, ct, [held(i) for i in n.inputs], held(n))
        for inp, g in zip(n.inputs, in_cts):
            if g is not None and id(inp) in needs and inp.dtype.kind in "fc":
                accumulate(inp, g)
    return [cts.get(id(w)) for w in wrt]
