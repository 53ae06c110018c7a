"""NVIDIA GPUs: buffers from CuPy's memory pool, PTX kernels loaded by CuPy.

CuPy is imported when a CUDA device is first used; without it (or without a driver or
GPU), :func:`devices` is empty and using ``device="cuda"`` raises an error naming what
is missing. Launches go to CuPy's current stream (``qt.cuda.Stream``); a read waits for
the streams that computed it, :meth:`CudaRuntime.sync` for the device. Buffers are
``cupy.ndarray``: zero-copy with CuPy, and with JAX/PyTorch through DLPack and
``__cuda_array_interface__``.

Example:
    >>> from qtrace.devices import cuda
    >>> isinstance(cuda.devices(), list)
    True
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from ..graph import buffers
from ..graph.device import Device
from ..stats import bump, bump_many
from . import adstack
from .registry import ONE_LAUNCH, DeviceRuntime, launch_parameters

THREAD_CAP = 65536   # at most this many threads of a launch own an adstack each
_CURRENT = contextlib.nullcontext()

_lock = threading.Lock()
_probe: list = []


def _cupy():
    import cupy
    return cupy


def _probe_devices() -> tuple[list, str | None]:
    with _lock:
        if not _probe:
            try:
                cupy = _cupy()
            except ImportError as exc:
                _probe.append(([], f"CuPy is not installed ({exc}); pip install 'qtrace[cuda]'"))
            else:
                try:
                    n = cupy.cuda.runtime.getDeviceCount()
                    _probe.append(([Device(f"cuda:{i}") for i in range(n)],
                                   None if n else "no CUDA GPU was found"))
                except Exception as exc:  # noqa: BLE001 - no driver, no device: say why
                    _probe.append(([], f"the CUDA driver is not usable ({exc})"))
        return _probe[0]


def devices() -> list:
    """The CUDA devices present (empty without CuPy, a driver or a GPU)."""
    return list(_probe_devices()[0])


def unavailable(device: Device) -> str | None:
    """Why ``device`` cannot be used (None when it can)."""
    found, why = _probe_devices()
    if device in found:
        return None
    if why is not None:
        return why
    return f"{device} is not present (CUDA devices: {[str(d) for d in found]})"


def to_host(buf) -> np.ndarray:
    """A host copy of device buffer ``buf`` (waits for the work that writes it, on whichever
    stream it ran); first reports any failed check of the work launched so far."""
    check_deferred()
    device = buf.data.device_id
    if _cupy().cuda.runtime.getDevice() == device:   # (the common case: no device switch)
        order_reads(device)
        return _read(buf)
    with buf.device:
        order_reads(device)
        return _read(buf)


# Streams that ran qtrace work since the host last waited for everything (qt.sync), per
# device: a read (or a run, or an export) makes the current stream of that device wait for
# them first — an event per stream, the host does not block for it — so a value computed
# under ``with qt.cuda.Stream():`` reads correctly outside it, and work on the legacy
# default stream is waited for by a non-blocking stream. Streams whose work is done are
# dropped at each such point.
_streams: dict = {}   # (device id, stream pointer) -> cupy Stream
_streams_lock = threading.Lock()


def note_stream(stream, device: int | None = None) -> None:
    """Record that qtrace work was queued on ``stream`` (a CuPy stream of the current device,
    ``device`` when the caller knows its index)."""
    key = (_cupy().cuda.runtime.getDevice() if device is None else device, stream.ptr)
    if key not in _streams:
        with _streams_lock:
            _streams[key] = stream


def order_reads(device: int | None = None, current=None) -> None:
    """Make the current stream of the current device wait for the work of every stream of
    that device noted since the last ``qt.sync()``, so that what it reads next is complete.
    ``device``, ``current``: that device's index and stream, where the caller has them."""
    if not _streams:
        return
    cuda = _cupy().cuda
    if device is None:
        device = cuda.runtime.getDevice()
    if current is None:
        current = cuda.get_current_stream()
    if len(_streams) == 1 and (device, current.ptr) in _streams:
        return   # (the common case: only this stream has qtrace work; it is in order)
    with _streams_lock:
        noted = [(k, st) for k, st in _streams.items() if k[0] == device]
    for key, stream in noted:
        if stream.done:   # nothing of it left to wait for
            with _streams_lock:
                _streams.pop(key, None)
        elif stream.ptr != current.ptr:
            current.wait_event(stream.record())


def forget_stream(stream) -> None:
    """``stream`` was synchronised: nothing queued on it before is left to wait for."""
    with _streams_lock:
        _streams.pop((_cupy().cuda.Device().id, stream.ptr), None)


def _read(buf) -> np.ndarray:
    bump_many((("bytes_device_to_host", buf.nbytes), ("device_syncs", 1)))
    return buf.get()


def sync() -> None:
    """Wait for every GPU's work (on every stream), then report any failed check of it."""
    if _probe and _probe[0][0]:
        for d in _probe[0][0]:
            _cupy().cuda.Device(d.index).synchronize()
        bump("device_syncs")
        # (only streams found done after the wait are forgotten: another thread may have
        # queued work since, on a stream it had noted before — cleared before the wait,
        # that work would no longer be waited for by readers on other streams; a stream
        # noted whose launches are not queued yet may be forgotten here: runs note it
        # again once they are, CudaRuntime.launched)
        with _streams_lock:
            for key, stream in list(_streams.items()):
                if stream.done:
                    del _streams[key]
    check_deferred()


# Index and overflow checks of launched plans, not read yet: (status buffer, checker) in
# launch order. A plan's checks are read where the host waits for the device anyway — a
# value read back, qt.sync() — so a jitted step loop never synchronises for them; the
# first failure is raised there, naming the op, kernel and recording line as before.
_deferred: list = []
_deferred_lock = threading.Lock()


def defer_check(status, check, armed: list | None = None) -> None:
    """Read ``status`` at the next check and hand it to ``check``. ``armed``: a status that
    later launches keep writing (a CUDA graph's replays, :mod:`qtrace.devices.cuda_graphs`)
    is deferred once while ``armed[0]`` is true; it is cleared before the read, so a launch
    that finds it still set is one the read will see, and one that finds it clear (queued
    after the read began) defers the status again."""
    with _deferred_lock:
        _deferred.append((status, check, armed))


def check_deferred() -> None:
    """Read the status of every plan launched since the last check; raise the first failure
    (the statuses not read yet stay deferred, for the next check)."""
    if not _deferred:
        return
    with _deferred_lock:
        pending = _deferred[:]
        _deferred.clear()
    for i, (status, check, armed) in enumerate(pending):
        read = False
        try:
            if armed is not None:
                armed[0] = False
            with status.device:
                order_reads()
                host = _read(status)
            read = True
            check(host)
        except BaseException:   # (a failure raised, or the read interrupted: kept)
            if not read and armed is not None:
                armed[0] = True   # (still deferred: a replay must not defer it a second time)
            with _deferred_lock:
                _deferred[:0] = pending[i + read:]
            raise


def _capturing(stream) -> bool:
    """Whether ``stream`` is being captured into a CUDA graph (True where the driver cannot
    say: the caller then does what a capture needs)."""
    try:
        return bool(stream.is_capturing())
    except Exception:  # noqa: BLE001 - (an API call refused during another capture)
        return True


KEPT_STREAMS = 16   # per thread: memory kept for at most this many streams


def _per_stream(kept, name: str) -> dict:
    """This thread's ``{stream pointer: kept memory}`` named ``name``; emptied when it holds
    more streams than ``KEPT_STREAMS`` (streams that were dropped; what an entry still queues
    stays valid: device blocks return to CuPy's pool in stream order, staging rings park)."""
    table = getattr(kept, name, None)
    if table is None:
        table = {}
        setattr(kept, name, table)
    elif len(table) > KEPT_STREAMS:
        table.clear()
    return table


# Staging rings dropped (by their thread's end, or the table above) while copies from them
# may still be queued: kept here until those copies are done.
_parked: list = []
_parked_lock = threading.Lock()


class Staging:
    """Pinned host memory through which one stream's uploads go asynchronously.

    A ring: each upload copies its data into the next free region and queues an
    asynchronous copy from there, recording an event behind it; a region is written again
    only once the copies that read it are done (their events; the host waits only if the
    ring has come round to a copy still in flight: counted as a ``device_sync``). Grown by
    doubling when an upload does not fit in half of it; a replaced ring is kept until its
    copies are done.
    """

    START = 1 << 16       # bytes of the first ring
    LARGEST = 1 << 24     # larger uploads are copied synchronously (no ring grows past 2x this)

    def __init__(self, cp, nbytes: int = 0):
        self.cp = cp
        self.size = max(nbytes, self.START)
        self.host = np.frombuffer(cp.cuda.alloc_pinned_memory(self.size), np.uint8, self.size)
        self.head = 0
        self.inflight: list = []    # (start, end, event) of queued copies, oldest first
        self.retired: list = []     # (ring memory, last event) of replaced rings

    def upload(self, array: np.ndarray, dst, stream) -> None:
        """Queue the copy of ``array`` into device array ``dst`` on ``stream``."""
        n = (array.nbytes + 63) // 64 * 64
        if 2 * n > self.size:
            self._grow(2 * n)
        start = self.head if self.head + n <= self.size else 0
        self._wait_for(start, start + n)
        region = self.host[start:start + array.nbytes]
        region[...] = array.reshape(-1).view(np.uint8)
        dst.set(region.view(array.dtype).reshape(array.shape), stream=stream)
        event = self.cp.cuda.Event(disable_timing=True)
        event.record(stream)
        self.inflight.append((start, start + n, event))
        self.head = start + n

    def __del__(self):
        last = self.inflight[-1][2] if self.inflight else None
        try:
            with _parked_lock:
                _parked[:] = [p for p in _parked if not p[1].done]
                if last is not None and not last.done:
                    _parked.append((self.host, last))
                _parked.extend(self.retired)
        except Exception:  # noqa: BLE001 - (interpreter shutdown: nothing to protect)
            pass

    def _wait_for(self, start: int, end: int) -> None:
        """Until no queued copy reads ``[start, end)`` (dropping those that are done)."""
        self.retired = [r for r in self.retired if not r[1].done]
        keep = []
        for s, e, event in self.inflight:
            if s < end and start < e and not event.done:
                event.synchronize()
                bump("device_syncs")
            elif not event.done:
                keep.append((s, e, event))
        self.inflight = keep

    def _grow(self, nbytes: int) -> None:
        if self.inflight:
            self.retired.append((self.host, self.inflight[-1][2]))
        self.size = max(nbytes, 2 * self.size)
        self.host = np.frombuffer(self.cp.cuda.alloc_pinned_memory(self.size), np.uint8, self.size)
        self.head = 0
        self.inflight = []


def write_headers(block, header: tuple, threads: int, stride: int) -> None:
    """Write each of ``threads`` adstack headers (``adstack.layout``), ``stride`` bytes
    apart in ``block``, on the device: one copy on the current stream from the header kept
    in device memory (uploaded once per header value and device; a fill per header word
    cost ~75 µs of host time per launch). On a stream being captured into a CUDA graph (a
    user's capture: qtrace's own writes its headers outside), word by word: a graph copying
    from a kept header would read it after it is dropped."""
    heads = block[:threads * stride].view(np.int64).reshape(threads, stride // 8)
    cp = _cupy()
    stream = cp.cuda.get_current_stream()
    if _capturing(stream):
        for k, v in enumerate(header):
            heads[:, k] = v
        return
    key = (block.device.id, header)
    pattern = _headers.get(key)
    if pattern is None:
        with block.device:
            if len(_headers) >= 256:   # (dropped once no stream's copy may still read them)
                block.device.synchronize()
                _headers.clear()
            pattern = cp.asarray(np.array(header, np.int64))
            stream.synchronize()   # (uploaded before another stream's copy may read it)
        _headers[key] = pattern
    heads[:, :len(header)] = pattern


_headers: dict = {}   # (device id, adstack header) -> that header in the device's memory


class _Kept(threading.local):
    """What a runtime keeps per calling thread: memory per stream (tables named by use,
    :func:`_per_stream`) and, while a CUDA graph is captured on the thread, the lists of
    :meth:`CudaRuntime.capturing` (None otherwise: class defaults, so that reading them
    costs no failed attribute lookup on the per-launch path)."""

    owned = made = reuse = fills = None


class CudaRuntime(DeviceRuntime):
    """One GPU: CuPy buffers and launches of :class:`qtrace.kernels.llvm_nvptx.CudaKernel`."""

    kind = "cuda"
    sequences = False

    def __init__(self, index: int):
        why = unavailable(Device(f"cuda:{index}"))
        if why is not None:
            raise RuntimeError(f"qtrace: device cuda:{index} is not available: {why}")
        self.cp = self.xp = _cupy()
        self.index = index
        self.device = self.cp.cuda.Device(index)
        self._kept = _Kept()
        # adstack heap rows are claimed per warp (activemask, shfl.sync after a branch):
        # relied on from Volta's independent thread scheduling on; before it, a row per thread
        self.heap = int(self.device.compute_capability) >= 70

    def scope(self):
        """A context in which this GPU is the current device: nothing to do when it already
        is (the common case; entering CuPy's device context costs a few microseconds)."""
        return _CURRENT if self.cp.cuda.runtime.getDevice() == self.index else self.device

    @contextlib.contextmanager
    def capturing(self, reuse: list = ()):
        """While a CUDA graph is captured on this thread: a list that every buffer this
        runtime allocates or hands a launch (kept per-stream blocks too) is appended to,
        so the graph's instance keeps them (no other allocation may be given memory a
        graph writes), a list of those it allocated, and a list of the adstack headers its
        launches need written (:func:`write_headers` arguments), which the caller writes
        before the graph's first launch: not in the graph, whose nodes are then all qtrace
        kernels and its own copies (so it can be patched: ``cuda_driver.Graph.patch``), and
        each loop task's stacks are a block of the instance's own. Allocations take the
        buffers of ``reuse`` first (same shape and dtype: those the instance this capture
        replaces allocated)."""
        kept = self._kept
        was = kept.owned, kept.made, kept.reuse, kept.fills
        owned, made, fills = [], [], []
        kept.owned, kept.made, kept.reuse, kept.fills = owned, made, list(reuse), fills
        try:
            yield owned, made, fills
        finally:
            kept.owned, kept.made, kept.reuse, kept.fills = was

    def _owned(self, buf):
        """``buf``, appended to the current capture's list (if any)."""
        owned = self._kept.owned
        if owned is not None:
            owned.append(buf)
        return buf

    def _allocate(self, shape: tuple, dtype):
        """A new buffer (during a capture: one it may reuse, or a new one it keeps)."""
        reuse, made = self._kept.reuse, self._kept.made
        buf = None
        if reuse:
            dtype = np.dtype(dtype)
            for i, b in enumerate(reuse):
                if b.shape == tuple(shape) and b.dtype == dtype:
                    buf = reuse.pop(i)
                    break
        if buf is None:
            buf = self.cp.empty(shape, dtype)
        if made is not None:
            made.append(buf)
        return self._owned(buf)

    def _kept_block(self, name: str, nbytes: int):
        """At least ``nbytes`` of device memory, kept between launches per calling thread,
        stream and use ``name`` (a launch on the same stream runs after the previous one
        is done with it; another stream or thread has its own), replaced by one of at least
        twice the size when too small; the one replaced returns to CuPy's pool in stream
        order. ``"stacks"``: adstacks (``adstack_scratch_allocs``/``_bytes``)."""
        kept = _per_stream(self._kept, name)
        stream = self.cp.cuda.get_current_stream().ptr
        block = kept.get(stream)
        if block is None or block.nbytes < nbytes:
            size = max(nbytes, 2 * block.nbytes if block is not None else 0)
            kept[stream] = None
            kept[stream] = block = self.cp.empty(size, np.uint8)
            if name == "stacks":
                bump_many((("adstack_scratch_allocs", 1), ("adstack_scratch_bytes", size)))
        return self._owned(block)

    def _split_scratch(self, nbytes: int, zeroed: int, stream) -> int:
        """The address of this thread's split-reduction scratch for ``stream`` (kept like
        :meth:`_kept_block`'s): at least ``nbytes``, its first ``zeroed`` bytes zero for the
        launch queued next on ``stream``. Split reductions leave their counters zero and
        write nothing else below ``zeroed`` (:class:`qtrace.kernels.lowering.SplitLayout`),
        so a block is zeroed (``memsetAsync`` on the stream: ``split_scratch_zeroings``)
        only when new or last zeroed for fewer bytes. (Only reductions come here: the GPU
        splits no scan, whose totals are not cleared behind it; ``launch`` refuses phased
        runs.) While the stream is captured into a CUDA graph — qtrace's own capture or a
        user's — the graph zeroes it itself, and from then on it is zeroed before every
        launch: replays run when the host cannot see them, leaving values above their own
        counters. The entry holds its stream, so no other stream can be given its handle
        (the driver reuses a destroyed stream's) and find the entry as its own."""
        kept = _per_stream(self._kept, "split")
        entry = kept.get(stream.ptr)   # [block, leading bytes known zero (-1: never trusted), stream]
        if entry is None or entry[0].nbytes < nbytes:
            size = max(nbytes, 2 * entry[0].nbytes if entry is not None else 0)
            kept[stream.ptr] = None
            entry = kept[stream.ptr] = [self.cp.empty(size, np.uint8), 0, stream]
        block = self._owned(entry[0]).data.ptr
        capturing = self._kept.owned is not None or (entry[1] >= zeroed and _capturing(stream))
        if capturing or entry[1] < zeroed:
            self.cp.cuda.runtime.memsetAsync(block, 0, zeroed, stream.ptr)
            bump("split_scratch_zeroings")
        entry[1] = -1 if capturing or entry[1] < 0 else zeroed
        return block

    def empty(self, shape: tuple, dtype):
        with self.scope():
            return self._allocate(shape, dtype)

    def pointer(self, buf) -> int:
        return buf.data.ptr

    def to_host(self, buf) -> np.ndarray:
        return to_host(buf)

    def defer_check(self, status, check) -> None:
        defer_check(status, check)

    def from_host(self, array):
        """A device copy of host ``array``, queued on the current stream without waiting:
        the data goes through pinned staging memory (:class:`Staging`) by an asynchronous
        copy, so the caller may change ``array`` at once and the host never blocks (above
        ``Staging.LARGEST`` bytes, a synchronous copy)."""
        if not array.flags.c_contiguous:   # (np.ascontiguousarray would make a 0-d array 1-d)
            array = np.array(array, order="C")
        bump("bytes_host_to_device", array.nbytes)
        with self.scope():
            buf = self.cp.empty(array.shape, array.dtype)
            if array.nbytes > Staging.LARGEST:   # (no pinned copy of it kept): copied now
                buf.set(array)
                bump("device_syncs")
            elif array.nbytes:
                stream = self.cp.cuda.get_current_stream()
                self._staging(stream).upload(array, buf, stream)
                note_stream(stream)
        if array.size <= adstack.SMALL_LEAF:   # its value may size an adstack: keep it readable
            buffers.mirror(buf, array.copy())
        return buf

    def _staging(self, stream) -> Staging:
        kept = _per_stream(self._kept, "staging")
        staging = kept.get(stream.ptr)
        if staging is None:
            staging = kept[stream.ptr] = Staging(self.cp)
        return staging

    def launch(self, kernel, extent: int, pointers: list, status: int, levels, parallel: bool,
               scratch: int = 0, phases: int = 1, zeroed: int = 0) -> None:
        if phases != 1:   # (the GPU's lowering splits no scan: it scans long rows in blocks)
            raise NotImplementedError("qtrace: phased launches are a CPU mechanism")
        stride, threads, block = 0, None, None
        with self.scope():   # (current stream, scratch, stack block and fills: this device's)
            if scratch:   # (a split reduction: the GPU's lowering splits no scan)
                scratch = self._split_scratch(scratch, zeroed, self.cp.cuda.get_current_stream())
            elif levels is not None:
                # interleaved (``Levels.interleaved``): the threads' headers, then their
                # stacks word by word, each thread's header HEADER bytes from the previous
                # one's, the float stacks a heap of a row per looping element (at most one
                # per thread: ``adstack.heap_rows``; a row per thread before sm_70); else a
                # block of ``size`` bytes per thread. A CUDA graph's replays find the heap's
                # counter where the last one left it (its headers are written outside the
                # graph): a row per thread
                threads = min(-(-extent // kernel.BLOCK) * kernel.BLOCK, THREAD_CAP)
                fills = self._kept.fills
                rows = adstack.heap_rows(levels, threads, extent) if fills is None and self.heap else 0
                header, size, total = adstack.layout(threads, levels, rows)
                stride = adstack.HEADER if levels.interleaved else size
                if fills is not None:   # (qtrace's capture: see capturing)
                    block = self._allocate((total,), np.uint8)
                    fills.append((block, header, threads, stride))
                else:
                    block = self._kept_block("stacks", total)
                    write_headers(block, header, threads, stride)
                scratch = block.data.ptr
            kernel.launch(extent, pointers, status, scratch, stride, threads)

    def run_kernel(self, one: tuple, leaves: list, n_slots: int, queue: bool = True) -> list:
        if self.cp.cuda.runtime.getDevice() != self.index:
            with self.device:
                return self.run_kernel(one, leaves, n_slots, queue)
        kernel, extent, slots, allocs, outs, scratch, zeroed, by_value, kept = one
        stream = self.cp.cuda.get_current_stream()
        if queue:   # host data (NumPy arguments, Python scalars) goes to the device
            self.queue(stream)   # (but scalars the kernel takes by value: Plan.host_leaves)
            leaves = [self.from_host(b) if isinstance(b, np.ndarray) and i not in kept else b
                      for i, b in enumerate(leaves)]
        bufs = [*leaves, *[None] * (n_slots - len(leaves))]
        for s, shape, dtype, _small in allocs:
            bufs[s] = self._allocate(shape, dtype)
        params = (launch_parameters(bufs, slots, by_value, self.pointer) if by_value
                  else [bufs[s].data.ptr for s in slots])
        kernel.launch(extent, params, 0,
                      self._split_scratch(scratch, zeroed, stream) if scratch else 0, 0, stream=stream)
        if queue:
            self.launched(stream)
        bump_many(ONE_LAUNCH)
        return [bufs[s] for s in outs]

    def queue(self, stream=None):
        """Order the next launches after the qtrace work of other streams (what they read
        may come from there), and note their stream; returns it (for :meth:`launched`).
        ``stream``: this device's current stream, where the caller has made this device
        current and read it."""
        if stream is not None:
            order_reads(self.index, stream)
            note_stream(stream, self.index)
            return stream
        with self.scope():
            stream = self.cp.cuda.get_current_stream()
            order_reads(self.index, stream)
            note_stream(stream, self.index)
        return stream

    def launched(self, stream) -> None:
        """Note ``stream``, that of the launches just queued, again (:meth:`queue` noted it
        before them; ``qt.sync()`` in another thread may have forgotten it since, finding it
        idle: noted after the launches, it stays until their work is done)."""
        note_stream(stream, self.index)

    def sync(self) -> None:
        self.device.synchronize()
        bump("device_syncs")
        check_deferred()
