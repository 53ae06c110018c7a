"""CUDA graphs of jitted steps: a plan's launches captured once, replayed by one launch.

``qt.jit(step, cuda_graph=True)`` (or ``qt.config.cuda_graphs``) runs a GPU plan through
a :class:`GraphRunner` kept with the jitted signature. A small step is dominated by the
host's work per kernel launch and per allocated result; a replay is one
``cudaGraphLaunch`` for the whole plan, and its results are buffers the graph owns.

How a call is served (each case tested in ``tests/gpu/test_cuda.py``):

* An **instance** is one captured graph: the buffer addresses of its inputs, the result
  buffers and temporaries its launches write (allocated during the capture and kept by
  the instance, so no other allocation can ever be handed that memory while the graph
  refers to it), and the per-stream blocks (adstack, split-reduction scratch) it used.
* A call replays an instance whose inputs are the call's inputs (the same addresses:
  the graph reads whatever they hold now) and whose results are **free**: no reference
  to them is left outside the instance (``sys.getrefcount``, exact: the user's tensors,
  a pending graph that reads one, a CuPy or DLPack view, all hold a reference to the
  result or to the memory it views). A
  result the caller still holds is therefore never overwritten. A step fed its own
  results (``x = step(x)``) alternates between two instances.
* Otherwise a free instance is captured again for the new inputs, over its own memory
  (its results and temporaries are reused: so ``x = step(x)`` settles on two instances
  whose inputs are each other's results), or, where none is free, a new one (up to
  :data:`RING` per signature): on a private stream, in relaxed capture mode, then
  launched on the current stream. Where none is free and the ring is full the call runs
  the plan as usual (launch by launch): graphs never change what a call computes.
* Ordering: before a replay the current stream waits for the qtrace work of every other
  stream (as every qtrace launch does), so a reader queued elsewhere of a result a
  replay rewrites has run by then; launches of one graph are ordered by the driver.
* Threads: the choice of an instance and its launch are one critical section per
  signature.

Plans a graph does not take (the call runs as usual, and :meth:`GraphRunner.why_not`
says why): host arguments (NumPy arrays, Python scalars: each call uploads them), index
or overflow checks (a replay would overwrite an unread failure), reverse-mode loops
(their stacks are sized from the data at each call), library calls, CPU plans.

Example (needs a GPU; see ``tests/gpu``):
    >>> import qtrace as qt                                  # doctest: +SKIP
    >>> step = qt.jit(lambda x, v: (x + 0.01 * v, v - 0.04 * x), cuda_graph=True)
    >>> x, v = qt.ones(64, device="cuda"), qt.zeros(64, device="cuda")
    >>> for _ in range(100):
    ...     x, v = step(x, v)                                # one graph launch per call
"""

from __future__ import annotations

import sys
import threading

from ..stats import bump, bump_many

RING = 4   # instances kept per signature


def why_not(plan) -> str | None:
    """Why ``plan``'s calls cannot be replayed from a CUDA graph (None: they can)."""
    from .runtime import KernelStep, LibraryCall
    if plan.rt.kind != "cuda":
        return f"a {plan.rt.kind} plan"
    if plan.checks:
        return "index or overflow checks (a replay would overwrite an unread failure)"
    for step in plan.steps:
        if type(step) is LibraryCall:
            return "a library call"
        if type(step) is KernelStep and step.stack is not None:
            return "a reverse-mode loop (its stacks are sized from the data at each call)"
    if any(kind != "slot" for kind, _ in plan.outputs):
        return "a constant result"
    return None


def _refs(bufs: tuple) -> tuple:
    """Reference counts of ``bufs`` (compared with the counts taken the same way when the
    instance alone held them)."""
    return tuple(map(sys.getrefcount, bufs))


class _Instance:
    __slots__ = ("inputs", "graph", "results", "owned", "made", "watched", "alone", "launches")

    def __init__(self, inputs: tuple, graph, results: tuple, owned: list, made: list,
                 launches: int):
        self.inputs, self.graph, self.results = inputs, graph, results
        self.owned, self.made, self.launches = owned, made, launches
        # a result and the memory it views: a view of a view refers to the array that owns
        # the memory (CuPy, as NumPy), not to the result it was taken from
        self.watched = results + tuple(r.base for r in results if r.base is not None)
        self.alone = None

    def settle(self) -> None:
        """Take the reference counts of this instance's results while it alone holds them
        (the caller holds no other reference to them, nor to the instance it replaced)."""
        self.alone = _refs(self.watched)

    def free(self) -> bool:
        """Whether nothing outside this instance refers to its results or their memory."""
        return self.alone is not None and _refs(self.watched) == self.alone

    def release(self) -> list:
        """Forget every buffer (this instance is being replaced); the list of those it
        allocated, for the capture that replaces it to take."""
        made = self.made
        self.results = self.owned = self.made = self.watched = ()
        self.graph = None
        return made


class GraphRunner:
    """The CUDA graphs of one jitted signature's plan (see the module docstring)."""

    def __init__(self, plan):
        self.plan = plan
        self.reason = why_not(plan)
        self.instances: list = []
        self.lock = threading.Lock()
        self._side = None

    def why_not(self) -> str | None:
        """Why this signature's calls run launch by launch (None: they replay graphs)."""
        return self.reason

    def run(self, bufs: list, graph=None) -> list:
        """The plan's results on leaf buffers ``bufs`` (a replay, a capture, or the plan
        run as usual)."""
        if self.reason is None:
            cp = self.plan.rt.cp
            if all(type(b) is cp.ndarray for b in bufs):
                out = self._graphed(cp, bufs)
                if out is not None:
                    return out
        return self.plan.run(bufs, graph)

    def _graphed(self, cp, bufs: list):
        rt = self.plan.rt
        inputs = tuple(b.data.ptr for b in bufs)
        with self.lock, rt.scope():
            stream = cp.cuda.get_current_stream()
            rt.queue()   # (this stream waits for the qtrace work of the others)
            k = self._choose(inputs)
            if k < 0:
                # (no reference to a replaced instance or its buffers is left in this frame
                # when the new one settles: its reference counts must be its own alone)
                reuse = self.instances.pop(-k - 1).release() if k != -len(self.instances) - 1 else []
                if not reuse and len(self.instances) >= RING:
                    return None
                chosen = self._capture(cp, bufs, inputs, reuse)
                del reuse
                if chosen is None:
                    return None
                self.instances.append(chosen)
                bump("cuda_graph_captures")
                chosen.settle()
            else:
                chosen = self.instances[k]
            chosen.graph.launch(stream)
            bump_many((("cuda_graph_replays", 1), ("kernel_launches", chosen.launches),
                       ("tasks_run", self.plan.n_tasks)))
            return list(chosen.results)

    def _choose(self, inputs: tuple) -> int:
        """The index of a free instance for ``inputs``; else ``-i - 1`` for free instance
        ``i`` (to capture again), or ``-len(instances) - 1`` where none is free."""
        instances = self.instances
        for i, inst in enumerate(instances):
            if inst.inputs == inputs and inst.free():
                return i
        for i, inst in enumerate(instances):
            if inst.free():
                return -i - 1
        return -len(instances) - 1

    def _capture(self, cp, bufs: list, inputs: tuple, reuse):
        """A new instance for ``inputs``, its buffers those of ``reuse`` where they fit (None,
        and graphs off for this signature, where the capture fails: the call then runs as
        usual)."""
        rt = self.plan.rt
        if self._side is None:
            self._side = cp.cuda.Stream(non_blocking=True)
        mode = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", None)
        side = self._side
        try:
            with rt.capturing(reuse) as (owned, made), side:
                side.begin_capture() if mode is None else side.begin_capture(mode)
                try:
                    results = tuple(self.plan.run(bufs, None, queue=False))
                finally:
                    graph = side.end_capture()
        except Exception as exc:  # noqa: BLE001 - a capture the driver refuses: no graphs here
            self.reason = f"the capture failed ({type(exc).__name__}: {exc})"
            return None
        return _Instance(inputs, graph, results, owned, made, self.plan.n_launches)
