"""Layout of loop nodes' inputs, shared by partition, task building and reverse mode."""

from __future__ import annotations

from dataclasses import dataclass

from .node import Node


@dataclass(frozen=True)
class LoopLayout:
    kind: str          # "fori" | "while"
    n_state: int
    n_captured: int
    reverse: bool      # a loop_vjp node
    component: int

    @property
    def init(self) -> slice:
        return slice(0, self.n_state)

    @property
    def bounds(self) -> slice:
        start = self.n_state
        return slice(start, start + (2 if self.kind == "fori" else 0))

    @property
    def captured(self) -> slice:
        start = self.bounds.stop
        return slice(start, start + self.n_captured)

    @property
    def cts(self) -> slice:
        start = self.captured.stop
        return slice(start, start + (self.n_state if self.reverse else 0))

    @property
    def depth(self) -> int | None:
        return self.cts.stop if self.reverse else None

    def per_element(self, pos: int) -> bool:
        """True for inputs read at the loop's own index (init, bounds, cotangents)."""
        return pos < self.bounds.stop or self.cts.start <= pos < self.cts.stop


def layout(node: Node) -> LoopLayout:
    sub = node.params[2]
    n_captured = sum(1 for r in sub.roles if r[0] == "captured")
    return LoopLayout(node.params[0], node.params[1], n_captured, node.prim == "loop_vjp",
                      node.params[-1])


def siblings_key(node: Node) -> tuple:
    """Loop or call nodes computing the same thing (differing only in the component returned).

    A gathered table's gradient (a ``loop_vjp`` component < 0) is filled by atomic adds
    over the loop's elements in a task of its own: it has no siblings.
    """
    own = (node.params[-1],) if node.prim == "loop_vjp" and node.params[-1] < 0 else ()
    return (node.prim, node.params[:-1], tuple(id(i) for i in node.inputs)) + own


def depth_source(node: Node) -> Node:
    """The node behind broadcasts and reshapes of a loop's trip counts (same maximum)."""
    while node.prim in ("broadcast", "reshape"):
        node = node.inputs[0]
    return node
