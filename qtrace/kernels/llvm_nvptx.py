"""The CUDA back end: task IR to PTX through LLVM's NVPTX target, loaded by CuPy.

A task is lowered by the same code generator as on the CPU, under the NVPTX
:data:`~qtrace.kernels.lowering.NVPTX` lowering (flat domain, no lanes, no host abort
flag, libdevice math), into an internal, always-inlined body
``body(i64 start, i64 end, ptr args, ptr status, ptr scratch)``. The kernel entry is a
grid-strided loop over the task's flat extent that calls the body one element at a time
(a plain task's thread takes chunks of :data:`VECTOR` consecutive elements instead, read and
written by vector accesses, when its pointers are aligned: :func:`grid_entry`; a task
whose per-element loops run different trip counts for different elements takes its
elements in tiles sorted by trip count instead: :func:`_sorted_tiles`)::

    kernel(ptr a0, ..., ptr a{n-1}, i64 v0, ..., ptr status, ptr scratch, i64 stride, i64 extent)

Arguments are kernel parameters (no argument block in device memory to upload per
launch); the entry gathers them into an on-stack array that LLVM's scalar replacement
removes once the body is inlined. The 0-d arguments a task only reads
(:func:`qtrace.kernels.lowering.by_value_args`) have an 8-byte value parameter each after
the pointers: where the pointer is null the value is the parameter (a Python scalar of a
jitted call, never uploaded), else it is loaded once per thread; either way the body reads
it from a local copy that scalar replacement turns into a register. Thread ``t`` of the
grid owns ``scratch + t*stride`` (its adstack). Math calls go to libdevice (``__nv_sinf``
for float32, ``__nv_sin`` for float64), whose bitcode ships with the CUDA toolkit: it is
found through CuPy's CUDA path lookup (or ``CUDA_PATH``/``CUDA_HOME``), linked into each
module, internalized, and whatever a kernel does not call is removed by LLVM's optimiser.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import re
import threading

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from ..stats import bump
from . import loop_hints
from .intrinsics import declare, gpu_thread

TRIPLE = "nvptx64-nvidia-cuda"
I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
GLOBAL = ir.PointerType(addrspace=1)   # a pointer to global memory
BODY_SUFFIX = "_body"
LOCKSTEP_SUFFIX = "_lockstep"

_lock = threading.RLock()
_state: dict = {}


def _init() -> dict:
    if not _state:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _state["target"] = llvm.Target.from_triple(TRIPLE)
        _state["machines"] = {}
    return _state


def machine(arch: str):
    """The NVPTX target machine for ``arch`` (``"sm_90"``), one per architecture. Before
    sm_75 it emits PTX ISA 6.3 at least (LLVM's default there, 6.0 or older, lacks
    ``shfl.sync`` before sm_70 — split reductions combine warps with it — and
    ``activemask`` — a GPU adstack's heap rows are claimed per warp with it: LLVM refused
    to select them, and its error aborts the process)."""
    s = _init()
    tm = s["machines"].get(arch)
    if tm is None:
        older = int(arch.removeprefix("sm_").rstrip("a")) < 75
        tm = s["machines"][arch] = s["target"].create_target_machine(
            cpu=arch, features="+ptx63" if older else "", opt=3)
    return tm


def libdevice_path() -> str:
    """The libdevice bitcode (``nvvm/libdevice/libdevice*.bc``): under the CUDA toolkit CuPy
    uses, ``CUDA_PATH``/``CUDA_HOME``, ``/usr/local/cuda``, or the ``nvidia-cuda-nvcc`` pip
    package."""
    roots = []
    try:
        import cupy
        roots.append(cupy.cuda.get_cuda_path())
    except Exception:  # noqa: BLE001 - CuPy absent or without a toolkit: try the environment
        pass
    roots += [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    try:  # the pip package of the CUDA compiler (the `cuda` extra): nvidia/cuda_nvcc
        import nvidia.cuda_nvcc
        roots += list(nvidia.cuda_nvcc.__path__)
    except ImportError:
        pass
    for root in roots:
        if root:
            found = sorted(glob.glob(os.path.join(root, "nvvm", "libdevice", "libdevice*.bc")))
            if found:
                return found[-1]
    raise RuntimeError("qtrace cuda: libdevice (nvvm/libdevice/libdevice*.bc) was not found under "
                       f"the CUDA toolkit paths {[r for r in roots if r]}; install the CUDA toolkit "
                       "or set CUDA_PATH")


def libdevice_info() -> dict:
    """The libdevice file in use, as its name and a digest (part of the target key)."""
    s = _init()
    if "libdevice" not in s:
        path = libdevice_path()
        with open(path, "rb") as f:
            data = f.read()
        s["libdevice"] = data
        s["libdevice_id"] = {"libdevice": os.path.basename(path),
                             "libdevice_sha256": hashlib.sha256(data).hexdigest()[:16]}
    return s["libdevice_id"]


def versions() -> dict:
    return {"llvm": ".".join(map(str, llvm.llvm_version_info)), "llvmlite": llvmlite.__version__}


def new_module(name: str, arch: str) -> ir.Module:
    module = ir.Module(name=name)
    module.triple = TRIPLE
    module.data_layout = str(machine(arch).target_data)
    return module


BLOCK = 256         # threads per block of every launch (CudaKernel.BLOCK)
VECTOR = 4          # consecutive elements per thread per trip of a plain task (in lockstep)
BLOCKS_PER_SM = 32  # a grid-strided launch's blocks at most, per multiprocessor
MAX_GRID = 2**31 - 1   # blocks of a launch at most: a kernel of sorted tiles gets a block per tile
                       # (a block that finishes makes room for the next tile's, where grid-
                       # strided ones would wait at each next tile's barriers for their slowest warp)
SM_THREADS = 2048   # resident threads per multiprocessor (sm_50 and later)


def grid_entry(module: ir.Module, body: ir.Function, symbol: str, n_args: int,
               lockstep: ir.Function | None = None, aligned: bool = False,
               full_occupancy: bool = False, by_value: tuple = (),
               trips: ir.Function | None = None) -> ir.Function:
    """The kernel ``symbol``: a grid-strided loop calling ``body`` per flat element.

    ``lockstep``: the task's :data:`VECTOR` elements from ``start`` in lockstep
    (``qtrace.kernels.codegen.lower_lockstep``). Where every argument pointer is 16-byte
    aligned (one uniform test per thread), the thread runs :func:`_aligned_loop` over chunks
    of that many consecutive elements, whose loads and stores LLVM merges into vector
    accesses (``ld.global.v4.b32`` for float32: a quarter of the memory instructions, four
    times the bytes in flight), then the elements past the last whole chunk one per trip; a
    launch with an unaligned pointer (an offset view) goes one element per trip.

    ``aligned`` (without ``lockstep``): where every pointer is 16-byte aligned, the same
    loop of ``body`` per element runs in :func:`_aligned_loop`, where LLVM knows the
    alignment (a split reduction reads four neighbours per trip: ``split_reduce``). That
    function is named ``symbol`` + :data:`SEGMENTS_SUFFIX`: its vector loads stream
    (:func:`streaming_loads`).

    ``full_occupancy``: launch bounds asking ptxas for a whole multiprocessor of resident
    threads (at most 32 registers each), for split reductions: their grid is sized to fill
    the GPU once, and a block that does not fit would run in a second wave, alone.

    ``by_value``: ``(argument index, bytes)`` of each argument that also has a value
    parameter (see the module docstring).

    ``trips`` (a task's trip count function, ``qtrace.kernels.codegen.lower_trips``): the
    elements go in tiles of a block's threads, each tile sorted by trip count before its
    elements are run (:func:`_sorted_tiles`)."""
    for inner in (body, lockstep, trips):
        if inner is None:
            continue
        inner.linkage = "internal"
        inner.attributes.add("alwaysinline")
    k = len(by_value)
    fn = ir.Function(module, ir.FunctionType(
        ir.VoidType(), [PTR] * n_args + [I64] * k + [PTR, PTR, I64, I64]), name=symbol)
    fn.calling_convention = "ptx_kernel"
    ptrs = list(fn.args[:n_args])
    status, scratch, stride, extent = fn.args[n_args + k:]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    # (allocas first, in the entry block: where scalar replacement looks for them)
    array = b.alloca(ir.ArrayType(PTR, max(n_args, 1)))
    copies = [_scalar_copy(b, size) for _, size in by_value]
    values = [_given_or_loaded(b, fn, ptrs[i], v, size)
              for (i, size), v in zip(by_value, fn.args[n_args:n_args + k])]
    held = dict(zip((i for i, _ in by_value), copies))
    for copy, value, (_, size) in zip(copies, values, by_value):
        _hold(b, copy, value, size)
    args = _argument_array(b, [held.get(i, p) for i, p in enumerate(ptrs)], array)
    tid, step = gpu_thread(b)
    mine = b.gep(scratch, [b.mul(tid, stride)], source_etype=ir.IntType(8))
    if trips is not None:
        _sorted_tiles(b, body, trips, [args, status, mine], extent, symbol)
        b.ret_void()
        module.add_named_metadata("nvvm.annotations", [   # (its tiles are a block of BLOCK)
            fn, ir.MetaDataString(module, "maxntidx"), ir.Constant(I32, BLOCK)])
        return fn
    loop = fn.append_basic_block("loop")
    done = fn.append_basic_block("done")
    first, came_from = tid, b.block
    if lockstep is not None or aligned:
        width = VECTOR if lockstep is not None else 1
        vectored = fn.append_basic_block("vectored")
        strided = fn.append_basic_block("strided")
        bits = ir.Constant(I64, 0)
        for i, p in enumerate(ptrs):
            if i not in held:
                bits = b.or_(bits, b.ptrtoint(p, I64))
        b.cbranch(b.icmp_unsigned("==", b.and_(bits, ir.Constant(I64, 15)), ir.Constant(I64, 0)),
                  vectored, strided)
        b.position_at_end(vectored)
        name = symbol + ("_aligned" if lockstep is not None else SEGMENTS_SUFFIX)
        b.call(_aligned_loop(module, lockstep or body, name, n_args, width, by_value),
               [b.addrspacecast(p, GLOBAL) for i, p in enumerate(ptrs) if i not in held]
               + values + [status, mine, tid, step, extent])
        tail = b.add(b.and_(extent, ir.Constant(I64, -width)), tid)   # (width 1: none)
        b.cbranch(b.icmp_signed("<", tail, extent), loop, done)
        b.position_at_end(strided)
        came_from = strided
    b.cbranch(b.icmp_signed("<", first, extent), loop, done)
    b.position_at_end(loop)
    j = b.phi(I64)
    j.add_incoming(first, came_from)
    if lockstep is not None or aligned:
        j.add_incoming(tail, vectored)
    b.call(body, [j, b.add(j, ir.Constant(I64, 1), flags=["nsw"]), args, status, mine])
    nxt = b.add(j, step)
    j.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, extent), loop, done)
    b.position_at_end(done)
    b.ret_void()
    if full_occupancy:
        for key, value in (("maxntidx", CudaKernel.BLOCK), ("minctasm", SM_THREADS // CudaKernel.BLOCK)):
            module.add_named_metadata("nvvm.annotations", [
                fn, ir.MetaDataString(module, key), ir.Constant(I32, value)])
    return fn


TRIPS_SUFFIX = "_trips"   # a task's trip count function (codegen.lower_trips)
TILE_ROUNDS = 4           # elements per thread of a sorted tile (a tile: TILE_ROUNDS x BLOCK)
TILE_KEYS = 64            # trip count classes a sorted tile tells apart (:func:`trip_class`)
ORDER_SUFFIX = "_order"   # a sorted kernel's shared table of its tile's order (named in its PTX)


def _sorted_tiles(b: ir.IRBuilder, body: ir.Function, trips: ir.Function, rest: list,
                  extent: ir.Value, symbol: str) -> None:
    """The elements of ``[0, extent)`` in tiles of ``rounds`` x :data:`BLOCK`, tile ``k`` to
    block ``k mod blocks``, each tile sorted by the elements' trip counts and dealt out to
    the block's threads in that order, ``rounds`` elements each, then ``body(j, j + 1,
    *rest)`` for each element a thread was dealt. ``rounds``, at most :data:`TILE_ROUNDS`,
    is what the launch's grid asks for (``ceil(extent / threads)``: :meth:`CudaKernel.grid`
    gives a small launch a block per :data:`BLOCK` elements, so that it has the threads to
    fill the GPU, and a large one a block per tile of :data:`TILE_ROUNDS` x :data:`BLOCK`).

    A warp runs its per-element loop as long as its longest lane: with trip counts spread
    evenly over 0..64, a warp of neighbours runs 62 trips on average for a mean of 32; in a
    sorted tile a warp's lanes have like counts. In round ``r`` warp ``w`` takes the
    ``8r + w``-th run of 32 elements in the tile's order, so that every warp of the block gets
    short and long ones (the block waits for its slowest warp before its next tile). The
    sort is a counting sort by :func:`trip_class` in shared memory (a histogram by atomic
    adds, its prefix sums, each element's place), four barriers per tile; the order within
    a class is the atomics' (no element depends on which thread runs it). All of a block's
    threads take part in each of its tiles (elements past ``extent`` too, counted as 0
    trips and not run), so every barrier is reached by all of them."""
    module = b.module
    counts = _shared(module, symbol + "_classes", TILE_KEYS)
    starts = _shared(module, symbol + "_starts", TILE_KEYS)
    order = _shared(module, symbol + ORDER_SUFFIX, TILE_ROUNDS * BLOCK)
    barrier = declare(module, "llvm.nvvm.barrier0", ir.VoidType(), [])

    def cell(table, i):
        return b.gep(table, [ir.Constant(I32, 0), i], inbounds=True)

    def sreg(name):
        return b.call(declare(module, f"llvm.nvvm.read.ptx.sreg.{name}", I32, []), [])

    def least(x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)
    lane = sreg("tid.x")
    threads = b.mul(b.zext(sreg("nctaid.x"), I64), ir.Constant(I64, BLOCK))
    rounds = least(b.udiv(b.add(extent, b.sub(threads, ir.Constant(I64, 1))), threads),
                   ir.Constant(I64, TILE_ROUNDS))   # (>= 1 where extent > 0: tiles start below it)
    first = b.mul(b.zext(sreg("ctaid.x"), I64), b.mul(rounds, ir.Constant(I64, BLOCK)))
    step = b.mul(threads, rounds)
    with b.goto_entry_block():
        slot = b.alloca(I64)
    fn = b.function
    tile = fn.append_basic_block("tile")
    done = fn.append_basic_block("tiles_done")
    pre = b.block
    b.cbranch(b.icmp_signed("<", first, extent), tile, done)
    b.position_at_end(tile)
    base = b.phi(I64)
    base.add_incoming(first, pre)
    few = b.icmp_unsigned("<", lane, ir.Constant(I32, TILE_KEYS))
    with b.if_then(few):
        b.store(ir.Constant(I32, 0), cell(counts, lane))
    mine = [b.add(lane, ir.Constant(I32, r * BLOCK)) for r in range(TILE_ROUNDS)]  # (in the tile)
    used = [b.icmp_signed("<", ir.Constant(I64, r), rounds) for r in range(TILE_ROUNDS)]
    keys = []
    for at, live in zip(mine, used):   # (a round the tile uses)
        j = b.add(base, b.zext(at, I64))
        b.store(ir.Constant(I64, 0), slot)
        with b.if_then(b.and_(live, b.icmp_signed("<", j, extent))):
            b.call(trips, [j, b.add(j, ir.Constant(I64, 1)), *rest[:2], slot])
        keys.append(trip_class(b, b.load(slot, typ=I64)))
    b.call(barrier, [])
    ranks = []
    for key, live in zip(keys, used):
        came = b.block
        with b.if_then(live):
            added = b.atomic_rmw("add", cell(counts, key), ir.Constant(I32, 1), "monotonic")
            inside = b.block
        rank = b.phi(I32)
        rank.add_incoming(ir.Constant(I32, 0), came)
        rank.add_incoming(added, inside)
        ranks.append(rank)
    b.call(barrier, [])
    with b.if_then(few):   # class lane's first place: the sizes of the classes below it
        below = ir.Constant(I32, 0)
        for k in range(TILE_KEYS - 1):
            n = b.load(cell(counts, ir.Constant(I32, k)), typ=I32)
            below = b.add(below, b.select(b.icmp_unsigned(">", lane, ir.Constant(I32, k)),
                                          n, ir.Constant(I32, 0)))
        b.store(below, cell(starts, lane))
    b.call(barrier, [])
    for at, key, rank, live in zip(mine, keys, ranks, used):
        with b.if_then(live):
            b.store(at, cell(order, b.add(b.load(cell(starts, key), typ=I32), rank)))
    b.call(barrier, [])
    deal = fn.append_basic_block("tile_round")
    after = fn.append_basic_block("tile_done")
    came = b.block
    b.branch(deal)
    b.position_at_end(deal)
    r = b.phi(I32)
    r.add_incoming(ir.Constant(I32, 0), came)
    j = b.add(base, b.zext(b.load(cell(order, b.add(b.mul(r, ir.Constant(I32, BLOCK)), lane)),
                                  typ=I32), I64))
    with b.if_then(b.icmp_signed("<", j, extent)):
        b.call(body, [j, b.add(j, ir.Constant(I64, 1)), *rest])
    r_next = b.add(r, ir.Constant(I32, 1))
    r.add_incoming(r_next, b.block)
    b.cbranch(b.icmp_signed("<", b.zext(r_next, I64), rounds), deal, after)
    b.position_at_end(after)
    nxt = b.add(base, step)
    base.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, extent), tile, done)
    b.position_at_end(done)


def trip_class(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """The class (i32, ``0 .. TILE_KEYS - 1``) of trip count ``n`` (i64) in a sorted tile:
    ``n`` itself below 32 (a negative count as 0), then four classes per power of two
    (32-39, 40-47, 48-55, 56-63, 64-79, ...), the last one every count from 7168 up: the
    order of the classes is the order of the counts."""
    zero = ir.Constant(I64, 0)
    n = b.select(b.icmp_signed("<", n, zero), zero, n)
    ctlz = declare(b.module, "llvm.ctlz.i64", I64, [I64, ir.IntType(1)])
    top = b.sub(ir.Constant(I64, 63), b.call(ctlz, [b.or_(n, ir.Constant(I64, 32)),
                                                    ir.Constant(ir.IntType(1), 0)]))  # >= 5
    quarter = b.and_(b.lshr(n, b.sub(top, ir.Constant(I64, 2))), ir.Constant(I64, 3))
    big = b.add(ir.Constant(I64, 32), b.add(b.shl(b.sub(top, ir.Constant(I64, 5)),
                                                  ir.Constant(I64, 2)), quarter))
    last = ir.Constant(I64, TILE_KEYS - 1)
    big = b.select(b.icmp_signed(">", big, last), last, big)
    return b.trunc(b.select(b.icmp_signed("<", n, ir.Constant(I64, 32)), n, big), I32)


def _shared(module: ir.Module, name: str, size: int) -> ir.GlobalVariable:
    """A block's ``size`` int32 words of shared memory (``addrspace(3)``)."""
    ty = ir.ArrayType(I32, size)
    table = ir.GlobalVariable(module, ty, name, addrspace=3)
    table.linkage = "internal"
    table.initializer = ir.Constant(ty, ir.Undefined)
    table.align = 4
    return table


def _scalar_copy(b: ir.IRBuilder, size: int) -> ir.Value:
    """A local ``size``-byte slot for a by-value argument (an alloca of the function's
    entry block, where scalar replacement finds it)."""
    slot = b.alloca(ir.IntType(8 * size))
    slot.align = size
    return slot


def _hold(b: ir.IRBuilder, copy: ir.Value, value: ir.Value, size: int) -> None:
    """Store a by-value argument's bits (an i64) in its ``size``-byte local copy."""
    b.store(b.trunc(value, ir.IntType(8 * size)) if size < 8 else value, copy)


def _given_or_loaded(b: ir.IRBuilder, fn: ir.Function, ptr: ir.Value, value: ir.Value,
                     size: int) -> ir.Value:
    """A by-value argument's bits as an i64: ``value`` where ``ptr`` is null, else the
    ``size`` bytes at ``ptr`` (a global load, zero-extended); the builder ends in the join."""
    start = b.block
    load = fn.append_basic_block("load_arg")
    join = fn.append_basic_block("arg")
    b.cbranch(b.icmp_unsigned("==", b.ptrtoint(ptr, I64), ir.Constant(I64, 0)), join, load)
    b.position_at_end(load)
    loaded = b.load(b.addrspacecast(ptr, GLOBAL), typ=ir.IntType(8 * size))
    loaded.align = size
    loaded = b.zext(loaded, I64) if size < 8 else loaded
    b.branch(join)
    b.position_at_end(join)
    phi = b.phi(I64)
    phi.add_incoming(value, start)
    phi.add_incoming(loaded, load)
    return phi


def _argument_array(b: ir.IRBuilder, ptrs: list, block: ir.Value | None = None) -> ir.Value:
    """The body's argument array: ``ptrs`` in an on-stack array (removed by LLVM's scalar
    replacement once the body is inlined), ``block`` if given (an alloca made in the entry
    block earlier), else one allocated here."""
    if block is None:
        block = b.alloca(ir.ArrayType(PTR, max(len(ptrs), 1)))
    for i, p in enumerate(ptrs):
        b.store(p, b.gep(block, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True))
    return b.bitcast(block, PTR)


def _aligned_loop(module: ir.Module, callee: ir.Function, name: str, n_args: int,
                  width: int, by_value: tuple = ()) -> ir.Function:
    """``void loop(ptr addrspace(1) align 16 a0, ..., i64 v0, ..., ptr status, ptr mine,
    i64 tid, i64 step, i64 extent)``: thread ``tid`` calls ``callee`` on the units ``tid,
    tid + step, ...`` of ``width`` consecutive elements (``callee(u * width, (u + 1) *
    width, ...)``) below ``extent``. The pointers are those of the arguments not in
    ``by_value``, whose values (``v0, ...``) follow them, held in local copies.

    A function of its own (not inlined), so that the alignment its caller tested is a fact
    about its parameters; they are global pointers, so that the accesses stay ``ld.global``
    after the callee's generic pointers are inferred back to them, and each carries an
    assumption of its alignment that LLVM's load/store vectorizer sees through the
    address-space cast."""
    k = len(by_value)
    fn = ir.Function(module, ir.FunctionType(
        ir.VoidType(), [GLOBAL] * (n_args - k) + [I64] * k + [PTR, PTR, I64, I64, I64]),
        name=name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("convergent")   # (a split reduction's warp shuffles are in it)
    ptrs = iter(fn.args[:n_args - k])
    values = dict(zip((i for i, _ in by_value), zip(fn.args[n_args - k:n_args], (s for _, s in by_value))))
    status, mine, tid, step, extent = fn.args[n_args:]
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    assume = declare(module, "llvm.assume", ir.VoidType(), [ir.IntType(1)])
    generic = []
    for i in range(n_args):
        if i in values:
            value, size = values[i]
            copy = _scalar_copy(b, size)
            _hold(b, copy, value, size)
            generic.append(copy)
            continue
        p = next(ptrs)
        p.attributes.align = 16
        q = b.addrspacecast(p, PTR)   # (the caller tested the alignment; an assumption LLVM can see through)
        b.call(assume, [b.icmp_unsigned("==", b.and_(b.ptrtoint(q, I64), ir.Constant(I64, 15)),
                                         ir.Constant(I64, 0))])
        generic.append(q)
    args = _argument_array(b, generic)
    units = b.lshr(extent, ir.Constant(I64, width.bit_length() - 1))
    b.cbranch(b.icmp_signed("<", tid, units), loop, done)
    b.position_at_end(loop)
    u = b.phi(I64)
    u.add_incoming(tid, entry)
    at = b.mul(u, ir.Constant(I64, width), flags=["nuw", "nsw"])
    b.call(callee, [at, b.add(at, ir.Constant(I64, width), flags=["nuw", "nsw"]), args, status, mine])
    u_next = b.add(u, step)
    u.add_incoming(u_next, loop)
    b.cbranch(b.icmp_signed("<", u_next, units), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def compile_module(module: ir.Module, symbols: list, arch: str) -> bytes:
    """Link libdevice, optimise at O3 and emit PTX (ASCII bytes)."""
    with _lock:
        s = _init()
        tm = machine(arch)
        mod = llvm.parse_assembly(loop_hints.resolve(str(module), 1))
        if any(f.name.startswith("__nv_") for f in mod.functions if f.is_declaration):
            libdevice_info()
            lib = llvm.parse_bitcode(s["libdevice"])
            lib.triple, lib.data_layout = mod.triple, mod.data_layout
            mod.link_in(lib)
        keep = set(symbols)
        for f in mod.functions:
            if not f.is_declaration and f.name not in keep:
                f.linkage = "internal"
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        ptx = streaming_loads(without_integer_negation(tm.emit_assembly(mod)), arch)
        bump("compiles", len(symbols))
        return ptx.encode()


_INTEGER_NEGATION = re.compile(r"\b(abs|neg)\.s(16|32|64)(\s+)(%\w+),\s*(%\w+);")


def without_integer_negation(ptx: str) -> str:
    """``ptx`` with integer negations written as ``-x = ~x + 1`` and absolute values as
    ``max(~x + 1, x)``: ``neg.sN d, s;`` becomes ``not.bN d, s; add.sN d, d, 1;``.

    A workaround for ptxas (CUDA 13.0 at -O1 and above, sm_90; the driver's JIT too),
    which loses integer negations it folds into their users: ``min(min(-x, y), z)``
    became the three-input minimum of ``x, y, z`` (the negation dropped), and comparisons
    of ``-|x|`` (``abs.sN`` then ``neg.sN``) came out true for x = 0 and ±1 and false
    for the most negative x. Every form ptxas reads as a negation (``neg``, ``sub 0, x``,
    ``mul x, -1``, ``abs``) showed it; ``not`` plus ``add`` is compiled right (checked on
    thousands of random integer expressions against NumPy: ``tests/gpu``). LLVM's
    registers are assigned once, so ``d`` is never ``s``."""
    def rewrite(m):
        op, width, space, d, s = m.groups()
        if d == s:  # pragma: no cover - not emitted by LLVM
            raise RuntimeError(f"qtrace cuda: unexpected in-place integer {op} in PTX: {m.group(0)}")
        negate = f"not.b{width}{space}{d}, {s};\n\tadd.s{width}{space}{d}, {d}, 1;"
        return negate if op == "neg" else f"{negate}\n\tmax.s{width}{space}{d}, {d}, {s};"
    return _INTEGER_NEGATION.sub(rewrite, ptx)


SEGMENTS_SUFFIX = "_segments"   # a split reduction's aligned loop over its segments (grid_entry)
# (a definition: its parameters, then its body in braces; a declaration ends with ";")
_SEGMENTS = re.compile(r"^\.func\s+\w*" + SEGMENTS_SUFFIX + r"\s*\([^;{}]*\)\s*\{.*?^\}", re.M | re.S)


def streaming_loads(ptx: str, arch: str) -> str:
    """``ptx`` with the vector loads of split reductions' segment loops (functions named
    ``*`` + :data:`SEGMENTS_SUFFIX`) marked ``.L1::no_allocate``: each byte they read is read
    once, so the L1 need not keep it (sm_70 and later; PTX ISA 7.4). A 1e8 float32 sum's
    kernel on an H200: 108.6 -> 102.4 µs (CUB's 94); ``.nc`` alone changed nothing, and
    ``.L2::256B`` prefetching made it slower (113). LLVM's ``!nontemporal`` does not reach
    NVPTX loads, hence the rewrite of the text. Only where the PTX declares ISA 7.4 or later
    (LLVM's default for ``arch``: sm_89 and sm_90 get it, sm_80 and older do not; a driver
    refuses a qualifier newer than the file's ``.version``)."""
    version = re.search(r"^\.version\s+(\d+)\.(\d+)", ptx, re.M)
    if (int(arch.removeprefix("sm_").rstrip("a")) < 70 or version is None
            or (int(version[1]), int(version[2])) < (7, 4)):
        return ptx
    return _SEGMENTS.sub(lambda m: m[0].replace("ld.global.v", "ld.global.L1::no_allocate.v"), ptx)


# The parameter count of each kernel function launched (by its handle): the driver hands a
# CUDA graph's kernel node parameters back as addresses without their number, and every
# parameter of these kernels is 8 bytes (qtrace.devices.cuda_driver patches them).
PARAM_COUNTS: dict[int, int] = {}


class CudaKernel:
    """A loaded kernel: launches over a flat extent with the grid-strided entry.

    A launch calls ``cuLaunchKernel`` through the compiled extension (``cuda_launch`` in
    ``qtrace/graph/_native.c``: the parameters go from Python integers straight into the
    driver's call), or, without it, through CuPy's ``driver.launchKernel`` with the
    parameters in this thread's argument block (:func:`_argument_block`)."""

    BLOCK = BLOCK

    def __init__(self, module, function, max_blocks: int, fill: int = 0):
        self.module, self.function, self.max_blocks = module, function, max_blocks  # the module stays loaded
        self.fill = fill   # sorted tiles (_sorted_tiles): the threads that fill the GPU; 0: not sorted
        self.ptr = function.ptr
        _direct_launch()   # (bound once, before the first launch)

    def grid(self, extent: int, threads: int | None = None) -> int:
        """Blocks of a launch over ``extent`` elements (at most ``threads`` threads): a block
        per :data:`BLOCK` elements, or for sorted tiles a block per tile of as many rounds
        (at most :data:`TILE_ROUNDS`) as leave the GPU's threads filled."""
        per_block = self.BLOCK * (max(1, min(TILE_ROUNDS, extent // self.fill)) if self.fill else 1)
        cap = min(threads // self.BLOCK, self.max_blocks) if threads else self.max_blocks
        return max(1, min(-(-extent // per_block), cap))

    def launch(self, extent: int, pointers: list, status: int, scratch: int, stride: int,
               threads: int | None = None, stream=None) -> None:
        """Run over ``[0, extent)`` on ``stream`` (None: CuPy's current stream of the current
        device); ``threads`` caps the grid (each thread owns a scratch stride, so adstack
        memory is ``threads * stride``, independent of ``extent``)."""
        import cupy
        n = len(pointers) + 4
        PARAM_COUNTS[self.ptr] = n   # (a graph capturing it may patch them)
        if stream is None:
            stream = cupy.cuda.get_current_stream()
        grid = self.grid(extent, threads)
        direct = _direct[0]
        if direct is not None and n <= DIRECT_PARAMS:
            direct(self.ptr, grid, self.BLOCK, stream.ptr, *pointers, status, scratch, stride, extent)
            return
        values, params = _argument_block(n)
        values[:] = (*pointers, status, scratch, stride, extent)
        cupy.cuda.driver.launchKernel(self.ptr, grid, 1, 1, self.BLOCK, 1, 1, 0, stream.ptr, params, 0)


DIRECT_PARAMS = 256   # parameters a direct launch takes at most (LAUNCH_MAX_PARAMS in _native.c)
_direct: list = []


def _direct_launch():
    """The compiled extension's ``cuda_launch``, bound to the driver (``libcuda.so.1``), or
    None: no extension (``QTRACE_NATIVE=0``, not built) or no driver library found."""
    if not _direct:
        from ..graph import native
        mod = native.module()
        _direct[:] = [mod.cuda_launch if mod is not None and mod.bind_launch("libcuda.so.1") else None]
    return _direct[0]


_blocks = threading.local()


def _argument_block(n: int) -> tuple:
    """This thread's block of ``n`` 8-byte kernel parameters, and the address of the array
    of their addresses that ``cuLaunchKernel`` reads. The driver copies the values when the
    launch is queued (or captured into a CUDA graph), so the block may be rewritten as soon
    as the launch call returns; each thread has its own (no lock, no shared state)."""
    table = getattr(_blocks, "table", None)
    if table is None:
        table = _blocks.table = {}
    block = table.get(n)
    if block is None:
        values = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(values)
        addresses = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        block = table[n] = (values, ctypes.addressof(addresses), addresses)
    return block[0], block[1]


def load(payload: bytes, symbols: list, device_index: int) -> dict:
    """``{symbol: CudaKernel}`` from PTX ``payload``, loaded on GPU ``device_index``."""
    import cupy
    with cupy.cuda.Device(device_index) as dev:
        module = cupy.cuda.function.Module()
        module.load(payload)
        sms = dev.attributes["MultiProcessorCount"]
        kernels = {}
        for s in symbols:
            if (s + ORDER_SUFFIX).encode() in payload:   # sorted tiles (_sorted_tiles): a block each
                kernels[s] = CudaKernel(module, module.get_function(s), MAX_GRID, sms * SM_THREADS)
            else:
                kernels[s] = CudaKernel(module, module.get_function(s), sms * BLOCKS_PER_SM)
        return kernels
