"""CUDA graphs of jitted steps (``qt.jit(..., cuda_graph=True)``, qtrace.devices.cuda_graphs).

Every test compares graph replays with the same calls run launch by launch (graphs off),
bit for bit, or with NumPy in float64: a 2,000-step simulation fed its own results, results
the caller keeps (never overwritten by a later replay), inputs changed in place behind
qtrace's back, threads and streams sharing one jitted function, a gradient step, gradients
through per-element loops (adstacks sized per call), index and overflow checks read after
replays, and the plans a graph does not take. Fusion on and off (``fusion`` fixture). Without a GPU they skip
(the last test runs on the CPU).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import cuda_graphs
from qtrace.graph import buffers
from qtrace.graph import evaluate as graph_evaluate
from qtrace.graph import native as graph_native
from qtrace.tracer import jit as jit_module

WHY = graph_evaluate.unavailable(qt.Device("cuda"))
gpu = pytest.mark.skipif(WHY is not None, reason=f"no CUDA GPU: {WHY}")
DT = 0.01


def b2_step(x, v):
    a = -4 * x
    v = v + DT * a
    x = x + DT * v
    return x, v


def _b2_reference(x, v, steps):
    x, v = x.astype(np.float64), v.astype(np.float64)
    for _ in range(steps):
        x, v = b2_step(x, v)
    return x, v


def _run_b2(x0, v0, steps, graphs):
    f = qt.jit(b2_step, cuda_graph=graphs)
    x, v = qt.asarray(x0, device="cuda"), qt.asarray(v0, device="cuda")
    qt.reset_stats()
    for _ in range(steps):
        x, v = f(x, v)
    st = qt.stats()
    return x.numpy(), v.numpy(), st, f


@gpu
def test_a_simulation_fed_its_own_results_replays_two_graphs_bit_for_bit(fusion, rng):
    """2,000 steps of B2: the same bits as launch by launch; three captures (two instances,
    the first captured again over its own memory for the second's results: then they
    alternate), every call one replay."""
    x0 = rng.uniform(-1, 1, 64).astype(np.float32)
    v0 = rng.uniform(-1, 1, 64).astype(np.float32)
    xg, vg, st, f = _run_b2(x0, v0, 2000, True)
    xp, vp, st_plain, _ = _run_b2(x0, v0, 2000, False)
    np.testing.assert_array_equal(xg, xp)
    np.testing.assert_array_equal(vg, vp)
    assert f.graph_paths() == [None]
    # the second instance is captured for the first's results; the first is then patched
    # to read the second's (one capture fewer than capturing it again)
    assert st["cuda_graph_replays"] == 2000 and st["cuda_graph_captures"] == 2, st
    assert st["cuda_graph_patches"] == 1, st
    assert st_plain["cuda_graph_replays"] == 0
    rx, rv = _b2_reference(x0, v0, 2000)
    assert np.max(np.abs(xg - rx)) <= 4 * 2000 * np.finfo(np.float32).eps * np.max(np.abs(rx))


@gpu
@pytest.mark.skipif(graph_native.module() is None, reason="qtrace's C extension is not built")
def test_settled_replays_run_compiled_and_match_the_python_path(fusion, rng, monkeypatch, python_calls):
    """Once its two instances settle, a step fed its own results is replayed by the compiled
    recorder: no qtrace Python past ``Jitted.__call__`` (no runner, no stream bookkeeping,
    no wrapping), the counters moved as the Python path moves them, the same bits as with
    the compiled replay turned off and as launch by launch."""
    x0 = rng.uniform(-1, 1, 64).astype(np.float32)
    v0 = rng.uniform(-1, 1, 64).astype(np.float32)
    f = qt.jit(b2_step, cuda_graph=True)
    x, v = qt.asarray(x0, device="cuda"), qt.asarray(v0, device="cuda")
    for _ in range(6):
        x, v = f(x, v)
    assert f._specs, "no compiled replay was set up"
    qt.reset_stats()
    box = [x, v]
    del x, v

    def steps():
        for _ in range(100):
            box[:] = f(*box)
    root = str(Path(qt.__file__).parent)
    calls = [(Path(path).name, name) for path, name in python_calls(steps) if path.startswith(root)]
    st = qt.stats()
    assert set(calls) == {("jit.py", "__call__")}, sorted(set(calls))
    assert st["cuda_graph_replays"] == 100 and st["cuda_graph_captures"] == 0, st
    assert st["cache_hits_memory"] == 100 and st["kernel_launches"] >= 100, st
    assert st["device_syncs"] == 0, st
    got = [t.numpy() for t in box]
    monkeypatch.setattr(jit_module, "_graph_spec", lambda entry, explicit: None)
    xp, vp, st_py, g = _run_b2(x0, v0, 106, True)
    assert not g._specs and st_py["cuda_graph_replays"] == 106
    xl, vl, _, _ = _run_b2(x0, v0, 106, False)
    for a, b, c in zip(got, (xp, vp), (xl, vl)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


@gpu
@pytest.mark.skipif(graph_native.module() is None, reason="qtrace's C extension is not built")
def test_compiled_replays_follow_config_cuda_graphs(rng, monkeypatch):
    """A jitted function that leaves graphs to ``qt.config.cuda_graphs`` stops replaying
    graphs (compiled or not) the call after it is turned off, and replays again once it is
    back on; the values never change."""
    f = qt.jit(b2_step)
    x0 = rng.uniform(-1, 1, 64).astype(np.float32)
    monkeypatch.setattr(qt.config, "cuda_graphs", True)
    x, v = qt.asarray(x0, device="cuda"), qt.zeros(64, dtype="float32", device="cuda")
    ref_x, ref_v = x0.astype(np.float64), np.zeros(64)
    for phase in (True, False, True):
        qt.config.cuda_graphs = phase
        qt.reset_stats()
        for _ in range(20):
            x, v = f(x, v)
            ref_x, ref_v = b2_step(ref_x, ref_v)
        replays = qt.stats()["cuda_graph_replays"]
        assert (replays >= 14) if phase else (replays == 0), (phase, replays)
    assert f._specs
    np.testing.assert_allclose(x.numpy(), ref_x, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v.numpy(), ref_v, rtol=1e-4, atol=1e-5)


@gpu
def test_results_the_caller_keeps_are_never_overwritten(fusion, rng):
    """Twelve calls on the same input, every result kept: a replay writes only results no
    one holds, so past the ring the calls run launch by launch, and each result is its own
    call's (the input changes between calls)."""
    f = qt.jit(lambda x, k: (qt.sin(x) * k + 1.0, x * x), cuda_graph=True)
    x = qt.asarray(rng.standard_normal(1000), device="cuda")
    ks = [qt.asarray(np.full(1000, float(i)), device="cuda") for i in range(12)]
    qt.reset_stats()
    kept = [f(x, k) for k in ks]
    xs = x.numpy()
    for i, (a, b) in enumerate(kept):
        np.testing.assert_allclose(a.numpy(), np.sin(xs) * i + 1.0, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(b.numpy(), xs * xs, rtol=1e-15)
    assert qt.stats()["cuda_graph_captures"] <= cuda_graphs.RING


@gpu
def test_a_view_of_a_result_keeps_its_memory_from_later_replays(fusion, rng):
    """A result that is itself a view (the step returns a slice), and views taken of results
    (qtrace's and CuPy's) outlive the result tensor: their memory is not free, so later
    replays do not overwrite it."""
    import cupy
    f = qt.jit(lambda x, k: ((x * k + 1.0)[1:], x - k), cuda_graph=True)
    x = qt.asarray(rng.standard_normal(300), device="cuda")
    xs = x.numpy()
    kept = []
    for i in range(8):
        k = qt.asarray(np.full(300, float(i)), device="cuda")
        a, b = f(x, k)
        kept.append((i, a[5:], cupy.asarray(b)[2:]))   # views only; a and b are dropped
        del a, b
    for i, va, vb in kept:
        np.testing.assert_allclose(va.numpy(), (xs * i + 1.0)[1:][5:], rtol=1e-15)
        np.testing.assert_allclose(cupy.asnumpy(vb), (xs - i)[2:], rtol=1e-15)


@gpu
def test_new_inputs_are_patched_into_the_graph_not_captured_again(fusion, rng, caplog):
    """Fifty calls on fifty new input arrays (views at other offsets of one array, and one
    array passed twice every other call, among them): one capture, then each call patches
    the kernels' arguments to the new addresses and replays; the results equal launch by
    launch, bit for bit. A plan that launches one kernel twice on different arguments
    patches each launch's own. Only the capture is logged under ``QTRACE_LOG_RECOMPILES``."""
    def step(a, b, c):   # (fusion off: the same multiply-add kernel, launched twice)
        return a * 2.0 + 1.0, b * 2.0 + 1.0, qt.sin(c) * a

    big = qt.asarray(rng.standard_normal(4000), device="cuda")
    inputs = []
    for i in range(50):
        a = big[i:i + 1000]   # a view: its address moves by 8 bytes a call
        b = qt.asarray(rng.standard_normal(1000), device="cuda")
        inputs.append((a, b, b if i % 2 else qt.asarray(rng.standard_normal(1000), device="cuda")))
    plain = qt.jit(step, cuda_graph=False)
    expected = [[t.numpy() for t in plain(*args)] for args in inputs]
    f = qt.jit(step, cuda_graph=True)
    qt.reset_stats()
    with caplog.at_level("WARNING", logger="qtrace"):
        qt.config.log_recompiles = True
        try:
            got = [[t.numpy() for t in f(*args)] for args in inputs]
        finally:
            qt.config.log_recompiles = False
    st = qt.stats()
    for g, e in zip(got, expected):
        for x, y in zip(g, e):
            np.testing.assert_array_equal(x, y)
    assert st["cuda_graph_captures"] == 1 and st["cuda_graph_patches"] == 49, st
    assert st["cuda_graph_replays"] == 50, st
    captures = [r for r in caplog.records if "capturing a CUDA graph" in r.getMessage()]
    assert len(captures) == 1 and "the first call" in captures[0].getMessage()


@gpu
def test_a_step_returning_an_argument_is_captured_again_not_patched(fusion, rng):
    """A result that is an argument's own memory (returned as it is, or through a jitted
    call inside a jitted gradient): a patched replay would hand back the old argument, so
    such a graph is captured again for new inputs; every result is the call's own."""
    f = qt.jit(lambda x, y: (x, x + y), cuda_graph=True)
    y = qt.asarray(rng.standard_normal(256), device="cuda")
    qt.reset_stats()
    for _ in range(6):
        xs = rng.standard_normal(256)
        a, b = f(qt.asarray(xs, device="cuda"), y)
        np.testing.assert_array_equal(a.numpy(), xs)
        np.testing.assert_allclose(b.numpy(), xs + y.numpy(), rtol=1e-15)
        del a, b
    assert qt.stats()["cuda_graph_patches"] == 0

    step = qt.jit(lambda x, v: (x, v * 0.5 + x))   # passes x through
    g = qt.jit(qt.grad(lambda x, v: qt.sum(step(*step(x, v))[1] ** 2), argnums=(0, 1)),
               cuda_graph=True)
    plain = qt.jit(qt.grad(lambda x, v: qt.sum(step(*step(x, v))[1] ** 2), argnums=(0, 1)))
    for _ in range(5):
        x0, v0 = (qt.asarray(rng.standard_normal(128), device="cuda") for _ in range(2))
        for got, want in zip(g(x0, v0), plain(x0, v0)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())


@gpu
def test_swapped_inputs_are_patched_each_to_its_own_place(rng):
    """``f(a, b)`` then ``f(b, a)``: the two moves cross (a's old place is b's new one);
    every argument is moved from its old address, not moved twice."""
    f = qt.jit(lambda a, b: a - 2.0 * b, cuda_graph=True)
    a = qt.asarray(rng.standard_normal(512), device="cuda")
    b = qt.asarray(rng.standard_normal(512), device="cuda")
    an, bn = a.numpy(), b.numpy()
    qt.reset_stats()
    for _ in range(3):
        np.testing.assert_allclose(f(a, b).numpy(), an - 2.0 * bn, rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(f(b, a).numpy(), bn - 2.0 * an, rtol=1e-15, atol=1e-15)
    st = qt.stats()
    assert st["cuda_graph_captures"] == 1 and st["cuda_graph_patches"] == 5, st


@gpu
def test_exported_results_retire_their_instance_and_replays_bump_versions(rng):
    """A result handed out through ``__cuda_array_interface__`` (its consumer holds the
    tensor, not the memory) retires its instance once the tensor moves on: the next calls
    capture anew instead of replaying into that memory. Each replay gives its results'
    memory a new version, so caches keyed by it see the rewrite."""
    import cupy
    f = qt.jit(lambda x: x * 2.0 + 1.0, cuda_graph=True)
    x = qt.asarray(rng.standard_normal(256), device="cuda")
    qt.reset_stats()
    r = f(x)
    exported = cupy.asarray(r)   # (zero-copy, through the interface)
    r += 1.0
    qt.eval(r)   # r has new memory; only the consumer and the instance see the old
    for _ in range(3):
        y = f(x)
        np.testing.assert_allclose(y.numpy(), x.numpy() * 2.0 + 1.0, rtol=1e-15)
        del y
    assert qt.stats()["cuda_graph_captures"] == 2   # the first instance retired, one new
    del exported
    y1 = f(x)
    first = buffers.identity(y1._node.buffer)
    del y1   # (free again: replayed into the same memory, which gets a new version)
    y2 = f(x)
    now = buffers.identity(y2._node.buffer)
    assert now[0] == first[0] and now[1] > first[1], (first, now)


@gpu
def test_a_replay_reads_inputs_changed_in_place_behind_qtraces_back(fusion, rng):
    """The graph reads its inputs' memory at each replay: a change made through a CuPy view
    of the argument takes effect."""
    import cupy
    f = qt.jit(lambda x: x * 3.0 - 1.0, cuda_graph=True)
    x = qt.asarray(rng.standard_normal(500), device="cuda")
    view = cupy.asarray(x)   # zero-copy
    for value in (0.5, -2.0, 7.25, 0.0):
        view[...] = value
        y = f(x)
        np.testing.assert_array_equal(y.numpy(), np.full(500, value * 3.0 - 1.0))
        del y   # (free again: the same instance replays)
    assert qt.stats()["cuda_graph_replays"] >= 4


@gpu
def test_threads_sharing_a_jitted_step_each_get_their_own_results(fusion, rng):
    """Four threads x 200 calls of one jitted step with graphs: each thread's final state
    equals its launch-by-launch reference, bit for bit."""
    starts = [rng.uniform(-1, 1, (2, 256)).astype(np.float32) for _ in range(4)]
    want = []
    for s in starts:
        xp, vp, _, _ = _run_b2(s[0], s[1], 200, False)
        want.append((xp, vp))
    f = qt.jit(b2_step, cuda_graph=True)
    got = [None] * 4

    def work(i):
        x = qt.asarray(starts[i][0], device="cuda")
        v = qt.asarray(starts[i][1], device="cuda")
        for _ in range(200):
            x, v = f(x, v)
        got[i] = (x.numpy(), v.numpy())
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (gx, gv), (wx, wv) in zip(got, want):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gv, wv)


@gpu
def test_two_streams_alternating_on_one_step(fusion, rng):
    """Calls alternate between two non-blocking streams, each feeding the next: replays are
    ordered behind the other stream's work, and the state matches launch by launch."""
    x0 = rng.uniform(-1, 1, 4096).astype(np.float32)
    v0 = rng.uniform(-1, 1, 4096).astype(np.float32)
    want = _run_b2(x0, v0, 300, False)
    f = qt.jit(b2_step, cuda_graph=True)
    x, v = qt.asarray(x0, device="cuda"), qt.asarray(v0, device="cuda")
    streams = [qt.cuda.Stream(), qt.cuda.Stream()]
    for i in range(300):
        with streams[i % 2]:
            x, v = f(x, v)
    np.testing.assert_array_equal(x.numpy(), want[0])
    np.testing.assert_array_equal(v.numpy(), want[1])


@gpu
def test_a_jitted_gradient_step_replays_and_matches(fusion, rng):
    """``jit(value_and_grad(loss))`` of an elementwise loss: replayed, same bits as without
    graphs, and the gradient JAX-free checked against its closed form."""
    def loss(w, x):
        return qt.sum(qt.tanh(w * x) ** 2)
    xs = rng.standard_normal(2048)
    results = {}
    for graphs in (False, True):
        g = qt.jit(qt.value_and_grad(loss), cuda_graph=graphs)
        w, x = qt.asarray(rng.standard_normal(2048) * 0 + 0.3, device="cuda"), qt.asarray(xs, device="cuda")
        qt.reset_stats()
        for _ in range(50):
            val, gw = g(w, x)
            w = w - 0.1 * gw
        results[graphs] = (float(val.numpy()), w.numpy(), qt.stats()["cuda_graph_replays"])
    assert results[True][0] == results[False][0]
    np.testing.assert_array_equal(results[True][1], results[False][1])
    assert results[True][2] >= 49 and results[False][2] == 0
    w = results[True][1]   # one more step by hand, in float64
    t = np.tanh(w * xs)
    np.testing.assert_allclose(2 * t * (1 - t * t) * xs,
                               g(qt.asarray(w, device="cuda"), qt.asarray(xs, device="cuda"))[1].numpy(),
                               rtol=1e-12, atol=1e-14)


@gpu
def test_jitted_steps_inside_a_jitted_gradient_are_captured_with_it(fusion, rng):
    """``jit(grad(loss))`` of a Python loop of a jitted step (B6b's shape): each step is a
    call of the step's own plan, whose kernels the capture takes, so the whole gradient
    replays as one graph; the same bits as launch by launch, and the adjoint computed by
    hand in float64 agrees (new initial states each call: the graph is patched)."""
    dt, damping, steps = 0.05, 0.1, 20
    step = qt.jit(lambda x, v, k: (x + dt * (v + dt * (-k * qt.sin(x) - damping * v)),
                                   v + dt * (-k * qt.sin(x) - damping * v)))

    def loss(x, v, k):
        for _ in range(steps):
            x, v = step(x, v, k)
        return qt.sum(x * x) + 0.5 * qt.sum(v * v)
    n = 3000
    k = rng.uniform(0.5, 2.0, n)
    starts = [(rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)) for _ in range(6)]
    got, launches = {}, {}
    for graphs in (False, True):
        g = qt.jit(qt.grad(loss, argnums=(0, 1)), cuda_graph=graphs)
        kd = qt.asarray(k, device="cuda")
        qt.reset_stats()
        got[graphs] = [[t.numpy() for t in g(*(qt.asarray(a, device="cuda") for a in (x0, v0)), kd)]
                       for x0, v0 in starts]
        st = qt.stats()
        launches[graphs] = (st["kernel_launches"], st["tasks_run"])
        if graphs:
            assert g.graph_paths() == [None]
            assert st["cuda_graph_replays"] == len(starts) and st["cuda_graph_captures"] == 1, st
    # a replay counts every kernel it launches, the steps' own included
    assert launches[True] == launches[False] and launches[True][0] >= 2 * steps * len(starts), launches
    for a, b in zip(got[True], got[False]):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    for (x0, v0), (gx_got, gv_got) in zip(starts, got[True]):
        xs, x, v = [], x0, v0
        for _ in range(steps):
            xs.append(x)
            a = -k * np.sin(x) - damping * v
            v = v + dt * a
            x = x + dt * v
        gx, gv = 2 * x, v
        for xp in reversed(xs):
            gv_new = gv + dt * gx
            ga = dt * gv_new
            gx = gx - k * np.cos(xp) * ga
            gv = gv_new - damping * ga
        np.testing.assert_allclose(gx_got, gx, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gv_got, gv, rtol=1e-10, atol=1e-12)


@gpu
def test_host_arguments_are_staged_into_each_replay(fusion, rng):
    """A step taking its time step as a Python scalar and a small NumPy array: the values of
    each call reach its replay (the scalar patched into the kernels' parameters, the array
    through the instance's pinned block), bit for bit as launch by launch, with no wait for
    an earlier replay; a large NumPy argument runs the call as usual."""
    qt.config.device = "cuda"   # (where NumPy arguments of a jitted call go; restored after)

    def step(x, v, dt, gain):
        v = v - dt * 4.0 * x * gain
        return x + dt * v, v
    x0, v0 = rng.uniform(-1, 1, 512), rng.uniform(-1, 1, 512)
    dts = rng.uniform(0.001, 0.02, 300)
    gains = rng.uniform(0.5, 1.5, (300, 512))
    finals = {}
    for graphs in (False, True):
        f = qt.jit(step, cuda_graph=graphs)
        x, v = qt.asarray(x0, device="cuda"), qt.asarray(v0, device="cuda")
        qt.reset_stats()
        for dt, gain in zip(dts, gains):
            x, v = f(x, v, float(dt), gain)
        st = qt.stats()
        finals[graphs] = (x.numpy(), v.numpy(), st["cuda_graph_replays"],
                          st["cuda_graph_value_patches"], st["device_syncs"])
    np.testing.assert_array_equal(finals[True][0], finals[False][0])
    np.testing.assert_array_equal(finals[True][1], finals[False][1])
    assert finals[True][2] == 300 and finals[False][2] == 0
    # every replay but the captures' own patched the new dt in
    assert finals[True][3] >= 295, finals[True][2:]
    big = qt.jit(lambda x, w: x * w, cuda_graph=True)
    w = rng.standard_normal(cuda_graphs.HOST_MAX // 8 + 1)
    xb = qt.asarray(np.ones_like(w), device="cuda")
    qt.reset_stats()
    np.testing.assert_array_equal(big(xb, w).numpy(), w)
    assert qt.stats()["cuda_graph_replays"] == 0


def _loop_loss(x, n, k):
    """A per-element loop whose trip counts are ``n + k`` (a device array and a Python int)."""
    return qt.sum(qt.fori_loop(0, n + k, lambda i, y: qt.sin(y) * 1.1 + 0.1, x) ** 2)


def _loop_grad_reference(x, counts):
    """d/dx of ``_loop_loss`` in float64, element by element."""
    out = np.empty_like(x)
    for j, (y, c) in enumerate(zip(x.astype(np.float64), counts)):
        d = 1.0
        for _ in range(c):
            d *= 1.1 * np.cos(y)
            y = np.sin(y) * 1.1 + 0.1
        out[j] = 2 * y * d
    return out


@gpu
def test_a_loop_gradient_replays_with_stacks_sized_per_call(fusion, rng):
    """``jit(grad)`` through a per-element loop (adstacks) replays graphs: each call sizes its
    stacks from its own leaves first (a device count array reduced once per version, a
    Python scalar read on the host), replays an instance deep enough (patched for new
    inputs), and captures again only for a deeper call. Same bits as launch by launch, and
    the float64 gradient computed element by element."""
    size = 3000
    calls = [(rng.uniform(-1, 1, size), rng.integers(0, 6, size), 1),   # depth 6: captured
             None,                                                     # the same inputs again
             (rng.uniform(-1, 1, size), rng.integers(0, 4, size), 0),   # depth 3: patched
             (rng.uniform(-1, 1, size), rng.integers(0, 9, size), 2),   # depth 10: captured
             (rng.uniform(-1, 1, size), rng.integers(0, 6, size), 4)]   # depth 9: patched
    calls[1] = calls[0]
    got, stats = {}, {}
    for graphs in (False, True):
        g = qt.jit(qt.grad(_loop_loss), cuda_graph=graphs)
        held = {}   # (the device arrays of each distinct call, so the repeat is the same inputs)
        qt.reset_stats()
        got[graphs] = []
        for x, n, k in calls:
            xd, nd = held.setdefault(id(x), (qt.asarray(x, device="cuda"),
                                              qt.asarray(n.astype(np.int32), device="cuda")))
            got[graphs].append(g(xd, nd, k).numpy())
        stats[graphs] = qt.stats()
        if graphs:
            assert g.graph_paths() == [None]
    st = stats[True]
    assert (st["cuda_graph_captures"], st["cuda_graph_replays"], st["cuda_graph_patches"]) == (2, 5, 2), st
    assert stats[False]["cuda_graph_replays"] == 0
    # sizing as launch by launch: the count arrays reduced once per distinct array
    for name in ("adstack_reducer_dispatches", "adstack_reducer_hits"):
        assert st[name] == stats[False][name], (name, st[name], stats[False][name])
    for (x, n, k), a, b in zip(calls, got[True], got[False]):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, _loop_grad_reference(x, n + k), rtol=1e-10, atol=1e-12)


@gpu
def test_an_adstack_overflow_in_a_replay_is_raised(rng):
    """``qt.config.adstack_max_depth`` below the trip counts: the captured graph's overflow
    check is read at the next read of a value and raised, as launch by launch."""
    qt.config.adstack_max_depth = 2
    g = qt.jit(qt.grad(_loop_loss), cuda_graph=True)
    x = qt.asarray(rng.uniform(-1, 1, 300), device="cuda")
    n = qt.asarray(rng.integers(3, 6, 300).astype(np.int32), device="cuda")
    with pytest.raises(qt.AdstackOverflowError, match="adstack overflow"):
        g(x, n, 0).numpy()
    assert g.graph_paths() == [None] and qt.stats()["cuda_graph_captures"] >= 1


@gpu
def test_an_out_of_bounds_index_in_a_replay_is_raised_at_the_next_read(fusion, rng):
    """A gather's index checks in a graph: valid calls replay; a replay given a bad index
    reports it at the next value read (after further replays), naming the index and the
    line that recorded the gather; the failed instance is retired, and later calls are
    right again."""
    xs = rng.standard_normal(100)
    g = qt.jit(lambda x, i: x[i] * 2.0, cuda_graph=True)
    xd = qt.asarray(xs, device="cuda")
    good = [rng.integers(0, 100, 7) for _ in range(3)]
    qt.reset_stats()
    for i in good:
        np.testing.assert_array_equal(g(xd, qt.asarray(i, device="cuda")).numpy(), xs[i] * 2.0)
    assert g.graph_paths() == [None]
    st = qt.stats()
    assert st["cuda_graph_replays"] == 3 and st["cuda_graph_captures"] == 1, st
    bad = good[0].copy()
    bad[4] = 100
    g(xd, qt.asarray(bad, device="cuda"))   # a replay that fails (not read yet)
    later = g(xd, qt.asarray(good[1], device="cuda"))   # (another replay after it)
    with pytest.raises(IndexError, match=r"index 100 is out of bounds for axis 0 with size 100"
                                         r"(.|\n)*test_cuda_graphs.py"):
        later.numpy()
    np.testing.assert_array_equal(g(xd, qt.asarray(good[2], device="cuda")).numpy(), xs[good[2]] * 2.0)
    st = qt.stats()
    assert st["cuda_graph_replays"] == 6 and st["cuda_graph_captures"] >= 2, st


@gpu
def test_python_scalars_are_patched_into_replays_only_when_they_change(fusion, rng):
    """Python scalars a step's kernels take by value (a float, a negative int, a bool): a
    replay with the values its graph holds patches nothing; new values are patched in
    (one ``cuda_graph_value_patches`` per replay that changed them), never uploaded, and
    every call matches launch by launch bit for bit; queued replays keep their own values
    (nothing is read back until the end)."""
    def step(x, dt, k, flip):
        y = x * dt + k
        return qt.where(flip, -y, y)
    n = 4096
    x0 = rng.uniform(-1, 1, n)
    calls = [(0.5, -3, False), (0.5, -3, False), (0.25, -3, False), (0.25, 7, True),
             (0.25, 7, True), *[(float(rng.uniform(-2, 2)), int(rng.integers(-9, 9)),
                                 bool(rng.integers(0, 2))) for _ in range(40)]]
    changes = sum(1 for a, b in zip(calls, calls[1:]) if a != b)
    got = {}
    for graphs in (False, True):
        f = qt.jit(step, cuda_graph=graphs)
        x = qt.asarray(x0, device="cuda")
        qt.sync()
        qt.reset_stats()
        outs, moved = [], {"bytes_host_to_device": 0, "device_syncs": 0}
        for c in calls:
            before = qt.stats()
            out = f(x, *c)
            after = qt.stats()
            for name in moved:
                moved[name] += after[name] - before[name]
            outs.append(out * 1.0)   # (a copy, computed now: the graph's result is free again,
            qt.eval(outs[-1])         # and every result is read only after all are queued)
            del out
        st = qt.stats()
        got[graphs] = [o.numpy() for o in outs]
        if graphs:
            assert st["cuda_graph_replays"] == len(calls) and st["cuda_graph_captures"] == 1, st
            assert st["cuda_graph_value_patches"] == changes, (st["cuda_graph_value_patches"], changes)
        assert moved == {"bytes_host_to_device": 0, "device_syncs": 0}, moved
    for c, a, b in zip(calls, got[True], got[False]):
        np.testing.assert_array_equal(a, b)
        y = x0 * c[0] + c[1]
        np.testing.assert_allclose(a, -y if c[2] else y, rtol=1e-15)


@gpu
def test_scalars_are_patched_where_one_array_is_passed_twice(fusion, rng):
    """``step(x, x, s)``: the two array arguments overlap at the capture (which one a
    kernel argument stands for cannot be told), yet the by-value scalar is still patched
    in: one capture for the signature, each call right; a new array there captures again
    (not patched: the overlap), never a wrong read; a third argument moving while the pair
    stays is patched in."""
    f = qt.jit(lambda a, b, s: a * s + b, cuda_graph=True)
    x0, y0 = rng.uniform(-1, 1, 5000), rng.uniform(-1, 1, 5000)
    x, y = qt.asarray(x0, device="cuda"), qt.asarray(y0, device="cuda")
    qt.reset_stats()
    for s in (0.5, 0.25, 0.25, -2.0):
        np.testing.assert_allclose(f(x, x, s).numpy(), x0 * s + x0, rtol=1e-15)
    st = qt.stats()
    assert f.graph_paths() == [None], f.graph_paths()
    assert st["cuda_graph_captures"] == 1 and st["cuda_graph_replays"] == 4, st
    assert st["cuda_graph_value_patches"] == 2, st
    np.testing.assert_allclose(f(y, y, 3.0).numpy(), y0 * 4.0, rtol=1e-15)
    np.testing.assert_allclose(f(x, x, 3.0).numpy(), x0 * 4.0, rtol=1e-15)
    assert qt.stats()["cuda_graph_captures"] == 3, qt.stats()
    # one argument moving while the overlapping pair stays: patched, not captured
    g = qt.jit(lambda a, b, c: a + b * c, cuda_graph=True)
    np.testing.assert_allclose(g(x, x, y).numpy(), x0 + x0 * y0, rtol=1e-15)
    z0 = rng.uniform(-1, 1, 5000)
    qt.reset_stats()
    np.testing.assert_allclose(g(x, x, qt.asarray(z0, device="cuda")).numpy(), x0 + x0 * z0, rtol=1e-15)
    assert qt.stats()["cuda_graph_patches"] == 1 and qt.stats()["cuda_graph_captures"] == 0, qt.stats()


@gpu
def test_new_overlapping_inputs_every_call_turn_graphs_off(rng):
    """``step(a, a, s)`` with a new ``a`` every call: no graph can be patched to read it (the
    two arguments overlap), so each call captures; after ``UNPATCHED_MAX`` such captures in
    a row the signature runs launch by launch (``graph_paths`` says why), every result
    right."""
    f = qt.jit(lambda a, b, s: a * s + b, cuda_graph=True)
    arrays = [rng.uniform(-1, 1, 3000) for _ in range(cuda_graphs.UNPATCHED_MAX + 4)]
    qt.reset_stats()
    outs = []
    for a0 in arrays:
        a = qt.asarray(a0, device="cuda")
        outs.append(f(a, a, 0.5).numpy())
    for a0, out in zip(arrays, outs):
        np.testing.assert_allclose(out, a0 * 1.5, rtol=1e-15)
    assert qt.stats()["cuda_graph_captures"] == cuda_graphs.UNPATCHED_MAX + 1, qt.stats()
    (why,) = f.graph_paths()
    assert why is not None and "one capture per call" in why, why


@gpu
def test_calls_a_graph_does_not_take_run_as_usual_and_say_why(fusion, rng):
    """The gradient of a ``while_loop`` (its stacks sized from the trip counts its forward
    loop records, read between the plan's launches) runs launch by launch, said by
    ``graph_paths``, with the same bits as graphs off."""
    def loss(x, c):
        return qt.sum(qt.while_loop(lambda y: y < c, lambda y: y * 1.5 + 0.1, x))
    x, c = rng.uniform(0.1, 1.0, 500), rng.uniform(1.0, 20.0, 500)
    outs = []
    for graphs in (False, True):
        g = qt.jit(qt.grad(loss), cuda_graph=graphs)
        qt.reset_stats()
        outs.append(g(qt.asarray(x, device="cuda"), qt.asarray(c, device="cuda")).numpy())
        assert qt.stats()["cuda_graph_replays"] == 0
    np.testing.assert_array_equal(outs[0], outs[1])
    assert g.graph_paths() == [cuda_graphs.why_not(next(iter(g._cache.values())).plan)]
    assert "recorded trip counts" in g.graph_paths()[0]
    counts = np.zeros(500, int)   # d/dx: 1.5 per trip
    y = x.copy()
    while (y < c).any():
        counts += y < c
        y = np.where(y < c, y * 1.5 + 0.1, y)
    np.testing.assert_allclose(outs[1], 1.5 ** counts, rtol=1e-12)


def test_cuda_graph_on_a_cpu_step_runs_as_usual(rng):
    """On the CPU the switch changes nothing (no runner is made)."""
    f = qt.jit(b2_step, cuda_graph=True)
    x0, v0 = rng.uniform(-1, 1, 64).astype(np.float32), rng.uniform(-1, 1, 64).astype(np.float32)
    x, v = f(qt.asarray(x0, device="cpu"), qt.asarray(v0, device="cpu"))
    want = b2_step(x0, v0)
    np.testing.assert_array_equal(x.numpy(), want[0])
    np.testing.assert_array_equal(v.numpy(), want[1])
    assert f.graph_paths() == []
