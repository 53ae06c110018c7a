"""Compiling plans into executable form, caching them, and running them on the CPU.

Two in-memory caches, both keyed by content hashes and guarded by one lock:
``plans`` maps (graph key, codegen options) to an executable plan, so eager code that
repeats the same steps compiles once; ``kernels`` maps a task's content key to its
compiled function, so identical tasks in different graphs share machine code.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..stats import bump
from ..config import config
from ..graph.plan import PlanSpec, build_plan
from ..kernels import codegen, llvm_cpu
from . import cpu

_lock = threading.RLock()
_plans: dict = {}
_kernels: dict = {}


class Plan:
    """An executable plan: kernels bound to slots, ready to run on input buffers."""

    def __init__(self, spec: PlanSpec, kernels: dict, check_bounds: bool):
        self.spec = spec
        self.key = spec.key
        self.n_leaves = len(spec.leaves)
        self.slot_meta = [(n.shape, n.dtype) for n in spec.slot_nodes]
        self.outputs = spec.outputs
        self.check_bounds = check_bounds
        self.has_checks = check_bounds and any(t.checks for t in spec.tasks)
        self.steps = []
        for step in spec.steps:
            if step.kind == "library":
                self.steps.append(("library", step.node.prim, step.slots, step.frees, None))
                continue
            t = step.task
            size = int(np.prod(t.domain + t.inner, dtype=np.int64))
            if size == 0:
                continue
            work = size
            entry = (kernels[t.symbol], t.domain[0], work, len(step.slots))
            self.steps.append(("kernel", entry, step.slots, step.frees, t))

    def run(self, leaf_buffers) -> list:
        """Run the plan on ``leaf_buffers`` (one per leaf); returns the output buffers."""
        bufs = list(leaf_buffers) + [None] * (len(self.slot_meta) - self.n_leaves)
        spare: dict = {}
        status = np.zeros(2, np.int64) if self.has_checks else None
        status_ptr = cpu.pointer(status) if status is not None else None
        par = cpu.pool() if config.num_threads > 1 else None
        launches = 0
        for kind, entry, slots, frees, task in self.steps:
            for s in slots:
                if bufs[s] is None:
                    shape, dtype = self.slot_meta[s]
                    reuse = spare.get((shape, dtype))
                    bufs[s] = reuse.pop() if reuse else cpu.aligned_empty(shape, dtype)
            if kind == "library":
                a, b, out = (bufs[s] for s in slots)
                np.matmul(a, b, out=out)
            else:
                fn, extent, work, nargs = entry
                args = (ctypes.c_void_p * nargs)(*[cpu.pointer(bufs[s]) for s in slots])
                if par is not None and work >= cpu.PARALLEL_MIN_WORK and extent > 1:
                    par.run(fn, extent, args, status_ptr)
                else:
                    fn(0, extent, args, status_ptr)
                launches += 1
            for s in frees:
                buf = bufs[s]
                bufs[s] = None
                spare.setdefault((buf.shape, buf.dtype), []).append(buf)
        if launches:
            bump("kernel_launches", launches)
        if status is not None and status[0]:
            self._raise_index_error(int(status[0]) - 1, int(status[1]))
        out = []
        for kind, v in self.outputs:
            if kind == "slot":
                out.append(bufs[v])
            else:
                arr = cpu.aligned_empty(v.shape, v.dtype)
                arr[...] = v.params[0]
                out.append(arr)
        return out

    def _raise_index_error(self, check: int, value: int) -> None:
        for task in self.spec.tasks:
            if check < len(task.checks):
                op, axis, size = task.checks[check]
                break
        else:  # pragma: no cover
            op, axis, size = "indexing", "?", "?"
        # the same check number can exist in several tasks; name them all when ambiguous
        raise IndexError(f"qtrace {op}: index {value} is out of bounds for axis {axis} with size "
                         f"{size}")


def compile_plan(outputs: tuple) -> Plan:
    """Partition, lower and compile ``outputs``; kernels already compiled are reused."""
    spec = build_plan(outputs, config.fusion, config.fusion_diag)
    check = config.check_bounds
    with _lock:
        missing = {}
        for t in spec.tasks:
            if (t.symbol, check) not in _kernels and t.symbol not in missing:
                missing[t.symbol] = t
        if missing:
            module = llvm_cpu.new_module(f"qtrace_{spec.key[:16]}")
            for sym, t in missing.items():
                codegen.lower_task(t, module, sym, check)
            compiled, _ = llvm_cpu.compile_module(module, list(missing))
            for sym, fn in compiled.items():
                _kernels[(sym, check)] = fn
        kernels = {t.symbol: _kernels[(t.symbol, check)] for t in spec.tasks}
    bump("tasks_fused", spec.tasks_fused)
    return Plan(spec, kernels, check)


def plan_for(outputs: tuple, key: str) -> Plan:
    """The cached plan for a graph with content key ``key``, compiling it on a miss."""
    ck = (key, config.codegen_options())
    with _lock:
        plan = _plans.get(ck)
    if plan is not None:
        bump("cache_hits_memory")
        return plan
    plan = compile_plan(outputs)
    with _lock:
        _plans.setdefault(ck, plan)
    return plan


def evaluate(nodes: tuple) -> list:
    """The evaluation hook: buffers holding the values of ``nodes``."""
    from ..graph.node import graph_key
    key, leaves = graph_key(nodes)
    plan = plan_for(nodes, key)
    return plan.run([leaf.buffer for leaf in leaves])


def clear_plan_cache() -> None:
    """Forget every compiled plan of this process (kernels stay loaded in the engine)."""
    with _lock:
        _plans.clear()
