"""The structure of ``qt.explain``'s SVG diagram: node text whole and inside its box,
rejected edges distinguishable (red, dashed, numbered) with their full rule in a legend,
and no edge drawn through a box it does not connect."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import qtrace as qt
from qtrace.graph import explain as ex

NS = {"s": "http://www.w3.org/2000/svg"}


def _long_boundary(v):
    """exp is read at three shifts (a boundary) next to a long chain of other work."""
    x = qt.exp(v)
    y = qt.sin(qt.cos(qt.tanh(v * 2.0 + 1.0)))
    return y[2:] + x[2:] + x[1:-1] + x[:-2]


def _gather_boundary(v, w, idx):
    """exp feeds a gather in another task: a rejected edge across columns."""
    x = qt.exp(v)
    return (qt.sin(w) * 3.0 + 1.0) * x + qt.sum(x[idx])


CASES = {
    "shifted reads": (_long_boundary, lambda rng: (rng.uniform(0, 1, 64),)),
    "gather": (_gather_boundary, lambda rng: (rng.uniform(0, 1, 64), rng.uniform(0, 1, (8, 64)),
                                              np.array([3, 1, 2, 5]))),
}


def _points(d: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML] (-?[\d.]+) (-?[\d.]+)", d)]


@pytest.fixture(params=list(CASES))
def drawn(request, rng):
    fn, make = CASES[request.param]
    old = qt.config.fusion
    qt.config.fusion = True
    try:
        report = qt.explain(fn, *[qt.asarray(a) for a in make(rng)])
    finally:
        qt.config.fusion = old
    assert report.boundaries(), str(report)  # each case has at least one rejected edge
    return report, ET.fromstring(report.svg())


def _boxes(root):
    """[(box, [text lines])] of every node."""
    out = []
    for g in root.iterfind("s:g[@class='node']", NS):
        r = g.find("s:rect", NS)
        box = ex._Box(*(float(r.get(k)) for k in ("x", "y", "width", "height")))
        out.append((box, [t.text for t in g.iterfind("s:text", NS)]))
    return out


def test_node_text_is_whole_and_fits_its_box(drawn):
    report, root = drawn
    boxes = _boxes(root)
    described = {line[0] for _, line in boxes}
    nodes = ex.toposort(report.spec.schedule.outputs)
    assert {ex.describe(n) for n in nodes} <= described  # no description cut short
    for box, lines in boxes:
        assert max(len(t) for t in lines) * ex.CHAR_WIDTH + ex.PAD <= box.w, lines
    for (a, _), (b, _) in zip(boxes, boxes[1:]):
        assert not a.crossed_by(b.x + 1, b.y + 1, b.x + b.w - 1, b.y + 1) or a == b  # no overlap


def test_rejected_edges_are_numbered_and_their_rules_listed_in_full(drawn):
    report, root = drawn
    rejected = root.findall("s:path[@class='edge rejected']", NS)
    plain = root.findall("s:path[@class='edge']", NS)
    assert rejected and plain
    assert all(p.get("stroke") == ex.REJECTED and p.get("stroke-dasharray") for p in rejected)
    assert all(p.get("stroke") != ex.REJECTED and not p.get("stroke-dasharray") for p in plain)
    legend = [t.text for t in root.iterfind("s:text[@class='legend']", NS)]
    numbers = [g.find("s:text", NS).text for g in root.iterfind("s:g[@class='edge-number']", NS)]
    assert numbers == [str(k) for k in range(1, len(rejected) + 1)] and len(legend) == len(rejected)
    rules = {d.rule for d in report.decisions if not d.fused}
    for k, (path, line) in enumerate(zip(rejected, legend), start=1):
        rule = path.get("data-rule")
        assert rule in rules and path.find("s:title", NS).text == rule  # tooltip: the rule
        assert line.startswith(f"{k}: ") and line.endswith(": " + rule) and " -> " in line
    width = float(root.get("width"))
    assert all(20 + len(line) * ex.CHAR_WIDTH <= width for line in legend)  # legend not clipped


def test_edges_never_cross_a_box_they_do_not_connect(drawn):
    _, root = drawn
    boxes = [box for box, _ in _boxes(root)]
    paths = root.findall("s:path[@class='edge']", NS) + root.findall("s:path[@class='edge rejected']", NS)
    assert paths
    for path in paths:
        pts = _points(path.get("d"))
        (sx, sy), (tx, ty) = pts[0], pts[-1]
        ends = [b for b in boxes
                if (b.x + b.w, b.y + b.h / 2) == (sx, sy) or (b.x, b.y + b.h / 2) == (tx, ty)]
        assert len(ends) >= 2, path.get("d")
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            assert x0 == x1 or y0 == y1  # orthogonal
            for b in boxes:
                if b not in ends:
                    assert not b.crossed_by(x0, y0, x1, y1), (path.get("d"), b)


def test_html_repr_embeds_the_diagram(rng):
    report = qt.explain(lambda x: qt.sin(x) * 2.0, qt.asarray(rng.uniform(0, 1, 8)))
    html = report._repr_html_()
    assert html.startswith("<div><svg") and "sin[8]:float64" in html
    ET.fromstring(report.svg())  # well-formed
