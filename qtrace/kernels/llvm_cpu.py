"""The CPU back end: optimise task IR for the host and load it with MCJIT.

Code is generated for the host triple with the host CPU's features, optimised by LLVM's
new pass-builder pipeline at O3 (which runs the loop and SLP vectorizers, at the host's
full vector width), emitted as
an object file and added to one process-wide MCJIT engine. Object bytes are what a
disk cache stores; loading them again skips every compile step.
"""

from __future__ import annotations

import os
import re
import threading
from typing import NamedTuple

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from ..config import config
from ..stats import bump
from . import elf_loader, interrupt, loop_hints, outline
from .lowering import STREAM_SUFFIX

_lock = threading.RLock()
_quick_lock = threading.Lock()
_state: dict = {}

KERNEL = elf_loader.KERNEL


def _init():
    if _state:
        return _state
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.add_symbol(interrupt.SYMBOL, interrupt.address())  # the abort flag kernels poll
    # no vectorized epilogue after a vectorized loop: a third copy of every loop body (math
    # inlined) for at most lanes-1 elements costs ~15% of a kernel's compile time (turned on
    # only for the modules whose rows leave remainders: loop_hints.vector_epilogues)
    _epilogues(False)
    triple = llvm.get_process_triple()
    target = llvm.Target.from_triple(triple)
    cpu = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    _state.update(triple=triple, cpu=cpu, features=features, target=target, engines=[])
    _state["tm"] = _target_machine()  # for optimising and emitting objects; never given away
    return _state


def _epilogues(on: bool) -> None:
    llvm.set_option("", f"-enable-epilogue-vectorization={'true' if on else 'false'}")


def _target_machine():
    """A new host target machine. An MCJIT engine takes ownership of the one it is given
    (and frees it with itself), so every engine gets its own."""
    s = _state
    return s["target"].create_target_machine(cpu=s["cpu"], features=s["features"], opt=3,
                                             reloc="pic", codemodel="jitdefault")


def target_id() -> str:
    """Triple, CPU and features: the architecture part of a kernel cache key."""
    t = target_info()
    return f"{t['triple']}/{t['cpu']}/{t['features']}/llvm{t['llvm']}/llvmlite{t['llvmlite']}"


def target_info() -> dict:
    """:func:`target_id` as named parts (what the disk cache compares to explain a miss)."""
    s = _init()
    return {"triple": s["triple"], "cpu": s["cpu"], "features": s["features"],
            "llvm": ".".join(map(str, llvm.llvm_version_info)), "llvmlite": llvmlite.__version__}


def new_module(name: str) -> ir.Module:
    s = _init()
    module = ir.Module(name=name)
    module.triple = s["triple"]
    module.data_layout = str(s["tm"].target_data)
    return module


def vector_bits() -> int:
    """The host's vector register width in bits (what the vectorizer is let use)."""
    features = _init()["features"].split(",")
    return 512 if "+avx512f" in features else 256 if "+avx" in features else 128


def _full_width(text: str) -> str:
    """Let the vectorizer use the host's full vector width, and resolve the loops' width
    hints (:mod:`qtrace.kernels.loop_hints`) to it.

    On AVX-512 hosts LLVM prefers 256-bit vectors by default (a guard against the clock
    drop of early AVX-512 parts); qtrace's kernels are long arithmetic loops, where 512-bit
    vectors win (B3's loops run about 2x faster). Elsewhere the attribute changes nothing.
    """
    text = loop_hints.resolve(text, vector_bits() // 32)
    if vector_bits() != 512:
        return text
    # (after the parameter list: string attributes later on the line may hold parentheses)
    return re.sub(r"^(define [^\n(]*\([^)\n]*\))", r'\1 "prefer-vector-width"="512"', text, flags=re.M)


class Prepared(NamedTuple):
    """A module ready for LLVM: its final IR text and what its compile must switch on."""

    text: str
    epilogues: bool     # vectorize loop remainders (:func:`qtrace.kernels.loop_hints.vector_epilogues`)
    streaming: bool     # has streaming entries whose vector stores become non-temporal


def prepare(module: ir.Module) -> Prepared:
    """The finished text of ``module``: outlined math given its vector variants, loops
    their host widths, functions the host's full vector width."""
    outline.finish(module, vector_bits())
    return Prepared(_full_width(str(module)), loop_hints.wants_epilogues(module),
                    any(name.endswith(STREAM_SUFFIX) for name in module.globals))


def optimize(module: ir.Module) -> llvm.ModuleRef:
    """Parse, verify and run the O3 pipeline; returns the optimised module."""
    return optimize_prepared(prepare(module))


def optimize_prepared(p: Prepared) -> llvm.ModuleRef:
    """:func:`optimize` of a module :func:`prepare` made ready."""
    s = _init()
    mod = llvm.parse_assembly(p.text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(s["tm"], pto)
    if p.epilogues:
        with _lock:   # (an LLVM option: process-wide)
            _epilogues(True)
            try:
                pb.getModulePassManager().run(mod, pb)
            finally:
                _epilogues(False)
    else:
        pb.getModulePassManager().run(mod, pb)
    if p.streaming:
        mod = llvm.parse_assembly(nontemporal(str(mod)))
    return mod


_VECTOR_STORE = re.compile(r"^(\s*store <(\d+) x (float|double|i32|i64)> .*?, align )(\d+)(.*)$")
_BITS = {"float": 32, "double": 64, "i32": 32, "i64": 64}
_NT = "!{i32 1}"


def nontemporal(text: str) -> str:
    """Optimised IR with the vector stores of each streaming entry (a function named
    ``*`` + ``STREAM_SUFFIX``: :func:`qtrace.kernels.codegen.streams`) non-temporal and
    aligned to their width (at most 64 bytes), as that entry's callers guarantee."""
    lines, inside, changed = text.split("\n"), False, False
    node = 1 + max((int(n) for n in re.findall(r"^!(\d+) = ", text, flags=re.M)), default=0)
    for k, line in enumerate(lines):
        if line.startswith("define "):
            inside = re.search(rf'@"?[\w.$]+{STREAM_SUFFIX}"?\(', line) is not None
        elif line.startswith("}"):
            inside = False
        elif inside:
            m = _VECTOR_STORE.match(line)
            if m is not None:
                width = int(m[2]) * _BITS[m[3]] // 8
                lines[k] = f"{m[1]}{min(width, 64)}{m[5]}, !nontemporal !{node}"
                changed = True
    return "\n".join(lines) + (f"\n!{node} = {_NT}\n" if changed else "")


def compile_module(module: ir.Module, symbols: list, counted: bool = True) -> tuple[dict, bytes]:
    """Compile ``module``; returns ``{symbol: callable}`` and the object code.

    ``counted``: whether the kernels count in ``qt.stats()["compiles"]`` (qtrace's own
    runtime helpers do not).
    """
    with _lock:
        return compile_prepared(prepare(module), symbols, counted, name=module.name)


def compile_prepared(p: Prepared, symbols: list, counted: bool = True,
                     name: str = "module") -> tuple[dict, bytes]:
    """:func:`compile_module` of a module :func:`prepare` made ready (from any thread)."""
    with _lock:
        s = _init()
        mod = optimize_prepared(p)
        if config.dump_ir:
            _dump(name, p.text, str(mod))
        obj = s["tm"].emit_object(mod)
        if counted:
            bump("compiles", len(symbols))
        return load_object(obj, symbols), obj


def emit_unoptimized(text: str) -> bytes:
    """Object code of IR ``text`` without the optimisation pipeline, emitted by LLVM's fast
    instruction selector (codegen level 0): ~10x quicker to compile than
    :func:`compile_prepared`, and slower to run (:mod:`qtrace.kernels.tiering` runs it
    while the optimised code is compiled). Parsed in an LLVM context of its own, under a
    lock of its own, so it does not wait for a whole optimising compile on another thread
    (only, through llvmlite's process-wide lock, for the LLVM call under way there)."""
    s = _init()
    with _quick_lock:
        if "quick_tm" not in s:
            s["quick_context"] = llvm.create_context()
            s["quick_tm"] = s["target"].create_target_machine(
                cpu=s["cpu"], features=s["features"], opt=0, reloc="pic", codemodel="jitdefault")
        mod = llvm.parse_assembly(text, context=s["quick_context"])
        mod.verify()
        obj = s["quick_tm"].emit_object(mod)
        del mod   # (before its context: a module never outlives the context it lives in)
        return obj


def load_object(obj: bytes, symbols: list) -> dict:
    """``{symbol: callable}`` of compiled object code: mapped by qtrace's own loader
    (:mod:`qtrace.kernels.elf_loader`) where it applies, else by MCJIT."""
    try:
        return elf_loader.kernels(obj, symbols)
    except elf_loader.Unsupported:
        return mcjit_load(obj, symbols)


def mcjit_load(obj: bytes, symbols: list) -> dict:
    """Add compiled object code to an MCJIT engine; returns ``{symbol: callable}``."""
    with _lock:
        s = _init()
        # one engine per object: relocations of a second object added to one MCJIT engine
        # are not applied reliably (constant-pool loads came back as zeros)
        for name, address in elf_loader.defined().items():
            llvm.add_symbol(name, address)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine())
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        s["engines"].append(engine)
        out = {}
        for sym in symbols:
            addr = engine.get_function_address(sym)
            if not addr:
                raise RuntimeError(f"qtrace: compiled object lacks symbol {sym}")
            out[sym] = KERNEL(addr)
        return out


def assembly(module: ir.Module) -> str:
    """Host assembly of ``module`` after optimisation (for inspection and tests)."""
    return _init()["tm"].emit_assembly(optimize(module))


def _dump(name: str, before: str, after: str) -> None:
    os.makedirs(config.dump_ir, exist_ok=True)
    for suffix, text in (("ll", before), ("opt.ll", after)):
        with open(os.path.join(config.dump_ir, f"{name}.{suffix}"), "w") as f:
            f.write(text)
