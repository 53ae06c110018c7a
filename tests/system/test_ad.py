"""Reverse mode as a transformation (SPEC §3): ``qt.grad`` / ``value_and_grad`` / ``vjp``.

Compositions with ``qt.jit`` in both orders agree with eager ``qt.grad`` and with JAX
(float64); pytrees of arguments (``argnums`` tuples, dicts, tuples); ``has_aux``;
``vjp`` functions called many times (compiled once); second order; compile-once for a
Python loop of jitted steps under ``grad``; the ``TypeError`` cases. Every test runs with
fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt

jax.config.update("jax_enable_x64", True)


def assert_close(got, want, rtol=1e-10, atol=1e-12, what=""):
    got = got.numpy() if isinstance(got, qt.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    bad = ~(np.abs(got - want) <= atol * scale + rtol * np.abs(want))
    assert not bad.any(), (f"{what}: differ at {np.argwhere(bad)[:6].tolist()}\n"
                           f"  qtrace {got[bad][:6]}\n  want   {want[bad][:6]}")


def _compiled() -> int:
    """Kernels built or loaded since the last reset (a warm disk cache turns compiles into loads)."""
    s = qt.stats()
    return s["compiles"] + s["cache_hits_disk"]


def model(xp):
    """A scalar function of two arrays using elementwise, reduction, matmul and indexing."""
    def f(x, y):
        h = xp.tanh(x @ y[:, None])[:, 0]                       # (3,)
        z = xp.sin(x) * y + xp.exp(0.1 * x) ** 2 - xp.maximum(x, 0.2)
        return xp.sum(z * z) * 0.1 + xp.sum(h * xp.cumsum(y)[:3]) + xp.prod(xp.cos(y[::2]))
    return f


def _data(rng):
    return rng.normal(size=(3, 4)), rng.normal(size=4)


def _jax_grads(f, args, argnums):
    return jax.grad(f, argnums=argnums)(*map(jnp.asarray, args))


COMPOSITIONS = {
    "eager": lambda f, a: qt.grad(f, argnums=a),
    "jit(grad)": lambda f, a: qt.jit(qt.grad(f, argnums=a)),
    "grad(jit)": lambda f, a: qt.grad(qt.jit(f), argnums=a),
    "jit(grad(jit))": lambda f, a: qt.jit(qt.grad(qt.jit(f), argnums=a)),
}


@pytest.mark.parametrize("how", list(COMPOSITIONS))
def test_grad_and_jit_compose_in_both_orders(how, fusion, rng):
    x, y = _data(rng)
    want = _jax_grads(model(jnp), (x, y), (0, 1))
    g = COMPOSITIONS[how](model(qt), (0, 1))
    got = g(qt.asarray(x), qt.asarray(y))
    assert isinstance(got, tuple) and len(got) == 2
    assert_close(got[0], want[0], what=f"{how} d/dx")
    assert_close(got[1], want[1], what=f"{how} d/dy")
    # a second call with new values: the same function, no retrace for the jitted forms
    x2, y2 = _data(rng)
    qt.reset_stats()
    got = g(qt.asarray(x2), qt.asarray(y2))
    want = _jax_grads(model(jnp), (x2, y2), (0, 1))
    assert_close(got[0], want[0], what=f"{how} d/dx, second call")
    assert_close(got[1], want[1], what=f"{how} d/dy, second call")
    assert qt.stats()["traces"] == 0
    assert _compiled() == 0, qt.stats()


def complex_middle(xp, inner=lambda f: f):
    """A real loss of real parts through complex values: a jitted inner function (``inner``)
    taking and returning complex arrays."""
    h = inner(lambda x, w: xp.exp(1j * x) * w)

    def f(x, wr, wi):
        return xp.sum(xp.real(h(x, wr + 1j * wi) * xp.conj(wr - 1j * wi)) ** 2)
    return f


@pytest.mark.parametrize("how", list(COMPOSITIONS))
def test_gradients_through_a_jitted_call_on_complex_values(how, fusion, rng):
    """The call's complex arguments and results carry cotangents (they were dropped: zero
    gradients through a jitted function of complex values, right ones without ``jit``)."""
    x, wr, wi = (rng.normal(size=(3, 4)) for _ in range(3))
    want = _jax_grads(complex_middle(jnp), (x, wr, wi), (0, 1, 2))
    got = COMPOSITIONS[how](complex_middle(qt, qt.jit), (0, 1, 2))(*(qt.asarray(a) for a in (x, wr, wi)))
    for g, w, what in zip(got, want, ("x", "wr", "wi")):
        assert_close(g, w, what=f"{how} d/d{what}")


def strided(xp):
    """Slices with steps of every sign and size, inside and around a reduction."""
    def f(x, y):
        return (xp.prod(xp.cos(y[::2])) + xp.sum(x[::-2, 1:3] ** 2)
                + xp.sum(xp.sin(x[-1::-3, ::3]) * y[1::3]))
    return f


@pytest.mark.parametrize("how", list(COMPOSITIONS))
def test_strided_slice_gradients_in_every_composition(how, fusion, rng):
    x, y = rng.normal(size=(7, 5)), rng.normal(size=5)
    want = _jax_grads(strided(jnp), (x, y), (0, 1))
    got = COMPOSITIONS[how](strided(qt), (0, 1))(qt.asarray(x), qt.asarray(y))
    assert_close(got[0], want[0], what=f"{how} d/dx")
    assert_close(got[1], want[1], what=f"{how} d/dy")


def test_a_vjp_rule_that_creates_a_constant_array_works_inside_a_call(fusion, rng, monkeypatch):
    # a rule may build an index array (a leaf holding a buffer) while the reverse body of
    # a call node is traced: it must become an input of the reverse call, not a dangling leaf
    from qtrace.ad import calls, rules

    def slice_by_scatter(node, ct, xs, out):
        starts, steps = node.params
        key = tuple(slice(s, s + st * (n - 1) + (1 if st > 0 else -1) if s + st * (n - 1) + (
            1 if st > 0 else -1) >= 0 else None, st) for s, st, n in zip(starts, steps, node.shape))
        return [qt.zeros_like(xs[0]).at[key].add(ct)]

    monkeypatch.setitem(rules.VJP, "slice", slice_by_scatter)
    monkeypatch.setattr(calls, "_reverse", {})  # reverse bodies are cached per body
    x, y = rng.normal(size=(7, 5)), rng.normal(size=5)
    want = _jax_grads(strided(jnp), (x, y), (0, 1))
    for how in ("grad(jit)", "jit(grad(jit))"):
        got = COMPOSITIONS[how](strided(qt), (0, 1))(qt.asarray(x), qt.asarray(y))
        assert_close(got[0], want[0], what=f"{how} d/dx")
        assert_close(got[1], want[1], what=f"{how} d/dy")


def test_jit_of_grad_takes_numpy_arguments_and_single_argnum(fusion, rng):
    x, y = _data(rng)
    got = qt.jit(qt.grad(model(qt)))(x, y)
    assert isinstance(got, qt.Tensor) and got.shape == (3, 4) and got.dtype == np.float64
    assert_close(got, _jax_grads(model(jnp), (x, y), 0), what="d/dx")
    got = qt.grad(model(qt), argnums=-1)(qt.asarray(x), qt.asarray(y))
    assert_close(got, _jax_grads(model(jnp), (x, y), 1), what="argnums=-1")


def mlp_loss(xp):
    def loss(params, batch):
        x, y = batch
        h = xp.tanh(x @ params["w1"] + params["b"])
        pred = h @ params["w2"]
        return xp.mean((pred - y) ** 2) + 0.01 * xp.sum(params["w1"] ** 2)
    return loss


def _mlp_data(rng):
    params = {"w1": rng.normal(size=(3, 5)), "b": rng.normal(size=5), "w2": rng.normal(size=(5, 2))}
    batch = (rng.normal(size=(6, 3)), rng.normal(size=(6, 2)))
    return params, batch


def _tree_close(got, want, what):
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{what}: {type(got)} {got!r:.80}"
        for k in want:
            _tree_close(got[k], want[k], f"{what}[{k!r}]")
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, type(want)) and len(got) == len(want), f"{what}: {type(got)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _tree_close(g, w, f"{what}[{i}]")
    else:
        assert isinstance(got, qt.Tensor), f"{what}: {type(got).__name__}"
        assert_close(got, want, what=what)


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_pytree_arguments(jitted, fusion, rng):
    params, batch = _mlp_data(rng)
    qparams = {k: qt.asarray(v) for k, v in params.items()}
    qbatch = tuple(qt.asarray(b) for b in batch)
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    jbatch = tuple(jnp.asarray(b) for b in batch)
    wrap = qt.jit if jitted else (lambda f: f)
    got = wrap(qt.grad(mlp_loss(qt)))(qparams, qbatch)
    _tree_close(got, jax.grad(mlp_loss(jnp))(jparams, jbatch), "grad dict")
    got = wrap(qt.grad(mlp_loss(qt), argnums=(0, 1)))(qparams, qbatch)
    want = jax.grad(mlp_loss(jnp), argnums=(0, 1))(jparams, jbatch)
    assert isinstance(got, tuple) and len(got) == 2
    _tree_close(got[0], want[0], "argnums=(0, 1) params")
    _tree_close(got[1], want[1], "argnums=(0, 1) batch")


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_has_aux_and_value_and_grad(jitted, fusion, rng):
    x = rng.normal(size=7)
    wrap = qt.jit if jitted else (lambda f: f)

    def f(x):
        loss = qt.sum(qt.sin(x) * x)
        return loss, {"mean": qt.mean(x), "n": x.shape[0]}
    g, aux = wrap(qt.grad(f, has_aux=True))(qt.asarray(x))
    want = np.sin(x) + x * np.cos(x)
    assert_close(g, want, what="grad has_aux")
    assert set(aux) == {"mean", "n"}
    assert_close(aux["mean"], np.mean(x), what="aux")
    assert int(aux["n"]) == 7
    (v, aux), g = wrap(qt.value_and_grad(f, has_aux=True))(qt.asarray(x))
    assert_close(v, np.sum(np.sin(x) * x), what="value")
    assert_close(g, want, what="value_and_grad has_aux")
    v, g = wrap(qt.value_and_grad(lambda x: f(x)[0]))(qt.asarray(x))
    assert isinstance(v, qt.Tensor) and v.shape == () and v.dtype == np.float64
    assert_close(v, np.sum(np.sin(x) * x), what="value")
    assert_close(g, want, what="value_and_grad")
    v, (gx, gy) = wrap(qt.value_and_grad(model(qt), argnums=(0, 1)))(*map(qt.asarray, _data(rng)))
    assert v.shape == () and gx.shape == (3, 4) and gy.shape == (4,)


def _vjp_pair(xp):
    return lambda a, b: (xp.sin(a) * b, xp.sum(a * a, axis=0) + b)


def test_vjp_function_called_many_times_compiles_once(fusion, rng):
    """Each call rebuilds the backward graph; its content hash finds the plan compiled
    by the first call, so later calls build no kernel."""
    a, b = rng.normal(size=(3, 4)), rng.normal(size=4)
    out, vjp_fn = qt.vjp(_vjp_pair(qt), qt.asarray(a), qt.asarray(b))
    jout, jvjp = jax.vjp(_vjp_pair(jnp), jnp.asarray(a), jnp.asarray(b))
    qt.eval(*out)   # (pending like any value: else the first call's evaluation computes it too)
    qt.reset_stats()
    counts = []
    for k in range(4):
        ct = (rng.normal(size=(3, 4)), rng.normal(size=4))
        got = vjp_fn((qt.asarray(ct[0]), qt.asarray(ct[1])))
        qt.eval(*got)
        counts.append(_compiled())
        assert isinstance(got, tuple) and len(got) == 2
        want = jvjp((jnp.asarray(ct[0]), jnp.asarray(ct[1])))
        assert_close(got[0], want[0], what=f"call {k}: cotangent of a")
        assert_close(got[1], want[1], what=f"call {k}: cotangent of b")
    assert counts[1:] == counts[:1] * 3, f"kernels built or loaded, cumulative per call: {counts}"
    assert isinstance(out, tuple) and len(out) == 2
    assert_close(out[0], jout[0], what="out[0]")
    assert_close(out[1], jout[1], what="out[1]")


def test_vjp_after_the_output_was_evaluated(fusion, rng):
    """Looking at the primal output first (printing it, ``.numpy()``) must not cut the
    output off from the inputs: ``vjp_fn`` still pulls cotangents back."""
    a, b = rng.normal(size=(3, 4)), rng.normal(size=4)
    out, vjp_fn = qt.vjp(_vjp_pair(qt), qt.asarray(a), qt.asarray(b))
    jout, jvjp = jax.vjp(_vjp_pair(jnp), jnp.asarray(a), jnp.asarray(b))
    assert_close(out[0], jout[0], what="out[0]")
    assert_close(out[1], jout[1], what="out[1]")
    ct = (rng.normal(size=(3, 4)), rng.normal(size=4))
    got = vjp_fn((qt.asarray(ct[0]), qt.asarray(ct[1])))
    want = jvjp((jnp.asarray(ct[0]), jnp.asarray(ct[1])))
    assert_close(got[0], want[0], what="cotangent of a")
    assert_close(got[1], want[1], what="cotangent of b")


def test_vjp_cotangent_structure_and_shape_are_checked(fusion, rng):
    out, vjp_fn = qt.vjp(lambda a: a * 2.0, qt.asarray(rng.normal(size=3)))
    with pytest.raises(ValueError):
        vjp_fn(qt.ones(4))
    with pytest.raises(ValueError):
        vjp_fn((qt.ones(3), qt.ones(3)))


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_second_order(jitted, fusion, rng):
    def f(xp):
        return lambda x: xp.sin(x) * x * x + xp.exp(-0.5 * x) * xp.tanh(x)
    x = float(rng.uniform(-2, 2))
    wrap = qt.jit if jitted else (lambda g: g)
    got = wrap(qt.grad(qt.grad(f(qt))))(qt.asarray(x))
    want = jax.grad(jax.grad(f(jnp)))(jnp.asarray(x))
    assert isinstance(got, qt.Tensor) and got.shape == ()
    assert_close(got, want, what="d2f/dx2")
    got = qt.grad(lambda x: qt.grad(f(qt))(x) * x)(qt.asarray(x))  # f'(x) * x, differentiated
    want = jax.grad(lambda x: jax.grad(f(jnp))(x) * x)(jnp.asarray(x))
    assert_close(got, want, what="d(x f'(x))/dx")


_step = qt.jit(lambda x, p: qt.sin(x) * p + 0.5 * x)


def _unrolled_loss(xp, step):
    def loss(p, x0, T):
        x = x0
        for _ in range(T):
            x = step(x, p)
        return xp.sum(x * x)
    return loss


def test_python_loop_of_jitted_steps_compiles_once_per_length(fusion, rng):
    """``grad`` of a loss built by calling a jitted step ``T`` times in a Python loop.

    The second call with the same ``T`` builds nothing (the graph's content hash finds
    the compiled plan). A different ``T`` is a different graph, so a new plan: what it
    costs is qtrace's business, not asserted here beyond "no more than the first ``T``".
    Observed (cold cache): fusion on, T=10 built 5 kernels and T=11 one more (the fused
    backward chain); fusion off, T=10 built 9 and T=11 none (the per-operation kernels
    are shared). A repeat of any ``T`` builds nothing. Gradients match JAX for every ``T``.
    """
    p, x0 = rng.normal(size=5), rng.normal(size=5)
    jstep = jax.jit(lambda x, p: jnp.sin(x) * p + 0.5 * x)
    built = {}
    for T in (10, 10, 11, 11, 10):
        qt.reset_stats()
        g = qt.grad(_unrolled_loss(qt, _step))(qt.asarray(p), qt.asarray(x0), T)
        assert_close(g, jax.grad(_unrolled_loss(jnp, jstep))(p, x0, T), rtol=1e-9, what=f"T={T}")
        built.setdefault(T, []).append(_compiled())
        assert qt.stats()["traces"] <= 1
    assert built[10][1:] == [0, 0], f"kernels built or loaded on repeated T=10 calls: {built}"
    assert built[11][1] == 0, f"kernels built or loaded on the repeated T=11 call: {built}"
    assert built[11][0] <= built[10][0], built


# --- errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_grad_with_respect_to_a_non_float_input_is_a_type_error(dtype, fusion):
    x = qt.asarray(np.ones(3, dtype=dtype))
    with pytest.raises(TypeError, match=dtype):
        qt.grad(lambda x: qt.sum(x * 1.0))(x)
    with pytest.raises(TypeError, match=dtype):  # the chosen argnum is the integer one
        qt.grad(lambda y, x: qt.sum(y * x), argnums=1)(qt.ones(3), x)
    with pytest.raises(TypeError):
        qt.jit(qt.grad(lambda x: qt.sum(x * 1.0)))(x)
    with pytest.raises(TypeError):
        qt.vjp(lambda x: x * 1.0, x)
    with pytest.raises(TypeError):
        qt.grad(lambda x: x * 1.0)(3)  # a Python int


def test_grad_with_respect_to_a_python_float(fusion):
    g = qt.grad(lambda x: x * x * 3.0)(2.0)
    assert isinstance(g, qt.Tensor) and g.shape == ()
    assert float(g) == 12.0


@pytest.mark.parametrize("shape", [(3,), (2, 3), (1,)])
def test_grad_of_a_non_scalar_output_is_a_type_error_naming_the_shape(shape, fusion):
    x = qt.ones(shape)
    with pytest.raises(TypeError, match=re.escape(str(shape))):
        qt.grad(lambda x: x * 2.0)(x)
    with pytest.raises(TypeError, match=re.escape(str(shape))):
        qt.jit(qt.grad(lambda x: x * 2.0))(x)
    with pytest.raises(TypeError, match=re.escape(str(shape))):
        qt.value_and_grad(lambda x: x * 2.0)(x)


def test_grad_of_an_integer_output_is_a_type_error(fusion):
    with pytest.raises(TypeError):
        qt.grad(lambda x: qt.sum(qt.astype(x, qt.int64)))(qt.ones(3))


def test_stop_gradient_matches_jax(fusion, rng):
    """``qt.stop_gradient`` is a constant to reverse mode (JAX's ``lax.stop_gradient``)."""
    x = rng.standard_normal(7)

    def f(xp, stop, x):
        return xp.sum(xp.sin(x) * stop(x * x) + stop(xp.exp(x)))

    got = qt.grad(lambda x: f(qt, qt.stop_gradient, x))(qt.asarray(x))
    want = jax.grad(lambda x: f(jnp, jax.lax.stop_gradient, x))(x)
    assert_close(got, want, rtol=1e-12, what="stop_gradient")
    np.testing.assert_array_equal(qt.stop_gradient(qt.asarray(x)).numpy(), x)
