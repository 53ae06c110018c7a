"""Native XLA FFI handlers for compiled plans: which plans get one, and binding them.

:func:`native_handler` turns the compiled plan of one ``qt.jit`` call signature (one per
device: on GPUs, the plan traced and loaded on each GPU XLA may call it on) into a
:class:`~qtrace.kernels.ffi_entry.Program` and compiles its handler
(:mod:`qtrace.kernels.ffi_entry`): a call then runs no Python and takes no GIL.

Plans take the native path when every step is a kernel and each adstack's depth is a
constant or the largest element of a buffer the plan holds (a count a forward loop
recorded, a count a task computed, a 0-d count). Plans keep the Python handler
(:mod:`qtrace.devices.xla_ffi`) when they have a library step (matrix products, FFTs,
linear algebra, a nested jitted call), a view step, a depth bounded from the extremes of
the inputs (cached per data version on the Python path), results that are Python values,
or writes into their arguments; :func:`native_handler` returns the reason instead.

Memory: arguments are read in place and results written in place (destination passing:
the kernel that computes an output writes XLA's result buffer); an output that is an
input, a constant or a second copy of another output is copied. Temporaries, the status
rows and split-reduction scratch share one arena per call, packed by liveness.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import threading

import numpy as np

from ..config import config
from ..kernels import ffi_entry, ffi_parallel
from ..kernels.ffi_entry import Copy, Launch, Level, Program
from ..stats import native_address
from . import adstack, cpu, host_pages, xla_ffi
from .runtime import KernelStep

_count = itertools.count()
_lock = threading.Lock()
_helpers: dict = {}     # GPU index -> (module, max CUfunction, header CUfunction)
_COUNTED = ("ffi_native_calls", "kernel_launches", "tasks_run")
_keep: list = []        # callbacks, constant buffers and modules handlers use: kept for the process


def _align(n: int, a: int = 256) -> int:
    return (n + a - 1) // a * a


class _Arena:
    """Offsets of temporaries in one block, packed by the steps each is live over."""

    def __init__(self):
        self.placed: list = []   # (first, last, offset, nbytes)
        self.size = 0

    def place(self, first: int, last: int, nbytes: int) -> int:
        nbytes = _align(max(nbytes, 1))
        busy = sorted((o, o + n) for f, la, o, n in self.placed if f <= last and first <= la)
        offset = 0
        for lo, hi in busy:
            if offset + nbytes <= lo:
                break
            offset = max(offset, hi)
        self.placed.append((first, last, offset, nbytes))
        self.size = max(self.size, offset + nbytes)
        return offset


def _why_not(entry, n_rets: int) -> str | None:
    plan = entry.plan
    if plan is None:
        return "the function computes nothing"
    if entry.mutated:
        return "the function writes into its arguments"
    if any(k != "tensor" for k in entry.out_kinds) or len(plan.outputs) != n_rets:
        return "a result is not an array"
    for step in plan.unsequenced:
        if type(step) is not KernelStep:
            runner = getattr(step, "runner", None)
            return f"the plan has a {getattr(runner, 'prim', type(step).__name__)} step"
        if step.stack is not None and any(src.const is None and (src.bounded is not None or src.slot is None)
                                          for src, _, _ in step.stack.sources):
            return "an adstack depth is bounded from the extremes of the inputs"
        if step.phases != 1 and plan.rt.kind != "cpu":
            return "a phased launch"
    return None


def _levels(step, plan) -> tuple:
    """The adstack levels of a launch, each counted in ``qt.stats()`` as the Python path
    counts it: a constant or a 0-d count read on the host, recorded loop counts, other
    counts reduced on every call (the native path keeps no cache of reductions)."""
    out = []
    for src, fb, ib in step.stack.sources:
        if src.const is not None:
            out.append(Level(src.const, -1, 0, 0, fb, ib, _names("host")))
        else:
            shape, dtype = plan.slot_meta[src.slot]
            if dtype.itemsize not in (4, 8) or dtype.kind not in "iu":
                raise _Unsupported(f"an adstack count of dtype {dtype}")
            path = "host" if src.scalar else "recorded" if src.recorded else "dispatch"
            out.append(Level(-1, src.slot, math.prod(shape), dtype.itemsize, fb, ib, _names(path)))
    return tuple(out)


def _names(path: str) -> tuple:
    return tuple(name for name, _ in adstack.PATHS[path])


class _Unsupported(Exception):
    pass


def _natives(gpu: bool) -> dict:
    if gpu:
        lib = ctypes.CDLL("libcuda.so.1")
        names = {"cuLaunchKernel": "cuLaunchKernel", "cuMemsetD8Async": "cuMemsetD8Async",
                 "cuMemcpyDtoDAsync": "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoHAsync": "cuMemcpyDtoHAsync_v2",
                 "cuStreamSynchronize": "cuStreamSynchronize", "cuCtxGetDevice": "cuCtxGetDevice"}
    else:
        lib = ctypes.CDLL(None)
        names = {"aligned_alloc": "aligned_alloc", "free": "free"}
    try:
        out = {k: ctypes.cast(getattr(lib, v), ctypes.c_void_p).value for k, v in names.items()}
    except AttributeError as exc:
        raise _Unsupported(f"the C library lacks {exc}") from None
    if not gpu:
        out.update(ffi_parallel.functions())
    return out


def _gpu_helpers(index: int) -> tuple:
    """The adstack helper kernels loaded on GPU ``index`` (loaded once)."""
    with _lock:
        got = _helpers.get(index)
        if got is None:
            import cupy

            from ..graph.device import Device
            from ..kernels.target import target_for
            arch = target_for(Device(f"cuda:{index}")).arch
            ptx = ffi_entry.gpu_helpers(arch)
            with cupy.cuda.Device(index):
                module = cupy.cuda.function.Module()
                module.load(ptx)
                got = _helpers[index] = (module, module.get_function(ffi_entry.MAX_KERNEL).ptr,
                                         module.get_function(ffi_entry.HEADER_KERNEL).ptr)
        return got


def _error_callback(plan, graph, n_args: int, n_rets: int):
    """The handler's way back into Python on failure: an ``XLA_FFI_Error`` carrying
    qtrace's message (the failed check named by op, kernel and recording line)."""
    def on_error(frame, code, detail):
        frame = ctypes.cast(frame, ctypes.POINTER(xla_ffi.CallFrame)).contents
        try:
            if code == ffi_entry.ERR_CHECK:
                rows = (ctypes.c_int64 * (2 * len(plan.checks))).from_address(detail)
                plan.check(np.array(rows, np.int64), graph)
                raise RuntimeError("a check failed without a report")   # pragma: no cover
            if code == ffi_entry.ERR_FRAME:
                raise TypeError(f"the custom call passed {detail >> 32} arguments and {detail & 0xFFFFFFFF} "
                                f"results; its trace has {n_args} and {n_rets}")
            if code == ffi_entry.ERR_ALLOC:
                raise MemoryError(f"could not allocate {detail} bytes for the call's temporaries")
            if code == ffi_entry.ERR_ORDINAL:
                raise RuntimeError(f"XLA device ordinal {detail} has no qtrace kernels loaded")
            raise RuntimeError(f"a CUDA driver call failed with error {detail}")
        except BaseException as exc:  # noqa: BLE001 - every failure becomes XLA's error
            return xla_ffi._error(frame, exc)
    cb = ffi_entry.ERROR(on_error)
    return cb, ctypes.cast(cb, ctypes.c_void_p).value


def native_handler(entries: list, n_args: int, n_rets: int, platform: str):
    """``(handler, None)``: a native FFI handler (a ctypes function pointer to keep alive)
    for the plan of ``entries`` (``qt.jit`` traces of one signature: one on the CPU, one per
    GPU in ordinal order); or ``(None, reason)`` when the plan keeps the Python handler."""
    entry = entries[0]
    why = _why_not(entry, n_rets)
    if why is not None:
        return None, why
    try:
        program, keep = _program(entries, n_args, n_rets, platform.lower() == "cuda")
    except _Unsupported as exc:
        return None, str(exc)
    name = f"qt_ffi_handler_{next(_count)}"
    address = ffi_entry.compile_handler(program, name)
    handler = ffi_entry.HANDLER(address)
    with _lock:
        _keep.append((handler, keep))
    return handler, None


def _program(entries: list, n_args: int, n_rets: int, gpu: bool) -> tuple:
    entry = entries[0]
    plan = entry.plan
    steps = plan.unsequenced
    n_slots, n_leaves = len(plan.slot_meta), plan.n_leaves
    natives = _natives(gpu)
    keep: list = []
    table: list = [[] for _ in entries]

    def column(values: list) -> int:
        for row, v in zip(table, values):
            row.append(int(v))
        return len(table[0]) - 1

    slots: list = [None] * (n_slots + n_rets)
    for i in range(n_leaves):
        src = entry.bind[i]
        if src >= 0:
            slots[i] = ("arg", src)
        else:
            bufs = [e.captured[-src - 1] for e in entries]
            keep.append(bufs)
            slots[i] = ("table", column([b.data.ptr if gpu else cpu.pointer(b) for b in bufs]))
    written = {s for step in steps for s in step.slots if s >= n_leaves}
    copies: list = []
    for j, (kind, v) in enumerate(plan.outputs):
        ret = n_slots + j
        slots[ret] = ("ret", j)
        if kind == "slot":
            shape, dtype = plan.slot_meta[v]
            nbytes = math.prod(shape) * dtype.itemsize
            if v in written and slots[v] is None:
                slots[v] = ("ret", j)   # the kernel writes XLA's result buffer
            elif nbytes:
                copies.append(Copy(ret, v, nbytes))
        else:   # a constant result: copied from a buffer holding it
            if gpu:
                import cupy
                bufs = []
                for e in entries:
                    with cupy.cuda.Device(e.plan.device.index):
                        bufs.append(cupy.full(v.shape, v.params[0], v.dtype))
            else:
                bufs = [np.full(v.shape, v.params[0], v.dtype)]
            keep.append(bufs)
            const = len(slots)
            slots.append(("table", column([b.data.ptr if gpu else cpu.pointer(b) for b in bufs])))
            if bufs[0].nbytes:
                copies.append(Copy(ret, const, bufs[0].nbytes))
    # temporaries and per-launch scratch: packed by liveness (the copies run last)
    arena = _Arena()
    live: dict = {}
    for k, step in enumerate(steps):
        counts = [src.slot for src, _, _ in step.stack.sources if src.const is None] if step.stack else []
        for s in [*step.slots, *counts]:   # (an adstack's counts are read when it is sized)
            first, _ = live.get(s, (k, k))
            live[s] = (first, k)
    end = len(steps)
    for c in copies:
        live[c.src] = (live.get(c.src, (end, end))[0], end)
    for s, (first, last) in live.items():
        if slots[s] is None:
            shape, dtype = plan.slot_meta[s]
            slots[s] = ("temp", arena.place(first, last, math.prod(shape) * dtype.itemsize))
    slots = [s if s is not None else ("none", 0) for s in slots]
    status = arena.place(0, end, 16 * len(plan.checks)) if plan.checks else -1
    launches = []
    for k, step in enumerate(steps):
        levels = _levels(step, plan) if step.stack is not None else ()
        scratch = arena.place(k, k, step.scratch) if step.scratch else -1
        words = arena.place(k, k, 8 * len(levels)) if gpu and levels else -1
        kernels = [e.plan.unsequenced[k].kernel for e in entries]
        if gpu:
            kern = kernels[0]
            threads = min(-(-step.extent // kern.BLOCK) * kern.BLOCK, _thread_cap()) if levels else 0
            if kern.BLOCK != ffi_entry.CUDA_BLOCK:
                raise _Unsupported(f"a GPU block of {kern.BLOCK} threads")
            grid = kern.grid(step.extent, threads or None)
            address = column([kn.function.ptr for kn in kernels])
        else:
            threads, grid = 1, 1
            address = column([ctypes.cast(kn, ctypes.c_void_p).value for kn in kernels])
        launches.append(Launch(address, step.extent, tuple(step.slots), step.row, scratch, step.scratch,
                               levels, words, grid, threads, step.parallel and not gpu, step.phases,
                               step.stack is not None and step.stack.interleaved, len(step.by_value)))
    if gpu and any(s.levels for s in launches):
        helpers = [_gpu_helpers(e.plan.device.index) for e in entries]
        keep.append(helpers)
        natives["max_kernel"] = column([h[1] for h in helpers])
        natives["header_kernel"] = column([h[2] for h in helpers])
    cb, natives["error"] = _error_callback(plan, entry.graph, n_args, n_rets)
    keep.append(cb)
    huge: list = []
    advise = None if gpu else host_pages.madvise_address()
    if advise is not None:   # XLA's fresh result mappings, and the arena, before writing them
        natives["madvise"] = advise
        for j, (kind, v) in enumerate(plan.outputs):
            shape, dtype = plan.slot_meta[v] if kind == "slot" else (v.shape, v.dtype)
            if math.prod(shape) * dtype.itemsize >= host_pages.MIN_BYTES:
                huge.append((j, math.prod(shape) * dtype.itemsize))
        if arena.size >= host_pages.MIN_BYTES:
            huge.append((-1, arena.size))
    cap = config.adstack_max_depth
    program = Program("cuda" if gpu else "cpu", n_args, n_rets, tuple(slots), arena.size, status,
                      len(plan.checks), tuple(launches) + tuple(copies), -1 if cap is None else int(cap),
                      config.num_threads,
                      {n: native_address(n) for n in _COUNTED + tuple(
                          name for pairs in adstack.PATHS.values() for name, _ in pairs)},
                      tuple(tuple(r) for r in table), natives, tuple(huge),
                      (host_pages.HUGE_PAGE, host_pages.MADV_HUGEPAGE))
    keep.append(entries)
    return program, keep


def _thread_cap() -> int:
    from .cuda import THREAD_CAP
    return THREAD_CAP
