"""``x[mask]`` inside ``qt.jit``: selections computed on the whole array, written back under
the same mask, reduced, indexed on trailing axes — against NumPy running the same code,
with fusion on and off, and gradients against JAX's ``where`` form."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt
from qtrace.errors import TracerError

jax.config.update("jax_enable_x64", True)


def _both(fn, *arrays):
    """``fn`` run by NumPy on the arrays and by ``qt.jit`` on tensors of them."""
    want = fn(np, *[a.copy() for a in arrays])
    got = qt.jit(lambda *ts: fn(qt, *ts))(*[qt.asarray(a) for a in arrays])
    return got, want


def _close(got, want, rtol=1e-12):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g.numpy()), w, rtol=rtol, atol=1e-13)


def nbody_softening(xp, r):
    """The N-body idiom: invert the cube of the distance where it is positive."""
    r = r.copy()
    r[r > 0] = r[r > 0] ** (-1.5)
    return r


def wall_bounce(xp, f, wall):
    """The lattice-Boltzmann idiom: populations at wall cells read, permuted, written back."""
    f = f.copy()
    bndry = f[wall, :]
    bndry = bndry[:, [0, 3, 4, 1, 2]]
    f += 0.5 * (xp.sum(f, 2)[:, :, None] - f)
    f[wall, :] = bndry
    return f


def stats(xp, x, m):
    sel = x[m]
    return (xp.sum(sel), xp.mean(sel), xp.max(sel), xp.min(sel), xp.sum(sel * 2 + 1, axis=0),
            sel.sum(), xp.mean(sel, axis=0))


def test_softening_idiom_matches_numpy(fusion, rng):
    r = rng.standard_normal((40, 40))
    r[rng.random(r.shape) < 0.2] = 0.0
    _close(*_both(nbody_softening, r))


def test_wall_bounce_idiom_matches_numpy(fusion, rng):
    f = rng.random((12, 30, 5))
    wall = rng.random((12, 30)) < 0.3
    _close(*_both(wall_bounce, f, wall))


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_reductions_of_a_selection_match_numpy(fusion, rng, fraction):
    x = rng.standard_normal((9, 7, 3))
    m = rng.random((9, 7)) < fraction
    if fraction == 0.0:   # NumPy: max of nothing raises, mean of nothing is NaN
        got = qt.jit(lambda x, m: (qt.sum(x[m]), qt.mean(x[m])))(qt.asarray(x), qt.asarray(m))
        assert got[0].numpy() == 0.0 and np.isnan(got[1].numpy())
        return
    _close(*_both(stats, x, m))


def test_one_compiled_program_serves_every_number_of_true_elements(rng):
    step = qt.jit(lambda r: nbody_softening(qt, r))
    qt.reset_stats()
    for fraction in (0.1, 0.5, 0.9):
        r = rng.standard_normal((16, 16))
        r[rng.random(r.shape) < fraction] = 0.0
        _close(step(qt.asarray(r)), nbody_softening(np, r))
    assert qt.stats()["traces"] == 1


def test_gradient_through_a_masked_write_matches_jax(fusion, rng):
    r = rng.random(50) + 0.5
    r[rng.random(50) < 0.3] = -1.0

    def loss(xp, r):
        r = r.copy()
        r[r > 0] = r[r > 0] ** (-1.5)
        return xp.sum(r * r)

    got = qt.jit(qt.grad(lambda r: loss(qt, r)))(qt.asarray(r))
    want = jax.grad(lambda r: jnp.sum(jnp.where(r > 0, jnp.where(r > 0, r, 1.0) ** -1.5, r) ** 2))(r)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("use", [
    lambda s, x, m: s.shape,
    lambda s, x, m: len(s),
    lambda s, x, m: s.reshape(-1),
    lambda s, x, m: s + x[~m],
    lambda s, x, m: s + x,
    lambda s, x, m: s[0],
    lambda s, x, m: qt.concat([s, s]),
])
def test_what_needs_the_number_of_rows_is_refused_clearly(use, rng):
    x = qt.asarray(rng.standard_normal((6, 4)))
    m = qt.asarray(rng.random((6, 4)) < 0.5)
    with pytest.raises(TracerError, match="depends on the data"):
        qt.jit(lambda x, m: use(x[m], x, m))(x, m)


def test_assigning_a_selection_under_another_mask_is_refused(rng):
    x = qt.asarray(rng.standard_normal(10))

    def fn(x):
        x = x.copy()
        x[x > 0] = x[x < 0]
        return x
    with pytest.raises(TracerError, match="another mask"):
        qt.jit(fn)(x)


def test_eager_mask_reads_stay_numpy_arrays_of_the_selected_rows(rng):
    x = rng.standard_normal((5, 3))
    m = rng.random(5) < 0.5
    got = qt.asarray(x)[qt.asarray(m)]
    assert got.shape == x[m].shape
    np.testing.assert_array_equal(got.numpy(), x[m])
