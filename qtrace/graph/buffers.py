"""Buffer versions: what data-dependent caches (adstack depths) are keyed by.

qtrace's own buffers are immutable once computed, so their version never changes. A
buffer whose memory qtrace hands out for writing (a DLPack export) becomes *volatile*:
someone else may write it at any time, so caches keyed on it never hit again.
"""

from __future__ import annotations

import itertools
import threading
import weakref

_lock = threading.Lock()
_volatile: dict[int, weakref.ref] = {}
_fresh = itertools.count(1)


def mark_written(buf) -> None:
    """Record that ``buf`` may be written behind qtrace's back from now on."""
    key = id(buf)
    with _lock:
        _volatile[key] = weakref.ref(buf, lambda _, key=key: _volatile.pop(key, None))


def identity(buf) -> tuple:
    """``(id, version)``; a volatile buffer gets a new version every time it is asked."""
    ref = _volatile.get(id(buf))
    if ref is not None and ref() is buf:
        return (id(buf), -next(_fresh))
    return (id(buf), 0)
