"""The evaluation hooks: the tracer asks for values and plans here; a device runtime answers.

``qtrace.devices`` installs the runtime at import (layers import only upward, so the
tracer and graph layers cannot import the device layer themselves).
"""

from __future__ import annotations

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
