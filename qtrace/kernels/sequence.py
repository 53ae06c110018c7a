"""One launch for a run of small tasks: a native loop that calls each task's kernel in turn.

A plan over small arrays is many tasks of a few thousand elements each, and calling each
one from Python (ctypes, an argument block per call) costs far more than the kernel
itself. The sequence runner is one compiled function, the same for every plan (kept in the disk
cache like a kernel, so a warm start loads it without LLVM):

    void qt_run_sequence(i64 *table, i64 n_tasks, ptr *slots, i8 *status)

``table`` lists the tasks in order, each as ``kernel address, extent, n_args, status row,
slot of each argument...``; ``slots`` holds the address of every buffer of the plan. For
each task the runner gathers its argument block from ``slots`` and calls the kernel over
``[0, extent)`` on the calling thread, so the tasks run in plan order, one after the
other: the dependences between them hold as they do between separate launches.
"""

from __future__ import annotations

import ctypes
import threading

NAME = "qt_run_sequence"
KEY = "qtrace-sequence-runner"   # its disk cache entry (the key adds qtrace's source digest)
MAX_ARGS = 512      # the argument block on the runner's stack; tasks with more run alone
HEADER = 4          # table words before a task's argument slots

RUNNER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)

_lock = threading.Lock()
_runner = None


def _emit(module) -> None:
    from llvmlite import ir
    I64, PTR = ir.IntType(64), ir.PointerType()
    kernel_ty = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, PTR])
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, PTR, PTR]), name=NAME)
    table, n, slots, status = fn.args
    entry = fn.append_basic_block("entry")
    head = fn.append_basic_block("task")
    gather = fn.append_basic_block("gather")
    call = fn.append_basic_block("call")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    block = b.alloca(PTR, size=ir.Constant(I64, MAX_ARGS))
    b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), head, done)

    b.position_at_end(head)
    task = b.phi(I64)
    pos = b.phi(I64)
    task.add_incoming(ir.Constant(I64, 0), entry)
    pos.add_incoming(ir.Constant(I64, 0), entry)

    def word(i):
        return b.load(b.gep(table, [i], source_etype=I64), typ=I64)

    kernel = b.inttoptr(word(pos), kernel_ty.as_pointer())  # printed typed; LLVM reads it as ptr
    extent = word(b.add(pos, ir.Constant(I64, 1)))
    n_args = word(b.add(pos, ir.Constant(I64, 2)))
    row = word(b.add(pos, ir.Constant(I64, 3)))
    first = b.add(pos, ir.Constant(I64, HEADER))
    b.cbranch(b.icmp_signed(">", n_args, ir.Constant(I64, 0)), gather, call)
    head_end = b.block

    b.position_at_end(gather)
    k = b.phi(I64)
    k.add_incoming(ir.Constant(I64, 0), head_end)
    slot = word(b.add(first, k))
    address = b.load(b.gep(slots, [slot], source_etype=PTR), typ=PTR)
    b.store(address, b.gep(block, [k], source_etype=PTR))
    k1 = b.add(k, ir.Constant(I64, 1))
    k.add_incoming(k1, gather)
    b.cbranch(b.icmp_signed("<", k1, n_args), gather, call)

    b.position_at_end(call)
    st = b.select(b.icmp_signed("<", row, ir.Constant(I64, 0)), ir.Constant(PTR, None),
                  b.gep(status, [b.mul(row, ir.Constant(I64, 16))], source_etype=ir.IntType(8)))
    b.call(kernel, [ir.Constant(I64, 0), extent, block, st, ir.Constant(PTR, None)])
    nxt = b.add(task, ir.Constant(I64, 1))
    task.add_incoming(nxt, call)
    pos.add_incoming(b.add(first, n_args), call)
    b.cbranch(b.icmp_signed("<", nxt, n), head, done)

    b.position_at_end(done)
    b.ret_void()


def runner():
    """The compiled sequence runner (compiled once per process, on first use)."""
    global _runner
    if _runner is None:
        with _lock:
            if _runner is None:
                (fn,) = _load_or_compile().values()
                _runner = RUNNER(ctypes.cast(fn, ctypes.c_void_p).value)
    return _runner


def _load_or_compile() -> dict:
    from . import disk_cache
    directory = disk_cache.usable_dir()
    entry = disk_cache.Entry(directory, [KEY], [NAME], {}, counted=False) if directory else None
    fns = entry.load() if entry is not None else None
    if fns is None:
        from . import llvm_cpu
        module = llvm_cpu.new_module("qt_sequence")
        _emit(module)
        fns, obj = llvm_cpu.compile_module(module, [NAME], counted=False)
        if entry is not None:
            entry.store(obj)
    return fns


def address(kernel) -> int:
    """The machine address of a compiled kernel (a ``llvm_cpu.KERNEL`` function)."""
    return ctypes.cast(kernel, ctypes.c_void_p).value
