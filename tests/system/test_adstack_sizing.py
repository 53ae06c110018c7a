"""The adstack's sizing paths, each proven by its counter, and ``QTRACE_DEBUG_ADSTACK``.

A reverse-mode loop task's stack depth is found on one of three paths
(``qtrace/devices/adstack.py``): on the host (shapes, Python scalars, constants: no
reduction), by the max-reducer (cached per data version: a hit dispatches nothing), or
from the counts a ``while_loop``'s forward recorded. Each launch counts exactly one of
``adstack_host_sized`` / ``adstack_reducer_hits`` / ``adstack_reducer_dispatches`` /
``adstack_recorded`` per stack level, and with ``QTRACE_DEBUG_ADSTACK=1`` prints one line
per loop task naming the path, the depth and the bytes bound. Gradients are checked
against the hand-derived float64 adjoint of B3 (``test_loops.b3_numpy``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from test_adstack_versions import COUNTERS, check_b3, counted, sized
from test_loops import (
    assert_close,
    assert_matches_finite_differences,
    b3_finite_differences,
    b3_qt,
    grads,
    newton_qt,
)
from test_threads import _run_threads

import qtrace as qt

SIZE = 40
LINE = re.compile(r"^\[qtrace adstack\] (qt_[0-9a-f]+) (loop_[0-9a-f]+): level 0 depth (\d+) "
                  r"\(([a-z ]+)\); (\d+) stacks, bound (\d+) bytes$")


def _b3(rng, counts):
    """B3's gradient with trip counts ``counts``, and its float64 inputs."""
    x, c = rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE)

    def run():
        return grads(b3_qt(counts), (qt.asarray(x), qt.asarray(c)), (0, 1))
    return run, x, c


def _lines(capfd) -> list:
    err = capfd.readouterr().err
    return [LINE.match(ln) for ln in err.splitlines() if ln.startswith("[qtrace adstack]")]


def test_host_sized_python_bounds(fusion, rng, capfd):
    """``fori_loop(2, 9, ...)``: the depth 7 is read on the host; no reduction at all."""
    qt.config.debug_adstack = True
    x, c = rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE)

    def loss(x, c):
        return qt.sum(qt.fori_loop(2, 9, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
    for _ in range(3):
        got, s = counted(grads, loss, (qt.asarray(x), qt.asarray(c)), (0, 1))
        assert s == sized(host=1), s
    check_b3(got, x, c, np.full(SIZE, 7), "host-sized")
    (line,) = _lines(capfd)[-1:]
    assert line is not None and line[3] == "7" and line[4] == "host", line


def test_reducer_dispatches_once_then_hits(fusion, rng, capfd):
    """10 gradients on unchanged (owned) counts: 1 dispatch + 9 hits, and the debug output
    says so, launch by launch, with the same kernel, loop and depth."""
    n = rng.integers(0, 9, SIZE)
    n[7] = 11
    qn = qt.asarray(n, copy=True)
    run, x, c = _b3(rng, qn)
    qt.config.debug_adstack = True
    capfd.readouterr()
    qt.reset_stats()
    for _ in range(10):
        got = run()
    s = qt.stats()
    assert {k: s[k] for k in COUNTERS} == sized(dispatches=1, hits=9), s
    assert s["adstack_device_sized"] == 10 and s["max_reducer_dispatches"] == 1, s
    check_b3(got, x, c, n, "cached depth")
    lines = _lines(capfd)
    assert len(lines) == 10 and all(lines), lines
    assert [m[4] for m in lines] == ["reducer dispatched"] + ["reducer hit"] * 9
    assert {(m[1], m[2], m[3]) for m in lines} == {(lines[0][1], lines[0][2], "11")}
    stacks, nbytes = int(lines[0][5]), int(lines[0][6])
    assert stacks >= 1 and nbytes >= stacks * 11 * 8, lines[0].group(0)  # depth x float64 rows


def test_recorded_counts_are_not_reducer_misses(fusion, rng, capfd):
    """``while_loop``: sized from the recorded counts on every launch, never a reducer miss."""
    a = rng.uniform(0.5, 50.0, SIZE)
    qt.config.debug_adstack = True
    capfd.readouterr()
    for _ in range(3):
        (g,), s = counted(grads, lambda a: qt.sum(newton_qt(a)), (qt.asarray(a),), (0,))
        assert s == sized(recorded=1), s
        assert_close(g, 0.5 / np.sqrt(a), rtol=1e-8, what="d sqrt(a)/da")
    lines = _lines(capfd)
    assert len(lines) == 3 and all(m is not None and m[4] == "recorded counts" for m in lines), lines
    assert all(int(m[3]) >= 1 for m in lines), lines


def test_scalar_trip_counts_are_read_where_they_came_from_and_stacks_are_kept(fusion, rng):
    """A jitted gradient whose trip count is a Python scalar argument: each call is sized on
    the host from the scalar itself — on a GPU, nothing is read back from the device (no
    copy, no wait) before the result is — and the stack memory is kept between calls (on a
    GPU too: grown by doubling, never uploaded), so a run of calls allocates only while its
    depths grow, and a second run of them not at all."""
    x, c = rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE)
    step = qt.jit(qt.grad(lambda x, c, s: b3_qt(s)(x, c), argnums=(0, 1)))
    xs, cs = qt.asarray(x), qt.asarray(c)
    qt.eval(*step(xs, cs, 3))   # compiled, stack memory taken
    qt.reset_stats()
    counts = (5, 2, 9, 5)
    outs = [step(xs, cs, s) for s in counts]
    st = qt.stats()
    assert st["bytes_device_to_host"] == 0 and st["device_syncs"] == 0, st
    assert {key: st[key] for key in COUNTERS} == sized(host=len(counts)), st
    # (growing from depth 3 to 9 doubles the block once or twice, with the worker count)
    assert st["adstack_scratch_allocs"] <= 2, st
    qt.reset_stats()
    again = [step(xs, cs, s) for s in counts]
    assert qt.stats()["adstack_scratch_allocs"] == 0, qt.stats()   # (kept: none now)
    for s, (gx, gc), (ax, ac) in zip(counts, outs, again):
        np.testing.assert_array_equal(ax.numpy(), gx.numpy())
        np.testing.assert_array_equal(ac.numpy(), gc.numpy())
        check_b3([gx.numpy(), gc.numpy()], x, c, np.full(SIZE, s), f"trip count {s}")


def test_debug_output_is_off_by_default(fusion, rng, capfd):
    n = qt.asarray(rng.integers(0, 5, SIZE), copy=True)
    _b3(rng, n)[0]()
    assert "[qtrace adstack]" not in capfd.readouterr().err


@pytest.mark.parametrize("value, prints", [("1", True), ("0", False)])
def test_debug_environment_variable(value, prints):
    code = ("import numpy as np, qtrace as qt\n"
            "x = qt.asarray(np.linspace(0.1, 1, 10))\n"
            "n = qt.asarray(np.array([0, 3, 1, 4, 2, 0, 1, 2, 3, 1]), copy=True)\n"
            "f = lambda x: qt.sum(qt.fori_loop(0, n, lambda i, v: qt.sin(v) * v, x))\n"
            "print(qt.grad(f)(x).numpy())\n")
    env = dict(os.environ, QTRACE_DEBUG_ADSTACK=value)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [LINE.match(ln) for ln in proc.stderr.splitlines() if ln.startswith("[qtrace adstack]")]
    if prints:
        assert len(lines) == 1 and lines[0] is not None, proc.stderr
        assert lines[0][3] == "4" and lines[0][4] == "reducer dispatched", proc.stderr
    else:
        assert lines == [], proc.stderr


# --- the CPU's kept adstack memory -----------------------------------------------------
def _in_new_thread(fn):
    """``fn()`` on a thread of its own (a thread starts with no kept adstack memory)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(_capture(fn)))
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), "the thread hung"
    result, err = out[0]
    if err is not None:
        raise err
    return result


def _capture(fn):
    try:
        return fn(), None
    except BaseException as err:  # noqa: BLE001 - re-raised on the calling thread
        return None, err


@pytest.mark.cpu_only("kept adstack memory of the CPU runtime (the GPU's: tests/gpu/test_cuda.py)")
@pytest.mark.parametrize("size", [SIZE, 40_000])
def test_scratch_is_reused_and_grows_by_doubling(size, fusion, rng):
    """Repeated gradients reuse one block (one allocation, then none); deeper counts grow
    it once, to at least twice its size; the gradients are those of fresh memory."""
    qt.config.num_threads = 2
    x, c = rng.uniform(-2, 2, size), rng.uniform(0.5, 1.5, size)
    n = rng.integers(0, 6, size)
    n[size // 3] = 6
    deep = n.copy()
    deep[-1] = 40

    def gradient(counts):
        return grads(b3_qt(qt.asarray(counts, copy=True)), (qt.asarray(x), qt.asarray(c)), (0, 1))

    def run():
        qt.reset_stats()
        first = gradient(n)
        s1 = qt.stats()
        again = [gradient(n) for _ in range(4)]
        s2 = qt.stats()
        grown = gradient(deep)
        s3 = qt.stats()
        return first, again, grown, s1, s2, s3
    first, again, grown, s1, s2, s3 = _in_new_thread(run)
    assert s1["adstack_scratch_allocs"] == 1 and s1["adstack_scratch_bytes"] >= s1["adstack_bytes"] > 0, s1
    assert s2["adstack_scratch_allocs"] == 1, s2          # four more launches: reused
    assert s2["adstack_bytes"] == 5 * s1["adstack_bytes"], s2   # each launch still counts its stacks
    assert s3["adstack_scratch_allocs"] == 2, s3
    assert s3["adstack_scratch_bytes"] - s2["adstack_scratch_bytes"] >= 2 * s1["adstack_scratch_bytes"], s3
    for g in again:
        for a, b in zip(g, first):
            np.testing.assert_array_equal(a, b)
    check_b3(first, x, c, n, "kept memory")
    check_b3(grown, x, c, deep, "grown memory")


@pytest.mark.cpu_only("kept adstack memory of the CPU runtime, per calling thread")
def test_scratch_is_per_thread(fusion, rng):
    """Threads with different depths launch at once; each keeps its own block, so no
    stack is shared and every gradient is right."""
    qt.config.num_threads = 2
    size = 20_000
    x, c = rng.uniform(-2, 2, size), rng.uniform(0.5, 1.5, size)
    counts = [rng.integers(0, 4 + 6 * k, size) for k in range(4)]
    got: dict = {}

    def work(k):
        qn = qt.asarray(counts[k], copy=True)
        got[k] = [grads(b3_qt(qn), (qt.asarray(x), qt.asarray(c)), (0, 1)) for _ in range(3)]
    _run_threads(work, 4)
    assert sorted(got) == [0, 1, 2, 3], got.keys()
    for k, runs in got.items():
        for g in runs:
            check_b3(g, x, c, counts[k], f"thread {k}")


# --- derived trip counts, bounded on the host ------------------------------------------
def _derived(kind, k, lo, mask, s):
    """(lower, upper) bounds of a loop whose trip counts are derived from leaves (NumPy or
    qtrace values alike), and the scalar ``s``."""
    if kind == "where":
        return 0, where(mask, k, 0)
    if kind == "difference":
        return lo, lo + k
    if kind == "scalar":
        return 0, k + s
    if kind == "scaled":          # 2k - lo, negative for some elements (no iteration)
        return 0, k * 2 - lo
    return lo - s, maximum(k, lo) - s   # "clipped": both bounds move with the scalar


def where(mask, a, b):
    return (np.where if isinstance(mask, np.ndarray) else qt.where)(mask, a, b)


def maximum(a, b):
    return (np.maximum if isinstance(a, np.ndarray) else qt.maximum)(a, b)


DERIVED = ["where", "difference", "scalar", "scaled", "clipped"]


@pytest.mark.parametrize("kind", DERIVED)
def test_derived_counts_take_no_extra_launch(kind, fusion, rng):
    """A jitted gradient whose trip counts are computed from leaves and a weak Python
    scalar: the depth is bounded from the leaves' cached extremes and the scalar, so
    after the first call (one dispatch) every call hits — a new scalar too — and, fused,
    it is one launch like plain counts. Gradients vs the float64 adjoint and central
    finite differences of the same loop."""
    x, c = rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE)
    k, lo, mask = rng.integers(0, 9, SIZE), rng.integers(0, 5, SIZE), rng.random(SIZE) < 0.5
    owned = [qt.asarray(a, copy=True) for a in (k, lo, mask)]

    def loss(x, c, k, lo, mask, s):
        first, last = _derived(kind, k, lo, mask, s)
        return qt.sum(qt.fori_loop(first, last, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
    step = qt.jit(qt.grad(loss, argnums=(0, 1)))
    plain = qt.jit(qt.grad(lambda x, c, n: b3_qt(n)(x, c), argnums=(0, 1)))

    def run(s):
        return [g.numpy() for g in step(x, c, *owned, s)]
    for s, want in ((1, sized(dispatches=1)), (1, sized(hits=1)), (3, sized(hits=1)), (0, sized(hits=1))):
        qt.reset_stats()
        got = run(s)
        st = qt.stats()
        assert {key: st[key] for key in COUNTERS} == want, (s, st)
        first, last = _derived(kind, k, lo, mask, s)
        trips = np.maximum(np.broadcast_to(last - first, (SIZE,)), 0)
        check_b3(got, x, c, trips, f"s={s}")
        fd_x, fd_c = b3_finite_differences(x, c, trips)
        assert_matches_finite_differences(got[0], fd_x, f"d/dx vs finite differences, s={s}")
        assert_matches_finite_differences(got[1], fd_c, f"d/dc vs finite differences, s={s}")
    if fusion:
        launches = st["kernel_launches"]
        qn = qt.asarray(trips, copy=True)
        plain(x, c, qn)
        qt.reset_stats()
        plain(x, c, qn)[0].numpy()
        assert launches == qt.stats()["kernel_launches"] == 1, (launches, qt.stats())


@pytest.mark.parametrize("kind", DERIVED)
def test_derived_depth_is_an_upper_bound(kind, fusion, rng, capfd):
    """The depth sized is never below the true largest trip count (it may be above: a
    masked-out maximum, ``max(hi) - min(lo)`` of different elements), whatever the data:
    signed counts, negative scalars; no overflow on any draw."""
    qt.config.debug_adstack = True
    x, c = rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE)
    for _ in range(4):
        k, lo = rng.integers(-6, 12, SIZE), rng.integers(-5, 5, SIZE)
        mask, s = rng.random(SIZE) < rng.random(), int(rng.integers(-4, 5))
        leaves = [qt.asarray(a, copy=True) for a in (k, lo, mask)]

        def loss(x, c, leaves=leaves, s=s):
            first, last = _derived(kind, *leaves, s)
            return qt.sum(qt.fori_loop(first, last, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
        capfd.readouterr()
        got = grads(loss, (qt.asarray(x), qt.asarray(c)), (0, 1))
        first, last = _derived(kind, k, lo, mask, s)
        trips = np.maximum(np.broadcast_to(last - first, (SIZE,)), 0)
        check_b3(got, x, c, trips, kind)
        (line,) = _lines(capfd)
        assert line is not None and int(line[3]) >= trips.max(), (line, trips.max())


def test_bound_of_expressions(rng):
    """``qtrace.graph.loops.bound`` against NumPy on random integer data: never below the
    largest element; exact for a leaf, a sum with a scalar, a maximum with a constant; and
    the dtype's limit where int32 arithmetic could wrap."""
    from qtrace.graph.loops import bound, host_bound

    def extreme(leaf, upper):
        return leaf.buffer.max() if upper else leaf.buffer.min()
    for _ in range(20):
        a, b = rng.integers(-50, 50, 30), rng.integers(-50, 50, 30)
        m = rng.random(30) < 0.5
        qa, qb, qm = (qt.asarray(v, copy=True) for v in (a, b, m))
        exact = {"leaf": (qa, a), "plus scalar": (qa + 7, a + 7),
                 "max const": (qt.maximum(qa, 3), np.maximum(a, 3))}
        loose = {"where": (qt.where(qm, qa, qb), np.where(m, a, b)), "difference": (qa - qb, a - b),
                 "product": (qa * qb, a * b),
                 "negative": (-(qa - qt.minimum(qb, 0)), -(a - np.minimum(b, 0))),
                 "convert": ((qa + qb).astype(qt.int32), (a + b).astype(np.int32))}
        for name, (t, want) in {**exact, **loose}.items():
            assert host_bound(t._node), name
            got = bound(t._node, extreme)
            np.testing.assert_array_equal(t.numpy(), want)
            assert got >= want.max(), (name, got, want.max())
            if name in exact:
                assert got == want.max(), (name, got, want.max())
    big = qt.asarray(np.array([2**30, 5] * 8, np.int32), copy=True)
    assert bound((big + big)._node, extreme) == 2**31 - 1   # wraps in int32: the dtype's limit
    assert not host_bound(qt.floor(qt.asarray(rng.uniform(0, 4, 30))).astype(qt.int64)._node)


# --- across processes ------------------------------------------------------------------
_PROCESS = """
import json, re, sys
import numpy as np, qtrace as qt
rng = np.random.default_rng(7)
n = rng.integers(0, 9, 50)
n[3] = 12
x, c = qt.asarray(rng.uniform(-2, 2, 50)), qt.asarray(rng.uniform(0.5, 1.5, 50))
qn = qt.asarray(n, copy=True)
grad = qt.grad(lambda x, c: qt.sum(qt.fori_loop(0, qn, lambda i, v: qt.sin(v) * c + 0.5 * v, x)),
               argnums=(0, 1))
qt.reset_stats()
gx, gc = (g.numpy() for g in grad(x, c))
stats = qt.stats()
qt.config.adstack_max_depth = 4
try:
    qt.eval(*grad(x, c))
    message = None
except qt.AdstackOverflowError as err:
    message = str(err)
print(json.dumps({"stats": stats, "gx": gx.tolist(), "gc": gc.tolist(), "message": message}))
"""


@pytest.mark.cpu_only("the CPU's disk cache of compiled kernels")
def test_loop_gradient_loaded_from_the_disk_cache(tmp_path):
    """Process A compiles a loop gradient into an empty disk cache; process B loads it
    (nothing compiled) and still dispatches the reducer on its first launch (depths are
    not kept across processes); an overflow forced with ``adstack_max_depth`` names the
    same kernel and loop (content hashes) in both; the gradients are identical and right."""
    env = dict(os.environ, QTRACE_CACHE_DIR=str(tmp_path), QTRACE_OFFLINE_CACHE="1")
    env.pop("QTRACE_DEBUG_ADSTACK", None)
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _PROCESS], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    a, b = runs
    assert a["stats"]["compiles"] >= 1 and a["stats"]["cache_hits_disk"] == 0, a["stats"]
    assert b["stats"]["compiles"] == 0 and b["stats"]["cache_hits_disk"] >= 1, b["stats"]
    for r in runs:
        s = r["stats"]
        assert {k: s[k] for k in COUNTERS} == sized(dispatches=1), s
    ids = []
    for r in runs:
        m = re.search(r"kernel (qt_[0-9a-f]{6,}), (loop_[0-9a-f]{6,})", r["message"] or "")
        assert m is not None, r["message"]
        ids.append(m.groups())
    assert ids[0] == ids[1], ids
    assert a["gx"] == b["gx"] and a["gc"] == b["gc"]
    gen = np.random.default_rng(7)
    n = gen.integers(0, 9, 50)
    n[3] = 12
    x, c = gen.uniform(-2, 2, 50), gen.uniform(0.5, 1.5, 50)
    check_b3([np.array(a["gx"]), np.array(a["gc"])], x, c, n, "process A")


def _buffer_ref(t: qt.Tensor):
    """A weak reference to the memory of a materialized tensor (NumPy or CuPy array)."""
    import weakref
    buf = t._node.buffer
    return weakref.ref(buf.base if getattr(buf, "base", None) is not None else buf)


@pytest.mark.parametrize("kind", DERIVED)
def test_cached_plans_keep_no_input_alive(kind, fusion, rng):
    """A cached plan holds no graph: once the program drops its inputs, their memory is
    freed although the plan stays cached for the next call — the trip-count leaves its
    adstack is bounded from included, and plain elementwise inputs."""
    import gc
    x, c = rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE)
    k, lo, mask = rng.integers(0, 9, SIZE), rng.integers(0, 5, SIZE), rng.random(SIZE) < 0.5
    leaves = [qt.asarray(a, copy=True) for a in (k, lo, mask)]
    refs = [_buffer_ref(t) for t in leaves]

    def loss(x, c, leaves=leaves):
        first, last = _derived(kind, *leaves, 2)
        return qt.sum(qt.fori_loop(first, last, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
    got = grads(loss, (qt.asarray(x), qt.asarray(c)), (0, 1))
    first, last = _derived(kind, k, lo, mask, 2)
    check_b3(got, x, c, np.maximum(np.broadcast_to(last - first, (SIZE,)), 0), kind)
    y = qt.asarray(rng.standard_normal(1000), copy=True)
    refs.append(_buffer_ref(y))
    np.testing.assert_allclose((qt.sin(y) * 2.0).numpy(), np.sin(y.numpy()) * 2.0, rtol=1e-14)
    del leaves, y, got, loss
    gc.collect()
    alive = [i for i, r in enumerate(refs) if r() is not None]
    assert not alive, f"inputs {alive} are still held (by a cached plan?)"


@pytest.mark.parametrize("kind", ["where", "difference"])
def test_launch_buffers_die_with_their_last_reference(kind, fusion, rng):
    """Sizing a launch's stacks holds none of its buffers once the call returns: a jitted
    gradient's results (and what the launch read) are freed by reference counting alone,
    with the cyclic collector off — a reference cycle there kept every buffer of every
    call alive until a collection (on a GPU, B3 grew by two results per call)."""
    import gc
    x, c = rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE)
    k, lo, mask = rng.integers(0, 9, SIZE), rng.integers(0, 5, SIZE), rng.random(SIZE) < 0.5
    first, last = _derived(kind, k, lo, mask, 2)

    @qt.jit
    def grad(x, c, k, lo, mask):
        def loss(x, c):
            a, b = _derived(kind, k, lo, mask, 2)
            return qt.sum(qt.fori_loop(a, b, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
        return qt.grad(loss, argnums=(0, 1))(x, c)
    args = [qt.asarray(a, copy=True) for a in (x, c, k, lo, mask)]
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        refs = []
        for _ in range(3):
            got = grad(*args)
            qt.eval(*got)
            refs.append([_buffer_ref(t) for t in got])
            out = [t.numpy() for t in got]
            del got
        check_b3(out, x, c, np.maximum(np.broadcast_to(last - first, (SIZE,)), 0), kind)
        del out   # (the last call's values, viewing its results' memory)
        alive = [i for i, rs in enumerate(refs) if any(r() is not None for r in rs)]
    finally:
        if enabled:
            gc.enable()
    assert not alive, f"the results of calls {alive} are still held after their last reference went"


@pytest.mark.parametrize("kind", ["n", "n - lo", "n + k", "maximum", "where"])
def test_looping_elements_are_counted_for_the_gpu_heap(kind, fusion, rng, monkeypatch):
    """What sizes a GPU's float heap (``adstack.heap_rows``), computed here on the CPU as a
    GPU launch would ask for it (``count=True``): how many elements' outermost loop runs,
    from the trip counts or an elementwise expression of them (``hi - lo``, ``n + k``,
    ``maximum``, ``where`` of a mask), exact, and the heap then holds that many rows (at
    least one; fewer than the threads, else a row per thread: 0); a launch over more
    elements than were counted gets a row per thread."""
    from qtrace.devices import adstack
    depth = adstack.DepthSource.depth
    seen = []

    def counting(self, bufs, host=None, count=False):
        got = depth(self, bufs, host, True)
        seen.append(got)
        return got
    monkeypatch.setattr(adstack.DepthSource, "depth", counting)
    nn, mask = rng.integers(-3, 9, 700), rng.random(700) < 0.3
    n, gate = qt.asarray(nn), qt.asarray(mask)
    lo, hi, trips = {"n": (0, n, nn), "n - lo": (2, n, nn - 2), "n + k": (0, n + 3, nn + 3),
                     "maximum": (1, qt.maximum(n, 4), np.maximum(nn, 4) - 1),
                     "where": (0, qt.where(gate, n, 0), np.where(mask, nn, 0))}[kind]
    x = qt.asarray(rng.uniform(-1, 1, 700))
    for _ in range(2):
        seen.clear()
        g = qt.grad(lambda x: qt.sum(qt.fori_loop(lo, hi, lambda i, v: qt.sin(v) * 0.9, x)))(x)
        qt.eval(g)
        (d, _, active), = seen
        want = (int(np.count_nonzero(trips > 0)), 700)
        assert active == want, (kind, active, want)
    levels = adstack.Levels()
    levels.interleaved, levels.active = True, active
    rows = adstack.heap_rows(levels, 512, 700)
    assert rows == (0 if active[0] >= 512 else max(1, active[0]))
    assert adstack.heap_rows(levels, 512, 1400) == 0
    levels.append((d, 4, 0))
    header, stride, total = adstack.layout(512, levels, rows)
    assert header == (d, 4 * d, 0, rows, 0, 0) and stride == adstack.HEADER + (4 * d + 63) // 64 * 64
    assert total == (512 * stride if not rows else 512 * adstack.HEADER + rows * ((4 * d + 63) // 64 * 64))


def test_a_count_numpy_refuses_is_unknown_not_an_error(rng):
    """The heap's count of looping elements evaluates the trip counts' expression with
    NumPy (CuPy on a GPU); an operation it refuses on the leaves' dtypes (``-`` of booleans)
    makes the count unknown (a heap row per thread), never a failed launch."""
    from qtrace.devices import adstack
    a, b = rng.integers(0, 5, 50), rng.integers(0, 5, 50)
    n, lo = qt.asarray(a), qt.asarray(b)
    root = (n - lo)._node
    ints = {n._node: a, lo._node: b}
    assert adstack._count_active(root, ints.__getitem__) == (int(np.count_nonzero(a - b > 0)), 50)
    bools = {n._node: a > 2, lo._node: b > 2}
    assert adstack._count_active(root, bools.__getitem__) is None
