"""qt.random: the generator is Threefry-2x32 (bit-exact against JAX's), draws depend only on
(key, shape, position), fuse with consumers, and pass statistical tests."""

from __future__ import annotations

import math

import numpy as np
import pytest

import qtrace as qt


def _seed(rng) -> int:
    return int(rng.integers(0, 2**63))


def test_bits_are_threefry_2x32_bit_exact(rng):
    jax = pytest.importorskip("jax")
    import jax.extend as je
    import jax.numpy as jnp
    seed = _seed(rng)
    n = 257
    got = np.asarray(qt.random.bits(qt.random.key(seed), (n,)))
    key = jnp.array([seed >> 32, seed & 0xFFFFFFFF], dtype=jnp.uint32)
    counters = jnp.concatenate([jnp.arange(n, dtype=jnp.uint32), jnp.zeros(n, jnp.uint32)])
    out = np.asarray(je.random.threefry_2x32(key, counters)).astype(np.uint64)
    np.testing.assert_array_equal(got, out[:n] | (out[n:] << np.uint64(32)))
    assert jax  # imported for the skip


def test_same_key_same_numbers_and_fusion_agrees(rng, fusion):
    k = qt.random.key(_seed(rng))
    a = np.asarray(qt.random.normal(k, (3, 50)))
    b = np.asarray(qt.random.normal(k, (3, 50)))
    np.testing.assert_array_equal(a, b)
    qt.config.fusion = not qt.config.fusion
    np.testing.assert_array_equal(np.asarray(qt.random.normal(k, (3, 50))), a)


def test_draws_fuse_into_their_consumer(rng):
    x = qt.asarray(rng.standard_normal(1000))
    k = qt.random.key(1)
    y = x + 0.1 * qt.random.normal(k, x.shape)
    assert qt.explain(lambda x, k: x + 0.1 * qt.random.normal(k, x.shape), x, k).n_kernels == 1
    assert y.shape == x.shape


def _ks_statistic(sample: np.ndarray, cdf) -> float:
    s = np.sort(sample)
    n = s.size
    c = cdf(s)
    return float(max(np.max(np.arange(1, n + 1) / n - c), np.max(c - np.arange(n) / n)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_moments_and_kolmogorov_smirnov(rng, dtype):
    n = 200_000
    u = np.asarray(qt.random.uniform(qt.random.key(_seed(rng)), (n,), dtype=dtype)).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 0.002
    # KS at the 0.1% level: the critical value is about 1.95 / sqrt(n)
    assert _ks_statistic(u, lambda s: s) < 1.95 / math.sqrt(n)


def test_normal_moments_and_kolmogorov_smirnov(rng):
    n = 200_000
    z = np.asarray(qt.random.normal(qt.random.key(_seed(rng)), (n,)))
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.std() - 1.0) < 0.01
    assert abs(np.mean(z ** 3)) < 0.05 and abs(np.mean(z ** 4) - 3.0) < 0.1
    cdf = np.vectorize(lambda v: 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))))
    assert _ks_statistic(z[:20000], cdf) < 1.95 / math.sqrt(20000)


def test_split_keys_are_independent(rng):
    ks = qt.random.split(qt.random.key(_seed(rng)), 4)
    assert ks.shape == (4, 2) and ks.dtype == np.uint32
    draws = np.stack([np.asarray(qt.random.uniform(ks[i], (50_000,))) for i in range(4)])
    corr = np.corrcoef(draws)
    assert np.all(np.abs(corr[~np.eye(4, dtype=bool)]) < 0.02)
    assert len({tuple(np.asarray(ks[i]).tolist()) for i in range(4)}) == 4


def test_integers_bernoulli_permutation_choice(rng):
    k = qt.random.key(_seed(rng))
    v = np.asarray(qt.random.integers(k, -3, 7, (10_000,)))
    assert v.dtype == np.int64 and v.min() == -3 and v.max() == 6
    counts = np.bincount(v + 3, minlength=10)
    assert np.all(np.abs(counts - 1000) < 5 * math.sqrt(1000))
    b = np.asarray(qt.random.bernoulli(k, 0.25, (40_000,)))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.25) < 0.01
    p = np.asarray(qt.random.permutation(k, 50))
    np.testing.assert_array_equal(np.sort(p), np.arange(50))
    items = np.asarray(qt.random.permutation(k, qt.asarray(np.arange(10.0) * 2)))
    np.testing.assert_array_equal(np.sort(items), np.arange(10.0) * 2)
    c = np.asarray(qt.random.choice(k, 4, (20_000,), p=qt.asarray([0.1, 0.2, 0.3, 0.4])))
    np.testing.assert_allclose(np.bincount(c, minlength=4) / 20_000, [0.1, 0.2, 0.3, 0.4], atol=0.015)
    w = np.asarray(qt.random.choice(k, 10, (10,), replace=False))
    np.testing.assert_array_equal(np.sort(w), np.arange(10))


def test_keys_are_arguments_in_jit_no_recompile(rng):
    @qt.jit
    def noisy(x, key):
        return x + qt.random.normal(key, x.shape)

    x = qt.zeros(8)
    qt.reset_stats()
    a = np.asarray(noisy(x, qt.random.key(1)))
    b = np.asarray(noisy(x, qt.random.key(2)))
    assert not np.array_equal(a, b)
    assert qt.stats()["traces"] == 1
    np.testing.assert_array_equal(a, np.asarray(qt.random.normal(qt.random.key(1), (8,))))


def test_generator_is_numpy_like_and_refused_in_jit(rng):
    g = qt.random.default_rng(5)
    a, b = g.random(5), g.random(5)
    assert not np.array_equal(np.asarray(a), np.asarray(b))
    assert g.integers(0, 3, size=4).shape == (4,)
    assert g.normal(1.0, 2.0, size=(2, 3)).shape == (2, 3)

    @qt.jit
    def f(x):
        return x + g.random(x.shape)

    with pytest.raises(qt.TracerError, match="key"):
        f(qt.zeros(3))


def test_bad_keys_are_refused():
    with pytest.raises(TypeError, match="uint32"):
        qt.random.uniform(qt.zeros(2), (3,))
    with pytest.raises(ValueError):
        qt.random.key(-1)
