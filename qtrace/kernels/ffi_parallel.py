"""Parallel CPU kernel ranges inside a native XLA FFI handler, on XLA's own thread pool.

A native handler (:mod:`qtrace.kernels.ffi_entry`) runs without Python, so it cannot use
qtrace's worker threads (Python threads calling kernels through ctypes). It splits a long
kernel range over XLA's intra-op thread pool instead (``XLA_FFI_ThreadPool_Schedule``,
``XLA_FFI_ThreadPool_NumThreads``); two functions, compiled once per process:

* ``i64 qt_ffi_workers(ptr api, ptr ctx, i64 cap, i64 count)``: how many parts a range of
  ``count`` elements runs as: at most ``cap`` (``qt.config.num_threads``), the pool's
  threads plus the calling thread, and ``count``; 1 when XLA gives no pool;
* ``void qt_ffi_parallel_for(ptr api, ptr ctx, ptr kernel, i64 start, i64 count, ptr args,
  i64 n_args, ptr status, ptr scratch, i64 stride, i64 parts)``: runs
  ``kernel(lo, hi, args, status, scratch + i * stride)`` on part ``i`` of
  ``[start, start + count)`` for every part, and returns when all have finished.

Parts are claimed by an atomic counter, by the pool's tasks and by the calling thread
alike, so the caller never waits for a part that no thread has started (a pool busy with
other work, or with other devices' handlers, cannot deadlock it): it runs whatever is left
itself, then waits only for parts being run. The shared record (the kernel's argument
block copied into it) is reference-counted and freed by whoever leaves it last, so a task
the pool starts after the call has returned touches nothing that is gone.
"""

from __future__ import annotations

import ctypes
import threading

from llvmlite import ir

from . import llvm_cpu

I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
WORKERS, PARALLEL_FOR = "qt_ffi_workers", "qt_ffi_parallel_for"
# XLA_FFI_Api offsets (c_api.h, 64-bit host)
API_ERROR_DESTROY, API_SCHEDULE, API_NUM_THREADS = 64, 136, 144
# the shared record, in 8-byte words
KERNEL, START, COUNT, PARTS, STATUS, SCRATCH, STRIDE, NEXT, DONE, REFS, ARGS = range(11)

_lock = threading.Lock()
_compiled: dict = {}


def _c(v: int):
    return ir.Constant(I64, v)


class _Module:
    def __init__(self, natives: dict):
        self.module = llvm_cpu.new_module("qt_ffi_parallel")
        self.natives = natives

    def native(self, b, name, ret, args):
        ty = ir.FunctionType(ret, [a.type for a in args])
        return b.call(b.inttoptr(_c(self.natives[name]), ty.as_pointer()), args)

    @staticmethod
    def call_part(b, i, parts, kernel, start, count, args, status, scratch, stride) -> None:
        """``kernel`` on part ``i`` of ``parts`` of ``[start, start + count)``, with scratch
        block ``scratch + i * stride`` (none when ``scratch`` is 0)."""
        lo = b.add(start, b.sdiv(b.mul(count, i), parts))
        hi = b.add(start, b.sdiv(b.mul(count, b.add(i, _c(1))), parts))
        mine = b.select(b.icmp_signed("==", scratch, _c(0)), _c(0), b.add(scratch, b.mul(i, stride)))
        kernel_ty = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, PTR])
        b.call(b.inttoptr(kernel, kernel_ty.as_pointer()), [lo, hi, args, status, b.inttoptr(mine, PTR)])

    @staticmethod
    def word(b, shared, k):
        return b.gep(shared, [k if isinstance(k, ir.Value) else _c(k)], source_etype=I64)

    @staticmethod
    def api_call(b, api, offset, args):
        fp = b.load(b.gep(api, [_c(offset)], source_etype=ir.IntType(8)), typ=I64)
        return b.call(b.inttoptr(fp, ir.FunctionType(PTR, [PTR]).as_pointer()), [args])

    def destroy(self, b, api, err):
        """Drop an ``XLA_FFI_Error`` (XLA_FFI_Error_Destroy)."""
        args = b.alloca(I64, size=_c(3))
        for k, v in enumerate((_c(24), _c(0), b.ptrtoint(err, I64))):
            b.store(v, self.word(b, args, k))
        fp = b.load(b.gep(api, [_c(API_ERROR_DESTROY)], source_etype=ir.IntType(8)), typ=I64)
        b.call(b.inttoptr(fp, ir.FunctionType(ir.VoidType(), [PTR]).as_pointer()), [args])

    def run_parts(self):
        """``void run_parts(ptr shared)``: claim and run parts until none is left."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), "qt_ffi_run_parts")
        fn.linkage = "internal"
        (shared,) = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        loop, body, done = (fn.append_basic_block(n) for n in ("claim", "run", "done"))
        b.branch(loop)
        b.position_at_end(loop)
        i = b.atomic_rmw("add", self.word(b, shared, NEXT), _c(1), "seq_cst")
        parts = b.load(self.word(b, shared, PARTS), typ=I64)
        b.cbranch(b.icmp_signed("<", i, parts), body, done)
        b.position_at_end(body)
        def field(k):
            return b.load(self.word(b, shared, k), typ=I64)
        self.call_part(b, i, parts, field(KERNEL), field(START), field(COUNT), self.word(b, shared, ARGS),
                       b.inttoptr(field(STATUS), PTR), field(SCRATCH), field(STRIDE))
        b.atomic_rmw("add", self.word(b, shared, DONE), _c(1), "seq_cst")
        b.branch(loop)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def release(self):
        """``void release(ptr shared)``: drop one reference; the last frees the record."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), "qt_ffi_release")
        fn.linkage = "internal"
        (shared,) = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        old = b.atomic_rmw("sub", self.word(b, shared, REFS), _c(1), "seq_cst")
        with b.if_then(b.icmp_signed("==", old, _c(1))):
            self.native(b, "free", ir.VoidType(), [shared])
        b.ret_void()
        return fn

    def emit(self) -> None:
        run_parts, release = self.run_parts(), self.release()
        task = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), "qt_ffi_task")
        task.linkage = "internal"
        b = ir.IRBuilder(task.append_basic_block("entry"))
        b.call(run_parts, [task.args[0]])
        b.call(release, [task.args[0]])
        b.ret_void()
        self._workers()
        self._parallel_for(task, run_parts, release)

    def _workers(self) -> None:
        fn = ir.Function(self.module, ir.FunctionType(I64, [PTR, PTR, I64, I64]), WORKERS)
        api, ctx, cap, count = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        size = b.load(api, typ=I64)
        with b.if_then(b.icmp_unsigned("<=", size, _c(API_NUM_THREADS)), likely=False):
            b.ret(_c(1))   # an API without thread pools
        threads = b.alloca(I64)
        b.store(_c(0), threads)
        args = b.alloca(I64, size=_c(4))
        for k, v in enumerate((_c(32), _c(0), b.ptrtoint(ctx, I64), b.ptrtoint(threads, I64))):
            b.store(v, self.word(b, args, k))
        err = self.api_call(b, api, API_NUM_THREADS, args)
        with b.if_then(b.icmp_unsigned("!=", err, ir.Constant(PTR, None)), likely=False):
            self.destroy(b, api, err)
            b.ret(_c(1))   # no pool for this call
        n = b.add(b.load(threads, typ=I64), _c(1))

        def smaller(x, y):
            return b.select(b.icmp_signed("<", x, y), x, y)
        n = smaller(smaller(n, cap), count)
        b.ret(b.select(b.icmp_signed("<", n, _c(1)), _c(1), n))

    def _parallel_for(self, task, run_parts, release) -> None:
        fn = ir.Function(self.module, ir.FunctionType(
            ir.VoidType(), [PTR, PTR, PTR, I64, I64, PTR, I64, PTR, PTR, I64, I64]), PARALLEL_FOR)
        api, ctx, kernel, start, count, args, n_args, status, scratch, stride, parts = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        nbytes = b.and_(b.add(b.mul(b.add(n_args, _c(ARGS)), _c(8)), _c(63)), _c(-64))
        shared = self.native(b, "aligned_alloc", PTR, [_c(64), nbytes])
        with b.if_then(b.icmp_unsigned("==", shared, ir.Constant(PTR, None)), likely=False):
            # no memory for the record: the parts in turn on this thread (each with its block)
            self._serial(b, kernel, start, count, args, status, scratch, stride, parts)
            b.ret_void()
        for k, v in ((KERNEL, b.ptrtoint(kernel, I64)), (START, start), (COUNT, count), (PARTS, parts),
                     (STATUS, b.ptrtoint(status, I64)), (SCRATCH, b.ptrtoint(scratch, I64)),
                     (STRIDE, stride), (NEXT, _c(0)), (DONE, _c(0)), (REFS, parts)):
            b.store(v, self.word(b, shared, k))
        b.call(self.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64]),
               [self.word(b, shared, ARGS), args, b.mul(n_args, _c(8)), ir.Constant(ir.IntType(1), 0)])
        # schedule parts - 1 tasks; one that XLA refuses gives its reference back
        sched = b.alloca(I64, size=_c(5))
        head, run = fn.append_basic_block("schedule"), fn.append_basic_block("run")
        entry = b.block
        b.cbranch(b.icmp_signed(">", parts, _c(1)), head, run)
        b.position_at_end(head)
        t = b.phi(I64)
        t.add_incoming(_c(1), entry)
        for k, v in enumerate((_c(40), _c(0), b.ptrtoint(ctx, I64), b.ptrtoint(task, I64),
                               b.ptrtoint(shared, I64))):
            b.store(v, self.word(b, sched, k))
        err = self.api_call(b, api, API_SCHEDULE, sched)
        with b.if_then(b.icmp_unsigned("!=", err, ir.Constant(PTR, None)), likely=False):
            self.destroy(b, api, err)
            b.atomic_rmw("sub", self.word(b, shared, REFS), _c(1), "seq_cst")
        t1 = b.add(t, _c(1))
        t.add_incoming(t1, b.block)
        b.cbranch(b.icmp_signed("<", t1, parts), head, run)
        b.position_at_end(run)
        b.call(run_parts, [shared])
        wait, spin, finish = (fn.append_basic_block(n) for n in ("wait", "spin", "finish"))
        b.branch(wait)
        b.position_at_end(wait)
        done = b.load_atomic(self.word(b, shared, DONE), "acquire", 8, typ=I64)
        b.cbranch(b.icmp_signed("<", done, parts), spin, finish)
        b.position_at_end(spin)
        self.native(b, "sched_yield", I32, [])
        b.branch(wait)
        b.position_at_end(finish)
        b.call(release, [shared])
        b.ret_void()

    def _serial(self, b, kernel, start, count, args, status, scratch, stride, parts) -> None:
        fn = b.function
        head, done = fn.append_basic_block("serial"), fn.append_basic_block("serial_done")
        entry = b.block
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(_c(0), entry)
        self.call_part(b, i, parts, b.ptrtoint(kernel, I64), start, count, args, status,
                       b.ptrtoint(scratch, I64), stride)
        i1 = b.add(i, _c(1))
        i.add_incoming(i1, b.block)
        b.cbranch(b.icmp_signed("<", i1, parts), head, done)
        b.position_at_end(done)


def functions() -> dict:
    """``{"workers": address, "parallel_for": address}`` of the compiled runtime."""
    with _lock:
        if not _compiled:
            libc = ctypes.CDLL(None)
            natives = {n: ctypes.cast(getattr(libc, n), ctypes.c_void_p).value
                       for n in ("aligned_alloc", "free", "sched_yield")}
            m = _Module(natives)
            m.emit()
            fns, _ = llvm_cpu.compile_module(m.module, [WORKERS, PARALLEL_FOR], counted=False)
            _compiled.update(workers=ctypes.cast(fns[WORKERS], ctypes.c_void_p).value,
                             parallel_for=ctypes.cast(fns[PARALLEL_FOR], ctypes.c_void_p).value)
        return dict(_compiled)
