"""Kernels shared by body: tasks whose lowered code is the same text run one kernel.

A task's content key holds its domain, so the same operations on arrays of a new size are
a new task, with a new kernel symbol; but their code is usually the same, since extents
reach an entry point as arguments (``sin(x) * 2 + 1`` of 13 elements or of 13 million
lowers to the same text). Before compiling, :func:`~qtrace.devices.runtime.compile_plan`
lowers each task new to the process into a module of its own and hashes its text with
the entry symbol blanked (:func:`probe`); a task whose text matches one this process has
compiled for the same target, device and bounds checking takes that kernel
(``qt.stats()["kernels_shared"]`` counts them) instead of a new LLVM compile. Text is what
LLVM is given, so equal text is equal code; anything the code depends on (constants,
strides, extents where they are folded in, the lowering options) is in it.

The registry holds digests only, and finds a kernel through the runtime's kernel table,
so a kernel removed from there is not shared. Callers hold the runtime's lock.

Example:
    >>> import numpy as np, qtrace as qt
    >>> _ = (qt.sin(qt.asarray(np.ones(1001))) * 3.0).numpy()
    >>> qt.reset_stats()
    >>> _ = (qt.sin(qt.asarray(np.ones(1002))) * 3.0).numpy()
    >>> qt.stats()["compiles"], qt.stats()["kernels_shared"]
    (0, 1)
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

_BLANK = "@qt_entry"


class Compiled(NamedTuple):
    """Where a body's kernel is: its symbol, the disk entry file that holds its code (None:
    not stored), and the tiered compile that stores that file once its optimised code is
    ready (None: stored already, or never; see ``qtrace.devices.runtime._TieredUp``)."""

    symbol: str
    source: str | None
    tier: object = None


_bodies: dict = {}   # (target key, device, check_bounds, digest) -> Compiled


def probe(target, task, symbol: str, check: bool, module_name: str) -> tuple:
    """``(digest, module)``: ``task`` lowered alone as ``symbol`` into a new module named
    ``module_name`` (ready to compile as it is), and the digest of its text."""
    from ..kernels import loop_hints  # (LLVM's modules load when something is compiled)
    module = target.new_module(module_name)
    target.lower(task, module, symbol, check)
    text = str(module)
    text = text[text.index("\n") + 1:].replace(symbol, _BLANK)   # (line 1 names the module)
    # (and what the CPU back end reads from the module besides its text)
    text += f"\n; epilogues {loop_hints.wants_epilogues(module)}"
    return hashlib.sha256(text.encode()).hexdigest(), module


def find(target_key: str, device, check: bool, digest: str) -> Compiled | None:
    """The kernel compiled with body ``digest``, if any."""
    return _bodies.get((target_key, device, check, digest))


def add(target_key: str, device, check: bool, digest: str, symbol: str,
        source: str | None, tier=None) -> None:
    """Note that ``symbol`` was compiled with body ``digest`` (first one wins)."""
    _bodies.setdefault((target_key, device, check, digest), Compiled(symbol, source, tier))
