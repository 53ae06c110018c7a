"""``qt.explain``'s report: the tasks of a compiled plan and every fusion decision.

Text for terminals; an SVG diagram for Jupyter (:func:`draw_svg`: nodes coloured by
the task that computes them, free views grey, inputs white, rejected producer ->
consumer edges red, dashed and numbered, with the rule that rejected them in a legend).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from .node import Node, toposort
from .partition import FREE, VIEWED
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
            if step.kind == "view":  # no work: a strided view of a buffer, read in place
                n, src = step.node, step.chain[0].inputs[0]
                self.tasks.append(TaskReport(f"task {i} (view, in place)", "view", n.shape, (),
                                             [c.prim for c in step.chain], [describe(src)],
                                             [describe(n)], 0, "-"))
                continue
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
            # (a region assignment in place moves its region of the base, not the whole base)
            moved = sum(math.prod(t.domain) * n.dtype.itemsize if t.in_place and any(
                n is r for r in t.region) else n.size * n.dtype.itemsize for n in t.arg_nodes)
            ops = [n.prim for n in t.nodes if not n.is_leaf]
            how = f"{t.kind}, in place" if t.in_place else t.kind
            self.tasks.append(TaskReport(f"task {i} ({how})", t.kind, t.domain, t.inner, ops,
                                         reads, writes, moved, t.key))
        self.decisions = list(spec.schedule.decisions)
        self.horizontal = [(a, b, why) for a, b, why in spec.horizontal]

    @property
    def n_kernels(self) -> int:
        return sum(1 for t in self.tasks if t.kind not in ("library", "view"))

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
        device = self.spec.leaves[0].device if self.spec.leaves else self.spec.schedule.outputs[0].device
        lines.append(f"qtrace plan {self.spec.key[:16]} on {device}: {len(self.tasks)} task(s), "
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
        """The partitioned graph as an SVG drawing (see :func:`draw_svg`)."""
        return draw_svg(self)


# Geometry of the drawing, in pixels (monospace text of FONT_SIZE px is about
# CHAR_WIDTH px per character).
FONT_SIZE, CHAR_WIDTH, PAD = 11, 6.7, 8
NODE_H, COL_GAP, ROW_GAP, MIN_NODE_W = 40, 56, 30, 90
REJECTED, EDGE = "#d62728", "#888888"


@dataclass
class _Box:
    x: float
    y: float
    w: float
    h: float

    def crossed_by(self, x0: float, y0: float, x1: float, y1: float) -> bool:
        """Whether the horizontal or vertical segment (x0, y0)-(x1, y1) enters the box."""
        (xa, xb), (ya, yb) = sorted((x0, x1)), sorted((y0, y1))
        return xa < self.x + self.w and xb > self.x and ya < self.y + self.h and yb > self.y


def _node_lines(n: Node, sched) -> tuple[list[str], str]:
    """A node's text lines and fill colour."""
    g = sched.group_of.get(id(n))
    if n.is_leaf or n.prim == "const":
        return [describe(n)], "#ffffff"
    if g is FREE or g is VIEWED:
        return [describe(n), "view"], "#dddddd"
    gi = {id(grp): i for i, grp in enumerate(sched.order)}.get(id(g), 0)
    return [describe(n), f"task {gi}"], PALETTE[gi % len(PALETTE)]


def _edge_rule(expl: Explanation, producer: Node, consumer: Node, rejected: dict,
               by_producer: dict) -> str | None:
    """The rule that put a task boundary on the edge producer -> consumer (None: fused or
    within a task)."""
    sched = expl.spec.schedule
    g = sched.group_of.get(id(consumer))
    rule = rejected.get((id(producer), id(consumer))) or (
        rejected.get((id(producer), id(g.root))) if g not in (None, FREE, VIEWED) else None)
    if rule is None and g in (FREE, VIEWED):  # the boundary is read through this view
        rule = by_producer.get(id(producer))
    return rule


def draw_svg(expl: Explanation) -> str:
    """``expl``'s graph as SVG: one box per node in columns by depth, sized to its text.

    Boxes are coloured by the task that computes them (free views grey, inputs white).
    Edges are drawn orthogonally through the gaps between columns and rows, so an edge
    never crosses a box it does not connect. An edge where fusion was rejected is red,
    dashed, numbered, and carries its rule as a tooltip; the numbered legend under the
    drawing gives every rejected edge's producer, consumer and full rule.

    Example:
        >>> import qtrace as qt
        >>> drawing = qt.explain(lambda x: qt.sin(x) * 2, qt.ones(4)).svg()
        >>> drawing.startswith("<svg") and "sin[4]:float64" in drawing
        True
    """
    sched = expl.spec.schedule
    nodes = toposort(sched.outputs)
    leaves = list(expl.spec.leaves)
    depth: dict[int, int] = {id(leaf): 0 for leaf in leaves}
    for n in nodes:
        depth[id(n)] = 1 + max((depth.get(id(i), 0) for i in n.inputs), default=0)
    columns: dict[int, list] = {}
    for n in {id(n): n for n in leaves + nodes}.values():
        columns.setdefault(depth[id(n)], []).append(n)
    text = {id(n): _node_lines(n, sched) for col in columns.values() for n in col}
    col_w = {d: max(MIN_NODE_W, *(math.ceil(2 * PAD + CHAR_WIDTH * max(map(len, text[id(n)][0])))
                                  for n in col))
             for d, col in columns.items()}
    col_x, x = {}, 20.0
    for d in range(max(columns) + 1):
        col_x[d] = x
        x += col_w.get(d, 0) + COL_GAP
    top = 20 + ROW_GAP
    box = {id(n): _Box(col_x[d], top + k * (NODE_H + ROW_GAP), col_w[d], NODE_H)
           for d, col in columns.items() for k, n in enumerate(col)}

    rejected = {(id(d.producer), id(d.consumer)): d.rule for d in expl.decisions if not d.fused}
    by_producer = {id(d.producer): d.rule for d in expl.decisions if not d.fused}
    edges, legend = [], []
    for n in nodes:
        for i in dict.fromkeys(n.inputs, None):  # one edge per distinct input
            if id(i) not in box:
                continue
            rule = _edge_rule(expl, i, n, rejected, by_producer)
            number = None
            if rule:
                legend.append(f"{len(legend) + 1}: {describe(i)} -> {describe(n)}: {rule}")
                number = len(legend)
            edges.append((i, n, rule, number))

    parts, marks = [], []
    for k, (i, n, rule, number) in enumerate(edges):
        a, b = box[id(i)], box[id(n)]
        shift = ((k % 5) - 2) * 6  # keeps edges that share a gap apart
        sx, sy, tx, ty = a.x + a.w, a.y + a.h / 2, b.x, b.y + b.h / 2
        out_x = a.x + col_w[depth[id(i)]] + COL_GAP / 2 + shift
        in_x = b.x - COL_GAP / 2 + shift
        if depth[id(n)] == depth[id(i)] + 1:
            points = [(sx, sy), (out_x, sy), (out_x, ty), (tx, ty)]
        else:  # along the gap above the consumer's row, through the columns between
            lane = b.y - ROW_GAP / 2 + shift / 2
            points = [(sx, sy), (out_x, sy), (out_x, lane), (in_x, lane), (in_x, ty), (tx, ty)]
        path = " ".join(f"{'M' if j == 0 else 'L'} {px:g} {py:g}" for j, (px, py) in enumerate(points))
        style = (f'stroke="{REJECTED}" stroke-width="2" stroke-dasharray="6 3" marker-end="url(#rej)"'
                 if rule else f'stroke="{EDGE}" stroke-width="1" marker-end="url(#arrow)"')
        tip = f"<title>{html.escape(rule)}</title>" if rule else ""
        parts.append(f'<path class="edge{" rejected" if rule else ""}" d="{path}" fill="none" {style}'
                     f'{f" data-rule={_attr(rule)}" if rule else ""}>{tip}</path>')
        if number is not None:  # the edge's number, on its first vertical run
            mx, my = out_x, (sy + points[2][1]) / 2
            marks.append(f'<g class="edge-number"><circle cx="{mx:g}" cy="{my:g}" r="8" fill="#ffffff" '
                         f'stroke="{REJECTED}"/><text x="{mx:g}" y="{my + 3.5:g}" text-anchor="middle" '
                         f'fill="{REJECTED}" font-size="10">{number}</text>{tip}</g>')
    for col in columns.values():
        for n in col:
            r = box[id(n)]
            lines, fill = text[id(n)]
            body = "".join(f'<text x="{r.x + PAD:g}" y="{r.y + 16 + 15 * j:g}"'
                           f'{" fill=" + chr(34) + "#555" + chr(34) if j else ""}>{html.escape(line)}</text>'
                           for j, line in enumerate(lines))
            parts.append(f'<g class="node"><title>{html.escape(" ".join(lines))}</title>'
                         f'<rect x="{r.x:g}" y="{r.y:g}" width="{r.w:g}" height="{r.h:g}" rx="6" '
                         f'fill="{fill}" stroke="#333"/>{body}</g>')
    width = max(x - COL_GAP + 20, math.ceil(40 + CHAR_WIDTH * max(map(len, legend), default=0)))
    rows_h = top + max(len(c) for c in columns.values()) * (NODE_H + ROW_GAP)
    legend_svg = "".join(f'<text class="legend" x="20" y="{rows_h + 16 * j:g}" fill="{REJECTED}">'
                         f'{html.escape(line)}</text>' for j, line in enumerate(legend))
    height = rows_h + 16 * len(legend) + 10
    defs = "".join(f'<marker id="{name}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
                   f'markerHeight="7" orient="auto"><path d="M 0 0 L 10 5 L 0 10 z" fill="{color}"/></marker>'
                   for name, color in (("arrow", EDGE), ("rej", REJECTED)))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
            f'font-family="monospace" font-size="{FONT_SIZE}"><defs>{defs}</defs>'
            + "".join(parts) + "".join(marks) + legend_svg + "</svg>")


def _attr(value: str) -> str:
    return '"' + html.escape(value, quote=True) + '"'


def explain_nodes(outputs: tuple, fusion: bool, pending: dict | None = None) -> Explanation:
    from . import evaluate
    from .plan import build_plan
    spec = build_plan(tuple(outputs), fusion, **evaluate.plan_options(outputs[0].device)) if outputs else None
    return Explanation(spec, pending)


__all__ = ["Explanation", "draw_svg", "explain_nodes"]
