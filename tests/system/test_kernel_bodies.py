"""Kernels shared by body (qtrace.devices.kernel_bodies): tasks of new sizes whose lowered
code is text a kernel already has run that kernel, compiling nothing — and stay right.

The differential test runs a mix of programs (strided and reversed slices, transposes,
reductions along each axis, scans, broadcasting, gathers) over random shapes in one
process, in a random order, against float64 NumPy: a kernel shared where the code of the
two tasks differed would give a wrong value somewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import kernel_bodies, runtime

PROGRAMS = {
    "chain": lambda m, x: m.sin(x) * 2.0 + 1.0,
    "row_sum": lambda m, x: (x * x).sum(axis=-1),
    "col_max": lambda m, x: m.maximum(x, 0.25).max(axis=0),
    "strided": lambda m, x: m.exp(x[..., ::2]) - x[..., ::2].mean(),
    "reversed": lambda m, x: x[::-1] * m.cos(x),
    "transposed": lambda m, x: m.tanh(x.T) * 3.0 + x.T[0],
    "scan": lambda m, x: m.cumsum(x * 0.5, axis=0),
    "outer": lambda m, x: (x[..., :1] * x[:1]).sum(axis=0) if x.ndim == 2 else x * x[0],
    "gather": lambda m, x: x[m.asarray(np.arange(x.shape[0])[::-3].copy())] * 2.0,
}


def _shapes(rng) -> list:
    rows = [int(n) for n in rng.choice(np.arange(1, 80), 4, replace=False)]
    return ([(n,) for n in rows] + [(n, int(k)) for n, k in zip(rows, rng.integers(1, 70, 4))]
            + [(int(rng.integers(3000, 5000)), 3), (int(rng.integers(70_000, 90_000)),)])


def test_programs_of_new_shapes_match_numpy(fusion, rng):
    """Every program on every shape (random order) equals float64 NumPy, and some kernels
    were shared (the programs repeat with new shapes)."""
    runs = [(name, shape) for name in PROGRAMS for shape in _shapes(rng)]
    qt.reset_stats()
    for k in rng.permutation(len(runs)):
        name, shape = runs[k]
        x = rng.standard_normal(shape)
        got = PROGRAMS[name](qt, qt.asarray(x)).numpy()
        want = PROGRAMS[name](np, x)
        assert got.shape == want.shape, (name, shape)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{name} {shape}")
    assert qt.stats()["kernels_shared"] > 0


def test_a_new_length_compiles_nothing(fusion, rng):
    """The same code on a new length takes the kernels compiled for the first."""
    n1, n2 = (int(n) for n in rng.choice(np.arange(100, 10_000), 2, replace=False))
    f = qt.jit(lambda x, y: qt.sin(x) * y + qt.sqrt(qt.abs(y)))
    x1, y1 = rng.standard_normal(n1), rng.standard_normal(n1)
    f(x1, y1).numpy()
    qt.reset_stats()
    x2, y2 = rng.standard_normal(n2), rng.standard_normal(n2)
    got = f(x2, y2).numpy()
    s = qt.stats()
    assert s["compiles"] == 0 and s["kernels_shared"] >= 1, s
    np.testing.assert_allclose(got, np.sin(x2) * y2 + np.sqrt(np.abs(y2)), rtol=1e-13, atol=1e-15)


def test_different_code_is_not_shared(fusion, rng, monkeypatch):
    """Tasks whose text differs (another function, another dtype) compile their own
    kernels (tables emptied first: kernels of other tests would be shared)."""
    monkeypatch.setattr(runtime, "_kernels", {})
    monkeypatch.setattr(kernel_bodies, "_bodies", {})
    n = int(rng.integers(100, 1000))
    x = rng.standard_normal(n)
    qt.sin(qt.asarray(x)).numpy()
    qt.reset_stats()
    for fn, ref in [(qt.cos, np.cos), (qt.tanh, np.tanh)]:
        np.testing.assert_allclose(fn(qt.asarray(x)).numpy(), ref(x), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(qt.sin(qt.asarray(x.astype(np.float32))).numpy(),
                               np.sin(x.astype(np.float32)), rtol=2e-6, atol=1e-6)
    assert qt.stats()["kernels_shared"] == 0 and qt.stats()["compiles"] >= 3


def test_a_kernel_gone_from_the_table_is_compiled_again(monkeypatch, rng):
    """The registry shares only kernels the runtime's table still holds."""
    n = int(rng.integers(100, 1000))
    (qt.sin(qt.asarray(rng.standard_normal(n))) * 3.0).numpy()
    monkeypatch.setattr(runtime, "_kernels", {})
    qt.reset_stats()
    x = rng.standard_normal(n + 1)
    np.testing.assert_allclose((qt.sin(qt.asarray(x)) * 3.0).numpy(), np.sin(x) * 3.0, rtol=1e-13)
    assert qt.stats()["compiles"] >= 1 and qt.stats()["kernels_shared"] == 0


def test_the_digest_ignores_the_symbol_and_the_module_name(rng):
    """Two probes of one task under different symbols and module names digest alike; a
    task of other code digests differently."""
    from qtrace.graph.plan import build_plan
    from qtrace.kernels.target import target_for
    target = target_for(qt.Device("cpu"))
    x = qt.asarray(rng.standard_normal(50))
    [a] = build_plan(((qt.sin(x) * 2.0)._node,), True).tasks
    [b] = build_plan(((qt.cos(x) * 2.0)._node,), True).tasks
    d1, _ = kernel_bodies.probe(target, a, "qt_first", True, "one")
    d2, _ = kernel_bodies.probe(target, a, "qt_second", True, "two")
    d3, _ = kernel_bodies.probe(target, b, "qt_first", True, "one")
    assert d1 == d2 != d3


SHARED = r"""
import json, sys, threading, time
import numpy as np
import qtrace as qt
if sys.argv[2] == "slow":   # (tiered: the optimised compile finishes after the last length ran)
    from qtrace.kernels import llvm_cpu
    compile_prepared = llvm_cpu.compile_prepared

    def slow(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.5)
        return compile_prepared(*args, **kwargs)
    llvm_cpu.compile_prepared = slow
out = {}
for n in map(int, sys.argv[1].split(",")):
    x = np.linspace(-1.0, 1.0, n)
    qt.reset_stats()
    y = (qt.sin(qt.asarray(x)) * 3.0 + 0.5).numpy()
    out[n] = {"stats": qt.stats(), "err": float(np.abs(y - (np.sin(x) * 3.0 + 0.5)).max())}
print(json.dumps({"runs": out, "llvm": "llvmlite.binding" in sys.modules}))
"""


def _run(cache_dir, sizes: str, tiered: str, slow: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QTRACE_")}
    env.update(QTRACE_CACHE_DIR=str(cache_dir), QTRACE_NUM_THREADS="2", QTRACE_FUSION="0",
               QTRACE_TIERED=tiered)
    p = subprocess.run([sys.executable, "-c", SHARED, sizes, "slow" if slow else ""], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout.strip().splitlines()[-1])
    for run in report["runs"].values():
        assert run["err"] < 1e-14, run
    return report


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="kernels load without LLVM where qtrace's ELF loader applies")
@pytest.mark.parametrize("tiered", ["0", "1"])
def test_shared_kernels_are_on_disk_for_the_next_process(tmp_path, tiered):
    """A process that shared kernels for a second length stores them (as aliases of the
    first length's entry; when tiered, once the first length's optimised code is stored):
    the next process running only the second length loads them, without LLVM; one running
    a third length shares the bodies recorded with the first's."""
    first = _run(tmp_path, "3001,3002", tiered, slow=tiered == "1")
    runs = first["runs"]
    assert runs["3001"]["stats"]["compiles"] >= 1
    assert runs["3002"]["stats"]["compiles"] == 0
    assert runs["3002"]["stats"]["kernels_shared"] == runs["3001"]["stats"]["compiles"]
    second = _run(tmp_path, "3002", tiered)
    s = second["runs"]["3002"]["stats"]
    assert s["compiles"] == 0 and s["cache_hits_disk"] == runs["3001"]["stats"]["compiles"], s
    assert not second["llvm"], "a warm start loaded LLVM"
    third = _run(tmp_path, "3001,3003", tiered)
    s = third["runs"]["3003"]["stats"]
    assert s["compiles"] == 0 and s["kernels_shared"] == runs["3001"]["stats"]["compiles"], s


def test_a_kernel_compiled_without_the_disk_cache_is_shared_with_it_on(monkeypatch, tmp_path, rng):
    """A kernel compiled while the disk cache was off has no entry to alias: a task sharing
    it once the cache is on runs it, and stores nothing (the next process compiles)."""
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(qt.config, "offline_cache", False)
    n = int(rng.integers(100, 1000))
    (qt.arctan(qt.asarray(rng.standard_normal(n))) * 5.0).numpy()
    monkeypatch.setattr(qt.config, "offline_cache", True)
    qt.reset_stats()
    x = rng.standard_normal(n + 3)
    np.testing.assert_allclose((qt.arctan(qt.asarray(x)) * 5.0).numpy(), np.arctan(x) * 5.0,
                               rtol=1e-13)
    assert qt.stats()["kernels_shared"] >= 1 and qt.stats()["compiles"] == 0
