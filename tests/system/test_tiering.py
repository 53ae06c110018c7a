"""Tiered compilation (``qtrace.kernels.tiering``): small plans run quickly compiled code
first, their optimised code is installed behind them by a background thread.

The rest of the suite runs with tiering off (``tests/conftest.py``: it tests the optimised
kernels and sees compiles and disk writes when they happen); here it is on. What must hold:
the quick and the optimised tier compute the same results (every elementwise operation of
the op table, random and special inputs, fusion on and off: non-NaN values bit for bit,
NaNs as NaNs), plans built before the tier-up
reach the optimised code, the disk cache only ever holds optimised code (and gets it even
when the process exits first), the plans that must not be tiered are not, and threads,
``fork`` (from either thread), a failing optimiser and a refused thread leave results right
and the queue moving.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import runtime
from qtrace.kernels import disk_cache, llvm_cpu, sequence, tiering

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))
from op_table import ELEMENTWISE, make_input, special_values  # noqa: E402

pytestmark = pytest.mark.cpu_only("tiered compilation is the CPU target's")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture
def tiered(monkeypatch, fusion):
    """Tiering on, with no kernel or plan compiled before (so every plan compiles anew) and
    no disk cache; the queue drained before and after."""
    tiering.wait()
    monkeypatch.setattr(runtime, "_kernels", {})
    runtime.clear_plan_cache()
    qt.config.tiered = True
    qt.config.offline_cache = False
    yield fusion
    tiering.wait()
    runtime.clear_plan_cache()


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fiuc" else a


def _nan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a) if a.dtype.kind in "fc" else np.zeros(a.shape, bool)


def assert_same_results(a, b, what: str) -> None:
    """NaN at the same places, and every other element equal bit for bit (signed zeros
    included). Which NaN an operation on NaNs returns (sign, payload) is unspecified, in
    LLVM as between NumPy's loops: NaNs are compared as NaNs."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    nan_a, nan_b = _nan(a).ravel(), _nan(b).ravel()
    assert (nan_a == nan_b).all(), f"{what}: NaN at {np.flatnonzero(nan_a != nan_b)[:8].tolist()}"
    bad = ((_bits(a) != _bits(b)).ravel() if a.dtype.kind != "c" else
           (_bits(a.real) != _bits(b.real)).ravel() | (_bits(a.imag) != _bits(b.imag)).ravel())
    bad &= ~nan_a
    assert not bad.any(), (f"{what}: differ at {np.flatnonzero(bad)[:8].tolist()}: "
                           f"{a.ravel()[bad][:8]} vs {b.ravel()[bad][:8]}")


def fresh_compile(fn, *, tiered: bool):
    """``fn()`` evaluated with plans and kernels compiled anew, tiered or not."""
    runtime.clear_plan_cache()
    saved, runtime._kernels = runtime._kernels, {}
    old = qt.config.tiered
    qt.config.tiered = tiered
    try:
        return fn()
    finally:
        qt.config.tiered = old
        runtime._kernels = saved
        runtime.clear_plan_cache()


# --- both tiers compute the same results -------------------------------------------------
def _inputs(rng, op, dtype):
    """Random inputs of the op's domain, then every pair of the dtype's special values."""
    dts = [dict(op.arg_dtypes or ()).get(i, dtype) for i in range(op.arity)]
    random = [make_input(rng, op.domain[i], dts[i], (61,)) for i in range(op.arity)]
    special = [special_values(op.domain[i], dts[i]) for i in range(op.arity)]
    if op.arity == 2:
        special = [np.repeat(special[0], len(special[1])), np.tile(special[1], len(special[0]))]
    elif op.arity == 3:
        n = min(len(s) for s in special)
        special = [s[:n] for s in special]
    return [np.concatenate([r, s]) for r, s in zip(random, special)]


def _cases():
    return [pytest.param(op, dt, id=f"{op.name}-{dt}") for op in ELEMENTWISE for dt in op.dtypes]


@pytest.mark.parametrize("op, dtype", _cases())
def test_both_tiers_compute_the_same_results(op, dtype, tiered, rng):
    args = _inputs(rng, op, dtype)

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return op.qt(*[qt.asarray(a) for a in args]).numpy()
            except (TypeError, ValueError, ZeroDivisionError) as exc:
                return exc

    with tiering.paused():
        before = qt.stats()["compiles"]
        quick = run()
        compiled = qt.stats()["compiles"] - before
        assert tiering.pending() == (1 if compiled else 0)   # (round of an integer: no kernel)
    assert tiering.wait(60)
    optimised_behind_quick = run()          # the same plan: its quick entry, now forwarding
    direct = fresh_compile(run, tiered=False)
    if isinstance(direct, Exception):
        assert type(quick) is type(direct) and type(optimised_behind_quick) is type(direct)
        return
    assert_same_results(quick, direct, f"{op.name} {dtype}: quick vs optimised")
    assert_same_results(optimised_behind_quick, direct, f"{op.name} {dtype}: after the tier-up")


def b4_step(m, x, y):
    """B4's 50-operation step (float32)."""
    for i in range(7):
        c = 0.1 + 0.01 * i
        x = x + c * (m.cos(y) if i % 2 else m.sin(y))
        y = y * 0.99 - m.tanh(x) * c
    return x * y


def _b4_inputs(rng, n=1000, dtype=np.float32):
    return (rng.uniform(-3, 3, n).astype(dtype), rng.uniform(-3, 3, n).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_jitted_step_runs_quick_then_optimised(tiered, rng, dtype):
    x, y = _b4_inputs(rng, dtype=dtype)
    f = qt.jit(lambda a, b: b4_step(qt, a, b))
    qt.reset_stats()
    with tiering.paused():
        quick = f(x, y).numpy()
        s = qt.stats()
        assert (s["tier_ups"], tiering.pending()) == (0, 1)
        assert s["compiles"] >= 1 and len(runtime._kernels) == s["compiles"]
        quick_entries = dict(runtime._kernels)
    assert tiering.wait(60)
    assert qt.stats()["tier_ups"] == s["compiles"]
    for key, entry in quick_entries.items():   # plans built from now on call the optimised code
        assert runtime._kernels[key] is not entry
    assert_same_results(f(x, y).numpy(), quick, "the quick plan after the tier-up")
    runtime.clear_plan_cache()
    g = qt.jit(lambda a, b: b4_step(qt, a, b))
    assert_same_results(g(x, y).numpy(), quick, "a new plan on the optimised kernel")
    assert qt.stats()["compiles"] == s["compiles"]
    direct = fresh_compile(lambda: qt.jit(lambda a, b: b4_step(qt, a, b))(x, y).numpy(), tiered=False)
    assert_same_results(quick, direct, "quick vs compiled optimised at once")
    want = b4_step(np, x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(quick, want, rtol=0, atol=1e-4 if dtype == np.float32 else 1e-12)


def test_eager_chains_run_quick_then_optimised(tiered, rng):
    x, y = _b4_inputs(rng, n=300, dtype=np.float64)
    with tiering.paused():
        a = qt.asarray(x)
        u = qt.where(a > 0, qt.exp(-a) * 3, a * a) - qt.sqrt(qt.abs(a) + 1)
        quick = u.numpy()
        assert tiering.pending() == 1
    assert tiering.wait(60)
    want = np.where(x > 0, np.exp(-x) * 3, x * x) - np.sqrt(np.abs(x) + 1)
    np.testing.assert_allclose(quick, want, rtol=1e-14, atol=1e-15)
    v = qt.where(a > 0, qt.exp(-a) * 3, a * a) - qt.sqrt(qt.abs(a) + 1)
    assert_same_results(v.numpy(), quick, "the same eager plan after the tier-up")


# --- what is not tiered ------------------------------------------------------------------
def _cases_not_tiered():
    big = tiering.WORK_LIMIT + 1
    return {
        "sum": lambda rng: qt.sum(qt.asarray(rng.standard_normal(1000)) * 2),
        "row sums": lambda rng: qt.sum(qt.asarray(rng.standard_normal((30, 40))), axis=1),
        "cumsum": lambda rng: qt.cumsum(qt.asarray(rng.standard_normal(500))),
        "large": lambda rng: qt.asarray(rng.standard_normal(big)) * 2 + 1,
        "loop": lambda rng: qt.fori_loop(0, 3, lambda i, v: qt.sin(v) * 0.5 + v,
                                         qt.asarray(rng.standard_normal(100))),
    }


@pytest.mark.parametrize("case", sorted(_cases_not_tiered()))
def test_plans_with_reductions_loops_or_much_work_compile_optimised_at_once(case, tiered, rng):
    make = _cases_not_tiered()[case]
    qt.reset_stats()
    with tiering.paused():
        got = make(rng).numpy()
        assert tiering.pending() == 0
        assert qt.stats()["compiles"] >= 1
    assert qt.stats()["tier_ups"] == 0
    assert np.isfinite(got).all()


def test_tiering_off_compiles_optimised_at_once(tiered, rng):
    qt.config.tiered = False
    x, y = _b4_inputs(rng)
    with tiering.paused():
        qt.jit(lambda a, b: b4_step(qt, a, b))(x, y).numpy()
        assert tiering.pending() == 0


def test_a_module_with_reassociable_operations_is_not_tiered(tiered):
    """A reassociable operation may be reordered by the optimiser (a vectorized sum): the
    tiers could round differently, so such a module is compiled optimised at once. (No
    plan's map task has one today: the guard is tested on a module of its own.)"""
    from llvmlite import ir
    module = llvm_cpu.new_module("reassoc")
    f64 = ir.DoubleType()
    fn = ir.Function(module, ir.FunctionType(f64, [f64, f64]), name="f")
    b = ir.IRBuilder(fn.append_basic_block())
    r = b.fadd(*fn.args)
    r.flags.append("reassoc")
    b.ret(r)
    called = []
    with tiering.paused():
        assert tiering.compile(llvm_cpu.prepare(module), ["f"], called.append) is None
        assert tiering.pending() == 0
    assert called == []


# small plans of several tasks or unrolled contractions: tiered, same bits (those with a
# reduction only fused: unfused, the reduction is a task of its own, never tiered)
REDUCING = {"row sums of 3", "row max of 3", "softmax rows of 3"}
_PROGRAMS = {
    "product k=3 + tanh": lambda a, w: qt.tanh(a @ w[:3]),
    "row sums of 3": lambda a, w: qt.exp(qt.sum(a, axis=1) * 0.5),
    "row max of 3": lambda a, w: qt.max(a, axis=1) - qt.min(a, axis=1),
    "softmax rows of 3": lambda a, w: qt.exp(a) / qt.sum(qt.exp(a), axis=1, keepdims=True),
    "b4 step, float64": lambda a, w: b4_step(qt, a[:, 0], a[:, 1]),
    "slices and where": lambda a, w: qt.where(a[1:, :] > a[:-1, :], a[1:, :] ** 2, qt.sin(a[:-1, :])),
    "integers": lambda a, w: ((qt.astype(a * 1000, qt.int64) >> 2) ^ 0x5A5A) % 97,
}


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_small_programs_compute_the_same_results_in_both_tiers(name, tiered, rng):
    a, w = rng.standard_normal((300, 3)), rng.standard_normal((4, 5))

    def run():
        return _PROGRAMS[name](qt.asarray(a), qt.asarray(w)).numpy()

    with tiering.paused():
        quick = run()
        assert tiering.pending() == (0 if name in REDUCING and not tiered else 1)
    assert tiering.wait(60)
    assert_same_results(run(), quick, f"{name}: after the tier-up")
    assert_same_results(fresh_compile(run, tiered=False), quick, f"{name}: quick vs optimised")


# --- the disk cache holds optimised code only ------------------------------------------
def _kernel_files(cache_dir) -> list:
    """The cache's kernel entries (not the sequence runner's, which a run of small kernels
    adds where this process has not loaded it yet)."""
    kdir = os.path.join(cache_dir, "kernels")
    runner = disk_cache._kernels_id([sequence.KEY])
    return sorted(n for n in os.listdir(kdir) if not n.startswith(runner)) if os.path.isdir(kdir) else []


CHILD = """
import atexit, json, sys, threading
report = {}

def after():   # registered before qtrace is imported: runs after qtrace's own exit handler
    import qtrace as qt
    from qtrace.kernels import tiering
    report.update(pending_after_exit=tiering.pending(), tier_ups=qt.stats()["tier_ups"])
    print(json.dumps(report), flush=True)

atexit.register(after)
import numpy as np, qtrace as qt
from qtrace.kernels import tiering

def compute():
    x = np.linspace(-2, 2, 777)
    global held
    held = tiering.paused()        # never left: the optimising compile is still queued at exit
    held.__enter__()
    r = (qt.tanh(qt.asarray(x) * 1.5) + qt.cos(qt.asarray(x))).numpy()
    s = qt.stats()
    report.update(err=float(np.abs(r - (np.tanh(x * 1.5) + np.cos(x))).max()),
                  compiles=s["compiles"], disk=s["cache_hits_disk"], pending=tiering.pending())

t = threading.Thread(target=compute, daemon=sys.argv[1] == "daemon")
t.start()
t.join()
"""


def _child(cache_dir, thread="plain", cache="1") -> dict:
    import json
    env = dict(os.environ, QTRACE_CACHE_DIR=str(cache_dir), QTRACE_TIERED="1",
               QTRACE_OFFLINE_CACHE=cache, PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, "-c", CHILD, thread], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("thread", ["plain", "daemon"])
def test_an_exiting_process_compiles_and_stores_the_queued_optimised_code(tmp_path, fusion, thread):
    """The compile is still queued when the interpreter exits (from a daemon thread too):
    the exit runs it, and the disk cache gets the optimised code."""
    first = _child(tmp_path, thread)
    assert first["err"] < 1e-14 and first["compiles"] >= 1 and first["disk"] == 0
    assert first["pending"] == 1
    assert (first["pending_after_exit"], first["tier_ups"]) == (0, first["compiles"])
    assert len(_kernel_files(tmp_path)) == 1
    second = _child(tmp_path, thread)
    assert second == dict(first, compiles=0, disk=1, pending=0, tier_ups=0)


def test_an_exiting_process_drops_the_queued_compiles_nothing_would_keep(tmp_path, fusion):
    report = _child(tmp_path, cache="0")
    assert report["err"] < 1e-14 and report["pending"] == 1
    assert (report["pending_after_exit"], report["tier_ups"]) == (0, 0)
    assert _kernel_files(tmp_path) == []


USER_EXIT_HANDLER = """
import atexit, numpy as np, qtrace as qt

def compile_at_exit():   # registered after qtrace's own exit handler: runs before it
    x = np.linspace(0, 1, 1000)
    print(float(np.abs((qt.tanh(qt.asarray(x)) * 3).numpy() - np.tanh(x) * 3).max()))

atexit.register(compile_at_exit)
"""


def test_a_plan_compiled_by_an_exit_handler_of_the_user_is_stored(tmp_path):
    env = dict(os.environ, QTRACE_CACHE_DIR=str(tmp_path), QTRACE_TIERED="1", PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, "-c", USER_EXIT_HANDLER], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert float(p.stdout) < 1e-14
    assert len(_kernel_files(tmp_path)) == 1


def test_the_stored_object_is_the_one_an_untiered_compile_stores(tiered, tmp_path, rng):
    x = rng.standard_normal(300)
    qt.config.offline_cache = True
    payloads = []
    for tier, sub in ((True, "tiered"), (False, "direct")):
        qt.config.cache_dir = str(tmp_path / sub)
        fresh_compile(lambda: (qt.exp(qt.asarray(x) * 0.75) - 2.5).numpy(), tiered=tier)
        assert tiering.wait(60)
        (path,) = [os.path.join(tmp_path, sub, "kernels", f) for f in _kernel_files(tmp_path / sub)]
        with open(path, "rb") as f:
            payloads.append(f.read().split(b"\n", 1)[1])
    assert payloads[0] == payloads[1]


def test_nothing_is_stored_before_the_optimised_code_exists(tiered, tmp_path, rng):
    qt.config.offline_cache = True
    qt.config.cache_dir = str(tmp_path)
    x = rng.standard_normal(500)
    with tiering.paused():
        qt.exp(qt.asarray(x) * 0.25).numpy()
        assert _kernel_files(tmp_path) == []
    assert tiering.wait(60)
    assert len(_kernel_files(tmp_path)) == 1


# --- threads, fork, failures -------------------------------------------------------------
def test_threads_calling_a_plan_during_its_tier_up_get_its_results(tiered, rng):
    x, y = _b4_inputs(rng)
    f = qt.jit(lambda a, b: b4_step(qt, a, b))
    with tiering.paused():
        want = f(x, y).numpy()
    errors, start = [], threading.Barrier(4)

    def worker():
        try:
            start.wait()
            for _ in range(200):
                assert_same_results(f(x, y).numpy(), want, "a call during the tier-up")
        except BaseException as exc:   # (reported by the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert tiering.wait(60) and qt.stats()["tier_ups"] >= 1


def test_plans_compiled_from_several_threads_all_tier_up(tiered, rng, monkeypatch):
    """Jobs queued while the background thread decides to stop must still be compiled:
    two threads compile 25 distinct small plans each, then every one has tiered up."""
    from qtrace.devices import kernel_bodies
    monkeypatch.setattr(kernel_bodies, "find", lambda *key: None)   # (each compiles its own)
    x = rng.standard_normal(64)
    qt.reset_stats()
    errors = []

    def compile_many(f, ref):
        try:
            for k in range(25):                      # a new length: a new kernel
                np.testing.assert_allclose(f(qt.asarray(x[:k + 10])).numpy(), ref(x[:k + 10]),
                                           rtol=1e-14)
        except BaseException as exc:   # (reported by the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=compile_many, args=(lambda a: qt.sin(a) * 1.5,
                                                           lambda a: np.sin(a) * 1.5)),
               threading.Thread(target=compile_many, args=(lambda a: qt.cos(a) - 2.5,
                                                           lambda a: np.cos(a) - 2.5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[0]
    assert tiering.wait(120)
    s = qt.stats()
    assert s["tier_ups"] == s["compiles"] >= 50


def _quiet_fork_warnings() -> None:
    """(Inside ``catch_warnings``.) Python warns at a fork with threads running, and JAX,
    which other tests import, warns too: here the threads are understood."""
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)


def _forked_child(queue, x):
    try:
        r = (qt.cos(qt.asarray(x)) * 3 - 1).numpy()
        queue.put(float(np.abs(r - (np.cos(x) * 3 - 1)).max()))
    except BaseException as exc:
        queue.put(repr(exc))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
def test_a_forked_child_compiles_while_the_parent_tiers_up(tiered, rng, paused):
    x, y = _b4_inputs(rng)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    with tiering.paused() if paused else contextlib.nullcontext():
        qt.jit(lambda a, b: b4_step(qt, a, b))(x, y).numpy()   # its tier-up queued or running
        with warnings.catch_warnings():
            _quiet_fork_warnings()
            child = ctx.Process(target=_forked_child, args=(queue, rng.standard_normal(200)))
            child.start()
        child.join(120)
        assert child.exitcode == 0
        assert queue.get(timeout=10) < 1e-14
    assert tiering.wait(60)


def _blocking_optimiser(monkeypatch):
    """``llvm_cpu.compile_prepared`` made to wait for ``release`` once started on the
    background thread (other compiles, such as the sequence runner's, go through)."""
    started, release = threading.Event(), threading.Event()
    real = llvm_cpu.compile_prepared

    def blocking(*args, **kwargs):
        if threading.current_thread().name == "qtrace-tier-up":
            started.set()
            assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(llvm_cpu, "compile_prepared", blocking)
    return started, release


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_waits_for_the_compile_under_way_only(tiered, rng, monkeypatch):
    started, release = _blocking_optimiser(monkeypatch)
    x = qt.asarray(rng.standard_normal(200))
    with tiering.paused():
        (qt.sin(x) * 2).numpy()
        (qt.cos(x) * 3).numpy()
        assert tiering.pending() == 2
    assert started.wait(60)                      # the first compile runs, and waits
    threading.Timer(0.3, release.set).start()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        _quiet_fork_warnings()
        pid = os.fork()
    if pid == 0:                                 # the child: the second compile still queued
        os._exit(10 + tiering.pending())
    waited = time.perf_counter() - t0
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 11
    assert waited >= 0.25                        # the fork waited for the running compile
    assert tiering.wait(60) and qt.stats()["tier_ups"] >= 2


FORK_FROM_THE_BACKGROUND = """
import os, sys, warnings, numpy as np, qtrace as qt
from qtrace.kernels import disk_cache, llvm_cpu, sequence, tiering
warnings.simplefilter("ignore", DeprecationWarning)
real = llvm_cpu.compile_prepared

def forking(*args, **kwargs):   # runs on the background thread
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return real(*args, **kwargs)

llvm_cpu.compile_prepared = forking
r = (qt.sin(qt.asarray(np.arange(100.0))) * 2).numpy()
print(tiering.wait(60), qt.stats()["tier_ups"], float(np.abs(r - np.sin(np.arange(100.0)) * 2).max()))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_from_the_background_thread_does_not_wait_for_itself(tmp_path):
    env = dict(os.environ, QTRACE_CACHE_DIR=str(tmp_path), QTRACE_TIERED="1", PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, "-c", FORK_FROM_THE_BACKGROUND], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    done, tier_ups, err = p.stdout.split()
    assert done == "True" and int(tier_ups) == 1 and float(err) < 1e-15


@pytest.fixture
def optimiser_failing_once(monkeypatch):
    """``llvm_cpu.compile_prepared`` raising on its first call from the background thread
    (other compiles, such as the sequence runner's, go through), working afterwards."""
    real = llvm_cpu.compile_prepared
    calls = []

    def fail_once(*args, **kwargs):
        if threading.current_thread().name == "qtrace-tier-up":
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("no optimiser today")
        return real(*args, **kwargs)

    monkeypatch.setattr(llvm_cpu, "compile_prepared", fail_once)


def test_a_failing_optimiser_leaves_the_quick_code_running(tiered, rng, optimiser_failing_once):
    x = rng.standard_normal(400)
    qt.reset_stats()
    with pytest.warns(RuntimeWarning, match="keep running unoptimised"):
        with tiering.paused():
            got = qt.sin(qt.asarray(x) * 0.5).numpy()
        assert tiering.wait(60)
    s = qt.stats()
    assert (s["tier_ups"], s["tier_up_failures"]) == (0, 1)
    np.testing.assert_allclose(got, np.sin(x * 0.5), rtol=1e-15)
    assert_same_results(qt.sin(qt.asarray(x) * 0.5).numpy(), got, "after the failed tier-up")
    (qt.cos(qt.asarray(x)) + 1).numpy()          # later plans still tier up
    assert tiering.wait(60) and qt.stats()["tier_ups"] >= 1


def test_a_failure_reported_as_an_error_does_not_stop_later_tier_ups(tiered, rng,
                                                                    optimiser_failing_once):
    x = qt.asarray(rng.standard_normal(300))
    qt.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # (the background thread's warning raises)
        (qt.sin(x) * 0.5).numpy()
        assert tiering.wait(60)
        assert qt.stats()["tier_up_failures"] == 1
        (qt.cos(x) * 0.5).numpy()
        assert tiering.wait(60)
    assert qt.stats()["tier_ups"] >= 1


def test_where_no_thread_starts_the_caller_compiles_optimised_at_once(tiered, rng, monkeypatch):
    start = threading.Thread.start

    def refuse(self):
        if self.name == "qtrace-tier-up":
            raise RuntimeError("can't start new thread")
        return start(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    x = rng.standard_normal(300)
    qt.reset_stats()
    got = (qt.tanh(qt.asarray(x)) * 2).numpy()
    s = qt.stats()
    assert tiering.pending() == 0 and s["tier_ups"] == s["compiles"] >= 1
    np.testing.assert_allclose(got, np.tanh(x) * 2, rtol=1e-14)


def test_wait_inside_a_paused_block_returns(tiered, rng):
    with tiering.paused():
        (qt.sin(qt.asarray(rng.standard_normal(50))) + 1).numpy()
        assert tiering.wait() is False           # queued, not started: no hang
    assert tiering.wait(60) is True


# --- NaNs ----------------------------------------------------------------------------------
def _nans(dtype) -> np.ndarray:
    """Quiet NaNs of both signs, one with a payload, a signalling NaN, and ordinary values."""
    bits = {np.float64: [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000123,
                         0x7FF0000000000001],
            np.float32: [0x7FC00000, 0xFFC00000, 0x7FC00123, 0x7F800001]}[dtype]
    u = np.dtype(dtype).str.replace("f", "u")
    nans = np.array(bits, dtype=u).view(dtype)
    return np.concatenate([nans, np.array([np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0], dtype)])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nans_stay_nans_and_sign_readers_are_not_tiered(tiered, dtype):
    v = _nans(dtype)
    a, b = np.repeat(v, len(v)), np.tile(v, len(v))
    c = np.full(a.shape, 5, dtype)
    programs = {
        "sums": lambda p, q, r: p * 3 + q * 0 - (p - q) * r,
        "identities": lambda p, q, r: (p * 1.0 + -0.0) / 1.0 + q,
        "math": lambda p, q, r: qt.exp(p - q) + qt.sin(p * q) * qt.sqrt(qt.abs(q)),
    }
    readers = {
        "copysign": lambda p, q, r: qt.copysign(r, p * 3 + q * 0),
        "signbit": lambda p, q, r: qt.signbit(p * 3 + q * 0),
    }
    for name, f in {**programs, **readers}.items():
        def run(f=f):
            return f(qt.asarray(a), qt.asarray(b), qt.asarray(c)).numpy()

        with tiering.paused():
            quick = run()
            assert tiering.pending() == (name in programs), name
        assert tiering.wait(60)
        assert_same_results(run(), quick, f"{name}: after the tier-up")
        assert_same_results(fresh_compile(run, tiered=False), quick, f"{name}: quick vs optimised")
