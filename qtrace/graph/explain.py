"""``qt.explain``'s report: the tasks of a compiled plan and every fusion decision.

Text for terminals; an SVG diagram for Jupyter (nodes coloured by the task that
computes them, free views grey, inputs white, rejected producer -> consumer edges in
red with the rule that rejected them).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from .node import Node, toposort
from .partition import FREE
from .plan import PlanSpec

PALETTE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69",
           "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f", "#a6cee3"]


def describe(node: Node) -> str:
    if node.is_leaf:
        return f"input{list(node.shape)}:{node.dtype}"
    return f"{node.prim}{list(node.shape)}:{node.dtype}"


@dataclass
class TaskReport:
    name: str
    kind: str
    bounds: tuple
    inner: tuple
    ops: list
    reads: list
    writes: list
    bytes_moved: int
    cache_key: str


class Explanation:
    """What ``qt.explain`` returns: prints as text, renders as a diagram in Jupyter."""

    def __init__(self, spec: PlanSpec | None, pending: dict | None = None):
        self.spec = spec
        self.pending = pending  # the eager evaluation policy's state (qt.explain() of pending work)
        self.tasks: list[TaskReport] = []
        self.decisions, self.horizontal = [], []
        if spec is None:
            return
        for i, step in enumerate(spec.steps):
            if step.task is None:
                n = step.node
                name = n.params[0] if n.prim == "lib" else n.prim
                self.tasks.append(TaskReport(f"task {i} (library: {name})", "library", n.shape, (),
                                             [name], [describe(x) for x in n.inputs], [describe(n)],
                                             sum(x.size * x.dtype.itemsize for x in (*n.inputs, n)),
                                             "-"))
                continue
            t = step.task
            reads = [describe(n) for j, n in enumerate(t.arg_nodes) if j not in t.writes]
            writes = [describe(n) for j, n in enumerate(t.arg_nodes) if j in t.writes]
            moved = sum(n.size * n.dtype.itemsize for n in t.arg_nodes)
            ops = [n.prim for n in t.nodes if not n.is_leaf]
            self.tasks.append(TaskReport(f"task {i} ({t.kind})", t.kind, t.domain, t.inner, ops,
                                         reads, writes, moved, t.key))
        self.decisions = list(spec.schedule.decisions)
        self.horizontal = [(a, b, why) for a, b, why in spec.horizontal]

    @property
    def n_kernels(self) -> int:
        return sum(1 for t in self.tasks if t.kind != "library")

    def boundaries(self) -> list:
        """The rejected fusion decisions: ``[(producer prim, consumer prim, rule, expr)]``."""
        out = [(d.producer.prim, d.consumer.prim, d.rule, d.expression)
               for d in self.decisions if not d.fused]
        out += [("task", "task", why, None) for _, _, why in self.horizontal if why]
        return out

    def __str__(self) -> str:
        lines = []
        if self.pending is not None:
            p = self.pending
            lines.append(f"pending on this thread: {p['pending_ops']} operations recorded since the last "
                         f"evaluation, {p['live_pending']} live values to compute; automatic evaluation "
                         f"after {p['limit']} operations at the loop anchor "
                         f"({p['anchor'] or 'not learned yet'}); {p['automatic_cuts']} automatic so far")
            if self.spec is None:
                return "\n".join(lines + ["nothing to evaluate"])
        lines.append(f"qtrace plan {self.spec.key[:16]}: {len(self.tasks)} task(s), "
                     f"{self.spec.tasks_fused} fusion(s)")
        for t in self.tasks:
            inner = f" x inner {list(t.inner)}" if t.inner else ""
            lines.append(f"  {t.name}: bounds {list(t.bounds)}{inner}, ~{t.bytes_moved:,} bytes")
            lines.append(f"      ops:    {', '.join(t.ops) or '-'}")
            lines.append(f"      reads:  {', '.join(t.reads) or '-'}")
            lines.append(f"      writes: {', '.join(t.writes) or '-'}")
            lines.append(f"      key:    {t.cache_key}")
        if self.decisions or self.horizontal:
            lines.append("  fusion decisions:")
            for d in self.decisions:
                lines.append(f"    {d}")
            for task, into, why in self.horizontal:
                verdict = "merged" if why is None else f"kept apart ({why})"
                lines.append(f"    horizontal: {task.kind}{list(task.domain)} with "
                             f"{into.kind}{list(into.domain)}: {verdict}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        drawing = self.svg() if self.spec is not None else ""
        return f"<div>{drawing}<pre>{html.escape(str(self))}</pre></div>"

    def svg(self) -> str:
        """The partitioned graph as an SVG drawing."""
        sched = self.spec.schedule
        nodes = toposort(sched.outputs)
        leaves = list(self.spec.leaves)
        depth: dict[int, int] = {id(leaf): 0 for leaf in leaves}
        for n in nodes:
            depth[id(n)] = 1 + max((depth.get(id(i), 0) for i in n.inputs), default=0)
        columns: dict[int, list] = {}
        for n in leaves + nodes:
            columns.setdefault(depth[id(n)], []).append(n)
        pos, w, h = {}, 150, 46
        for d, col in columns.items():
            for k, n in enumerate(col):
                pos[id(n)] = (20 + d * (w + 40), 20 + k * (h + 24))
        width = 40 + (max(columns) + 1) * (w + 40)
        height = 40 + max(len(c) for c in columns.values()) * (h + 24)
        group_index = {id(g): i for i, g in enumerate(sched.order)}
        rejected = {(id(d.producer), id(d.consumer)): d.rule for d in self.decisions if not d.fused}
        by_producer = {id(d.producer): d.rule for d in self.decisions if not d.fused}
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                 f'font-family="monospace" font-size="11">']
        for n in nodes:
            x1, y1 = pos[id(n)]
            for i in n.inputs:
                if id(i) not in pos:
                    continue
                x0, y0 = pos[id(i)]
                g = sched.group_of.get(id(n))
                rule = rejected.get((id(i), id(n))) or (
                    rejected.get((id(i), id(g.root))) if g not in (None, FREE) else None)
                if rule is None and g is FREE:  # the boundary is read through this view
                    rule = by_producer.get(id(i))
                color = "#d62728" if rule else "#888"
                parts.append(f'<line x1="{x0 + w}" y1="{y0 + h / 2}" x2="{x1}" y2="{y1 + h / 2}" '
                             f'stroke="{color}" stroke-width="{2 if rule else 1}"/>')
                if rule:
                    parts.append(f'<text x="{(x0 + w + x1) / 2}" y="{(y0 + y1) / 2 + h / 2 - 4}" '
                                 f'fill="#d62728" font-size="9">{html.escape(rule[:40])}</text>')
        for n in leaves + nodes:
            x, y = pos[id(n)]
            g = sched.group_of.get(id(n))
            if n.is_leaf or n.prim == "const":
                fill, label = "#ffffff", ""
            elif g is FREE:
                fill, label = "#dddddd", "view"
            else:
                gi = group_index.get(id(g), 0)
                fill, label = PALETTE[gi % len(PALETTE)], f"task {gi}"
            parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}" '
                         f'stroke="#333"/>')
            parts.append(f'<text x="{x + 6}" y="{y + 18}">{html.escape(describe(n)[:22])}</text>')
            parts.append(f'<text x="{x + 6}" y="{y + 34}" fill="#555">{label}</text>')
        parts.append("</svg>")
        return "".join(parts)


def explain_nodes(outputs: tuple, fusion: bool, pending: dict | None = None) -> Explanation:
    from .plan import build_plan
    spec = build_plan(tuple(outputs), fusion) if outputs else None
    return Explanation(spec, pending)


__all__ = ["Explanation", "explain_nodes"]
