"""Devices as values: what a tensor lives on. Buffers and launches live in ``qtrace.devices``."""

from __future__ import annotations


class Device:
    """A place where tensors live and kernels run: ``cpu`` or ``cuda:N``.

    Devices compare and hash by name, so ``qt.Device("cpu") == qt.devices()[0]``.

    Example:
        >>> import qtrace as qt
        >>> str(qt.zeros(3).device)
        'cpu'
    """

    __slots__ = ("kind", "index")

    def __init__(self, spec: str | Device = "cpu") -> None:
        if isinstance(spec, Device):
            self.kind, self.index = spec.kind, spec.index
            return
        if not isinstance(spec, str):
            raise TypeError(f"qt.Device: expected a string like 'cpu' or 'cuda:0', got {spec!r}")
        kind, _, index = spec.partition(":")
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"qt.Device: unknown device {spec!r}; expected 'cpu' or 'cuda[:N]'")
        if kind == "cpu" and index not in ("", "0"):
            raise ValueError(f"qt.Device: there is one CPU device, got {spec!r}")
        self.kind = kind
        self.index = int(index) if index else 0

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    def __repr__(self) -> str:
        return f"Device('{self}')"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Device(other)
            except (TypeError, ValueError):
                return False
        return isinstance(other, Device) and (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self) -> int:
        return hash((self.kind, self.index))


CPU = Device("cpu")
