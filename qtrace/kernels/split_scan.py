"""Scans of few long rows split in contiguous chunks over CPU workers: two ordered passes.

A scan task runs one thread per row, so a ``cumsum`` of one long row is one serial loop.
Under a lowering that splits reductions in ``contiguous`` chunks
(:func:`qtrace.kernels.lowering.scan_segments`: the reductions' thresholds and chunk size,
so the chunks depend on the row length alone and the result is the same for any number
of workers), each of the ``rows`` rows is cut into ``S`` chunks of ``ceil(L / S)``
elements and the kernel's index space is ``2 * rows * S``, run in two phases
(:func:`qtrace.kernels.lowering.split_phases`; the runtime launches them in order over
the same scratch: the end of a launch is the barrier between them):

* pass 1, index ``g = row * S + chunk < rows * S``: the chunk's total, a plain sum in the
  scan's accumulation dtype (reassociable for floats, as a reduction's: it vectorizes and
  streams at memory speed), into 8-byte slot ``g`` of scratch;
* pass 2, index ``rows * S + g``: the chunk's offset, the exclusive sum of the row's
  earlier totals (serial, in chunk order: at most ``MAX_CHUNKS`` additions against at
  least ``CHUNK`` elements), then the chunk scanned from it in order, storing each prefix.

Integer scans are exact (wrapping addition is associative). A float prefix is the offset
(a sum of chunk totals) plus the in-order sum within its chunk: another association than
the serial scan's, so it differs from it in rounding, within the same order of error
bound (each term of a prefix passes through at most ``S + L/S`` roundings instead of
``L``), and is identical run after run and for any number of workers (the same code over
the same chunks). NaN and infinities propagate as in the serial scan (a NaN or an
``inf - inf`` anywhere makes every later prefix NaN). Running the whole index space
serially in one call is also correct: every pass-1 index precedes every pass-2 index.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from . import scalar
from .split_reduce import _split

I64 = ir.IntType(64)


def emit(em, s: int, combine) -> None:
    """Emit ``em``'s scan task split in ``s`` chunks per row (see the module docstring);
    ``combine(b, acc, v, reassociate)`` adds ``v`` to the running ``acc``."""
    t, b = em.t, em.b
    _, ssa, acc_str = t.reduce
    acc_dt = np.dtype(acc_str)
    acc_ty = scalar.ir_type(acc_dt)
    src_dt = np.dtype(t.instrs[ssa].dt)
    (arg, ix, _), = t.stores
    out_dt = em.dt[arg]
    rows, length = math.prod(t.domain), math.prod(t.inner)
    parts = rows * s
    chunk = -(-length // s)
    zero = scalar.const(acc_dt, 0)
    with b.goto_entry_block():
        acc = b.alloca(acc_ty)

    def total(i):
        return b.gep(em.scratch, [i], source_etype=I64)   # 8-byte slots: acc_ty fits

    def place(g):
        """Row coordinates and the chunk's ``[lo, hi)`` of chunk index ``g``."""
        o = b.udiv(g, ir.Constant(I64, s))
        lo = b.mul(b.urem(g, ir.Constant(I64, s)), ir.Constant(I64, chunk))
        hi = b.add(lo, ir.Constant(I64, chunk))
        hi = b.select(b.icmp_signed("<", hi, ir.Constant(I64, length)), hi, ir.Constant(I64, length))
        return o, _split(b, o, t.domain), lo, hi

    def value(domain_vars, k):
        em.vars[:] = domain_vars + [k]
        values = em.body()
        return scalar.convert(b, values[ssa], src_dt, acc_dt), values

    def chunk_total(g):
        _, domain_vars, lo, hi = place(g)
        b.store(zero, acc)

        def element(k):
            v, _ = value(domain_vars, k)
            b.store(combine(b, b.load(acc, typ=acc_ty), v, True), acc)
        em.loop(lo, hi, element)
        b.store(b.load(acc, typ=acc_ty), total(g))
        em.vars[:] = []

    def chunk_scan(f):
        g = b.sub(f, ir.Constant(I64, parts))
        o, domain_vars, lo, hi = place(g)
        b.store(zero, acc)

        def earlier(j):   # the exclusive sum of the row's earlier chunk totals, in order
            b.store(combine(b, b.load(acc, typ=acc_ty), b.load(total(j), typ=acc_ty), False), acc)
        em.loop(b.mul(o, ir.Constant(I64, s)), g, earlier)

        def element(k):
            v, values = value(domain_vars, k)
            running = combine(b, b.load(acc, typ=acc_ty), v, False)
            b.store(running, acc)
            em.store(arg, ix, scalar.convert(b, running, acc_dt, out_dt), values)
        em.loop(lo, hi, element)
        em.vars[:] = []

    def lt(x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)

    def gt(x, y):
        return b.select(b.icmp_signed(">", x, y), x, y)
    middle = ir.Constant(I64, parts)
    em.loop(em.start, lt(em.end, middle), chunk_total)
    em.loop(gt(em.start, middle), em.end, chunk_scan)
