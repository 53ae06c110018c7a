"""The CPU device: aligned NumPy buffers, a worker pool, and plan execution via ctypes.

A kernel call goes through ctypes, which releases the GIL, so worker threads run
kernel ranges truly in parallel. Ranges smaller than ``PARALLEL_MIN_WORK`` elements run
on the calling thread (handing parts to workers costs more than it saves there). The
workers are the compiled ``qtrace.devices._workers`` (:class:`NativeWorkerPool`: they spin
briefly between launches, so a launch costs microseconds, not a thread wake-up) where it is
built, else Python threads (:class:`WorkerPool`).
"""

from __future__ import annotations

import ctypes
import math
import os
import queue
import struct
import sys
import threading
import time

import numpy as np

from ..config import config
from ..kernels import interrupt

ALIGN = 64
SMALL = 1 << 14
PARALLEL_MIN_WORK = 1 << 15
PART = 64           # elements: long ranges are split at multiples of this (64-byte aligned for
LONG = PART << 12   # any type) from this length on (where that unbalances parts by < 0.1%)


class BufferPool:
    """Reuse of host buffers whose last array view has died.

    An allocation NumPy serves from fresh memory costs a page fault per 4 KiB on first
    touch, which for a kernel's output is a good part of a memory-bound kernel's time;
    this happens for large arrays (``mmap``) and, once glibc has trimmed its heap, for
    medium ones too. The pool keeps every raw block of at least ``MIN_BYTES`` it handed
    out; a block whose only references are the pool's own (no NumPy view alive: views
    keep their base alive) is free and is handed out again for a request of the same
    size. A request looks at the first ``SCAN`` blocks of its size (the ones reused most,
    likely still in cache), then at ``SCAN`` of the others, starting where the last such
    search stopped (so a program holding many live arrays of one size does not make each
    allocation walk them all). Idle blocks beyond ``idle_cap`` bytes are released to the
    system, looked for each time another quarter of ``idle_cap`` has been allocated.
    """

    MIN_BYTES = 1 << 16
    SCAN = 16

    def __init__(self, idle_cap: int = 256 << 20):
        self.idle_cap = idle_cap
        self._blocks: dict[int, list] = {}
        self._cursor: dict[int, int] = {}   # size -> where its next search starts
        self._since_trim = 0                # bytes allocated since idle blocks were released
        self._lock = threading.Lock()
        # the reference count an unused block shows through the same call depth: the pool's
        # list, the caller's loop variable, the method argument, getrefcount's argument
        self._unused = self._probe()

    def _probe(self) -> int:
        for block in [np.empty(1, np.uint8)]:
            return self._calibrate(block)
        return 0  # pragma: no cover

    @staticmethod
    def _calibrate(block: np.ndarray) -> int:
        return sys.getrefcount(block)

    def _idle(self, block: np.ndarray) -> bool:
        return sys.getrefcount(block) <= self._unused

    def take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            blocks = self._blocks.setdefault(nbytes, [])
            n = len(blocks)
            for i in range(min(n, self.SCAN)):   # the first blocks: the ones reused most,
                block = blocks[i]   # likely still in cache (held as the calibration's
                if self._idle(block):   # loop variable is)
                    return block
            if n > self.SCAN:   # then a window of the others, resumed where the last stopped
                start = self._cursor.get(nbytes, self.SCAN)
                for k in range(min(n - self.SCAN, self.SCAN)):
                    i = self.SCAN + (start - self.SCAN + k) % (n - self.SCAN)
                    block = blocks[i]
                    if self._idle(block):
                        self._cursor[nbytes] = i + 1
                        return block
                self._cursor[nbytes] = self.SCAN + (start - self.SCAN + self.SCAN) % (n - self.SCAN)
            block = np.empty(nbytes + ALIGN, np.uint8)
            blocks.append(block)
            self._since_trim += nbytes
            if self._since_trim > self.idle_cap // 4:
                self._trim()
            return block

    def _trim(self) -> None:
        self._since_trim = 0
        idle = [(n, b) for n, blocks in self._blocks.items() for b in blocks if self._idle(b)]
        total = sum(n for n, _ in idle)
        drop = set()
        for n, b in idle:
            if total <= self.idle_cap:
                break
            drop.add(id(b))    # (by identity, never ==; the list above holds them meanwhile)
            total -= n
        if drop:
            for blocks in self._blocks.values():
                blocks[:] = [b for b in blocks if id(b) not in drop]
            self._cursor.clear()

    def idle_bytes(self) -> int:
        with self._lock:
            return sum(n for n, blocks in self._blocks.items() for b in blocks if self._idle(b))

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()
            self._cursor.clear()


buffers = BufferPool()


def aligned_empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    Small arrays come straight from NumPy (its allocator aligns to 16 bytes): aligning
    them would cost more time than it could save.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < SMALL:
        return np.empty(shape, dtype)
    raw = buffers.take(nbytes) if nbytes >= BufferPool.MIN_BYTES else np.empty(nbytes + ALIGN, np.uint8)
    offset = (-pointer(raw)) % ALIGN
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


class WorkerPool:
    """Persistent worker threads that each run one ``[start, end)`` range of a kernel."""

    def __init__(self, n: int):
        self.n, self.pid = n, os.getpid()
        self._queues: list = []
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        for i in range(n - 1):
            q: queue.SimpleQueue = queue.SimpleQueue()
            t = threading.Thread(target=self._work, args=(q,), name=f"qtrace-cpu-{i + 1}", daemon=True)
            t.start()
            self._queues.append(q)

    def stale(self) -> bool:
        """Made for another thread count, or in the parent of this forked process (whose
        threads do not exist here)."""
        return self.n != config.num_threads or self.pid != os.getpid()

    def _work(self, q: queue.SimpleQueue) -> None:
        while True:
            fn, start, end, args, status, scratch = q.get()
            try:
                fn(start, end, args, status, scratch)
                self._done.put(None)
            except BaseException as err:  # pragma: no cover - kernels do not raise
                self._done.put(err)

    def run(self, fn, extent: int, args, status, scratch=None, stride: int = 0, start: int = 0,
            parts: int = 0) -> None:
        """Run ``fn`` over ``[start, start + extent)`` split evenly across the pool (caller
        included; into at most ``parts`` parts when that is given); a range of ``LONG``
        elements or more at multiples of ``PART`` (where a kernel's streaming entry can take
        every part: see ``qtrace.kernels.codegen.streams``).

        Part ``i`` gets the scratch block ``scratch + i * stride`` (its own adstack).
        """
        parts = min(parts or self.n, self.n, extent)
        if parts <= 1:
            fn(start, start + extent, args, status, scratch)
            return
        unit = PART if extent >= LONG else 1
        bounds = [start + extent * i // parts // unit * unit for i in range(parts)] + [start + extent]
        with self._lock:  # one parallel launch at a time: the workers are shared
            for i in range(1, parts):
                block = scratch + i * stride if scratch is not None else None
                self._queues[i - 1].put((fn, bounds[i], bounds[i + 1], args, status, block))
            waiting = parts - 1
            try:
                interruptible(fn, bounds[0], bounds[1], args, status, scratch)
                errors = []
                while waiting:
                    errors.append(self._done.get())
                    waiting -= 1
            except BaseException:  # Ctrl-C: the workers stop at their next chunk
                interrupt.set_abort(True)
                try:
                    while waiting:
                        self._done.get()
                        waiting -= 1
                finally:
                    interrupt.set_abort(False)
                raise
        for err in errors:
            if err is not None:  # pragma: no cover
                raise err


SLICE_SECONDS = 0.02  # the calling thread's share runs in pieces of about this long


def interruptible(fn, start: int, end: int, args, status, scratch) -> None:
    """``fn`` over ``[start, end)`` on this thread, in pieces short enough that Python
    handles a Ctrl-C between them (the first piece measures the speed)."""
    piece = min(end - start, 1 << 14)
    unit = PART if end - start >= LONG else 1   # (long ranges: in multiples of PART, as the parts)
    while start < end:
        stop = min(start + piece, end)
        t0 = time.perf_counter()
        fn(start, stop, args, status, scratch)
        elapsed = time.perf_counter() - t0
        done = stop - start
        start = stop
        if elapsed > 0:
            piece = max(unit, int(done * SLICE_SECONDS / elapsed) // unit * unit)
        else:
            piece = end - start


class NativeWorkerPool:
    """The worker threads of the compiled ``qtrace.devices._workers`` (see ``_workers.c``):
    they spin for ``qt.config.spin_us`` after a launch before they sleep, so launches in
    quick succession (a plan's kernels, a loop's steps) find them awake, and kernels run
    without the GIL. Same interface and splitting as :class:`WorkerPool`, the fallback."""

    def __init__(self, n: int, module):
        self.n, self.pid, self.spin_us, self._module = n, os.getpid(), config.spin_us, module
        module.configure(n - 1, self.spin_us, interrupt.address())

    def stale(self) -> bool:
        """As :meth:`WorkerPool.stale`, or made for another ``qt.config.spin_us``."""
        return self.n != config.num_threads or self.pid != os.getpid() or self.spin_us != config.spin_us

    def run(self, fn, extent: int, args, status, scratch=None, stride: int = 0, start: int = 0,
            parts: int = 0) -> None:
        """As :meth:`WorkerPool.run`; ``fn`` a ctypes kernel or a Python callable(start, end)."""
        target = ctypes.cast(fn, ctypes.c_void_p).value if isinstance(fn, ctypes._CFuncPtr) else fn
        self._module.run(target, start, extent, PART if extent >= LONG else 1, args, status or 0,
                         scratch or 0, stride, parts)

    def stats(self) -> dict:
        """Launches so far, how often a worker went to sleep, and the number of workers."""
        return self._module.stats()


def _native_workers():
    """The compiled worker pool's module, or None (not built, or ``QTRACE_NATIVE=0``)."""
    if not config.native:
        return None
    try:
        from . import _workers
    except ImportError:
        return None
    return _workers


_pool: WorkerPool | NativeWorkerPool | None = None
_pool_lock = threading.Lock()


def pool() -> WorkerPool | NativeWorkerPool:
    """The process's worker pool for ``qt.config.num_threads`` threads (the compiled one
    when it is built)."""
    global _pool
    p = _pool
    if p is None or p.stale():
        with _pool_lock:
            p = _pool
            if p is None or p.stale():
                module = _native_workers()
                p = _pool = (NativeWorkerPool(config.num_threads, module) if module is not None
                             else WorkerPool(config.num_threads))
    return p


def _slow_pointer(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _probe_data_offset() -> int | None:
    """Offset of ``data`` in NumPy's array struct (right after the object header), if it holds.

    ``arr.__array_interface__`` builds a dict on every call; reading the pointer field of
    the C struct directly is ~10x cheaper, which matters on the per-call path of a
    jitted step. The layout is checked here against NumPy's own answer, on several
    arrays, before it is used.
    """
    offset = 2 * ctypes.sizeof(ctypes.c_void_p)
    for arr in (np.arange(3.0), np.zeros((2, 2), np.int8)[1:], np.empty(0)):
        if ctypes.c_void_p.from_address(id(arr) + offset).value != (_slow_pointer(arr) or None):
            return None
    return offset


_DATA_OFFSET = _probe_data_offset()
# The same field read as an item of one ctypes array laid over the address space (what
# ``from_address`` does, without building a ctypes object per read: ~3x cheaper again).
# Object headers are 16-byte aligned, so the field's address is a multiple of 8.
_WORDS = (ctypes.c_uint64 * (1 << 59)).from_address(0)


def _fast_pointer_ok() -> bool:
    if _DATA_OFFSET is None or _DATA_OFFSET % 8:
        return False
    for arr in (np.arange(3.0), np.zeros((2, 2), np.int8)[1:], np.empty(0)):
        if (id(arr) + _DATA_OFFSET) % 8 or _WORDS[(id(arr) + _DATA_OFFSET) >> 3] != _slow_pointer(arr):
            return False
    return True


FAST_POINTER = _fast_pointer_ok()
if FAST_POINTER:
    def pointer(arr: np.ndarray, _words=_WORDS, _offset=_DATA_OFFSET) -> int:
        """The address of ``arr``'s first element."""
        return _words[(id(arr) + _offset) >> 3]
elif _DATA_OFFSET is not None:  # pragma: no cover
    def pointer(arr: np.ndarray) -> int:
        """The address of ``arr``'s first element."""
        return ctypes.c_void_p.from_address(id(arr) + _DATA_OFFSET).value or 0
else:  # pragma: no cover - a NumPy with another struct layout
    pointer = _slow_pointer


ARGS = ctypes.c_void_p


_packers: dict = {}


def packer(n: int):
    """``pack(*addresses) -> bytes``: a kernel's argument block of ``n`` pointers."""
    p = _packers.get(n)
    if p is None:
        p = _packers[n] = struct.Struct(f"{n}Q").pack
    return p


def _bind_native_calls() -> None:
    """Hand the compiled recorder what a jitted call of one kernel needs to run without
    Python (``qtrace.tracer.jit``): how this runtime allocates and finds an array's data,
    and the stats counters it bumps. Without the fast data pointer it stays unbound (the
    Python call path runs)."""
    from ..graph import native
    from ..stats import native_address
    if native.active() and FAST_POINTER:
        native.module().bind_jit(np.ndarray, np.empty, aligned_empty, _DATA_OFFSET,
                                 native_address("cache_hits_memory"),
                                 native_address("kernel_launches"), native_address("tasks_run"))


_bind_native_calls()
