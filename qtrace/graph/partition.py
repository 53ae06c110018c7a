"""Partition a graph into range tasks, fusing wherever fusion provably keeps the result.

Every non-constant node starts as its own task (``QTRACE_FUSION=0`` keeps it that way:
the reference every fusion test compares against). With fusion on, walking from
consumers to producers, each node is either

* a free *view* (reshape, transpose, broadcast, slice): an index remapping applied
  where it is read, costing nothing — unless it is an output or a library reads it;
* a *member* of its consumers' task, computed in registers where it is read: allowed
  when all its consumers are in one task and :func:`qtrace.graph.access.classify`
  proves the reads injective (no recomputation) or cheap enough to recompute. A member
  that is also an output is stored from the same kernel, at its (injective) read index;
* the root of a new task (materialized): reductions, scans, scatters, concatenations,
  library calls, and every node whose fusion was rejected;
* a *viewed* operand: a view only matrix products read (``x.T @ y``), handed to BLAS as
  a strided view of its materialized source instead of a copy.

A slice assignment that replaces a small region of a computed array (``p[:, -1] = ...``)
may be a *region task* (:func:`_region_update` says when: a base of at least the target's
``region_bytes``, a region touching at most ``1/REGION_FRACTION`` of its memory, values
that read the base): its domain is the region, not the whole array, and it writes into
the base's buffer in place — no copy of the array. That needs the base to be read by
nothing else (every reader fused into the region task) and only outside the region or at
the very element each iteration writes (interval reasoning over the index expressions:
:func:`in_place_safe`); an assignment that fails it is partitioned again as any other
node (a task over the whole array, or fused into its readers).

Afterwards, adjacent map tasks with identical launch bounds merge horizontally into
one multi-output kernel when the buffers they share are accessed at the same index.
Every decision is recorded with its rule and, for a boundary, the offending index
expression: ``QTRACE_FUSION_DIAG=1`` prints them and ``qt.explain`` reports them.
"""

from __future__ import annotations

import heapq
import math
import sys
from dataclasses import dataclass, field

from . import index as ix_
from .access import DATA, broadcast_index, classify, cost, input_index
from .loops import host_read, layout, siblings_key
from .node import Node, toposort
from .primitives import PRIMITIVES

FREE = "free"  # a view read through, belonging to no task
VIEWED = "viewed"  # a view only matrix products read: a strided view of its materialized source
VIEWERS = frozenset({"matmul"})  # library primitives that take any strides (BLAS flags)
MAX_TASK_COST = 160  # fused work per element (math functions count 4): keeps LLVM's O3 time bounded
MULTI_OUTPUT = frozenset({"loop", "loop_vjp", "call", "lib"})  # one node per component, one task
REGION_FRACTION = 2  # a slice assignment touching at most 1/2 of its base's memory is a region task
REGION_ATTEMPTS = 4  # partitionings that drop region tasks unable to write in place, at most
REGION_BYTES = 4096  # bases of region tasks have at least this many bytes (the CPU's choice:
                     # a target passes its own, ``kernels.lowering.Lowering.region_bytes``)


@dataclass
class Group:
    """One task-producing unit: a root node and the producers fused into it."""
    root: Node
    ext: dict                                   # loop variable -> extent
    cost: int = 0                               # estimated work per element (see access.cost)
    members: list = field(default_factory=list)  # nodes computed here (topological order)
    stored: list = field(default_factory=list)   # members written to memory
    reads: dict = field(default_factory=dict)    # id(node) -> list of index tuples
    base: Node | None = None                     # a region task: the slice assignment's base
    in_place: bool = False                       # ... whose buffer the region task writes into


@dataclass
class Decision:
    producer: Node
    consumer: object          # a Node, or the root of the task it was tried against
    fused: bool
    rule: str
    expression: object = None

    def __str__(self) -> str:
        target = self.consumer
        what = f"{target.prim}{list(target.shape)}" if isinstance(target, Node) else str(target)
        verdict = "fused" if self.fused else "boundary"
        expr = f" at {self.expression}" if self.expression is not None else ""
        return f"{self.producer.prim}{list(self.producer.shape)} -> {what}: {verdict} ({self.rule}{expr})"


@dataclass
class Schedule:
    outputs: tuple
    order: list                     # groups in execution order
    group_of: dict                  # id(node) -> Group | FREE
    view_group: dict                # id(free view) -> Group whose task reads it, or None
    stored: dict                    # id(node) -> node, every materialized non-leaf node
    consumers: dict                 # id(node) -> list of (consumer, input position)
    decisions: list                 # Decision per candidate pair


def kind(node: Node) -> str:
    return PRIMITIVES[node.prim].kind


def _vars(n: int, offset: int = 0) -> tuple:
    return tuple(ix_.var(offset + k) for k in range(n))


def _new_group(n: Node) -> Group:
    k = kind(n)
    if k == "reduce":
        src, axes = n.inputs[0], n.params[0]
        outer = _vars(n.ndim)
        inner = iter(_vars(len(axes), n.ndim))
        it = iter(outer)
        full = tuple(next(inner) if a in axes else next(it) for a in range(src.ndim))
        ext = dict(enumerate(n.shape))
        ext.update({n.ndim + j: src.shape[a] for j, a in enumerate(axes)})
        g = Group(n, ext, members=[n], stored=[n])
        g.reads[id(src)] = [full]
        return g
    if k == "scan":
        src, axis = n.inputs[0], n.params[0]
        outer_shape = tuple(d for a, d in enumerate(src.shape) if a != axis)
        it = iter(_vars(len(outer_shape)))
        r = ix_.var(len(outer_shape))
        full = tuple(r if a == axis else next(it) for a in range(src.ndim))
        ext = dict(enumerate(outer_shape))
        ext[len(outer_shape)] = src.shape[axis]
        g = Group(n, ext, members=[n], stored=[n])
        g.reads[id(src)] = [full]
        return g
    g = Group(n, dict(enumerate(n.shape)), members=[n], stored=[n])
    g.reads[id(n)] = [_vars(n.ndim)]
    if k == "loop":  # the loop reads its per-element inputs at its own index
        lay = layout(n)
        for pos, inp in enumerate(n.inputs):
            if lay.per_element(pos):
                g.reads.setdefault(id(inp), []).append(broadcast_index(_vars(n.ndim), inp.shape))
    return g


def _region_update(n: Node, memo: dict, min_bytes: int) -> bool:
    """Whether slice assignment ``n`` (a task root) becomes a region task: a non-empty
    region of a base that one of qtrace's kernels computes into a buffer of its own (not
    an input, a constant, a view, a library's or a call's result), touching at most
    ``1/REGION_FRACTION`` of the base's memory (:func:`region_footprint`: a column of a
    row-major array touches a cache line per element, a row one per 64 bytes; a region a
    whole pass would touch about as much stays a plain task, fused), and only where
    fusing the base into the assignment would not be free: the assigned values read
    the base (``p[:, -1] = p[:, -2]``: fused, the base would be computed at two indices per
    element, compounding along a chain of such writes), or the base is itself a region
    task's result (the next write of the chain). Otherwise (``x = a + b; x[0] = 5``, the
    two writes of ``roll``) the base fuses into one pass writing the whole result. A base
    smaller than ``min_bytes`` is passed over whole: on a GPU one more launch costs more
    than a pass over megabytes."""
    chain = []  # (walked, not recursed: chains of writes can be thousands long)
    while n.prim == "slice_update" and id(n) not in memo:
        chain.append(n)
        n = n.inputs[0]
    below = memo.get(id(n), False)
    for m in reversed(chain):
        base, values = m.inputs
        below = memo[id(m)] = (
            values.size > 0 and not base.is_leaf and base.prim not in MULTI_OUTPUT
            and kind(base) not in ("leaf", "view", "library")
            and m.size * m.dtype.itemsize >= max(min_bytes, region_footprint(m) * REGION_FRACTION)
            and (_reads(values, base) or below))
    return below


def _reads(node: Node, target: Node, limit: int = 256) -> bool:
    """Whether ``node`` is computed from ``target`` through values a task computes per
    element (views, elementwise operations, updates, gathers), looking at ``limit`` nodes."""
    seen, stack = set(), [node]
    while stack and len(seen) < limit:
        n = stack.pop()
        if n is target:
            return True
        if id(n) in seen or n.is_leaf or kind(n) not in ("view", "elementwise", "update", "gather"):
            continue
        seen.add(id(n))
        stack.extend(n.inputs)
    return False


LINE = 64  # bytes of a cache line


def region_footprint(n: Node) -> int:
    """Bytes of memory slice assignment ``n`` touches in its (row-major) base: its region
    is runs of contiguous elements, each occupying at least a cache line."""
    _, steps = n.params
    counts, sizes = n.inputs[1].shape, n.shape
    run = 1
    for count, size, step in zip(reversed(counts), reversed(sizes), reversed(steps)):
        if abs(step) != 1 and count > 1:
            break
        run *= count
        if count != size:
            break
    runs = math.prod(counts) // max(run, 1)
    return runs * max(run * n.dtype.itemsize, LINE)


def _region_group(n: Node) -> Group:
    """The group of region task ``n``: its domain is the region (the values' shape)."""
    values = n.inputs[1]
    g = Group(n, dict(enumerate(values.shape)), members=[n], stored=[n], base=n.inputs[0])
    g.reads[id(values)] = [_vars(values.ndim)]
    return g


def region_index(n: Node, ix: tuple) -> tuple:
    """Where region task ``n`` (a ``slice_update``) writes its element ``ix`` in the base."""
    starts, steps = n.params
    return tuple(ix_.add(ix_.scale(i, step), ix_.const(start)) for i, start, step in zip(ix, starts, steps))


def in_place_safe(reads: list, g: Group) -> bool:
    """Whether region task ``g`` may write into its base while reading it at ``reads``:
    each read is of the very element the same iteration writes, or provably outside the
    region (its range along some axis misses the region's interval there)."""
    n = g.root

    def fixed(ix: tuple) -> tuple:  # variables of one value are 0
        return tuple(ix_.substitute(c, lambda k: ix_.ZERO if g.ext[k] == 1 else ix_.var(k)) for c in ix)
    write = fixed(region_index(n, _vars(len(g.ext))))
    starts, steps = n.params
    span = [(min(a, a + (k - 1) * s), max(a, a + (k - 1) * s))
            for a, s, k in zip(starts, steps, n.inputs[1].shape)]
    for r in reads:
        if r is DATA:
            return False
        if fixed(r) == write:
            continue
        if not any(hi < lo_r or hi_r < lo
                   for comp, (lo, hi) in zip(r, span)
                   for lo_r, hi_r in [ix_.bounds(comp, g.ext)]):
            return False
    return True


def partition(outputs: tuple, fusion: bool, region_bytes: int = REGION_BYTES) -> Schedule:
    """The schedule of ``outputs``: every node's task, in execution order (region tasks
    over bases of at least ``region_bytes``)."""
    not_regions: frozenset = frozenset()
    for _ in range(REGION_ATTEMPTS):  # a region task that cannot write in place: a plain task
        schedule = _partition(outputs, fusion, not_regions, region_bytes)
        failed = {id(g.root) for g in schedule.order if g.base is not None and not g.in_place}
        if not failed:
            return schedule
        not_regions |= failed
    return _partition(outputs, fusion, None, region_bytes)  # (none at all)


def _partition(outputs: tuple, fusion: bool, not_regions: frozenset | None, region_bytes: int) -> Schedule:
    """One partitioning, with region tasks for every candidate but ``not_regions`` (None:
    no region task)."""
    topo, host_edges = host_read(outputs, toposort(outputs))  # trip counts only the host bounds
    consumers: dict[int, list] = {}
    for n in topo:
        for pos, inp in enumerate(n.inputs):
            if (id(n), pos) not in host_edges:
                consumers.setdefault(id(inp), []).append((n, pos))
    out_ids = {id(o) for o in outputs}
    group_of: dict[int, object] = {}
    view_group: dict[int, object] = {}
    groups: list[Group] = []
    stored: dict[int, Node] = {}
    decisions: list[Decision] = []

    loop_groups: dict = {}
    region_of: dict[int, Group] = {}   # id(base) -> the region task assigning into it
    candidates: dict = {}              # id(slice assignment) -> whether it may be a region task

    def root(n: Node) -> None:
        if n.prim in MULTI_OUTPUT:  # siblings (other components of the same loop) share one task
            g = loop_groups.get(siblings_key(n))
            if g is not None:
                g.members.append(n)
                g.stored.append(n)
                g.reads[id(n)] = [_vars(n.ndim)]
                group_of[id(n)] = g
                stored[id(n)] = n
                return
        region = fusion and not_regions is not None and id(n) not in not_regions and \
            _region_update(n, candidates, region_bytes)
        g = _region_group(n) if region else _new_group(n)
        group_of[id(n)] = g
        groups.append(g)
        stored[id(n)] = n
        if g.base is not None:
            region_of[id(g.base)] = g
        if n.prim in MULTI_OUTPUT:
            loop_groups[siblings_key(n)] = g

    def reading_group(c: Node):
        """The task that evaluates consumer ``c`` per element, or None."""
        g = group_of[id(c)]
        return view_group.get(id(c)) if g is FREE else g

    def reads_in(g: Group, n: Node):
        """Indices at which task ``g`` reads ``n`` (through members and free views)."""
        out = list(g.reads.get(id(n), []))  # seeded by a reduction or scan root
        for c, pos in consumers.get(id(n), []):
            if kind(c) in ("scatter", "concat", "library", "reduce", "scan", "loop"):
                continue
            for ix in g.reads.get(id(c), []):
                # a data-dependent read stays data-dependent through any index map
                r = DATA if ix is DATA else input_index(c, pos, ix, g.ext)
                if r is DATA or r not in out:
                    out.append(r)
        return out

    for n in reversed(topo):
        k = kind(n)
        if k == "leaf":  # constants: immediates in the code
            continue
        users = consumers.get(id(n), [])
        if not fusion:
            root(n)
            continue
        if k == "view" and id(n) not in out_ids and users and n.inputs[0].prim != "const" and all(
                c.prim in VIEWERS or group_of.get(id(c)) is VIEWED for c, _ in users):
            group_of[id(n)] = VIEWED  # (x.T @ y reads x in place: no transposed copy)
            continue
        if k == "view" and id(n) not in out_ids and not any(
                kind(c) == "library" or group_of.get(id(c)) is VIEWED for c, _ in users):
            group_of[id(n)] = FREE
            gs = {id(reading_group(c)): reading_group(c) for c, _ in users}
            g = next(iter(gs.values())) if len(gs) == 1 else None
            if any(kind(c) == "loop" and not layout(c).per_element(p) for c, p in users):
                g = None  # read inside a loop body (or sized on the host): its source is materialized
            view_group[id(n)] = g
            if g is not None:
                g.reads[id(n)] = reads_in(g, n)
            continue
        region = region_of.get(id(n))
        if region is not None:  # the base of a region task: materialized, in place if safe
            region.in_place = id(n) not in out_ids and all(
                reading_group(c) is region for c, _ in users) and in_place_safe(reads_in(region, n), region)
            decisions.append(Decision(n, region.root, False, "the base of a region slice assignment, "
                                      "which writes into it in place"))
            root(n)
            continue
        target, rule, expr = None, None, None
        if k not in ("elementwise", "gather", "update"):
            rule = f"{n.prim} is a {k} task"
        elif not users:
            rule = "graph output"
        else:
            for c, _pos in users:
                ck = kind(c)
                g = reading_group(c)
                if group_of.get(id(c)) is VIEWED:
                    why = "a matrix product reads it through a view (materialized, viewed in place)"
                elif ck in ("scatter", "concat", "library"):
                    why = f"{c.prim} reads materialized operands"
                elif ck == "loop" and not layout(c).per_element(_pos):
                    why = "a loop body reads it (materialized operand)"
                elif g is None:
                    why = "read through a view by several tasks"
                elif target is not None and g is not target:
                    why = "consumers in several tasks"
                else:
                    why = None
                if why is not None:
                    rule = why
                    decisions.append(Decision(n, c, False, why))
                    break
                target = g
            if rule is None and target.cost + cost(n) > MAX_TASK_COST:
                rule = f"task size limit ({MAX_TASK_COST}): bounds compile time"
                decisions.append(Decision(n, target.root, False, rule))
            if rule is None:
                reads = reads_in(target, n)
                ok, rule, expr = classify(reads, target.ext, n.shape, n)
                if ok and id(n) in out_ids:
                    injective = rule == "injective" and len(reads) == 1 and \
                        len([1 for comp in reads[0] if comp.terms]) == len(target.ext) and \
                        kind(target.root) not in ("reduce", "scan")
                    if not injective or _size(target.ext) != n.size:
                        ok, rule = False, "output read at another index or in a reduction"
                decisions.append(Decision(n, target.root, ok, rule, expr))
                if ok:
                    target.cost += cost(n)
                    target.members.insert(0, n)
                    target.reads[id(n)] = reads
                    group_of[id(n)] = target
                    if id(n) in out_ids:
                        target.stored.append(n)
                        stored[id(n)] = n
                    continue
        root(n)
    # execution order: by the topological position of each group's root
    position = {id(n): i for i, n in enumerate(topo)}
    # (a loop's components share inputs: its task may run as early as the earliest one)
    groups.sort(key=lambda g: min(position[id(n)] for n in g.stored) if g.root.prim in MULTI_OUTPUT
                else position[id(g.root)])
    groups = _after_inputs(groups, group_of)
    return Schedule(tuple(outputs), groups, group_of, view_group, stored, consumers, decisions)


def _after_inputs(groups: list, group_of: dict) -> list:
    """``groups`` in their order, except that each waits for the groups computing its
    members' inputs. A multi-output group is placed by its earliest stored member, which
    may come before an input of another member: a loop task storing a value fused into its
    first trip (``start = floor(x)``) while its condition reads a value another task
    computes (``limit``), both live, ran before that task and read its buffer unwritten."""
    index = {id(g): k for k, g in enumerate(groups)}
    needs = []
    for g in groups:
        deps = set()
        for m in g.members:
            for i in m.inputs:
                while group_of.get(id(i)) in (FREE, VIEWED):   # (a view reads its source)
                    i = i.inputs[0]
                src = group_of.get(id(i))
                if src is not None and src is not g and id(src) in index:
                    deps.add(index[id(src)])
        needs.append(deps)
    if all(max(deps, default=-1) < k for k, deps in enumerate(needs)):
        return groups   # (the common case: already in order)
    users: list = [[] for _ in groups]
    missing = [len(deps) for deps in needs]
    for k, deps in enumerate(needs):
        for d in deps:
            users[d].append(k)
    ready = [k for k, m in enumerate(missing) if m == 0]
    ordered = []
    while ready:   # the earliest ready group first: the order kept wherever it is right
        k = heapq.heappop(ready)
        ordered.append(groups[k])
        for u in users[k]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, u)
    if len(ordered) != len(groups):
        raise AssertionError("qtrace partition: the tasks' dependences form a cycle")
    return ordered


def _size(ext: dict) -> int:
    size = 1
    for e in ext.values():
        size *= e
    return size


def report_decisions(schedule: Schedule, out=None) -> None:
    """Print every fusion decision (``QTRACE_FUSION_DIAG=1``)."""
    out = out or sys.stderr
    for d in schedule.decisions:
        print(f"[qtrace fusion] {d}", file=out)
