"""Huge pages for large host buffers that qtrace writes but another allocator made.

A buffer that XLA (or a C library) allocates for each call is, above glibc's mmap
threshold, a fresh mapping each time: writing it faults in every 4 KiB page, and the
kernel zeroes each one. For 40 MB that is ~13 ms on a 2-core x86-64 machine, more than
the kernel computing the values (B1 as a custom call in ``jax.jit``). Advising the
2 MiB-aligned interior of such a buffer for transparent huge pages (``madvise`` with
``MADV_HUGEPAGE``, what NumPy does for its own arrays of 4 MiB and more) before writing
it makes those faults 512 times fewer: ~3 ms for 40 MB there. The advice changes only how
the memory is backed, never its contents; on systems without ``madvise`` (or where
transparent huge pages are off) it is a no-op.

Example:
    >>> import numpy as np
    >>> from qtrace.devices import host_pages
    >>> a = np.empty(1 << 22, np.float32)   # 16 MiB
    >>> host_pages.advise(a.ctypes.data, a.nbytes)   # (returns nothing; never fails)
    >>> host_pages.interior(3 << 20, 8 << 20)   # [4 MiB, 10 MiB): the whole huge pages inside
    (4194304, 6291456)
"""

from __future__ import annotations

import ctypes
import sys

MADV_HUGEPAGE = 14        # Linux <asm-generic/mman-common.h>
HUGE_PAGE = 1 << 21       # x86-64 and AArch64 (4 KiB base pages)
MIN_BYTES = 4 << 20       # (NumPy's threshold for the same advice)

_madvise = None
_looked = False


def madvise_address() -> int | None:
    """The address of the C library's ``madvise`` (for compiled callers), or None where
    there is none to call (not Linux)."""
    fn = _function()
    return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value


def _function():
    global _madvise, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(None).madvise
            except (OSError, AttributeError):
                fn = None
            if fn is not None:
                fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                fn.restype = ctypes.c_int
            _madvise = fn
    return _madvise


def interior(ptr: int, nbytes: int) -> tuple[int, int]:
    """``(start, length)`` of the whole huge pages inside ``[ptr, ptr + nbytes)`` (length
    0 where there is none)."""
    lo = (ptr + HUGE_PAGE - 1) & -HUGE_PAGE
    hi = (ptr + nbytes) & -HUGE_PAGE
    return lo, max(hi - lo, 0)


def advise(ptr: int, nbytes: int) -> None:
    """Advise the huge pages inside host buffer ``[ptr, ptr + nbytes)`` for transparent
    huge pages, when it is at least :data:`MIN_BYTES` long (a failed advice is ignored:
    the buffer stays as it is)."""
    if nbytes < MIN_BYTES:
        return
    fn = _function()
    if fn is None:
        return
    lo, length = interior(ptr, nbytes)
    if length:
        fn(lo, length, MADV_HUGEPAGE)
