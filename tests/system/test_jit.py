"""qt.jit: tracing once per signature, pytrees, static arguments, caching and logging."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qtrace as qt


def _traces() -> int:
    return qt.stats()["traces"]


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_traces_once_per_signature_and_matches_numpy(rng, fusion):
    calls = []

    @qt.jit
    def step(x, v, dt):
        calls.append(1)
        v = v - 4.0 * x * dt
        return x + dt * v, v

    x, v = rng.standard_normal(100), rng.standard_normal(100)
    qt.reset_stats()
    tx, tv = qt.asarray(x), qt.asarray(v)
    for _ in range(5):
        tx, tv = step(tx, tv, 0.01)
        v = v - 4.0 * x * 0.01
        x = x + 0.01 * v
    assert _traces() == 1 and len(calls) == 1
    np.testing.assert_allclose(tx.numpy(), x, rtol=1e-12)
    np.testing.assert_allclose(tv.numpy(), v, rtol=1e-12)


def test_new_python_scalar_value_does_not_retrace(rng, fusion):
    @qt.jit
    def f(x, s, n):
        return x * s + n

    x = _f32(rng, 50)
    t = qt.asarray(x)
    qt.reset_stats()
    outs = [f(t, s, n) for s, n in ((0.5, 1), (2.0, 3), (-1.25, -7), (1e-3, 0))]
    assert _traces() == 1
    for out, (s, n) in zip(outs, ((0.5, 1), (2.0, 3), (-1.25, -7), (1e-3, 0))):
        assert out.dtype == np.float32  # weak Python scalars keep float32
        np.testing.assert_allclose(out.numpy(), x * np.float32(s) + np.float32(n), rtol=1e-6)


def test_python_int_scalar_keeps_int32():
    f = qt.jit(lambda x, k: x * k + k)
    out = f(qt.asarray(np.arange(5, dtype=np.int32)), 3)
    assert out.dtype == np.int32
    assert out.tolist() == [3, 6, 9, 12, 15]


@pytest.mark.parametrize("change", ["shape", "dtype", "ndim", "scalar kind", "numpy vs tensor"])
def test_retraces_on_signature_change(rng, change):
    f = qt.jit(lambda x, s: x * s)
    base = (qt.asarray(rng.standard_normal((4, 3))), 2.0)
    f(*base)
    qt.reset_stats()
    f(*base)
    assert _traces() == 0
    if change == "shape":
        args = (qt.asarray(rng.standard_normal((5, 3))), 2.0)
    elif change == "dtype":
        args = (qt.asarray(rng.standard_normal((4, 3)).astype(np.float32)), 2.0)
    elif change == "ndim":
        args = (qt.asarray(rng.standard_normal(12)), 2.0)
    elif change == "scalar kind":
        args = (base[0], 2)
    else:  # a NumPy array of the same signature is the same signature
        args = (rng.standard_normal((4, 3)), 2.0)
    out = f(*args)
    assert _traces() == (0 if change == "numpy vs tensor" else 1)
    np.testing.assert_allclose(out.numpy(), np.asarray(args[0]) * args[1], rtol=1e-6)
    f(*args)
    assert _traces() == (0 if change == "numpy vs tensor" else 1)


def test_retraces_on_pytree_structure(rng):
    f = qt.jit(lambda tree: sum(tree["a"]) * tree["b"])
    a = [qt.asarray(rng.standard_normal(3)) for _ in range(3)]
    b = qt.asarray(rng.standard_normal(3))
    qt.reset_stats()
    r2 = f({"a": a[:2], "b": b})
    assert _traces() == 1
    r3 = f({"a": a, "b": b})
    assert _traces() == 2
    r3b = f({"a": tuple(a), "b": b})  # a tuple is another structure than a list
    assert _traces() == 3
    f({"a": a[:2], "b": b})
    assert _traces() == 3
    na = [x.numpy() for x in a]
    np.testing.assert_allclose(r2.numpy(), (na[0] + na[1]) * b.numpy())
    np.testing.assert_allclose(r3.numpy(), (na[0] + na[1] + na[2]) * b.numpy())
    np.testing.assert_allclose(r3b.numpy(), r3.numpy())


def test_static_argnums_and_argnames(rng):
    calls = []

    def g(x, n, *, mode):
        calls.append((n, mode))
        y = x
        for _ in range(n):  # Python control flow on a static value
            y = y * 2.0
        return y + 1.0 if mode == "plus" else y - 1.0

    f = qt.jit(g, static_argnums=(1,), static_argnames=("mode",))
    x = rng.standard_normal(8)
    t = qt.asarray(x)
    qt.reset_stats()
    np.testing.assert_allclose(f(t, 3, mode="plus").numpy(), x * 8 + 1)
    np.testing.assert_allclose(f(t, 3, mode="plus").numpy(), x * 8 + 1)
    assert _traces() == 1
    np.testing.assert_allclose(f(t, 2, mode="plus").numpy(), x * 4 + 1)
    assert _traces() == 2
    np.testing.assert_allclose(f(t, 2, mode="minus").numpy(), x * 4 - 1)
    assert _traces() == 3
    np.testing.assert_allclose(f(t, 3, mode="plus").numpy(), x * 8 + 1)
    assert _traces() == 3
    assert calls == [(3, "plus"), (2, "plus"), (2, "minus")]


def test_static_argnums_as_decorator_and_negative_index(rng):
    @qt.jit(static_argnums=-1)
    def f(x, axis):
        return x.sum(axis=axis)

    x = rng.standard_normal((3, 4))
    t = qt.asarray(x)
    qt.reset_stats()
    np.testing.assert_allclose(f(t, 0).numpy(), x.sum(axis=0))
    np.testing.assert_allclose(f(t, 1).numpy(), x.sum(axis=1))
    np.testing.assert_allclose(f(t, 0).numpy(), x.sum(axis=0))
    assert _traces() == 2


def test_unhashable_static_argument_is_a_type_error(rng):
    f = qt.jit(lambda x, opts: x * opts[0], static_argnums=1)
    with pytest.raises(TypeError, match="hashable"):
        f(qt.ones(3), [2.0])


def test_pytrees_in_and_out(rng, fusion):
    @qt.jit
    def f(params, batch):
        w, (b, extra) = params["w"], params["rest"]
        y = batch[0] * w + b
        return {"y": y, "stats": (y.sum(), [y.max(), extra * 2]), "none": None}

    w, b, e = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal(2)
    x0, x1 = rng.standard_normal(6), rng.standard_normal(6)
    params = {"w": qt.asarray(w), "rest": (qt.asarray(b), qt.asarray(e))}
    out = f(params, [qt.asarray(x0), x1])
    assert set(out) == {"y", "stats", "none"} and out["none"] is None
    assert isinstance(out["stats"], tuple) and isinstance(out["stats"][1], list)
    y = x0 * w + b
    np.testing.assert_allclose(out["y"].numpy(), y)
    np.testing.assert_allclose(out["stats"][0].item(), y.sum())
    np.testing.assert_allclose(out["stats"][1][0].item(), y.max())
    np.testing.assert_allclose(out["stats"][1][1].numpy(), e * 2)


def test_keyword_arguments(rng):
    f = qt.jit(lambda x, y=None, scale=1.0: x * scale + (0.0 if y is None else y))
    x, y = rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(f(qt.asarray(x), y=qt.asarray(y), scale=3.0).numpy(), x * 3 + y)
    np.testing.assert_allclose(f(qt.asarray(x), scale=2.0).numpy(), x * 2)


def test_side_effects_run_only_while_tracing(rng):
    log = []

    @qt.jit
    def f(x):
        log.append("traced")
        print("side effect")
        return x + 1

    t = qt.asarray(rng.standard_normal(3))
    for _ in range(10):
        f(t)
    assert log == ["traced"]
    f(qt.asarray(rng.standard_normal(4)))
    assert log == ["traced", "traced"]


def test_cache_hit_does_no_tracing(rng, monkeypatch):
    f = qt.jit(lambda x, y: qt.exp(x) - y)
    x, y = rng.standard_normal(10), rng.standard_normal(10)
    f(qt.asarray(x), qt.asarray(y))

    import qtrace.graph.node as node_mod
    import qtrace.tracer.context as ctx

    def boom(*a, **k):  # noqa: ARG001
        raise AssertionError("a cached jit call recorded graph nodes")
    monkeypatch.setattr(node_mod, "make_node", boom)
    monkeypatch.setattr(ctx, "make_node", boom)
    qt.reset_stats()
    for _ in range(3):
        out = f(qt.asarray(x), qt.asarray(y))
    s = qt.stats()
    assert s["traces"] == 0 and s["compiles"] == 0
    assert s["cache_hits_memory"] >= 3
    np.testing.assert_allclose(out.numpy(), np.exp(x) - y, rtol=1e-12, atol=1e-13)


def test_kwargs_path_also_hits_the_cache(rng):
    f = qt.jit(lambda x, *, k: x * k)
    t = qt.asarray(rng.standard_normal(5))
    f(t, k=2.0)
    qt.reset_stats()
    f(t, k=3.0)
    assert _traces() == 0


def test_jit_of_identity_and_constants(rng):
    x = rng.standard_normal(7)
    t = qt.asarray(x)
    ident = qt.jit(lambda a: a)
    out = ident(t)
    assert isinstance(out, qt.Tensor)
    np.testing.assert_array_equal(out.numpy(), x)
    np.testing.assert_array_equal(ident(x).numpy(), x)  # NumPy in, tensor out

    const_py = qt.jit(lambda a: 3.5)
    assert const_py(t) == 3.5
    const_t = qt.jit(lambda a: qt.full((), 2.0))
    assert isinstance(const_t(t), qt.Tensor) and const_t(t).item() == 2.0
    ones = qt.jit(lambda a: qt.ones(3, dtype=qt.int32))
    assert ones(t).tolist() == [1, 1, 1] and ones(t).dtype == np.int32
    mixed = qt.jit(lambda a: (a, a * 2, 7, qt.zeros(2)))
    r = mixed(t)
    np.testing.assert_array_equal(r[0].numpy(), x)
    np.testing.assert_array_equal(r[1].numpy(), x * 2)
    assert r[2] == 7
    np.testing.assert_array_equal(r[3].numpy(), np.zeros(2))


def test_identity_output_is_not_aliased_to_a_later_input(rng):
    """The returned tensor keeps its value when the caller's array is later overwritten."""
    ident = qt.jit(lambda a: a)
    x = rng.standard_normal(5)
    keep = x.copy()
    out = ident(qt.array(x))
    np.testing.assert_array_equal(out.numpy(), keep)


def test_closure_captured_tensors(rng, fusion):
    c_np = rng.standard_normal(6)
    c = qt.asarray(c_np)           # computed
    d = qt.sin(qt.asarray(c_np))   # pending when captured
    f = qt.jit(lambda x: x * c + d)
    x = rng.standard_normal(6)
    np.testing.assert_allclose(f(qt.asarray(x)).numpy(), x * c_np + np.sin(c_np), rtol=1e-12, atol=1e-13)
    x2 = rng.standard_normal(6)
    np.testing.assert_allclose(f(x2).numpy(), x2 * c_np + np.sin(c_np), rtol=1e-12, atol=1e-13)


def test_numpy_array_and_scalar_arguments(rng):
    f = qt.jit(lambda a, b, s: a @ b + s)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    out = f(a, b, 1.5)
    np.testing.assert_allclose(out.numpy(), a @ b + 1.5, rtol=1e-12)
    out2 = f(a, np.ascontiguousarray(b.T).T, 1.5)  # a non-contiguous array
    np.testing.assert_allclose(out2.numpy(), a @ b + 1.5, rtol=1e-12)


def test_unsupported_argument_type_is_a_type_error():
    f = qt.jit(lambda x: x)
    with pytest.raises(TypeError, match="qt.jit"):
        f("a string")
    with pytest.raises(TypeError):
        f(np.ones(2, np.float16))


def test_nested_jit_traces_through(rng):
    inner = qt.jit(lambda x: x * 2.0)
    outer = qt.jit(lambda x: inner(x) + 1.0)
    x = rng.standard_normal(4)
    np.testing.assert_allclose(outer(qt.asarray(x)).numpy(), x * 2 + 1)


def test_jitted_results_equal_eager_results(rng, fusion):
    def model(w, b, x):
        h = qt.tanh(x @ w + b)
        return (h * h).mean(axis=0), h.max(axis=1), qt.where(h > 0, h, 0.1 * h)

    w, b, x = rng.standard_normal((5, 4)), rng.standard_normal(4), rng.standard_normal((8, 5))
    eager = model(qt.asarray(w), qt.asarray(b), qt.asarray(x))
    jitted = qt.jit(model)(qt.asarray(w), qt.asarray(b), qt.asarray(x))
    h = np.tanh(x @ w + b)
    refs = ((h * h).mean(axis=0), h.max(axis=1), np.where(h > 0, h, 0.1 * h))
    for e, j, r in zip(eager, jitted, refs):
        np.testing.assert_allclose(e.numpy(), r, rtol=1e-12)
        np.testing.assert_allclose(j.numpy(), r, rtol=1e-12)


def test_jit_over_eager_repeated_steps_compiles_once(rng):
    step = qt.jit(lambda x: x * 0.9 + qt.sin(x))
    t = qt.asarray(rng.standard_normal(100))
    t = step(t)
    qt.reset_stats()
    for _ in range(100):
        t = step(t)
    s = qt.stats()
    assert s["compiles"] == 0 and s["traces"] == 0


def _retrace_messages(caplog) -> list:
    """Messages of the "qtrace" logger about jit retraces (kernel-cache messages aside)."""
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("qtrace") and "qt.jit" in r.getMessage()]


def test_log_recompiles_says_why(rng, caplog):
    qt.config.log_recompiles = True
    f = qt.jit(lambda x, s: (x[0] if isinstance(x, list) else x) * s)
    t3 = qt.asarray(rng.standard_normal(3))
    with caplog.at_level(logging.INFO, logger="qtrace"):
        f(t3, 1.0)
        f(t3, 2.0)                       # hit: nothing logged
        assert not _retrace_messages(caplog)
        f(qt.asarray(rng.standard_normal(4)), 1.0)
        f(qt.asarray(rng.standard_normal(4).astype(np.float32)), 1.0)
        f([t3], 1.0)
    msgs = _retrace_messages(caplog)
    assert len(msgs) == 3, msgs
    assert "shape" in msgs[0] and "(3,)" in msgs[0] and "(4,)" in msgs[0]
    assert "dtype" in msgs[1] and "float32" in msgs[1]
    assert "structure" in msgs[2]


def test_log_recompiles_static_argument(rng, caplog):
    qt.config.log_recompiles = True
    f = qt.jit(lambda x, n: x * n, static_argnums=1)
    t = qt.asarray(rng.standard_normal(3))
    with caplog.at_level(logging.INFO, logger="qtrace"):
        f(t, 2)
        f(t, 5)
    msgs = _retrace_messages(caplog)
    assert len(msgs) == 1 and "static" in msgs[0] and "5" in msgs[0]


def test_no_recompile_log_when_disabled(rng, caplog):
    qt.config.log_recompiles = False
    f = qt.jit(lambda x: x + 1)
    with caplog.at_level(logging.DEBUG, logger="qtrace"):
        f(qt.ones(2))
        f(qt.ones(3))
    assert not [r for r in caplog.records if "retrac" in r.getMessage()]


def test_log_recompiles_environment_variable():
    code = textwrap.dedent("""
        import logging
        import qtrace as qt
        logging.basicConfig(level=logging.INFO)
        f = qt.jit(lambda x: x + 1)
        f(qt.ones(2))
        f(qt.ones(5))
        assert qt.config.log_recompiles
    """)
    env = dict(os.environ, QTRACE_LOG_RECOMPILES="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "retrac" in out.stderr and "(2,)" in out.stderr and "(5,)" in out.stderr


def test_jitted_elementwise_chain_is_one_kernel_when_fused(rng, fusion):
    def chain(x):
        for k in range(10):
            x = qt.sin(x) * 0.9 + 0.01 * k if k % 2 else x * 1.1 - 0.2
        return x

    f = qt.jit(chain)
    x = rng.standard_normal(1000)
    f(x)
    qt.reset_stats()
    out = f(x).numpy()
    assert qt.stats()["tasks_run"] == (1 if fusion else 25)
    ref = x.copy()
    for k in range(10):
        ref = np.sin(ref) * 0.9 + 0.01 * k if k % 2 else ref * 1.1 - 0.2
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_pending_size_limit_does_not_apply_while_tracing(rng):
    """Tracing a function longer than ``max_pending_nodes`` must not try to evaluate."""
    qt.config.max_pending_nodes = 20

    @qt.jit
    def f(x):
        for _ in range(100):
            x = x * 1.01 + 0.1
        return x

    x = rng.standard_normal(8)
    ref = x.copy()
    for _ in range(100):
        ref = ref * 1.01 + 0.1
    np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-12)


def test_containers_registered_with_optree_are_pytrees_without_jax():
    """Without JAX in the process, pytrees go through optree: a container registered there
    (in the namespace "qtrace") is flattened by qt.jit and comes back as itself."""
    script = textwrap.dedent("""
        import sys, numpy as np, optree, qtrace as qt
        class Pair:
            def __init__(self, a, b): self.a, self.b = a, b
        optree.register_pytree_node(Pair, lambda p: ((p.a, p.b), None, None),
                                    lambda _, c: Pair(*c), namespace="qtrace")
        out = qt.jit(lambda p: Pair(p.b * 2.0, p.a + 1.0))(Pair(np.arange(3.0), np.ones(3)))
        assert isinstance(out, Pair), type(out)
        np.testing.assert_array_equal(out.a.numpy(), [2.0, 2.0, 2.0])
        np.testing.assert_array_equal(out.b.numpy(), [1.0, 2.0, 3.0])
        assert "jax" not in sys.modules
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


def test_calls_on_plain_arguments_import_no_pytree_library():
    """Tuples of arrays and numbers (in and out) are flattened by qtrace itself: a process
    that only calls jitted functions on arrays never imports optree; the first container
    (a list, a dict with keys, None) goes through the library, and both kinds of call give
    the same values and keep their own cache entries."""
    script = textwrap.dedent("""
        import sys, numpy as np, qtrace as qt
        f = qt.jit(lambda x, p: (x * p[0], (x + p[1], 2.0 * x)))
        x = np.arange(4.0)
        a, (b, c) = f(x, (np.float32(3.0), 1))
        np.testing.assert_array_equal(a.numpy(), x * 3.0)
        np.testing.assert_array_equal(b.numpy(), x + 1)
        np.testing.assert_array_equal(c.numpy(), 2.0 * x)
        one = qt.jit(lambda x: x * 2.0)(qt.asarray(x))
        np.testing.assert_array_equal(one.numpy(), 2.0 * x)
        assert "optree" not in sys.modules and "jax" not in sys.modules
        a2, (b2, c2) = f(x, [3.0, 1])
        assert "optree" in sys.modules or "jax" in sys.modules   # (JAX's where optree is missing)
        np.testing.assert_array_equal(a2.numpy(), a.numpy())
        np.testing.assert_array_equal(b2.numpy(), b.numpy())
        assert qt.stats()["traces"] == 3, qt.stats()["traces"]
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


def _leapfrog(x, v):
    a = -4 * x
    v = v + 0.01 * a
    x = x + 0.01 * v
    return x, v


def _steps(step, x, v, n):
    for _ in range(n):
        x, v = step(x, v)
    return x, v


def test_one_kernel_calls_run_by_the_compiled_recorder_match_the_python_path(rng, fusion, device,
                                                                               monkeypatch):
    """A jitted step of one small kernel is replayed by the compiled recorder (no Python
    per call): the same bits as the Python call path, the same stats, results that are
    fresh tensors (a tuple, or the one result)."""
    from qtrace.graph import native
    from qtrace.tracer import jit as jit_module

    x0, v0 = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    fast = qt.jit(_leapfrog)
    got = _steps(fast, qt.asarray(x0, device=device), qt.asarray(v0, device=device), 40)
    replayed = bool(fast._specs)
    assert replayed == (native.active() and device == "cpu" and fusion)   # (unfused: 3 kernels)
    with monkeypatch.context() as m:
        m.setattr(jit_module, "_native_call", None)   # the Python call path
        slow = qt.jit(_leapfrog)
        want = _steps(slow, qt.asarray(x0, device=device), qt.asarray(v0, device=device), 40)
        assert not slow._specs
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    ref_x, ref_v = x0.astype(np.float64), v0.astype(np.float64)
    for _ in range(40):
        ref_x, ref_v = _leapfrog(ref_x, ref_v)
    np.testing.assert_allclose(got[0].numpy(), ref_x, rtol=1e-4, atol=1e-5)
    qt.reset_stats()
    x, v = fast(*got)
    s = qt.stats()
    assert s["cache_hits_memory"] == 1 and s["tasks_run"] >= s["kernel_launches"] >= 1
    if replayed:
        assert s["kernel_launches"] == s["tasks_run"] == 1
    assert x is not got[0] and x._node.buffer is not got[0]._node.buffer
    one = qt.jit(lambda t: t * 2.5 + 1.0)
    t = qt.asarray(x0, device=device)
    for _ in range(3):
        r = one(t)
    assert isinstance(r, qt.Tensor)
    np.testing.assert_allclose(r.numpy(), x0 * np.float32(2.5) + np.float32(1.0), rtol=1e-6)


def test_one_kernel_calls_fall_back_for_what_they_do_not_take(rng, fusion):
    """Arguments that are pending, strided views, or tensors of another signature, and
    constants the trace captured: every call still gives NumPy's result."""
    c = rng.standard_normal(64)
    captured = qt.asarray(c)
    step = qt.jit(lambda x: x * 0.5 + captured)
    base = rng.standard_normal((64, 3))
    for _ in range(3):
        step(qt.asarray(base[:, 0].copy()))
    cases = [qt.asarray(base[:, 1].copy()),            # ready: the compiled path
             qt.asarray(base[:, 1].copy()) * 1.0,      # pending: evaluated by Python first
             qt.asarray(base)[:, 2],                   # a strided view of an evaluated array
             qt.asarray(base[:, 2].copy())]
    for arg, col in zip(cases, (1, 1, 2, 2)):
        np.testing.assert_allclose(step(arg).numpy(), base[:, col] * 0.5 + c, rtol=1e-15)


def test_one_kernel_calls_from_threads_match_their_sequential_results(rng):
    """Threads calling one jitted step on their own data get their own results (no state
    shared between calls: each allocates its outputs)."""
    import threading

    step = qt.jit(_leapfrog)
    starts = [(rng.standard_normal(256), rng.standard_normal(256)) for _ in range(4)]
    want = [_steps(step, qt.asarray(x), qt.asarray(v), 200) for x, v in starts]
    got = [None] * 4

    def work(k):
        got[k] = _steps(step, qt.asarray(starts[k][0]), qt.asarray(starts[k][1]), 200)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
