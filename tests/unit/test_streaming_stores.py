"""Streaming (non-temporal) stores of large memory-bound CPU kernels (``Lowering.stream_bytes``).

Which kernels get a streaming entry (``codegen.streams``), what the back end makes of it
(aligned non-temporal vector stores there and nowhere else), and results: bit-identical to
the same programs without streaming, fused and unfused, on one and two threads, and with a
range that starts misaligned (the kernel then keeps its ordinary stores).
"""

from __future__ import annotations

import ctypes
import re
import threading

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import cpu, runtime
from qtrace.graph.plan import build_plan
from qtrace.kernels import codegen, llvm_cpu, lowering
from qtrace.kernels.target import target_for

pytestmark = pytest.mark.skipif(
    not target_for(qt.Device("cpu")).machine()["triple"].startswith("x86_64"),
    reason="streaming stores are emitted for x86-64 hosts")


@pytest.fixture
def stream_from(monkeypatch):
    """Set the streaming threshold (bytes) for kernels compiled from now on."""
    target = target_for(qt.Device("cpu"))

    def set_threshold(nbytes: int):
        monkeypatch.setattr(lowering, "STREAM_BYTES", nbytes)
        target.__dict__.pop("_key", None)
        monkeypatch.setattr(runtime, "_kernels", {})
        runtime.clear_plan_cache()
    yield set_threshold
    target.__dict__.pop("_key", None)
    runtime.clear_plan_cache()


def _task(fn, *arrays):
    spec = build_plan((fn(*[qt.asarray(a) for a in arrays])._node,), True)
    (task,) = spec.tasks
    return task


def test_which_kernels_stream():
    low = lowering.Lowering(stream_bytes=4096)
    x = np.ones(2048, np.float32)
    assert codegen.streams(_task(lambda a: a * 2.0 + 1.0, x), low)
    assert not codegen.streams(_task(lambda a: a * 2.0, x[:512]), low)           # too small
    assert not codegen.streams(_task(lambda a: qt.sin(a) * 2.0, x), low)         # compute-bound
    assert not codegen.streams(_task(lambda a: a > 0.5, x), low)                 # bool output
    assert not codegen.streams(_task(lambda a: qt.sum(a * 2.0), x), low)         # a reduction
    assert not codegen.streams(_task(lambda a: a * 2.0, x), lowering.Lowering())  # off


def test_streaming_entry_has_aligned_nontemporal_stores_and_the_kernel_none():
    low = lowering.Lowering(stream_bytes=4096, outline_math=True, split_reductions="contiguous")
    task = _task(lambda a, b: a * 3.0 - b, np.ones(4096, np.float32), np.ones(4096, np.float32))
    module = llvm_cpu.new_module("streaming_test")
    codegen.lower_task(task, module, "k", False, low)
    text = str(llvm_cpu.optimize(module))
    functions = {m.group(1): m.group(0)
                 for m in re.finditer(r'define [^@]*@"?(k(?:_nt)?)"?\(.*?\n}\n', text, flags=re.S)}
    assert set(functions) == {"k", "k" + lowering.STREAM_SUFFIX}, text[:2000]
    streamed = re.findall(r"store <16 x float> .*", functions["k_nt"])
    assert streamed and all("!nontemporal" in s and "align 64" in s for s in streamed)
    assert "llvm.x86.sse.sfence" in functions["k_nt"]
    assert "!nontemporal" not in functions["k"]
    asm = llvm_cpu.assembly(module)
    assert "vmovntps" in asm


PROGRAMS = {
    "affine": lambda a, b, k: a * 1.5 + 2.0,
    "two outputs": lambda a, b, k: (a - b, a * b),
    "float64": lambda a, b, k: a.astype(np.float64) * 0.25 - b,
    "int32 and int64": lambda a, b, k: (k * 3 + 1, (k // 7).astype(np.int64)),
    "gathered": lambda a, b, k: a[::-1] + b[k % 5],
}


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.cpu_only("streaming stores are a CPU back-end mechanism")
def test_streaming_gives_the_same_bits(stream_from, name, threads, fusion, rng, monkeypatch):
    n = 300_007   # (parts split at multiples of 64 from 2^18 elements; an odd length: the
                  # scalar remainder runs too)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    k = rng.integers(-1000, 1000, n).astype(np.int32)
    monkeypatch.setattr(qt.config, "num_threads", threads)
    fn = PROGRAMS[name]

    def run():
        out = qt.jit(fn)(a, b, k)
        return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    stream_from(1 << 40)          # never
    plain = run()
    stream_from(4096)             # every kernel above 4 KiB
    streamed = run()
    for p, s in zip(plain, streamed):
        assert p.dtype == s.dtype and p.tobytes() == s.tobytes()


def test_a_misaligned_start_takes_the_ordinary_stores(rng):
    """Called directly on a range starting one element past an aligned address, the
    kernel must not enter its streaming entry (an aligned non-temporal store there would
    fault): the results are right on both sides of the split."""
    low = lowering.Lowering(stream_bytes=4096, outline_math=True, split_reductions="contiguous")
    x, y = (rng.standard_normal(8192).astype(np.float32) for _ in range(2))
    task = _task(lambda a, b: a * b - a, x, y)
    assert len(task.args) == 3 and task.writes == {0}
    module = llvm_cpu.new_module("streaming_misaligned")
    codegen.lower_task(task, module, "k", False, low)
    kernel = llvm_cpu.compile_module(module, ["k"], counted=False)[0]["k"]
    out = cpu.aligned_empty((8192,), np.dtype(np.float32))
    args = (ctypes.c_void_p * 3)(out.ctypes.data, x.ctypes.data, y.ctypes.data)
    for lo, hi in ((0, 1), (1, 4097), (4097, 6000), (6016, 8192), (6000, 6016)):
        kernel(lo, hi, args, None, None)
    assert out.tobytes() == (x * y - x).tobytes()


def test_long_ranges_split_at_multiples_of_64_elements():
    """Workers' parts and the calling thread's pieces of a long range start on multiples of
    64 elements (where every part can stream); short ranges split evenly as before."""
    seen = []
    lock = threading.Lock()

    def record(lo, hi, *_):
        with lock:
            seen.append((lo, hi))
    pool = cpu.WorkerPool(3)
    for extent, aligned in ((cpu.LONG + 5, True), (1000, False)):
        seen.clear()
        pool.run(record, extent, None, None)
        parts = sorted(seen)
        assert parts[0][0] == 0 and parts[-1][1] == extent
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
        starts = [lo for lo, _ in parts]
        if aligned:
            assert all(lo % cpu.PART == 0 for lo in starts)
        else:
            assert starts == [0, 333, 666]
    seen.clear()
    cpu.interruptible(record, 0, cpu.LONG * 3 + 7, None, None, None)
    assert all(lo % cpu.PART == 0 for lo, _ in seen) and seen[-1][1] == cpu.LONG * 3 + 7
