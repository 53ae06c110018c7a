"""Scans of few long rows split in contiguous chunks over CPU workers: two ordered passes.

A scan task runs one thread per row, so a ``cumsum`` of one long row is one serial loop.
Under a lowering that splits reductions in ``contiguous`` chunks
(:func:`qtrace.kernels.lowering.scan_segments`: the reductions' thresholds and chunk size,
so the chunks depend on the row length alone and the result is the same for any number
of workers), each of the ``rows`` rows is cut into ``S`` chunks, each chunk into
``PIECES`` contiguous pieces (``ceil(L / (S * PIECES))`` elements; the row's last one
shorter), and the kernel's index space is ``2 * rows * S``, run in two phases
(:func:`qtrace.kernels.lowering.split_phases`; the runtime launches them in order over
the same zeroed scratch: the end of the first launch is the barrier):

* pass 1, index ``g = row * S + chunk < rows * S``: the total of each piece of chunk
  ``g``, a plain sum in the scan's accumulation dtype (reassociable for floats, as a
  reduction's: it vectorizes and streams at memory speed), into an 8-byte slot of scratch
  per piece;
* pass 2, index ``rows * S + g``: the chunk's offset, the exclusive sum of the row's
  earlier piece totals (serial, in order: fewer than ``PIECES * MAX_CHUNKS`` additions
  against at least ``CHUNK`` elements), the offsets of its pieces after it, then its
  pieces scanned side by side from them, in order within each piece, storing every
  prefix. ``PIECES`` independent chains of additions overlap in the core: a serial scan
  waits for each addition's latency, so one worker runs this faster than the serial scan.

Integer scans are exact (wrapping addition is associative). A float prefix is its
piece's offset (a sum of piece totals) plus the in-order sum within the piece: another
association than the serial scan's, so it differs from it in rounding, within the same
kind of error bound (each term of a prefix passes through at most
``S * PIECES + 2 * chunk`` roundings instead of ``L``), and is identical run after run
and for any number of workers (the same code over the same pieces). NaN and infinities
propagate as in the serial scan (a NaN, or an ``inf`` meeting a ``-inf``, makes every later
prefix NaN). Running the whole index space in one call is also correct: every pass-1
index precedes every pass-2 index.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from . import scalar
from .split_reduce import coordinates

I64 = ir.IntType(64)
PIECES = 4   # pieces of a chunk scanned side by side in pass 2 (independent dependency chains)


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
    per_row = s * PIECES
    piece = -(-length // per_row)
    zero = scalar.const(acc_dt, 0)
    with b.goto_entry_block():
        accs = [b.alloca(acc_ty) for _ in range(PIECES)]

    def const(v):
        return ir.Constant(I64, v)

    def lt(x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)

    def gt(x, y):
        return b.select(b.icmp_signed(">", x, y), x, y)

    def total(i):
        return b.gep(em.scratch, [i], source_etype=I64)   # 8-byte slots: acc_ty fits

    def place(g):
        """Row coordinates, first piece index and the pieces' ``[lo, hi)`` of chunk ``g``."""
        o = b.udiv(g, const(s))
        first = b.mul(b.urem(g, const(s)), const(PIECES))
        bounds = []
        for u in range(PIECES):
            lo = lt(b.mul(b.add(first, const(u)), const(piece)), const(length))
            bounds.append((lo, lt(b.add(lo, const(piece)), const(length))))
        return o, coordinates(b, o, t.domain), b.add(b.mul(o, const(per_row)), first), bounds

    def value(domain_vars, k):
        em.vars[:] = domain_vars + [k]
        values = em.body()
        return scalar.convert(b, values[ssa], src_dt, acc_dt), values

    def add(cell, v, reassociate):
        b.store(combine(b, b.load(cell, typ=acc_ty), v, reassociate), cell)

    def chunk_totals(g):
        _, domain_vars, slot, bounds = place(g)
        for u, (lo, hi) in enumerate(bounds):
            b.store(zero, accs[0])
            em.loop(lo, hi, lambda k: add(accs[0], value(domain_vars, k)[0], True))
            b.store(b.load(accs[0], typ=acc_ty), total(b.add(slot, const(u))))
        em.vars[:] = []

    def chunk_scan(f):
        o, domain_vars, slot, bounds = place(b.sub(f, const(parts)))
        # offsets: the exclusive sum of the row's earlier piece totals, in order
        b.store(zero, accs[0])
        em.loop(b.mul(o, const(per_row)), slot,
                lambda j: add(accs[0], b.load(total(j), typ=acc_ty), False))
        for u in range(1, PIECES):
            b.store(b.load(accs[u - 1], typ=acc_ty), accs[u])
            add(accs[u], b.load(total(b.add(slot, const(u - 1))), typ=acc_ty), False)

        def element(u, j):
            v, values = value(domain_vars, b.add(bounds[u][0], j))
            add(accs[u], v, False)
            em.store(arg, ix, scalar.convert(b, b.load(accs[u], typ=acc_ty), acc_dt, out_dt), values)
        # the pieces side by side (independent chains: their additions overlap), then
        # what is left of the longer ones (the row's last piece may be short)
        common = b.sub(bounds[-1][1], bounds[-1][0])
        em.loop(const(0), common, lambda j: [element(u, j) for u in range(PIECES)])
        for u in range(PIECES - 1):
            em.loop(common, b.sub(bounds[u][1], bounds[u][0]), lambda j, u=u: element(u, j))
        em.vars[:] = []

    middle = const(parts)
    em.loop(em.start, lt(em.end, middle), chunk_totals)
    em.loop(gt(em.start, middle), em.end, chunk_scan)
