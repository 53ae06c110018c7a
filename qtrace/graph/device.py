"""Devices as values: what a tensor lives on. Buffers and launches live in ``qtrace.devices``."""

from __future__ import annotations

import threading


class Device:
    """A place where tensors live and kernels run: ``cpu`` or ``cuda:N``.

    Devices compare and hash by name, so ``qt.Device("cpu") == qt.devices()[0]``.

    Example:
        >>> import qtrace as qt
        >>> str(qt.zeros(3).device)
        'cpu'
    """

    __slots__ = ("kind", "index", "name", "__weakref__")
    _interned: dict = {}

    def __new__(cls, spec: str | Device = "cpu"):
        # devices are interned: one object per device, hashed by identity (cheap in the
        # signature checks of every jitted call)
        if isinstance(spec, Device):
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"qt.Device: expected a string like 'cpu' or 'cuda:0', got {spec!r}")
        dev = cls._interned.get(spec)
        if dev is None:
            dev = object.__new__(cls)
            dev._parse(spec)
            dev = cls._interned.setdefault(str(dev), dev)
            cls._interned[spec] = dev
        return dev

    def _parse(self, spec) -> None:
        if not isinstance(spec, str):
            raise TypeError(f"qt.Device: expected a string like 'cpu' or 'cuda:0', got {spec!r}")
        kind, _, index = spec.partition(":")
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"qt.Device: unknown device {spec!r}; expected 'cpu' or 'cuda[:N]'")
        if kind == "cpu" and index not in ("", "0"):
            raise ValueError(f"qt.Device: there is one CPU device, got {spec!r}")
        self.kind = kind
        self.index = int(index) if index else 0
        self.name = "cpu" if kind == "cpu" else f"cuda:{self.index}"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Device('{self}')"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Device(other)
            except (TypeError, ValueError):
                return False
        return isinstance(other, Device) and (self.kind, self.index) == (other.kind, other.index)

    __hash__ = object.__hash__


CPU = Device("cpu")


def per_device(make):
    """``make(device)`` called once per device (thread-safe); the function returning it.

    Example:
        >>> made = per_device(lambda d: object())
        >>> made(CPU) is made(Device("cpu"))
        True
    """
    cache: dict = {}
    lock = threading.Lock()

    def get(device):
        got = cache.get(device)
        if got is None:
            with lock:
                got = cache.get(device)
                if got is None:
                    got = cache[device] = make(device)
        return got
    get.__doc__ = make.__doc__
    return get
