"""Reverse mode through ``call`` nodes (a ``qt.jit`` function used inside a derivative).

The VJP of a call is another call: of the function's reverse body, built once per body
and cached, so a Python loop that calls one jitted step T times compiles the step's
forward and backward plans once. The reverse body recomputes what it needs from the
call's inputs, so the only per-step memory kept for the backward is those inputs.
"""

from __future__ import annotations

import threading

from ..graph.node import make_input
from ..graph.subgraph import Subgraph
from ..tracer.context import buffered, record
from ..tracer.convert import wrap
from ..tracer.creation import zeros
from . import reverse

_lock = threading.Lock()
_reverse: dict = {}


def reverse_body(sub: Subgraph, arg_specs: list, out_specs: list) -> tuple[Subgraph, tuple]:
    """Cotangents of a call's args and captured values, given its outputs' cotangents.

    Placeholders: the original args (``("arg", i)``), one cotangent per output
    (``("arg", n_args + k)``) and the captured values (``("captured", j)``). A constant
    array that a VJP rule creates (a leaf holding a buffer) becomes one more captured
    value, after the body's own; the call node passes it in. Returns the reverse body and
    those constants.
    """
    key = (sub.key, tuple(arg_specs), tuple(out_specs))
    with _lock:
        hit = _reverse.get(key)
    if hit is not None:
        return hit
    n_args = len(arg_specs)
    roles = {i: r for i, (r, _) in sub.placeholders.items()}
    cts = []
    for k, (shape, dtype, device) in enumerate(out_specs):
        leaf = make_input(shape, dtype, device, buffer=None)
        roles[id(leaf)] = ("arg", n_args + k)
        cts.append(wrap(leaf) if dtype.kind in "fc" else None)
    args = [sub.leaf(("arg", i)) for i in range(n_args)]
    n_cap = sum(1 for r in sub.roles if r[0] == "captured")
    caps = [sub.leaf(("captured", j)) for j in range(n_cap)]
    wrt = [a for a in args if a is not None] + caps
    grads = iter(reverse.backward(list(sub.outputs), cts, wrt))
    outs = []
    for i, (shape, dtype, device) in enumerate(arg_specs):
        g = next(grads) if args[i] is not None else None
        outs.append(g._node if g is not None else zeros(shape, dtype, device)._node)
    for c in caps:
        g = next(grads)
        outs.append(g._node if g is not None else zeros(c.shape, c.dtype, c.device)._node)
    used = {}
    for o in outs:
        used.update((id(leaf), leaf) for leaf in o.leaves)
    consts = [leaf for i, leaf in used.items() if i not in roles]
    for j, leaf in enumerate(consts):
        roles[id(leaf)] = ("captured", n_cap + j)
    rsub = Subgraph(tuple(outs), {i: r for i, r in roles.items() if i in used})
    with _lock:
        hit = _reverse.setdefault(key, (rsub, tuple(consts)))
    return hit


def call_vjp(node, cts: dict) -> list:
    """Input cotangents of a call node given the cotangents of its components."""
    sub, n_args = node.params[0], node.params[1]
    inputs = node.inputs
    n_out = len(sub.outputs)
    out_specs = [(o.shape, o.dtype, o.device) for o in sub.outputs]
    arg_specs = [(i.shape, i.dtype, i.device) for i in inputs[:n_args]]
    rsub, consts = reverse_body(sub, arg_specs, out_specs)
    ct_nodes = []
    for k, (shape, dtype, device) in enumerate(out_specs):
        c = cts.get(k)
        ct_nodes.append(c._node if c is not None and dtype.kind in "fc"
                        else zeros(shape, dtype, device)._node)
    rin = tuple(inputs[:n_args]) + tuple(buffered(c) for c in ct_nodes) + tuple(inputs[n_args:]) + consts
    grads = []
    for j, inp in enumerate(inputs):
        if inp.dtype.kind not in "fc":
            grads.append(None)
            continue
        grads.append(wrap(record("call", rin, (rsub, n_args + n_out, j), inp.shape, inp.dtype)))
    return grads
