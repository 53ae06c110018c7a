"""Partition a graph into range tasks, fusing producers into consumers where safe.

Every non-constant node starts as its own task (``QTRACE_FUSION=0`` keeps it that
way: the reference every fusion test compares against). With fusion on, walking from
consumers to producers:

* a *view* (reshape, transpose, broadcast, slice) is free — an index remapping applied
  where it is read — unless it is an output or a library task reads it;
* an elementwise or gather node joins its consumers' task when every consumer is in one
  task and reads it at its own index (an elementwise consumer of the same shape, or the
  input of a reduction or scan). Its value then stays in registers; it is stored too
  only if it is also an output of the graph and the task is a plain map of its shape;
* everything else (reductions, scans, scatters, concatenations, library calls, nodes
  read through a view or a broadcast, or by several tasks) is materialized.

Each decision is recorded with its reason: ``QTRACE_FUSION_DIAG=1`` prints them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from .node import Node, toposort
from .primitives import PRIMITIVES

FREE = "free"


@dataclass
class Group:
    """One task-producing unit: a root node and the producers fused into it."""
    root: Node
    members: list = field(default_factory=list)   # nodes computed in this group (root last)
    stored: list = field(default_factory=list)    # members written to memory


@dataclass
class Schedule:
    outputs: tuple
    order: list                     # groups in execution order
    group_of: dict                  # id(node) -> Group | FREE
    stored: dict                    # id(node) -> node, every materialized non-leaf node
    consumers: dict                 # id(node) -> list of (consumer, input position)
    decisions: list                 # (producer, consumer, fused: bool, reason)


def kind(node: Node) -> str:
    return PRIMITIVES[node.prim].kind


def _reads_at_own_index(producer: Node, consumer: Node, pos: int) -> str | None:
    """None if ``consumer`` reads ``producer`` at the producer's own index, else the reason."""
    ck = kind(consumer)
    if ck == "elementwise":
        if consumer.shape == producer.shape or producer.size == 1:
            return None  # same index, or a scalar (loop-invariant: computed once per range)
        return f"broadcast read: {producer.shape} -> {consumer.shape}"
    if ck in ("reduce", "scan"):
        return None
    if ck == "gather" and pos > 0:
        return None if consumer.shape == producer.shape else "broadcast index read"
    if ck == "gather":
        return "gather source is read at data-dependent indices"
    if ck == "view":
        return f"read through {consumer.prim} (different index)"
    return f"{consumer.prim} reads materialized operands"


def partition(outputs: tuple, fusion: bool) -> Schedule:
    topo = toposort(outputs)
    consumers: dict[int, list] = {}
    for n in topo:
        for pos, inp in enumerate(n.inputs):
            consumers.setdefault(id(inp), []).append((n, pos))
    out_ids = {id(o) for o in outputs}
    group_of: dict[int, object] = {}
    groups: list[Group] = []
    stored: dict[int, Node] = {}
    decisions: list = []

    def new_group(n: Node) -> None:
        g = Group(n, [n], [n])
        group_of[id(n)] = g
        groups.append(g)
        stored[id(n)] = n

    for n in reversed(topo):
        k = kind(n)
        if k == "leaf":  # constants: immediates in the code
            continue
        users = consumers.get(id(n), [])
        if not fusion:
            new_group(n)
            continue
        if k == "view":
            if id(n) in out_ids or any(kind(c) == "library" for c, _ in users):
                new_group(n)
            else:
                group_of[id(n)] = FREE
            continue
        target, reason = None, None
        if k not in ("elementwise", "gather"):
            reason = f"{n.prim} is a {k} task"
        elif not users:
            reason = "output"
        else:
            for c, pos in users:
                g = group_of[id(c)]
                why = "read through a view" if g is FREE else _reads_at_own_index(n, c, pos)
                if why is None and target is not None and g is not target:
                    why = "consumers in several tasks"
                decisions.append((n, c, why is None, why or "same index"))
                if why is not None:
                    reason = why
                    break
                target = g
            if reason is None and id(n) in out_ids:
                if kind(target.root) != "elementwise" and kind(target.root) != "gather" \
                        or target.root.shape != n.shape:
                    reason = "output of a different shape than its consumer's task"
        if reason is None and target is not None:
            target.members.insert(0, n)
            group_of[id(n)] = target
            if id(n) in out_ids:
                target.stored.append(n)
                stored[id(n)] = n
        else:
            new_group(n)
    groups.reverse()
    # execution order: by the topological position of each group's root
    position = {id(n): i for i, n in enumerate(topo)}
    groups.sort(key=lambda g: position[id(g.root)])
    return Schedule(tuple(outputs), groups, group_of, stored, consumers, decisions)


def report_decisions(schedule: Schedule, out=None) -> None:
    """Print every fusion decision (``QTRACE_FUSION_DIAG=1``)."""
    out = out or sys.stderr
    for producer, consumer, fused, reason in schedule.decisions:
        verdict = "fused" if fused else "boundary"
        print(f"[qtrace fusion] {producer.prim}{producer.shape} -> {consumer.prim}{consumer.shape}: "
              f"{verdict} ({reason})", file=out)
