"""The CPU's device runtime: host buffers, worker threads, MCJIT-compiled kernels.

Example:
    >>> import numpy as np, qtrace as qt
    >>> from qtrace.devices.registry import runtime_for
    >>> runtime_for(qt.Device("cpu")).empty((2, 3), np.dtype(np.float32)).shape
    (2, 3)
"""

from __future__ import annotations

import numpy as np

from ..config import config
from . import adstack, cpu
from .registry import DeviceRuntime


class CpuRuntime(DeviceRuntime):
    """Kernels are ``void k(i64 start, i64 end, ptr args, ptr status, ptr scratch)``
    called through ctypes; long ranges are split over the worker pool (each worker with
    its own adstack block, carved from memory this runtime keeps per calling thread:
    ``adstack.Scratch``) and stay interruptible; runs of small kernels become one
    sequence launch."""

    kind = "cpu"
    xp = np
    sequences = True

    # the plan's per-call path calls these for every buffer: no wrapper in between
    empty = staticmethod(cpu.aligned_empty)     # (shape, np.dtype)
    pointer = staticmethod(cpu.pointer)

    def __init__(self):
        self.stacks = adstack.Scratch()

    def to_host(self, buf):
        return buf

    def from_host(self, array):
        return array

    def launch(self, kernel, extent: int, pointers: list, status: int, levels, parallel: bool,
               scratch: int = 0, phases: int = 1, zeroed: int = 0) -> None:
        args = cpu.packer(len(pointers))(*pointers)
        st = status or None
        threads = config.num_threads
        workers = min(threads, extent // phases) if parallel and threads > 1 else 1
        block, stride = None, 0
        if scratch:   # shared by all workers (a split reduction's partials, a split scan's totals;
            block = np.zeros(scratch, np.uint8)   # zeroed whole: an interrupted launch leaves counters)
        elif levels is not None:
            block, stride = adstack.scratch(workers, levels, self.stacks)
        base = cpu.pointer(block) if block is not None else None
        if workers > 1:
            part = extent // phases   # phase p: [p * part, (p + 1) * part), after phase p - 1
            for p in range(phases):
                cpu.pool().run(kernel, part, args, st, base, stride, start=p * part)
        elif parallel:  # long enough to be worth interrupting (phases in order: one range)
            cpu.interruptible(kernel, 0, extent, args, st, base)
        else:
            kernel(0, extent, args, st, base)
