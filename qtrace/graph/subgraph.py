"""Subgraphs: traced function bodies (loop bodies and their reverse) as graph parameters.

A subgraph is a set of output nodes over *placeholder* leaves, each with a role:
``("state", k)`` (a loop-carried value), ``("counter",)`` (the iteration index),
``("captured", j)`` (a value from outside the body, passed to the loop node as an
input) or ``("ct", k)`` (an incoming cotangent, for reverse bodies). Values a body
reads from outside are cut off at tracing and replaced by captured placeholders, so a
subgraph's content key depends only on its structure — it is a graph parameter like
any other, and the loop node that holds it hashes the same in every process.
"""

from __future__ import annotations

import numpy as np

from .node import Node, content_hash, graph_key, make_input, make_node, toposort
from .primitives import PRIMITIVES


class Subgraph:
    """Output nodes over role-tagged placeholder leaves; compared and hashed by content."""

    __slots__ = ("outputs", "roles", "key", "placeholders", "graph_key")

    def __init__(self, outputs: tuple, placeholders: dict):
        """``placeholders`` maps ``id(leaf) -> role`` for every leaf the outputs may use."""
        self.outputs = tuple(outputs)
        key, leaves = graph_key(self.outputs)
        self.graph_key = key
        for leaf in leaves:
            if id(leaf) not in placeholders:
                raise AssertionError("qtrace: a subgraph reads a leaf that is not a placeholder")
        self.placeholders = {id(leaf): (placeholders[id(leaf)], leaf) for leaf in leaves}
        self.roles = tuple(placeholders[id(leaf)] for leaf in leaves)
        self.key = content_hash(("subgraph", key, self.roles))

    def role_of(self, leaf: Node):
        entry = self.placeholders.get(id(leaf))
        return entry[0] if entry else None

    def leaf(self, role):
        for r, leaf in self.placeholders.values():
            if r == role:
                return leaf
        return None

    def __repr__(self) -> str:
        return f"Subgraph({self.key})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Subgraph) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


def cut(outputs: tuple, placeholders: dict):
    """Rebuild the part of ``outputs`` that depends on ``placeholders``.

    Every node the body reads from outside (independent of the placeholders, and not a
    constant) becomes a new ``("captured", j)`` placeholder; where an elementwise
    operation reads it broadcast, the broadcast becomes an explicit node, so that a
    reverse body can ask for the per-element cotangent of a captured value. A complex value
    read elementwise or gathered from is captured as its real and imaginary parts (two real
    placeholders, as a complex loop state is carried: ``qtrace.tracer.loops``) and rebuilt in
    the body (a gather gathers from each part). Returns the rebuilt outputs, the extended
    placeholder map, and the captured outside nodes.
    """
    dependent: set[int] = set(placeholders)
    order = toposort(outputs)
    for n in order:
        if any(id(i) in dependent for i in n.inputs):
            dependent.add(id(n))
    mapping: dict = {}   # id(node) -> body node; ("parts"/"joined", id): a complex one by parts
    roles = dict(placeholders)
    captured: list[Node] = []
    joined: dict[int, tuple] = {}   # id(a complex value rebuilt in the body) -> its part leaves

    def parts(n: Node) -> tuple:
        """Captured leaves of the real and imaginary parts of complex outside value ``n``."""
        got = mapping.get(("parts", id(n)))
        if got is None:
            part = np.dtype(np.float32 if n.dtype == np.complex64 else np.float64)
            got = mapping["parts", id(n)] = tuple(
                get(make_node(prim, (), n.shape, part, (n,), n.device, n.weak)) for prim in ("real", "imag"))
        return got

    def get(n: Node, split: bool = False) -> Node:
        if split and id(n) not in dependent and n.dtype.kind == "c":
            # read per element: captured by its real and imaginary parts and rebuilt in the
            # body (a loop kernel keeps real values per element, and cotangents of them)
            node = mapping.get(("joined", id(n)))
            if node is None:
                leaves = parts(n)
                node = make_node("complex", (), n.shape, n.dtype, leaves, n.device, n.weak)
                mapping["joined", id(n)] = node
                joined[id(node)] = leaves
            return node
        if id(n) in mapping:
            return mapping[id(n)]
        if id(n) in placeholders or n.prim == "const":
            return n
        if id(n) not in dependent:
            leaf = make_input(n.shape, n.dtype, n.device, buffer=None, weak=n.weak)
            roles[id(leaf)] = ("captured", len(captured))
            captured.append(n)
            mapping[id(n)] = leaf
            return leaf
        raise AssertionError("unreachable")

    def spread(i: Node, shape: tuple) -> Node:
        """Captured value ``i`` as an elementwise operation of ``shape`` reads it: broadcast
        explicitly (a complex one: its parts, then rebuilt)."""
        if i.shape == shape:
            return i
        if i.is_leaf and roles.get(id(i), ("",))[0] == "captured":
            return make_node("broadcast", (shape,), shape, i.dtype, (i,), i.device, i.weak)
        if id(i) in joined:
            return make_node("complex", (), shape, i.dtype, tuple(spread(p, shape) for p in joined[id(i)]),
                             i.device, i.weak)
        return i

    for n in order:
        if id(n) not in dependent:
            continue
        kind = PRIMITIVES[n.prim].kind
        table = n.inputs[0] if n.inputs else None
        if kind == "gather" and table.dtype.kind == "c" and id(table) not in dependent:
            # a complex table: gathered by its parts (two real tables), rebuilt per element
            rest = tuple(get(i) for i in n.inputs[1:])
            halves = tuple(make_node(n.prim, n.params, n.shape, t.dtype, (t,) + rest, n.device, n.weak)
                           for t in parts(table))
            mapping[id(n)] = make_node("complex", (), n.shape, n.dtype, halves, n.device, n.weak)
            continue
        if kind == "elementwise":
            inputs = tuple(spread(get(i, split=True), n.shape) for i in n.inputs)
        else:
            inputs = tuple(get(i) for i in n.inputs)
        mapping[id(n)] = make_node(n.prim, n.params, n.shape, n.dtype, inputs, n.device, n.weak)
    outs = tuple(mapping.get(id(o), get(o)) if id(o) not in placeholders else o for o in outputs)
    return outs, roles, captured
