"""Native XLA FFI handlers: a compiled plan's launches as one LLVM function XLA calls.

XLA calls a custom call's handler as ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)``
(``xla/ffi/api/c_api.h``). :func:`compile_handler` emits that function for one
:class:`Program` (a plan bound to XLA's buffers, built by
:mod:`qtrace.devices.xla_native`) and compiles it for the host, so a call runs no Python
and takes no GIL:

* the metadata query (an ``XLA_FFI_Extension_Metadata`` in the frame's extension chain)
  is answered with the API version the frame's API reports and no traits; the
  instantiate, prepare and initialise stages do nothing;
* at the execute stage it reads the data pointer of every argument and result
  ``XLA_FFI_Buffer``; the plan's slots are XLA's arguments, XLA's results (destination
  passing: a kernel writes an output straight into XLA's buffer), buffers captured by the
  trace, or temporaries carved from one arena per call (the CPU's ``aligned_alloc``;
  on a GPU, XLA's own allocator, ``XLA_FFI_DeviceMemory_Allocate``);
* it runs the steps in plan order: kernel launches (a CPU kernel is called directly; a GPU
  kernel is launched by ``cuLaunchKernel`` on the stream ``XLA_FFI_Stream_Get`` gives)
  and copies (an output that is an input, a constant or another output);
* a reverse-mode loop's adstack is sized in the handler: a constant depth as is, a depth
  recorded by a forward loop as the largest count (a native loop on the CPU; on a GPU a
  max kernel and an 8-byte read, the one point where such a call waits for its stream);
* index and overflow checks are read after the last step (on a GPU after waiting for the
  stream: only plans with checks wait); a failure, a bad call frame or a failed
  allocation or launch calls back into Python (:data:`ERROR`), which returns an
  ``XLA_FFI_Error`` with qtrace's message: the GIL is taken only on that path.

Offsets of the C structures are those of ``c_api.h`` on a 64-bit host.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

from llvmlite import ir

from ..graph.instrs import STACK_HEADER
from . import llvm_cpu
from .intrinsics import gpu_thread

I8, I32, I64, PTR = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.PointerType()
NULL = ir.Constant(PTR, None)

# XLA_FFI_CallFrame: struct_size, extension_start, api, ctx, stage, args (5 words), rets, ...
FRAME_EXT, FRAME_API, FRAME_CTX, FRAME_STAGE, FRAME_ARGS, FRAME_RETS = 8, 16, 24, 32, 40, 80
SPAN_SIZE, SPAN_ITEMS = 16, 32          # XLA_FFI_Args / XLA_FFI_Rets
BUFFER_DATA = 24                         # XLA_FFI_Buffer
EXT_TYPE, EXT_NEXT, EXT_METADATA = 8, 16, 24
META_MAJOR, META_MINOR, META_TRAITS = 24, 28, 32
API_SIZE, API_MAJOR, API_MINOR = 0, 32, 36
API_STREAM_GET, API_ALLOCATE, API_FREE, API_ORDINAL = 80, 120, 128, 184
STAGE_EXECUTE, EXTENSION_METADATA = 3, 1
XLA_ALIGN = 16     # the most XLA_FFI_DeviceMemory_Allocate accepts (its GPU allocator gives more)

# the codes the handler passes to the Python error callback
ERR_CHECK, ERR_FRAME, ERR_ALLOC, ERR_ORDINAL, ERR_CUDA = 1, 2, 3, 4, 5
# XLA_FFI_Error* error(XLA_FFI_CallFrame* frame, int64 code, int64 detail)
ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
HANDLER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)

CUDA_BLOCK = 256


class Level(NamedTuple):
    """One adstack level: its depth is ``const`` (>= 0), or the largest element of slot
    ``counts`` (``count_size`` elements of ``count_bytes`` bytes each); its rows take
    ``float_bytes`` and ``int_bytes`` per entry; sizing it adds 1 to the ``qt.stats()``
    counters ``counted`` (its sizing path's)."""

    const: int
    counts: int
    count_size: int
    count_bytes: int
    float_bytes: int
    int_bytes: int
    counted: tuple = ()


class Launch(NamedTuple):
    """A kernel over ``[0, extent)`` on ``slots``: ``kernel`` indexes the device table (a
    CPU kernel's address, or the ``CUfunction`` loaded on that GPU)."""

    kernel: int
    extent: int
    slots: tuple
    row: int              # status row of its checks, -1: none
    scratch: int          # arena offset of its zeroed scratch, -1: none
    scratch_bytes: int
    levels: tuple         # Level per adstack level (empty: no adstack)
    words: int            # arena offset of one 8-byte word per level (GPU max reductions)
    grid: int             # GPU launch shape (threads cap an adstack launch's grid)
    threads: int
    parallel: bool        # CPU: split over XLA's thread pool (qtrace.kernels.ffi_parallel)
    phases: int           # CPU: [0, extent) runs as this many equal ranges in order
    interleaved: bool     # GPU: the threads' adstacks interleaved (qtrace.kernels.codegen)
    by_value: int = 0     # GPU: value parameters after the pointers (0 each: XLA's buffers
                          # are device memory, read through the pointers)


class Copy(NamedTuple):
    """``nbytes`` from slot ``src`` to slot ``dst``."""

    dst: int
    src: int
    nbytes: int


class Program(NamedTuple):
    """A plan bound to an XLA call: what :func:`compile_handler` emits.

    ``slots``: per plan slot, ``("arg", i)``, ``("ret", j)``, ``("table", k)`` (an address
    in the device table: a captured buffer) or ``("temp", offset)`` into the arena.
    ``table``: per device (one row on the CPU), the kernels' and captured buffers'
    addresses; ``natives``: addresses of the C functions called (``aligned_alloc``,
    ``free``, the CUDA driver's, the error callback, the GPU helper kernels' table
    columns ``max_kernel``/``header_kernel``)."""

    platform: str         # "cpu" | "cuda"
    n_args: int
    n_rets: int
    slots: tuple
    arena: int
    status: int           # arena offset of the status rows, -1: none
    rows: int
    steps: tuple
    depth_cap: int        # qt.config.adstack_max_depth, -1: none
    threads: int          # CPU: the most parts a parallel launch splits into
    counters: dict        # addresses of the qt.stats() words a call adds to
    table: tuple
    natives: dict
    huge: tuple = ()      # CPU: (result index, or -1 for the arena; bytes) advised for huge
    huge_page: tuple = (0, 0)  # pages before they are written, by natives["madvise"]: (page bytes, advice)


def _round64(b, v):
    return b.and_(b.add(v, ir.Constant(I64, 63)), ir.Constant(I64, -64))


class _Emitter:
    """The handler's body, emitted step by step."""

    def __init__(self, program: Program, module: ir.Module, name: str):
        self.p = program
        self.gpu = program.platform == "cuda"
        self.fn = ir.Function(module, ir.FunctionType(PTR, [PTR]), name=name)
        self.module = module
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self._fail = None     # the failure block once the arena is live: frees it, returns
        self._fail_err = None  # (phi of the error)
        self.arena = NULL
        self.arena_live = False

    # -- small helpers
    def at(self, base, offset: int):
        return self.b.gep(base, [ir.Constant(I64, offset)], source_etype=I8)

    def load(self, base, offset: int, ty):
        return self.b.load(self.at(base, offset), typ=ty)

    def native(self, name: str, ret, args: list):
        ty = ir.FunctionType(ret, [a.type for a in args])
        return self.b.call(self.b.inttoptr(ir.Constant(I64, self.p.natives[name]), ty.as_pointer()), args)

    def api_call(self, offset: int, args):
        fp = self.load(self.api, offset, I64)
        return self.b.call(self.b.inttoptr(fp, ir.FunctionType(PTR, [PTR]).as_pointer()), [args])

    def struct(self, words: list):
        """An on-stack array of i64/ptr words (an XLA argument struct)."""
        mem = self.b.alloca(I64, size=ir.Constant(I64, len(words)))
        for i, w in enumerate(words):
            if w.type == PTR:
                w = self.b.ptrtoint(w, I64)
            self.b.store(w, self.b.gep(mem, [ir.Constant(I64, i)], source_etype=I64))
        return mem

    def fail_with(self, err) -> None:
        """End the current block returning ``err``: directly before the arena exists, else
        through the failure block, which frees it."""
        if not self.arena_live:
            self.b.ret(err)
            return
        if self._fail is None:
            self._fail = self.fn.append_basic_block("fail")
            self._fail_err = ir.IRBuilder(self._fail).phi(PTR)
        self._fail_err.add_incoming(err, self.b.block)
        self.b.branch(self._fail)

    def fail_if(self, cond, make_err) -> None:
        """Fail with the error ``make_err()`` emits when ``cond`` holds."""
        with self.b.if_then(cond, likely=False):
            self.fail_with(make_err())

    def count(self, name: str, n: int) -> None:
        """Add ``n`` to the ``qt.stats()`` counter ``name`` (an atomic add to its word)."""
        self.b.atomic_rmw("add", self.b.inttoptr(ir.Constant(I64, self.p.counters[name]), PTR),
                          ir.Constant(I64, n), "monotonic")

    def error(self, code: int, detail):
        return self.native("error", PTR, [self.frame, ir.Constant(I64, code), detail])

    def check_xla(self, err) -> None:
        self.fail_if(self.b.icmp_unsigned("!=", err, NULL), lambda: err)

    def check_cuda(self, result) -> None:
        cond = self.b.icmp_signed("!=", result, ir.Constant(I32, 0))
        with self.b.if_then(cond, likely=False):
            self.fail_with(self.error(ERR_CUDA, self.b.sext(result, I64)))

    # -- the parts of a call
    def emit(self) -> None:
        b, p = self.b, self.p
        self.frame = frame = self.fn.args[0]
        self.api = self.load(frame, FRAME_API, PTR)
        self._metadata()
        stage = self.load(frame, FRAME_STAGE, I32)
        run = self.fn.append_basic_block("execute")
        skip = self.fn.append_basic_block("skip")
        b.cbranch(b.icmp_signed("==", stage, ir.Constant(I32, STAGE_EXECUTE)), run, skip)
        b.position_at_end(skip)
        b.ret(NULL)
        b.position_at_end(run)
        n_args = self.load(frame, FRAME_ARGS + SPAN_SIZE, I64)
        n_rets = self.load(frame, FRAME_RETS + SPAN_SIZE, I64)
        bad = b.or_(b.icmp_signed("!=", n_args, ir.Constant(I64, p.n_args)),
                    b.icmp_signed("!=", n_rets, ir.Constant(I64, p.n_rets)))
        with b.if_then(bad, likely=False):
            b.ret(self.error(ERR_FRAME, b.add(b.mul(n_args, ir.Constant(I64, 1 << 32)), n_rets)))
        self.ctx = self.load(frame, FRAME_CTX, PTR)
        args = [self._data(FRAME_ARGS, i) for i in range(p.n_args)]
        rets = [self._data(FRAME_RETS, j) for j in range(p.n_rets)]
        if self.gpu:
            self._stream()
            row = self._device_row()
        else:
            row = self._table_row(ir.Constant(I64, 0))
        self.row = row
        self._alloc_arena()
        for j, nbytes in p.huge:   # (fresh mappings: see qtrace.devices.host_pages)
            self.advise_huge(rets[j] if j >= 0 else self.arena, nbytes)
        self.ptrs = []
        for kind, v in p.slots:
            if kind == "arg":
                self.ptrs.append(args[v])
            elif kind == "ret":
                self.ptrs.append(rets[v])
            elif kind == "table":
                self.ptrs.append(b.inttoptr(self.entry(v), PTR))
            elif kind == "temp":
                self.ptrs.append(self.at(self.arena, v))
            else:   # a slot no step touches
                self.ptrs.append(NULL)
        self.status = self.at(self.arena, p.status) if p.status >= 0 else NULL
        if p.status >= 0:
            self.zero(self.status, 16 * p.rows)
        for step in p.steps:
            if isinstance(step, Copy):
                self.copy(self.ptrs[step.dst], self.ptrs[step.src], step.nbytes)
            else:
                self.launch(step)
        if p.status >= 0:
            self._check_status()
        self._free_arena()
        launches = sum(1 for s in p.steps if isinstance(s, Launch))
        for name, n in (("ffi_native_calls", 1), ("kernel_launches", launches), ("tasks_run", launches)):
            if n:
                self.count(name, n)
        b.ret(NULL)
        if self._fail is not None:   # the failure path: free the arena, return the error
            b.position_at_end(self._fail)
            self._free_arena()
            b.ret(self._fail_err)

    def _metadata(self) -> None:
        """Answer XLA's metadata query, if the frame carries one."""
        b = self.b
        head = self.fn.append_basic_block("ext")
        answer = self.fn.append_basic_block("metadata")
        nxt = self.fn.append_basic_block("ext_next")
        done = self.fn.append_basic_block("ext_done")
        first = self.load(self.frame, FRAME_EXT, PTR)
        start = b.block
        b.branch(head)
        b.position_at_end(head)
        ext = b.phi(PTR)
        ext.add_incoming(first, start)
        b.cbranch(b.icmp_unsigned("==", ext, NULL), done, nxt)
        b.position_at_end(nxt)
        follow = self.load(ext, EXT_NEXT, PTR)
        ext.add_incoming(follow, nxt)
        is_meta = b.icmp_signed("==", self.load(ext, EXT_TYPE, I32), ir.Constant(I32, EXTENSION_METADATA))
        b.cbranch(is_meta, answer, head)
        b.position_at_end(answer)
        meta = self.load(ext, EXT_METADATA, PTR)
        b.store(self.load(self.api, API_MAJOR, I32), self.at(meta, META_MAJOR))
        b.store(self.load(self.api, API_MINOR, I32), self.at(meta, META_MINOR))
        b.store(ir.Constant(I32, 0), self.at(meta, META_TRAITS))
        b.ret(NULL)
        b.position_at_end(done)

    def _data(self, span: int, i: int):
        items = self.load(self.frame, span + SPAN_ITEMS, PTR)
        buf = self.b.load(self.b.gep(items, [ir.Constant(I64, i)], source_etype=PTR), typ=PTR)
        return self.load(buf, BUFFER_DATA, PTR)

    def _stream(self) -> None:
        args = self.struct([ir.Constant(I64, 32), NULL, self.ctx, NULL])
        self.check_xla(self.api_call(API_STREAM_GET, args))
        self.stream = self.b.load(self.b.gep(args, [ir.Constant(I64, 3)], source_etype=I64), typ=PTR)

    def _device_row(self):
        """This call's GPU (XLA's device ordinal, or the current context's device with an
        older API) and its row of the device table."""
        b = self.b
        size = self.load(self.api, API_SIZE, I64)
        new = b.icmp_unsigned(">", size, ir.Constant(I64, API_ORDINAL))
        out = b.alloca(I64)
        with b.if_else(new) as (then, otherwise):
            with then:
                args = self.struct([ir.Constant(I64, 32), NULL, self.ctx, ir.Constant(I64, 0)])
                self.check_xla(self.api_call(API_ORDINAL, args))
                word = b.load(b.gep(args, [ir.Constant(I64, 3)], source_etype=I64), typ=I64)
                b.store(b.sext(b.trunc(word, I32), I64), out)
            with otherwise:
                dev = b.alloca(I32)
                self.check_cuda(self.native("cuCtxGetDevice", I32, [dev]))
                b.store(b.sext(b.load(dev, typ=I32), I64), out)
        ordinal = b.load(out, typ=I64)
        bad = b.icmp_unsigned(">=", ordinal, ir.Constant(I64, len(self.p.table)))
        with b.if_then(bad, likely=False):
            b.ret(self.error(ERR_ORDINAL, ordinal))
        return self._table_row(ordinal)

    def _table_row(self, ordinal):
        p = self.p
        width = len(p.table[0]) if p.table and p.table[0] else 1
        rows = [ir.Constant(ir.ArrayType(I64, width), list(r) or [0]) for r in p.table] or \
            [ir.Constant(ir.ArrayType(I64, width), [0])]
        g = ir.GlobalVariable(self.module, ir.ArrayType(rows[0].type, len(rows)), f"{self.fn.name}_table")
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(g.value_type, rows)
        return self.b.gep(g, [ir.Constant(I64, 0), ordinal, ir.Constant(I64, 0)], source_etype=g.value_type)

    def entry(self, k: int):
        return self.b.load(self.b.gep(self.row, [ir.Constant(I64, k)], source_etype=I64), typ=I64)

    def _alloc_arena(self) -> None:
        p, b = self.p, self.b
        if not p.arena:
            return
        size = ir.Constant(I64, (p.arena + 255) // 256 * 256)
        if self.gpu:
            self.arena = self.device_alloc(size)
        else:
            self.arena = self.native("aligned_alloc", PTR, [ir.Constant(I64, 64), size])
        self.fail_if(b.icmp_unsigned("==", self.arena, NULL), lambda: self.error(ERR_ALLOC, size))
        self.arena_live = True

    def advise_huge(self, ptr, nbytes: int) -> None:
        """``madvise`` the whole huge pages inside ``[ptr, ptr + nbytes)`` (result ignored)."""
        b = self.b
        page, advice = self.p.huge_page
        at = b.ptrtoint(ptr, I64)
        lo = b.and_(b.add(at, ir.Constant(I64, page - 1)), ir.Constant(I64, -page))
        hi = b.and_(b.add(at, ir.Constant(I64, nbytes)), ir.Constant(I64, -page))
        with b.if_then(b.icmp_unsigned(">", hi, lo)):
            self.native("madvise", I32, [b.inttoptr(lo, PTR), b.sub(hi, lo), ir.Constant(I32, advice)])

    def device_alloc(self, nbytes):
        """GPU memory from XLA's allocator (``XLA_FFI_DeviceMemory_Allocate``), for this call."""
        args = self.struct([ir.Constant(I64, 48), NULL, self.ctx, nbytes, ir.Constant(I64, XLA_ALIGN), NULL])
        self.check_xla(self.api_call(API_ALLOCATE, args))
        return self.b.load(self.b.gep(args, [ir.Constant(I64, 5)], source_etype=I64), typ=PTR)

    def _free_arena(self) -> None:
        if self.p.arena:
            self.free(self.arena, (self.p.arena + 255) // 256 * 256)

    def free(self, ptr, nbytes) -> None:
        if self.gpu:
            size = nbytes if isinstance(nbytes, ir.Value) else ir.Constant(I64, nbytes)
            self.api_call(API_FREE, self.struct([ir.Constant(I64, 40), NULL, self.ctx, size, ptr]))
        else:
            self.native("free", ir.VoidType(), [ptr])

    def zero(self, ptr, nbytes) -> None:
        n = nbytes if isinstance(nbytes, ir.Value) else ir.Constant(I64, nbytes)
        if self.gpu:
            self.check_cuda(self.native("cuMemsetD8Async", I32, [ptr, ir.Constant(I8, 0), n, self.stream]))
        else:
            self.b.call(self.module.declare_intrinsic("llvm.memset", [PTR, I64]),
                        [ptr, ir.Constant(I8, 0), n, ir.Constant(ir.IntType(1), 0)])

    def copy(self, dst, src, nbytes: int) -> None:
        if not nbytes:
            return
        n = ir.Constant(I64, nbytes)
        if self.gpu:
            self.check_cuda(self.native("cuMemcpyDtoDAsync", I32, [dst, src, n, self.stream]))
        else:
            self.b.call(self.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64]),
                        [dst, src, n, ir.Constant(ir.IntType(1), 0)])

    def to_host(self, dst, src, nbytes: int) -> None:
        """Copy device memory to the host and wait for the stream (GPU)."""
        n = ir.Constant(I64, nbytes)
        self.check_cuda(self.native("cuMemcpyDtoHAsync", I32, [dst, src, n, self.stream]))
        self.check_cuda(self.native("cuStreamSynchronize", I32, [self.stream]))

    # -- launches
    def _depth(self, level: Level, step: Launch, i: int):
        """One level's depth (capped by ``depth_cap``)."""
        b = self.b
        if level.const >= 0:
            d = ir.Constant(I64, level.const)
        elif self.gpu:
            word = self.at(self.arena, step.words + 8 * i)
            self.zero(word, 8)
            kernel = self.entry(self.p.natives["max_kernel"])
            grid = max(1, min(-(-level.count_size // CUDA_BLOCK), 1024))
            self.cuda_launch(kernel, grid, CUDA_BLOCK, [
                b.ptrtoint(self.ptrs[level.counts], I64), ir.Constant(I64, level.count_size),
                ir.Constant(I64, level.count_bytes), b.ptrtoint(word, I64)])
            host = b.alloca(I64)
            self.to_host(host, word, 8)
            d = b.load(host, typ=I64)
        else:
            d = b.call(self._max_fn(), [self.ptrs[level.counts], ir.Constant(I64, level.count_size),
                                        ir.Constant(I64, level.count_bytes)])
        for name in level.counted:
            self.count(name, 1)
        if self.p.depth_cap >= 0:
            cap = ir.Constant(I64, self.p.depth_cap)
            d = b.select(b.icmp_signed("<", d, cap), d, cap)
        return d

    def _max_fn(self):
        """``i64 max(ptr data, i64 n, i64 itemsize)``: the largest count, at least 0."""
        name = "qt_ffi_max"
        fn = self.module.globals.get(name)
        if fn is not None:
            return fn
        fn = ir.Function(self.module, ir.FunctionType(I64, [PTR, I64, I64]), name=name)
        fn.linkage = "internal"
        data, n, size = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(largest(b, fn, data, n, size, ir.Constant(I64, 0), ir.Constant(I64, 1)))
        return fn

    def _stack(self, step: Launch, workers):
        """``(block, stride, bytes)`` of this launch's adstack: per worker (``workers`` on
        the CPU, ``step.threads`` on a GPU) a header ``[level-0 depth, float bytes, int
        bytes]`` and the float and int stacks."""
        b = self.b
        depths = [self._depth(level, step, i) for i, level in enumerate(step.levels)]
        fbytes, ibytes = ir.Constant(I64, 0), ir.Constant(I64, 0)
        for d, level in zip(depths, step.levels):
            fbytes = b.add(fbytes, b.mul(d, ir.Constant(I64, level.float_bytes)))
            ibytes = b.add(ibytes, b.mul(d, ir.Constant(I64, level.int_bytes)))
        stride = b.add(ir.Constant(I64, STACK_HEADER), b.add(_round64(b, fbytes), _round64(b, ibytes)))
        if self.gpu:
            workers = ir.Constant(I64, step.threads)
        nbytes = b.mul(stride, workers)
        if self.gpu:   # interleaved: the threads' headers first, then their stacks word by
            # word; each thread finds its header STACK_HEADER bytes apart (qtrace.kernels.codegen)
            block = self.device_alloc(nbytes)
            if step.interleaved:
                stride = ir.Constant(I64, STACK_HEADER)
            kernel = self.entry(self.p.natives["header_kernel"])
            self.cuda_launch(kernel, max(1, -(-step.threads // CUDA_BLOCK)), CUDA_BLOCK, [
                b.ptrtoint(block, I64), stride, workers, depths[0], fbytes, ibytes])
        else:
            block = self.native("aligned_alloc", PTR, [ir.Constant(I64, 64), nbytes])
            with b.if_then(b.icmp_unsigned("==", block, NULL), likely=False):
                self.fail_with(self.error(ERR_ALLOC, nbytes))
            entry = b.block
            head, done = self.fn.append_basic_block("headers"), self.fn.append_basic_block("headers_done")
            b.branch(head)
            b.position_at_end(head)
            w = b.phi(I64)
            w.add_incoming(ir.Constant(I64, 0), entry)
            at = b.gep(block, [b.mul(w, stride)], source_etype=I8)
            for k, v in enumerate((depths[0], fbytes, ibytes)):
                b.store(v, b.gep(at, [ir.Constant(I64, k)], source_etype=I64))
            w1 = b.add(w, ir.Constant(I64, 1))
            w.add_incoming(w1, b.block)
            b.cbranch(b.icmp_signed("<", w1, workers), head, done)
            b.position_at_end(done)
        return block, stride, nbytes

    def cuda_launch(self, kernel, grid: int, block: int, params: list) -> None:
        """``cuLaunchKernel`` of ``kernel`` (a ``CUfunction``) on XLA's stream; ``params`` are
        i64 values (pointers as integers)."""
        b = self.b
        values = b.alloca(I64, size=ir.Constant(I64, len(params)))
        slots = b.alloca(PTR, size=ir.Constant(I64, len(params)))
        for i, v in enumerate(params):
            where = b.gep(values, [ir.Constant(I64, i)], source_etype=I64)
            b.store(v, where)
            b.store(where, b.gep(slots, [ir.Constant(I64, i)], source_etype=PTR))
        one = ir.Constant(I32, 1)
        self.check_cuda(self.native("cuLaunchKernel", I32, [
            b.inttoptr(kernel, PTR), ir.Constant(I32, grid), one, one, ir.Constant(I32, block), one, one,
            ir.Constant(I32, 0), self.stream, slots, NULL]))

    def launch(self, step: Launch) -> None:
        b = self.b
        status = (self.at(self.status, 16 * step.row) if step.row >= 0 else NULL)
        scratch, stride, stack_bytes = NULL, ir.Constant(I64, 0), None
        if step.scratch >= 0:
            scratch = self.at(self.arena, step.scratch)
            self.zero(scratch, step.scratch_bytes)
        workers, part = ir.Constant(I64, 1), step.extent // step.phases
        if not self.gpu and step.parallel:
            workers = self.native("workers", I64, [self.api, self.ctx, ir.Constant(I64, self.p.threads),
                                                   ir.Constant(I64, part)])
        if step.levels:
            scratch, stride, stack_bytes = self._stack(step, workers)
        kernel = self.entry(step.kernel)
        if self.gpu:
            params = [b.ptrtoint(self.ptrs[s], I64) for s in step.slots]
            params += [ir.Constant(I64, 0)] * step.by_value
            params += [b.ptrtoint(status, I64), b.ptrtoint(scratch, I64), stride,
                       ir.Constant(I64, step.extent)]
            self.cuda_launch(kernel, step.grid, CUDA_BLOCK, params)
        else:
            n = max(len(step.slots), 1)
            block = b.alloca(PTR, size=ir.Constant(I64, n))
            for i, s in enumerate(step.slots):
                b.store(self.ptrs[s], b.gep(block, [ir.Constant(I64, i)], source_etype=PTR))
            if step.parallel:   # each phase split over the pool, the phases in order
                fn = b.inttoptr(kernel, PTR)
                for ph in range(step.phases):
                    self.native("parallel_for", ir.VoidType(), [
                        self.api, self.ctx, fn, ir.Constant(I64, ph * part), ir.Constant(I64, part),
                        block, ir.Constant(I64, n), status, scratch, stride, workers])
            else:
                ty = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, PTR])
                b.call(b.inttoptr(kernel, ty.as_pointer()),
                       [ir.Constant(I64, 0), ir.Constant(I64, step.extent), block, status, scratch])
        if stack_bytes is not None:
            self.free(scratch, stack_bytes)

    def _check_status(self) -> None:
        """Read the status rows; a failed check calls the error callback with them."""
        b, p = self.b, self.p
        host = self.status
        if self.gpu:
            host = b.alloca(I64, size=ir.Constant(I64, 2 * p.rows))
            self.to_host(host, self.status, 16 * p.rows)
        failed = ir.Constant(I64, 0)
        for r in range(p.rows):
            failed = b.or_(failed, b.load(b.gep(host, [ir.Constant(I64, 2 * r)], source_etype=I64), typ=I64))
        with b.if_then(b.icmp_signed("!=", failed, ir.Constant(I64, 0)), likely=False):
            self.fail_with(self.error(ERR_CHECK, b.ptrtoint(host, I64)))


def largest(b: ir.IRBuilder, fn: ir.Function, data, n, size, first, step):
    """Emit the largest of elements ``first, first + step, ...`` below ``n`` of ``data``
    (integers of ``size`` bytes, 4 or 8), at least 0; the builder continues after it."""
    start = b.block
    loop, done = fn.append_basic_block("max_loop"), fn.append_basic_block("max_done")
    b.cbranch(b.icmp_signed("<", first, n), loop, done)
    b.position_at_end(loop)
    i, best = b.phi(I64), b.phi(I64)
    i.add_incoming(first, start)
    best.add_incoming(ir.Constant(I64, 0), start)
    wide = b.load(b.gep(data, [i], source_etype=I64), typ=I64)
    narrow = b.sext(b.load(b.gep(data, [i], source_etype=I32), typ=I32), I64)
    v = b.select(b.icmp_signed("==", size, ir.Constant(I64, 8)), wide, narrow)
    nb = b.select(b.icmp_signed(">", v, best), v, best)
    i1 = b.add(i, step)
    i.add_incoming(i1, loop)
    best.add_incoming(nb, loop)
    b.cbranch(b.icmp_signed("<", i1, n), loop, done)
    b.position_at_end(done)
    out = b.phi(I64)
    out.add_incoming(ir.Constant(I64, 0), start)
    out.add_incoming(nb, loop)
    return out


def compile_handler(program: Program, name: str) -> int:
    """Emit and compile the handler of ``program`` as the C function ``name``; its address
    (the compiled code stays loaded for the life of the process)."""
    module = llvm_cpu.new_module(name)
    em = _Emitter(program, module, name)
    em.emit()
    fns, _ = llvm_cpu.compile_module(module, [name], counted=False)
    return ctypes.cast(fns[name], ctypes.c_void_p).value


MAX_KERNEL, HEADER_KERNEL = "qt_ffi_max", "qt_ffi_headers"


def gpu_helpers(arch: str) -> bytes:
    """PTX of the two GPU kernels a handler uses to size an adstack:
    ``qt_ffi_max(counts, n, itemsize, out)`` (the largest of ``n`` counts of 4 or 8
    bytes, by atomic max into the zeroed word ``out``) and
    ``qt_ffi_headers(base, stride, workers, depth, float bytes, int bytes)`` (writes each
    worker's stack header, with no float heap: ``qtrace.graph.instrs.HEAP_ROWS``).
    Parameters are 64-bit integers."""
    from . import llvm_nvptx
    module = llvm_nvptx.new_module("qt_ffi_helpers", arch)

    def kernel(name, n):
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64] * n), name=name)
        fn.calling_convention = "ptx_kernel"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        return fn, b, *gpu_thread(b)

    fn, b, tid, step = kernel(MAX_KERNEL, 4)
    counts, n, size, out = fn.args
    result = largest(b, fn, b.inttoptr(counts, PTR), n, size, tid, step)
    b.atomic_rmw("max", b.inttoptr(out, PTR), result, "monotonic")
    b.ret_void()

    fn, b, tid, _ = kernel(HEADER_KERNEL, 6)
    base, stride, workers, *header = fn.args
    with b.if_then(b.icmp_signed("<", tid, workers)):
        at = b.gep(b.inttoptr(base, PTR), [b.mul(tid, stride)], source_etype=I8)
        # (then no float heap: a row per thread, none claimed; qtrace.kernels.codegen)
        for k, v in enumerate([*header, *[ir.Constant(I64, 0)] * 3]):
            b.store(v, b.gep(at, [ir.Constant(I64, k)], source_etype=I64))
    b.ret_void()
    return llvm_nvptx.compile_module(module, [MAX_KERNEL, HEADER_KERNEL], arch)
