"""Lower one range task (``qtrace.graph.tasks.Task``) to an LLVM IR function.

Every kernel has the signature ``void k(i64 start, i64 end, ptr args, ptr status)``:
it runs indices ``[start, end)`` of the task's first domain dimension (the range a
worker is given), loops over the remaining dimensions inside, and reads its buffers'
addresses from the ``args`` array. ``status`` receives the first failed index check
(``status[0] = check + 1``, ``status[1] = the offending index``). Loops are plain
counted loops over affine addresses, which is what LLVM's loop vectorizer widens.
"""

from __future__ import annotations

import contextlib

import numpy as np
from llvmlite import ir

from ..graph import index as ix_
from ..graph.instrs import (
    HEAP_COUNTER,
    HEAP_HELD,
    HEAP_ROWS,
    LOOPS,
    STACK_HEADER,
    STACK_WORD,
    nesting,
    stack_rows,
    uses_fast_trig,
    walk,
)
from . import (
    column_reduce,
    complexmath,
    interrupt,
    intrinsics,
    lanes,
    outline,
    scalar,
    split_reduce,
    split_scan,
)
from .builder import KernelBuilder
from .intrinsics import aborted, declare, intrinsic
from .loop_hints import loop_properties, narrow_accumulation, vector_epilogues, vector_hint
from .lowering import (
    CPU,
    STREAM_SUFFIX,
    Lowering,
    interleaves_stacks,
    reduce_segments,
    scan_segments,
)
from .mathlib import SUPPORTED

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()


def mem_type(dtype: np.dtype) -> ir.Type:
    return I8 if dtype.kind == "b" else scalar.ir_type(dtype)


class KernelEmitter:
    def __init__(self, task, module: ir.Module, name: str, check_bounds: bool, lowering: Lowering):
        self.t = task
        self.lowering = lowering
        self.check_bounds = check_bounds
        self.dt = [n.dtype for n in task.arg_nodes]
        fnty = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, PTR])
        self.fn = ir.Function(module, fnty, name=name)
        self.start, self.end, args, self.status, self.scratch = self.fn.args
        for a in self.fn.args:
            a.name = ""
        self.b = KernelBuilder(self.fn.append_basic_block("entry"), lowering)
        self.b.emission.outline = lowering.outline_math and outline.chained(task)
        self.ptrs = [self.b.load(self.b.gep(args, [ir.Constant(I64, i)], source_etype=PTR), typ=PTR)
                     for i in range(len(task.args))]
        self.vars: list = []
        self.valid: dict = {}
        self.loop_override = None   # blocked loops: the loop's results, given per lane
        self.lane_active = None     # blocked loops: i1, this lane is running (masks reports)
        self.lane_acc: list = []
        self.vector_lanes = bool(task.lanes) and lowering.lanes > 0
        self.identity_clamps = frozenset()  # clamps known to be the identity where emitted
        self.trig_bad = None   # optimistic pass: i1 cell, "an argument left the fast range"
        self.invariant_loads: dict = {}   # (arg, constant index) -> value loaded in the entry
        self.trip_loads: dict = {}   # (arg, index) -> value loaded before the loops being emitted
        self._alias_metadata(module, name)

    # -- structure --------------------------------------------------------------------
    def loop(self, lo, hi, body, step=None, float32_width: bool = False,
             innermost: int = 0, properties: dict | None = None) -> None:
        """``body(i)`` for ``i = lo, lo + step, ... < hi`` (``step``: an IR value, default 1).

        ``float32_width``: hint that the loop be vectorized at the float32 width (a float32
        reduction whose float64 accumulator would make LLVM pick half of it).
        ``innermost``: the extent of the axis this loop walks when it is the one the
        vectorizer works on (0 otherwise); where the task's work is one or two math
        functions (:func:`_latency_bound`) it gets :func:`_math_loop_properties`.
        ``properties``: LLVM loop properties the loop gets in any case (``loop_properties``)."""
        b = self.b
        pre = b.block
        loop_bb = self.fn.append_basic_block("loop")
        exit_bb = self.fn.append_basic_block("after")
        b.cbranch(b.icmp_signed("<", lo, hi), loop_bb, exit_bb)
        b.position_at_end(loop_bb)
        i = b.phi(I64)
        i.add_incoming(lo, pre)
        body(i)
        nxt = b.add(i, ir.Constant(I64, 1) if step is None else step)
        i.add_incoming(nxt, b.block)
        back = b.cbranch(b.icmp_signed("<", nxt, hi), loop_bb, exit_bb)
        # (not where the body calls the C library: a scalar call defeats the hint, and LLVM
        # then prints a remark that the hinted loop was not vectorized)
        if properties:
            back.set_metadata("llvm.loop", loop_properties(self.fn.module, properties))
        elif self.lowering.vector_hints and not b.emission.rare and not self.t.has_loops:
            if float32_width:
                back.set_metadata("llvm.loop", vector_hint(self.fn.module))
            elif innermost and step is None and _latency_bound(self.t):
                back.set_metadata("llvm.loop", loop_properties(
                    self.fn.module, _math_loop_properties(self.t, innermost)))
        b.position_at_end(exit_bb)

    def nest(self, extents: tuple, body, first_range=None) -> None:
        """Loops over ``extents`` (the first over ``first_range`` if given), innermost last.

        The worker's range (``first_range``) is walked in chunks of about
        :data:`interrupt.CHUNK_WORK` elements, checking the abort flag before each: a
        Ctrl-C stops a long launch within a chunk (see :mod:`qtrace.kernels.interrupt`).
        """
        if first_range is not None and self.lowering.flat and len(extents) > 1:
            self._flat(extents, body, first_range)
            return
        if first_range is not None and self.lowering.interrupt:
            work = 1
            for d in tuple(extents[1:]) + tuple(self.t.inner):
                work *= max(d, 1)
            chunk = max(1, interrupt.CHUNK_WORK // work)
            if chunk < extents[0]:
                self.chunked(first_range, chunk, lambda lo, hi: self._nest(extents, body, (lo, hi)))
                return
        self._nest(extents, body, first_range)

    def chunked(self, first_range, chunk: int, emit) -> None:
        """``emit(lo, hi)`` for consecutive chunks of ``first_range``, stopping when aborted."""
        b = self.b
        start, end = first_range
        pre = b.block
        head = self.fn.append_basic_block("chunk")
        run = self.fn.append_basic_block("chunk_run")
        done = self.fn.append_basic_block("chunk_done")
        b.branch(head)
        b.position_at_end(head)
        lo = b.phi(I64)
        lo.add_incoming(start, pre)
        go = b.and_(b.icmp_signed("<", lo, end), b.not_(aborted(b)))
        b.cbranch(go, run, done)
        b.position_at_end(run)
        hi = b.add(lo, ir.Constant(I64, chunk))
        hi = b.select(b.icmp_signed("<", hi, end), hi, end)
        emit(lo, hi)
        lo.add_incoming(hi, b.block)
        b.branch(head)
        b.position_at_end(done)

    def _flat(self, extents: tuple, body, first_range) -> None:
        """One loop over the flat (row-major) indices ``first_range`` of ``extents``; the
        loop variables are recovered by division (a GPU thread gets one element)."""
        def level(flat):
            self.vars.extend(split_reduce.coordinates(self.b, flat, extents))
            body()
            del self.vars[-len(extents):]
        self.loop(*first_range, level)

    def _nest(self, extents: tuple, body, first_range=None, float32_width: bool = False) -> None:
        last = len(extents) - 1
        split = clamp_free_range(self.t, last, extents[last]) if extents else None

        def level(k):
            if k == len(extents):
                body()
                return
            lo, hi = (first_range if k == 0 and first_range is not None
                      else (ir.Constant(I64, 0), ir.Constant(I64, extents[k])))

            def inner(i):
                self.vars.append(i)
                level(k + 1)
                self.vars.pop()
            if k == last and k > 0 and self.lowering.vector_hints and _math_calls(self.t):
                vector_epilogues(self.fn.module, extents[k])   # (a row's scalar math: per row)
            if k == last and split is not None:
                self._split_loop(lo, hi, split, inner, extents[k])
            else:
                self.loop(lo, hi, inner, float32_width=float32_width and k == last,
                          innermost=extents[k] if k == last else 0)
        level(0)

    def _split_loop(self, lo, hi, split, inner, extent: int) -> None:
        """The innermost loop in three parts: where every clamp of ``split`` (see
        :func:`clamp_free_range`) is the identity, its addresses are affine (contiguous
        vector loads); before and after, the clamps are kept."""
        b = self.b
        a, z, atoms = split

        def lt(x, y):
            return b.icmp_signed("<", x, y)
        first = ir.Constant(I64, a)
        end = ir.Constant(I64, z)
        mid_lo = b.select(lt(first, lo), lo, first)           # min(max(a, lo), hi)
        mid_lo = b.select(lt(hi, mid_lo), hi, mid_lo)
        mid_hi = b.select(lt(end, hi), end, hi)               # max(min(z, hi), mid_lo)
        mid_hi = b.select(lt(mid_hi, mid_lo), mid_lo, mid_hi)
        self.loop(lo, mid_lo, inner)
        self.identity_clamps = atoms
        self.loop(mid_lo, mid_hi, inner, innermost=extent)
        self.identity_clamps = frozenset()
        self.loop(mid_hi, hi, inner)

    def _alias_metadata(self, module: ir.Module, name: str) -> None:
        """Scoped no-alias metadata: what a task writes is never what it reads.

        Outputs are fresh buffers, distinct from every input and from each other, and a
        task never loads a buffer it writes (read-modify-write scatters use atomics and
        in-place region assignments write the buffer they read: both are left untagged).
        Telling LLVM so spares the loop vectorizer its run-time overlap checks, which it
        gives up on beyond a handful of pointers.
        """
        self.scope_of, self.noalias_loads, self.noalias_store = {}, None, {}
        if self.t.kind == "rmw" or not self.t.writes or self.t.in_place:
            return
        domain = module.add_metadata([ir.MetaDataString(module, f"{name}.domain")])
        scopes = {a: module.add_metadata([ir.MetaDataString(module, f"{name}.out{a}"), domain])
                  for a in sorted(self.t.writes)}
        self.scope_of = {a: module.add_metadata([s]) for a, s in scopes.items()}
        self.noalias_loads = module.add_metadata(list(scopes.values()))
        for a in scopes:
            others = [s for b, s in scopes.items() if b != a]
            self.noalias_store[a] = module.add_metadata(others) if others else None

    # -- values -----------------------------------------------------------------------
    def index(self, ix, values) -> ir.Value:
        b = self.b
        acc = None
        for atom, coef in ix.terms:
            if atom[0] == "v":
                v = self.vars[atom[1]]
            elif atom[0] == "s":
                v = values[atom[1]]
            elif atom[0] == "div":
                v = _floor_div(b, self.index(atom[1], values), atom[2])
            elif atom[0] == "clip" and atom in self.identity_clamps:
                v = self.index(atom[1], values)
            elif atom[0] == "clip":
                x = self.index(atom[1], values)
                lo, hi = ir.Constant(I64, atom[2]), ir.Constant(I64, atom[3])
                x = b.select(b.icmp_signed("<", x, lo), lo, x)
                v = b.select(b.icmp_signed(">", x, hi), hi, x)
            else:
                x = self.index(atom[1], values)
                v = b.sub(x, b.mul(_floor_div(b, x, atom[2]), ir.Constant(I64, atom[2])))
            term = v if coef == 1 else b.mul(v, ir.Constant(I64, coef))
            acc = term if acc is None else b.add(acc, term)
        if acc is None:
            return ir.Constant(I64, ix.const)
        return b.add(acc, ir.Constant(I64, ix.const)) if ix.const else acc

    def _load(self, ptr: ir.Value, dt: np.dtype) -> ir.Value:
        b = self.b
        v = b.load(ptr, typ=mem_type(dt))
        if self.noalias_loads is not None:
            v.set_metadata("noalias", self.noalias_loads)
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dt.kind == "b" else v

    def _invariant_load(self, arg: int, ix, dt: np.dtype) -> ir.Value:
        """The element at constant index ``ix`` of input ``arg`` (an eager scalar's 0-d
        buffer, a broadcast element), loaded once in the kernel's entry block: the same for
        every element, and unwritten by the task. (Inside the element loop, a GPU kernel
        reloaded it for every element: LLVM may not move a load ahead of the loop's guard.)"""
        key = (arg, ix.const)
        v = self.invariant_loads.get(key)
        if v is None:
            with self.b.goto_entry_block():
                v = self.invariant_loads[key] = self._load(self.pointer(arg, ix, []), dt)
        return v

    @contextlib.contextmanager
    def loads_before_loop(self, programs):
        """While a per-element loop's ``programs`` are emitted: their loads that read the
        same element on every trip — an index of the element's coordinates alone (no value
        of the body), from an input the task does not write — loaded once, here, before the
        loop. (LLVM would not hoist them past the loop body's math: libdevice's reduction of
        large trigonometric arguments is inline assembly, which may write memory. B3 read
        its ``c[i]`` on every trip.) The element's own index is in bounds, so the load is
        safe where the loop runs no trip."""
        added = []
        for prog in programs:
            for instr in prog.instrs:
                key = (getattr(instr, "arg", None), getattr(instr, "ix", None))
                if (instr.kind == "load" and key not in self.trip_loads and not instr.ix.is_const
                        and instr.arg not in self.t.writes and np.dtype(instr.dt).kind != "c"
                        and _elementwise(instr.ix)):
                    self.trip_loads[key] = self._load(self.pointer(instr.arg, instr.ix, []),
                                                      np.dtype(instr.dt))
                    added.append(key)
        try:
            yield
        finally:
            for key in added:
                del self.trip_loads[key]

    def pointer(self, arg: int, ix, values) -> ir.Value:
        return self.b.gep(self.ptrs[arg], [self.index(ix, values)], inbounds=True,
                          source_etype=mem_type(self.dt[arg]))

    def body(self) -> list:
        """Emit the task's instructions at the current loop indices; their IR values.

        In the fast pass of :meth:`optimistic`, sin/cos/tan take their fast form and
        whether each argument was in its range is or-ed into ``trig_bad``."""
        bad = self.trig_bad
        if bad is None:
            return self.run(self.t.instrs, {})
        b = self.b
        flags = b.emission.trig_flags = []
        try:
            values = self.run(self.t.instrs, {})
        finally:
            b.emission.trig_flags = None
        if flags:
            ok = flags[0]
            for f in flags[1:]:
                ok = b.and_(ok, f)
            b.store(b.or_(b.load(bad, typ=ir.IntType(1)), b.not_(ok)), bad)
        return values

    def optimistic(self, region) -> None:
        """Emit ``region()`` (code that computes its results from scratch and stores them)
        with float32/float64 sin/cos/tan in their fast form (:mod:`qtrace.kernels.fastmath`), then
        once more with the exact functions (the C library's: a rare path, kept quick to
        compile), run only if an argument was outside the fast range; without such
        trigonometry (or under a lowering without the fast form), ``region()`` once."""
        if not (self.lowering.fast_trig and _uses_fast_trig(self.t)) or self.trig_bad is not None:
            region()
            return
        b = self.b
        with b.goto_entry_block():
            bad = b.alloca(ir.IntType(1))
        b.store(ir.Constant(ir.IntType(1), 0), bad)
        self.trig_bad = bad
        try:
            region()
        finally:
            self.trig_bad = None
        with b.if_then(b.load(bad, typ=ir.IntType(1)), likely=False):
            b.emission.rare = True
            try:
                region()
            finally:
                b.emission.rare = False

    def run(self, instrs, env: dict) -> list:
        """Emit ``instrs`` (a task body or a loop body program); their IR values.

        ``env`` gives loop bodies their placeholders: ``state``/``ct`` (lists of values),
        ``counter``, and ``inv``: values of the enclosing body a nested loop reads.
        """
        b = self.b
        values, dts = [], []
        top = instrs is self.t.instrs
        outer = b.lowering
        # loop bodies run one element at a time (unless blocked into lanes, which vectorize)
        b.lowering = outer.scalar_code(outer.scalar or (bool(env) and not self.vector_lanes))
        try:
            return self._run(instrs, env, values, dts, top)
        finally:
            b.lowering = outer

    def _run(self, instrs, env, values, dts, top) -> list:
        b = self.b
        for instr in instrs:
            op = instr.kind
            dt = np.dtype(instr.dt) if op not in LOOPS else None
            if op == "const":
                v = scalar.const(dt, instr.value)
            elif op == "load" and dt.kind == "c":
                v = complexmath.load(b, self.ptrs[instr.arg], self.index(instr.ix, values), dt)
            elif op == "load" and instr.ix.is_const and instr.arg not in self.t.writes:
                v = self._invariant_load(instr.arg, instr.ix, dt)
            elif op == "load" and (instr.arg, instr.ix) in self.trip_loads:
                v = self.trip_loads[instr.arg, instr.ix]
            elif op == "load":
                v = self._load(self.pointer(instr.arg, instr.ix, values), dt)
            elif op == "op":
                args = [values[a] for a in instr.args]
                v = scalar.lower(b, instr.prim, args, [dts[a] for a in instr.args], dt)
            elif op == "ix":
                v = self.index(instr.ix, values)
            elif op == "bound":
                v = self.bound(values[instr.value], dts[instr.value], instr.size, instr.check,
                               len(values) if top else None)
            elif op in ("state", "ct"):
                v = env[op][instr.index]
            elif op == "counter":
                v = env["counter"]
            elif op == "inv":
                v = env["inv"][instr.index]
            elif op == "atomic":  # *arg[ix] += value
                v = self.b.atomic_rmw("fadd", self.pointer(instr.arg, instr.ix, values),
                                      values[instr.value], "monotonic")
            elif op == "get":
                v = values[instr.loop][instr.index]
            elif op in ("loop", "loop_vjp") and top and self.loop_override is not None:
                v = self.loop_override[len(values)]
            elif op == "loop":
                v = self.emit_loop(instr, values)
            elif op == "loop_vjp":
                v = self.emit_loop_vjp(instr, values, env)
            else:
                raise AssertionError(op)
            values.append(v)
            dts.append(dt)
        return values

    def _state_types(self, dts: tuple) -> list:
        return [scalar.ir_type(np.dtype(d)) for d in dts]

    def _phis(self, types, incoming, block) -> list:
        phis = []
        for ty, v in zip(types, incoming):
            p = self.b.phi(ty)
            p.add_incoming(v, block)
            phis.append(p)
        return phis

    def emit_loop(self, instr, values) -> tuple:
        """A per-element loop: state in phi nodes, the body program emitted once inside.

        Its value: the final state, the trip count, then for each depth of the loops nested
        below it (1: in its body, 2: in their bodies, ...) the largest trip count of a loop at
        that depth (what their reverse needs on the adstack: one level each).
        """
        dts, bprog = instr.dts, instr.body
        b = self.b
        init, lo, hi, inv = _loop_inputs(instr, values)
        with self.loads_before_loop(_trip_programs(instr)):
            pre = b.block
            head = self.fn.append_basic_block("loop_head")
            body = self.fn.append_basic_block("loop_body")
            done = self.fn.append_basic_block("loop_done")
            b.branch(head)
            b.position_at_end(head)
            state = self._phis(self._state_types(dts), init, pre)
            depth = nesting(bprog)
            count, *nested = self._phis([I64] * (1 + depth), [ir.Constant(I64, 0)] * (1 + depth), pre)
            env = {"state": state, "inv": inv}
            b.cbranch(self._go(instr, env, count, lo, hi), body, done)
            b.position_at_end(body)
            new, nxt, most = self._trip(instr, env, count, nested)
            latch = b.block
            for p, v in zip(state, new):
                p.add_incoming(v, latch)
            count.add_incoming(nxt, latch)
            for p, v in zip(nested, most):
                p.add_incoming(v, latch)
            b.branch(head)
            b.position_at_end(done)
            return tuple(state) + (count, *nested)

    def _go(self, instr, env: dict, count, lo, hi) -> ir.Value:
        """Whether loop ``instr`` takes another trip after ``count`` (i64) trips, from the
        state in ``env`` (a ``fori`` from ``lo`` to ``hi``: its counter goes in ``env``)."""
        if instr.layout == "fori":
            counter = env["counter"] = self.b.add(lo, count)
            return self.b.icmp_signed("<", counter, hi)
        return self.run(instr.cond.instrs, env)[instr.cond.outputs[0]]

    def _trip(self, instr, env: dict, count, nested) -> tuple:
        """One trip of loop ``instr``'s body: the new state, ``count + 1``, and the largest
        trip counts of the loops nested below it (``nested``: those of the trips before)."""
        b = self.b
        bv = self.run(instr.body.instrs, env)
        most = list(nested)
        for p, inner in enumerate(instr.body.instrs):
            if inner.kind == "loop":  # its count is at our depth 1, its own depths at ours + 1
                for level, c in enumerate(bv[p][inner.n_state:]):
                    most[level] = b.select(b.icmp_signed(">", c, most[level]), c, most[level])
        return [bv[o] for o in instr.body.outputs], b.add(count, ir.Constant(I64, 1)), most

    def emit_loop_vjp(self, instr, values, outer_env) -> tuple:
        """The adjoint of a per-element loop: replay pushing to the adstack, then pop.

        The stack is this worker's scratch block (``qtrace.devices.adstack.scratch``): a
        header with the float and int stacks' sizes in bytes, then the two stacks. A loop
        nested in another's body pushes above the rows the enclosing loop holds. An element
        that would need more than the stack holds stops its replay, reports the overflow
        in ``status`` (the launch then raises) and never writes past it.
        """
        dts, kind, m, bprog, rprog = (instr.dts, instr.layout, instr.n_state, instr.body,
                                      instr.reverse)
        pushed, check = instr.pushed, instr.check
        b = self.b
        sdt = [np.dtype(d) for d in instr.row_dts]
        types = self._state_types(dts)
        init, lo, hi, rest = _loop_inputs(instr, values)   # (the rest: cotangents, then reads)
        cts_in, inv = rest[:m], rest[m:]
        with self.loads_before_loop(_trip_programs(instr) + (rprog,)):   # (the replay's and the reverse's)
            fbase, ibase = outer_env.get("stack", (ir.Constant(I64, 0), ir.Constant(I64, 0)))
            offsets, fb, ib = stack_rows(instr.row_dts, pushed, rprog)
            fcap = b.load(b.gep(self.scratch, [ir.Constant(I64, 8)], source_etype=I8), typ=I64)
            icap = b.load(b.gep(self.scratch, [ir.Constant(I64, 16)], source_etype=I8), typ=I64)
            word_at, heap = self._stack_words(b.and_(b.add(fcap, ir.Constant(I64, 63)),
                                                     ir.Constant(I64, -64)))
            row = heap.row if heap is not None else None   # (this thread's heap row, -1: none yet)

            stacks = {"f": (fbase, fb, fcap), "i": (ibase, ib, icap)}

            def slot(depth, k):
                """Logical byte offset of value ``k`` in row ``depth`` of its stack, and the stack."""
                where, off = offsets[k]
                start, size, _ = stacks[where]
                return where, b.add(b.add(start, b.mul(depth, ir.Constant(I64, size))), ir.Constant(I64, off))

            def pop(depth, k, ty, row):
                where, pos = slot(depth, k)
                return self._stack_load(ty, sdt[k], word_at(where, pos, row))

            def rows_that_fit():
                """How many rows fit in both stacks (a row ``depth`` fits where ``depth`` is less)."""
                limit = None
                for start, size, cap in stacks.values():
                    if size:   # (a negative room: none fits)
                        n = b.sdiv(b.sub(cap, start), ir.Constant(I64, size))
                        limit = n if limit is None else b.select(b.icmp_signed("<", n, limit), n, limit)
                return limit

            def push_pointers(row):
                """Where row 0's values go, and how far a row moves them: ``({stack: (address,
                bytes per row)}, {value k: bytes from its stack's address})``. The replay walks
                each stack with a pointer advanced a row per trip (an address computed from the
                depth took a 64-bit multiply per push)."""
                def addr(where, pos):
                    return b.ptrtoint(word_at(where, pos, row), I64)
                start_of, within = {}, {}
                for where in {offsets[k][0] for k in pushed}:
                    start, size, _ = stacks[where]
                    a0 = addr(where, start)
                    start_of[where] = (b.inttoptr(a0, PTR),
                                       b.sub(addr(where, b.add(start, ir.Constant(I64, size))), a0))
                for k in pushed:
                    where, off = offsets[k]
                    start = stacks[where][0]
                    within[k] = b.sub(addr(where, b.add(start, ir.Constant(I64, off))),
                                      b.ptrtoint(start_of[where][0], I64))
                return start_of, within

            # forward replay, pushing the state each iteration of the reverse will need
            if heap is not None:   # a heap row claimed before the loop, where it runs at all
                runs = self._go(instr, {"state": init, "inv": inv}, ir.Constant(I64, 0), lo, hi)
                row = heap.claim(row, runs)
            limit = rows_that_fit()
            start_of, within = push_pointers(row)
            pre = b.block
            head = self.fn.append_basic_block("replay_head")
            room = self.fn.append_basic_block("replay_room")
            push = self.fn.append_basic_block("replay_push")
            overflow = self.fn.append_basic_block("replay_overflow")
            fdone = self.fn.append_basic_block("replay_done")
            b.branch(head)
            b.position_at_end(head)
            state = self._phis(types, init, pre)
            depth = self._phis([I64], [ir.Constant(I64, 0)], pre)[0]
            walked = sorted(start_of)   # (the stacks the replay pushes to: a pointer each)
            at = dict(zip(walked, self._phis([PTR] * len(walked), [start_of[w][0] for w in walked], pre)))
            env = {"state": state, "inv": inv}
            b.cbranch(self._go(instr, env, depth, lo, hi), room, fdone)
            head_exit = b.block
            b.position_at_end(room)
            fits = ir.Constant(I1, 1) if limit is None else b.icmp_signed("<", depth, limit)
            held = row
            if heap is not None:   # (no row left: an overflow)
                fits = b.and_(fits, b.icmp_signed("<", held, heap.rows))
            b.cbranch(fits, push, overflow)
            b.position_at_end(overflow)
            if self.status is not None:
                b.store(ir.Constant(I64, check + 1), self.status)
                reported = depth if heap is None else b.select(   # (-1: no heap row left)
                    b.icmp_signed(">=", held, heap.rows), ir.Constant(I64, -1), depth)
                b.store(reported, b.gep(self.status, [ir.Constant(I64, 1)], source_etype=I64))
            b.branch(fdone)
            b.position_at_end(push)
            bv = self.run(bprog.instrs, env)
            for k in pushed:   # (the state, or a residual the body program computed from it)
                where = offsets[k][0]
                self._stack_store(state[k] if k < m else bv[bprog.outputs[k]], sdt[k],
                                  b.gep(at[where], [within[k]], source_etype=I8))
            latch = b.block
            for p, o in zip(state, bprog.outputs):
                p.add_incoming(bv[o], latch)
            depth.add_incoming(b.add(depth, ir.Constant(I64, 1)), latch)
            for w in walked:
                at[w].add_incoming(b.gep(at[w], [start_of[w][1]], source_etype=I8), latch)
            b.branch(head)
            b.position_at_end(fdone)
            total = b.phi(I64)
            total.add_incoming(depth, head_exit)
            total.add_incoming(depth, overflow)
            # reverse: pop and run the reverse body, accumulating captured cotangents
            rpre = b.block
            rhead = self.fn.append_basic_block("reverse_head")
            rbody = self.fn.append_basic_block("reverse_body")
            rdone = self.fn.append_basic_block("reverse_done")
            b.branch(rhead)
            b.position_at_end(rhead)
            cts = self._phis(types, cts_in, rpre)
            j = self._phis([I64], [total], rpre)[0]
            b.cbranch(b.icmp_signed(">", j, ir.Constant(I64, 0)), rbody, rdone)
            b.position_at_end(rbody)
            j1 = b.sub(j, ir.Constant(I64, 1))
            popped = []
            for k, ty in enumerate(self._state_types(instr.row_dts)):
                if k in offsets:
                    popped.append(pop(j1, k, ty, held))
                else:
                    popped.append(ir.Constant(ty, ir.Undefined))
            renv = {"state": popped, "ct": cts, "inv": inv,
                    "counter": b.add(lo, j1) if kind == "fori" else j1,
                    # loops nested in the reverse body push above this element's rows
                    "stack": (b.add(fbase, b.mul(total, ir.Constant(I64, fb))),
                              b.add(ibase, b.mul(total, ir.Constant(I64, ib))))}
            rv = self.run(rprog.instrs, renv)
            outs = [rv[o] for o in rprog.outputs]
            cap_vals = outs[m:]
            rlatch = b.block
            # value: the cotangents, then the final state of the replay (the forward's result)
            return (self._finish_reverse(rhead, rpre, rlatch, rdone, cts, outs[:m], j, j1, cap_vals)
                    + tuple(state))

    def _interleaved(self) -> bool:
        """Whether this task's adstacks are interleaved across threads (see :meth:`_stack_words`)."""
        known = self.__dict__.get("_interleaves")
        if known is None:
            known = self._interleaves = interleaves_stacks(self.t, self.lowering)
        return known

    def _stack_words(self, fbytes: ir.Value):
        """``(word_at, heap)``. ``word_at(where, pos, row)``: the address of logical byte
        ``pos`` (whole words) of this thread's float (``"f"``) or int stack, whose float
        stack holds ``fbytes``; ``row``: this thread's float heap row (interleaved stacks).

        Per-worker blocks (the CPU; a GPU task pushing values wider than a word):
        ``scratch`` is the worker's block — header, float stack, int stack, each
        contiguous; ``heap`` is None. Interleaved (``lowering.interleaved_stacks``, a GPU,
        every pushed value one word: :func:`qtrace.graph.instrs.word_stacks`): the launch's
        ``T`` threads' headers come first (``scratch`` is this thread's,
        :data:`STACK_HEADER` bytes apart), then the float heap of ``R`` rows, word ``w`` of
        row ``r`` at word ``w*R + r``, then the ``T`` int stacks alike (word ``w*T + t``):
        the threads of a warp pushing or popping the same depth touch neighbouring words.
        A thread owns no float row until it first pushes: it then claims the next one (an
        atomic counter in thread 0's header), and keeps it for every element it runs after,
        so the heap needs a row per thread that loops at all — ``R`` = the elements whose
        loop runs, at most ``T`` (``qtrace.devices.adstack``) — and memory follows the
        active elements. A header's ``R`` of 0 means one row per thread (a CUDA graph's
        replays, sizes found without a count): row ``t``, claimed from the start. ``heap``
        holds ``rows`` (``R``), ``row`` (the row this thread holds, -1: none) and
        ``claim(row, runs)`` (``row``, or a new one where it is -1 and ``runs``: the loop
        runs at least once; claimed before the loop, which then pushes as without a heap)."""
        b = self.b
        if not self._interleaved():
            fstack = b.gep(self.scratch, [ir.Constant(I64, STACK_HEADER)], source_etype=I8)
            istack = b.gep(fstack, [fbytes], source_etype=I8)
            return (lambda where, pos, row=None:
                    b.gep(fstack if where == "f" else istack, [pos], source_etype=I8)), None
        t, threads = intrinsics.gpu_thread(b)
        base = b.gep(self.scratch, [b.mul(b.sub(ir.Constant(I64, 0), t), ir.Constant(I64, STACK_HEADER))],
                     source_etype=I8)   # (thread 0's header)
        fstack = b.gep(base, [b.mul(threads, ir.Constant(I64, STACK_HEADER))], source_etype=I8)
        given = b.load(b.gep(self.scratch, [ir.Constant(I64, HEAP_ROWS)], source_etype=I8), typ=I64)
        per_thread = b.icmp_signed("==", given, ir.Constant(I64, 0))
        rows = b.select(per_thread, threads, given)
        held_at = b.gep(self.scratch, [ir.Constant(I64, HEAP_HELD)], source_etype=I8)
        mine = b.sub(b.load(held_at, typ=I64), ir.Constant(I64, 1))   # (0 in the header: none)
        heap = _Heap(rows, b.select(per_thread, t, mine))
        istack = b.gep(fstack, [b.mul(rows, fbytes)], source_etype=I8)
        word = ir.Constant(I64, STACK_WORD)

        def claim(row, runs):
            # The lanes of a warp that need a row at once (``activemask`` where they branched
            # in) take consecutive rows, in lane order (one atomic add by the lowest of them,
            # its result shuffled to the others): a warp whose lanes all loop pushes to 32
            # neighbouring words, as with a row per thread (rows claimed lane by lane
            # scattered them: 2.2x slower). Lanes holding a row, or not looping, pass by.
            before = b.block
            take = self.fn.append_basic_block("heap_claim")
            lead = self.fn.append_basic_block("heap_claim_lead")
            led = self.fn.append_basic_block("heap_claim_led")
            taken = self.fn.append_basic_block("heap_claimed")
            b.cbranch(b.and_(runs, b.icmp_signed("<", row, ir.Constant(I64, 0))), take, taken)
            b.position_at_end(take)
            mask = b.call(declare(b.module, "llvm.nvvm.activemask", I32, []), [])
            lane = b.call(declare(b.module, "llvm.nvvm.read.ptx.sreg.laneid", I32, []), [])
            first = intrinsic(b, "cttz", [mask, ir.Constant(I1, 1)])
            below = b.and_(mask, b.sub(b.shl(ir.Constant(I32, 1), lane), ir.Constant(I32, 1)))
            rank = b.zext(intrinsic(b, "ctpop", [below]), I64)
            b.cbranch(b.icmp_unsigned("==", lane, first), lead, led)
            b.position_at_end(lead)
            counter = b.gep(base, [ir.Constant(I64, HEAP_COUNTER)], source_etype=I8)
            got = b.atomic_rmw("add", counter, b.zext(intrinsic(b, "ctpop", [mask]), I64), "monotonic")
            b.branch(led)
            b.position_at_end(led)
            leads = b.phi(I64)
            leads.add_incoming(got, lead)
            leads.add_incoming(ir.Constant(I64, 0), take)
            shfl = declare(b.module, "llvm.nvvm.shfl.sync.idx.i32", I32, [I32] * 4)
            start = b.call(shfl, [mask, b.trunc(leads, I32), first, ir.Constant(I32, 31)])
            new = b.add(b.zext(start, I64), rank)   # (rows never reach 2**31: at most one per thread)
            b.store(b.add(new, ir.Constant(I64, 1)), held_at)
            b.branch(taken)
            b.position_at_end(taken)
            merged = b.phi(I64)
            merged.add_incoming(row, before)
            merged.add_incoming(new, led)
            return merged
        heap.claim = claim

        def word_at(where, pos, row=None):
            stride, who = (rows, row) if where == "f" else (threads, t)
            at = b.mul(b.add(b.mul(b.udiv(pos, word), stride), who), word)
            return b.gep(fstack if where == "f" else istack, [at], source_etype=I8)
        return word_at, heap

    def _stack_store(self, v: ir.Value, dt: np.dtype, at: ir.Value) -> None:
        """Push ``v`` (of ``dt``) at address ``at`` of a stack (see :meth:`_stack_words`;
        interleaved, a value narrower than a word is widened to one)."""
        b = self.b
        if dt.kind == "b":
            v = b.zext(v, I8)
        if self._interleaved() and dt.itemsize < STACK_WORD:
            v = b.zext(v, I32)
        b.store(v, at)

    def _stack_load(self, ty: ir.Type, dt: np.dtype, at: ir.Value) -> ir.Value:
        """Pop a value of ``dt`` (register type ``ty``) from address ``at`` of a stack."""
        b = self.b
        mem = I8 if dt.kind == "b" else ty
        if self._interleaved() and dt.itemsize < STACK_WORD:
            v = b.trunc(b.load(at, typ=I32), mem)
        else:
            v = b.load(at, typ=mem)
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dt.kind == "b" else v

    def _finish_reverse(self, rhead, rpre, rlatch, rdone, cts, new_cts, j, j1, cap_vals) -> tuple:
        b = self.b
        # accumulators for captured cotangents: phis at the head of the reverse loop
        acc = []
        first = rhead.instructions[0]
        for v in cap_vals:
            b.position_before(first)
            p = b.phi(v.type)
            p.add_incoming(_zero(v.type), rpre)
            acc.append(p)
        b.position_at_end(rlatch)
        sums = [_add(b, a, v) for a, v in zip(acc, cap_vals)]
        for p, v in zip(cts, new_cts):
            p.add_incoming(v, b.block)
        for p, v in zip(acc, sums):
            p.add_incoming(v, b.block)
        j.add_incoming(j1, b.block)
        b.branch(rhead)
        b.position_at_end(rdone)
        return tuple(cts) + tuple(acc)

    def bound(self, raw, raw_dt: np.dtype, size: int, check: int, ssa) -> ir.Value:
        """Index ``raw`` into an axis of ``size``: negative indices wrapped as NumPy does,
        then clamped into ``[0, size)`` (JAX's default gather mode), so nothing outside the
        buffer is touched. With ``check_bounds`` an out-of-range index also reports error
        ``check``; ``valid[ssa]`` keeps whether it was in range, for scatters to drop
        out-of-range updates."""
        b = self.b
        i = scalar.convert(b, raw, raw_dt, np.dtype(np.int64)) if raw_dt != np.int64 else raw
        if raw_dt.kind == "u" and raw_dt.itemsize == 8:
            i = raw  # uint64 beyond int64 range shows up negative: still out of range below
        n = ir.Constant(I64, size)
        wrapped = b.select(b.icmp_signed("<", i, ir.Constant(I64, 0)), b.add(i, n), i)
        ok = b.and_(b.icmp_signed(">=", wrapped, ir.Constant(I64, 0)), b.icmp_signed("<", wrapped, n))
        if raw_dt.kind == "u" and raw_dt.itemsize == 8:
            ok = b.and_(ok, b.icmp_signed(">=", i, ir.Constant(I64, 0)))
        if ssa is not None:
            self.valid[ssa] = ok
        if self.check_bounds:
            report = b.not_(ok) if self.lane_active is None else b.and_(b.not_(ok), self.lane_active)
            with b.if_then(report, likely=False):
                b.store(ir.Constant(I64, check + 1), self.status)
                b.store(i, b.gep(self.status, [ir.Constant(I64, 1)], source_etype=I64))
        last = ir.Constant(I64, max(size - 1, 0))
        high = b.icmp_signed(">", wrapped, last)
        if raw_dt.kind == "u" and raw_dt.itemsize == 8:
            high = b.or_(high, b.icmp_signed("<", i, ir.Constant(I64, 0)))  # beyond int64: high
        clamped = b.select(high, last, b.select(b.icmp_signed("<", wrapped, ir.Constant(I64, 0)),
                                                ir.Constant(I64, 0), wrapped))
        return b.select(ok, wrapped, clamped)

    def store(self, arg: int, ix, value, values) -> None:
        dt = self.dt[arg]
        if dt.kind == "c":
            stores = [self.b.store(part, ptr) for part, ptr in zip(
                value, complexmath.part_pointers(self.b, self.ptrs[arg], self.index(ix, values), dt))]
        else:
            v = self.b.zext(value, I8) if dt.kind == "b" else value
            stores = [self.b.store(v, self.pointer(arg, ix, values))]
        if arg in self.scope_of:
            for st in stores:
                st.set_metadata("alias.scope", self.scope_of[arg])
                if self.noalias_store.get(arg) is not None:
                    st.set_metadata("noalias", self.noalias_store[arg])

    # -- task kinds -------------------------------------------------------------------
    def emit(self, streaming=None) -> ir.Function:
        """The kernel; ``streaming``: its streaming entry (:func:`streams`), which it enters
        when every output is 64-byte aligned at the start of its range (True: this is that
        entry, which ends with a store fence)."""
        t = self.t
        if isinstance(streaming, ir.Function):
            self._enter_streaming(streaming)
        getattr(self, "emit_" + t.kind)()
        if streaming is True:   # non-temporal stores are weakly ordered: drain them
            sfence = self.fn.module.globals.get("llvm.x86.sse.sfence") or ir.Function(
                self.fn.module, ir.FunctionType(ir.VoidType(), []), name="llvm.x86.sse.sfence")
            self.b.call(sfence, [])
        self.b.ret_void()
        return self.fn

    def _enter_streaming(self, entry: ir.Function) -> None:
        b = self.b
        aligned = ir.Constant(ir.IntType(1), 1)
        for arg in sorted(self.t.writes):
            size = ir.Constant(I64, self.dt[arg].itemsize)
            at = b.add(b.ptrtoint(self.ptrs[arg], I64), b.mul(self.start, size))
            ok = b.icmp_unsigned("==", b.and_(at, ir.Constant(I64, 63)), ir.Constant(I64, 0))
            aligned = b.and_(aligned, ok)
        go = self.fn.append_basic_block("streamed")
        rest = self.fn.append_basic_block("cached")
        b.cbranch(aligned, go, rest)
        b.position_at_end(go)
        b.call(entry, list(self.fn.args))
        b.ret_void()
        b.position_at_end(rest)

    def emit_map(self) -> None:
        def body():
            values = self.body()
            for arg, ix, v in self.t.stores:
                self.store(arg, ix, values[v], values)
        if self.vector_lanes:
            lanes.emit_blocked(self)
            return
        self.optimistic(lambda: self.nest(self.t.domain, body, (self.start, self.end)))

    def emit_trips(self) -> ir.Function:
        """The trip count function of a :func:`sorted_trips` task: the body's signature, and
        it stores at ``scratch`` (an i64) the total trip count of the top-level loops of the
        element at ``start`` — their bounds computed as the body computes them (the
        instructions before the first loop), nothing stored, no loop run."""
        t, b = self.t, self.b
        first = next(k for k, i in enumerate(t.instrs) if i.kind in LOOPS)
        loops = [i for i in t.instrs if i.kind in LOOPS]

        def body():
            values = self._run(t.instrs[:first], {}, [], [], True)
            total = ir.Constant(I64, 0)
            for instr in loops:
                _, lo, hi, _ = _loop_inputs(instr, values)
                n = b.sub(hi, lo)
                total = b.add(total, b.select(b.icmp_signed("<", n, ir.Constant(I64, 0)),
                                              ir.Constant(I64, 0), n))
            b.store(total, self.scratch)
        self.nest(t.domain, body, (self.start, self.end))
        b.ret_void()
        return self.fn

    def emit_lockstep(self, width: int) -> ir.Function:
        """A map task's elements ``start .. start + width - 1`` together (the function's
        ``end`` is not read): first every element's loads at indices that no computed value
        enters, one input's side by side (a GPU merges them into one vector access where the
        pointer is aligned: ``llvm_nvptx.grid_entry``), then each element's arithmetic in
        turn, then the stores, one output's side by side. ``width`` calls of the
        one-element body would interleave loads with the arithmetic's branches (libdevice's
        slow paths), which no vectorizer merges across; interleaving the elements'
        arithmetic too costs registers (B1's kernel: 71 instead of 38) and occupancy."""
        b, t = self.b, self.t
        lanes = [split_reduce.coordinates(b, b.add(self.start, ir.Constant(I64, k), flags=["nsw"]),
                                          t.domain) for k in range(width)]
        early = [p for p, instr in enumerate(t.instrs) if instr.kind == "load" and not any(
            atom[0] == "s" for ix in ix_.affine_forms(instr.ix) for atom, _ in ix.terms)]

        def region():
            outer = b.lowering
            b.lowering = outer.scalar_code(outer.scalar)   # (as run() for a task's body)
            loaded = [{} for _ in range(width)]
            values = [[] for _ in range(width)]
            try:
                for p in early:
                    for k in range(width):
                        self.vars = lanes[k]
                        loaded[k][p] = self._run((t.instrs[p],), {}, [None] * p, [None] * p, True)[p]
                for k in range(width):
                    self.vars, dts = lanes[k], []
                    for p, instr in enumerate(t.instrs):
                        if p in loaded[k]:
                            values[k].append(loaded[k][p])
                            dts.append(np.dtype(instr.dt))
                        else:
                            self._run((instr,), {}, values[k], dts, True)
            finally:
                b.lowering = outer
            for arg, ix, v in t.stores:
                for k in range(width):
                    self.vars = lanes[k]
                    self.store(arg, ix, values[k][v], values[k])
            self.vars = []
        self.optimistic(region)
        b.ret_void()
        return self.fn

    def emit_rmw(self) -> None:
        def body():
            values = self.body()
            ok = None
            for flag in self.valid.values():
                ok = flag if ok is None else self.b.and_(ok, flag)
            for arg, ix, v in self.t.stores:
                if ok is None:
                    self.update(arg, ix, values[v], values)
                else:
                    with self.b.if_then(ok):
                        self.update(arg, ix, values[v], values)
        self.nest(self.t.domain, body, (self.start, self.end))

    def update(self, arg: int, ix, value, values) -> None:
        b, mode, dt = self.b, self.t.rmw, self.dt[arg]
        if mode == "set":
            self.store(arg, ix, value, values)
            return
        if dt.kind == "c":  # each part's sum is atomic; the parts add independently
            if mode != "add":
                raise NotImplementedError(f"qtrace: scatter mode {mode!r} is not defined for complex")
            ptrs = complexmath.part_pointers(b, self.ptrs[arg], self.index(ix, values), dt)
            for part, ptr in zip(value, ptrs):
                b.atomic_rmw("fadd", ptr, part, "monotonic")
            return
        ptr = self.pointer(arg, ix, values)
        if dt.kind == "b":
            op = {"add": "or", "max": "or", "multiply": "and", "min": "and"}[mode]
            b.atomic_rmw(op, ptr, b.zext(value, I8), "monotonic")
            return
        if mode == "multiply":
            mul = b.fmul if dt.kind == "f" else b.mul
            self.cas_update(ptr, value, dt, lambda old: mul(old, value))
            return
        if dt.kind == "f":
            if mode == "add":
                b.atomic_rmw("fadd", ptr, value, "monotonic")
            else:
                is_min = mode == "min"
                self.cas_update(ptr, value, dt, lambda old: scalar.select_minmax(b, is_min, old, value, dt))
            return
        op = {"add": "add", "min": "min" if dt.kind == "i" else "umin",
              "max": "max" if dt.kind == "i" else "umax"}[mode]
        b.atomic_rmw(op, ptr, value, "monotonic")

    def cas_update(self, ptr, value, dt: np.dtype, combine) -> None:
        """``*ptr = combine(*ptr)`` atomically, by a compare-and-swap loop on the bits."""
        b = self.b
        ity = ir.IntType(dt.itemsize * 8)
        ty = scalar.ir_type(dt)
        old_bits = b.load(ptr, typ=ity)
        pre = b.block
        loop_bb = self.fn.append_basic_block("cas")
        done_bb = self.fn.append_basic_block("cas_done")
        b.branch(loop_bb)
        b.position_at_end(loop_bb)
        cur = b.phi(ity)
        cur.add_incoming(old_bits, pre)
        old = b.bitcast(cur, ty) if dt.kind == "f" else cur
        new = combine(old)
        new_bits = b.bitcast(new, ity) if dt.kind == "f" else new
        pair = b.cmpxchg(ptr, cur, new_bits, "monotonic", "monotonic")
        seen = b.extract_value(pair, 0)
        ok = b.extract_value(pair, 1)
        cur.add_incoming(seen, b.block)
        b.cbranch(ok, done_bb, loop_bb)
        b.position_at_end(done_bb)

    def emit_reduce(self) -> None:
        t = self.t
        prim, ssa, acc_str = t.reduce
        acc_dt = np.dtype(acc_str)
        b = self.b
        if column_reduce.interchanged(t, self.lowering):
            column_reduce.emit(self, _identity(prim, acc_dt),
                               lambda b, cur, v: _combine(b, prim, cur, v, acc_dt))
            return
        segments = reduce_segments(t, self.lowering)
        if segments > 1:
            split_reduce.emit(self, segments, _identity(prim, acc_dt),
                              lambda b, cur, v, reassociate=True: _combine(
                                  b, prim, cur, v, acc_dt, reassociate=reassociate),
                              lambda b, v, cur: _arg_better(b, prim == "argmax", v, cur, acc_dt))
            return
        acc = _Cell(b, acc_dt)
        with b.goto_entry_block():
            best_i = b.alloca(I64)
        (arg, out_ix, _), = t.stores
        out_dt = self.dt[arg]
        is_arg = prim in ("argmax", "argmin")

        def outer():
            acc.store(b, scalar.const(acc_dt, _identity(prim, acc_dt)))
            b.store(ir.Constant(I64, 0), best_i)
            n_outer = len(self.vars)

            def inner():
                values = self.body()
                v = values[ssa]
                cur = acc.load(b)
                if is_arg:
                    take = _arg_better(b, prim == "argmax", v, cur, acc_dt)
                    pos = self.vars[n_outer] if len(self.vars) > n_outer else ir.Constant(I64, 0)
                    acc.store(b, b.select(take, v, cur))
                    b.store(b.select(take, pos, b.load(best_i, typ=I64)), best_i)
                else:
                    v = scalar.convert(b, v, np.dtype(t.instrs[ssa].dt), acc_dt)
                    acc.store(b, _combine(b, prim, cur, v, acc_dt))
            self._nest(t.inner, inner, float32_width=narrow_accumulation(t))
            if is_arg:
                result = b.load(best_i, typ=I64)
            else:
                result = scalar.convert(b, acc.load(b), acc_dt, out_dt)
            self.store(arg, out_ix, result, [])
        self.optimistic(lambda: self.nest(t.domain, outer, (self.start, self.end)))

    def emit_scan(self) -> None:
        t = self.t
        _, ssa, acc_str = t.reduce
        acc_dt = np.dtype(acc_str)
        b = self.b
        segments = scan_segments(t, self.lowering)
        if segments > 1:   # few long rows: chunk totals, then chunks from their offsets
            split_scan.emit(self, segments, lambda b, cur, v, reassociate: _combine(
                b, "reduce_sum", cur, v, acc_dt, reassociate=reassociate))
            return
        acc = _Cell(b, acc_dt)
        (arg, ix, _), = t.stores

        def outer():
            acc.store(b, scalar.const(acc_dt, 0))

            def inner():
                values = self.body()
                v = scalar.convert(b, values[ssa], np.dtype(t.instrs[ssa].dt), acc_dt)
                total = _combine(b, "reduce_sum", acc.load(b), v, acc_dt, reassociate=False)
                acc.store(b, total)
                self.store(arg, ix, scalar.convert(b, total, acc_dt, self.dt[arg]), values)
            self.nest(t.inner, inner)
        self.nest(t.domain, outer, (self.start, self.end))


class _Heap:
    """A task's float adstack heap, as a thread sees it (:meth:`KernelEmitter._stack_words`):
    its ``rows``, the ``row`` the thread holds at the loop's start (-1: none), and
    ``claim(row, runs)``, emitted before the loop."""

    def __init__(self, rows: ir.Value, row: ir.Value):
        self.rows, self.row, self.claim = rows, row, None


class _Cell:
    """A running value in the entry block's stack frame: one alloca, or two for a complex."""

    def __init__(self, b: ir.IRBuilder, dt: np.dtype):
        self.types = ((complexmath.part_type(dt),) * 2 if dt.kind == "c" else (scalar.ir_type(dt),))
        with b.goto_entry_block():
            self.ptrs = [b.alloca(ty) for ty in self.types]
        self.pair = dt.kind == "c"

    def load(self, b: ir.IRBuilder):
        parts = tuple(b.load(p, typ=ty) for p, ty in zip(self.ptrs, self.types))
        return parts if self.pair else parts[0]

    def store(self, b: ir.IRBuilder, value) -> None:
        for p, v in zip(self.ptrs, value if self.pair else (value,)):
            b.store(v, p)


def clamp_free_range(task, k: int, extent: int):
    """``(a, z, clamps)``: the range ``a <= i_k < z`` of loop variable ``k`` on which every
    clamp in ``clamps`` — those of the task's addresses that clamp ``c*i_k + const`` (a
    region update reading its source) — is the identity; None when there are none, or
    the range is short or already the whole axis."""
    forms = [x for instr in walk(task.instrs) if instr.kind in ("load", "ix", "atomic")
             for x in ix_.affine_forms(instr.ix)]
    forms += [x for _, ix, _ in task.stores for x in ix_.affine_forms(ix)]
    a, z, clamps = 0, extent, set()
    for x in forms:
        for atom, _ in x.terms:
            if atom[0] != "clip" or atom in clamps:
                continue
            r = ix_.clamp_identity_range(atom, k)
            if r is not None:
                clamps.add(atom)
                a, z = max(a, r[0]), min(z, r[1] + 1)
    if not clamps or z - a < MIN_SPLIT or (a == 0 and z == extent):
        return None
    return a, z, frozenset(clamps)


MIN_SPLIT = 16  # elements: a shorter clamp-free range is not worth a third copy of the loop


def _zero(ty: ir.Type) -> ir.Constant:
    return ir.Constant(ty, 0) if isinstance(ty, ir.IntType) else ir.Constant(ty, 0.0)


def _add(b: ir.IRBuilder, x, y):
    return b.add(x, y) if isinstance(x.type, ir.IntType) else b.fadd(x, y)


def _floor_div(b: ir.IRBuilder, x, c: int):
    """``x // c`` rounding toward -inf (index expressions are Python integers), ``c > 0``."""
    adjusted = b.select(b.icmp_signed("<", x, ir.Constant(I64, 0)), b.sub(x, ir.Constant(I64, c - 1)), x)
    return b.sdiv(adjusted, ir.Constant(I64, c))


INTERLEAVE = 4   # vectors per iteration of a latency-bound loop (see _latency_bound)


def _math_calls(task) -> int:
    """How many transcendental functions ``task`` computes per element."""
    return sum(1 for i in task.instrs if i.kind == "op" and i.prim in SUPPORTED)


def _latency_bound(task) -> bool:
    """Whether ``task``'s loop is one long dependency chain: one or two math functions
    (straight-line bodies of 50-100 vector operations, the reduction, the polynomial and
    the reconstruction each waiting for the one before), which LLVM's loop vectorizer does
    not interleave by itself. Interleaved four vectors deep the core overlaps independent
    chains: measured on one thread, 1e6 elements, float64 tanh 1290 -> 930 us, exp 481 ->
    372, log 691 -> 545, sin 869 -> 750; float32 tanh 277 -> 222 (each kernel then compiles
    in ~5 ms more). A loop with more calls has independent chains to overlap already (B1's
    four: no change)."""
    return 1 <= _math_calls(task) <= 2


VECTOR_BYTES = 64   # the widest vector registers (AVX-512): sizes the remainder estimate


def _elementwise(ix) -> bool:
    """Whether index ``ix`` is made of the element's coordinates and constants alone (no
    value computed in a loop body)."""
    return all(atom[0] == "v" or (atom[0] != "s" and _elementwise(atom[1])) for atom, _ in ix.terms)


def _math_loop_properties(task, extent: int) -> dict:
    """Loop properties of a latency-bound loop over ``extent`` elements: ``INTERLEAVE``
    vectors per iteration, and where the elements left after the last whole block would
    run the scalar remainder for more than a tenth of the row (short rows: a [10000, 30]
    map of tanh spent most of its time there), the tail folded into masked vector
    iterations instead (``llvm.loop.vectorize.predicate.enable``; long rows keep the
    unmasked loop: masking every iteration made a long 1-D tanh 2x slower). Measured on
    one thread, float64 tanh: [10000, 30] 1401 -> 260 us, [3000, 100] 422 -> 346 us
    (interleaved, not folded), 1e6 elements 1084 -> 824 us."""
    properties = {"llvm.loop.interleave.count": INTERLEAVE}
    size = min((np.dtype(i.dt).itemsize for i in task.instrs
                if i.kind == "op" and i.prim in SUPPORTED), default=8)
    block = INTERLEAVE * VECTOR_BYTES // size
    if extent % block > extent // 10:
        properties["llvm.loop.vectorize.predicate.enable"] = 1
    return properties


def _uses_fast_trig(task) -> bool:
    """A map task (no loops, no read-modify-write) computing float32/float64 sin, cos or tan,
    and not in place (the exact re-run of :meth:`KernelEmitter.optimistic` reads the inputs
    again: a region assignment in place would read what its first run wrote)."""
    return not task.has_loops and not task.in_place and any(uses_fast_trig(i) for i in task.instrs)


def _identity(prim: str, dt: np.dtype):
    if prim in ("reduce_sum", "reduce_any"):
        return 0
    if prim in ("reduce_prod", "reduce_all"):
        return 1
    low = prim in ("reduce_max", "argmax")
    if dt.kind == "f":
        return -np.inf if low else np.inf
    if dt.kind == "b":
        return 0 if low else 1
    info = np.iinfo(dt)
    return info.min if low else info.max


def _combine(b: ir.IRBuilder, prim: str, acc, v, dt: np.dtype, reassociate: bool = True):
    if dt.kind == "c":
        if prim == "reduce_sum":
            return b.fadd(acc[0], v[0]), b.fadd(acc[1], v[1])
        if prim == "reduce_prod":
            return complexmath.mul(b, acc, v)
        raise NotImplementedError(f"qtrace: {prim} is not defined for complex dtypes")
    if prim == "reduce_sum":
        if dt.kind == "f":
            r = b.fadd(acc, v)
            if reassociate:
                r.flags.append("reassoc")
            return r
        return b.or_(acc, v) if dt.kind == "b" else b.add(acc, v)
    if prim == "reduce_prod":
        if dt.kind == "f":
            return b.fmul(acc, v)
        return b.and_(acc, v) if dt.kind == "b" else b.mul(acc, v)
    if prim in ("reduce_max", "reduce_min"):
        if dt.kind == "b":
            return b.or_(acc, v) if prim == "reduce_max" else b.and_(acc, v)
        return scalar.select_minmax(b, prim == "reduce_min", acc, v, dt)
    if prim == "reduce_any":
        return b.or_(acc, v)
    if prim == "reduce_all":
        return b.and_(acc, v)
    raise NotImplementedError(f"qtrace: no reduction rule for {prim!r}")


def _arg_better(b: ir.IRBuilder, is_max: bool, v, best, dt: np.dtype):
    """argmax/argmin: strictly better, or the first NaN (NumPy returns the first NaN)."""
    if dt.kind == "f":
        better = b.fcmp_ordered(">" if is_max else "<", v, best)
        first_nan = b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_ordered("ord", best, best))
        return b.or_(better, first_nan)
    if dt.kind == "b":
        return b.icmp_unsigned(">" if is_max else "<", v, best)
    cmp = b.icmp_signed if dt.kind == "i" else b.icmp_unsigned
    return cmp(">" if is_max else "<", v, best)


def streams(task, lowering: Lowering) -> bool:
    """Whether ``task`` gets a streaming entry (``Lowering.stream_bytes``): a map over one
    axis without loops or transcendental functions (memory-bound: the second copy of its
    body compiles quickly) whose every store writes a 4- or 8-byte element at the
    loop's own index, ``stream_bytes`` or more in all. The streaming entry's vector stores
    are made non-temporal by the back end (:func:`qtrace.kernels.llvm_cpu.optimize`): its
    vector loop starts at the range's start and steps by whole vectors, so with every
    output 64-byte aligned there each vector store is aligned to its own width (or 64)."""
    if (not lowering.stream_bytes or task.kind != "map" or task.has_loops or task.lanes
            or len(task.domain) != 1 or task.inner or not task.stores):
        return False
    if any(i.kind == "op" and i.prim in SUPPORTED for i in task.instrs):
        return False
    own = ix_.Ix(0, ((("v", 0), 1),))
    sizes = [task.arg_nodes[arg].dtype.itemsize for arg, _, _ in task.stores]
    if any(ix != own for _, ix, _ in task.stores) or len({a for a, _, _ in task.stores}) != len(sizes):
        return False
    if any(task.arg_nodes[arg].dtype.kind in "bc" for arg, _, _ in task.stores) or min(sizes) < 4:
        return False
    return task.domain[0] * sum(sizes) >= lowering.stream_bytes


def lower_task(task, module: ir.Module, name: str, check_bounds: bool,
               lowering: Lowering = CPU) -> ir.Function:
    """Emit ``task`` into ``module`` as function ``name``
    (``void name(i64 start, i64 end, ptr args, ptr status, ptr scratch)``), with its
    streaming entry ``name`` + ``STREAM_SUFFIX`` where :func:`streams`."""
    entry = None
    if streams(task, lowering):
        entry = KernelEmitter(task, module, name + STREAM_SUFFIX, check_bounds, lowering).emit(True)
        entry.linkage = "internal"
        entry.attributes.add("noinline")
    return KernelEmitter(task, module, name, check_bounds, lowering).emit(entry)


def _loop_inputs(instr, values) -> tuple:
    """A per-element loop's inputs among the enclosing program's ``values``: the initial
    state, the bounds of a ``fori`` (else None, None), the values its programs read."""
    ins, m = instr.per_element, instr.n_state
    fori = instr.layout == "fori"
    lo, hi = (values[ins[m]], values[ins[m + 1]]) if fori else (None, None)
    return [values[i] for i in ins[:m]], lo, hi, [values[i] for i in ins[m + (2 if fori else 0):]]


def _trip_programs(instr) -> tuple:
    """The programs a forward loop runs on each trip (its condition, unless a ``fori``, and body)."""
    return (instr.body,) if instr.layout == "fori" else (instr.cond, instr.body)


def sorted_trips(task) -> bool:
    """Whether ``task``'s elements are worth running in order of their trip counts (under a
    lowering with ``sorted_loops``): a map whose top-level per-element loops are all
    ``fori`` loops with bounds computed before the first of them (so that
    :meth:`KernelEmitter.emit_trips` can count an element's trips without running them),
    at least one of them with bounds that differ between elements."""
    loops = [k for k, i in enumerate(task.instrs) if i.kind in LOOPS]
    if task.kind != "map" or not loops:
        return False
    bounds = []
    for k in loops:
        instr = task.instrs[k]
        if instr.layout != "fori":
            return False
        bounds += instr.per_element[instr.n_state:instr.n_state + 2]
    return all(j < loops[0] for j in bounds) and not all(_uniform(task.instrs, j) for j in bounds)


def _uniform(instrs, k: int) -> bool:
    """Whether instruction ``k`` of a task body has the same value for every element."""
    instr = instrs[k]
    if instr.kind == "const":
        return True
    if instr.kind == "load":
        return instr.ix.is_const
    if instr.kind == "op":
        return all(_uniform(instrs, a) for a in instr.args)
    return False


def lower_trips(task, module: ir.Module, name: str, check_bounds: bool, lowering: Lowering) -> ir.Function:
    """Emit the trip count function of a :func:`sorted_trips` ``task`` into ``module`` as
    ``name`` (:meth:`KernelEmitter.emit_trips`)."""
    return KernelEmitter(task, module, name, check_bounds, lowering).emit_trips()


def runs_in_lockstep(task) -> bool:
    """Whether ``task`` can be lowered by :func:`lower_lockstep`: a map without loops (its
    elements independent straight-line code)."""
    return task.kind == "map" and task.stack is None and not any(i.kind in LOOPS for i in task.instrs)


def lower_lockstep(task, module: ir.Module, name: str, check_bounds: bool, lowering: Lowering,
                   width: int) -> ir.Function:
    """Emit map ``task`` into ``module`` as function ``name`` (the signature of
    :func:`lower_task`'s) computing elements ``start .. start + width - 1`` of its flat
    domain in lockstep (:meth:`KernelEmitter.emit_lockstep`)."""
    if not runs_in_lockstep(task):
        raise ValueError(f"qtrace: only a map task without loops runs in lockstep, not {task.kind}")
    return KernelEmitter(task, module, name, check_bounds, lowering).emit_lockstep(width)


__all__ = ["lower_task", "lower_lockstep", "lower_trips", "runs_in_lockstep", "sorted_trips", "intrinsic"]
