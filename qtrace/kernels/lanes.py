"""Per-element loops run in blocks of lanes, so LLVM's loop vectorizer can widen them.

A task whose body runs one per-element loop is emitted in three phases per block of
``task.lanes`` consecutive elements:

1. per lane, the instructions before the loop: its initial state and trip bounds go to
   small per-lane arrays (stack allocas);
2. the loop itself, iteration-major: for ``t`` in ``0..max trip count of the block``, an
   inner loop over lanes advances every lane still running (a ``select`` keeps the
   others). The inner lane loop is straight-line code over contiguous arrays — the
   shape the vectorizer widens — so ``sin`` of 8 or 16 elements runs at once;
3. per lane, the instructions after the loop, reading the loop's results from the
   arrays, and the stores.

The reverse (``loop_vjp``) is blocked the same way: the replay pushes each iteration's
row (the states or residuals the reverse reads, ``LoopVjp.row_dts``) for all lanes of the
block to the worker's adstack (row ``t``: each value's lanes side by side), then the
reverse body runs iteration-major from the block's last iteration down, masked per
lane. Index checks in the body report only for lanes that are running.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..graph.instrs import LOOPS, STACK_HEADER, STACK_WORD, stack_rows, uses_fast_trig, walk
from . import scalar
from .intrinsics import aborted

I1, I8, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(64)


def loop_position(task) -> int | None:
    """Index of the task's single top-level loop instruction, or None."""
    found = [i for i, instr in enumerate(task.instrs) if instr.kind in LOOPS]
    return found[0] if len(found) == 1 else None


class LaneArrays:
    """``[lanes x type]`` arrays on the stack of the kernel function."""

    def __init__(self, em, lanes: int):
        self.em, self.lanes = em, lanes

    def new(self, ty):
        with self.em.b.goto_entry_block():
            return self.em.b.alloca(ir.ArrayType(ty, self.lanes))

    def ptr(self, arr, lane):
        return self.em.b.gep(arr, [ir.Constant(I64, 0), lane], inbounds=True)

    def load(self, arr, lane, ty):
        return self.em.b.load(self.ptr(arr, lane), typ=ty)

    def store(self, arr, lane, v):
        self.em.b.store(v, self.ptr(arr, lane))


def _mem(ty):
    return I8 if ty == I1 else ty


def _to_mem(b, v):
    return b.zext(v, I8) if v.type == I1 else v


def _from_mem(b, v, ty):
    return b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if ty == I1 else v


def emit_blocked(em) -> None:
    """Emit ``em``'s map task with its loop run in blocks of lanes (see the module doc)."""
    t, b = em.t, em.b
    lanes = t.lanes
    pos = loop_position(t)
    instr = t.instrs[pos]
    arrays = LaneArrays(em, lanes)
    kind, m = instr.layout, instr.n_state
    dts = [np.dtype(d) for d in instr.dts]
    types = [scalar.ir_type(d) for d in dts]
    reverse = instr.kind == "loop_vjp"
    ins = instr.per_element
    nb = 2 if kind == "fori" else 0
    state = [arrays.new(_mem(ty)) for ty in types]
    lo_a = arrays.new(I64) if kind == "fori" else None
    cts = [arrays.new(_mem(ty)) for ty in types] if reverse else []
    count = arrays.new(I64)
    with b.goto_entry_block():
        maxn = b.alloca(I64)
        em.trig_bad = b.alloca(I1)
    fast = _uses_fast_trig(instr)
    if reverse:  # per-lane sums of the captured values' cotangents
        em.lane_acc = [(arrays.new(ty), ty) for ty in _output_types(instr.reverse)[m:]]
    saved = [arrays.new(_mem(ty)) for ty in types + (types if reverse else [])] if fast else []
    step = ir.Constant(I64, lanes)

    def block(base):
        stop = b.add(base, step)
        n_lanes = b.sub(b.select(b.icmp_signed("<", stop, em.end), stop, em.end), base)
        b.store(ir.Constant(I64, 0), maxn)

        # phase 1: initial state and bounds of every lane
        def phase1(lane):
            em.vars[:] = [b.add(base, lane)]
            values = em.run(t.instrs[:pos], {})
            for k in range(m):
                arrays.store(state[k], lane, _to_mem(b, values[ins[k]]))
            trips = ir.Constant(I64, 0)  # while: counted as the lanes run
            if kind == "fori":  # the trip count is known before the loop runs
                lo, hi = values[ins[m]], values[ins[m + 1]]
                arrays.store(lo_a, lane, lo)
                n = b.sub(hi, lo)
                trips = b.select(b.icmp_signed(">", n, trips), n, trips)
                cur = b.load(maxn, typ=I64)
                b.store(b.select(b.icmp_signed(">", n, cur), n, cur), maxn)
            if reverse:
                for k in range(m):
                    arrays.store(cts[k], lane, _to_mem(b, values[ins[m + nb + k]]))
            arrays.store(count, lane, trips)
        em.loop(ir.Constant(I64, 0), n_lanes, phase1)

        # phase 2: the loop, iteration-major over the block
        def phase2():
            if reverse:
                _reverse(em, instr, arrays, state, lo_a, cts, count, maxn, base, n_lanes, types)
            else:
                _forward(em, instr, arrays, state, lo_a, count, maxn, base, n_lanes, types)
        if not fast:
            phase2()
        else:
            # optimistic: fast sin/cos/tan; the block again, exactly, if an argument was large
            def save(lane):
                for src, dst, ty in zip(state + cts, saved, types + types):
                    arrays.store(dst, lane, arrays.load(src, lane, _mem(ty)))
            em.loop(ir.Constant(I64, 0), n_lanes, save)
            b.store(ir.Constant(I1, 0), em.trig_bad)
            b.emission.trig_flags = []
            try:
                phase2()
            finally:
                b.emission.trig_flags = None
            with b.if_then(b.load(em.trig_bad, typ=I1), likely=False):
                def restore(lane):
                    for dst, src, ty in zip(state + cts, saved, types + types):
                        arrays.store(dst, lane, arrays.load(src, lane, _mem(ty)))
                    if kind == "while":
                        arrays.store(count, lane, ir.Constant(I64, 0))
                em.loop(ir.Constant(I64, 0), n_lanes, restore)
                b.emission.rare = True   # exact trigonometry by C library calls
                try:
                    phase2()
                finally:
                    b.emission.rare = False

        # phase 3: everything after the loop, per lane, and the stores
        def phase3(lane):
            em.vars[:] = [b.add(base, lane)]
            if reverse:
                result = tuple(_from_mem(b, arrays.load(a, lane, _mem(ty)), ty) for a, ty in zip(cts, types))
                result += tuple(arrays.load(a, lane, ty) for a, ty in em.lane_acc)
                result += tuple(_lane_state(em, arrays, state, lane, types))  # the replay's final state
            else:
                result = tuple(_lane_state(em, arrays, state, lane, types))
                result += (arrays.load(count, lane, I64),)
            em.loop_override = {pos: result}
            try:
                values = em.run(t.instrs, {})
            finally:
                em.loop_override = None
            for arg, ix, v in t.stores:
                em.store(arg, ix, values[v], values)
        em.loop(ir.Constant(I64, 0), n_lanes, phase3)
        em.vars[:] = []

    # blocks over [start, end)
    pre = b.block
    head = em.fn.append_basic_block("block_head")
    body_bb = em.fn.append_basic_block("block_body")
    done = em.fn.append_basic_block("block_done")
    b.branch(head)
    b.position_at_end(head)
    base = b.phi(I64)
    base.add_incoming(em.start, pre)
    b.cbranch(b.and_(b.icmp_signed("<", base, em.end), b.not_(aborted(b))), body_bb, done)
    b.position_at_end(body_bb)
    block(base)
    base.add_incoming(b.add(base, step), b.block)
    b.branch(head)
    b.position_at_end(done)


def _check_fast_math(em, active) -> None:
    """Fold this lane's fast-trigonometry range flags into the block's 'redo exactly' flag."""
    b = em.b
    flags = b.emission.trig_flags
    if not flags:
        return
    ok = flags[0]
    for f in flags[1:]:
        ok = b.and_(ok, f)
    del flags[:]
    bad = b.and_(active, b.not_(ok))
    b.store(b.or_(b.load(em.trig_bad, typ=I1), bad), em.trig_bad)


def _lane_state(em, arrays, state, lane, types):
    b = em.b
    return [_from_mem(b, arrays.load(a, lane, _mem(ty)), ty) for a, ty in zip(state, types)]


def _counted(em, extent, body):
    """``for t in [0, extent)``; ``body(t)`` may return an i1 'stop' flag (break after)."""
    b = em.b
    pre = b.block
    head = em.fn.append_basic_block("iter_head")
    body_bb = em.fn.append_basic_block("iter_body")
    done = em.fn.append_basic_block("iter_done")
    b.branch(head)
    b.position_at_end(head)
    t = b.phi(I64)
    t.add_incoming(ir.Constant(I64, 0), pre)
    b.cbranch(b.icmp_signed("<", t, extent), body_bb, done)
    b.position_at_end(body_bb)
    stop = body(t)
    nxt = b.add(t, ir.Constant(I64, 1))
    if stop is not None:
        nxt = b.select(stop, extent, nxt)
    t.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)


def _advance(em, instr, arrays, state, lo_a, count, base, n_lanes, types, t, push=None):
    """One iteration ``t`` of every lane of the block; returns the 'any lane ran' flag."""
    b = em.b
    kind = instr.layout
    cprog, bprog = instr.cond, instr.body
    with b.goto_entry_block():
        ran = b.alloca(I1)
    b.store(ir.Constant(I1, 0), ran)

    def lane_step(lane):
        em.vars[:] = [b.add(base, lane)]
        s = _lane_state(em, arrays, state, lane, types)
        env = {"state": s}
        if kind == "fori":
            active = b.icmp_signed("<", t, arrays.load(count, lane, I64))
            env["counter"] = b.add(arrays.load(lo_a, lane, I64), t)
        else:
            done_iters = arrays.load(count, lane, I64)
            still = b.icmp_signed("==", done_iters, t)  # ran every earlier iteration
            em.lane_active = still
            c = em.run(cprog.instrs, env)[cprog.outputs[0]]
            _check_fast_math(em, still)
            active = b.and_(still, c)
        em.lane_active = active
        new = em.run(bprog.instrs, env)
        if push is not None:   # the states, and residuals the body program computed from them
            push(lane, s + [new[o] for o in bprog.outputs[len(s):]], active)
        em.lane_active = None
        _check_fast_math(em, active)
        for k, a in enumerate(state):
            arrays.store(a, lane, _to_mem(b, b.select(active, new[bprog.outputs[k]], s[k])))
        if kind == "while":
            cnt = arrays.load(count, lane, I64)
            arrays.store(count, lane, b.select(active, b.add(cnt, ir.Constant(I64, 1)), cnt))
        b.store(b.or_(b.load(ran, typ=I1), active), ran)
    em.loop(ir.Constant(I64, 0), n_lanes, lane_step)
    return b.load(ran, typ=I1)


def _forward(em, instr, arrays, state, lo_a, count, maxn, base, n_lanes, types):
    b = em.b
    if instr.layout == "fori":
        def step(t):
            _advance(em, instr, arrays, state, lo_a, count, base, n_lanes, types, t)
        _counted(em, b.load(maxn, typ=I64), step)
    else:
        # while: iterate until no lane of the block is running
        _counted(em, ir.Constant(I64, 1 << 62),
                 lambda t: b.not_(_advance(em, instr, arrays, state, lo_a, count, base, n_lanes,
                                           types, t)))


def _reverse(em, instr, arrays, state, lo_a, cts, count, maxn, base, n_lanes, types):
    """Replay pushing a row per iteration ``t`` (value by value, each value's lanes side by
    side), then run the reverse body from the last row down."""
    b = em.b
    kind, m, rprog, pushed, check = instr.layout, instr.n_state, instr.reverse, instr.pushed, instr.check
    lanes = em.t.lanes
    sdt = [np.dtype(d) for d in instr.row_dts]
    offsets, fb, ib = stack_rows(instr.row_dts, pushed, rprog)
    cap = b.load(em.scratch, typ=I64)  # rows of `lanes` entries each
    fstack = b.gep(em.scratch, [ir.Constant(I64, STACK_HEADER)], source_etype=I8)
    fbytes = b.and_(b.add(b.mul(cap, ir.Constant(I64, fb * lanes)), ir.Constant(I64, 63)),
                    ir.Constant(I64, -64))
    istack = b.gep(fstack, [fbytes], source_etype=I8)

    def slot(t, lane, k):
        # row t of the block holds each pushed value's lanes side by side (a value pushed
        # by every lane is one contiguous vector store, however many values a row holds)
        where, off = offsets[k]
        stack, size = (fstack, fb) if where == "f" else (istack, ib)
        width = -(-sdt[k].itemsize // STACK_WORD) * STACK_WORD
        pos = b.add(b.mul(t, ir.Constant(I64, size * lanes)),
                    b.add(ir.Constant(I64, off * lanes), b.mul(lane, ir.Constant(I64, width))))
        return b.gep(stack, [pos], source_etype=I8)

    def push(t, room):
        def store(lane, s, active):
            with b.if_then(room):
                for k in pushed:
                    v = s[k]
                    b.store(b.zext(v, I8) if sdt[k].kind == "b" else v, slot(t, lane, k))
        return store

    with b.goto_entry_block():
        rows = b.alloca(I64)
    b.store(ir.Constant(I64, 0), rows)

    def replay(t):
        # a row beyond the capacity is an overflow only if some lane actually runs in it
        room = b.icmp_signed("<", t, cap)
        ran = _advance(em, instr, arrays, state, lo_a, count, base, n_lanes, types, t, push(t, room))
        overflow = b.and_(ran, b.not_(room))
        with b.if_then(overflow, likely=False):
            b.store(ir.Constant(I64, check + 1), em.status)
            b.store(t, b.gep(em.status, [ir.Constant(I64, 1)], source_etype=I64))
        b.store(b.select(b.and_(ran, room), b.add(t, ir.Constant(I64, 1)), b.load(rows, typ=I64)), rows)
        return b.or_(b.not_(room), b.not_(ran))

    extent = b.load(maxn, typ=I64) if kind == "fori" else ir.Constant(I64, 1 << 62)
    _counted(em, extent, replay)

    # reverse: rows-1 .. 0; lane l is active in row t iff t < count[l]
    accs = em.lane_acc  # allocated once per kernel: the exact re-run reuses them

    def zero(lane):
        for a, ty in accs:
            arrays.store(a, lane, ir.Constant(ty, 0) if isinstance(ty, ir.IntType) else ir.Constant(ty, 0.0))
    em.loop(ir.Constant(I64, 0), n_lanes, zero)
    n_rows = b.load(rows, typ=I64)

    def rev_row(j):
        t = b.sub(b.sub(n_rows, j), ir.Constant(I64, 1))

        def lane_step(lane):
            em.vars[:] = [b.add(base, lane)]
            active = b.icmp_signed("<", t, arrays.load(count, lane, I64))
            popped = []
            for k, ty in enumerate(em._state_types(instr.row_dts)):
                if k in offsets:
                    v = b.load(slot(t, lane, k), typ=I8 if sdt[k].kind == "b" else ty)
                    popped.append(_from_mem(b, v, ty))
                else:
                    popped.append(ir.Constant(ty, ir.Undefined))
            ct = [_from_mem(b, arrays.load(a, lane, _mem(ty)), ty) for a, ty in zip(cts, types)]
            counter = b.add(arrays.load(lo_a, lane, I64), t) if kind == "fori" else t
            em.lane_active = active
            rv = em.run(rprog.instrs, {"state": popped, "ct": ct, "counter": counter})
            em.lane_active = None
            _check_fast_math(em, active)
            outs = [rv[o] for o in rprog.outputs]
            for k, a in enumerate(cts):
                arrays.store(a, lane, _to_mem(b, b.select(active, outs[k], ct[k])))
            for (a, ty), v in zip(accs, outs[m:]):
                cur = arrays.load(a, lane, ty)
                total = b.add(cur, v) if isinstance(ty, ir.IntType) else b.fadd(cur, v)
                arrays.store(a, lane, b.select(active, total, cur))
        em.loop(ir.Constant(I64, 0), n_lanes, lane_step)
    _counted(em, n_rows, rev_row)


def _output_types(prog) -> list:
    """IR types of a program's outputs."""
    instrs, outs = prog.instrs, prog.outputs
    return [scalar.ir_type(np.dtype(instrs[o].dt)) for o in outs]


def _uses_fast_trig(instr) -> bool:
    """Whether a loop's body programs compute float32/float64 sin, cos or tan."""
    return any(i is not instr and uses_fast_trig(i) for i in walk([instr]))
