"""Layout of loop nodes' inputs, shared by partition, task building and reverse mode."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .node import Node, toposort
from .primitives import PRIMITIVES, TRANSCENDENTAL


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


def body_outputs(kind: str, sub) -> tuple:
    """The outputs of a loop's body subgraph that its body computes (a while loop's first
    output is its condition)."""
    return sub.outputs[1:] if kind == "while" else sub.outputs


def residuals(rsub) -> tuple:
    """The values a loop adjoint's replay pushes for its reverse body ``rsub`` beside the
    states (nodes of ``rsub``; empty: push the states the reverse body reads, as usual).

    The reverse body recomputes, from each popped state, the primal values its cotangent
    products need (B3's ``sin(v)`` and ``cos(v)``). Where that costs transcendental
    functions, the replay — which holds the state and computes the same values anyway,
    or nearly (``sin(v)``; ``cos(v)`` shares its range reduction) — pushes those values
    instead, and the reverse body reads them from the stack: the *residuals* of a
    linearization (JAX's partial evaluation of a JVP splits a function the same way), here
    per loop iteration. The residuals are the values computed from the state (not from a
    cotangent) that a cotangent-dependent node reads, each a float no wider than the
    widest state the reverse body reads (so a GPU's stack layout does not change; others,
    such as a ``where``'s mask, are recomputed from the states, which are then pushed as
    well); pushed only when at least one transcendental function feeds them and when
    they take at most twice the stack words of those states plus one. A reverse body
    holding loops keeps the usual rows (its nested adjoints push above them)."""
    order = toposort(rsub.outputs)
    if any(PRIMITIVES[n.prim].kind == "loop" for n in order):
        return ()
    roles = {id(leaf): role[0] for role, leaf in rsub.placeholders.values()}
    states = [leaf for role, leaf in rsub.placeholders.values() if role[0] == "state"]
    by_ct, by_state = set(), set()   # ids of the nodes computed from a cotangent / a state
    for n in order:
        ids = [id(i) for i in n.inputs]
        if any(roles.get(i) == "ct" or i in by_ct for i in ids):
            by_ct.add(id(n))
        if any(roles.get(i) == "state" or i in by_state for i in ids):
            by_state.add(id(n))
    out, seen = [], set()
    for n in order:
        if id(n) not in by_ct:
            continue
        for i in n.inputs:
            if id(i) in by_state and id(i) not in by_ct and id(i) not in seen:
                seen.add(id(i))
                out.append(i)
    if not out or not states:
        return ()
    widest = max(leaf.dtype.itemsize for leaf in states)
    out = [n for n in out if n.dtype.kind == "f" and n.dtype.itemsize <= widest]
    words = sum(-(-leaf.dtype.itemsize // 4) for leaf in states)
    if sum(-(-n.dtype.itemsize // 4) for n in out) > 2 * words + 1:
        return ()
    feeding = toposort(tuple(out))
    if not out or not any(n.prim in TRANSCENDENTAL and id(n) in by_state for n in feeding):
        return ()
    return tuple(out)


def nesting(kind: str, sub) -> int:
    """How deep loops nest in a loop body ``sub`` (0: none). The forward loop records the
    largest trip count at each of these depths (components ``n_state + 1 ...``): the
    reverse stacks one adstack level per depth above its own rows."""
    memo: dict = {}

    def depth(kind, sub) -> int:
        d = memo.get(id(sub))
        if d is None:
            d = memo[id(sub)] = max((1 + depth(n.params[0], n.params[2])
                                     for n in toposort(body_outputs(kind, sub)) if n.prim == "loop"),
                                    default=0)
        return d
    return depth(kind, sub)


def depth_source(node: Node) -> Node:
    """The node behind broadcasts and reshapes of a loop's trip counts (same maximum)."""
    while node.prim in ("broadcast", "reshape"):
        node = node.inputs[0]
    return node


# --- trip counts bounded on the host ------------------------------------------------------
# A reverse loop's depth (its largest trip count) that is an integer expression of inputs
# and constants through these operations is bounded on the host from the extremes of its
# inputs (interval arithmetic), never computed by a task: ``max(where(m, K, 0)) <= max(K, 0)``,
# ``max(hi - lo) <= max(hi) - min(lo)``, ``max(n + k) = max(n) + k``. An upper bound only
# sizes the stack, so it may exceed the true maximum but never fall below it.
_SAME = frozenset({"broadcast", "reshape", "slice", "transpose", "positive"})  # values kept or a subset
_WRAPS = frozenset({"add", "subtract", "negative", "multiply", "convert"})     # may leave the dtype's range
_BOUNDED = _SAME | _WRAPS | {"maximum", "minimum", "select"}


def host_bound(node: Node) -> bool:
    """Whether :func:`bound` can bound ``node`` from its inputs' extremes (the condition of
    a ``select`` is not read: either branch may be taken)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.dtype.kind not in "iub" or (n.prim not in _BOUNDED and n.prim not in ("input", "const")):
            return False
        stack.extend(n.inputs[1:] if n.prim == "select" else n.inputs)
    return True


def bound(node: Node, extreme) -> int:
    """An upper bound of every element of ``node`` (:func:`host_bound` holds);
    ``extreme(leaf, upper)`` gives the largest (``upper``) or smallest element of an input.
    Exact in Python integers; where the kernel's arithmetic could wrap (a result outside
    its dtype's range) the bound is the dtype's own limit."""
    return _Bounds(extreme).side(node, True)


class _Bounds:
    """The interval arithmetic of :func:`bound`, memoized per ``(node, side)``.

    An object rather than two mutually recursive closures: those would form a reference
    cycle holding ``extreme`` — and through it every buffer of the launch being sized —
    until the cyclic garbage collector happened to run (on a GPU, a gigabyte after a
    few calls)."""

    __slots__ = ("extreme", "memo")

    def __init__(self, extreme):
        self.extreme, self.memo = extreme, {}

    def side(self, n: Node, up: bool) -> int:
        key = (id(n), up)
        v = self.memo.get(key)
        if v is None:
            if n.prim in _WRAPS:
                lo, hi = self.exact(n, False), self.exact(n, True)
                lim = _limits(n.dtype)
                v = (hi if up else lo) if lim[0] <= lo and hi <= lim[1] else lim[up]
            else:
                v = self.exact(n, up)
            self.memo[key] = v
        return v

    def exact(self, n: Node, up: bool) -> int:
        p, ins, side = n.prim, n.inputs, self.side
        if p == "input":
            return int(self.extreme(n, up))
        if p == "const":
            return int(n.params[0])
        if p in _SAME or p == "convert":
            return side(ins[0], up)
        if p == "negative":
            return -side(ins[0], not up)
        if p == "add":
            return side(ins[0], up) + side(ins[1], up)
        if p == "subtract":
            return side(ins[0], up) - side(ins[1], not up)
        if p == "multiply":
            ends = [a * b for a in (side(ins[0], False), side(ins[0], True))
                    for b in (side(ins[1], False), side(ins[1], True))]
            return max(ends) if up else min(ends)
        pick = max if up else min
        if p == "select":
            return pick(side(ins[1], up), side(ins[2], up))
        return (max if p == "maximum" else min)(side(ins[0], up), side(ins[1], up))


def _limits(dtype) -> tuple:
    if dtype.kind == "b":
        return (0, 1)
    info = np.iinfo(dtype)
    return (int(info.min), int(info.max))


def host_read(outputs: tuple, topo: list) -> tuple[list, set]:
    """``topo`` without the nodes only the host reads, and the edges it reads them by:
    ``(id(loop_vjp node), input position)`` of every depth :func:`host_bound` holds for
    (that expression is bounded at launch, not computed: ``qtrace.devices.adstack``)."""
    cut = set()
    for n in topo:
        if n.prim == "loop_vjp":
            pos = layout(n).depth
            d = n.inputs[pos]
            if d.prim not in ("input", "const") and host_bound(d):
                cut.add((id(n), pos))
    if not cut:
        return topo, cut
    reached, stack = set(), list(outputs)
    while stack:
        n = stack.pop()
        if id(n) not in reached:
            reached.add(id(n))
            stack.extend(i for pos, i in enumerate(n.inputs) if (id(n), pos) not in cut)
    return [n for n in topo if id(n) in reached], cut
