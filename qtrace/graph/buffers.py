"""Buffer versions: a counter per buffer, bumped whenever qtrace lets it be written.

qtrace's own buffers are immutable once computed, so most versions stay 0. A buffer
whose memory qtrace hands out for writing (a DLPack export) gets a new version, which
invalidates caches keyed on data use (the adstack depth of a loop).
"""

from __future__ import annotations

import threading
import weakref

_lock = threading.Lock()
_versions: dict[int, tuple] = {}


def version(buf) -> int:
    entry = _versions.get(id(buf))
    if entry is None or entry[0]() is not buf:
        return 0
    return entry[1]


def bump(buf) -> None:
    """Record that ``buf`` may have been written (its consumers must not trust caches)."""
    with _lock:
        entry = _versions.get(id(buf))
        n = entry[1] + 1 if entry is not None and entry[0]() is buf else 1
        key = id(buf)
        _versions[key] = (weakref.ref(buf, lambda _, key=key: _versions.pop(key, None)), n)


def identity(buf) -> tuple:
    """``(id, version)``: what a data-dependent cache entry is keyed by."""
    return (id(buf), version(buf))
