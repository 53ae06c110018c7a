"""Stopping a long launch on Ctrl-C: a process-wide abort flag that kernels poll.

A kernel call goes through ctypes with the GIL released, and Python handles a signal
only between bytecodes of the main thread, so a Ctrl-C during a long kernel would wait
for it to finish. Instead, every kernel walks its range in chunks of about
``CHUNK_WORK`` elements and checks the flag ``qt_abort`` (an external symbol resolved to
one word of this process's memory) before each chunk. The CPU runtime runs the calling
thread's share of a long launch in Python-sized pieces, so the KeyboardInterrupt is
raised promptly there; it then sets the flag, waits for the workers to stop at their next
chunk, clears the flag and re-raises. The buffers being written are discarded; nothing
else changed, so qtrace stays usable.
"""

from __future__ import annotations

import ctypes

SYMBOL = "qt_abort"
CHUNK_WORK = 1 << 16     # elements between two checks (a check costs a load and a branch)

_flag = ctypes.c_int32(0)


def address() -> int:
    """Where the flag lives (the CPU back end resolves ``SYMBOL`` to it)."""
    return ctypes.addressof(_flag)


def set_abort(on: bool) -> None:
    _flag.value = 1 if on else 0


def is_aborting() -> bool:
    return _flag.value != 0
