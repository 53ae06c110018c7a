"""Process-wide counters behind ``qt.stats()`` and ``qt.reset_stats()``."""

from __future__ import annotations

import threading

COUNTERS = (
    "traces",
    "compiles",
    "cache_hits_memory",
    "cache_hits_disk",
    "kernel_launches",
    "tasks_fused",
    "adstack_host_sized",
    "adstack_device_sized",
    "max_reducer_dispatches",
    "adstack_bytes",
    "bytes_host_to_device",
    "bytes_device_to_host",
)

_lock = threading.Lock()
_counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)


def bump(name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` (thread-safe)."""
    with _lock:
        _counts[name] += n


def stats() -> dict[str, int]:
    """Return a copy of the counters accumulated since the last :func:`reset_stats`.

    Example:
        >>> import qtrace as qt
        >>> qt.reset_stats(); _ = (qt.ones(4) + 1).numpy()
        >>> qt.stats()["kernel_launches"]
        1
    """
    with _lock:
        return dict(_counts)


def reset_stats() -> None:
    """Set every counter of :func:`stats` back to zero."""
    with _lock:
        for k in _counts:
            _counts[k] = 0
