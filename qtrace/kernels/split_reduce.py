"""Reductions split across GPU threads: segments, partials, and a last-arriver combine.

A GPU runs a reduction with few outputs (a full ``sum``) on few threads if each output
gets one thread, and a CPU on one worker. Under a lowering with ``split_reductions``, an output's row of ``L``
inner elements is cut into ``S`` interleaved segments
(:func:`qtrace.kernels.lowering.reduce_segments`): thread ``(o, s)`` folds the chunks
``s, s + S, s + 2S, ...`` of ``UNROLL`` neighbouring elements (neighbouring threads read
neighbouring chunks: coalesced; a chunk is one vector load where the pointers are aligned;
several chunks' loads are issued before any of them is folded, so that enough bytes are in
flight to keep the memory busy; ``argmax``/``argmin`` fold elements ``s, s + S, ...`` one at
a time),
writes its partial to scratch, and arrives at its group's counter (release/acquire fences
around an atomic add). Groups are ``GROUP`` partials: the thread that arrives last in a
group combines the group's partials *in order* into a partial of the next level and
arrives there, up to the level of one group per output, whose last arriver stores the
result. No combine is longer than a group, and the value does not depend on timing: a
reduction is deterministic, run after run. On a GPU (``Lowering.warp_combine``) the partials
of a warp's 32 threads are first combined in registers by shuffles, in a fixed tree order,
and only lane 0's goes through scratch: a 32nd of the stores, fences and atomic arrivals.
``argmax``/``argmin`` partials carry their index; ties keep the smallest index, NaN wins as
in NumPy. A CPU lowering asks for
``contiguous`` segments instead (each a chunk of the row a worker streams through, in
vector registers), as many as the row length alone decides: the result is the same for
any number of workers.

Scratch (:func:`qtrace.kernels.lowering.split_layout`): the int32 arrival counters of
every level, which must be zero at launch, then per level partial values (8 bytes each)
and, for arg reductions, int64 indices. The last arriver of a group sets its counter back
to zero, so a launch leaves the counters as it found them: a runtime zeroes a block once
and reuses it launch after launch (the GPU's). One launch, no second pass, no host round
trip.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from . import scalar
from .intrinsics import declare
from .loop_hints import narrow_accumulation
from .lowering import GROUP, split_layout, warp_combined

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
UNROLL = 4       # neighbouring elements per chunk of a segment (one vector load)
SCOPE = "device"  # fences order the partials for the threads of one device (NVPTX: .gpu;
                  # the host needs none of it: a system-scope fence per thread is costly)


def emit(em, s: int, identity, combine, arg_better) -> None:
    """Emit ``em``'s reduce task split in ``s`` segments (see the module docstring)."""
    t, b = em.t, em.b
    prim, ssa, acc_str = t.reduce
    acc_dt = np.dtype(acc_str)
    acc_ty = scalar.ir_type(acc_dt)
    bits = ir.IntType(64)
    (arg, out_ix, _), = t.stores
    out_dt = em.dt[arg]
    is_arg = prim in ("argmax", "argmin")
    outputs, length = math.prod(t.domain), math.prod(t.inner)
    warp = warp_combined(s, em.lowering)
    layout = split_layout(outputs, s, is_arg, warp)
    contiguous = em.lowering.split_reductions == "contiguous"
    chunk = -(-length // s)
    with b.goto_entry_block():
        acc = b.alloca(acc_ty)
        best = b.alloca(I64)

    def at(offset: int, ty, i):
        base = b.gep(em.scratch, [ir.Constant(I64, offset)], source_etype=I8)
        return b.gep(base, [i], source_etype=ty)

    def to_bits(v):
        wide = scalar.convert(b, v, acc_dt, np.dtype(np.float64 if acc_dt.kind == "f" else np.int64))
        return b.bitcast(wide, bits) if acc_dt.kind == "f" else wide

    def from_bits(w):
        if acc_dt.kind == "f":
            return scalar.convert(b, b.bitcast(w, ir.DoubleType()), np.dtype(np.float64), acc_dt)
        return scalar.convert(b, w, np.dtype(np.int64), acc_dt)

    def fold(v, k, cell=None, reassociate=True):
        """cell (default: acc), best <- the better of (cell, best) and (v, k): ties keep the
        smaller index. (``reassociate``: LLVM may reorder a float sum.)"""
        cell = acc if cell is None else cell
        cur = b.load(cell, typ=acc_ty)
        if is_arg:
            tie = b.and_(_same(b, v, cur, acc_dt), b.icmp_signed("<", k, b.load(best, typ=I64)))
            take = b.or_(arg_better(b, v, cur), tie)
            b.store(b.select(take, v, cur), cell)
            b.store(b.select(take, k, b.load(best, typ=I64)), best)
        else:
            b.store(combine(b, cur, v, reassociate), cell)

    def publish(level, i):
        # plain stores and loads of partials: the release fence before the counter's atomic
        # add and the acquire fence after it order them (fence-fence synchronisation)
        b.store(to_bits(b.load(acc, typ=acc_ty)), at(level.values, bits, i))
        if is_arg:
            b.store(b.load(best, typ=I64), at(level.indices, I64, i))

    def climb(o, pos, levels, domain_vars):
        """Publish the partial at ``pos`` of the first level, arrive; the last of a group
        combines the group in order and climbs; the last of the top stores the result (at
        once where no level is left)."""
        if not levels:
            result = (b.load(best, typ=I64) if is_arg
                      else scalar.convert(b, b.load(acc, typ=acc_ty), acc_dt, out_dt))
            em.vars[:] = domain_vars
            em.store(arg, out_ix, result, [])
            return
        level, rest = levels[0], levels[1:]
        publish(level, b.add(b.mul(o, ir.Constant(I64, level.count)), pos))
        b.fence("release", SCOPE)
        group = b.udiv(pos, ir.Constant(I64, level.group))
        slot = b.add(b.mul(o, ir.Constant(I64, level.count // level.group)), group)
        counter = at(level.counters, I32, slot)
        arrived = b.atomic_rmw("add", counter, ir.Constant(I32, 1), "acq_rel")
        with b.if_then(b.icmp_unsigned("==", arrived, ir.Constant(I32, level.group - 1))):
            b.fence("acquire", SCOPE)
            b.store(ir.Constant(I32, 0), counter)   # the group is complete: zero for the next launch
            first = b.add(b.mul(o, ir.Constant(I64, level.count)),
                          b.mul(group, ir.Constant(I64, level.group)))
            b.store(from_bits(b.load(at(level.values, bits, first), typ=bits)), acc)
            if is_arg:
                b.store(b.load(at(level.indices, I64, first), typ=I64), best)

            def member(j):
                i = b.add(first, j)
                k = b.load(at(level.indices, I64, i), typ=I64) if is_arg else None
                fold(from_bits(b.load(at(level.values, bits, i), typ=bits)), k)
            em.loop(ir.Constant(I64, 1), ir.Constant(I64, level.group), member)
            climb(o, group, rest, domain_vars)

    def warp_then_climb(o, seg, domain_vars):
        """Fold the 32 partials of this warp's segments into lane 0's in a fixed tree (lane
        ``i`` takes lane ``i + d``'s for d = 16, 8, 4, 2, 1: the lanes whose ``i + d`` passes
        31 fold garbage that no lane reads again), then lane 0 climbs with the warp's."""
        for d in (16, 8, 4, 2, 1):
            v = _shuffle_down(b, b.load(acc, typ=acc_ty), d)
            k = _shuffle_down(b, b.load(best, typ=I64), d) if is_arg else None
            fold(v, k, reassociate=False)
        with b.if_then(b.icmp_unsigned("==", b.and_(seg, ir.Constant(I64, GROUP - 1)),
                                       ir.Constant(I64, 0))):
            climb(o, b.lshr(seg, ir.Constant(I64, GROUP.bit_length() - 1)), layout.levels,
                  domain_vars)

    in_flight = chunks_in_flight(t, em.lowering.split_registers)

    def per_thread(f):
        o = b.udiv(f, ir.Constant(I64, s))
        seg = b.urem(f, ir.Constant(I64, s))
        domain_vars = coordinates(b, o, t.domain)

        def value(k):
            em.vars[:] = domain_vars + coordinates(b, k, t.inner)
            return em.body()[ssa]

        def element(k):
            v = value(k)
            if is_arg:
                cur = b.load(acc, typ=acc_ty)
                take = arg_better(b, v, cur)   # in order within a segment: strictly better
                b.store(b.select(take, v, cur), acc)
                b.store(b.select(take, k, b.load(best, typ=I64)), best)
            else:
                fold(scalar.convert(b, v, np.dtype(t.instrs[ssa].dt), acc_dt), None)
        def segment():   # this thread's partial, from scratch (re-run by an exact pass)
            b.store(scalar.const(acc_dt, identity), acc)
            b.store(seg, best)
            if contiguous:   # segment seg is elements [seg * chunk, (seg + 1) * chunk) of the row
                lo = b.mul(seg, ir.Constant(I64, chunk))
                hi = b.add(lo, ir.Constant(I64, chunk))
                hi = b.select(b.icmp_signed("<", hi, ir.Constant(I64, length)), hi, ir.Constant(I64, length))
                b.store(lo, best)
                em.loop(lo, hi, element, float32_width=narrow_accumulation(t))
            elif is_arg:
                em.loop(seg, ir.Constant(I64, length), element, ir.Constant(I64, s))
            else:
                _chunked_segment(em, seg, length, s, in_flight, value, lambda v: fold(
                    scalar.convert(b, v, np.dtype(t.instrs[ssa].dt), acc_dt), None,
                    reassociate=False))
        em.optimistic(segment)
        if warp:
            warp_then_climb(o, seg, domain_vars)
        else:
            climb(o, seg, layout.levels, domain_vars)
        em.vars[:] = []
    em.loop(em.start, em.end, per_thread)


def coordinates(b: ir.IRBuilder, flat, extents: tuple) -> list:
    """Row-major coordinates of ``flat`` over ``extents``."""
    rest, found = flat, []
    for d in reversed(extents[1:]):
        found.append(b.urem(rest, ir.Constant(I64, d)))
        rest = b.udiv(rest, ir.Constant(I64, d))
    return [rest, *reversed(found)] if extents else []


def _same(b: ir.IRBuilder, v, cur, dt: np.dtype):
    """``v`` equals ``cur``, NaN counting as equal to NaN."""
    if dt.kind == "f":
        both_nan = b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_unordered("uno", cur, cur))
        return b.or_(b.fcmp_ordered("==", v, cur), both_nan)
    return b.icmp_unsigned("==", v, cur)


def chunks_in_flight(t, registers: int) -> int:
    """Chunks of a split segment that a trip of its loop reads: as many as fit ``registers``
    32-bit registers with every load of the reduced expression (16: a float32 ``sum`` 4, so
    64 bytes in flight per thread, where one chunk kept an H200's memory 43% busy and four
    74%; a float64 one, or a sum of products, 2; at least 1)."""
    words = sum(UNROLL * max(1, np.dtype(instr.dt).itemsize // 4)
                for instr in t.instrs if instr.kind == "load")
    return max(1, registers // max(1, words))


def _chunked_segment(em, seg, length: int, s: int, in_flight: int, value, fold):
    """Fold segment ``seg`` into the accumulator (``fold``; it holds the identity). The row
    is dealt out in chunks of ``UNROLL`` neighbouring elements, chunk ``c`` to segment
    ``c % s``: a thread reads ``UNROLL`` neighbours at a time (one vector load where its
    pointers are aligned: ``llvm_nvptx.grid_entry``) and a warp ``32 UNROLL`` consecutive
    elements. A trip of the loop computes ``in_flight`` chunks' values (their loads first:
    all in flight together), then folds them; the remaining chunks one per trip, and a last
    partial chunk by the segment whose turn it is. Every element is folded in order of its
    index (``fold`` does not let LLVM reassociate): the result does not depend on
    ``in_flight``, and is the same run after run."""
    b = em.b
    whole = length // UNROLL   # (seg < s, so the count below is >= 0: 0 for a segment with no whole chunk)
    n = b.udiv(b.add(b.sub(ir.Constant(I64, whole), seg), ir.Constant(I64, s - 1)), ir.Constant(I64, s))

    def chunks(first, count):
        values = []
        for c in range(count):
            j = b.add(first, ir.Constant(I64, c))
            base = b.mul(b.add(seg, b.mul(j, ir.Constant(I64, s))), ir.Constant(I64, UNROLL))
            values += [value(b.add(base, ir.Constant(I64, u))) for u in range(UNROLL)]
        for v in values:
            fold(v)
    groups = b.udiv(n, ir.Constant(I64, in_flight))
    em.loop(ir.Constant(I64, 0), groups,
            lambda g: chunks(b.mul(g, ir.Constant(I64, in_flight)), in_flight),
            properties={"llvm.loop.unroll.count": 1})
    if in_flight > 1:
        em.loop(b.mul(groups, ir.Constant(I64, in_flight)), n, lambda j: chunks(j, 1),
                properties={"llvm.loop.unroll.count": 1})
    if length % UNROLL:
        with b.if_then(b.icmp_unsigned("==", seg, ir.Constant(I64, whole % s))):
            for u in range(length % UNROLL):
                fold(value(ir.Constant(I64, whole * UNROLL + u)))


def _shuffle_down(b: ir.IRBuilder, v, delta: int):
    """Lane ``i``'s ``v`` from lane ``i + delta`` of the warp (its own past lane 31): NVPTX's
    ``shfl.sync.down`` over all 32 lanes, a 64-bit value as two 32-bit halves."""
    i32, ty = ir.IntType(32), v.type
    fn = declare(b.module, "llvm.nvvm.shfl.sync.down.i32", i32, [i32] * 4)

    def shuffle(word):
        return b.call(fn, [ir.Constant(i32, -1), word, ir.Constant(i32, delta), ir.Constant(i32, 31)])
    width = 64 if isinstance(ty, ir.DoubleType) else 32 if isinstance(ty, ir.FloatType) else ty.width
    raw = b.bitcast(v, ir.IntType(width)) if not isinstance(ty, ir.IntType) else v
    if width <= 32:
        got = shuffle(b.zext(raw, i32) if width < 32 else raw)
        got = b.trunc(got, ty) if width < 32 else got
    else:
        lo = shuffle(b.trunc(raw, i32))
        hi = shuffle(b.trunc(b.lshr(raw, ir.Constant(raw.type, 32)), i32))
        got = b.or_(b.zext(lo, raw.type), b.shl(b.zext(hi, raw.type), ir.Constant(raw.type, 32)))
    return got if isinstance(ty, ir.IntType) else b.bitcast(got, ty)
