"""How a node reads its inputs, as canonical index expressions — and what fusion may prove.

``input_index`` maps the index at which a consumer is evaluated to the index at which
it reads one input (broadcasting, views, gathers). ``classify`` decides whether a
producer read at a set of indices can be computed inside its consumer's task:

* *injective* reads (the task index, plus or minus a constant, times a non-zero
  constant, permutations of axes, negation/reversal, strided subsets) evaluate every
  producer element at most once — fusing never recomputes;
* broadcasts (a loop variable missing from the index) and several distinct reads
  (``x[1:] + x[:-1]``) recompute the producer; they are fused only under a cost bound;
* floor division, remainder, data-dependent indices and anything unrecognised are
  rejected — the reason names the offending expression.
"""

from __future__ import annotations

from . import index as ix_
from .node import Node, c_strides
from .primitives import PRIMITIVES, TRANSCENDENTAL

DATA = "data"  # marker: read at data-dependent indices


def broadcast_index(ix: tuple, in_shape: tuple) -> tuple:
    """The index into an operand of shape ``in_shape`` broadcast to ``len(ix)`` dims."""
    lead = len(ix) - len(in_shape)
    return tuple(ix_.ZERO if d == 1 else ix[lead + j] for j, d in enumerate(in_shape))


def view_index(node: Node, ix: tuple, ext: dict) -> tuple:
    """Index into ``node.inputs[0]`` that the view ``node`` reads for output index ``ix``."""
    src = node.inputs[0]
    if node.prim == "broadcast":
        return broadcast_index(ix, src.shape)
    if node.prim in ("wrt", "stop_gradient"):
        return ix
    if node.prim == "transpose":
        out = [None] * len(ix)
        for k, p in enumerate(node.params[0]):
            out[p] = ix[k]
        return tuple(out)
    if node.prim == "slice":
        starts, steps = node.params
        return tuple(ix_.add(ix_.const(s), ix_.scale(i, st)) for i, s, st in zip(ix, starts, steps))
    if node.prim == "reshape":
        if node.size == 0:  # nothing is ever read
            return tuple(ix_.ZERO for _ in src.shape)
        strides = c_strides(node.shape)
        linear = ix_.add(*(ix_.scale(i, s) for i, s, d in zip(ix, strides, node.shape) if d != 1))
        out = []
        for d in reversed(src.shape):
            out.append(ix_.mod(linear, d, ext) if d != 1 else ix_.ZERO)
            linear = ix_.floordiv(linear, d, ext) if d != 1 else linear
        return tuple(reversed(out))
    raise NotImplementedError(f"qtrace: no index rule for view primitive {node.prim!r}")


def region_axes(node: Node) -> list:
    """``(axis, lo, hi, start, step)`` of every axis a ``slice_update`` does not cover whole.

    ``lo..hi`` (inclusive) bound the region along the axis; its elements are those at
    ``start + k*step``.
    """
    starts, steps = node.params
    out = []
    for a, (start, step, n, size) in enumerate(zip(starts, steps, node.inputs[1].shape, node.shape)):
        last = start + (n - 1) * step
        lo, hi = min(start, last), max(start, last)
        if n == 0 or lo > 0 or hi < size - 1 or (n > 1 and abs(step) != 1):
            out.append((a, lo, hi, start, step))
    return out


def update_index(node: Node, ix: tuple, ext: dict) -> tuple:
    """Where a ``slice_update`` evaluated at ``ix`` reads its values (clamped into range)."""
    starts, steps = node.params
    out = []
    for i, start, step, n in zip(ix, starts, steps, node.inputs[1].shape):
        if step > 0:
            k = ix_.floordiv(ix_.add(i, ix_.const(-start)), step, ext)
        else:
            k = ix_.floordiv(ix_.add(ix_.scale(i, -1), ix_.const(start)), -step, ext)
        out.append(ix_.clip(k, 0, max(n - 1, 0), ext))
    return tuple(out)


def input_index(consumer: Node, pos: int, ix: tuple, ext: dict):
    """Where ``consumer`` evaluated at ``ix`` reads input ``pos``: an index, or ``DATA``."""
    kind = PRIMITIVES[consumer.prim].kind
    inp = consumer.inputs[pos]
    if kind == "elementwise":
        return broadcast_index(ix, inp.shape)
    if kind == "view":
        return view_index(consumer, ix, ext)
    if kind == "update":
        return ix if pos == 0 else update_index(consumer, ix, ext)
    if kind == "gather":
        return DATA if pos == 0 else ix
    raise NotImplementedError(f"qtrace: {consumer.prim} inputs are not read per element")


def prim_cost(prim: str) -> int:
    """Rough cost of one evaluation of primitive ``prim`` (arithmetic 1, math functions 4)."""
    return 4 if prim in TRANSCENDENTAL or prim in ("divide", "sqrt", "gather") else 1


def cost(node: Node) -> int:
    """Rough cost of computing ``node`` once per element."""
    return prim_cost(node.prim)


RECOMPUTE_BUDGET = 4  # extra evaluations x cost per consumer element a fusion may add


def classify(reads: list, ext: dict, shape: tuple, node: Node) -> tuple:
    """``(ok, rule, expression)`` for computing ``node`` at ``reads`` inside one task.

    ``rule`` is ``"injective"`` (no recomputation), ``"recompute"`` (within the budget),
    or the reason for a boundary; ``expression`` is the offending index, if any.
    """
    if any(r is DATA for r in reads):
        return False, "data-dependent index (gather source)", None
    repeat = 0  # the most evaluations of any one element of ``node``, summed over the reads
    for r in reads:
        used, times = [], 1
        for comp in r:
            terms = comp.terms
            if len(terms) == 1 and terms[0][0][0] == "clip":
                # a region update's read: injective inside the region; outside it, the
                # clamped index re-reads the region's edge (that much recomputation)
                clipped, lo, hi = terms[0][0][1:]
                inner_lo, inner_hi = ix_.bounds(clipped, ext)
                times *= (inner_hi - inner_lo + 1) / (hi - lo + 1)
                terms = clipped.terms
            for atom, _ in terms:
                if atom[0] == "div":
                    return False, "floor division in index", comp
                if atom[0] == "mod":
                    return False, "remainder in index", comp
                if atom[0] == "s":
                    return False, "data-dependent index", comp
                if atom[0] == "clip":
                    return False, "clamped index inside an index (unrecognised)", comp
            if len(terms) > 1:
                return False, "index mixes loop variables (unrecognised)", comp
            used.extend(a[1] for a, _ in terms)
        if len(set(used)) != len(used):
            return False, "loop variable used twice (not injective)", r
        for k, e in ext.items():
            if k not in used:
                times *= e  # a broadcast: every value of k reads the same element
        repeat += times
    repeat = round(repeat, 6)
    if repeat <= 1:
        return True, "injective", None
    if repeat <= 1.25 and len(reads) == 1:
        return True, "injective inside the updated region", None
    # the work: every element of the task evaluates each read once (a region update
    # evaluates its source everywhere, selecting it inside the region), so ``node`` is
    # evaluated ``len(reads) * task size`` times where computing it alone takes its size
    size = 1
    for d in shape:
        size *= d
    work = 1
    for e in ext.values():
        work *= e
    extra = round(len(reads) * work / max(size, 1), 6)
    if size <= 1:
        return True, "recompute (scalar, loop-invariant)", None
    if (extra - 1) * cost(node) <= RECOMPUTE_BUDGET:
        return True, f"recompute x{extra} (within budget)", None
    why = "broadcast read" if len(reads) == 1 else f"read at {len(reads)} indices"
    return False, f"{why}: recomputing x{extra} exceeds budget", reads[0] if len(reads) == 1 else reads
