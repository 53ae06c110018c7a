"""Compiling plans into executable form, caching them, and running them on a device.

Two in-memory caches, both keyed by content hashes and guarded by one lock:
``plans`` maps (graph key, device, codegen options) to an executable plan, so eager code
that repeats the same steps compiles once; ``kernels`` maps (target key, device, kernel
symbol, bounds checking) to its loaded entry point (loaded once per device: two GPUs of one
architecture share machine code, not loaded modules), so identical tasks in different graphs share
machine code, and a CPU and a GPU kernel of the same task never collide.

The executor is target-free: kernels come from the device's
:class:`~qtrace.kernels.target.Target`, buffers and launches from its
:class:`~qtrace.devices.registry.DeviceRuntime`, library steps from the library registry.
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading
import weakref
from typing import NamedTuple

import numpy as np

from ..config import config
from ..errors import AdstackOverflowError
from ..graph import origins
from ..graph.node import graph_key, graph_struct
from ..graph.plan import PlanSpec, build_plan
from ..kernels import tiering  # noqa: F401  (now: its exit handler must come before the user's)
from ..kernels.lowering import (
    by_value_args,
    interleaves_stacks,
    split_phases,
    split_scratch,
    task_segments,
)
from ..kernels.target import target_for
from ..stats import bump, bump_many
from . import adstack, cpu, kernel_bodies, library
from .registry import ONE_LAUNCH, launch_parameters, runtime_for

_lock = threading.RLock()
_plans: dict = {}
_kernels: dict = {}


class KernelStep(NamedTuple):
    """Launch ``kernel`` over ``[0, extent)`` on the buffers of ``slots``."""

    kernel: object
    extent: int
    row: int              # status row of its index/overflow checks (-1: none)
    stack: object         # adstack.Stack of a reverse-mode loop task, or None
    scratch: int          # scratch bytes (a split reduction or scan)
    slots: list
    frees: list           # slots whose buffers are free after this step
    parallel: bool        # long enough to split over CPU workers
    phases: int = 1       # [0, extent) runs as this many equal ranges in order (a split scan)
    zeroed: int = 0       # leading bytes of scratch that must be zero at launch (split_scratch)
    by_value: tuple = ()  # positions in slots of arguments the kernel also takes by value


class LibraryCall(NamedTuple):
    """Run a library function (or a nested jitted call) on the first ``n_in`` slots; its
    results become the buffers of the other slots."""

    runner: object
    n_in: int
    slots: list
    frees: list


class ViewStep(NamedTuple):
    """Slot ``dst`` becomes a strided view of slot ``src``'s buffer through ``chain`` (a
    transposed operand of a matrix product, read in place): ``(prim, params, shape)`` of
    each view node, innermost first (not the nodes: a cached plan holds no graph)."""

    chain: tuple
    src: int
    dst: int
    frees: list


def view_of(buf, chain: tuple, xp):
    """``buf`` seen through the views ``chain`` (``(prim, params, shape)``, innermost
    first), as NumPy/CuPy views."""
    for prim, params, shape in chain:
        if prim == "transpose":
            buf = buf.transpose(params[0])
        elif prim == "reshape":
            buf = buf.reshape(shape)   # (a copy where no view exists, as NumPy's reshape)
        elif prim == "broadcast":
            buf = xp.broadcast_to(buf, shape)
        elif prim == "slice":
            buf = buf[tuple(slice(a, a + s * k if a + s * k >= 0 else None, s) if k else slice(0, 0)
                            for a, s, k in zip(*params, shape))]
        # wrt and stop_gradient: the value itself
    return buf


def _address(fn) -> int:
    """The machine address of a compiled function (a ctypes function pointer)."""
    return ctypes.cast(fn, ctypes.c_void_p).value


class CheckedTask(NamedTuple):
    """What a plan keeps of a task whose kernel reports checks: its kernel's name."""

    symbol: str


class SequenceStep(NamedTuple):
    """Several small CPU kernels in one native launch (:class:`_Sequence`)."""

    run: object
    slots: list
    frees: list


# what runs a library node, by its primitive (``library.LibraryStep`` for the rest)
STEP_RUNNERS = {"call": lambda step, rt: JitCall(step)}


class Plan:
    """An executable plan: kernels bound to slots, ready to run on input buffers.

    ``run`` is the per-call path of every jitted function and eager evaluation, so it
    does only this: allocate missing slots, hand each kernel its buffer addresses (the
    runtime packs them; never a block shared between threads or calls), size the stacks
    of reverse-mode loops, launch.
    """

    def __init__(self, spec: PlanSpec, kernels: dict, check_bounds: bool, device):
        # A cached plan keeps no graph node, task or schedule (they would keep the first
        # graph's buffers alive, and make every cyclic garbage collection walk them): the
        # outputs it was built for only weakly, to name their lines in an error
        self.key = spec.key
        self._built_for = tuple(weakref.ref(n) for n in spec.schedule.outputs)
        self.device = device
        self.rt = runtime_for(device)
        lowering = target_for(device).lowering
        self.n_leaves = len(spec.leaves)
        self.slot_meta = [(n.shape, n.dtype) for n in spec.slot_nodes]
        self.outputs = spec.outputs
        self.check_bounds = check_bounds
        self.checks = []  # per reporting step: (CheckedTask, its check table); status rows follow it
        self.steps = []
        slot_of = spec.slot_of
        leaf_slots = {id(leaf): i for i, leaf in enumerate(spec.leaves)}
        self.view_slots = set()
        for step in spec.steps:
            if step.kind == "view":
                chain = tuple((n.prim, n.params, n.shape) for n in step.chain)
                self.steps.append(ViewStep(chain, step.slots[0], step.slots[1], step.frees))
                self.view_slots.add(step.slots[1])
                continue
            if step.kind == "library":
                make = STEP_RUNNERS.get(step.node.prim)
                runner = (make(step, self.rt) if make is not None
                          else library.LibraryStep(step.node, step.outputs, self.rt))
                self.steps.append(LibraryCall(runner, len(step.node.inputs), step.slots, step.frees))
                continue
            t = step.task
            size = math.prod(t.domain + t.inner)
            if math.prod(t.domain) == 0:  # nothing to compute (an empty reduction still stores)
                continue
            segments = task_segments(t, lowering)   # a reduction (or scan) split over threads
            parallel = size >= cpu.PARALLEL_MIN_WORK and (t.domain[0] > 1 or segments > 1)
            row = -1
            if t.checks and (check_bounds or t.stack is not None):
                row = len(self.checks)
                self.checks.append((CheckedTask(t.symbol), t.checks))
            stack = None
            if t.stack is not None:
                loops = [what for kind, what, *_ in t.checks if kind == "adstack"]
                stack = adstack.Stack([(adstack.DepthSource(depth, slot_of, leaf_slots), fb, ib)
                                       for depth, fb, ib in t.stack], " ".join([t.symbol, *loops]),
                                      interleaves_stacks(t, lowering))
            extent = math.prod(t.domain) if lowering.flat or segments > 1 else t.domain[0]
            scratch, zeroed = split_scratch(t, segments, lowering)
            phases = split_phases(t, segments)
            by_value = tuple(i for i, _ in by_value_args(t, lowering))
            self.steps.append(KernelStep(kernels[t.symbol], extent * segments * phases, row, stack,
                                         scratch, step.slots, step.frees, parallel, phases, zeroed,
                                         by_value))
        self.n_tasks = sum(1 for s in self.steps if type(s) is KernelStep)
        self.host_leaves = self._host_leaves()
        self.unsequenced = self.steps   # one step per kernel (what a native FFI handler runs)
        if self.rt.sequences:
            self.steps = _sequences(self.steps)
        self.n_launches = sum(1 for s in self.steps if type(s) not in (LibraryCall, ViewStep))
        # the one-kernel case, (kernel, extent, pack, slots, allocations, output slots, empty
        # slots), or None: run's short path, and what qt.jit hands the compiled extension
        self.fast = self._fast_path() if self.rt.kind == "cpu" else None
        # the one-kernel case on another device: its runtime's short path (run_kernel)
        self.one = self._one_kernel() if self.rt.kind != "cpu" else None
        # the one-launch case as the compiled recorder's eager evaluation runs it, or None
        self.native = self._native_record() if self.rt.kind == "cpu" and cpu.FAST_POINTER else None

    def _host_leaves(self) -> frozenset:
        """The leaf slots a run on a device leaves where the caller's host arrays are (not
        uploaded): 0-d values that every kernel reading them takes by value
        (:func:`qtrace.kernels.lowering.by_value_args`), used by nothing else (no library
        call, view or output; an adstack sized from one reads it on the host anyway)."""
        by_value, other = set(), set()
        for step in self.steps:
            if type(step) is KernelStep:
                for i, s in enumerate(step.slots):
                    (by_value if i in step.by_value else other).add(s)
            elif type(step) is ViewStep:
                other.update((step.src, step.dst))
            else:
                other.update(step.slots)
        other.update(v for kind, v in self.outputs if kind == "slot")
        return frozenset(s for s in by_value - other if s < self.n_leaves)

    def _one_kernel(self):
        """The common small case, one kernel and nothing else to do, as ``(kernel, extent,
        slots, allocations, output slots, scratch bytes, zeroed bytes, by-value positions,
        host leaves)``, or None: run's short path (on a CPU, only for a kernel short enough
        to run on the calling thread, with no scratch; on a GPU, a split reduction too)."""
        if len(self.steps) != 1 or self.checks or any(k != "slot" for k, _ in self.outputs):
            return None
        step = self.steps[0]
        cpu_side = self.rt.kind == "cpu"
        if (type(step) is not KernelStep or step.stack is not None or step.phases != 1
                or (cpu_side and (step.parallel or step.scratch))):
            return None
        slots = step.slots
        if any(v not in slots for _, v in self.outputs):  # an output no kernel writes (empty)
            return None
        return (step.kernel, step.extent, slots, self._allocations(slots), [v for _, v in self.outputs],
                step.scratch, step.zeroed, step.by_value, self.host_leaves)

    def _fast_path(self):
        """:meth:`_one_kernel` on the CPU as ``(kernel, extent, pack, slots, allocations,
        output slots, empty slots)``: what ``qt.jit`` hands the compiled extension."""
        one = self._one_kernel()
        if one is None:
            return None
        kernel, extent, slots, allocs, outs, *_ = one
        extra = (None,) * (len(self.slot_meta) - self.n_leaves)
        return (kernel, extent, cpu.packer(len(slots)), slots, allocs, outs, extra)

    def _native_record(self):
        """One launch and nothing else to do — a kernel, or a sequence of small kernels, with
        no checks, on the calling thread, writing every output — as the record
        ``(kind, entry address, a, b, slots, allocations, outputs, slot count)`` that
        ``qtrace/graph/_native.c``'s ``flush`` runs (its layout is described there)."""
        if len(self.steps) != 1 or self.checks or any(k != "slot" for k, _ in self.outputs):
            return None
        step = self.steps[0]
        if type(step) is KernelStep:
            if step.parallel or step.stack is not None or step.scratch or step.phases != 1:
                return None
            entry = (0, _address(step.kernel), step.extent, 1)
        elif type(step) is SequenceStep:
            seq = step.run
            entry = (1, _address(seq.runner), seq.table_address, seq.n_tasks)
        else:
            return None
        slots = step.slots
        if any(v < self.n_leaves or v not in slots for _, v in self.outputs):
            return None
        return (*entry, tuple(slots), tuple(self._allocations(slots)),
                tuple(v for _, v in self.outputs), len(self.slot_meta))

    def _allocations(self, slots: list) -> list:
        """``(slot, shape, dtype, small)`` of each slot of ``slots`` a run allocates (not a
        leaf's), in order; ``small``: below ``cpu.SMALL`` bytes, a plain ``numpy.empty``."""
        allocs = []
        for s in dict.fromkeys(slots):
            if s >= self.n_leaves:
                shape, dtype = self.slot_meta[s]
                allocs.append((s, shape, dtype, math.prod(shape) * dtype.itemsize < cpu.SMALL))
        return allocs

    def stacks_sized_from_leaves(self) -> bool:
        """Whether every adstack of this plan is sized from its leaves alone (constants,
        scalars, counts bounded from the leaves' extremes, counts that are leaves): what
        :meth:`size_stacks` can size before a run (not a ``while_loop``'s recorded counts
        or counts a task of the plan computes)."""
        return all(source.from_leaves for step in self.steps
                   if type(step) is KernelStep and step.stack is not None
                   for source, _, _ in step.stack.sources)

    def size_stacks(self, leaf_buffers, host: list | None = None) -> list:
        """The adstack levels (:class:`adstack.Levels`) of each reverse-mode loop step of a
        run on ``leaf_buffers``, in order, sized before the run (only where
        :meth:`stacks_sized_from_leaves`); ``host``: as for :meth:`adstack.Stack.levels`.
        Each sizing is counted in ``qt.stats()`` as a run's own."""
        bufs = [*leaf_buffers, *[None] * (len(self.slot_meta) - self.n_leaves)]
        return [step.stack.levels(bufs, host) for step in self.steps
                if type(step) is KernelStep and step.stack is not None]

    def run(self, leaf_buffers, graph: tuple | None = None, queue: bool = True, *,
            status=None, sized: list | None = None) -> list:
        """Run the plan on ``leaf_buffers`` (one per leaf); returns the output buffers.

        ``graph``: the output nodes this run computes (a plan is shared by every graph of
        its structure): a failed check names the source lines that recorded them.
        ``queue=False`` (a CUDA graph's capture, :mod:`qtrace.devices.cuda_graphs`): the
        buffers are all on the device and the current stream needs no ordering (the
        capture's stream has none to wait for). A capture also passes ``status``: the
        zeroed status rows its checks write (read by the caller, not by this run), and
        ``sized``: the adstack levels from :meth:`size_stacks` (sized before the capture:
        nothing may be read back from the device during one)."""
        fast = self.fast
        if fast is not None:
            fn, extent, pack, slots, allocs, outs, extra = fast
            bufs = [*leaf_buffers, *extra]
            empty = np.empty
            for s, shape, dtype, small in allocs:
                bufs[s] = empty(shape, dtype) if small else cpu.aligned_empty(shape, dtype)
            pointer = cpu.pointer
            fn(0, extent, pack(*[pointer(bufs[s]) for s in slots]), None, None)
            bump_many(ONE_LAUNCH)
            return [bufs[s] for s in outs]
        rt = self.rt
        if self.one is not None:   # (another device's one-kernel plan)
            return rt.run_kernel(self.one, leaf_buffers, len(self.slot_meta), queue)
        host = None
        if rt.kind != "cpu" and queue:  # host data (NumPy arguments, Python scalars) goes to the device
            stream = rt.queue()
            host = [b if isinstance(b, np.ndarray) else None for b in leaf_buffers]
            kept = self.host_leaves   # (passed by value: left on the host)
            leaf_buffers = [rt.from_host(b) if h is not None and i not in kept else b
                            for i, (b, h) in enumerate(zip(leaf_buffers, host))]
        bufs = list(leaf_buffers)
        bufs.extend([None] * (len(self.slot_meta) - self.n_leaves))
        spare: dict = {}
        shared: set = set()   # slots whose buffer another slot holds too
        own_status = status is None
        if self.checks and own_status:
            status = rt.empty((2 * len(self.checks),), np.dtype(np.int64))
            status[...] = 0
        sized = iter(sized) if sized is not None else None
        status_ptr = rt.pointer(status) if status is not None else 0
        pointer = rt.pointer
        for step in self.steps:
            kind = type(step)
            if kind is ViewStep:
                if bufs[step.src] is None:  # an empty value: no task ran to allocate it
                    bufs[step.src] = rt.empty(*self.slot_meta[step.src])
                bufs[step.dst] = view_of(bufs[step.src], step.chain, rt.xp)
            elif kind is LibraryCall:  # its results become the output slots' buffers
                n_in = step.n_in
                for s in step.slots[:n_in]:
                    if bufs[s] is None:  # an empty input: no task ran to allocate it
                        bufs[s] = rt.empty(*self.slot_meta[s])
                ins = [bufs[s] for s in step.slots[:n_in]]
                # (a capture takes no library step but jitted calls: cuda_graphs.why_not)
                outs = step.runner.run(ins) if queue else step.runner.run(ins, queue=False)
                for s, buf in zip(step.slots[n_in:], outs):
                    bufs[s] = buf
                    for s_in, b in zip(step.slots[:n_in], ins):
                        if b is buf:   # (a jitted call returning an argument: one buffer in
                            shared.update((s, s_in))   # two slots, never a spare)
            else:
                for s in step.slots:
                    if bufs[s] is None:
                        shape, dtype = self.slot_meta[s]
                        reuse = spare.get((shape, dtype))
                        bufs[s] = reuse.pop() if reuse else rt.empty(shape, dtype)
                if kind is SequenceStep:  # small CPU kernels: one native launch
                    seq = step.run
                    seq.runner(seq.table_address, seq.n_tasks,
                               seq.pack(*[pointer(bufs[s]) for s in step.slots]), status_ptr or None)
                else:
                    levels = (None if step.stack is None else next(sized) if sized is not None
                              else step.stack.levels(bufs, host))
                    rt.launch(step.kernel, step.extent,
                              launch_parameters(bufs, step.slots, step.by_value, pointer)
                              if step.by_value else [pointer(bufs[s]) for s in step.slots],
                              status_ptr + 16 * step.row if step.row >= 0 else 0, levels,
                              step.parallel, step.scratch, step.phases, step.zeroed)
            for s in step.frees:
                buf = bufs[s]
                bufs[s] = None
                if s not in self.view_slots and s not in shared:  # (a view's memory is its source's)
                    spare.setdefault((buf.shape, buf.dtype), []).append(buf)
        if self.n_launches:
            bump_many((("kernel_launches", self.n_launches), ("tasks_run", self.n_tasks)))
        if status is not None and own_status:
            if rt.kind == "cpu":
                self.check(status, graph)
            else:  # read when the host next waits for the device anyway (no sync per run)
                rt.defer_check(status, functools.partial(self.check, graph=graph))
        out = []
        for kind, v in self.outputs:
            if kind == "slot":
                if bufs[v] is None:  # an empty result: no task ran to allocate it
                    bufs[v] = rt.empty(*self.slot_meta[v])
                out.append(bufs[v])
            else:
                arr = rt.empty(v.shape, v.dtype)
                arr[...] = v.params[0]
                out.append(arr)
        if host is not None:
            rt.launched(stream)
        return out

    def check(self, host, graph: tuple | None = None) -> None:
        """Raise the first failed index or overflow check recorded in status rows ``host``."""
        if host[::2].any():
            row = int(np.flatnonzero(host[::2])[0])
            self._raise(row, int(host[2 * row]) - 1, int(host[2 * row + 1]), graph)

    def _raise(self, row: int, check: int, value: int, graph: tuple | None) -> None:
        task, table = self.checks[row]
        kind, what, axis, size = table[check]
        if kind == "adstack":
            needed = ("more elements looped than the float heap rows sized for them" if value < 0
                      else f"an element needed more than the {value} stack entries sized for it")
            raise AdstackOverflowError(
                f"qtrace adstack overflow in kernel {task.symbol}, {what}: {needed} (data changed "
                "behind qtrace's back, qt.config.adstack_max_depth, or a bug); nothing was written "
                "out of bounds")
        prims = ("scatter",) if what.startswith("scatter") else ("gather", "loop", "loop_vjp")
        if graph is None:
            graph = tuple(n for n in (r() for r in self._built_for) if n is not None)
        lines = origins.recorded_at(graph, prims)
        where = ("\n  recorded at " + "\n  recorded at ".join(lines)) if lines else ""
        raise IndexError(f"qtrace {what}: index {value} is out of bounds for axis {axis} with size "
                         f"{size}{where}")


class _Sequence:
    """A run of small CPU kernels launched as one call of the native sequence runner
    (:mod:`qtrace.kernels.sequence`), given the addresses of the buffers they use
    (``slots``, in that order: the table refers to positions in it)."""

    def __init__(self, run: list, slots: list):
        from ..kernels import sequence
        position = {s: i for i, s in enumerate(slots)}
        table = []
        for step in run:
            table += [sequence.address(step.kernel), step.extent, len(step.slots), step.row,
                      *[position[s] for s in step.slots]]
        self.table = np.array(table, np.int64)
        self.n_tasks = len(run)
        self.pack = cpu.packer(len(slots))
        self.runner = sequence.runner()
        self.table_address = self.table.ctypes.data


def _sequences(steps: list) -> list:
    """``steps`` with every run of two or more small kernels (on the calling thread, no
    adstack, at most ``sequence.MAX_ARGS`` arguments) replaced by one sequence step."""
    from ..kernels.sequence import MAX_ARGS
    out, run = [], []

    def close():
        if len(run) < 2:
            out.extend(run)
        else:
            slots = list(dict.fromkeys(s for step in run for s in step.slots))
            frees = [f for step in run for f in step.frees]
            out.append(SequenceStep(_Sequence(run, slots), slots, frees))
        run.clear()

    for step in steps:
        if (type(step) is KernelStep and not step.parallel and step.stack is None and not step.scratch
                and len(step.slots) <= MAX_ARGS):
            run.append(step)
        else:
            close()
            out.append(step)
    close()
    return out


class JitCall:
    """A ``call`` step: a jitted function's own plan, compiled once and run on the inputs."""

    def __init__(self, step):
        self.prim = step.node.prim
        self.components = [n.params[-1] for n in step.outputs]   # (not the nodes: no graph kept)
        self.sub, self.n_args = step.node.params[0], step.node.params[1]
        self._plan = None

    def plan(self) -> Plan:
        """The function's plan (compiled at first use)."""
        if self._plan is None:
            sub = self.sub
            self._bind = [role[1] if role[0] == "arg" else self.n_args + role[1] for role in sub.roles]
            self._plan = plan_for(sub.outputs, sub.graph_key)
        return self._plan

    def run(self, inputs: list, queue: bool = True) -> list:
        """The call's results on ``inputs``; ``queue``: as :meth:`Plan.run`'s (False inside
        a CUDA graph's capture)."""
        plan = self.plan()
        results = plan.run([inputs[i] for i in self._bind], self.sub.outputs, queue=queue)
        return [results[k] for k in self.components]


def graph_runner(plan):
    """A :class:`qtrace.devices.cuda_graphs.GraphRunner` of ``plan``."""
    from .cuda_graphs import GraphRunner
    return GraphRunner(plan)


def plan_options(device) -> dict:
    """What ``device``'s target chooses in a plan (see ``qtrace.graph.evaluate.plan_options``)."""
    lowering = target_for(device).lowering
    return {"lanes": lowering.lanes, "region_bytes": lowering.region_bytes}


def compile_plan(outputs: tuple) -> Plan:
    """Partition, lower and compile ``outputs`` for their device; kernels already
    compiled (in this process, or on disk) are reused."""
    device = outputs[0].device
    target = target_for(device)
    spec = build_plan(outputs, config.fusion, config.fusion_diag, **plan_options(device))
    check = config.check_bounds
    with _lock:
        missing = {}
        for t in spec.tasks:
            sym = target.symbol(t)
            if (target.key, device, sym, check) not in _kernels and sym not in missing:
                missing[sym] = t
        if missing:
            # -- disk (offline) kernel cache (kernels/disk_cache.py): load, else compile + store
            from ..kernels import disk_cache
            options = dict(config.codegen_options(), check_bounds=check)  # what is lowered below
            entry, compiled = disk_cache.lookup(missing, options, target)
            if compiled is None:
                compiled = _compile(missing, f"qtrace_{spec.key[:16]}", target, device, check, entry)
            else:   # (their bodies, for tasks of other sizes to share: kernel_bodies)
                for sym, digest in entry.bodies.items():
                    kernel_bodies.add(target.key, device, check, digest, sym, entry.path)
            # -- end of the disk cache hook
            # loaded on this device (a tiered compile's optimised kernels may be there already:
            # where no background thread could start, they were installed during the compile;
            # otherwise they arrive later, and _lock, held here, orders them after these)
            for sym, fn in compiled.items():
                _kernels.setdefault((target.key, device, sym, check), fn)
        kernels = {t.symbol: _kernels[(target.key, device, target.symbol(t), check)]
                   for t in spec.tasks}
    bump("tasks_fused", spec.tasks_fused)
    return Plan(spec, kernels, check, device)


def _compile(missing: dict, name: str, target, device, check: bool, entry) -> dict:
    """Kernels ``{symbol: kernel}`` for the tasks ``{symbol: task}``, none of them in the
    kernel table, compiled together as module ``name`` and stored in the disk ``entry``
    (None: no disk cache) — except tasks whose lowered text a kernel of this process
    already has (:mod:`qtrace.devices.kernel_bodies`): they take that kernel. When every
    task does, the entry is stored as aliases of those kernels' entry; when only some
    do, the others are compiled alone unless a disk entry must hold them all."""
    probes, shared = {}, {}
    if not config.dump_ir:   # (with QTRACE_DUMP_IR every kernel is compiled, to be dumped)
        for sym, t in missing.items():
            digest, module = probes[sym] = kernel_bodies.probe(target, t, sym, check, name)
            known = kernel_bodies.find(target.key, device, check, digest)
            if known is not None and (target.key, device, known.symbol, check) in _kernels:
                shared[sym] = known
    if shared and (entry is None or len(shared) == len(missing)):
        sources = {k.source for k in shared.values()}
        if entry is not None and len(sources) == 1 and None not in sources:
            aliases = {sym: k.symbol for sym, k in shared.items()}
            tier = next(iter(shared.values())).tier   # (one source: one compile)
            if tier is not None and not tier.done:    # its entry is stored once optimised
                tier.aliases.append((entry, aliases))
            else:
                entry.store_aliases(aliases, sources.pop())
        bump("kernels_shared", len(shared))
    else:
        shared = {}
    compiled = {sym: _kernels[(target.key, device, k.symbol, check)] for sym, k in shared.items()}
    todo = {sym: t for sym, t in missing.items() if sym not in shared}
    if todo:
        if len(todo) == 1 and probes:
            module = probes[next(iter(todo))][1]
        else:
            module = target.new_module(name)
            for sym, t in todo.items():
                target.lower(t, module, sym, check)
        if entry is not None:
            entry.bodies = {sym: probes[sym][0] for sym in todo if sym in probes}
        tier = _TieredUp(target.key, device, check, entry)
        new, payload = target.compile(module, list(todo), list(todo.values()), tier)
        if payload is not None and entry is not None:   # (else stored once optimised)
            entry.store(payload)
        for sym in todo:
            if sym in probes:
                kernel_bodies.add(target.key, device, check, probes[sym][0], sym,
                                  entry.path if entry is not None else None,
                                  tier if payload is None else None)
        compiled.update(new)
    return compiled


class _TieredUp:
    """What a tiered compile calls with its optimised kernels (``ready`` of
    :meth:`qtrace.kernels.target.Target.compile`): plans built from now on take them (plans
    built before reach them through their quick entries), and the disk cache entry, if
    any, stores their object code."""

    def __init__(self, target_key: str, device, check: bool, entry):
        self.target_key, self.device, self.check, self.entry = target_key, device, check, entry
        self.done = False
        self.aliases: list = []   # (disk entry, aliases) of tasks sharing these kernels meanwhile

    @property
    def persist(self) -> bool:
        return self.entry is not None

    def __call__(self, kernels: dict, payload: bytes) -> None:
        with _lock:
            for sym, fn in kernels.items():
                _kernels[(self.target_key, self.device, sym, self.check)] = fn
            if self.entry is not None:
                self.entry.store(payload)
                for entry, aliases in self.aliases:   # (their source exists now)
                    entry.store_aliases(aliases, self.entry.path)
            self.done = True


def plan_for(outputs: tuple, key: str) -> Plan:
    """The cached plan for a graph with content key ``key``, compiling it on a miss."""
    ck = (key, outputs[0].device, config.codegen_options())
    with _lock:
        plan = _plans.get(ck)
    if plan is not None:
        bump("cache_hits_memory")
        return plan
    plan = compile_plan(outputs)
    with _lock:
        _plans.setdefault(ck, plan)
    return plan


_by_struct: dict = {}   # (graph structure key, codegen options) -> plan
BY_STRUCT_CAP = 1024    # emptied beyond this: it holds the structs of its keys alive


def evaluate(nodes: tuple) -> list:
    """The evaluation hook: buffers holding the values of ``nodes``.

    An eager loop evaluates new nodes of the same structure every iteration: their plan
    is found by the graph's interned structure (no content hashing), and only a miss
    there computes the content key and goes through :func:`plan_for`.
    """
    skey, leaves = graph_struct(nodes)
    ck = (skey, config.codegen_options())
    plan = _by_struct.get(ck)
    if plan is None:
        plan = plan_for(nodes, graph_key(nodes)[0])
        if len(_by_struct) >= BY_STRUCT_CAP:
            _by_struct.clear()
        _by_struct[ck] = plan
    else:
        bump("cache_hits_memory")
    return plan.run([leaf.buffer for leaf in leaves], nodes)


def _bind_native_plans() -> None:
    """Hand the compiled recorder's eager evaluation the plans by structure (it runs a plan
    found there; a miss is the Python function's), the codegen options that key them, and
    the evaluations counter."""
    from ..graph import native
    from ..stats import native_address
    if native.active() and cpu.FAST_POINTER:
        native.module().bind_plans(_by_struct, config.codegen_options,
                                   native_address("evaluations"))


_bind_native_plans()


def clear_plan_cache() -> None:
    """Forget every compiled plan of this process (kernels stay loaded in the engine)."""
    with _lock:
        _plans.clear()
        _by_struct.clear()


def to_device(array, device):
    """A buffer on ``device`` holding host ``array``."""
    return runtime_for(device).from_host(array)


def to_host(buf):
    """A NumPy copy of a device buffer."""
    from . import cuda
    return cuda.to_host(buf)


def order_reads(buf) -> None:
    """The current stream of ``buf``'s GPU waits for qtrace's work on its other streams."""
    from . import cuda
    with buf.device:
        cuda.order_reads()


def available_devices() -> list:
    """The CUDA devices present."""
    from . import cuda
    return cuda.devices()


def unavailable(device) -> str | None:
    """Why ``device`` cannot run qtrace here, or None."""
    if device.kind == "cpu":
        return None
    from . import cuda
    return cuda.unavailable(device)


def sync() -> None:
    """Wait for the work of every device (CPU kernels run synchronously)."""
    from . import cuda
    cuda.sync()
