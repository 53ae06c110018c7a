"""Process-wide counters behind ``qt.stats()`` and ``qt.reset_stats()``.

:func:`bump` is on the per-call path of every jitted call and eager evaluation, so it
takes no lock: each thread adds into its own table (only that thread writes it), and
:func:`stats` sums the tables. :func:`reset_stats` records the current sums as the new
zero instead of writing into other threads' tables, so no increment is ever lost. The
table of a thread that has ended is folded into one shared table when a new thread
registers, so their number stays bounded by the number of live threads.
"""

from __future__ import annotations

import ctypes
import threading

COUNTERS = (
    "traces",
    "compiles",
    "tier_ups",             # kernels whose optimised code replaced their quick code (tiering)
    "tier_up_failures",     # optimising compiles that failed (their quick code stays)
    "cache_hits_memory",
    "cache_hits_disk",
    "kernels_shared",       # tasks that took a kernel compiled for other tasks with the same code
    "kernel_launches",      # native launches (a run of small tasks is one sequence launch)
    "tasks_run",            # tasks executed (each a kernel; several may share a launch)
    "tasks_fused",
    # adstack sizing, one count per launch of a reverse-mode loop task and stack level
    # (qtrace.devices.adstack): read on the host, found in the reducer's cache, reduced
    # now (a miss: new or changed data, or volatile memory), reduced from recorded counts
    "adstack_host_sized",
    "adstack_reducer_hits",
    "adstack_reducer_dispatches",
    "adstack_recorded",
    "adstack_device_sized",     # older and coarser: hits + dispatches + recorded
    "max_reducer_dispatches",   # older and coarser: dispatches + recorded
    "adstack_bytes",            # stack bytes each launch needed (workers x depth x row bytes)
    "adstack_scratch_allocs",   # blocks the kept adstack memory grew by (doubling)
    "adstack_scratch_bytes",    # bytes of those blocks
    "split_scratch_zeroings",   # GPU split-reduction scratch zeroed before a launch: a new block,
                                # more counters than were left zero, or a captured stream
    "bytes_host_to_device",
    "bytes_device_to_host",
    "device_syncs",         # the host waited for a GPU (a value read back, qt.sync())
    "cuda_graph_captures",  # CUDA graphs captured for jitted calls (qtrace.devices.cuda_graphs)
    "cuda_graph_replays",   # jitted calls run as one graph launch
    "cuda_graph_patches",   # ... of which replays of a graph patched to read new inputs
    "cuda_graph_value_patches",  # ... and replays with new by-value scalars patched in
    "ffi_python_calls",     # XLA custom calls (qt.to_jax) run by the Python FFI handler
    "ffi_native_calls",     # ... and by a native handler (counted by the handler itself)
    "evaluations",          # pending graphs evaluated (eager code)
    "auto_evaluations",     # of which: automatic cuts of a long pending graph
)

# Counters that compiled code adds to (a native FFI handler, running with no Python): one
# 64-bit word per counter, incremented atomically at the address native_address() gives.
_native = (ctypes.c_int64 * len(COUNTERS))()

_lock = threading.Lock()           # registration, folding, stats and reset (not bump)
_local = threading.local()
_tables: list = []                 # (thread, its counts) for every thread that bumped
_retired: dict[str, int] = dict.fromkeys(COUNTERS, 0)   # counts of threads that ended
_zero: dict[str, int] = dict.fromkeys(COUNTERS, 0)      # the sums at the last reset


def _register() -> dict:
    counts = dict.fromkeys(COUNTERS, 0)
    me = threading.current_thread()
    with _lock:
        for entry in list(_tables):
            thread, old = entry
            if not thread.is_alive():
                for k, v in old.items():
                    _retired[k] += v
                _tables.remove(entry)
        _tables.append((me, counts))
    _local.counts = counts
    return counts


def bump(name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` (thread-safe, lock-free)."""
    try:
        counts = _local.counts
    except AttributeError:
        counts = _register()
    counts[name] += n


def bump_many(pairs: tuple) -> None:
    """``bump(name, n)`` for each ``(name, n)`` of ``pairs`` (one lookup of this thread's table)."""
    try:
        counts = _local.counts
    except AttributeError:
        counts = _register()
    for name, n in pairs:
        counts[name] += n


def native_address(name: str) -> int:
    """The address of counter ``name``'s word for compiled code (atomic 64-bit adds)."""
    return ctypes.addressof(_native) + 8 * COUNTERS.index(name)


def _sums() -> dict[str, int]:
    total = dict(_retired)
    for k, v in zip(COUNTERS, _native):
        total[k] += v
    for _, counts in _tables:
        for k, v in list(counts.items()):
            total[k] += v
    return total


def stats() -> dict[str, int]:
    """Return a copy of the counters accumulated since the last :func:`reset_stats`.

    Example:
        >>> import qtrace as qt
        >>> qt.reset_stats(); _ = (qt.ones(4) + 1).numpy()
        >>> qt.stats()["kernel_launches"]
        1
    """
    with _lock:
        total = _sums()
        return {k: total[k] - _zero[k] for k in COUNTERS}


def reset_stats() -> None:
    """Set every counter of :func:`stats` back to zero."""
    with _lock:
        _zero.update(_sums())
