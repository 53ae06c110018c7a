"""The evaluation hooks: the tracer asks for values and plans here; a device runtime answers.

``qtrace.devices`` installs the runtime at import (layers import only upward, so the
tracer and graph layers cannot import the device layer themselves).
"""

from __future__ import annotations

import numpy as np

_runtime = None


def install(runtime) -> None:
    """Install a runtime: an object with ``evaluate(nodes)`` and ``plan_for(nodes, key)``."""
    global _runtime
    _runtime = runtime


def _get():
    if _runtime is None:  # pragma: no cover - qtrace/__init__ always installs one
        raise RuntimeError("qtrace: no device runtime installed (import qtrace, not its parts)")
    return _runtime


def evaluate(nodes: tuple) -> list:
    """Buffers holding the values of ``nodes`` (compiled and launched as one graph)."""
    return _get().evaluate(nodes)


def plan_for(nodes: tuple, key: str):
    """The executable plan computing ``nodes`` (cached by the graph's content ``key``)."""
    return _get().plan_for(nodes, key)


def graph_runner(plan):
    """What replays ``plan`` (a GPU plan of a jitted signature) from CUDA graphs: an object
    with ``run(buffers, graph)`` and ``why_not()`` (:mod:`qtrace.devices.cuda_graphs`)."""
    return _get().graph_runner(plan)


def plan_options(device) -> dict:
    """The keyword arguments of :func:`qtrace.graph.plan.build_plan` that ``device``'s
    target chooses (its lanes, its smallest base of a region task)."""
    return _get().plan_options(device)


def to_device(array, device):
    """A buffer on ``device`` holding host ``array`` (``array`` itself for the CPU)."""
    if device.kind == "cpu":
        return array
    return _get().to_device(array, device)


def to_host(buf):
    """``buf`` as a NumPy array: itself for host memory, a copy of device memory."""
    if isinstance(buf, np.ndarray):
        return buf
    return _get().to_host(buf)


def available_devices() -> list:
    """The accelerators the installed runtime can run on (CUDA GPUs), possibly none."""
    return _get().available_devices()


def unavailable(device) -> str | None:
    """Why ``device`` cannot be used here (None when it can)."""
    return _get().unavailable(device)


def sync() -> None:
    """Wait for all device work."""
    _get().sync()


def order_reads(buf) -> None:
    """Make the current stream of device buffer ``buf``'s device wait for the work qtrace
    queued on its other streams (before ``buf`` is handed to a consumer reading it there)."""
    _get().order_reads(buf)
