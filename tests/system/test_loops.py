"""Per-element loops (SPEC §4): ``qt.fori_loop`` / ``qt.while_loop``, forward and reverse.

Forward values are checked against NumPy reference loops written as masked iterations
(every element steps while its own count or condition says so). Gradients are checked
against float64 references: hand-derived adjoints, central finite differences (loops
are per-element, so one perturbation of every element at once gives every partial
derivative), and JAX running the same body in a ``fori_loop`` to the largest trip count
with ``jnp.where(active, step(v), v)`` masking (the derivative of the same program).

Then the adstack (DESIGN "Reverse mode and the adstack"): how its depth is sized
(``adstack_host_sized`` / ``adstack_reducer_dispatches`` / ``adstack_reducer_hits``; writes
behind qtrace's back and buffer versions: ``test_adstack_versions.py``), how much
memory it takes (``adstack_bytes`` = workers x depth x row bytes, never N x depth), the
overflow diagnostic, and the ``qt.TracerError`` for bodies that mix elements.
Everything runs with fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt
from qtrace.devices.cpu import PARALLEL_MIN_WORK
from qtrace.kernels.lowering import CPU as CPU_LOWERING

jax.config.update("jax_enable_x64", True)


# --- reference loops -----------------------------------------------------------------
def np_fori(lo, hi, body, init):
    """NumPy per-element ``fori_loop``: element e runs ``body`` for i in [lo[e], hi[e])."""
    lo, hi = np.asarray(lo), np.asarray(hi)
    state = [np.array(s, copy=True) for s in init]
    shape = np.broadcast_shapes(lo.shape, hi.shape, *(s.shape for s in state))
    lo, hi = np.broadcast_to(lo, shape), np.broadcast_to(hi, shape)
    state = [np.broadcast_to(s, shape).copy() for s in state]
    steps = int(np.max(hi - lo, initial=0))
    for t in range(steps):
        i = lo + t
        active = i < hi
        new = body(i, state)
        state = [np.where(active, n, s).astype(s.dtype) for n, s in zip(new, state)]
    return state


def np_while(cond, body, init, max_steps=10_000):
    state = [np.array(s, copy=True) for s in init]
    for _ in range(max_steps):
        active = cond(state)
        if not active.any():
            return state
        new = body(state)
        state = [np.where(active, n, s).astype(s.dtype) for n, s in zip(new, state)]
    raise AssertionError("reference while loop did not finish")


def jax_fori(lo, hi, body, init, steps):
    """The same loop in JAX, to a static ``steps`` with masking: differentiable."""
    def step(t, s):
        i = lo + t
        active = i < hi
        new = body(i, s)
        return tuple(jnp.where(active, n, o) for n, o in zip(new, s))
    return jax.lax.fori_loop(0, steps, step, tuple(init))


def jax_while(cond, body, init, steps):
    def step(t, s):
        active = cond(s)
        new = body(s)
        return tuple(jnp.where(active, n, o) for n, o in zip(new, s))
    return jax.lax.fori_loop(0, steps, step, tuple(init))


def assert_close(got, want, rtol=1e-10, atol=1e-12, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    bad = ~(np.abs(got - want) <= atol * scale + rtol * np.abs(want))
    if bad.any():
        idx = np.flatnonzero(bad)[:8]
        raise AssertionError(f"{what}: differ at {idx.tolist()}\n  qtrace {got.ravel()[idx]}\n"
                             f"  want   {want.ravel()[idx]}")


def grads(f, args, argnums):
    """qtrace gradients of scalar ``f``, evaluated together (one plan, one adstack)."""
    g = qt.grad(f, argnums=argnums)(*args)
    g = g if isinstance(g, tuple) else (g,)
    qt.eval(*g)
    return [gi.numpy() for gi in g]


# --- B3: v = x[i]; repeat n[i] times: v = sin(v) * c[i] + 0.5 * v ---------------------
def b3_qt(n):
    def loss(x, c):
        return qt.sum(qt.fori_loop(0, n, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
    return loss


def b3_numpy(x, c, n):
    """Forward in float64 and the hand-derived adjoint of ``sum(out)``."""
    vs = [x.copy()]
    for k in range(int(n.max(initial=0))):
        v = vs[-1]
        vs.append(np.where(k < n, np.sin(v) * c + 0.5 * v, v))
    gv, gc = np.ones_like(x), np.zeros_like(x)
    for k in reversed(range(len(vs) - 1)):
        v, active = vs[k], k < n
        gc = gc + np.where(active, gv * np.sin(v), 0.0)
        gv = np.where(active, gv * (np.cos(v) * c + 0.5), gv)
    return vs[-1], gv, gc


def b3_finite_differences(x, c, n, h=1e-5):
    """Central differences of B3's ``sum(out)`` in x and c, each Richardson-extrapolated
    from steps h and 2h, with a per-element error bound: |D(h) - D(2h)| (three times
    D(h)'s truncation error, far above the extrapolation's) plus the rounding of the
    differences. Returns ``[(estimate, bound) for x, for c]``."""
    def diff(wrt, step):
        lo, hi = [x, c], [x, c]
        lo[wrt], hi[wrt] = lo[wrt] - step, hi[wrt] + step
        f_hi, f_lo = b3_numpy(*hi, n)[0], b3_numpy(*lo, n)[0]
        return (f_hi - f_lo) / (2 * step), np.finfo(float).eps * (np.abs(f_hi) + np.abs(f_lo)) / step
    out = []
    for wrt in (0, 1):
        (d1, r1), (d2, r2) = diff(wrt, h), diff(wrt, 2 * h)
        out.append(((4 * d1 - d2) / 3, np.abs(d1 - d2) + 4 * r1 + r2))
    return out


def assert_matches_finite_differences(got, fd, what, rtol=1e-6, atol=1e-7):
    """``got`` agrees with a ``b3_finite_differences`` estimate within its error bound."""
    want, bound = fd
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    bad = ~(np.abs(got - want) <= atol * scale + rtol * np.abs(want) + bound)
    if bad.any():
        idx = np.flatnonzero(bad)[:8]
        raise AssertionError(f"{what}: differ at {idx.tolist()}\n  qtrace {got.ravel()[idx]}\n"
                             f"  want   {want.ravel()[idx]} ± {bound.ravel()[idx]}")


def b3_jax(x, c, n):
    steps = int(n.max(initial=0))

    def loss(x, c):
        (v,) = jax_fori(0, jnp.asarray(n), lambda i, s: (jnp.sin(s[0]) * c + 0.5 * s[0],), (x,), steps)
        return jnp.sum(v)
    return [np.asarray(g) for g in jax.jit(jax.grad(loss, argnums=(0, 1)))(x, c)]


def _counts(kind: str, rng, n: int) -> np.ndarray:
    if kind == "zeros":
        return np.zeros(n, np.int64)
    if kind == "all_equal":
        return np.full(n, 4, np.int64)
    if kind == "outlier":
        out = rng.integers(0, 6, n)
        out[rng.integers(n)] = 2000
        return out
    return rng.integers(0, 8, n)  # "random", zeros included


COUNT_KINDS = ["zeros", "all_equal", "outlier", "random"]


# --- forward ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", COUNT_KINDS)
def test_fori_per_element_trip_counts(kind, fusion, rng):
    n = _counts(kind, rng, 37)
    x, c = rng.uniform(-2, 2, 37), rng.uniform(0.5, 1.5, 37)
    got = qt.fori_loop(0, qt.asarray(n), lambda i, v: qt.sin(v) * qt.asarray(c) + 0.5 * v, qt.asarray(x))
    want = np_fori(0, n, lambda i, s: [np.sin(s[0]) * c + 0.5 * s[0]], [x])[0]
    assert got.shape == (37,) and got.dtype == np.float64
    assert_close(got.numpy(), want, what=f"fori {kind}")


def test_fori_python_int_bounds_and_counter(fusion, rng):
    x = rng.uniform(-1, 1, (3, 5))
    got = qt.fori_loop(2, 7, lambda i, v: v * 0.5 + qt.cos(v) * i, qt.asarray(x))
    want = np_fori(2, 7, lambda i, s: [s[0] * 0.5 + np.cos(s[0]) * i], [x])[0]
    assert_close(got.numpy(), want, what="python-int bounds")
    empty = qt.fori_loop(5, 2, lambda i, v: v + 1.0, qt.asarray(x))  # lower > upper: no iteration
    assert_close(empty.numpy(), x, what="empty range")


def test_fori_tensor_lower_and_upper_broadcast(fusion, rng):
    """Per-row lower bounds, per-column upper bounds: trip counts broadcast with the state."""
    lo = rng.integers(0, 4, (4, 1))
    hi = rng.integers(0, 8, (6,))
    x = rng.uniform(-1, 1, (4, 6))
    got = qt.fori_loop(qt.asarray(lo), qt.asarray(hi), lambda i, v: v * 0.9 + i * 0.01, qt.asarray(x))
    want = np_fori(lo, hi, lambda i, s: [s[0] * 0.9 + i * 0.01], [x])[0]
    assert_close(got.numpy(), want, what="tensor lower/upper")


def test_pytree_state_of_float_and_int(fusion, rng):
    n = rng.integers(0, 6, 11)
    state = {"v": rng.uniform(-1, 1, 11).astype(np.float32), "k": np.zeros(11, np.int32)}

    def body(i, s):
        return {"v": s["v"] * 0.5 + qt.astype(s["k"], qt.float32), "k": s["k"] + 2}
    out = qt.fori_loop(0, qt.asarray(n), body, {k: qt.asarray(v) for k, v in state.items()})
    assert set(out) == {"v", "k"}
    assert out["v"].dtype == np.float32 and out["k"].dtype == np.int32
    v, k = np_fori(0, n, lambda i, s: [s[0] * np.float32(0.5) + s[1].astype(np.float32), s[1] + 2],
                   [state["v"], state["k"]])
    np.testing.assert_array_equal(out["k"].numpy(), k)
    assert_close(out["v"].numpy(), v, rtol=1e-6, what="float32 leaf")


def test_nested_loops_forward(fusion, rng):
    """The inner trip count depends on the outer counter and on another tensor."""
    n, m = rng.integers(0, 5, 13), rng.integers(0, 3, 13)
    x, c = rng.uniform(-1, 1, 13), rng.uniform(0.5, 1.5, 13)
    qm, qc = qt.asarray(m), qt.asarray(c)

    def outer(i, v):
        return qt.fori_loop(0, qm + i, lambda j, u: qt.sin(u) * qc + 0.1 * u + 0.01 * j, v)
    got = qt.fori_loop(0, qt.asarray(n), outer, qt.asarray(x))

    def np_outer(i, s):
        return np_fori(0, m + i, lambda j, u: [np.sin(u[0]) * c + 0.1 * u[0] + 0.01 * j], s)
    want = np_fori(0, n, np_outer, [x])[0]
    assert_close(got.numpy(), want, what="nested")


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_nested_while_and_fori_reading_the_enclosing_body(jitted, fusion, rng):
    """Inside a fori body: a while loop whose condition reads the outer counter and whose
    body gathers a table at an index carried by the outer state, then a fori whose trip
    count, and body, read the outer counter and the outer state. N = 1000 elements (the
    blocked-lanes path), bitwise against a scalar float64 reference."""
    size = 1000
    n, m = rng.integers(0, 5, size), rng.integers(0, 3, size)
    x, c = rng.uniform(-1, 1, size), rng.uniform(0.5, 1.5, size)
    table, k0 = rng.uniform(-1, 1, 7), rng.integers(0, 7, size)
    qm, qc, qtable = qt.asarray(m), qt.asarray(c), qt.asarray(table)

    def outer(i, s):
        v, k = s
        w = qt.while_loop(lambda u: u < 2.0 + 0.1 * i,
                          lambda u: u * 1.5 + 0.1 + qt.abs(qtable[k]), qt.abs(v) + 0.1)
        v2 = qt.fori_loop(0, qm + i, lambda j, u: qt.sin(u) * qc + 0.1 * u + 0.01 * j + 0.001 * i * v, v)
        return v2 + 0.01 * w, (k * 3 + 1) % 7

    def f(x, k):
        return qt.fori_loop(0, qt.asarray(n), outer, (x, k))
    got_v, got_k = (qt.jit(f) if jitted else f)(qt.asarray(x), qt.asarray(k0))
    want_v, want_k = x.copy(), k0.copy()
    for e in range(size):
        v, k = x[e], k0[e]
        for i in range(n[e]):
            w = abs(v) + 0.1
            while w < 2.0 + 0.1 * i:
                w = w * 1.5 + 0.1 + abs(table[k])
            u = v
            for j in range(m[e] + i):
                u = np.sin(u) * c[e] + 0.1 * u + 0.01 * j + 0.001 * i * v
            v, k = u + 0.01 * w, (k * 3 + 1) % 7
        want_v[e], want_k[e] = v, k
    np.testing.assert_array_equal(got_k.numpy(), want_k)
    assert_close(got_v.numpy(), want_v, rtol=1e-13, atol=1e-15, what="nested while + fori")


def test_inner_loop_gathering_from_the_enclosing_state_is_a_tracer_error(fusion):
    def outer(i, v):
        return qt.fori_loop(0, 3, lambda j, u: u + v[j % 3], v)
    with pytest.raises(qt.TracerError, match="inner loop body gathers"):
        qt.fori_loop(0, 2, outer, qt.ones(3))


def _gather_body(t):
    size = t.shape[0]
    return lambda i, s: (s[0] * 0.9 + t[s[1]], (s[1] * 3 + 2) % size)


def test_body_gathers_from_another_tensor(fusion, rng):
    n = rng.integers(0, 9, 17)
    x, table = rng.uniform(-1, 1, 17), rng.uniform(-1, 1, 7)
    idx = rng.integers(0, 7, 17)
    v, k = qt.fori_loop(0, qt.asarray(n), _gather_body(qt.asarray(table)), (qt.asarray(x), qt.asarray(idx)))
    wv, wk = np_fori(0, n, lambda i, s: list(_gather_body(table)(i, s)), [x, idx])
    np.testing.assert_array_equal(k.numpy(), wk)
    assert_close(v.numpy(), wv, what="gathering body")


def test_many_elements_not_divisible_among_workers(fusion, rng):
    qt.config.num_threads = 2
    size = 1_000_003
    n = rng.integers(0, 4, size)
    x = rng.uniform(-1, 1, size)
    got = qt.fori_loop(0, qt.asarray(n), lambda i, v: v * 0.5 + 1.0, qt.asarray(x)).numpy()
    want = x * 0.5 ** n + 2.0 * (1.0 - 0.5 ** n)
    assert_close(got, want, what="1_000_003 elements")
    assert_close(got[-3:], want[-3:], what="the last elements (the remainder of the split)")


def newton_qt(a):
    return qt.while_loop(lambda y: qt.abs(y * y - a) > 1e-12 * a, lambda y: 0.5 * (y + a / y), a * 1.0)


def newton_np(a):
    return np_while(lambda s: np.abs(s[0] * s[0] - a) > 1e-12 * a, lambda s: [0.5 * (s[0] + a / s[0])],
                    [a * 1.0])[0]


def bisect_body(xp, a):
    def body(s):
        lo, hi = s[0], s[1]
        mid = 0.5 * (lo + hi)
        above = mid * mid * mid > a
        return (xp.where(above, lo, mid), xp.where(above, mid, hi))
    return body


def bisect_cond(s):
    return s[1] - s[0] > 1e-3


def bisect_qt(lo, hi, a):
    lo, hi = qt.while_loop(bisect_cond, bisect_body(qt, a), (lo, hi))
    return 0.5 * (lo + hi)


def bisect_np(lo, hi, a):
    lo, hi = np_while(bisect_cond, lambda s: list(bisect_body(np, a)(s)), [lo, hi])
    return 0.5 * (lo + hi)


def test_while_loop_newton_sqrt(fusion, rng):
    a = rng.uniform(0.5, 50.0, 19)
    got = newton_qt(qt.asarray(a)).numpy()
    assert_close(got, newton_np(a), what="newton vs reference loop")
    assert_close(got, np.sqrt(a), rtol=1e-14, what="newton vs sqrt")


def test_while_loop_bisection_per_element_counts(fusion, rng):
    a = rng.uniform(0.5, 8.0, 19)
    lo, hi = np.zeros(19), np.cbrt(a) * rng.uniform(1.5, 100.0, 19)  # different trip counts
    got = bisect_qt(qt.asarray(lo), qt.asarray(hi), qt.asarray(a)).numpy()
    assert_close(got, bisect_np(lo, hi, a), what="bisection vs reference loop")
    assert np.all(np.abs(got - np.cbrt(a)) < 1e-3)


def test_while_loop_false_at_start_and_pytree(fusion, rng):
    x = np.array([1.0, 5.0, 40.0, 0.5])
    v, k = qt.while_loop(lambda s: s[0] < 10.0, lambda s: (s[0] * 2.0, s[1] + 1),
                         (qt.asarray(x), qt.zeros(4, qt.int64)))
    np.testing.assert_array_equal(v.numpy(), [16.0, 10.0, 40.0, 16.0])
    np.testing.assert_array_equal(k.numpy(), [4, 1, 0, 5])


@pytest.mark.parametrize("size", [20, 1517, (37, 41)])
def test_live_values_feeding_a_loop_are_computed_before_it(size, fusion, rng):
    """A loop whose first state is computed by its own task (``start``) and whose condition
    reads a value another task computes (``limit``), both still held by the program (so
    both stored): the loop's task runs after ``limit``'s — it was placed by ``start`` and
    read ``limit``'s buffer unwritten (every count wrong, no error). Counts are exact
    (integer-valued floats), so they are compared exactly, as is every live value."""
    x, c = rng.uniform(-1, 1, size), rng.uniform(0.5, 1.5, size)
    gx, gc = qt.asarray(x), qt.asarray(c)
    limit = qt.floor(gc * 100.0)
    start = qt.floor(qt.abs(gx) * 8.0)
    value, count = qt.while_loop(lambda s: s[0] < limit, lambda s: (s[0] * 2.0 + 1.0, s[1] + 1),
                                 (start, qt.zeros(np.shape(x), dtype=qt.int32)))
    want_v, want_k = np_while(lambda s: s[0] < np.floor(c * 100.0), lambda s: [s[0] * 2.0 + 1.0, s[1] + 1],
                              [np.floor(np.abs(x) * 8.0), np.zeros(np.shape(x), np.int32)])
    np.testing.assert_array_equal(count.numpy(), want_k)
    np.testing.assert_array_equal(value.numpy(), want_v)
    np.testing.assert_array_equal(start.numpy(), np.floor(np.abs(x) * 8.0))
    np.testing.assert_array_equal(limit.numpy(), np.floor(c * 100.0))


def test_live_loop_bounds_read_through_a_broadcast_are_computed_before_the_loop(fusion, rng):
    """As above, with per-row trip counts computed by another task and read by the loop
    through a broadcast (a free view, no task of its own): the loop's task waits for the
    task computing them (else it read their buffer unwritten: garbage counts, and with
    counts near 2**62 no end)."""
    x, c = rng.uniform(-1, 1, (40, 37)), rng.uniform(0.5, 1.5, 37)
    gx, gc = qt.asarray(x), qt.asarray(c)
    hi = qt.floor(gc * 5.0).astype(qt.int64)
    start = qt.floor(qt.abs(gx) * 8.0)
    out = qt.fori_loop(0, hi, lambda i, v: v * 0.5 + 1.0, start)
    want_hi, want_start = np.floor(c * 5.0).astype(np.int64), np.floor(np.abs(x) * 8.0)
    want = np_fori(0, want_hi, lambda i, s: [s[0] * 0.5 + 1.0], [want_start])[0]
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_array_equal(hi.numpy(), want_hi)
    np.testing.assert_array_equal(start.numpy(), want_start)


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_complex_loop_state_forward_and_gradient(dtype, fusion, rng):
    """Complex leaves of the loop state (carried as their real and imaginary parts) beside a
    real one: ``fori_loop`` with per-element counts and ``while_loop`` (with a count beside)
    against NumPy loops; the gradient of a real loss through the complex loop, w.r.t. the
    initial state's parts and to complex values the body reads (per element, and a 0-d one
    every element reads), against JAX running the same body masked to the largest count."""
    size = 23
    cdt = np.dtype(dtype)
    rtol = 1e-10 if cdt == np.complex128 else 2e-5
    z0 = (rng.standard_normal(size) + 1j * rng.standard_normal(size)).astype(cdt)
    w = (0.6 + 0.5j) * np.exp(1j * rng.uniform(0, 1, size))
    n = rng.integers(0, 9, size)
    x0 = rng.uniform(-1, 1, size)
    wq = qt.asarray(w.astype(cdt))

    def body(i, s):
        z, x = s
        return z * wq + x * 0.25, x * 0.5 + qt.real(z) * 0.125
    z, x = qt.fori_loop(0, qt.asarray(n), body, (qt.asarray(z0), qt.asarray(x0)))
    assert z.dtype == cdt and x.dtype == np.float64
    with pytest.raises(TypeError, match="changes the dtype of state leaf 1 from float64 to complex"):
        qt.fori_loop(0, 2, lambda i, s: (s[0], s[0]), (qt.asarray(z0), qt.asarray(x0)))
    want_z, want_x = np_fori(0, n, lambda i, s: [s[0] * w.astype(cdt) + s[1] * 0.25,
                                                 s[1] * 0.5 + s[0].real * 0.125], [z0, x0])
    assert_close(z.numpy(), want_z, rtol=rtol, atol=rtol, what="fori complex leaf")
    assert_close(x.numpy(), want_x, rtol=rtol, atol=rtol, what="fori real leaf")

    zw, kw = qt.while_loop(lambda s: qt.abs(s[0]) > 0.1, lambda s: (s[0] * 0.5j, s[1] + 1),
                           (qt.asarray(z0), qt.zeros(size, dtype=qt.int64)))
    want_w, want_k = np.array(z0), np.zeros(size, np.int64)
    while (going := np.abs(want_w) > 0.1).any():
        want_w, want_k = np.where(going, want_w * 0.5j, want_w).astype(cdt), want_k + going
    assert_close(zw.numpy(), want_w, rtol=rtol, atol=rtol, what="while complex state")
    np.testing.assert_array_equal(kw.numpy(), want_k)

    if cdt == np.complex64:
        return
    steps = int(n.max())

    shift = 0.3 - 0.2j   # a 0-d complex tensor read by every element (broadcast in the body)

    def loss(xp, loop, re, im, wr, wi, s):
        ww, sh = wr + 1j * wi, s[0] + 1j * s[1]

        def step(i, st):
            return st[0] * ww + st[1] * 0.25 + sh, st[1] * 0.5 + xp.real(st[0]) * 0.125
        out, _ = loop(step, (re + 1j * im, xp.asarray(x0)))
        return xp.sum(xp.abs(out) ** 2)
    args = (z0.real, z0.imag, w.real, w.imag, np.array([shift.real, shift.imag]))
    got = qt.grad(lambda *a: loss(qt, lambda f, init: qt.fori_loop(0, qt.asarray(n), f, init), *a),
                  argnums=tuple(range(5)))(*(qt.asarray(a) for a in args))
    want = jax.grad(lambda *a: loss(jnp, lambda f, init: jax_fori(0, jnp.asarray(n), f, init, steps), *a),
                    argnums=tuple(range(5)))(*(jnp.asarray(a) for a in args))
    for g, wg, what in zip(got, want, ("z0.real", "z0.imag", "w.real", "w.imag", "shift")):
        assert_close(g.numpy(), np.asarray(wg), rtol=1e-9, atol=1e-11, what=f"d loss / d {what}")

    # a complex table the body gathers from at indices that move with the counter (its
    # gradient was silently zero: gathered by its parts now)
    table = rng.standard_normal(10) + 1j * rng.standard_normal(10)
    idx = rng.integers(0, 10, size)

    def gathered(xp, loop, tr, ti):
        t = tr + 1j * ti
        return xp.sum(xp.real(loop(lambda i, v: v * 0.5 + t[(xp.asarray(idx) + i) % 10] * v + 1.0,
                                   xp.ones(size) + 0j)))
    got = qt.grad(lambda *a: gathered(qt, lambda f, v: qt.fori_loop(0, qt.asarray(n), f, v), *a),
                  argnums=(0, 1))(qt.asarray(table.real), qt.asarray(table.imag))
    want = jax.grad(lambda *a: gathered(jnp, lambda f, v: jax_fori(0, jnp.asarray(n), lambda i, s: (
        f(i, s[0]),), (v,), steps)[0], *a), argnums=(0, 1))(jnp.asarray(table.real), jnp.asarray(table.imag))
    for g, wg, what in zip(got, want, ("real", "imaginary")):
        assert_close(g.numpy(), np.asarray(wg), rtol=1e-9, atol=1e-11, what=f"d loss / d table {what}")


def test_nested_loop_reading_a_smaller_value_per_element(fusion, rng):
    """A loop nested in another's body reading a value of a smaller shape per element: its
    gradient is refused, naming the shapes and the way around (it came out zero, silently);
    broadcast to the loops' shape first, the gradient matches central differences; the
    gradient w.r.t. the state, not asking for that value's, is computed as before."""
    x0, n = rng.uniform(-1, 1, (3, 4)), rng.integers(0, 5, (3, 4))
    w = rng.uniform(-1, 1, (1, 4))

    def loss(w, spread):
        ww = qt.broadcast_to(w, (3, 4)) if spread else w
        body = lambda i, s: qt.fori_loop(0, 2, lambda j, u: qt.cos(u) * ww * 0.7 + 0.2 * u, s)
        return qt.sum(qt.fori_loop(0, qt.asarray(n), body, qt.asarray(x0)) ** 2)
    with pytest.raises(NotImplementedError, match=r"shape \(1, 4\) that a nested loop reads per element "
                                                  r"of shape \(3, 4\).*qt\.broadcast_to"):
        qt.grad(lambda w: loss(w, False))(qt.asarray(w))
    got = qt.grad(lambda w: loss(w, True))(qt.asarray(w)).numpy()
    eps, fd = 1e-6, np.zeros_like(w)
    for k in range(4):
        d = np.zeros_like(w)
        d[0, k] = eps
        fd[0, k] = (float(loss(qt.asarray(w + d), True)) - float(loss(qt.asarray(w - d), True))) / (2 * eps)
    assert_close(got, fd, rtol=1e-6, atol=1e-8, what="d loss / d w, broadcast first")

    # no gradient asked of w: the loops' other gradients are unaffected (no refusal)
    def loss_x(x):
        body = lambda i, s: qt.fori_loop(0, 2, lambda j, u: qt.cos(u) * qt.asarray(w) * 0.7 + 0.2 * u, s)
        return qt.sum(qt.fori_loop(0, qt.asarray(n), body, x) ** 2)
    got = qt.grad(loss_x)(qt.asarray(x0)).numpy()
    fd = np.zeros_like(x0)
    for k in np.ndindex(x0.shape):
        d = np.zeros_like(x0)
        d[k] = eps
        fd[k] = (float(loss_x(qt.asarray(x0 + d))) - float(loss_x(qt.asarray(x0 - d)))) / (2 * eps)
    assert_close(got, fd, rtol=1e-6, atol=1e-8, what="d loss / d x0, w read by the nested loop")


# --- reverse ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", COUNT_KINDS)
def test_b3_gradient(kind, fusion, rng):
    size = 29
    n = _counts(kind, rng, size)
    x, c = rng.uniform(-2, 2, size), rng.uniform(0.5, 1.5, size)
    gx, gc = grads(b3_qt(qt.asarray(n)), (qt.asarray(x), qt.asarray(c)), (0, 1))
    _, hx, hc = b3_numpy(x, c, n)
    assert_close(gx, hx, what="d/dx vs hand-derived")
    assert_close(gc, hc, what="d/dc vs hand-derived")
    jx, jc = b3_jax(x, c, n)
    assert_close(gx, jx, what="d/dx vs JAX")
    assert_close(gc, jc, what="d/dc vs JAX")
    if kind in ("random", "zeros"):  # finite differences: smooth, short loops
        fd_x, fd_c = b3_finite_differences(x, c, n)
        assert_matches_finite_differences(gx, fd_x, "d/dx vs finite differences")
        assert_matches_finite_differences(gc, fd_c, "d/dc vs finite differences")


@pytest.mark.parametrize("size", [29, PARALLEL_MIN_WORK * 4 + 5], ids=["small", "blocked lanes"])
def test_value_and_grad_reads_the_loop_result_from_the_adjoint_replay(size, fusion, rng):
    """``value_and_grad`` of ``sum(loop)``: the adjoint's replay yields the loop's result,
    so the forward loop does not run separately (one loop kernel + the sum), and the value
    is right; ``sum(loop ** 2)`` (cotangent reads the result) keeps the forward loop."""
    n = rng.integers(0, 9, size)
    x, c = rng.uniform(-2, 2, size), rng.uniform(0.5, 1.5, size)
    want_v, hx, hc = b3_numpy(x, c, n)
    f = qt.value_and_grad(b3_qt(qt.asarray(n)), argnums=(0, 1))
    qt.reset_stats()
    value, (gx, gc) = f(qt.asarray(x), qt.asarray(c))
    qt.eval(value, gx, gc)
    if fusion:  # unfused, every wrt marker and broadcast is a task of its own
        assert qt.stats()["tasks_run"] == 2, qt.stats()
    assert_close(value.numpy(), want_v.sum(), what="value")
    assert_close(gx.numpy(), hx, what="d/dx")
    assert_close(gc.numpy(), hc, what="d/dc")

    def squared(x, c):
        return qt.sum(qt.fori_loop(0, qt.asarray(n), lambda i, v: qt.sin(v) * c + 0.5 * v, x) ** 2)
    value, (gx, gc) = qt.value_and_grad(squared, argnums=(0, 1))(qt.asarray(x), qt.asarray(c))
    assert_close(value.numpy(), (want_v ** 2).sum(), what="value of sum(loop ** 2)")
    _, jx, jc = _squared_jax(x, c, n)
    assert_close(gx.numpy(), jx, what="d/dx of sum(loop ** 2)")
    assert_close(gc.numpy(), jc, what="d/dc of sum(loop ** 2)")


def _squared_jax(x, c, n):
    def loss(x, c):
        (v,) = jax_fori(0, jnp.asarray(n), lambda i, s: (jnp.sin(s[0]) * c + 0.5 * s[0],), (x,),
                        int(n.max(initial=0)))
        return jnp.sum(v ** 2)
    return (None,) + tuple(np.asarray(g) for g in jax.grad(loss, argnums=(0, 1))(x, c))


def test_b3_gradient_under_jit(fusion, rng):
    """``qt.jit(qt.grad(...))`` of a loop: same gradient; new data does not retrace."""
    size = 23
    step = qt.jit(qt.grad(lambda x, c, n: b3_qt(n)(x, c), argnums=(0, 1)))
    for _ in range(2):
        n = rng.integers(0, 9, size)
        x, c = rng.uniform(-2, 2, size), rng.uniform(0.5, 1.5, size)
        qt.reset_stats()
        gx, gc = step(qt.asarray(x), qt.asarray(c), qt.asarray(n))
        _, hx, hc = b3_numpy(x, c, n)
        assert_close(gx.numpy(), hx, what="jit d/dx")
        assert_close(gc.numpy(), hc, what="jit d/dc")
    assert qt.stats()["traces"] == 0 and qt.stats()["compiles"] == 0


def test_while_newton_gradient(fusion, rng):
    a = rng.uniform(0.5, 50.0, 19)
    (g,) = grads(lambda a: qt.sum(newton_qt(a) * 2.0), (qt.asarray(a),), (0,))
    assert_close(g, 1.0 / np.sqrt(a), rtol=1e-8, what="d sqrt(a)/da")
    h = 1e-6 * a
    fd = (newton_np(a + h) - newton_np(a - h)) * 2.0 / (2 * h)
    assert_close(g, fd, rtol=1e-6, what="vs finite differences")


def test_while_bisection_gradient(fusion, rng):
    """The derivative of the bisection program: affine in the bracket, flat in ``a``.

    Finite differences with a step far below the final bracket width see the same
    decisions, hence the same derivative; JAX (masked loop) agrees.
    """
    size = 19
    a = rng.uniform(0.5, 8.0, size)
    lo, hi = np.zeros(size), np.cbrt(a) * rng.uniform(1.5, 100.0, size)
    w = rng.normal(size=size)
    got = grads(lambda lo, hi, a: qt.sum(bisect_qt(lo, hi, a) * qt.asarray(w)),
                (qt.asarray(lo), qt.asarray(hi), qt.asarray(a)), (0, 1, 2))

    def jloss(lo, hi, a):
        s = jax_while(bisect_cond, bisect_body(jnp, a), (lo, hi), 64)
        return jnp.sum(0.5 * (s[0] + s[1]) * w)
    want = jax.jit(jax.grad(jloss, argnums=(0, 1, 2)))(lo, hi, a)
    for i, (g, j) in enumerate(zip(got, want)):
        assert_close(g, np.asarray(j), what=f"d/darg{i} vs JAX")
    args = [lo, hi, a]
    for i in range(3):
        h = 1e-9 * np.maximum(1.0, np.abs(args[i]))
        plus, minus = list(args), list(args)
        plus[i], minus[i] = args[i] + h, args[i] - h
        fd = (bisect_np(*plus) - bisect_np(*minus)) * w / (2 * h)
        assert_close(got[i], fd, rtol=1e-5, atol=1e-5, what=f"d/darg{i} vs finite differences")


@pytest.mark.parametrize("size", [13, PARALLEL_MIN_WORK * 4 + 1], ids=["small", "threads"])
def test_nested_loops_gradient(size, fusion, rng):
    n, m = rng.integers(0, 5, size), rng.integers(0, 3, size)
    x, c = rng.uniform(-1, 1, size), rng.uniform(0.5, 1.5, size)
    qm, qn = qt.asarray(m), qt.asarray(n)

    def loss(x, c):
        def outer(i, v):
            return qt.fori_loop(0, qm + i, lambda j, u: qt.sin(u) * c + 0.1 * u, v)
        return qt.sum(qt.fori_loop(0, qn, outer, x))
    got = grads(loss, (qt.asarray(x), qt.asarray(c)), (0, 1))
    steps = int(n.max(initial=0))

    def jloss(x, c):
        def outer(i, s):
            return jax_fori(0, jnp.asarray(m) + i, lambda j, u: (jnp.sin(u[0]) * c + 0.1 * u[0],), s,
                            steps + 3)
        return jnp.sum(jax_fori(0, jnp.asarray(n), outer, (x,), steps)[0])
    want = jax.jit(jax.grad(jloss, argnums=(0, 1)))(x, c)
    assert_close(got[0], np.asarray(want[0]), what="nested d/dx vs JAX")
    assert_close(got[1], np.asarray(want[1]), what="nested d/dc vs JAX")


def test_nested_while_in_fori_and_fori_in_while_gradients(fusion, rng):
    """Reverse through a while loop nested in a fori body (reading the outer counter and
    state, carrying an int) and through a fori nested in a while body; float64 vs JAX."""
    size = 257
    n, m = rng.integers(0, 4, size), rng.integers(0, 3, size)
    x, c = rng.uniform(0.1, 1.0, size), rng.uniform(0.5, 1.5, size)

    def inner_while(xp, loop, i, v, c):
        def body(s):
            u, k = s
            return u * 0.7 + 0.05 * c * v + 0.01 * i + 0.3, k + 1
        return loop(lambda s: s[0] < 1.0 + 0.05 * i, body, (v * 0.5, xp.zeros(size, xp.int64)))

    def loss_a(xp, fori, wloop):
        def f(x, c):
            def outer(i, s):
                v = s[0]
                u, k = inner_while(xp, wloop, i, v, c)
                return (xp.sin(u) * c + 0.1 * v + 0.01 * xp.astype(k, v.dtype),)
            return xp.sum(fori(0, xp.asarray(n), outer, (x,))[0] ** 2)
        return f

    def loss_b(xp, fori, wloop):
        def f(x, c):
            def body(s):
                v, t = s
                w = fori(0, xp.asarray(m) + 1, lambda j, u: (xp.sin(u[0]) * c * 0.5 + 0.2 * v,), (v,))[0]
                return v + 0.3 + 0.1 * w * w, t + 1
            v, _ = wloop(lambda s: s[0] < 2.0, body, (x, xp.zeros(size, xp.int64)))
            return xp.sum(v * c)
        return f

    def q_fori(lo, hi, body, init):
        return qt.fori_loop(lo, hi, body, init)

    def j_fori(lo, hi, body, init):
        return jax_fori(lo, hi, body, init, 8)

    def j_while(cond, body, init):
        return jax_while(cond, body, init, 60)
    for name, loss in (("while in fori", loss_a), ("fori in while", loss_b)):
        want = jax.jit(jax.grad(loss(jnp, j_fori, j_while), argnums=(0, 1)))(x, c)
        got = grads(loss(qt, q_fori, qt.while_loop), (qt.asarray(x), qt.asarray(c)), (0, 1))
        assert_close(got[0], np.asarray(want[0]), what=f"{name}: d/dx vs JAX")
        assert_close(got[1], np.asarray(want[1]), what=f"{name}: d/dc vs JAX")


def float_int_body(xp, c):
    return lambda i, s: (xp.sin(s[0]) * c + 0.1 * s[1] * s[0], s[1] + 1)


def test_float_int_state_gradient(fusion, rng):
    size = 21
    n, k0 = rng.integers(0, 7, size), rng.integers(-3, 3, size)
    x, c = rng.uniform(-1, 1, size), rng.uniform(0.5, 1.5, size)
    qn, qk = qt.asarray(n), qt.asarray(k0)

    def loss(x, c):
        v, k = qt.fori_loop(0, qn, float_int_body(qt, c), (x, qk))
        return qt.sum(v * v)
    got = grads(loss, (qt.asarray(x), qt.asarray(c)), (0, 1))

    def jloss(x, c):
        v, k = jax_fori(0, jnp.asarray(n), float_int_body(jnp, c), (x, jnp.asarray(k0)), int(n.max()))
        return jnp.sum(v * v)
    want = jax.jit(jax.grad(jloss, argnums=(0, 1)))(x, c)
    assert_close(got[0], np.asarray(want[0]), what="d/dx vs JAX")
    assert_close(got[1], np.asarray(want[1]), what="d/dc vs JAX")


def _gather_problem(rng, size=17, tsize=7):
    n = rng.integers(0, 9, size)
    n[0] = 0
    return n, rng.uniform(-1, 1, size), rng.uniform(-1, 1, tsize), rng.integers(0, tsize, size)


def _gather_jax_grads(n, x, table, idx):
    def jloss(x, t):
        v, _ = jax_fori(0, jnp.asarray(n), _gather_body(t), (x, jnp.asarray(idx)), int(n.max()))
        return jnp.sum(v * v)
    return [np.asarray(g) for g in jax.jit(jax.grad(jloss, argnums=(0, 1)))(x, table)]


def _gather_loss(n, idx):
    def loss(x, t):
        v, _ = qt.fori_loop(0, qt.asarray(n), _gather_body(t), (x, qt.asarray(idx)))
        return qt.sum(v * v)
    return loss


def test_gathering_body_gradient_wrt_state(fusion, rng):
    n, x, table, idx = _gather_problem(rng)
    (gx,) = grads(_gather_loss(n, idx), (qt.asarray(x), qt.asarray(table)), (0,))
    jx, _ = _gather_jax_grads(n, x, table, idx)
    assert_close(gx, jx, what="d/dx vs JAX")
    v = np_fori(0, n, lambda i, s: list(_gather_body(table)(i, s)), [x, idx])[0]
    assert_close(gx, 2 * v * 0.9 ** n, what="d/dx hand-derived")


@pytest.mark.parametrize("size, tsize", [(17, 7), (PARALLEL_MIN_WORK * 4 + 3, 64)], ids=["small", "threads"])
def test_gathering_body_gradient_wrt_table(size, tsize, fusion, rng):
    """The table read by gathers inside the loop: its gradient is the sum, over every
    element and iteration, of the gathered read's cotangent at the index it read (atomic
    adds inside the adjoint kernel; also across worker threads)."""
    n, x, table, idx = _gather_problem(rng, size, tsize)
    jx, jt = _gather_jax_grads(n, x, table, idx)
    gx, gt = grads(_gather_loss(n, idx), (qt.asarray(x), qt.asarray(table)), (0, 1))
    assert_close(gx, jx, what="d/dx vs JAX")
    assert_close(gt, jt, rtol=1e-9, what="d/dtable vs JAX")


def test_table_gradients_of_while_loop_2d_table_and_mixed_reads(fusion, rng):
    """A while loop reading a 2-D table at two gathered places, and a second table of the
    loop's own shape both per element and gathered; float32 under jit(grad) vs JAX."""
    size = 301
    x = rng.uniform(0.1, 1.0, size).astype(np.float32)
    t2 = rng.uniform(-0.5, 0.5, (5, 3)).astype(np.float32)
    w = rng.uniform(0.5, 1.0, size).astype(np.float32)
    r0, k0 = rng.integers(0, 5, size), rng.integers(0, size, size)

    def body(xp, t2, w):
        def f(s):
            v, r, k, acc = s
            step = xp.sin(t2[r, r % 3]) * 0.3 + t2[(r + 1) % 5, 2] * v + w * 0.1 + w[k] * 0.05
            return v * 0.8 + step * 0.1, (r * 2 + 1) % 5, (k * 7 + 3) % size, acc + xp.abs(step) + 0.05
        return f

    def cond(s):
        return s[3] < 1.0

    def loss(xp, loop):
        def f(x, t2, w):
            init = (x, xp.asarray(r0), xp.asarray(k0), xp.zeros(size, xp.float32))
            v = loop(cond, body(xp, t2, w), init)[0]
            return xp.sum(v * v)
        return f

    def jloop(c, b, init):
        return jax_while(c, b, init, 200)
    want = jax.jit(jax.grad(loss(jnp, jloop), argnums=(0, 1, 2)))(x, t2, w)
    got = qt.jit(qt.grad(loss(qt, qt.while_loop), argnums=(0, 1, 2)))(x, t2, w)
    for g, j, name in zip(got, want, ("x", "t2", "w")):
        assert g.dtype == np.float32
        assert_close(g.numpy(), np.asarray(j), rtol=2e-5, atol=2e-6, what=f"d/d{name} vs JAX")


def test_table_sliced_then_gathered_in_a_loop(fusion, rng):
    """``t[:, 1][k]`` in the body: the slice does not depend on the loop, so it is computed
    once outside; the gathered column's gradient flows back through the slice."""
    table, x, k0 = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, 6), rng.integers(0, 4, 6)

    def loss(xp, loop):
        def f(x, t):
            v, _ = loop(0, 3, lambda i, s: (s[0] * xp.cos(t[:, 1][s[1]]), (s[1] + 1) % 4),
                        (x, xp.asarray(k0)))
            return xp.sum(v)
        return f
    want = jax.grad(loss(jnp, lambda lo, hi, b, s: jax_fori(lo, hi, b, s, 3)), argnums=(0, 1))(x, table)
    got = grads(loss(qt, qt.fori_loop), (qt.asarray(x), qt.asarray(table)), (0, 1))
    assert_close(got[0], np.asarray(want[0]), what="d/dx vs JAX")
    assert_close(got[1], np.asarray(want[1]), what="d/dtable vs JAX")


@pytest.mark.parametrize("size", [13, PARALLEL_MIN_WORK * 4 + 5], ids=["small", "threads"])
def test_table_gathered_in_nested_loop_bodies(size, fusion, rng):
    """A table gathered inside loops nested two and three deep (and in the outer body too):
    its gradient sums every gathered read's cotangent, added by the nested adjoints into
    the outer loop's table gradient; vs JAX running the same masked loops."""
    n, m = rng.integers(0, 4, size), rng.integers(0, 3, size)
    x = rng.uniform(-1, 1, size)
    t1, t2 = rng.uniform(-1, 1, 7), rng.uniform(-1, 1, (5, 3))
    k0 = rng.integers(0, 7, size)

    def loss(xp, fori):
        def f(x, t1, t2):
            def outer(i, s):
                v, k = s

                def middle(j, u):
                    w, kk = u

                    def inner(q, z):
                        return (z[0] * 0.8 + xp.sin(t2[(z[1] + q) % 5, q % 3]) * 0.2 * z[0], z[1])
                    w = fori(0, xp.asarray(m) + 1, inner, (w, kk))[0]
                    return (w * 0.9 + xp.sin(t1[kk]) * 0.1 * w + t2[kk % 5, 1] * 0.05, (kk + 1) % 7)
                v, k = fori(0, xp.asarray(m) + i, middle, (v, k))
                return (v + 0.1 * t1[(k + 3) % 7], k)
            return xp.sum(fori(0, xp.asarray(n), outer, (x, xp.asarray(k0)))[0] ** 2)
        return f

    def j_fori(lo, hi, body, init):
        return jax_fori(lo, hi, body, init, 8)
    want = jax.jit(jax.grad(loss(jnp, j_fori), argnums=(0, 1, 2)))(x, t1, t2)
    got = grads(loss(qt, qt.fori_loop), (qt.asarray(x), qt.asarray(t1), qt.asarray(t2)), (0, 1, 2))
    for g, w, name in zip(got, want, ("x", "t1", "t2")):
        assert np.abs(np.asarray(w)).max() > 1e-3, f"d/d{name}: the reference is ~0"
        assert_close(g, np.asarray(w), rtol=1e-9, what=f"d/d{name} vs JAX")


def test_tensor_read_per_element_and_gathered_by_a_nested_loop(fusion, rng):
    """``w`` of the loop's shape, read per element in the outer body and gathered in the
    inner one: both parts of its gradient (the per-element one from the outer reverse,
    the gathered one from the nested adjoint's atomic adds); vs JAX."""
    size = 23
    n, x, w, k0 = rng.integers(0, 4, size), rng.uniform(-1, 1, size), rng.uniform(-1, 1, size), \
        rng.integers(0, size, size)

    def loss(xp, fori):
        def f(x, w):
            def outer(i, s):
                v = s[0] * w * 0.5 + s[0]
                return fori(0, 2, lambda j, u: (u[0] * 0.9 + xp.sin(w[u[1]]) * 0.1, (u[1] + 1) % size),
                            (v, s[1]))
            return xp.sum(fori(0, xp.asarray(n), outer, (x, xp.asarray(k0)))[0] ** 2)
        return f
    want = jax.jit(jax.grad(loss(jnp, lambda lo, hi, b, s: jax_fori(lo, hi, b, s, 4)), argnums=(0, 1)))(x, w)
    got = grads(loss(qt, qt.fori_loop), (qt.asarray(x), qt.asarray(w)), (0, 1))
    assert_close(got[0], np.asarray(want[0]), what="d/dx vs JAX")
    assert_close(got[1], np.asarray(want[1]), what="d/dw vs JAX")


def test_table_gathered_in_nested_while_loop_under_jit(fusion, rng):
    """float32 under ``jit(grad)``: a while loop gathering a 2-D table, nested in a fori."""
    size = 301
    x = rng.uniform(0.1, 1.0, size).astype(np.float32)
    table = rng.uniform(-0.5, 0.5, (6, 4)).astype(np.float32)
    n, r0 = rng.integers(0, 4, size), rng.integers(0, 6, size)

    def loss(xp, fori, wloop):
        def f(x, table):
            def outer(i, s):
                v, r = s

                def body(z):
                    u, rr, acc = z
                    step = xp.cos(table[rr, (rr + i) % 4]) * 0.2 * u + 0.1
                    return u * 0.7 + step, (rr * 5 + 1) % 6, acc + xp.abs(step) + 0.05
                u, r, _ = wloop(lambda z: z[2] < 0.5, body, (v, r, xp.zeros(size, xp.float32)))
                return (u, r)
            return xp.sum(fori(0, xp.asarray(n), outer, (x, xp.asarray(r0)))[0] ** 2)
        return f

    def j_fori(lo, hi, body, init):
        return jax_fori(lo, hi, body, init, 4)

    def j_while(cond, body, init):
        return jax_while(cond, body, init, 40)
    want = jax.jit(jax.grad(loss(jnp, j_fori, j_while), argnums=(0, 1)))(x, table)
    got = qt.jit(qt.grad(loss(qt, qt.fori_loop, qt.while_loop), argnums=(0, 1)))(x, table)
    for g, w, name in zip(got, want, ("x", "table")):
        assert g.dtype == np.float32
        assert_close(g.numpy(), np.asarray(w), rtol=2e-5, atol=2e-6, what=f"d/d{name} vs JAX")


@pytest.mark.parametrize("levels", [3, 4])
def test_loops_nested_three_and_four_deep_gradient(levels, fusion, rng):
    """Reverse through loops nested ``levels`` deep: one adstack level per depth, each sized
    by the largest trip count at that depth (recorded by the forward loop); vs JAX."""
    size = 29
    n, m = rng.integers(0, 4, size), rng.integers(0, 3, size)
    x, c = rng.uniform(-1, 1, size), rng.uniform(0.5, 1.5, size)

    def loss(xp, fori):
        def f(x, c):
            def nest(depth, i):
                if depth == levels:
                    return lambda k, w: (xp.sin(w[0]) * c + 0.1 * w[0] + 0.01 * k,)

                def body(k, w):
                    return (fori(0, xp.asarray(m) + 1 + (k + i) % 2, nest(depth + 1, k), w)[0] * 0.9,)
                return body
            return xp.sum(fori(0, xp.asarray(n), nest(1, 0), (x,))[0] ** 2)
        return f

    def j_fori(lo, hi, body, init):
        return jax_fori(lo, hi, body, init, 5)
    want = jax.jit(jax.grad(loss(jnp, j_fori), argnums=(0, 1)))(x, c)
    got = grads(loss(qt, qt.fori_loop), (qt.asarray(x), qt.asarray(c)), (0, 1))
    assert_close(got[0], np.asarray(want[0]), what=f"{levels} deep: d/dx vs JAX")
    assert_close(got[1], np.asarray(want[1]), what=f"{levels} deep: d/dc vs JAX")


# --- adstack sizing --------------------------------------------------------------------
def _b3_inputs(rng, size, n):
    """B3 tensors; the counts are copied (memory qtrace owns, whose depth is cached: the
    NumPy array itself, borrowed, would be reduced on every launch)."""
    x, c = qt.asarray(rng.uniform(-2, 2, size)), qt.asarray(rng.uniform(0.5, 1.5, size))
    return x, c, qt.asarray(n, copy=True)


def test_python_int_bounds_are_sized_on_the_host(fusion, rng):
    """Trip counts from Python ints depend on no tensor data: no reducer, no device work."""
    x, c = rng.uniform(-2, 2, 40), rng.uniform(0.5, 1.5, 40)

    def loss(x, c):
        return qt.sum(qt.fori_loop(1, 6, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
    qt.reset_stats()
    gx, gc = grads(loss, (qt.asarray(x), qt.asarray(c)), (0, 1))
    s = qt.stats()
    _, hx, hc = b3_numpy(x, c, np.full(40, 5))
    assert_close(gx, hx, what="d/dx")
    assert_close(gc, hc, what="d/dc")
    assert s["adstack_host_sized"] >= 1, s
    assert s["adstack_device_sized"] == 0, s
    assert s["max_reducer_dispatches"] == 0, s


def test_tensor_trip_counts_dispatch_the_reducer_once(fusion, rng):
    size = 40
    n = rng.integers(0, 9, size)
    x, c, qn = _b3_inputs(rng, size, n)
    qt.reset_stats()
    for _ in range(10):
        gx, gc = grads(b3_qt(qn), (x, c), (0, 1))
    s = qt.stats()
    assert s["adstack_reducer_dispatches"] == 1 and s["adstack_reducer_hits"] == 9, s
    assert s["adstack_device_sized"] == 10 and s["max_reducer_dispatches"] == 1, s
    assert s["adstack_host_sized"] == 0 and s["adstack_recorded"] == 0, s
    _, hx, hc = b3_numpy(x.numpy(), c.numpy(), n)
    assert_close(gx, hx, what="d/dx")
    n2 = n.copy()
    n2[3] = 12  # a new counts tensor with a larger maximum
    qn2 = qt.asarray(n2, copy=True)
    for _ in range(10):
        gx, gc = grads(b3_qt(qn2), (x, c), (0, 1))
    assert qt.stats()["adstack_reducer_dispatches"] == 2, qt.stats()
    _, hx, hc = b3_numpy(x.numpy(), c.numpy(), n2)
    assert_close(gx, hx, what="d/dx, new counts")
    assert_close(gc, hc, what="d/dc, new counts")


def test_while_loop_gradient_needs_no_hint(fusion, rng):
    """The forward records each element's trip count; the reverse is sized from them."""
    a = rng.uniform(0.5, 50.0, 40)
    qt.reset_stats()
    for _ in range(2):
        (g,) = grads(lambda a: qt.sum(newton_qt(a)), (qt.asarray(a),), (0,))
        assert_close(g, 0.5 / np.sqrt(a), rtol=1e-8, what="d sqrt(a)/da")
    s = qt.stats()
    assert s["adstack_recorded"] >= 2 and s["adstack_bytes"] > 0, s
    assert s["adstack_reducer_dispatches"] == 0, s


def _workers(size: int) -> int:
    """``devices/runtime.py``: a launch is split over ``min(num_threads, extent)`` workers
    when it has at least ``PARALLEL_MIN_WORK`` elements, else it runs on one thread."""
    threads = qt.config.num_threads
    return min(threads, size) if size >= PARALLEL_MIN_WORK and threads > 1 else 1


def _row_lanes() -> int:
    """A stack row holds one entry per lane of a block (the CPU target's ``lanes``) for a
    task whose single, non-nested loop runs in lane blocks; 1 for scalar loops."""
    return CPU_LOWERING.lanes or 1


@pytest.mark.cpu_only("stacks per CPU worker and lane blocks; GPU stacks are per thread")
@pytest.mark.parametrize("size", [1000, 40_000])
def test_adstack_bytes_are_workers_times_depth_not_elements(size, fusion, rng):
    """``adstack_bytes`` = workers x max depth x row bytes (entry bytes: the two float64
    values the replay pushes, ``sin(v)`` and ``cos(v)``, per lane); the same for 1000 and
    40 000 elements but for the number of workers."""
    qt.config.num_threads = 2
    depth = 7
    n = rng.integers(0, depth + 1, size)
    n[size // 2] = depth
    x, c, qn = _b3_inputs(rng, size, n)
    qt.reset_stats()
    gx, gc = grads(b3_qt(qn), (x, c), (0, 1))
    got = qt.stats()["adstack_bytes"]
    workers = _workers(size)
    assert got == workers * depth * _row_lanes() * 16, (got, workers, depth)
    assert got <= workers * depth * 64 * 16  # whatever the lanes: bounded by workers x depth
    assert got < size * depth * 8 or size < 64 * 16
    _, hx, hc = b3_numpy(x.numpy(), c.numpy(), n)
    assert_close(gx, hx, what="d/dx")


@pytest.mark.cpu_only("stacks per CPU worker and lane blocks; GPU stacks are per thread")
def test_adstack_bytes_float_and_int_entries(fusion, rng):
    """The reverse of a (float64, int64) state reads both: 16 bytes per entry (a body
    without transcendental functions: the replay pushes the states themselves)."""
    size, depth = 300, 6
    n = rng.integers(0, depth + 1, size)
    n[0] = depth
    qn, qk = qt.asarray(n), qt.asarray(rng.integers(-3, 3, size))
    c = qt.asarray(rng.uniform(0.5, 1.5, size))

    def loss(x):
        v, k = qt.fori_loop(0, qn, lambda i, s: (s[0] * s[0] * c + 0.1 * s[1] * s[0], s[1] + 1),
                            (x, qk))
        return qt.sum(v)
    qt.reset_stats()
    grads(loss, (qt.asarray(rng.uniform(-1, 1, size)),), (0,))
    assert qt.stats()["adstack_bytes"] == 1 * depth * _row_lanes() * 16, qt.stats()


def test_loops_that_never_run_take_no_stack(fusion, rng):
    x, c, qn = _b3_inputs(rng, 50, np.zeros(50, np.int64))
    qt.reset_stats()
    gx, gc = grads(b3_qt(qn), (x, c), (0, 1))
    assert qt.stats()["adstack_bytes"] == 0
    np.testing.assert_array_equal(gx, np.ones(50))
    np.testing.assert_array_equal(gc, np.zeros(50))


def test_adstack_overflow_names_kernel_and_loop(fusion, rng):
    size = 30
    n = rng.integers(0, 11, size)
    n[5] = 10
    x, c, qn = _b3_inputs(rng, size, n)
    qt.config.adstack_max_depth = 3
    with pytest.raises(qt.AdstackOverflowError) as err:
        grads(b3_qt(qn), (x, c), (0, 1))
    msg = str(err.value)
    assert re.search(r"\bqt_[0-9a-f]{6,}", msg), msg
    assert re.search(r"\bloop_[0-9a-f]{6,}", msg), msg
    qt.config.adstack_max_depth = None
    gx, gc = grads(b3_qt(qn), (x, c), (0, 1))
    _, hx, hc = b3_numpy(x.numpy(), c.numpy(), n)
    assert_close(gx, hx, what="d/dx after lifting the cap")
    assert_close(gc, hc, what="d/dc after lifting the cap")


# --- element-mixing bodies ---------------------------------------------------------------
MIXING = {
    "sum": (lambda v: v + qt.sum(v), r"sum"),
    "reverse": (lambda v: v[::-1] * 0.5, r"slice|flip|reverse"),
    "roll": (lambda v: qt.concatenate([v[1:], v[:1]]), r"slice|concatenate"),
    "mean_keepdims": (lambda v: v - qt.mean(v, keepdims=True), r"sum|mean"),
}


@pytest.mark.parametrize("case", sorted(MIXING))
def test_element_mixing_body_is_a_tracer_error(case, fusion, rng):
    body, op = MIXING[case]
    x, n = qt.asarray(rng.uniform(-1, 1, 6)), qt.asarray(rng.integers(0, 3, 6))
    with pytest.raises(qt.TracerError, match=op) as err:
        qt.fori_loop(0, n, lambda i, v: body(v), x)
    assert "fori_loop" in str(err.value)
    with pytest.raises(qt.TracerError, match=op):
        qt.while_loop(lambda v: v < 1.0, lambda v: body(v) + 1.0, x)


def test_element_mixing_condition_is_a_tracer_error(fusion, rng):
    x = qt.asarray(rng.uniform(-1, 1, 6))
    with pytest.raises(qt.TracerError, match="sum"):
        qt.while_loop(lambda v: v + qt.sum(v) < 1.0, lambda v: v + 1.0, x)


def test_mixed_dtype_state_gradient(fusion, rng):
    """Reverse through a loop whose pushed state mixes float32, bool, float64 and int32 —
    rows of one, one padded, two and one stack words (a GPU interleaves its threads'
    stacks word by word, splitting wider values; a bool takes a word) — vs JAX, on more
    elements than a GPU launch's 65,536 stack threads (so threads stride)."""
    size = 70_001
    n = rng.integers(0, 6, size)
    x = rng.uniform(-1, 1, size).astype(np.float32)
    c = rng.uniform(0.5, 1.5, size)

    def loss(xp, fori):
        def f(x, c):
            def body(i, s):
                v, flag, w, k = s
                v = xp.where(flag, xp.sin(v) * xp.astype(c, v.dtype), v * 0.9)
                return (v, xp.logical_not(flag), w * c + 0.1 * xp.astype(v, w.dtype), k + 1)
            init = (x, x > 0, c * 0.5, xp.zeros(size, xp.int32))
            v, flag, w, k = fori(0, xp.asarray(n), body, init)
            return xp.sum(xp.astype(v, w.dtype) * w) + xp.sum(xp.where(flag, w, 0.0))
        return f
    want = jax.jit(jax.grad(loss(jnp, lambda lo, hi, body, init: jax_fori(lo, hi, body, init, 6)),
                            argnums=(0, 1)))(x, c)
    got = grads(loss(qt, qt.fori_loop), (qt.asarray(x), qt.asarray(c)), (0, 1))
    assert_close(got[0], np.asarray(want[0]), rtol=2e-5, atol=1e-6, what="d/dx (float32) vs JAX")
    # (float32 rounding: v feeds w; a wrong stack layout is off by far more)
    assert_close(got[1], np.asarray(want[1]), rtol=2e-5, atol=1e-6, what="d/dc (float64) vs JAX")


def test_nested_loop_rows_stay_aligned(fusion, rng):
    """A float64 loop nested in a loop whose state is float32 pushes its 8-byte rows above
    the outer loop's 4-byte ones: they must stay 8-byte aligned (a GPU faults on a
    misaligned 8-byte access); gradients vs JAX."""
    size = 300
    n, m = rng.integers(0, 4, size), rng.integers(0, 3, size)
    x = rng.uniform(-1, 1, size).astype(np.float32)
    c = rng.uniform(0.5, 1.5, size)

    def loss(xp, fori):
        def f(x, c):
            def outer(i, s):
                v = s[0]
                w = fori(0, xp.asarray(m) + 1,
                         lambda j, u: (xp.sin(u[0]) * c + 0.1 * xp.astype(v, c.dtype),), (c * 0.5,))[0]
                return (v * 0.9 + xp.astype(w * 0.1, v.dtype),)
            return xp.sum(xp.astype(fori(0, xp.asarray(n), outer, (x,))[0], c.dtype) * c)
        return f

    def j_fori(lo, hi, body, init):
        return jax_fori(lo, hi, body, init, 4)
    want = jax.jit(jax.grad(loss(jnp, j_fori), argnums=(0, 1)))(x, c)
    got = grads(loss(qt, qt.fori_loop), (qt.asarray(x), qt.asarray(c)), (0, 1))
    assert_close(got[0], np.asarray(want[0]), rtol=2e-5, atol=1e-6, what="d/dx (float32) vs JAX")
    assert_close(got[1], np.asarray(want[1]), rtol=2e-5, atol=1e-6, what="d/dc vs JAX")
