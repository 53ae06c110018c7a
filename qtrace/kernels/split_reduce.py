"""Reductions split across GPU threads: segments, partials, and a last-arriver combine.

A GPU runs a reduction with few outputs (a full ``sum``) on few threads if each output
gets one thread. Under a lowering with ``split_reductions``, an output's row of ``L``
inner elements is cut into ``S`` interleaved segments
(:func:`qtrace.kernels.lowering.reduce_segments`): thread ``(o, s)`` folds elements
``s, s + S, s + 2S, ...`` (neighbouring threads read neighbouring elements: coalesced),
writes its partial to scratch, and bumps output ``o``'s arrival counter (release/acquire
fences around an atomic add). The thread that arrives last combines the ``S`` partials
*in segment order* and stores the result, so the value does not depend on timing: a
reduction is deterministic, run after run. ``argmax``/``argmin`` partials carry their
index; ties keep the smallest index, NaN wins as in NumPy.

Scratch (zeroed by the runtime before the launch,
:func:`qtrace.kernels.lowering.split_scratch_bytes`): ``n_out`` int32
counters, then ``n_out * S`` partial values (8 bytes each), then, for arg reductions, as
many int64 indices. One launch, no second pass, no host round trip.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from . import scalar
from .lowering import values_offset

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)


def emit(em, s: int, identity, combine, arg_better) -> None:
    """Emit ``em``'s reduce task split in ``s`` segments (see the module docstring)."""
    t, b = em.t, em.b
    prim, ssa, acc_str = t.reduce
    acc_dt = np.dtype(acc_str)
    acc_ty = scalar.ir_type(acc_dt)
    bits = ir.IntType(8 * 8)
    (arg, out_ix, _), = t.stores
    out_dt = em.dt[arg]
    is_arg = prim in ("argmax", "argmin")
    outputs, length = math.prod(t.domain), math.prod(t.inner)
    with b.goto_entry_block():
        acc = b.alloca(acc_ty)
        best = b.alloca(I64)
    counters = em.scratch
    values = b.gep(em.scratch, [ir.Constant(I64, values_offset(outputs))], source_etype=I8)
    indices = b.gep(values, [ir.Constant(I64, outputs * s * 8)], source_etype=I8)

    def to_bits(v):
        wide = scalar.convert(b, v, acc_dt, np.dtype(np.float64 if acc_dt.kind == "f" else np.int64))
        return b.bitcast(wide, bits) if acc_dt.kind == "f" else wide

    def from_bits(w):
        if acc_dt.kind == "f":
            return scalar.convert(b, b.bitcast(w, ir.DoubleType()), np.dtype(np.float64), acc_dt)
        return scalar.convert(b, w, np.dtype(np.int64), acc_dt)

    def slot(base, i):
        return b.gep(base, [i], source_etype=bits)

    def per_thread(f):
        o = b.udiv(f, ir.Constant(I64, s))
        seg = b.urem(f, ir.Constant(I64, s))
        domain_vars = _split(b, o, t.domain)
        b.store(scalar.const(acc_dt, identity), acc)
        b.store(seg, best)

        def element(k):
            em.vars[:] = domain_vars + _split(b, k, t.inner)
            v = em.body()[ssa]
            cur = b.load(acc, typ=acc_ty)
            if is_arg:
                take = arg_better(b, v, cur)
                b.store(b.select(take, v, cur), acc)
                b.store(b.select(take, k, b.load(best, typ=I64)), best)
            else:
                v = scalar.convert(b, v, np.dtype(t.instrs[ssa][1]), acc_dt)
                b.store(combine(b, cur, v), acc)
        _strided_loop(em, seg, ir.Constant(I64, length), ir.Constant(I64, s), element)
        # plain stores and loads of the partials: the release fence before the counter's
        # atomic add and the acquire fence after it order them (fence-fence synchronisation)
        b.store(to_bits(b.load(acc, typ=acc_ty)), slot(values, f))
        if is_arg:
            b.store(b.load(best, typ=I64), slot(indices, f))
        b.fence("release")
        counter = b.gep(counters, [o], source_etype=I32)
        arrived = b.atomic_rmw("add", counter, ir.Constant(I32, 1), "acq_rel")
        with b.if_then(b.icmp_unsigned("==", arrived, ir.Constant(I32, s - 1))):
            b.fence("acquire")
            first = b.mul(o, ir.Constant(I64, s))
            b.store(from_bits(b.load(slot(values, first), typ=bits)), acc)
            if is_arg:
                b.store(b.load(slot(indices, first), typ=I64), best)

            def partial(j):
                at = b.add(first, j)
                v = from_bits(b.load(slot(values, at), typ=bits))
                cur = b.load(acc, typ=acc_ty)
                if is_arg:
                    k = b.load(slot(indices, at), typ=I64)
                    tie = b.and_(_same(b, v, cur, acc_dt), b.icmp_signed("<", k, b.load(best, typ=I64)))
                    take = b.or_(arg_better(b, v, cur), tie)
                    b.store(b.select(take, v, cur), acc)
                    b.store(b.select(take, k, b.load(best, typ=I64)), best)
                else:
                    b.store(combine(b, cur, v), acc)
            em.loop(ir.Constant(I64, 1), ir.Constant(I64, s), partial)
            result = (b.load(best, typ=I64) if is_arg
                      else scalar.convert(b, b.load(acc, typ=acc_ty), acc_dt, out_dt))
            em.vars[:] = domain_vars
            em.store(arg, out_ix, result, [])
        em.vars[:] = []
    em.loop(em.start, em.end, per_thread)


def _split(b: ir.IRBuilder, flat, extents: tuple) -> list:
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


def _strided_loop(em, lo, hi, step, body) -> None:
    """``body(k)`` for ``k = lo, lo + step, ... < hi``."""
    b = em.b
    pre = b.block
    loop_bb = em.fn.append_basic_block("seg")
    exit_bb = em.fn.append_basic_block("seg_done")
    b.cbranch(b.icmp_signed("<", lo, hi), loop_bb, exit_bb)
    b.position_at_end(loop_bb)
    k = b.phi(I64)
    k.add_incoming(lo, pre)
    body(k)
    nxt = b.add(k, step)
    k.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, hi), loop_bb, exit_bb)
    b.position_at_end(exit_bb)
