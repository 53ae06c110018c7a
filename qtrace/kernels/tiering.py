"""Tiered compilation of small CPU kernels: the first result from quickly compiled code,
optimised code installed behind it.

A new plan's kernels normally go through LLVM's O3 pipeline and its optimising code
generator before the first call can run: for B4's 50-operation step ~50 of the ~90 ms from
the call to the first result, while its kernel then runs for microseconds. Where a plan's
work is small, :func:`compile` instead

1. emits the module unoptimised (no pass pipeline, LLVM's fast instruction selector:
   ~5 ms for B4's module) with, for each kernel ``k``, an entry ``k.quick`` that loads a
   *slot* (a word of qtrace's memory, an external symbol the loaders resolve:
   :func:`qtrace.kernels.elf_loader.define`) and calls the slot's function if it is set,
   else the unoptimised ``k``; the plan is built on these entries and runs at once;
2. queues the same module text for the usual optimising compile on a background thread
   (LLVM runs without the GIL, so the caller's Python goes on meanwhile); when it is done
   the optimised kernels are loaded, their addresses written into the slots — from then
   on every plan holding a quick entry runs optimised code, at the cost of one indirect
   call per launch — and the ``ready`` callback hands the runtime the optimised kernels
   (for plans built later) and the object code (for the disk cache, which only ever
   holds optimised code).

Both tiers compute the same values: a plan is tiered only if its IR has no reassociable
operation (reductions, whose vectorized order differs from the scalar one) and its tasks
are maps without per-element loops; plain IR arithmetic means what IEEE says at every
optimisation level, and the outlined math functions' vector variants run the scalar
code lane by lane (:mod:`qtrace.kernels.outline`). Every result that is not a NaN has the
same bits in both tiers (signed zeros included); a NaN is a NaN in both, but which NaN
(its sign and payload) an operation on two NaNs returns is unspecified — the optimiser may
swap an addition's operands, and folds ``x * 1.0`` away where the quick code quiets a
signalling NaN — as it is between NumPy's own loops. So plans with operations that turn a
NaN's sign into a value (:data:`SIGN_READERS`, complex numbers) are not tiered. Tiered only
where the plan's work is at most :data:`WORK_LIMIT` (elements x operation cost,
:attr:`qtrace.graph.tasks.Task.cost`), so the unoptimised code's calls stay short while they
last.

One limit: llvmlite serialises every call into LLVM with one process-wide lock, so a quick
compile started while the background thread is inside the optimiser waits for that call
(up to a few tens of ms). The first plan's result comes early; a program that compiles many
plans at once gets them at about the pace it did without tiering (measured: the B8 programs'
cold first runs are unchanged).

An exiting interpreter waits for the queued compiles whose code the disk cache keeps (the
others are dropped) and tiers nothing new; a ``fork`` waits for the compile under way (a
child must never inherit LLVM in the middle of a compile; the jobs still queued are compiled
in both processes). Where no thread can be started, the caller compiles optimised at once.
:func:`wait` waits for the queue to drain.
``qt.config.tiered = False`` (``QTRACE_TIERED=0``) compiles every plan optimised, at once.
``qt.stats()``: ``compiles`` counts a tiered kernel once (its quick compile),
``tier_ups`` the kernels whose optimised code was installed.

Example:
    >>> import numpy as np, qtrace as qt
    >>> from qtrace.kernels import tiering
    >>> x = qt.asarray(np.arange(4.0))
    >>> (qt.sin(x) * 2).numpy().round(3)      # small work: first run unoptimised
    array([0.   , 1.683, 1.819, 0.282])
    >>> tiering.wait()                        # optimised code installed
    True
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import itertools
import os
import threading
import warnings
from collections.abc import Callable
from math import prod
from typing import NamedTuple

from ..config import config
from ..stats import bump

QUICK_SUFFIX = ".quick"
SLOT_PREFIX = "qt_tier_slot_"
# elements x operation cost at most, summed over a plan's new kernels, for the quick tier.
# Measured (one thread): unoptimised code runs ~3.4 (B4's float32 step) to ~4.5 ns (the
# cavity's jitted float64 step) per unit, optimised 0.2-0.4 (13-30x faster): at the limit a
# quick run takes ~5 ms, against 50-300 ms of optimising compile it spares the first result
WORK_LIMIT = 1 << 20
# operations that turn a NaN's sign into a value (complex math uses copysign throughout):
# which NaN an operation on two NaNs returns is unspecified (the optimiser may swap the
# operands of an addition), so a plan with one of these is not tiered
SIGN_READERS = frozenset({"copysign", "signbit"})

# the quick entry of kernel "{sym}": the optimised kernel once its slot is set, else "{sym}"
_STUB = """
@"{slot}" = external global ptr, align 8

define void @"{sym}{quick}"(i64 %start, i64 %end, ptr %args, ptr %status, ptr %scratch) {{
entry:
  %fn = load atomic ptr, ptr @"{slot}" acquire, align 8
  %unset = icmp eq ptr %fn, null
  br i1 %unset, label %quick, label %optimised
quick:
  tail call void @"{sym}"(i64 %start, i64 %end, ptr %args, ptr %status, ptr %scratch)
  ret void
optimised:
  tail call void %fn(i64 %start, i64 %end, ptr %args, ptr %status, ptr %scratch)
  ret void
}}
"""


class _Job(NamedTuple):
    prepared: object        # llvm_cpu.Prepared
    symbols: list
    slots: ctypes.Array     # one word per symbol: the optimised kernel's address, once loaded
    ready: Callable         # ready(kernels, object code), after the slots are set
    name: str
    persist: bool           # its object code is stored (an exiting process drops the others)


_lock = threading.Lock()
_changed = threading.Condition(_lock)    # a job ended, or the thread left
_queue: collections.deque = collections.deque()
# thread: the background thread while it runs; busy: jobs queued or running; paused:
# paused() blocks open; runner: the thread compiling a job now (None: none is); forking: a
# fork is under way (no job starts); exiting: the interpreter is exiting (nothing new is
# tiered)
_state = {"thread": None, "busy": 0, "paused": 0, "runner": None, "forking": False,
          "exiting": False}
_count = itertools.count()
_slots: list = []    # every slot array: the quick entries read them as long as the process lives


def eligible(tasks) -> bool:
    """Whether a plan whose new kernels are ``tasks`` should take the quick tier: tiering
    on (and no IR dump asked for: ``QTRACE_DUMP_IR`` writes each kernel's IR as it is
    compiled, optimised), every task a map without per-element loops, complex numbers or
    :data:`SIGN_READERS`, little work in all, and the interpreter not exiting."""
    if not config.tiered or config.dump_ir or _state["exiting"]:
        return False
    work = 0
    for t in tasks:
        if t.kind != "map" or t.has_loops or t.stack is not None or t.reduce is not None:
            return False
        if any(i.kind == "op" and (i.prim in SIGN_READERS or "c" in i.dt) for i in t.instrs):
            return False
        work += prod(t.domain) * max(t.cost, 1)
    return work <= WORK_LIMIT


def compile(prepared, symbols: list, ready: Callable, name: str = "module",
            persist: bool = True) -> dict | None:
    """The quick entries ``{symbol: kernel}`` of a module made ready by
    :func:`qtrace.kernels.llvm_cpu.prepare`, its optimised compile queued; ``ready(kernels,
    object code)`` is called on the background thread when the optimised kernels are
    installed (``persist``: whether it stores them; an exiting interpreter drops the queued
    compiles that do not). ``None`` where the module must not be tiered (a reassociable
    operation: the tiers' bits could differ)."""
    if " reassoc " in prepared.text:
        return None
    from . import elf_loader, llvm_cpu
    n = next(_count)
    slots = (ctypes.c_void_p * len(symbols))()
    _slots.append(slots)
    stubs = []
    for i, sym in enumerate(symbols):
        slot = f"{SLOT_PREFIX}{n}_{i}"
        elf_loader.define(slot, ctypes.addressof(slots) + i * ctypes.sizeof(ctypes.c_void_p))
        stubs.append(_STUB.format(slot=slot, sym=sym, quick=QUICK_SUFFIX))
    obj = llvm_cpu.emit_unoptimized(prepared.text + "".join(stubs))
    quick = llvm_cpu.load_object(obj, [sym + QUICK_SUFFIX for sym in symbols])
    bump("compiles", len(symbols))
    _submit(_Job(prepared, list(symbols), slots, ready, name, persist))
    return {sym: quick[sym + QUICK_SUFFIX] for sym in symbols}


def pending() -> int:
    """How many queued or running optimising compiles have not installed their kernels."""
    return _state["busy"]


def wait(timeout: float | None = None) -> bool:
    """Wait until every queued optimising compile has installed its kernels (or
    ``timeout`` seconds passed); whether none is left. Within :func:`paused` it waits only
    for the compile under way (the queued ones start after the block) and says ``False``
    if any is queued."""
    if threading.current_thread() is _state["thread"]:
        return _state["busy"] == 0     # (from a callback of the background thread itself)
    with _changed:
        _changed.wait_for(lambda: _state["busy"] == 0 or (
            _state["paused"] and _state["runner"] is None), timeout)
        return _state["busy"] == 0


@contextlib.contextmanager
def paused():
    """Within the block, optimising compiles are queued but not started (their plans run
    the quick code); they start when the block exits. For tests and for inspecting the
    quick tier.

    Example:
        >>> with paused():
        ...     pass
    """
    with _lock:
        _state["paused"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["paused"] -= 1
        _start()


def _submit(job: _Job) -> None:
    with _lock:
        _queue.append(job)
        _state["busy"] += 1
    _start()


def _start() -> None:
    """Start the background thread if there is work it may do and none runs. Where no
    thread can start (a limit on threads, an interpreter shutting down), the caller
    compiles the queued jobs itself, at once."""
    with _lock:
        if (not _queue or _state["thread"] is not None or _state["paused"]
                or _state["forking"]):
            return
        # (a daemon: an exiting interpreter waits for it in _at_exit, which first drops the
        # jobs whose code would not be kept)
        thread = threading.Thread(target=_work, name="qtrace-tier-up", daemon=True)
        _state["thread"] = thread
        try:
            thread.start()
            return
        except RuntimeError:
            _state["thread"] = None
    while True:     # no thread: compile here
        with _lock:
            if not _queue:
                return
            job = _queue.popleft()
            _state["runner"] = threading.current_thread()
        _run(job)


def _work() -> None:
    """The background thread: optimise queued jobs until none is left (or it must stop)."""
    me = threading.current_thread()
    try:
        while True:
            with _lock:
                if not _queue or _state["paused"] or _state["forking"]:
                    # (in the same critical section as the decision: a job queued after it
                    # finds no thread, and starts one)
                    _state["thread"] = None
                    _changed.notify_all()
                    return
                job = _queue.popleft()
                _state["runner"] = me
            _run(job)
    finally:   # (an unexpected exit: never leave a dead thread recorded as running)
        with _lock:
            if _state["thread"] is me:
                _state["thread"] = None
                _changed.notify_all()


def _run(job: _Job) -> None:
    """Compile ``job`` optimised and install it; a failure leaves its quick code running
    (slower, never wrong), counted in ``tier_up_failures`` and reported by a warning."""
    try:
        _tier_up(job)
    except Exception as exc:
        bump("tier_up_failures")
        _warn(f"qtrace: optimising {job.name} failed ({type(exc).__name__}: {exc}); "
              "its kernels keep running unoptimised")
    finally:
        with _lock:
            _state["busy"] -= 1
            _state["runner"] = None
            _changed.notify_all()


def _warn(message: str) -> None:
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=1)
    except Exception:   # (warnings turned into errors: the counter has it)
        pass


def _tier_up(job: _Job) -> None:
    from . import llvm_cpu
    kernels, obj = llvm_cpu.compile_prepared(job.prepared, job.symbols, counted=False,
                                             name=job.name)
    for i, sym in enumerate(job.symbols):
        job.slots[i] = ctypes.cast(kernels[sym], ctypes.c_void_p).value
    bump("tier_ups", len(job.symbols))
    try:
        job.ready(kernels, obj)
    except Exception as exc:   # (the slots are set: its plans run optimised code already)
        bump("tier_up_failures")
        _warn(f"qtrace: storing the optimised kernels of {job.name} failed "
              f"({type(exc).__name__}: {exc}); they run, but later plans compile them again")


def _at_exit() -> None:
    """An exiting interpreter tiers nothing new, drops the queued compiles whose code would
    not be stored, and waits for the others (so the disk cache gets them)."""
    with _lock:
        _state["exiting"] = True
        kept = [job for job in _queue if job.persist]
        _state["busy"] -= len(_queue) - len(kept)
        _queue.clear()
        _queue.extend(kept)
        _state["paused"] = 0
    _start()
    wait()


def _before_fork() -> None:
    """Hold the queue, with no compile running, across a ``fork``: the child must not
    inherit LLVM (or its locks) in the middle of a compile. Only the compile under way is
    waited for; queued jobs stay queued, in the parent and in the child. (A fork from the
    background thread itself, in a callback, waits for nothing. A fork must not happen
    while qtrace's runtime lock is held: the compile under way may need it to finish.)"""
    _lock.acquire()
    _state["forking"] = True
    me = threading.current_thread()
    while _state["runner"] is not None and _state["runner"] is not me:
        _changed.wait()


def _after_fork_in_parent() -> None:
    _state["forking"] = False
    _lock.release()
    _start()


def _after_fork_in_child() -> None:
    global _lock, _changed
    _lock = threading.Lock()
    _changed = threading.Condition(_lock)
    _state.update(thread=None, runner=None, forking=False)
    _start()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
