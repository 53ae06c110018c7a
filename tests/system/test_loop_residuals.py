"""Loop adjoints that push residuals (``qtrace.graph.loops.residuals``): where a loop body's
reverse would recompute transcendental functions of the popped state, the replay pushes
those values instead (B3's ``sin(v)`` and ``cos(v)``) and the reverse body only multiplies.

Which loops do so is checked on the task's instructions; the gradients of bodies that do
(one or two float states, a state read directly beside residuals, an integer state, a
``while_loop``, float32) and of bodies that do not (no transcendental function; more
residuals than the stack words allowed) are compared with derivatives of a NumPy
float64 forward by the complex step (every element's loop is independent, so one
perturbation of all elements gives every partial derivative), with zero-trip elements.
Fusion on and off, every device.
"""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt
from qtrace.graph.instrs import walk
from qtrace.graph.plan import build_plan

TRIG = {"sin", "cos", "tan", "exp", "tanh", "log"}


def _b3(m, v, c):
    return m.sin(v) * c + 0.5 * v


def _two_states(m, s, c):
    u, w = s
    return u * m.cos(w) + 0.1 * c, w + 0.3 * m.tanh(u) * c


def _direct_and_residual(m, s, c):
    v, w = s   # the reverse reads v and w themselves, and sin(v), cos(v)
    return m.sin(v) * w * 0.5 + c * v, w * v * 0.3 + 1.0


def _polynomial(m, v, c):
    return v * v * c * 0.25 + 0.5 * v


def _many_functions(m, v, c):
    return m.sin(v) * c + m.cos(v) * c * c + m.exp(0.1 * v) + 0.5 * m.tanh(v)


BODIES = {"b3": (_b3, 1), "two_states": (_two_states, 2), "direct": (_direct_and_residual, 2),
          "polynomial": (_polynomial, 1), "many": (_many_functions, 1)}


def _numpy_forward(body, states, c, n):
    """Every element's loop in float64, masked per trip; the states after ``n[i]`` trips."""
    states = [s.astype(np.complex128) for s in states]
    for t in range(int(n.max(initial=0))):
        live = t < n
        new = body(np, states[0] if len(states) == 1 else tuple(states), c)
        new = (new,) if len(states) == 1 else new
        states = [np.where(live, b, a) for a, b in zip(states, new)]
    return states


def _inputs(rng, size, states, dtype=np.float64):
    x = [rng.uniform(-1, 1, size).astype(dtype) for _ in range(states)]
    c = rng.uniform(0.5, 1.5, size).astype(dtype)
    n = rng.integers(0, 9, size)
    n[: size // 10] = 0
    return x, c, n


def _loss(body, states, n):
    def loss(*args):
        *x, c = args
        init = x[0] if states == 1 else tuple(x)
        out = qt.fori_loop(0, n, lambda i, s: body(qt, s, c), init)
        return sum(qt.sum(o) for o in ((out,) if states == 1 else out))
    return loss


def _complex_step(body, x, c, n, h=1e-30):
    """d sum(outputs) / d (each x, c), per element, by the complex step in float64 (every
    body here is analytic: ``Im f(x + ih) / h``, exact to rounding)."""
    def total(xs, cc):
        return sum(_numpy_forward(body, xs, cc, n)).imag / h
    out = [total([a + 1j * h * (j == k) for j, a in enumerate(x)], c + 0j) for k in range(len(x))]
    out.append(total([a + 0j for a in x], c + 1j * h))
    return out


def _loop_vjps(grads, fusion):
    nodes = tuple(g._node for g in grads)
    return [i for t in build_plan(nodes, fusion).tasks for i in walk(t.instrs) if i.kind == "loop_vjp"]


@pytest.mark.parametrize("name,residual_dts", [
    ("b3", ("<f8", "<f8")), ("polynomial", ()), ("many", ())])
def test_which_loops_push_residuals(name, residual_dts, fusion, rng):
    """B3 pushes sin(v) and cos(v) and its reverse computes no transcendental function; a
    polynomial body pushes its state; a body whose reverse needs more values than twice
    the state's stack words plus one pushes its state too."""
    body, states = BODIES[name]
    x, c, n = _inputs(rng, 64, states)
    args = [qt.asarray(a) for a in x + [c]]
    grads = qt.grad(_loss(body, states, qt.asarray(n)), argnums=tuple(range(states + 1)))(*args)
    (vjp,) = _loop_vjps(grads, fusion)
    assert vjp.residuals == residual_dts
    reverse_ops = {i.prim for i in vjp.reverse.instrs if i.kind == "op"}
    if residual_dts:
        assert not reverse_ops & TRIG, reverse_ops
        assert vjp.pushed == tuple(range(vjp.n_state, vjp.n_state + len(residual_dts)))
        assert len(vjp.body.outputs) == vjp.n_state + len(residual_dts)
    else:
        assert reverse_ops & TRIG or name == "polynomial"
        assert all(k < vjp.n_state for k in vjp.pushed)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_gradients_match_complex_step_derivatives(name, fusion, rng):
    body, states = BODIES[name]
    x, c, n = _inputs(rng, 257, states)
    args = [qt.asarray(a) for a in x + [c]]
    got = qt.grad(_loss(body, states, qt.asarray(n)), argnums=tuple(range(states + 1)))(*args)
    want = _complex_step(body, x, c, n)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-10, atol=1e-12, err_msg=f"{name}: argument {k}")


def test_direct_state_reads_and_residuals_share_a_row(fusion, rng):
    """A body whose reverse reads both states and sin(v), cos(v): the row holds the two
    states and the two residuals."""
    body, states = BODIES["direct"]
    x, c, n = _inputs(rng, 64, states)
    args = [qt.asarray(a) for a in x + [c]]
    grads = qt.grad(_loss(body, states, qt.asarray(n)), argnums=(0, 1, 2))(*args)
    (vjp,) = _loop_vjps(grads, fusion)
    assert vjp.residuals and set(vjp.pushed) >= {0, 1}, (vjp.residuals, vjp.pushed)


def test_while_loop_with_an_integer_state(fusion, rng):
    """``while i < n: v = 0.9 v + sin(v) c`` (state (v, i)): residuals beside an integer
    state that the condition reads."""
    size = 200
    x, c, n = _inputs(rng, size, 1)
    qn = qt.asarray(n)

    def loss(x, c):
        v, _ = qt.while_loop(lambda s: s[1] < qn, lambda s: (0.9 * s[0] + qt.sin(s[0]) * c, s[1] + 1),
                             (x, qt.zeros(size, dtype=qt.int64)))
        return qt.sum(v)
    gx, gc = qt.grad(loss, argnums=(0, 1))(qt.asarray(x[0]), qt.asarray(c))
    (vjp,) = _loop_vjps((gx, gc), fusion)
    assert vjp.residuals == ("<f8", "<f8")
    want = _complex_step(lambda m, v, c: 0.9 * v + m.sin(v) * c, x, c, n)
    np.testing.assert_allclose(gx.numpy(), want[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gc.numpy(), want[1], rtol=1e-10, atol=1e-12)


def test_a_mask_is_recomputed_beside_float_residuals(fusion, rng):
    """``where(v > 0, sin v, cos v) * c + v / 2`` in float32: the mask is no residual (not a
    float): the reverse body recomputes it from the state, which the replay pushes beside
    the three float residuals; the gradient within float32 rounding of float64's."""
    def body(m, v, c):
        return m.where(m.real(v) > 0, m.sin(v), m.cos(v)) * c + 0.5 * v
    x, c, n = _inputs(rng, 1000, 1, np.float32)
    gx, gc = qt.grad(_loss(body, 1, qt.asarray(n)), argnums=(0, 1))(qt.asarray(x[0]), qt.asarray(c))
    (vjp,) = _loop_vjps((gx, gc), fusion)
    assert vjp.residuals == ("<f4",) * 3 and 0 in vjp.pushed, (vjp.residuals, vjp.pushed)
    want = _complex_step(body, [x[0].astype(np.float64)], c.astype(np.float64), n)
    scale = max(np.abs(want[0]).max(), np.abs(want[1]).max())
    assert np.abs(gx.numpy() - want[0]).max() / scale < 1e-5
    assert np.abs(gc.numpy() - want[1]).max() / scale < 1e-5


def test_float32_b3(fusion, rng):
    """float32 states and residuals (a GPU's interleaved one-word stacks): the gradient
    within float32 rounding of the float64 reference."""
    x, c, n = _inputs(rng, 1000, 1, np.float32)
    n[-1] = 40
    gx, gc = qt.grad(_loss(_b3, 1, qt.asarray(n)), argnums=(0, 1))(qt.asarray(x[0]), qt.asarray(c))
    (vjp,) = _loop_vjps((gx, gc), fusion)
    assert vjp.residuals == ("<f4", "<f4")
    want = _complex_step(_b3, [x[0].astype(np.float64)], c.astype(np.float64), n)
    scale = max(np.abs(want[0]).max(), np.abs(want[1]).max())
    assert np.abs(gx.numpy() - want[0]).max() / scale < 1e-5
    assert np.abs(gc.numpy() - want[1]).max() / scale < 1e-5


def test_large_arguments_take_the_exact_trig_path(fusion, rng):
    """States of a million and more: ``sin``'s fast reduction does not cover them (the CPU
    re-runs such a kernel with the exact reduction), and the residuals pushed are those
    exact values."""
    x, c, n = _inputs(rng, 300, 1)
    x = [x[0] * 3e6]
    got = qt.grad(_loss(_b3, 1, qt.asarray(n)), argnums=(0, 1))(qt.asarray(x[0]), qt.asarray(c))
    want = _complex_step(_b3, x, c, n)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-9, atol=1e-9)
