"""qtrace functions inside JAX programs (``qt.to_jax``): values, ``jax.jit``, ``jax.grad``
(qtrace's reverse pass behind a custom VJP), ``jax.vmap``, ``jax.shard_map`` over 8
simulated host devices, errors surfacing as JAX errors, fusion on and off.

References: the same function written in JAX (``jax.grad`` where JAX can differentiate it)
and central finite differences in float64 where it cannot (a data-dependent
``while_loop``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qtrace as qt

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

CPU_ONLY = pytest.mark.cpu_only("the XLA FFI handler is CPU-only so far")
pytestmark = CPU_ONLY


def chain(m, x, y):
    return m.sin(x) * m.cos(y) + m.exp(-x * x) * 0.5 - m.tanh(x * y)


def test_values_eager_and_under_jit(fusion, rng):
    f = qt.to_jax(lambda x, y: chain(qt, x, y))
    x, y = rng.uniform(-1, 1, 100), rng.uniform(-1, 1, 100)
    want = chain(np, x, y)
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x), jnp.asarray(y))), want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(np.asarray(jax.jit(f)(x, y)), want, rtol=1e-13, atol=1e-15)
    x32 = x.astype(np.float32)
    got = jax.jit(f)(x32, x32)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), chain(np, x32.astype(np.float64), x32), atol=2e-6)


def test_pytrees_in_and_out(fusion, rng):
    @qt.to_jax
    def f(state, scale):
        pos, vel = state["pos"], state["vel"]
        return {"pos": pos + vel * scale, "energy": qt.sum(vel * vel)}, scale * 2.0
    pos, vel = rng.random(8), rng.random(8)
    out, s2 = jax.jit(f)({"pos": pos, "vel": vel}, jnp.float64(0.5))
    np.testing.assert_allclose(np.asarray(out["pos"]), pos + vel * 0.5, rtol=1e-15)
    np.testing.assert_allclose(float(out["energy"]), np.sum(vel * vel), rtol=1e-14)
    assert float(s2) == 1.0


def test_grad_matches_jax(fusion, rng):
    f = qt.to_jax(lambda x, y: chain(qt, x, y))
    x, y = rng.uniform(-1, 1, 50), rng.uniform(-1, 1, 50)

    def loss(g):
        return lambda a, b: jnp.sum(g(a, b) ** 2)
    got = jax.jit(jax.grad(loss(f), argnums=(0, 1)))(x, y)
    want = jax.grad(loss(lambda a, b: chain(jnp, a, b)), argnums=(0, 1))(x, y)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-15)


def test_jit_of_a_program_mixing_jax_ops_and_two_qtrace_calls(fusion, rng):
    f = qt.to_jax(lambda x: qt.sin(x) * 3.0)
    g = qt.to_jax(lambda x, y: qt.sqrt(x * x + y * y))

    def program(x):
        a = f(jnp.cos(x))
        b = g(a, x + 1.0)
        return jnp.sum(b * a)

    def reference(x):
        a = jnp.sin(jnp.cos(x)) * 3.0
        return jnp.sum(jnp.sqrt(a * a + (x + 1.0) ** 2) * a)
    x = rng.uniform(-2, 2, 64)
    np.testing.assert_allclose(float(jax.jit(program)(x)), float(reference(x)), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(program))(x)),
                               np.asarray(jax.grad(reference)(x)), rtol=1e-11)


def test_vmap_runs_the_call_per_batch_element(fusion, rng):
    f = qt.to_jax(lambda x: qt.cumsum(x) * qt.max(x))
    xs = rng.random((5, 7))
    want = np.stack([np.cumsum(r) * np.max(r) for r in xs])
    np.testing.assert_allclose(np.asarray(jax.vmap(f)(xs)), want, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(f))(xs)), want, rtol=1e-14)


def _while_loss(xp_while):
    def loss(x, limit):
        def cond(s):
            return s[0] < limit

        def body(s):
            return (s[0] * 1.3 + 0.1, s[1] + qt.sin(s[0]))
        v, acc = xp_while(cond, body, (x, qt.zeros_like(x)))
        return qt.sum(acc * v)
    return loss


def test_while_loop_gradient_jax_cannot_take(fusion, rng):
    """A per-element while_loop: JAX refuses reverse mode through lax.while_loop; through
    qt.to_jax it is qtrace's adstack that differentiates it. Checked by finite differences."""
    f = qt.to_jax(_while_loss(qt.while_loop))
    n = 40
    x0 = rng.uniform(0.5, 1.5, n)
    lim = rng.uniform(2.0, 40.0, n)
    g = np.asarray(jax.jit(jax.grad(f))(x0, lim))
    h = 1e-6
    for i in rng.choice(n, 5, replace=False):
        e = np.zeros(n)
        e[i] = h
        fd = (float(f(x0 + e, lim)) - float(f(x0 - e, lim))) / (2 * h)
        assert abs(g[i] - fd) <= 1e-6 * max(1.0, abs(fd)), (i, g[i], fd)

    def pure_jax(x, limit):
        def cond(s):
            return jnp.any(s[0] < limit)

        def body(s):
            go = s[0] < limit
            return (jnp.where(go, s[0] * 1.3 + 0.1, s[0]), jnp.where(go, s[1] + jnp.sin(s[0]), s[1]))
        v, acc = jax.lax.while_loop(cond, body, (x, jnp.zeros_like(x)))
        return jnp.sum(acc * v)
    with pytest.raises(ValueError, match="while_loop"):
        jax.grad(pure_jax)(x0, lim)


def test_grad_with_integer_arguments_through_nested_loops(fusion, rng):
    """Integer arguments (trip counts) get float0 cotangents, as JAX requires; the float
    ones get qtrace's reverse through loops nested three deep with a gathered table —
    the same values as ``qt.grad`` and as JAX running the loops masked to a fixed count."""
    size = 19
    n, m = rng.integers(0, 4, size), rng.integers(0, 3, size)
    x, c, t = rng.uniform(-1, 1, size), rng.uniform(0.5, 1.5, size), rng.uniform(-1, 1, 5)

    def loss(xp, fori):
        def f(x, c, t, n, m):
            def l2(j, u):
                return fori(0, m + 1 + j, lambda k, w: (xp.sin(w[0]) * c + 0.1 * w[0] + 0.1 * t[k % 5],), u)
            return xp.sum(fori(0, n, lambda i, v: (fori(0, m + i, l2, v)[0] * 0.9,), (x,))[0] ** 2)
        return f

    def j_fori(lo, hi, body, init):
        def step(s, state):
            i = lo + s
            new = body(i, state)
            return tuple(jnp.where(i < hi, a, b) for a, b in zip(new, state))
        return jax.lax.fori_loop(0, 6, step, tuple(init))
    f = qt.to_jax(loss(qt, qt.fori_loop))
    got = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(x, c, t, n, m)
    want = jax.jit(jax.grad(loss(jnp, j_fori), argnums=(0, 1, 2)))(x, c, t, n, m)
    for g, w, name in zip(got, want, ("x", "c", "t")):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12, err_msg=f"d/d{name}")
    cts = jax.vjp(f, x, c, t, n, m)[1](1.0)
    assert cts[3].dtype == jax.dtypes.float0 and cts[4].dtype == jax.dtypes.float0
    both = qt.to_jax(lambda x: (qt.sum(x * x), qt.argmax(x)))   # an integer output too
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(lambda x: both(x)[0]))(x)), 2 * x, rtol=1e-15)


def test_index_error_surfaces_as_a_jax_error_naming_the_op(rng):
    bad = qt.to_jax(lambda x: x[qt.asarray(np.array([0, 10]))])
    with pytest.raises(Exception, match=r"qtrace.*gather.*index 10 is out of bounds") as info:
        jax.block_until_ready(jax.jit(bad)(jnp.ones(3)))
    assert "test_jax_interop.py" in str(info.value)   # the user's line that recorded it


def test_shape_errors_raise_at_trace_time_with_qtraces_message():
    f = qt.to_jax(lambda x, y: x + y)
    with pytest.raises(ValueError, match="broadcast"):
        jax.jit(f).lower(jnp.ones(3), jnp.ones(4))


def test_shard_map_over_8_host_devices():
    """Each shard runs the qtrace call on its block; values and gradients equal one device."""
    script = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp
        from jax.sharding import Mesh, PartitionSpec as P
        jax.config.update("jax_enable_x64", True)
        import qtrace as qt
        assert len(jax.devices()) == 8
        step = qt.to_jax(lambda u: u + 0.1 * qt.tanh(u) * qt.sin(u))
        mesh = Mesh(np.array(jax.devices()), ("x",))
        sharded = jax.shard_map(step, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
        u = np.random.default_rng(0).standard_normal(8 * 16)
        got = np.asarray(jax.jit(sharded)(u))
        np.testing.assert_allclose(got, np.asarray(step(u)), rtol=1e-15)
        loss = lambda v: jnp.sum(sharded(v) ** 2)
        g = np.asarray(jax.jit(jax.grad(loss))(u))
        g1 = np.asarray(jax.grad(lambda v: jnp.sum(step(v) ** 2))(u))
        np.testing.assert_allclose(g, g1, rtol=1e-13)
        print("ok")
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


def test_dlpack_between_qtrace_and_jax_is_zero_copy(rng):
    """Both ways without a copy for 64-byte aligned memory (qtrace aligns arrays of 16 KB and
    more; JAX copies smaller, 16-byte aligned ones on import)."""
    x = jnp.asarray(rng.random(4096))
    t = qt.from_dlpack(x)
    assert t.numpy().ctypes.data == x.unsafe_buffer_pointer()
    y = qt.sin(t) * 1.5
    y.numpy()
    back = jax.dlpack.from_dlpack(y)
    assert back.unsafe_buffer_pointer() == y.numpy().ctypes.data
    np.testing.assert_allclose(np.asarray(back), np.sin(np.asarray(x)) * 1.5, rtol=1e-15)


class _State:
    """A container registered with JAX (not a tuple, list or dict)."""

    def __init__(self, pos, vel):
        self.pos, self.vel = pos, vel


jax.tree_util.register_pytree_node(_State, lambda s: ((s.pos, s.vel), None), lambda _, c: _State(*c))


def test_containers_registered_with_jax_flatten_the_same_in_qt_jit_and_to_jax(fusion, rng):
    """Pytrees go through jax.tree_util once JAX is imported: a user's JAX-registered state
    class is a container (not a leaf) for qt.jit, qt.grad and qt.to_jax alike."""
    def step(s, dt):
        return _State(s.pos + dt * s.vel, s.vel * 0.5 - dt * qt.sin(s.pos))
    p, v = rng.standard_normal(9), rng.standard_normal(9)
    want_pos, want_vel = p + 0.1 * v, v * 0.5 - 0.1 * np.sin(p)
    for run in (qt.jit(step), qt.to_jax(step), jax.jit(qt.to_jax(step))):
        out = run(_State(p, v), 0.1)
        assert isinstance(out, _State)
        np.testing.assert_allclose(np.asarray(out.pos), want_pos, rtol=1e-13)
        np.testing.assert_allclose(np.asarray(out.vel), want_vel, rtol=1e-13)
    g = qt.grad(lambda s: qt.sum(step(s, 0.1).vel ** 2))(_State(qt.asarray(p), qt.asarray(v)))
    assert isinstance(g, _State)
    np.testing.assert_allclose(g.pos.numpy(), 2 * want_vel * (-0.1 * np.cos(p)), rtol=1e-12)
    np.testing.assert_allclose(g.vel.numpy(), 2 * want_vel * 0.5, rtol=1e-12)
