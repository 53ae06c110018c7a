"""The host CPU's identity for kernel keys, known without loading LLVM on a warm start.

A CPU kernel's key names the target its machine code was made for: the triple, the CPU
LLVM detects, that CPU's features, and the LLVM and llvmlite versions
(:func:`qtrace.kernels.llvm_cpu.target_info`). Asking LLVM means loading it (~35 ms and
~40 MB): a warm start, whose kernels all come from the disk cache, would pay that only to
compute the keys. So the answer is recorded in the disk cache's root directory under a
fingerprint of what it depends on, read without LLVM: the llvmlite version (which fixes
the LLVM version), the operating system and architecture, and the CPU's vendor, family,
model, stepping and feature flags as the kernel reports them (``/proc/cpuinfo``). A
process finding its fingerprint's record reads it; otherwise it asks LLVM and writes the
record. Without ``/proc/cpuinfo`` (not Linux) or without a usable disk cache, LLVM is
asked.

Example:
    >>> from qtrace.kernels import host
    >>> sorted(host.target_info())
    ['cpu', 'features', 'llvm', 'llvmlite', 'triple']
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import threading

_lock = threading.Lock()
_info: list = []
_FIELDS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags",
           "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "Features")
_KEYS = {"triple", "cpu", "features", "llvm", "llvmlite"}


def fingerprint() -> str | None:
    """A digest of everything LLVM's answer depends on, or None where the CPU's identity
    cannot be read without LLVM."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n", 1)[0]
    except OSError:
        return None
    lines = sorted(line for line in first.splitlines() if line.split(":")[0].strip() in _FIELDS)
    if not lines:
        return None
    import llvmlite  # the package's version only (its LLVM binding is not loaded)
    parts = [sys.platform, os.uname().machine, llvmlite.__version__, *lines]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _record_path() -> str | None:
    fp = fingerprint()
    if fp is None:
        return None
    from . import disk_cache
    directory = disk_cache.usable_dir()   # (the kernel directory: the root is made private too)
    return None if directory is None else os.path.join(os.path.dirname(directory), f"machine-{fp}.json")


def _read(path: str) -> dict | None:
    try:
        with open(path) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or set(info) != _KEYS or not all(isinstance(v, str) for v in info.values()):
        return None
    return info


def _write(path: str, info: dict) -> None:
    """Atomically; a failure leaves no record (LLVM is asked again next time)."""
    from . import disk_cache
    try:
        disk_cache.write_atomically(path, json.dumps(info, sort_keys=True).encode(), "machine")
    except OSError:
        pass


def target_info() -> dict:
    """``{triple, cpu, features, llvm, llvmlite}`` of the host (once per process): from
    this machine's record in the disk cache when there is one, else from LLVM (and
    recorded)."""
    with _lock:
        if _info:
            return _info[0]
        path = _record_path()
        info = _read(path) if path else None
        if info is None:
            from . import llvm_cpu
            info = llvm_cpu.target_info()
            if path:
                _write(path, info)
        _info.append(info)
        return info


@functools.cache
def last_level_cache() -> int:
    """Bytes of the CPU's last-level cache as Linux reports it (0 where it does not).

    Example:
        >>> from qtrace.kernels import host
        >>> host.last_level_cache() >= 0
        True
    """
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = (0, 0)
    try:
        names = os.listdir(base)
    except OSError:
        return 0
    for name in names:
        try:
            with open(os.path.join(base, name, "level")) as f:
                level = int(f.read())
            with open(os.path.join(base, name, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        try:
            size = int(text.rstrip("KMGkmg")) * scale
        except ValueError:
            continue
        best = max(best, (level, size))
    return best[1]
