"""From output nodes to a device-independent plan: tasks in order, buffer slots, lifetimes.

Slots ``0..len(leaves)-1`` hold the graph's inputs (bound at each run); the others hold
materialized nodes. A temporary slot is released right after the last step that reads
it, and released buffers of the same size are reused by later steps of the same run,
so peak memory follows the live set rather than the graph size.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

from .instrs import LOOPS, rewrite, walk
from .loops import depth_source, host_bound
from .node import Node, graph_key
from .partition import MAX_TASK_COST, REGION_BYTES, VIEWED, Decision, Schedule, partition, report_decisions
from .partition import kind as kind_of
from .tasks import Task, build_tasks, coalesce, try_merge
from .unroll import unroll


@dataclass
class Step:
    kind: str                 # "kernel" | "library" | "view"
    task: Task | None
    node: Node | None         # the library node; a view step: the view (its slot: slots[1])
    slots: list               # plan slot of each task argument (library: inputs..., output)
    frees: list = field(default_factory=list)
    reads: list = field(default_factory=list)   # slots the host reads before the launch
    outputs: list = field(default_factory=list)  # library steps: the nodes they produce
    chain: tuple = ()         # a view step: view nodes from its source up to ``node``


@dataclass
class PlanSpec:
    key: str
    leaves: tuple
    slot_nodes: list          # node whose shape/dtype each slot holds
    steps: list
    outputs: list             # per output: ("slot", s) or ("const", node)
    schedule: Schedule
    tasks_fused: int
    horizontal: list = field(default_factory=list)   # (task, into, None | reason)
    slot_of: dict = field(default_factory=dict)      # id(node) -> its slot (an in-place region
                                                     # assignment shares its base's)

    @property
    def tasks(self) -> list:
        return [s.task for s in self.steps if s.task is not None]


def build_plan(outputs: tuple, fusion: bool, diag: bool = False, lanes: int = 0,
               region_bytes: int = REGION_BYTES) -> PlanSpec:
    """The plan computing ``outputs``: partition, tasks, horizontal merges, slots and
    lifetimes. ``lanes``: the target's block width for per-element loops (0: none);
    ``region_bytes``: its smallest base of a region task (:mod:`qtrace.graph.partition`)."""
    key, leaves = graph_key(outputs)
    unrolled = []
    if fusion:  # (the rewritten graph has the same leaves: the slots stay the caller's)
        outputs, unrolled = unroll(outputs)
    schedule = partition(outputs, fusion, region_bytes)
    schedule.decisions[:0] = [Decision(n, "elementwise", True, why) for n, why in unrolled]
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

    raw: list = []   # (kind, task or library node) in execution order
    fused = 0
    producer: dict[int, int] = {}   # id(node) -> index in raw of the step writing it
    horizontal: list = []
    for group in schedule.order:
        fused += len(group.members) - 1
        if kind_of(group.root) == "library":
            for n in group.stored:
                producer[id(n)] = len(raw)
            raw.append(("library", group))
            continue
        for task in build_tasks(schedule, group):
            target = _merge_target(raw, producer, task) if fusion and task.region is None else None
            if target is not None:
                why = _merge_policy(raw[target][1], task) or try_merge(raw[target][1], task,
                                                                        MAX_TASK_COST)
                horizontal.append((task, raw[target][1], why))
                if why is None:
                    fused += 1
                    for i in task.writes:  # a node written by several tasks (a concatenation's
                        n = task.arg_nodes[i]  # pieces) is ready after the last of them
                        producer[id(n)] = max(producer.get(id(n), -1), target)
                    continue
            for i in task.writes:
                producer[id(task.arg_nodes[i])] = len(raw)
            raw.append(("kernel", task))
    if diag:
        report_horizontal(horizontal)
    _drop_dead_stores(raw, outputs, schedule)
    steps: list[Step] = []
    for kind, item in raw:
        if kind == "library":
            root = item.root
            outs = list(item.stored)
            step = Step("library", None, root, [slot(i) for i in root.inputs] + [slot(n) for n in outs])
            step.outputs = outs
            for i in root.inputs:
                if schedule.group_of.get(id(i)) is VIEWED:  # a strided view of its source's buffer
                    chain, src = [], i
                    while schedule.group_of.get(id(src)) is VIEWED:
                        chain.append(src)
                        src = src.inputs[0]
                    steps.append(Step("view", None, i, [slot(src), slot(i)], chain=tuple(reversed(chain))))
                    step.reads.append(slot(src))  # the source outlives the view's reader
            steps.append(step)
        else:
            coalesce(item)
            _block_lanes(item, lanes)
            item.finalize()
            if item.in_place:  # the assignment's result is its base's buffer
                root, base = item.region
                slot_of[id(root)] = slot(base)
            step = Step("kernel", item, None, [slot(n) for n in item.arg_nodes])
            for depth, _, _ in item.stack or ():  # the host reads trip counts to size the adstack
                base = depth_source(depth)
                if not host_bound(base):  # else: bounded from the leaves (always in their slots)
                    step.reads.append(slot(base))
            steps.append(step)
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
        for s in step.slots + step.reads:
            last[s] = i
    for s, i in last.items():
        if s not in keep:
            steps[i].frees.append(s)
    return PlanSpec(key, leaves, slot_nodes, steps, out_specs, schedule, fused, horizontal, slot_of)


def _task_name(task: Task) -> str:
    ops = sorted({n.prim for n in task.nodes if not n.is_leaf})
    return f"task{list(task.domain)}({', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''})"


def report_horizontal(horizontal: list, out=None) -> None:
    """Print every horizontal merge decision (``QTRACE_FUSION_DIAG=1``), as partitioning
    prints the vertical ones."""
    out = out or sys.stderr
    for task, into, why in horizontal:
        verdict = "merged" if why is None else f"separate: {why}"
        print(f"[qtrace fusion] horizontal {_task_name(task)} -> {_task_name(into)}: {verdict}", file=out)


def _merge_policy(a: Task, b: Task) -> str | None:
    """Why map task ``b`` should not join ``a`` whatever its safety, or None.

    Tasks of fewer than ``SMALL_TASK`` elements that share no buffer stay separate: merging them
    saves only a call (small tasks run in one launch, see qtrace.kernels.sequence), while
    each new combination of them would be a new kernel to compile — unmerged, identical
    tasks (``x[i] * y[j]`` for every ``i, j``) share one compiled kernel.
    """
    if math.prod(a.domain) < SMALL_TASK:
        shared = {id(n) for n in a.arg_nodes}
        if not any(id(n) in shared for n in b.arg_nodes):
            return (f"small independent tasks (< {SMALL_TASK} elements, no buffer in common) stay "
                    "separate: one compiled kernel serves every such task")
    return None


def _merge_target(raw: list, producer: dict, task: Task):
    """The latest earlier map task with the same launch bounds that ``task`` may join.

    ``task`` can only move up to that point if nothing it reads is produced later.
    """
    if task.kind != "map":
        return None
    latest_input = max((producer.get(id(n), -1) for i, n in enumerate(task.arg_nodes)
                        if i not in task.writes), default=-1)
    for j in range(len(raw) - 1, max(latest_input, 0) - 1, -1):
        kind, other = raw[j]
        if kind == "kernel" and other.kind == "map" and other.domain == task.domain:
            return j if other.region is None else None
    return None


SMALL_TASK = 64


def _block_lanes(task: Task, lanes: int) -> None:
    """Run a task's single per-element loop in blocks of ``lanes`` (vectorizable; see
    kernels.lanes); targets without lanes (``lanes == 0``) run loops one element at a time."""
    loops = [i for i in task.instrs if i.kind in LOOPS]
    if not lanes or task.kind != "map" or len(loops) != 1 or len(task.domain) != 1:
        return
    if any(i.kind in (*LOOPS, "atomic") for i in walk(loops[0:1]) if i is not loops[0]):
        return  # nested loops stay scalar; so do atomic adds (every lane would run them)
    task.lanes = lanes
    if task.stack is not None:
        ((depth, fb, ib),) = task.stack  # one level: nested loops are not blocked
        task.stack = ((depth, fb * lanes, ib * lanes),)  # a stack row holds every lane of a block


def _drop_dead_stores(raw: list, outputs: tuple, schedule: Schedule) -> None:
    """Stop storing values that no later step reads and nobody asked for.

    After horizontal fusion a value shared by two merged tasks is forwarded in
    registers; its buffer would be written and never read.
    """
    needed = {id(o) for o in outputs}
    for kind, item in raw:
        if kind == "library":
            for i in item.root.inputs:
                while schedule.group_of.get(id(i)) is VIEWED:  # read through its view
                    i = i.inputs[0]
                needed.add(id(i))
            continue
        needed |= {id(n) for j, n in enumerate(item.arg_nodes) if j not in item.writes}
        if item.in_place:  # the base's values outside the region
            needed.add(id(item.region[1]))
        needed |= {id(depth_source(depth)) for depth, _, _ in item.stack or ()
                   if not host_bound(depth_source(depth))}
    for kind, item in raw:
        if kind != "kernel" or item.kind != "map":
            continue
        dead = {j for j in item.writes if id(item.arg_nodes[j]) not in needed}
        if dead and len(dead) < len(item.writes):
            item.stores = [s for s in item.stores if s[0] not in dead]
            _renumber_args(item, dead)


def _renumber_args(task: Task, drop: set) -> None:
    keep = [j for j in range(len(task.args)) if j not in drop]
    new = {old: i for i, old in enumerate(keep)}
    task.args = [task.args[j] for j in keep]
    task.arg_nodes = [task.arg_nodes[j] for j in keep]
    task.writes = {new[j] for j in task.writes if j in new}
    task.stores = [(new[a], ix, v) for a, ix, v in task.stores]
    task.instrs = _renumber_loads(task.instrs, new)


def _renumber_loads(instrs, new: dict) -> list:
    def one(i):
        return i._replace(arg=new[i.arg]) if i.kind in ("load", "atomic") else i
    return rewrite(instrs, one)
