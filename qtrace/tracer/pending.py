"""The pending work of each thread: which live tensors hold unevaluated values, and when
they are evaluated.

Every tensor (or view storage) that a thread makes pending is noted here by a weak
reference. An evaluation on that thread — a value asked for (``print``, ``float``,
``.numpy()``), ``qt.eval``, or a *cut* — evaluates **every** live pending value of the
thread at once, as one graph: a value that several live tensors need is computed once
and stored, so the next evaluation starts from it instead of from the beginning (an
N-body step reads ``pos`` each step; ``vel``, never read, is still stored with it).
This is what NumPy computes anyway: values the program still holds; values it dropped
are never computed.

Cuts. A program that never reads a value (a time-stepping loop that only writes arrays)
is evaluated automatically once ``config.max_pending_nodes`` operations are pending. To
find the same cached plans on every pass of a Python loop, the cut is placed at the same
place in the loop each time: the first automatic cut learns an *anchor* — among the
source locations recording operations over the next stretch of the program, the one in
the outermost function that occurs least often (a statement of the outermost loop) —
and later cuts happen when the anchor records again. The pending graphs between cuts
are then identical pass after pass (one plan, compiled once, replayed). Where the anchor
is not recorded for four times the limit (another part of the program runs), the policy
cuts there and learns a new anchor. ``qt.explain()`` (no arguments) reports the policy's
state and the plan the next evaluation would run.
"""

from __future__ import annotations

import sys
import weakref

from ..config import config
from ..graph import evaluate as graph_evaluate
from ..graph.node import forget_recent, result_leaf
from ..stats import bump
from . import tensor
from .context import concrete_error, state
from .views import Storage, array_of, array_view, set_base, views_lock

LEARN = 1   # cut-policy phases (ThreadState.cut)
ANCHORED = 2


class CutPolicy:
    """Where this thread cuts its pending graph (see the module docstring)."""

    __slots__ = ("phase", "anchor", "seen", "cuts")

    def __init__(self):
        self.phase = 0
        self.anchor = None   # (prim, shape, source site) of the op to cut at
        self.seen: dict = {}  # site -> [user depth, occurrences, first prim, first shape]
        self.cuts = 0


def note(owner) -> None:
    """``owner`` (a Tensor or a Storage) now holds a pending value."""
    s = state()
    if s.special:
        return
    if type(owner) is not Storage or owner.noted is not s.epoch:
        # (a storage written again and again is listed once per pending list; marked by the
        # list's epoch token, not the list itself, which it would keep alive)
        s.pending.append(weakref.ref(owner))
        if type(owner) is Storage:
            owner.noted = s.epoch
    s.count += 1
    if s.count >= config.max_pending_nodes and _at_gate(s, owner):
        _consider_cut(s, owner)


def _at_gate(s, owner) -> bool:
    """Whether the cut policy must look at ``owner``'s new value (past the limit): always
    while it learns; once anchored, only for an operation of its anchor's primitive and
    shape, or four times past the limit (where it learns again) — the compiled recorder's
    ``note`` asks the same."""
    gate = s.gate
    if gate is None or s.count >= 4 * config.max_pending_nodes:
        return True
    node = owner.node if type(owner) is Storage else owner._node
    return node.prim == gate[0] and node.shape == gate[1]


def note_results(tensors) -> None:
    """Note the pending ``tensors`` a differentiated function returned (``qt.vjp``):
    recorded while differentiating, when nothing is noted, they must still be stored by the
    next evaluation — an eager training loop keeps each step's loss, and an unstored loss
    would be recomputed from its step's forward pass, which reads the weights of the step
    before, and so on back to the start. No cut here: the backward pass, recorded next,
    reads the same forward values and is evaluated with them."""
    s = state()
    if s.special:
        return
    for t in tensors:
        if t._node.inputs:
            s.pending.append(weakref.ref(t))
            s.count += 1


def _user_frame(skip: int):
    """The innermost frame outside qtrace, ``skip`` frames up from the caller's caller."""
    f = sys._getframe(skip + 1)
    while f is not None and f.f_globals.get("__name__", "").startswith("qtrace"):
        f = f.f_back
    return f


def _site(skip: int = 2):
    """The source location recording the current operation: ``(code, offset)`` of the
    innermost user frames (outside qtrace) and how deep the user's stack is."""
    f = _user_frame(skip)
    site = []
    depth = 0
    while f is not None:
        if len(site) < 2:  # the statement and the call that reached it (not the whole stack:
            site.append((f.f_code, f.f_lasti))  # the same loop, run from elsewhere, must match)
        depth += 1
        f = f.f_back
    return tuple(site), depth


def _at_site(site: tuple, skip: int = 2) -> bool:
    """Whether the current operation is recorded at ``site`` (what :func:`_site` would
    return first), without walking the rest of the stack."""
    f = _user_frame(skip)
    for code, offset in site:
        if f is None or f.f_code is not code or f.f_lasti != offset:
            return False
        f = f.f_back
    return len(site) == 2 or f is None


def _consider_cut(s, owner) -> None:
    policy = s.cut
    if policy is None:
        policy = s.cut = CutPolicy()
    node = owner.node if type(owner) is Storage else owner._node
    limit = config.max_pending_nodes
    if policy.phase == ANCHORED:
        prim, shape, site = policy.anchor
        if node.prim == prim and node.shape == shape and _at_site(site):
            _cut(policy)
        elif s.count >= 4 * limit:  # the anchor is not recorded here: learn another
            policy.phase = LEARN
            s.gate = None
            _cut(policy)
        return
    policy.phase = LEARN
    s.gate = None
    site, depth = _site()
    entry = policy.seen.get(site)
    if entry is None:
        policy.seen[site] = [depth, 1, node.prim, node.shape]
    else:
        entry[1] += 1
    if s.count < 2 * limit:
        return
    # the anchor: outermost user frames first, then the rarest site among them
    best = min(policy.seen.items(), key=lambda kv: (kv[1][0], kv[1][1]))
    depth, _, prim, shape = best[1]
    policy.anchor = (prim, shape, best[0])
    policy.seen = {}
    policy.phase = ANCHORED
    # the compiled recorder also compares the innermost user frame (code, offset) of the
    # operation recording: other statements pass by without calling this function
    s.gate = (prim, shape) + (best[0][0] if best[0] else ())
    _cut(policy)


def _cut(policy: CutPolicy) -> None:
    policy.cuts += 1
    bump("auto_evaluations")
    flush(())


def flush(requested: tuple) -> list:
    """Evaluate every live pending value of this thread, and ``requested`` (tensors).

    Returns the buffer of each requested tensor. The compiled recorder's ``flush`` does
    the common case (its plan already known) in C, and answers NotImplemented otherwise.
    """
    if native_flush is not None:
        out = native_flush(requested)
        if out is not NotImplemented:
            return out
    return _flush(requested)


native_flush = None   # the compiled recorder's flush (qtrace.tracer.methods binds it)


def _flush(requested: tuple) -> list:
    """:func:`flush` in Python: the reference, and every case the compiled one leaves."""
    s = state()
    refs, s.pending, s.count, s.epoch = s.pending, [], 0, object()
    forget_recent()
    nodes: list = []
    owners: dict = {}   # id(node) -> [owners]
    for t in requested:
        _add(t, True, nodes, owners)
    for r in refs:
        o = r()
        if o is not None:
            _add(o, False, nodes, owners)
    if nodes:
        bump("evaluations")
        buffers = graph_evaluate.evaluate(tuple(nodes))
        for node, buf in zip(nodes, buffers):
            leaf = result_leaf(node, buf)
            for owner in owners[id(node)]:
                if type(owner) is Storage:
                    with views_lock():   # checked and replaced together (else a write by
                        if owner.node is node:   # another thread in between is undone)
                            set_base(owner, leaf)
                elif owner._node is node:
                    owner._node = leaf
    out = []
    for t in requested:
        n = t._node
        if n.prim == "input" and n.buffer is not None:
            out.append(n.buffer)
            continue
        arr = array_view(t)
        if arr is None:  # written to by another thread meanwhile
            return _flush(requested)
        out.append(arr)
    return out


def _add(owner, required: bool, nodes: list, owners: dict) -> None:
    """Collect the pending value ``owner`` (a tensor or storage) holds into ``nodes``."""
    if type(owner) is not Storage:
        v = owner._view
        if v is not None:
            st = v[0]
            if st.node.prim != "input":
                owner = st  # a view of a pending base: the base is evaluated
            elif array_view(owner) is not None:
                return  # a view of evaluated memory: nothing to compute
        node = owner._node if type(owner) is not Storage else owner.node
    else:
        node = owner.node
    prim = node.prim
    if prim == "input" or (prim == "const" and not required):
        return
    for leaf in node.leaves:
        if leaf.buffer is None:  # a value of a function being traced
            if required:
                raise concrete_error("qt.Tensor value")
            return
    mine = owners.get(id(node))
    if mine is None:
        owners[id(node)] = [owner]
        nodes.append(node)
    elif not any(o is owner for o in mine):
        mine.append(owner)


def pending_nodes() -> tuple:
    """The values the next evaluation on this thread would compute (nothing is evaluated)."""
    nodes: list = []
    for r in state().pending:
        o = r()
        if o is not None:
            _add(o, False, nodes, {})
    return tuple(dict.fromkeys(nodes))


def reset() -> None:
    """Forget this thread's cut policy (the next automatic cut learns its anchor again)."""
    s = state()
    s.cut = s.gate = None


def describe() -> dict:
    """The pending state of this thread: operations since the last evaluation, live pending
    owners, automatic cuts so far and the anchor (``None`` until the first cut)."""
    s = state()
    live = sum(1 for r in s.pending if r() is not None)
    policy = s.cut
    anchor = None
    if policy is not None and policy.anchor is not None:
        prim, shape, site = policy.anchor
        code, offset = site[0] if site else (None, 0)
        where = f"{code.co_filename}:{_line(code, offset)}" if code is not None else "?"
        anchor = f"{prim}{list(shape)} recorded at {where}"
    return {"pending_ops": s.count, "live_pending": live, "limit": config.max_pending_nodes,
            "automatic_cuts": policy.cuts if policy else 0, "anchor": anchor}


def _line(code, offset: int) -> int:
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return line
    return code.co_firstlineno



tensor.install(note, flush, array_view, array_of)  # (the compiled recorder's note replaces
# this one where it is built: qtrace.tracer.methods)
