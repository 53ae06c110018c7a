"""Device runtimes: what a plan needs from the device it runs on, and which runtime serves
a device.

A :class:`DeviceRuntime` allocates buffers, gives their addresses, moves data to and
from the host, launches a compiled kernel over a range with its argument pointers, and
synchronises. The plan executor (:mod:`qtrace.devices.runtime`) only talks to this
interface; the CPU's runtime is :class:`qtrace.devices.cpu_runtime.CpuRuntime`, NVIDIA GPUs'
:class:`qtrace.devices.cuda.CudaRuntime` (CuPy's memory pool and launches).

Example:
    >>> import qtrace as qt
    >>> from qtrace.devices.registry import runtime_for
    >>> runtime_for(qt.Device("cpu")).kind
    'cpu'
"""

from __future__ import annotations

import numpy as np

from ..graph.device import per_device

ONE_LAUNCH = (("kernel_launches", 1), ("tasks_run", 1))   # the stats of a one-kernel run


def launch_parameters(bufs: list, slots: list, by_value: tuple, pointer) -> list:
    """The parameters of a launch of a kernel that takes values
    (:func:`qtrace.kernels.lowering.by_value_args`, at positions ``by_value`` of ``slots``):
    each slot's address (``pointer``; 0 for a host array, passed by value), then each
    by-value argument's bytes as an integer (a host array's; 0 for device memory, which
    the kernel reads). A host array in any other slot is a plan that failed to upload it:
    an error naming it, never a null pointer handed to the kernel."""
    params = [0 if type(bufs[s]) is np.ndarray else pointer(bufs[s]) for s in slots]
    if 0 in params:
        passed = {slots[i] for i in by_value}
        for s in slots:
            buf = bufs[s]
            if type(buf) is np.ndarray and s not in passed:
                raise RuntimeError(f"qtrace: a device kernel was given host memory for argument "
                                   f"{slots.index(s)} ({buf.dtype}{list(buf.shape)}): it was "
                                   "never uploaded (a qtrace bug; please report it)")
    for i in by_value:
        buf = bufs[slots[i]]
        params.append(value_bits(buf) if type(buf) is np.ndarray else 0)
    return params


def value_bits(buf: np.ndarray) -> int:
    """A host scalar's bytes as the integer a by-value kernel parameter carries."""
    return int.from_bytes(buf.tobytes(), "little")


class DeviceRuntime:
    """The interface a plan runs against (one instance per device)."""

    kind = ""
    xp = None            # the array module of this device's buffers (numpy, cupy)
    sequences = False    # runs of small kernels may become one native sequence launch

    def empty(self, shape: tuple, dtype):
        """An uninitialised C-contiguous buffer."""
        raise NotImplementedError

    def pointer(self, buf) -> int:
        """The device address of ``buf``'s first element."""
        raise NotImplementedError

    def to_host(self, buf):
        """``buf`` as a NumPy array (a copy for device memory; a synchronisation)."""
        raise NotImplementedError

    def from_host(self, array):
        """A buffer of this device holding ``array``'s values."""
        raise NotImplementedError

    def launch(self, kernel, extent: int, pointers: list, status: int, levels, parallel: bool,
               scratch: int = 0, phases: int = 1, zeroed: int = 0) -> None:
        """Run ``kernel`` over ``[0, extent)`` with the buffers at ``pointers``; ``status``
        is the address of its two-word report row (0: none); ``levels`` the adstack
        levels ``[(depth, float row bytes, int row bytes), ...]`` or None; ``scratch``
        the bytes of scratch it needs (a split reduction's partials, a split scan's
        totals), of which the first ``zeroed`` must be zero at launch
        (:func:`qtrace.kernels.lowering.split_scratch`); ``phases``: the range runs as that
        many equal parts, each finished before the next starts (a split scan's two passes)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait until every launch of this device has finished."""

    def run_kernel(self, one: tuple, leaves: list, n_slots: int, queue: bool = True) -> list:
        """Run a plan of one kernel and nothing else, ``(kernel, extent, slots, allocations,
        output slots, scratch bytes, zeroed bytes)`` (``Plan._one_kernel``), on the buffers
        ``leaves`` of its first slots (host arrays are copied to the device first, as
        ``Plan.run`` does, unless ``queue`` is false); ``n_slots`` in all. Returns its
        output buffers."""
        raise NotImplementedError

    def queue(self):
        """A run is about to queue work (a GPU runtime notes on which stream, so that reads
        wait for it: ``qtrace.devices.cuda.order_reads``, and returns it)."""

    def launched(self, stream) -> None:
        """A run has queued its work on ``stream`` (what :meth:`queue` returned; a GPU
        runtime notes it again: ``qt.sync()`` in another thread, between :meth:`queue` and
        the launches, may have found it idle and forgotten it)."""

    def defer_check(self, status, check) -> None:
        """Have ``check`` (raising the first failed check) read the status rows ``status``
        of a finished run: at once here; a GPU runtime reads them when the host next waits
        for the device anyway."""
        check(self.to_host(status))


@per_device
def runtime_for(device) -> DeviceRuntime:
    """The runtime of ``device`` (a :class:`qtrace.Device`), created on first use."""
    if device.kind == "cpu":
        from .cpu_runtime import CpuRuntime
        return CpuRuntime()
    from .cuda import CudaRuntime
    return CudaRuntime(device.index)
