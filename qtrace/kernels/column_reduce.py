"""Reductions whose outputs are contiguous and whose reduced axes are not: loops interchanged.

``x.sum(axis=0)`` of a C-ordered ``(rows, cols)`` array is a reduce task with one output per
column and the rows as its inner extent. Emitted as written — for each output, a loop over
the rows — every load is ``cols`` elements from the last: a scalar, latency-bound chain per
output that the vectorizer cannot take. Here the loops are interchanged: the outputs are
walked in blocks of :data:`BLOCK` with one accumulator each (on the stack); for every row,
the innermost loop runs over the block — contiguous loads, independent accumulators: it
vectorizes — and the block is stored at the end. Each output still combines its values
in the same order (row after row), so the result is the one the plain loop gives.

Taken for CPU sum/prod/max/min/any/all reductions (not arg-reductions, complex values,
adstacks or loops in the body) when some load walks the last output axis with stride 1
and no load walks the innermost reduced axis with stride 1 (see :func:`interchanged`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from . import scalar
from .lowering import reduce_segments

BLOCK = 64        # outputs per block (their accumulators: 512 bytes of stack in float64)
MIN_OUTPUTS = 16  # a shorter last output axis keeps the plain loops

I64 = ir.IntType(64)


def interchanged(task, lowering) -> bool:
    """Whether reduce ``task`` is emitted with its loops interchanged under ``lowering``."""
    prim, _, acc = task.reduce
    # (a reduction split into segments is launched over outputs x segments: not this form)
    if (lowering.flat or reduce_segments(task, lowering) > 1 or task.has_loops
            or task.stack is not None or not task.domain or not task.inner
            or prim in ("argmax", "argmin") or np.dtype(acc).kind == "c"
            or task.domain[-1] < MIN_OUTPUTS):
        return False
    last_out = ("v", len(task.domain) - 1)
    last_in = ("v", len(task.domain) + len(task.inner) - 1)
    along_outputs = False
    for instr in task.instrs:
        if instr.kind == "load":
            if instr.ix.coef(last_in) == 1:
                return False   # already contiguous along the reduction: the plain loops
            along_outputs = along_outputs or instr.ix.coef(last_out) == 1
    return along_outputs


def emit(k, identity, combine) -> None:
    """Emit reduce task ``k.t`` (``k``: the :class:`~qtrace.kernels.codegen.KernelEmitter`)
    with interchanged loops. ``identity``: the accumulators' start value;
    ``combine(b, acc, v)``: one step of the reduction."""
    t, b = k.t, k.b
    prim, ssa, acc_str = t.reduce
    acc_dt = np.dtype(acc_str)
    in_dt = np.dtype(t.instrs[ssa].dt)
    (arg, out_ix, _), = t.stores
    acc_ty = scalar.ir_type(acc_dt)
    with b.goto_entry_block():
        accs = b.alloca(acc_ty, size=ir.Constant(I64, BLOCK))
    start = scalar.const(acc_dt, identity)
    n_out = len(t.domain)

    def slot(j):
        return b.gep(accs, [j], inbounds=True, source_etype=acc_ty)

    def block(lo, hi):
        """Outputs ``lo <= c < hi`` of the last output axis (``hi - lo <= BLOCK``)."""
        n = b.sub(hi, lo)
        zero = ir.Constant(I64, 0)
        k.loop(zero, n, lambda j: b.store(start, slot(j)))

        def rows(level):
            if level == len(t.inner):
                def one(j):
                    outer_vars = k.vars   # the loop variables: outputs first, then the inner
                    k.vars = [*outer_vars, b.add(lo, j), *inner_vars]
                    v = scalar.convert(b, k.body()[ssa], in_dt, acc_dt)
                    b.store(combine(b, b.load(slot(j), typ=acc_ty), v), slot(j))
                    k.vars = outer_vars
                k.loop(zero, n, one)
                return

            def step(i):
                inner_vars.append(i)
                rows(level + 1)
                inner_vars.pop()
            k.loop(zero, ir.Constant(I64, t.inner[level]), step)

        inner_vars: list = []
        rows(0)

        def store(j):
            k.vars.append(b.add(lo, j))
            k.store(arg, out_ix, scalar.convert(b, b.load(slot(j), typ=acc_ty), acc_dt, k.dt[arg]), [])
            k.vars.pop()
        k.loop(zero, n, store)

    def last_axis(lo, hi):
        """The last output axis from ``lo`` to ``hi`` in blocks (an abort check before each)."""
        k.chunked((lo, hi), BLOCK, block)

    def outer(level, first_range):
        if level == n_out - 1:
            lo, hi = first_range or (ir.Constant(I64, 0), ir.Constant(I64, t.domain[-1]))
            last_axis(lo, hi)
            return
        lo, hi = first_range or (ir.Constant(I64, 0), ir.Constant(I64, t.domain[level]))

        def step(i):
            k.vars.append(i)
            outer(level + 1, None)
            k.vars.pop()
        k.loop(lo, hi, step)

    k.optimistic(lambda: outer(0, (k.start, k.end)))
