"""From output nodes to a device-independent plan: tasks in order, buffer slots, lifetimes.

Slots ``0..len(leaves)-1`` hold the graph's inputs (bound at each run); the others hold
materialized nodes. A temporary slot is released right after the last step that reads
it, and released buffers of the same size are reused by later steps of the same run,
so peak memory follows the live set rather than the graph size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .node import Node, graph_key
from .partition import Schedule, partition, report_decisions
from .tasks import Task, build_tasks, coalesce


@dataclass
class Step:
    kind: str                 # "kernel" | "library"
    task: Task | None
    node: Node | None         # the library node
    slots: list               # plan slot of each task argument (library: inputs..., output)
    frees: list = field(default_factory=list)


@dataclass
class PlanSpec:
    key: str
    leaves: tuple
    slot_nodes: list          # node whose shape/dtype each slot holds
    steps: list
    outputs: list             # per output: ("slot", s) or ("const", node)
    schedule: Schedule
    tasks_fused: int

    @property
    def tasks(self) -> list:
        return [s.task for s in self.steps if s.task is not None]


def build_plan(outputs: tuple, fusion: bool, diag: bool = False) -> PlanSpec:
    key, leaves = graph_key(outputs)
    schedule = partition(outputs, fusion)
    if diag:
        report_decisions(schedule)
    slot_of: dict[int, int] = {id(leaf): i for i, leaf in enumerate(leaves)}
    slot_nodes: list = list(leaves)

    def slot(node: Node) -> int:
        s = slot_of.get(id(node))
        if s is None:
            s = slot_of[id(node)] = len(slot_nodes)
            slot_nodes.append(node)
        return s

    steps: list[Step] = []
    fused = 0
    for group in schedule.order:
        fused += len(group.members) - 1
        if group.root.prim == "matmul":
            a, b = group.root.inputs
            steps.append(Step("library", None, group.root, [slot(a), slot(b), slot(group.root)]))
            continue
        for task in build_tasks(schedule, group):
            coalesce(task)
            task.finalize()
            steps.append(Step("kernel", task, None, [slot(n) for n in task.arg_nodes]))
    out_specs = []
    for o in outputs:
        if o.prim == "const":
            out_specs.append(("const", o))
        else:
            out_specs.append(("slot", slot(o)))
    # lifetimes: release temporaries after their last reader
    keep = set(range(len(leaves))) | {s for kind, s in out_specs if kind == "slot"}
    last: dict[int, int] = {}
    for i, step in enumerate(steps):
        for s in step.slots:
            last[s] = i
    for s, i in last.items():
        if s not in keep:
            steps[i].frees.append(s)
    return PlanSpec(key, leaves, slot_nodes, steps, out_specs, schedule, fused)
