"""Compilation targets: what turns a plan's tasks into machine code for one device.

A :class:`Target` owns everything that depends on where kernels run: its key (kind,
architecture, LLVM version, math library, options — part of every kernel symbol and disk
cache entry, so a CPU and a CUDA kernel with the same body never collide), the
:class:`~qtrace.kernels.lowering.Lowering` the code generator follows, module creation,
lowering a task to an entry point, compiling a module to a payload (an object file for
the CPU, PTX for NVIDIA GPUs) and loading a payload into callable entry points.

LLVM (llvmlite) is imported only when a target is first asked for machine code, so
``import qtrace`` and programs that only run NumPy-backed library steps never load it.

Example:
    >>> from qtrace.kernels.target import target_for
    >>> from qtrace.graph.device import CPU
    >>> target_for(CPU).kind
    'cpu'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings

from ..graph.device import per_device
from . import lowering as _lowering


class Target:
    """The interface every target implements (see the module docstring)."""

    kind = ""
    lowering = _lowering.CPU   # what plans read before anything is compiled

    @property
    def emitting(self) -> _lowering.Lowering:
        """The lowering kernels are emitted under: :attr:`lowering`, completed where a
        choice depends on the machine (asked only when code is generated or looked up)."""
        return self.lowering

    def info(self) -> dict:
        """The target's identity as named parts (compared by the disk cache to explain a
        miss): its machine (:meth:`machine`) and its lowering options."""
        return {**self.machine(), "lowering": dataclasses.asdict(self.emitting)}

    def machine(self) -> dict:
        """Device kind, architecture and compiler versions."""
        raise NotImplementedError

    @property
    def key(self) -> str:
        """A digest of :meth:`info`: the target part of every kernel's identity."""
        key = self.__dict__.get("_key")
        if key is None:
            text = json.dumps(self.info(), sort_keys=True, separators=(",", ":"))
            key = self.__dict__["_key"] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return key

    def symbol(self, task) -> str:
        """The kernel symbol of ``task`` on this target."""
        return f"{task.symbol}_{self.kind}{self.key[:8]}"

    def new_module(self, name: str):
        raise NotImplementedError

    def lower(self, task, module, symbol: str, check_bounds: bool) -> None:
        """Emit ``task`` into ``module`` as the entry point ``symbol``."""
        raise NotImplementedError

    def compile(self, module, symbols: list, tasks: list = (), ready=None) -> tuple[dict, bytes | None]:
        """Compile ``module``: its entry points ``{symbol: kernel}`` and the payload.

        A target may tier a plan of these ``tasks`` when given ``ready``: it then returns
        entry points compiled quickly and no payload, and calls ``ready(kernels, payload)``
        when its optimised kernels are installed (:mod:`qtrace.kernels.tiering`;
        ``ready.persist`` says whether the payload is stored)."""
        raise NotImplementedError

    def load(self, payload: bytes, symbols: list) -> dict:
        """Entry points ``{symbol: kernel}`` of a payload :meth:`compile` produced."""
        raise NotImplementedError


class CpuTarget(Target):
    """The host CPU through LLVM's native back end and MCJIT (:mod:`qtrace.kernels.llvm_cpu`)."""

    kind = "cpu"
    lowering = _lowering.CPU

    @property
    def emitting(self) -> _lowering.Lowering:
        """The CPU's lowering completed with what the host's LLVM tells: ``ldexp`` where
        the host has AVX-512, streaming stores on x86-64 (from the larger of
        ``STREAM_BYTES`` and the last-level cache)."""
        machine = self.machine()
        avx512 = "+avx512f" in machine["features"].split(",")
        x86 = machine["triple"].startswith("x86_64")
        from . import host  # (outputs larger than the last-level cache cannot stay cached)
        stream = max(_lowering.STREAM_BYTES, host.last_level_cache()) if x86 else 0
        return dataclasses.replace(self.lowering, ldexp=avx512, stream_bytes=stream)

    def machine(self) -> dict:
        from . import host
        return {"device": "cpu", **host.target_info()}

    def new_module(self, name: str):
        from . import llvm_cpu
        return llvm_cpu.new_module(name)

    def lower(self, task, module, symbol: str, check_bounds: bool) -> None:
        from . import codegen
        codegen.lower_task(task, module, symbol, check_bounds, self.emitting)

    def compile(self, module, symbols: list, tasks: list = (), ready=None) -> tuple[dict, bytes | None]:
        from . import llvm_cpu, tiering
        prepared = llvm_cpu.prepare(module)
        if ready is not None and tiering.eligible(tasks):
            try:
                quick = tiering.compile(prepared, symbols, ready, module.name, ready.persist)
            except Exception as exc:   # (the optimising compile may still succeed)
                warnings.warn(f"qtrace: the quick compile of {module.name} failed "
                              f"({type(exc).__name__}: {exc}); compiling it optimised",
                              RuntimeWarning, stacklevel=2)
                quick = None
            if quick is not None:
                return quick, None
        return llvm_cpu.compile_prepared(prepared, symbols, name=module.name)

    def load(self, payload: bytes, symbols: list) -> dict:
        from . import elf_loader
        try:   # (without importing LLVM: a warm start compiles nothing)
            return elf_loader.kernels(payload, symbols)
        except elf_loader.Unsupported:
            from . import llvm_cpu
            return llvm_cpu.mcjit_load(payload, symbols)


class CudaTarget(Target):
    """An NVIDIA GPU through LLVM's NVPTX back end, loaded by CuPy
    (:mod:`qtrace.kernels.llvm_nvptx`)."""

    kind = "cuda"
    lowering = _lowering.NVPTX

    def __init__(self, index: int):
        import cupy
        self.index = index
        self.arch = "sm_" + cupy.cuda.Device(index).compute_capability
        self.driver = cupy.cuda.runtime.driverGetVersion()

    def machine(self) -> dict:
        from . import llvm_nvptx
        return {"device": "cuda", "arch": self.arch, "driver": self.driver,
                **llvm_nvptx.versions(), **llvm_nvptx.libdevice_info()}

    def new_module(self, name: str):
        from . import llvm_nvptx
        return llvm_nvptx.new_module(name, self.arch)

    def lower(self, task, module, symbol: str, check_bounds: bool) -> None:
        from . import codegen, llvm_nvptx
        body = codegen.lower_task(task, module, symbol + llvm_nvptx.BODY_SUFFIX, check_bounds,
                                  self.lowering)
        lockstep = (codegen.lower_lockstep(task, module, symbol + llvm_nvptx.LOCKSTEP_SUFFIX,
                                           check_bounds, self.lowering, llvm_nvptx.VECTOR)
                    if codegen.runs_in_lockstep(task) else None)
        split = _lowering.reduce_segments(task, self.lowering) > 1
        trips = (codegen.lower_trips(task, module, symbol + llvm_nvptx.TRIPS_SUFFIX, check_bounds,
                                     self.lowering)
                 if self.lowering.sorted_loops and codegen.sorted_trips(task) else None)
        llvm_nvptx.grid_entry(module, body, symbol, len(task.args), lockstep, aligned=split,
                              full_occupancy=split,
                              by_value=_lowering.by_value_args(task, self.lowering), trips=trips)

    def compile(self, module, symbols: list, tasks: list = (), ready=None) -> tuple[dict, bytes]:
        from . import llvm_nvptx
        ptx = llvm_nvptx.compile_module(module, symbols, self.arch)
        return self.load(ptx, symbols), ptx

    def load(self, payload: bytes, symbols: list) -> dict:
        from . import llvm_nvptx
        return llvm_nvptx.load(payload, symbols, self.index)


@per_device
def target_for(device) -> Target:
    """The target compiling kernels for ``device`` (a :class:`qtrace.Device`); one per device."""
    return CpuTarget() if device.kind == "cpu" else CudaTarget(device.index)
