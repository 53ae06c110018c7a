"""CUDA graphs of jitted steps: a plan's launches captured once, replayed by one launch.

``qt.jit(step, cuda_graph=True)`` (or ``qt.config.cuda_graphs``) runs a GPU plan through
a :class:`GraphRunner` kept with the jitted signature. A small step is dominated by the
host's work per kernel launch and per allocated result; a replay is one
``cudaGraphLaunch`` for the whole plan, and its results are buffers the graph owns.

How a call is served (each case tested in ``tests/gpu/test_cuda_graphs.py``):

* An **instance** is one captured graph: the buffer addresses of its inputs, the result
  buffers and temporaries its launches write (allocated during the capture and kept by
  the instance, so no other allocation can ever be handed that memory while the graph
  refers to it), and the per-stream blocks (adstack, split-reduction scratch) it used.
* A call replays an instance whose inputs are the call's inputs (the same addresses:
  the graph reads whatever they hold now) and whose results are **free**: no reference
  to them is left outside the instance. Each result's reference count, and that of the
  memory it views, is compared with what the instance's own containers account for (the
  user's tensors, a pending graph that reads one, a CuPy view all add one), so a result
  the caller still holds is never overwritten.
* Memory exported from a result (``__cuda_array_interface__``, DLPack) may be read or
  written by its consumer at any time, and the consumer holds the tensor, not the memory:
  an instance with such a result is **retired** (never replayed again; its memory goes
  back to CuPy's pool when nothing holds it, as without graphs). Each replay gives its
  results' memory a new version (``qtrace.graph.buffers``), so caches of values read from
  it (an adstack's reduced trip counts) see the rewrite.
* Otherwise a free instance is **patched** to read the call's inputs: every kernel
  argument that pointed into an input at the capture is rewritten to the same offset in
  the new input (``cuGraphExecKernelNodeSetParams``, :mod:`qtrace.devices.cuda_driver`;
  counter ``cuda_graph_patches``), so a step called with new arrays each time replays
  one graph and is never captured again. Not patched (captured again over its own
  memory, its results and temporaries reused): an instance whose inputs overlapped one
  another at its capture, one with a result that is an input's memory (an argument
  returned as it is), new inputs overlapping memory the instance writes, a graph with a
  node that might read an input otherwise than through a qtrace kernel's arguments, a
  driver without these functions. Where no instance is free a new one is captured (up to
  :data:`RING` per signature): on a private stream, in relaxed capture mode, then
  launched on the current stream. Where none is free and the ring is full the call runs
  the plan as usual (launch by launch): graphs never change what a call computes. A
  signature whose calls bring new inputs that no graph can be patched to read, call after
  call (:data:`UNPATCHED_MAX` captures in a row: ``step(a, a)`` with a new ``a`` each
  time), runs launch by launch from then on, and :meth:`GraphRunner.why_not` says so. Each
  capture says why under ``QTRACE_LOG_RECOMPILES=1``. So ``x = step(x)`` settles on two
  instances whose inputs are each other's results: two captures, one patch.
* Ordering: before a replay the current stream waits for the qtrace work of every other
  stream (as every qtrace launch does), so a reader queued elsewhere of a result a
  replay rewrites has run by then; launches of one graph are ordered by the driver.
* Threads: the choice of an instance and its launch are one critical section per
  signature.
* **Compiled replays**: each instance whose inputs are all device arrays is *published*
  (:meth:`GraphRunner._publish`: its input addresses, graph and event handles, watched
  arrays with their expected reference counts, version records), and a jitted call of
  device tensors is first offered to the compiled recorder (``graph_call`` in
  ``qtrace/graph/_native.c``), which replays a free published instance with the checks
  above — one ``cuGraphLaunch`` and one ``cuEventRecord`` through the driver, no Python —
  and leaves every other case (a capture, staging, another stream with qtrace work, a
  busy or retired instance, another device current) to this module, unchanged.

Python scalars that the plan's kernels take by value (``Plan.host_leaves``: a step's
``dt``) are captured as marks in the kernels' parameters (``cuda_driver.mark``) and
patched with each call's values where they changed (``cuda_graph_value_patches``): no
copy in the graph, no wait. Other host arguments (small NumPy arrays, a scalar also read
otherwise): each instance has a pinned host block and device buffers for them, and its
graph begins with the copies from one to the other; a call writes its values into the
block, then replays. The block is written only once the instance's previous replay is
done with it (an event per instance; waiting for it counts as a ``device_sync``, rare: a
step fed its own results alternates between two instances). Larger host arrays (above
:data:`HOST_MAX` bytes) run as usual.

Index and overflow checks (gathers, scatters, adstacks): an instance has its own status
rows, zeroed once before its capture and never by a replay, so a failure stays until it is
read. They are read where the host next waits for the device anyway (as a run's are:
``qtrace.devices.cuda.defer_check``), once per run of replays, and a failure found there
is raised, naming the op, kernel and recording line, and retires the instance.

Reverse-mode loops: each call sizes the adstacks from its own leaves before choosing an
instance (as a run would: read on the host, cached reductions, or reductions of its
device leaves; each counted in ``qt.stats()``), and replays only an instance captured with
stacks at least that deep; a deeper call captures again (the reason logged). Instances
that defer checks or size stacks are replayed from Python, never published.

Plans a graph does not take (the call runs as usual, and :meth:`GraphRunner.why_not`
says why): reverse-mode loops sized from values the plan computes (a ``while_loop``'s
recorded trip counts, counts a task computes: read back between its launches), library
calls (a jitted function called inside a derivative is one whose own plan is captured,
unless that plan has checks or is one a graph does not take), results that are
constants, CPU plans.

Example (on a GPU; without one, ``device="cuda"`` raises):
    >>> import qtrace as qt
    >>> step = qt.jit(lambda x, v: (x + 0.01 * v, v - 0.04 * x), cuda_graph=True)
    >>> x, v = qt.ones(64, device="cuda"), qt.zeros(64, device="cuda")  # doctest: +SKIP
    >>> for _ in range(100):                                            # doctest: +SKIP
    ...     x, v = step(x, v)   # one graph launch per call
"""

from __future__ import annotations

import functools
import logging
import sys
import threading

import numpy as np

from ..config import config
from ..graph import buffers
from ..stats import bump, bump_many
from . import cuda, cuda_driver
from .registry import value_bits

log = logging.getLogger("qtrace")

RING = 4   # instances kept per signature
UNPATCHED_MAX = 8   # captures in a row over a free graph that could not be patched: graphs off
UNPATCHABLE = "no free graph can be patched to read these inputs"
HOST_MAX = 1 << 16   # bytes of a host argument a graph stages (larger: the call runs as usual)


def why_not(plan, nested: bool = False) -> str | None:
    """Why ``plan``'s calls cannot be replayed from a CUDA graph (None: they can).
    ``nested``: the plan of a jitted call inside another plan (captured with it)."""
    from .runtime import JitCall, LibraryCall
    if plan.rt.kind != "cuda":
        return f"a {plan.rt.kind} plan"
    if nested and plan.checks:   # (its status rows would be its own run's, read by nobody)
        return "index or overflow checks"
    if not plan.stacks_sized_from_leaves():
        return ("a reverse-mode loop sized from values the plan computes (a while_loop's "
                "recorded trip counts, or counts a task computes: read between its launches)")
    for step in plan.steps:
        if type(step) is LibraryCall:
            if type(step.runner) is not JitCall:
                return "a library call"
            sub = step.runner.plan()   # (a jitted function called inside a derivative:
            if sub.rt is not plan.rt:  # its kernels are captured with the rest)
                return "a jitted call on another device"
            inner = why_not(sub, nested=True)
            if inner is not None:
                return f"a jitted call whose plan has {inner}"
    if any(kind != "slot" for kind, _ in plan.outputs):
        return "a constant result"
    return None


def _refs(bufs: tuple) -> tuple:
    """Reference counts of ``bufs`` (compared with the counts taken the same way when the
    instance alone held them)."""
    return tuple(map(sys.getrefcount, bufs))


_probe = object()
_OVERHEAD = _refs((_probe,))[0] - 2   # what _refs itself adds (beyond the tuple and _probe)


_native = None   # the compiled recorder once bound (graph_call), False where it cannot be


def _bind(cp):
    """The compiled recorder with its CUDA graph replay bound (libcuda found), else None."""
    global _native
    if _native is None:
        from ..graph import native as graph_native
        from ..stats import native_address
        from . import cuda
        mod = graph_native.module()
        try:   # (CuPy's get_current_stream is compiled: no Python frame per call)
            ok = (mod is not None and type(buffers._lock) is mod.ViewsLock
                  and mod.bind_graphs("libcuda.so.1", cp.ndarray, buffers._State, cuda._streams,
                                      cp.cuda.get_current_stream, buffers._lock,
                                      native_address("cuda_graph_replays")))
        except (TypeError, AttributeError) as exc:   # (graphs then replay from Python)
            log.warning("qtrace: compiled CUDA graph replays are off: %s", exc)
            ok = False
        _native = mod if ok else False
    return _native or None


def _meets(spans, others) -> bool:
    """Whether a byte range of ``spans`` overlaps one of ``others``."""
    return any(a < b + m and b < a + n for a, n in spans for b, m in others)


class _Instance:
    __slots__ = ("inputs", "graph", "results", "owned", "made", "watched", "alone", "launches",
                 "staged", "pinned", "done", "owners", "records", "fast", "spans", "passes",
                 "status", "armed", "failed", "raise_failed", "depths", "values")

    def __init__(self, inputs: tuple, graph, results: tuple, owned: list, made: list,
                 launches: int, staged: list, pinned, done, input_spans: list,
                 status=None, raise_failed=None, depths: tuple = (), values: dict | None = None):
        self.inputs, self.graph, self.results = inputs, graph, results
        # index and overflow checks: the status rows every replay writes (never zeroed by
        # one: a failure stays until read), deferred for reading once per run of replays
        # (``armed``); a failure read retires the instance. ``depths``: the adstack depths
        # its stacks were sized for, per reverse-mode loop step and level
        self.status, self.raise_failed, self.depths = status, raise_failed, depths
        self.armed, self.failed = [False], False
        self.values = values or {}   # by-value input -> the bits its kernels hold now
        self.owned, self.made, self.launches = owned, made, launches
        # the memory its replays write (and the kept blocks they use): a new input there
        # would be read and written by one replay
        self.spans = tuple((b.data.ptr, b.nbytes) for b in (*owned, *made, *results))
        # a result that is (a view of) an input's memory, e.g. an argument returned as it
        # is: a patched replay would still return the old input (captured again instead)
        self.passes = _meets([(r.data.ptr, r.nbytes) for r in results], input_spans)
        # host arguments: (index, its view of the pinned block) each, and the block
        self.staged, self.pinned = staged, pinned
        self.done = done   # an event after its last replay
        # a result and the memory it views: a view of a view refers to the array that owns
        # the memory (CuPy, as NumPy), not to the result it was taken from
        self.owners = tuple(r.base if r.base is not None else r for r in results)
        self.watched = results + tuple(r.base for r in results if r.base is not None)
        self.alone, self.records, self.fast = None, (), None

    def fits(self, depths: tuple) -> bool:
        """Whether this call's adstack ``depths`` fit the stacks the graph was captured with."""
        return all(new <= old for now, was in zip(depths, self.depths) for new, old in zip(now, was))

    def check(self, host) -> None:
        """Read status rows ``host`` of its replays so far: a failure retires the instance
        (its status is never cleared behind a replay that may have written it) and raises,
        naming the op and kernel as a run launch by launch does."""
        if host[::2].any():
            self.failed = True
            self.raise_failed(host)

    def settle(self) -> None:
        """The reference counts of this instance's results while it alone holds them: the
        smaller of those counted now and of those its own containers account for (a
        thread holding one of them for a moment would inflate the first; the second
        assumes CuPy's views refer to their base and nothing else does), so a result
        someone else holds is never taken for free."""
        now = _refs(self.watched)
        held = self.results + self.watched + self.owners + tuple(self.owned) + tuple(self.made)
        own = tuple(sum(x is b for x in held) + sum(r.base is b for r in self.results)
                    + _OVERHEAD for b in self.watched)
        self.alone = tuple(map(min, now, own))
        self.records = buffers.watch(self.owners)

    def state(self) -> str:
        """``busy`` (someone holds a result or its memory), ``free``, or ``retired``: a
        result's memory was exported (``__cuda_array_interface__``, DLPack), whose
        consumer refers to the tensor, not to the memory (the instance must never write
        it again)."""
        if self.failed:
            return "retired"
        if self.alone is None or _refs(self.watched) != self.alone:
            return "busy"
        return "retired" if buffers.volatile(self.records) else "free"

    def launched(self, runtime, stream) -> None:
        """After a replay on ``stream``: its event (recorded through CuPy's ``runtime``
        module directly: its Event.record wrapper costs twice that); a new version of every
        result's memory (caches of what it held, keyed by version, see it rewritten)."""
        runtime.eventRecord(self.done.ptr, stream.ptr)
        buffers.advance(self.records)
        # (after the launch: see defer_check; a retired instance's failure was raised already)
        if self.status is not None and not self.armed[0] and not self.failed:
            self.armed[0] = True
            cuda.defer_check(self.status, self.check, self.armed)

    def publish(self, native) -> None:
        """After its first launch (the graph is instantiated by then): what the compiled
        replay reads (``graph_call``'s layout, in ``qtrace/graph/_native.c``), unless its
        inputs include staged host arguments, or its replays need checks deferred or
        adstacks sized (Python's replay does both)."""
        handle = getattr(self.graph, "graphExec", 0)
        if self.staged or self.values or not handle or self.status is not None or self.depths:
            return
        expect = tuple(a - _OVERHEAD for a in self.alone)
        self.fast = (self.inputs, handle, self.done.ptr, self.watched, expect, self.records,
                     self.results, self.launches, native.graph_context(), (self.graph, self.done))

    def patch(self, inputs: tuple, bufs: list, runner) -> int | None:
        """Make this instance's graph read ``inputs`` (device addresses of ``bufs``, -1 for
        a staged host argument, -2 for a scalar passed by value) instead of its own: each
        kernel argument pointing into a moved input is rewritten, and each by-value scalar
        that changed (``cuda_driver.Graph.patch``). The number of kernels
        rewritten; None where it cannot be patched (nothing changed then): no patchable
        graph, staged arguments at other positions, inputs that overlapped one another at
        the capture (which one an argument stands for cannot be told), a result that is an
        input's memory, or new inputs overlapping memory this instance writes. ``runner``
        republishes its instances around the change. A driver error or an interrupt midway
        propagates, this instance left matching no inputs (never replayed again)."""
        if (self.inputs is None or self.passes or not hasattr(self.graph, "patch")
                or len(inputs) != len(self.inputs)):
            return None
        if any((old < 0 or new < 0) and old != new for old, new in zip(self.inputs, inputs)):
            return None
        if _meets([(new, buf.nbytes) for new, buf in zip(inputs, bufs) if new >= 0], self.spans):
            return None
        # (unpublished while its graph changes: a patch stopped midway, by a driver error
        # or an interrupt, leaves it matching no inputs, and the caller captures over it)
        old_inputs, old_fast = self.inputs, self.fast
        self.inputs = self.fast = None
        runner._publish()
        values = {i: value_bits(bufs[i]) for i in self.values}   # (the call's scalars too)
        # (an input at its old address is not moved: one that overlapped another at the
        # capture may stay where it was while the others move)
        n = self.graph.patch([new if new >= 0 and new != old else None
                              for new, old in zip(inputs, old_inputs)], values)
        if n is None:   # (not patchable: nothing changed)
            self.inputs, self.fast = old_inputs, old_fast
        else:
            if values != self.values:
                bump("cuda_graph_value_patches")
            self.inputs, self.values = inputs, values
            self.fast = None if old_fast is None else (inputs,) + old_fast[1:]
        runner._publish()
        return n

    def patch_values(self, bufs: list) -> None:
        """Patch the call's by-value scalars into the kernels' parameters where they differ
        from those the graph holds (``cuda_graph_value_patches``). A driver error or an
        interrupt midway leaves the instance matching no inputs (never replayed again)."""
        now = {i: value_bits(bufs[i]) for i in self.values}
        if now == self.values:
            return
        try:
            self.graph.patch([None] * len(bufs), now)
        except BaseException:
            self.inputs = self.fast = None
            raise
        self.values = now
        bump("cuda_graph_value_patches")

    def release(self) -> list:
        """Forget every buffer (this instance is being replaced or dropped, once its last
        replay is done with them); the list of those it allocated, for a capture that
        replaces it to take."""
        if self.done is not None and not self.done.done:
            self.done.synchronize()
            bump("device_syncs")
        made = self.made
        self.results = self.owned = self.made = self.watched = self.staged = self.owners = ()
        self.records = ()
        self.graph = self.pinned = self.fast = None
        return made


class GraphRunner:
    """The CUDA graphs of one jitted signature's plan (see the module docstring)."""

    def __init__(self, plan):
        self.plan = plan
        from .runtime import KernelStep
        self.reason = why_not(plan)
        self.stacked = any(type(step) is KernelStep and step.stack is not None for step in plan.steps)
        # host scalars the kernels take by value: patched in, where the driver can patch
        self.by_value = (plan.host_leaves if self.reason is None and cuda_driver.driver() is not None
                         else frozenset())
        self.instances: list = []
        self.native = _bind(plan.rt.cp) if self.reason is None else None
        # (the compiled replay takes this lock without Python: a ViewsLock where it is bound)
        self.lock = self.native.ViewsLock() if self.native is not None else threading.Lock()
        self.fast: list = []   # the published instances, rewritten under the lock
        self._inside = threading.local()   # (this thread is choosing, capturing, launching)
        self._side = None
        self._unpatched = 0   # captures in a row over a free, unpatchable graph

    def why_not(self) -> str | None:
        """Why this signature's calls run launch by launch (None: they replay graphs)."""
        return self.reason

    def run(self, bufs: list, graph=None) -> list:
        """The plan's results on leaf buffers ``bufs`` (a replay, a capture, or the plan
        run as usual)."""
        if self.reason is None:
            cp = self.plan.rt.cp
            device = cp.ndarray
            inputs = []   # each input's device address, -1 for a host array to stage, -2 for
            by_value = self.by_value   # a scalar passed by value
            for i, b in enumerate(bufs):
                if type(b) is device:
                    inputs.append(b.data.ptr)
                elif type(b) is np.ndarray and i in by_value:
                    inputs.append(-2)
                elif type(b) is np.ndarray and b.nbytes <= HOST_MAX:
                    inputs.append(-1)
                else:
                    break
            else:
                sized = None
                if self.stacked:   # (sized as a run would, from this call's leaves, first)
                    rt = self.plan.rt
                    with rt.scope():
                        rt.queue()   # (a device leaf reduced now: after the work writing it)
                        sized = self.plan.size_stacks(
                            bufs, [b if type(b) is np.ndarray else None for b in bufs])
                out = self._graphed(cp, bufs, tuple(inputs), sized, graph)
                if out is not None:
                    return out
                return self.plan.run(bufs, graph, sized=sized)
        return self.plan.run(bufs, graph)

    def _graphed(self, cp, bufs: list, inputs: tuple, sized, graph):
        if getattr(self._inside, "now", False):
            return None   # (a call from code run while this thread changes the ring: a
                          # finalizer, say; launch by launch)
        self._inside.now = True
        try:
            return self._graphed_locked(cp, bufs, inputs, sized, graph)
        finally:
            self._inside.now = False

    def _graphed_locked(self, cp, bufs: list, inputs: tuple, sized, graph):
        rt = self.plan.rt
        runtime = cp.cuda.runtime
        depths = () if sized is None else tuple(tuple(d for d, _, _ in levels) for levels in sized)
        with self.lock, rt.scope():
            stream = cp.cuda.get_current_stream()
            rt.queue(stream)   # (this stream waits for the qtrace work of the others)
            k, why = self._choose(inputs, bufs, depths)
            self._unpatched = self._unpatched + 1 if why == UNPATCHABLE else 0
            if self._unpatched > UNPATCHED_MAX:   # (a capture per call costs more than it saves)
                self.reason = (f"{UNPATCHED_MAX} calls in a row whose new inputs no graph could be "
                               "patched to read (inputs overlapping one another): one capture per call")
                self.fast.clear()
                return None
            if k < 0:
                # (no reference to a replaced instance or its buffers is left in this frame
                # when the new one settles: its reference counts must be its own alone)
                reuse = []
                if k != -len(self.instances) - 1:
                    replaced = self.instances.pop(-k - 1)
                    self._publish()   # (before its release, which may raise)
                    reuse = replaced.release()
                    del replaced
                if not reuse and len(self.instances) >= RING:
                    return None
                if config.log_recompiles:
                    log.warning("qt.jit: capturing a CUDA graph of a %d-launch plan because %s",
                                self.plan.n_launches, why)
                chosen = self._capture(cp, bufs, inputs, reuse, sized, depths, graph)
                del reuse
                if chosen is None:
                    return None
                self.instances.append(chosen)
                chosen.settle()
                chosen.graph.launch(stream)   # (its capture counted the launches)
                chosen.launched(runtime, stream)
                rt.launched(stream)
                if self.native is not None:
                    chosen.publish(self.native)
                self._publish()
                bump_many((("cuda_graph_captures", 1), ("cuda_graph_replays", 1)))
                return list(chosen.results)
            chosen = self.instances[k]
            if chosen.values:
                try:
                    chosen.patch_values(bufs)
                except cuda_driver.CudaDriverError:   # (the instance matches nothing now:
                    return None                       # this call runs launch by launch)
            if chosen.staged:
                if not chosen.done.done:   # its last replay may still read the block
                    chosen.done.synchronize()
                    bump("device_syncs")
                for i, view in chosen.staged:
                    np.copyto(view, bufs[i])
            chosen.graph.launch(stream)
            chosen.launched(runtime, stream)
            rt.launched(stream)
            bump_many((("cuda_graph_replays", 1), ("kernel_launches", chosen.launches),
                       ("tasks_run", chosen.launches)))   # (a GPU kernel is one task)
            return list(chosen.results)

    def _choose(self, inputs: tuple, bufs: list, depths: tuple = ()) -> tuple[int, str]:
        """The index of a free instance to replay for ``inputs`` (one whose inputs they are,
        else one patched to read them: ``cuda_graph_patches``) whose adstacks are deep
        enough for ``depths``; else ``-i - 1`` for free instance ``i`` (to capture again),
        or ``-len(instances) - 1`` where none is free, with the reason. Retired instances
        leave the ring."""
        instances = self.instances
        for i, inst in enumerate(instances):
            if inst.inputs == inputs:
                state = inst.state()
                if state == "free":
                    if inst.fits(depths):
                        return i, ""
                    return -i - 1, (f"this call's adstacks need depths {depths}, deeper than "
                                    f"the {inst.depths} its graph was captured with")
                if state == "retired":
                    return self._retire(i, inputs, bufs, depths)
        free = None
        for i, inst in enumerate(instances):
            state = inst.state()
            if state == "retired":
                return self._retire(i, inputs, bufs, depths)
            if state == "free" and not inst.fits(depths):
                free = i if free is None else free
            elif state == "free":
                try:
                    patched = inst.patch(inputs, bufs, self)
                except cuda_driver.CudaDriverError:
                    patched = None   # (it matches no inputs now: captured over below)
                if patched is not None:
                    bump("cuda_graph_patches")
                    return i, ""
                if free is None:
                    free = i
        if free is not None:
            return -free - 1, UNPATCHABLE
        return -len(instances) - 1, ("the first call" if not instances else
                                     "every graph's results are still held")

    def _retire(self, i: int, inputs: tuple, bufs: list, depths: tuple) -> tuple[int, str]:
        """Drop retired instance ``i``, then choose again."""
        retired = self.instances.pop(i)
        self._publish()   # (before its release, which may raise)
        retired.release()
        return self._choose(inputs, bufs, depths)

    def _publish(self) -> None:
        """Rewrite the list of published instances (under the lock), in the ring's order:
        the compiled replay takes the first whose inputs match, as :meth:`_choose` does."""
        self.fast[:] = [inst.fast for inst in self.instances if inst.fast is not None]

    def __del__(self):
        # (its instances' memory goes back to CuPy's pool once their replays are done; none
        # is offered to the compiled replay any more)
        getattr(self, "fast", []).clear()
        for inst in getattr(self, "instances", ()):
            try:
                inst.release()
            except Exception:  # noqa: BLE001 - (interpreter shutdown: nothing to protect)
                pass

    def _capture(self, cp, bufs: list, inputs: tuple, reuse, sized, depths: tuple, nodes):
        """A new instance for ``inputs``, its buffers those of ``reuse`` where they fit (None,
        and graphs off for this signature, where the capture fails: the call then runs as
        usual); its adstacks as ``sized`` (:meth:`Plan.size_stacks`: ``depths``); a failed
        check names the lines that recorded ``nodes`` (the call's outputs), as :meth:`Plan.run`'s."""
        rt = self.plan.rt
        plan = self.plan
        status = None   # (zeroed on the current stream, where the graph is launched; never
        if plan.checks:  # one a replaced instance had: a failure in it may be unread)
            status = cp.zeros(2 * len(plan.checks), np.int64)
        if self._side is None:
            self._side = cp.cuda.Stream(non_blocking=True)
        mode = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", None)
        drv = cuda_driver.driver()
        side = self._side
        hosts = [i for i, p in enumerate(inputs) if p == -1]
        marked = tuple(i for i, p in enumerate(inputs) if p == -2)
        offsets, size = [], 0
        for i in hosts:
            offsets.append(size)
            size += -(-max(bufs[i].nbytes, 1) // 64) * 64
        pinned = cp.cuda.alloc_pinned_memory(size) if hosts else None
        block = np.frombuffer(pinned, np.uint8, size) if hosts else None
        staged, leaves = [], list(bufs)
        for i in marked:   # (an 8-byte mark in each by-value parameter, found in the graph)
            leaves[i] = np.array(cuda_driver.mark(i), np.uint64)
        try:
            with rt.capturing(reuse) as (owned, made, fills), side:
                for i, at in zip(hosts, offsets):   # (before the capture: no allocation in it)
                    host = bufs[i]
                    view = block[at:at + host.nbytes].view(host.dtype).reshape(host.shape)
                    np.copyto(view, host)
                    staged.append((i, view))
                    leaves[i] = rt.empty(host.shape, host.dtype)
                if drv is not None:   # (a graph whose arguments can be patched)
                    cuda_driver.begin_capture(side.ptr)
                else:
                    side.begin_capture() if mode is None else side.begin_capture(mode)
                try:
                    for i, view in staged:   # the graph's first nodes
                        if view.nbytes:
                            cp.cuda.runtime.memcpyAsync(leaves[i].data.ptr, view.ctypes.data,
                                                        view.nbytes, 1, side.ptr)   # (host to device)
                    results = tuple(plan.run(leaves, None, queue=False, status=status, sized=sized))
                finally:
                    graph = (cuda_driver.Graph(side.ptr, [(p, b.nbytes) if p >= 0 else None
                                                          for p, b in zip(inputs, bufs)],
                                               sum(1 for _, view in staged if view.nbytes), marked)
                             if drv is not None else side.end_capture())
            values = {i: value_bits(bufs[i]) for i in marked}   # (the marks replaced by them)
            if marked and graph.patch([None] * len(bufs), values) is None:
                raise RuntimeError("by-value scalars in a graph that cannot be patched")
        except Exception as exc:  # noqa: BLE001 - a capture the driver refuses: no graphs here
            self.reason = f"the capture failed ({type(exc).__name__}: {exc})"
            self.fast.clear()   # (no replays from the compiled path either)
            return None
        for fill in fills:   # (on the current stream, before the graph's first launch there)
            cuda.write_headers(*fill)
        done = cp.cuda.Event(disable_timing=True)
        # (the kernels a replay launches: a jitted call's inside the plan's included)
        launches = graph.kernel_count() if hasattr(graph, "kernel_count") else self.plan.n_launches
        return _Instance(inputs, graph, results, owned, made, launches, staged,
                         pinned, done, [(p, b.nbytes) for p, b in zip(inputs, bufs) if p >= 0],
                         status, functools.partial(plan.check, graph=nodes), depths, values)
