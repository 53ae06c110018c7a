"""qtrace's own loader of compiled CPU objects (qtrace.kernels.elf_loader) against MCJIT.

Differential: a battery of programs (float32 fast math and its exact re-run through C
library calls, float64 math, reductions split over workers, scans, a per-element loop and
its gradient through the adstack, integers, complex numbers, a run of small kernels through
the sequence runner) compiled afresh, its objects loaded by the ELF loader, then again by
MCJIT: bit-identical results. Units: objects the loader must refuse (and leave nothing
mapped), page protections (code never writable), relocation forms other code models emit.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import runtime
from qtrace.kernels import elf_loader, sequence

pytestmark = pytest.mark.skipif(sys.platform != "linux" or not hasattr(ctypes.CDLL(None), "mmap"),
                                reason="the ELF loader maps objects on Linux only")


def _battery(seed: int) -> list:
    rng = np.random.default_rng(seed)
    x32 = rng.uniform(-4, 4, 70_001).astype(np.float32)
    x32[::997] *= 1e7                                # the exact sin/cos re-run (C sinf/cosf)
    x64 = rng.uniform(-50, 50, 5_003)
    out = []
    f = qt.jit(lambda a: qt.sin(a) * qt.cos(a) + qt.tanh(a) - qt.exp(-a * a) + qt.sqrt(qt.abs(a)))
    out.append(f(x32).numpy())
    out.append((qt.sin(qt.asarray(x64)) + qt.log1p(qt.abs(qt.asarray(x64)))).numpy())
    big = qt.asarray(rng.random(300_007))
    out += [qt.sum(big * 2.0).numpy(), qt.argmax(big).numpy(), qt.cumsum(big).numpy()]
    m = qt.asarray(rng.random((300, 70)))
    out += [m.sum(axis=0).numpy(), m.max(axis=1).numpy()]

    def loop(v, n):
        return qt.fori_loop(0, n, lambda i, s: qt.sin(s) * 0.9 + 0.1 * s, v)
    n = qt.asarray(rng.integers(0, 20, 1_000))
    v0 = qt.asarray(rng.uniform(-1, 1, 1_000))
    value, grad = qt.value_and_grad(lambda v: qt.sum(loop(v, n)))(v0)
    out += [np.asarray(value.numpy()), grad.numpy()]
    k = qt.asarray(rng.integers(-1000, 1000, 4_099))
    out.append(((k * 7) // 3 % 11 + (k >> 2)).numpy())
    z = qt.asarray(rng.standard_normal(513) + 1j * rng.standard_normal(513))
    out.append((qt.exp(z) * qt.conj(z)).numpy())
    s = qt.asarray(rng.random(64))
    for _ in range(6):                                # small kernels: a sequence launch
        s = qt.sin(s) + 1.0
        t = qt.asarray(rng.random(32)) * 2.0
    out += [s.numpy(), t.numpy()]
    return out


def _fresh(monkeypatch):
    monkeypatch.setattr(runtime, "_kernels", {})
    monkeypatch.setattr(sequence, "_runner", None)
    runtime.clear_plan_cache()


@pytest.mark.cpu_only("the loader maps CPU objects")
def test_elf_loader_and_mcjit_give_identical_results(monkeypatch, fusion, rng):
    monkeypatch.setattr(qt.config, "offline_cache", False)
    seed = int(rng.integers(2**31))
    loads = []
    real = elf_loader.load

    def counting(obj, symbols, resolve=elf_loader.process_symbol):
        got = real(obj, symbols, resolve)
        loads.append(len(got))
        return got

    _fresh(monkeypatch)
    monkeypatch.setattr(elf_loader, "load", counting)
    ours = _battery(seed)
    assert sum(loads) >= 8, loads                     # the objects really came through it

    def refuse(obj, symbols, resolve=None):
        raise elf_loader.Unsupported("testing MCJIT")
    _fresh(monkeypatch)
    monkeypatch.setattr(elf_loader, "load", refuse)
    theirs = _battery(seed)
    runtime.clear_plan_cache()
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == b.dtype and a.shape == b.shape, i
        assert a.tobytes() == b.tobytes(), f"result {i} differs"


def _object(code_model: str = "jitdefault", reloc: str = "pic", n: int = 10) -> tuple[bytes, str]:
    """An object of one kernel (float32 sin, whose exact re-run calls sinf) over ``n``
    elements for the host (from 2^16 elements it polls the abort flag)."""
    from qtrace.graph.plan import build_plan
    from qtrace.kernels import llvm_cpu
    from qtrace.kernels.target import target_for
    target = target_for(qt.Device("cpu"))
    spec = build_plan((qt.sin(qt.asarray(np.ones(n, np.float32)) * 3.0)._node,), True)
    (task,) = spec.tasks
    module = target.new_module("loader_test")
    sym = target.symbol(task)
    target.lower(task, module, sym, False)
    mod = llvm_cpu.optimize(module)
    s = llvm_cpu._init()
    tm = s["target"].create_target_machine(cpu=s["cpu"], features=s["features"], opt=3, reloc=reloc,
                                           codemodel=code_model)
    return tm.emit_object(mod), sym


def _run(kernel, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    args = (ctypes.c_void_p * 2)(out.ctypes.data, x.ctypes.data)
    kernel(0, x.size, args, None, None)
    return out


@pytest.mark.parametrize("code_model, reloc", [("jitdefault", "pic"), ("small", "pic"),
                                               ("large", "static")])
def test_code_models_load_and_run(code_model, reloc, rng):
    """The large model with position-independent code (GOT-relative 64-bit forms, qtrace's
    default), the small one (PC-relative 32-bit forms, calls through stubs to the C
    library) and absolute 64-bit addresses all load and run like MCJIT's copy; the code is
    never writable."""
    from qtrace.kernels import llvm_cpu
    obj, sym = _object(code_model, reloc, n=1 << 17)   # (reads the abort flag)
    x = rng.uniform(-3, 3, 4099).astype(np.float32)
    x[::101] = 1e7                                    # takes the exact path: calls sinf
    ours = elf_loader.kernels(obj, [sym])[sym]
    theirs = llvm_cpu.mcjit_load(obj, [sym])[sym]
    assert np.array_equal(_run(ours, x), _run(theirs, x))
    want = np.sin((x * np.float32(3.0)).astype(np.float64))
    np.testing.assert_allclose(_run(ours, x), want, rtol=0, atol=1.2e-7)
    address = ctypes.cast(ours, ctypes.c_void_p).value
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
            if lo <= address < hi:
                assert line.split()[1].startswith("r-x"), line
                break
        else:
            pytest.fail("kernel address not mapped")


def test_refuses_what_it_does_not_map():
    with pytest.raises(elf_loader.Unsupported, match="not an x86-64 ELF"):
        elf_loader.load(b"\x7fELF" + bytes(60), ["f"])
    obj, sym = _object()
    with pytest.raises(elf_loader.Unsupported, match="lacks symbol"):
        elf_loader.load(obj, [sym, "no_such_kernel"])
    with pytest.raises(elf_loader.Unsupported, match="undefined symbol"):
        elf_loader.load(obj, [sym], resolve=lambda name: None)


def test_a_32_bit_reference_out_of_reach_is_refused_not_truncated():
    """A PC-relative 32-bit field whose target lies beyond +-2 GiB is refused (MCJIT then
    loads the object), never written truncated."""
    mem = (ctypes.c_char * 16)()
    base = ctypes.addressof(mem)
    for target in (base + (1 << 31) + 8, base - (1 << 31) - 8):
        with pytest.raises(elf_loader.Unsupported, match="out of range"):
            elf_loader._apply(mem, base, 4, elf_loader._PC32, 0, -4, lambda k, t=target: t, 0, {}, {})
    assert mem.raw == bytes(16)
    elf_loader._apply(mem, base, 4, elf_loader._PC32, 0, -4, lambda k: base + 1000, 0, {}, {})
    assert int.from_bytes(mem.raw[4:8], "little", signed=True) == 1000 - 4 - 4


def test_process_symbols():
    from qtrace.kernels import interrupt
    assert elf_loader.process_symbol(interrupt.SYMBOL) == interrupt.address()
    assert elf_loader.process_symbol("memcpy") and elf_loader.process_symbol("cosf")
    assert elf_loader.process_symbol("qt_no_such_symbol_anywhere") is None
