"""Concurrency: Python threads sharing qtrace's caches, and multi-threaded kernels."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import qtrace as qt

N_THREADS = 4


def _run_threads(target, n=N_THREADS):
    """Run ``target(i)`` on ``n`` threads started together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    errors: list = []

    def wrapper(i):
        try:
            barrier.wait()
            target(i)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=wrapper, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_same_jitted_function_from_many_threads(rng, fusion):
    @qt.jit
    def step(x, v, dt):
        v = v - x * dt
        return x + v * dt, v

    inputs = [(rng.standard_normal(257), rng.standard_normal(257)) for _ in range(N_THREADS)]
    results = {}

    def work(i):
        x, v = qt.asarray(inputs[i][0]), qt.asarray(inputs[i][1])
        for _ in range(30):
            x, v = step(x, v, 0.01 * (i + 1))
        results[i] = (x.numpy(), v.numpy())

    qt.reset_stats()
    _run_threads(work)
    assert qt.stats()["traces"] == 1, "concurrent first calls traced more than once"
    for i, (x, v) in enumerate(inputs):
        dt = 0.01 * (i + 1)
        for _ in range(30):
            v = v - x * dt
            x = x + v * dt
        np.testing.assert_allclose(results[i][0], x, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(results[i][1], v, rtol=1e-12, atol=1e-12)


def test_eager_graphs_from_many_threads(rng, fusion):
    data = [rng.standard_normal((64, 33)) for _ in range(N_THREADS)]
    results = {}

    def work(i):
        out = []
        t = qt.asarray(data[i])
        for k in range(20):  # the same program in every thread: shared plan and kernel caches
            kt = qt.asarray(np.float64(k))
            y = qt.tanh(t * 0.5 + kt) - t.sum(axis=1, keepdims=True) / 33.0
            out.append(y.numpy())
        results[i] = out

    _run_threads(work)
    for i in range(N_THREADS):
        x = data[i]
        for k in range(20):
            ref = np.tanh(x * 0.5 + k) - x.sum(axis=1, keepdims=True) / 33.0
            np.testing.assert_allclose(results[i][k], ref, rtol=1e-12, atol=1e-12)


def test_threads_share_one_pending_tensor(rng, fusion):
    x = rng.standard_normal(1000)
    shared = qt.sin(qt.asarray(x)) * 2.0     # pending, read by every thread
    results = {}

    def work(i):
        results[i] = [(shared + float(i)).numpy() for _ in range(10)] + [shared.numpy()]

    _run_threads(work)
    for i in range(N_THREADS):
        for r in results[i][:-1]:
            np.testing.assert_allclose(r, np.sin(x) * 2 + i, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(results[i][-1], np.sin(x) * 2, rtol=1e-12)


@pytest.mark.parametrize("threads", [N_THREADS, 8])
def test_threads_writing_one_array_lose_no_write(fusion, threads):
    """Threads writing different elements of one array at once — through a view of it and
    with an in-place operator on a slice of it — lose none of the writes, as NumPy keeps
    them all: each write reads the array's value and replaces it under the views lock (a
    value computed from one another thread replaced meanwhile would undo that write)."""
    n, steps = 64, 120
    base = qt.asarray(np.zeros((threads, n))) + 0.0   # pending: the writes chain on it
    rows = {}

    def work(i):
        row = base[i]                    # a view of the shared array
        for k in range(steps):
            row[k % 60] = float(k)       # elements 0..59, through the view
            base[i, 60:] += 1.0          # elements 60..63, in place
        rows[i] = row

    ref = np.zeros((threads, n))
    for k in range(steps):
        ref[:, k % 60] = k
        ref[:, 60:] += 1.0
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)          # switch threads as often as possible
    try:
        _run_threads(work, threads)
    finally:
        sys.setswitchinterval(interval)
    np.testing.assert_array_equal(base.numpy(), ref)
    for i in range(threads):
        np.testing.assert_array_equal(rows[i].numpy(), ref[i])


# Two threads racing on one array, in a fresh process (a use-after-free must fail the test,
# not end the session; PYTHONMALLOC=debug fills freed memory, so a read of it crashes):
# `mode` picks the race, `limit` the automatic-evaluation limit.
RACE = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import qtrace as qt
    mode, limit = sys.argv[1], int(sys.argv[2])
    qt.config.max_pending_nodes = limit
    sys.setswitchinterval(1e-6)
    n = 400
    x = qt.asarray(np.zeros((2, n))) + 0.0
    z = qt.asarray(np.ones((2, n)))
    done = threading.Event()

    def views():          # a view made and written while the other thread writes the row
        k = 0
        while not done.is_set():
            v = x[0, :]
            v[0] = float(k)
            k += 1

    def elements():       # every other element of that row, once each
        for j in range(1, n):
            x[0, j] = 1.0
        done.set()

    def numbers():        # a fresh number object each time (converted in Python)
        k = 0
        while not done.is_set():
            x[1, 1] = float(k) + 0.5
            k += 1

    def wholes():         # the whole array replaced meanwhile
        for k in range(n):
            x[:, :] = z * float(k % 3)
        done.set()

    pair = {"views": (views, elements), "numbers": (numbers, wholes)}[mode]
    ts = [threading.Thread(target=f) for f in pair]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    got = x.numpy()
    if mode == "views":
        lost = int((got[0, 1:] != 1.0).sum())
        assert lost == 0, f"{lost} writes lost"
    print("ok")
""")


@pytest.mark.parametrize("limit", [1000, 1 << 30])
@pytest.mark.parametrize("mode", ["views", "numbers"])
def test_racing_writes_keep_every_write_and_the_process(mode, limit):
    """A view made while another thread writes its base is listed (and derived) under the
    views lock, so it cannot keep the old value and write it back; an evaluation replaces a
    storage's value only if no write came in between; a slice assignment holds the value it
    reads while Python code converts the number it assigns (another thread may replace it)."""
    env = dict(os.environ, PYTHONMALLOC="debug")
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", RACE, mode, str(limit)], capture_output=True,
                             text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.strip() == "ok"


def test_large_kernels_from_many_threads_use_the_worker_pool(rng):
    qt.config.num_threads = 2
    data = [rng.standard_normal(200_000).astype(np.float32) for _ in range(N_THREADS)]
    results = {}
    f = qt.jit(lambda a: qt.exp(-a * a) + a)

    def work(i):
        results[i] = [f(data[i]).numpy() for _ in range(5)]

    _run_threads(work)
    for i in range(N_THREADS):
        ref = np.exp(-data[i].astype(np.float64) ** 2) + data[i]
        for r in results[i]:
            np.testing.assert_allclose(r, ref, rtol=2e-6, atol=2e-6)


def test_concurrent_index_errors_stay_in_their_thread(rng):
    x = qt.asarray(np.arange(10.0))
    outcome = {}

    def work(i):
        idx = np.array([1, 2, 50]) if i % 2 else np.array([1, 2, 3])
        try:
            outcome[i] = (x[idx] * 1.0).numpy()
        except IndexError:
            outcome[i] = "IndexError"

    for _ in range(5):
        outcome.clear()
        _run_threads(work)
        for i in range(N_THREADS):
            if i % 2:
                assert outcome[i] == "IndexError"
            else:
                np.testing.assert_array_equal(outcome[i], [1.0, 2.0, 3.0])


# --- multi-threaded kernels -------------------------------------------------------------

def _with_threads(n, fn):
    old = qt.config.num_threads
    qt.config.num_threads = n
    try:
        return fn()
    finally:
        qt.config.num_threads = old


@pytest.mark.parametrize("n", [1_000_000, 1_000_003])
def test_elementwise_same_result_with_one_or_two_threads(rng, fusion, n):
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)

    def run():
        a, b = qt.asarray(x), qt.asarray(y)
        return (qt.sin(a) * b + a * 0.5).numpy()

    one = _with_threads(1, run)
    two = _with_threads(2, run)
    np.testing.assert_array_equal(one, two)
    ref = np.sin(x.astype(np.float64)) * y + x * 0.5
    np.testing.assert_allclose(two, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, axis", [((1000, 1000), 1), ((1000, 1001), 0),
                                         ((2_000_000,), None), ((1000, 1000), None)])
def test_reduction_same_result_with_one_or_two_threads(rng, fusion, shape, axis):
    x = rng.standard_normal(shape)

    def run():
        t = qt.asarray(x)
        return (t * 2.0).sum(axis=axis).numpy(), t.max(axis=axis).numpy()

    s1, m1 = _with_threads(1, run)
    s2, m2 = _with_threads(2, run)
    np.testing.assert_allclose(s1, s2, rtol=1e-10, atol=1e-9)
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_allclose(s2, (x * 2).sum(axis=axis), rtol=1e-10, atol=1e-9)
    np.testing.assert_array_equal(m2, x.max(axis=axis))


def test_float32_reduction_with_threads(rng, fusion):
    x = rng.standard_normal((512, 2048)).astype(np.float32)

    def run():
        return qt.asarray(x).sum(axis=1).numpy()

    one, two = _with_threads(1, run), _with_threads(2, run)
    ref = x.astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(two, ref, rtol=1e-5, atol=1e-4)


def test_scatter_add_with_threads(rng, fusion):
    n = 1_000_000
    idx = rng.integers(0, 1000, n)
    vals = rng.standard_normal(n)

    def run():
        return qt.zeros(1000).at[qt.asarray(idx)].add(qt.asarray(vals)).numpy()

    one, two = _with_threads(1, run), _with_threads(2, run)
    ref = np.zeros(1000)
    np.add.at(ref, idx, vals)
    np.testing.assert_allclose(one, ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(two, ref, rtol=1e-9, atol=1e-9)


def test_num_threads_change_takes_effect_for_cached_plans(rng):
    x = rng.standard_normal(500_000)
    f = qt.jit(lambda a: a * 3.0 + 1.0)
    a = _with_threads(2, lambda: f(x).numpy())
    b = _with_threads(1, lambda: f(x).numpy())
    c = _with_threads(2, lambda: f(x).numpy())
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, c)
    np.testing.assert_allclose(c, x * 3 + 1)


def test_garbage_collection_while_recording_does_not_deadlock():
    """Nodes that die in a garbage-collected cycle while another node is being interned
    (GC runs on any allocation) must not deadlock the interning lock. Runs in a fresh
    process: a deadlock shows up as a timeout there instead of hanging this session."""
    code = textwrap.dedent("""
        import gc
        import numpy as np
        import qtrace as qt
        x = qt.asarray(np.ones(3))
        for i in range(2000):
            gc.set_threshold(1 + i % 13, 1, 1)   # vary where collections fall
            y = x + float(i)
            cyc = [y._node]
            cyc.append(cyc)                       # the node dies only through the GC
            del y, cyc
            junk = [[] for _ in range(i % 7)]
            del junk
        print("ok")
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("recording deadlocked when the GC ran inside make_node") from None
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
