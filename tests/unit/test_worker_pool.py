"""The CPU worker pools: the compiled one (``qtrace.devices._workers``, workers that spin
between launches) and the pure-Python fallback, run through the same checks: parallel
launches in quick succession give the one-thread results bit for bit, Python-callable parts
cover their range once and pass their exceptions on, Ctrl-C stops a long launch promptly
and leaves qtrace usable, a forked child launches with its own threads, and idle compiled
workers go to sleep.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
import warnings

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import cpu
from qtrace.kernels import interrupt


@pytest.fixture(params=["compiled", "python"])
def pool_kind(request, monkeypatch):
    """The pool the test's launches use (a fresh one; the next test gets a fresh one too)."""
    if request.param == "compiled" and cpu._native_workers() is None:
        pytest.skip("the compiled worker pool (qtrace.devices._workers) is not built")
    if request.param == "python":
        monkeypatch.setattr(cpu, "_native_workers", lambda: None)
    cpu._pool = None
    yield request.param
    cpu._pool = None


@pytest.mark.parametrize("threads", [2, 3])
def test_launches_in_quick_succession_match_one_thread(pool_kind, threads, rng):
    f = qt.jit(lambda a: qt.sin(a) * 1.5 + a * a)
    g = qt.jit(lambda a: qt.sum(qt.exp(-a * a), axis=1))
    inputs = [rng.standard_normal(n) for n in (32_768, 100_003, 1 << 20)]
    matrix = rng.standard_normal((40_000, 7))
    qt.config.num_threads = 1
    want = [f(x).numpy() for x in inputs] + [g(matrix).numpy()]
    qt.config.num_threads = threads
    for _ in range(3):
        got = [f(x).numpy() for x in inputs] + [g(matrix).numpy()]
        for w, o in zip(want, got):
            np.testing.assert_array_equal(o, w)
    assert isinstance(cpu.pool(), cpu.NativeWorkerPool if pool_kind == "compiled" else cpu.WorkerPool)


@pytest.mark.parametrize("extent", [1, 3, 1000, (cpu.LONG * 3) // 2 + 5])
def test_callable_parts_cover_their_range_once(pool_kind, extent):
    qt.config.num_threads = 3
    seen, lock = [], threading.Lock()

    def part(start, end, *_):
        with lock:
            seen.append((start, end))
    for start in (0, 17):
        seen.clear()
        cpu.pool().run(part, extent, None, None, start=start)
        covered = np.zeros(extent, int)
        for a, b in seen:
            covered[a - start:b - start] += 1
        assert (covered == 1).all(), seen
        if extent >= cpu.LONG:   # long ranges split at multiples of PART (streaming stores)
            assert all((a - start) % cpu.PART == 0 for a, _ in seen)


@pytest.mark.parametrize("where", ["worker", "caller"])
def test_an_exception_in_a_callable_part_is_raised_by_the_launch(pool_kind, where):
    qt.config.num_threads = 2

    def part(start, end, *_):
        if (start > 0) == (where == "worker"):
            raise ValueError(f"part at {start} failed")
    with pytest.raises(ValueError, match="part at .* failed"):
        cpu.pool().run(part, 1000, None, None)
    calls = []
    cpu.pool().run(lambda s, e, *_: calls.append(e - s), 1000, None, None)
    assert sum(calls) == 1000


@pytest.fixture
def ctrl_c_raises():
    """Python's default SIGINT handler (KeyboardInterrupt) for the test, the previous one after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("where", ["caller's part", "workers' part"])
def test_ctrl_c_stops_a_long_launch_and_leaves_qtrace_usable(pool_kind, where, rng, ctrl_c_raises):
    """A launch of several seconds is stopped by Ctrl-C (a SIGINT sent to the main thread)
    within a fraction of a second, whether the calling thread is still running its part or
    already waiting for the workers' (per-element trip counts: none in the first half);
    the abort flag is cleared and the next launch is right. Many elements of a few thousand
    trips each: the caller's first piece (before the pieces are sized by the time they take)
    lasts ~0.1 s, not ~1 s, so a busy machine (the suite's other test processes) stays well
    inside the limit. (Python's own Ctrl-C handler is installed for the test: a process
    started in the background by a non-interactive shell inherits SIGINT ignored, and Python
    then installs no handler of its own.)"""
    qt.config.num_threads = 2
    n = 4_000_000
    x = qt.asarray(rng.uniform(-1, 1, n))
    trips = np.full(n, 2_000)
    if where == "workers' part":
        trips[:n // 2] = 0
    trips = qt.asarray(trips)
    slow = qt.jit(lambda v, n: qt.fori_loop(0, n, lambda i, u: qt.sin(u) * 0.9 + 0.05, v))
    small = qt.asarray(rng.uniform(-1, 1, 100_000))
    slow(small[:10], trips[:10]).numpy()   # compiled before the clock starts
    timer = threading.Timer(0.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    t0 = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        slow(x, trips).numpy()
        time.sleep(10)   # (not reached unless the launch ignored the interrupt)
    elapsed = time.perf_counter() - t0
    timer.join()
    assert elapsed < 2.0, f"Ctrl-C took {elapsed - 0.5:.2f} s to stop the launch"
    assert not interrupt.is_aborting()
    f = qt.jit(lambda v: v * 2.0 + 1.0)
    np.testing.assert_array_equal(f(small).numpy(), small.numpy() * 2.0 + 1.0)


def _child_launch(queue) -> None:
    x = np.arange(1 << 20, dtype=np.float64)
    got = (qt.asarray(x) * 3.0 + 1.0).numpy()
    queue.put(bool(np.array_equal(got, x * 3.0 + 1.0)))


def test_a_forked_child_launches_with_its_own_threads(pool_kind):
    qt.config.num_threads = 2
    (qt.asarray(np.ones(1 << 20)) * 3.0 + 1.0).numpy()   # the parent's workers exist
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_launch, args=(queue,))
    with warnings.catch_warnings():   # (JAX, if imported, warns about fork: irrelevant here)
        warnings.simplefilter("ignore")
        child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0
    assert queue.get(timeout=5) is True


def test_idle_compiled_workers_go_to_sleep():
    if cpu._native_workers() is None:
        pytest.skip("the compiled worker pool (qtrace.devices._workers) is not built")
    cpu._pool = None
    qt.config.num_threads = 2
    qt.config.spin_us = 1000
    try:
        pool = cpu.pool()
        before = pool.stats()
        cpu.pool().run(lambda s, e, *_: None, 10, None, None)
        time.sleep(0.05)   # 50x the spin time
        after = pool.stats()
        assert after["workers"] == 1
        assert after["launches"] == before["launches"] + 1
        assert after["sleeps"] > before["sleeps"]
    finally:
        cpu._pool = None
