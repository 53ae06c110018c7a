"""NumPy's legacy global-state API in qt.random (seed, rand, randn, randint, random, normal,
uniform, exponential, choice, permutation, shuffle): distributions, NumPy's shapes, dtypes and
errors, reproducibility, in-place shuffles, refusal inside qt.jit, and the dispatch of the
names both APIs have (a key keeps the key form exactly as it was)."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import qtrace as qt
from qtrace.tracer import random as qr


def _seed(rng) -> int:
    s = int(rng.integers(0, 2**32))
    qt.random.seed(s)
    return s


def _close(value: float, expected: float, se: float, k: float = 5.0) -> bool:
    return abs(value - expected) < k * se


# --- the key form is unchanged ---------------------------------------------------------------
# values of the key form recorded before the legacy API was added (qtrace's own stream)
GOLDEN_NORMAL = [-0.2536383710241632, 0.41971568095299844, 0.18469594511675255, -0.46419584212817233]
GOLDEN_UNIFORM = [-1.4878749196851926, 2.389049530963261, 1.0086545101144075, -0.3077411865410604]


def test_key_form_gives_the_values_it_gave_before(fusion):
    """The key form's values, recorded before the legacy API was added: the random bits
    (integers) exactly; floats made from them by ``log``/``cos`` (Box-Muller) to a few
    ulps (a GPU's math library rounds differently from the CPU's in the last place)."""
    def same(got, want):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6 if got.dtype == np.float32 else 1e-13)
    k = qt.random.key(12345)
    same(qt.random.normal(k, (4,)), GOLDEN_NORMAL)
    same(qt.random.normal(key=k, shape=(4,)), GOLDEN_NORMAL)
    same(qt.random.normal(k, (3,), dtype="float32"),
         [-0.2536381483078003, 0.4197159707546234, 0.18469606339931488])
    same(qt.random.uniform(k, (4,), minval=-2.0, maxval=3.0), GOLDEN_UNIFORM)
    same(qt.random.uniform(key=k, shape=(4,), minval=-2.0, maxval=3.0), GOLDEN_UNIFORM)
    assert np.asarray(qt.random.choice(k, 10, (6,))).tolist() == [0, 9, 9, 2, 4, 9]
    assert np.asarray(qt.random.choice(k, 4, (6,), p=qt.asarray([0.1, 0.2, 0.3, 0.4]))).tolist() == \
        [1, 3, 3, 2, 3, 3]
    assert np.asarray(qt.random.choice(k, 10, (5,), replace=False)).tolist() == [0, 8, 9, 3, 6]
    assert np.asarray(qt.random.permutation(k, 8)).tolist() == [0, 3, 6, 2, 5, 1, 7, 4]
    assert np.asarray(qt.random.permutation(key=k, x=qt.asarray([10.0, 20.0, 30.0, 40.0]))).tolist() \
        == [10.0, 40.0, 30.0, 20.0]


def test_key_form_equals_the_underlying_key_functions(rng, fusion):
    k = qt.random.key(int(rng.integers(0, 2**63)))
    np_k = np.asarray(k)      # a NumPy uint32 (2,) array is a key too, as before
    pairs = [
        (qt.random.normal(k, (5,)), qr._keyed_normal(k, (5,))),
        (qt.random.normal(np_k, shape=(2, 3), dtype="float32"), qr._keyed_normal(k, (2, 3), "float32")),
        (qt.random.uniform(k, (5,), None, -1.0, 2.0), qr._keyed_uniform(k, (5,), None, -1.0, 2.0)),
        (qt.random.uniform(key=k, shape=3), qr._keyed_uniform(k, 3)),
        (qt.random.choice(k, 7, (4,)), qr._keyed_choice(k, 7, (4,))),
        (qt.random.choice(k, a=qt.arange(5.0), shape=(3,), replace=False),
         qr._keyed_choice(k, qt.arange(5.0), (3,), replace=False)),
        (qt.random.permutation(k, 9), qr._keyed_permutation(k, 9)),
        (qt.random.permutation(key=k, x=np.arange(4.0)), qr._keyed_permutation(k, np.arange(4.0))),
    ]
    for got, want in pairs:
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_key_form_still_works_inside_jit():
    @qt.jit
    def f(x, key):
        return x + qt.random.normal(key, x.shape) + qt.random.uniform(key=key, shape=x.shape)

    k = qt.random.key(3)
    want = np.asarray(qt.random.normal(k, (4,))) + np.asarray(qt.random.uniform(k, (4,)))
    np.testing.assert_allclose(np.asarray(f(qt.zeros(4), k)), want, rtol=1e-15)


def test_bad_keys_are_still_refused():
    with pytest.raises(TypeError, match="uint32"):
        qt.random.uniform(qt.zeros(2), (3,))
    with pytest.raises(TypeError, match="uint32"):
        qt.random.normal(qt.zeros(2), shape=(3,))
    with pytest.raises(TypeError, match="uint32"):
        qt.random.permutation(qt.zeros(2), 5)        # two positional arguments: the key form
    with pytest.raises(TypeError, match="uint32"):
        qt.random.choice(key=qt.zeros(2), a=5)


def test_a_two_element_array_with_a_list_is_legacy(rng):
    _seed(rng)
    v = qt.random.normal(qt.asarray([0.0, 100.0]), [1.0, 2.0])
    assert v.shape == (2,) and v.dtype == np.float64
    assert abs(float(v[1]) - 100.0) < 20
    assert qt.random.uniform(np.zeros(2), high=(3,)).shape == (2,)


# --- seeding ---------------------------------------------------------------------------------
def test_seed_reproduces_and_different_seeds_differ(rng):
    s = _seed(rng)
    def draws():
        return [np.asarray(qt.random.rand(5)), np.asarray(qt.random.randn(3)),
                np.asarray(qt.random.randint(0, 1000, 4))]

    a = draws()
    qt.random.seed(s)
    b = draws()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    qt.random.seed((s + 1) % 2**32)
    assert not np.array_equal(np.asarray(qt.random.rand(5)), a[0])
    # successive calls draw new numbers
    assert not np.array_equal(np.asarray(qt.random.rand(5)), np.asarray(qt.random.rand(5)))
    qt.random.seed()                 # fresh entropy
    c = np.asarray(qt.random.rand(5))
    qt.random.seed(None)
    assert not np.array_equal(c, np.asarray(qt.random.rand(5)))


def test_seed_is_the_stream_of_default_rng(rng):
    s = _seed(rng)
    g = qt.random.default_rng(s)
    np.testing.assert_array_equal(np.asarray(qt.random.random(4)), np.asarray(g.random(4)))
    np.testing.assert_array_equal(np.asarray(qt.random.normal(1.0, 2.0, 3)),
                                  np.asarray(g.normal(1.0, 2.0, 3)))
    np.testing.assert_array_equal(np.asarray(qt.random.randint(-5, 9, 6)), np.asarray(g.integers(-5, 9, 6)))
    np.testing.assert_array_equal(np.asarray(qt.random.permutation(7)), np.asarray(g.permutation(7)))


def test_host_split_matches_the_kernels_threefry(rng):
    s = int(rng.integers(0, 2**63))
    k = qt.random.key(s)
    ks = np.asarray(qt.random.split(k, 2))
    for j in range(2):
        assert qr._threefry_host(s >> 32, s & 0xFFFFFFFF, j, 0xFFFFFFFF) == tuple(int(w) for w in ks[j])


def test_seed_sequences_and_errors(rng):
    qt.random.seed([1, 2, 3])
    a = np.asarray(qt.random.rand(3))
    qt.random.seed(np.array([1, 2, 3], dtype=np.uint32))
    np.testing.assert_array_equal(a, np.asarray(qt.random.rand(3)))
    qt.random.seed(np.int64(2**32 - 1))
    with pytest.raises(ValueError, match=r"Seed must be between 0 and 2\*\*32 - 1"):
        qt.random.seed(-1)
    with pytest.raises(ValueError, match=r"Seed must be between 0 and 2\*\*32 - 1"):
        qt.random.seed(2**32)
    with pytest.raises(ValueError, match="non-empty"):
        qt.random.seed([])
    with pytest.raises(TypeError, match="seed must be an integer"):
        qt.random.seed(1.5)


def test_concurrent_draws_each_get_their_own_key(rng):
    s = _seed(rng)
    n_threads, per = 8, 25
    got: list = []
    lock = threading.Lock()
    start = threading.Barrier(n_threads)

    def work():
        start.wait()
        mine = [qt.random.random(2) for _ in range(per)]
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    qt.random.seed(s)
    serial = {tuple(np.asarray(qt.random.random(2)).tolist()) for _ in range(n_threads * per)}
    assert {tuple(np.asarray(v).tolist()) for v in got} == serial   # no key lost or repeated


# --- NumPy's shapes and dtypes ---------------------------------------------------------------
CALLS = [
    ("rand", (), {}), ("rand", (3,), {}), ("rand", (2, 3), {}),
    ("randn", (), {}), ("randn", (4, 1), {}),
    ("random", (), {}), ("random", ((2, 2),), {}), ("random_sample", (5,), {}),
    ("ranf", (), {"size": 3}), ("sample", ((1, 2),), {}),
    ("standard_normal", (), {}), ("standard_normal", (), {"size": (3, 2)}),
    ("normal", (), {}), ("normal", (0.0, 1.0, 100), {}), ("normal", (np.zeros(3), 1.0), {}),
    ("normal", ([0.0, 1.0, 2.0], [[1.0], [2.0]]), {}), ("normal", (np.zeros(3), 1.0), {"size": (2, 3)}),
    ("normal", (), {"size": 3}),
    ("uniform", (), {}), ("uniform", (-1, 1, (3,)), {}), ("uniform", ([0, 1], 5), {}),
    ("uniform", (), {"low": 2.0, "size": ()}),
    ("exponential", (), {}), ("exponential", (2.0, 7), {}), ("exponential", ([1.0, 2.0],), {}),
    ("randint", (5,), {}), ("randint", (0, 10), {"size": 7}), ("randint", (-3, 3, (2, 2)), {}),
    ("randint", (5,), {"size": 4, "dtype": np.int8}), ("randint", (2,), {"size": 3, "dtype": bool}),
    ("randint", (0, 200), {"size": 3, "dtype": np.uint8}), ("randint", ([1, 5], 10), {}),
    ("randint", (5,), {"size": ()}),
    ("choice", (5,), {}), ("choice", (5, 3), {}), ("choice", (np.arange(4.0), (2, 2)), {}),
    ("choice", ([1.5, 2.5],), {}), ("choice", (4, 3), {"replace": False}),
    ("choice", (4, 2), {"replace": False, "p": [0.1, 0.2, 0.3, 0.4]}),
    ("choice", (np.arange(3, dtype=np.int32), 5), {"p": [0.2, 0.3, 0.5]}),
    ("choice", (3,), {"size": 0}),
    ("permutation", (6,), {}), ("permutation", (np.arange(6.0).reshape(3, 2),), {}),
    ("permutation", ([3, 1, 2],), {}), ("permutation", (0,), {}),
]


@pytest.mark.parametrize("name,args,kwargs", CALLS, ids=[f"{c[0]}{i}" for i, c in enumerate(CALLS)])
def test_shapes_and_dtypes_are_numpys(name, args, kwargs):
    want = np.asarray(getattr(np.random.RandomState(0), name if name not in ("ranf", "sample")
                                                      else "random_sample")(*args, **kwargs))
    got = getattr(qt.random, name)(*args, **kwargs)
    assert isinstance(got, qt.Tensor)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.asarray(got)      # computes


# --- distributions ---------------------------------------------------------------------------
N = 200_000


def test_uniform_floats(rng, fusion):
    _seed(rng)
    for draw in (lambda: qt.random.rand(N), lambda: qt.random.random(N),
                 lambda: qt.random.random_sample((N,)), lambda: qt.random.ranf(N),
                 lambda: qt.random.sample(N)):
        u = np.asarray(draw())
        assert u.dtype == np.float64 and u.min() >= 0.0 and u.max() < 1.0
        assert _close(u.mean(), 0.5, math.sqrt(1 / 12 / N))
        assert _close(u.var(), 1 / 12, math.sqrt((1 / 80 - 1 / 144) / N))
    u = np.asarray(qt.random.uniform(-3.0, 5.0, N))
    assert u.min() >= -3.0 and u.max() < 5.0
    assert _close(u.mean(), 1.0, 8 * math.sqrt(1 / 12 / N))
    lows, highs = np.array([0.0, 10.0, -5.0]), np.array([1.0, 20.0, -4.0])
    w = np.asarray(qt.random.uniform(lows, highs, size=(N // 4, 3)))
    assert np.all(w >= lows) and np.all(w < highs)
    np.testing.assert_allclose(w.mean(axis=0), (lows + highs) / 2, atol=5 * 10 * math.sqrt(1 / 12 / (N // 4)))
    r = np.asarray(qt.random.uniform(1.0, 0.0, 1000))      # low > high: NumPy's legacy allows it
    assert r.min() > 0.0 and r.max() <= 1.0


def test_normals(rng, fusion):
    _seed(rng)
    for draw in (lambda: qt.random.randn(N), lambda: qt.random.standard_normal(N),
                 lambda: qt.random.normal(size=N)):
        z = np.asarray(draw())
        assert z.dtype == np.float64
        assert _close(z.mean(), 0.0, 1 / math.sqrt(N))
        assert _close(z.var(), 1.0, math.sqrt(2 / N))
    z = np.asarray(qt.random.normal(3.0, 2.0, size=N))
    assert _close(z.mean(), 3.0, 2 / math.sqrt(N)) and _close(z.var(), 4.0, 4 * math.sqrt(2 / N))
    m = np.asarray(qt.random.normal(qt.asarray([-10.0, 0.0, 10.0]), qt.asarray([0.5, 1.0, 3.0]), (N // 4, 3)))
    np.testing.assert_allclose(m.mean(axis=0), [-10.0, 0.0, 10.0], atol=5 * 3 / math.sqrt(N // 4))
    np.testing.assert_allclose(m.std(axis=0), [0.5, 1.0, 3.0], rtol=0.02)
    assert float(qt.random.normal(5.0, 0.0)) == 5.0     # scale 0 is allowed


def test_exponential(rng, fusion):
    _seed(rng)
    for scale in (1.0, 2.5):
        e = np.asarray(qt.random.exponential(scale, N) if scale != 1.0 else qt.random.exponential(size=N))
        assert e.min() >= 0.0
        assert _close(e.mean(), scale, scale / math.sqrt(N))
        assert _close(e.var(), scale**2, scale**2 * math.sqrt(8 / N))
    assert np.all(np.asarray(qt.random.exponential(0.0, 5)) == 0.0)


def test_randint_bounds_and_counts(rng, fusion):
    _seed(rng)
    v = np.asarray(qt.random.randint(-3, 7, size=50_000))
    assert v.dtype == np.int64 and v.min() == -3 and v.max() == 6
    counts = np.bincount(v + 3, minlength=10)
    assert np.all(np.abs(counts - 5000) < 5 * math.sqrt(5000))
    w = np.asarray(qt.random.randint(4, size=20_000))           # high=None: [0, low)
    assert w.min() == 0 and w.max() == 3
    assert np.all(np.abs(np.bincount(w) - 5000) < 5 * math.sqrt(5000))
    b = np.asarray(qt.random.randint(2, size=10_000, dtype=bool))
    assert b.dtype == np.bool_ and _close(b.mean(), 0.5, 0.005)
    i8 = np.asarray(qt.random.randint(-128, 128, size=10_000, dtype=np.int8))
    assert i8.dtype == np.int8 and i8.min() == -128 and i8.max() == 127
    u8 = np.asarray(qt.random.randint(250, 256, size=1000, dtype="uint8"))
    assert u8.dtype == np.uint8 and set(u8.tolist()) == set(range(250, 256))
    full = np.asarray(qt.random.randint(0, 2**64, size=10_000, dtype=np.uint64))
    assert full.dtype == np.uint64 and full.max() > 2**63 and full.min() < 2**63
    s = np.asarray(qt.random.randint(-2**63, 2**63, size=10_000))
    assert s.min() < -2**62 and s.max() > 2**62
    lo, hi = np.array([0, 1, -50]), np.array([[3], [1000]])
    a = np.asarray(qt.random.randint(lo, hi, size=(5000, 2, 3)))
    assert np.all(a >= lo) and np.all(a < hi)
    assert np.all(a[:, 0, :].min(axis=0) == lo) and np.all(a[:, 0, :].max(axis=0) == 2)
    assert np.all(a[:, 1, :].max(axis=0) > 900)
    one = qt.random.randint(9, 10)
    assert one.shape == () and int(one) == 9


def test_choice_distributions(rng, fusion):
    _seed(rng)
    p = [0.1, 0.2, 0.3, 0.4]
    c = np.asarray(qt.random.choice(4, 40_000, p=p))
    np.testing.assert_allclose(np.bincount(c, minlength=4) / 40_000, p, atol=0.01)
    u = np.asarray(qt.random.choice(6, 60_000))
    assert np.all(np.abs(np.bincount(u) - 10_000) < 5 * 100)
    pool = qt.asarray([2.5, -1.0, 7.0])
    items = np.asarray(qt.random.choice(pool, (100, 2)))
    assert items.shape == (100, 2) and set(items.ravel().tolist()) <= {2.5, -1.0, 7.0}
    w = np.asarray(qt.random.choice(10, 10, replace=False))
    np.testing.assert_array_equal(np.sort(w), np.arange(10))
    sub = np.asarray(qt.random.choice(np.arange(100) * 3, 30, replace=False))
    assert len(set(sub.tolist())) == 30 and np.all(sub % 3 == 0)
    one = qt.random.choice(pool)
    assert one.shape == () and float(one) in (2.5, -1.0, 7.0)


def test_choice_without_replacement_weighted():
    qt.random.seed(1234)
    p = np.array([0.5, 0.3, 0.2, 0.0])
    draws = np.array([np.asarray(qt.random.choice(4, 2, replace=False, p=p)) for _ in range(1500)])
    assert np.all(draws[:, 0] != draws[:, 1]) and not np.any(draws == 3)
    first = np.bincount(draws[:, 0], minlength=4) / len(draws)
    np.testing.assert_allclose(first, p, atol=5 * math.sqrt(0.25 / len(draws)))
    # successive weighted draws (NumPy's rule): P(second = j) = sum_i p_i p_j / (1 - p_i)
    second = [sum(p[i] * p[j] / (1 - p[i]) for i in range(4) if i != j) for j in range(4)]
    np.testing.assert_allclose(np.bincount(draws[:, 1], minlength=4) / len(draws), second,
                               atol=5 * math.sqrt(0.25 / len(draws)))
    full = np.asarray(qt.random.choice(qt.arange(3.0) + 1, 3, replace=False, p=[0.2, 0.5, 0.3]))
    np.testing.assert_array_equal(np.sort(full), [1.0, 2.0, 3.0])


def test_permutation(rng, fusion):
    _seed(rng)
    p = np.asarray(qt.random.permutation(50))
    assert p.dtype == np.int64
    np.testing.assert_array_equal(np.sort(p), np.arange(50))
    assert not np.array_equal(p, np.arange(50))
    x = qt.asarray(np.arange(12.0).reshape(4, 3))
    y = np.asarray(qt.random.permutation(x))
    assert sorted(map(tuple, y.tolist())) == sorted(map(tuple, np.asarray(x).tolist()))   # whole rows
    np.testing.assert_array_equal(np.asarray(x), np.arange(12.0).reshape(4, 3))        # a copy
    assert np.asarray(qt.random.permutation(-2)).shape == (0,)
    # every position is uniform: element 0 lands anywhere with probability 1/5
    where = [int(np.argmax(np.asarray(qt.random.permutation(5)) == 0)) for _ in range(500)]
    assert np.all(np.abs(np.bincount(where, minlength=5) - 100) < 5 * math.sqrt(80))


# --- shuffle in place ------------------------------------------------------------------------
def test_shuffle_tensor_in_place_seen_by_views(rng, fusion):
    _seed(rng)
    x = qt.arange(20.0)
    v = x[5:]
    r = x.reshape(4, 5)
    assert qt.random.shuffle(x) is None
    got = np.asarray(x)
    np.testing.assert_array_equal(np.sort(got), np.arange(20.0))
    assert not np.array_equal(got, np.arange(20.0))
    np.testing.assert_array_equal(np.asarray(v), got[5:])
    np.testing.assert_array_equal(np.asarray(r), got.reshape(4, 5))
    m = qt.asarray(np.arange(12).reshape(4, 3))
    qt.random.shuffle(m)
    rows = np.asarray(m)
    assert rows.dtype == np.int64
    assert sorted(map(tuple, rows.tolist())) == [tuple(range(3 * i, 3 * i + 3)) for i in range(4)]
    base = qt.arange(10.0)
    view = base[::2]                   # shuffling a view writes its base
    qt.random.shuffle(view)
    b = np.asarray(base)
    np.testing.assert_array_equal(b[1::2], np.arange(1.0, 10.0, 2))
    np.testing.assert_array_equal(np.sort(b[::2]), np.arange(0.0, 10.0, 2))


def test_shuffle_ndarrays_and_lists(rng):
    _seed(rng)
    a = np.arange(30)
    view = a[10:]
    qt.random.shuffle(a)
    np.testing.assert_array_equal(np.sort(a), np.arange(30))
    assert not np.array_equal(a, np.arange(30))
    np.testing.assert_array_equal(view, a[10:])
    lst = list("abcdefghij")
    qt.random.shuffle(lst)
    assert sorted(lst) == list("abcdefghij") and lst != list("abcdefghij")


def test_shuffle_errors():
    with pytest.raises(TypeError, match="unsized"):
        qt.random.shuffle(qt.asarray(3.0))
    with pytest.raises(TypeError, match="unsized"):
        qt.random.shuffle(np.array(3))
    with pytest.raises(TypeError, match="got int"):
        qt.random.shuffle(3)
    with pytest.raises(ValueError, match="read-only"):
        qt.random.shuffle(qt.broadcast_to(qt.arange(3.0), (2, 3)))
    ro = np.arange(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        qt.random.shuffle(ro)


# --- NumPy's errors --------------------------------------------------------------------------
ERRORS = [
    (ValueError, "scale < 0", lambda: qt.random.normal(0.0, -1.0)),
    (ValueError, "scale < 0", lambda: qt.random.normal(0.0, qt.asarray([1.0, -1.0]))),
    (ValueError, "scale < 0", lambda: qt.random.exponential(-2.0, 3)),
    (OverflowError, "Range exceeds valid bounds", lambda: qt.random.uniform(0.0, np.inf)),
    (ValueError, "not compatible with broadcast dimensions",
     lambda: qt.random.normal(np.zeros(3), 1, (3, 1))),
    (ValueError, "not compatible with broadcast dimensions",
     lambda: qt.random.uniform(np.zeros(3), 1, ())),
    (ValueError, "shape mismatch", lambda: qt.random.normal(np.zeros(3), np.ones(2))),
    (ValueError, "negative dimensions", lambda: qt.random.rand(-1)),
    (ValueError, "negative dimensions", lambda: qt.random.random((2, -1))),
    (TypeError, "cannot be interpreted as an integer", lambda: qt.random.rand(2.0)),
    (TypeError, "cannot be interpreted as an integer", lambda: qt.random.randn((2, 3))),
    (TypeError, "sequence of integers", lambda: qt.random.random(3.0)),
    (ValueError, "low >= high", lambda: qt.random.randint(5, 5)),
    (ValueError, "low >= high", lambda: qt.random.randint([0, 5], [3, 4])),
    (ValueError, "high <= 0", lambda: qt.random.randint(0)),
    (ValueError, "high <= 0", lambda: qt.random.randint(-3, size=2)),
    (ValueError, "high is out of bounds for int8", lambda: qt.random.randint(0, 300, dtype=np.int8)),
    (ValueError, "low is out of bounds for int8", lambda: qt.random.randint(-300, 3, dtype=np.int8)),
    (ValueError, "high is out of bounds for bool", lambda: qt.random.randint(0, 3, dtype=bool)),
    (TypeError, "Unsupported dtype", lambda: qt.random.randint(0, 3, dtype=float)),
    (ValueError, "a must be greater than 0", lambda: qt.random.choice(0)),
    (ValueError, "a must be greater than 0", lambda: qt.random.choice(-1, 3)),
    (ValueError, "'a' cannot be empty", lambda: qt.random.choice([])),
    (ValueError, "a must be 1-dimensional$", lambda: qt.random.choice(np.zeros((2, 2)))),
    (ValueError, "a must be 1-dimensional or an integer", lambda: qt.random.choice(3.5)),
    (ValueError, "'a' and 'p' must have same size", lambda: qt.random.choice(3, p=[0.5, 0.5])),
    (ValueError, "probabilities are not non-negative", lambda: qt.random.choice(3, p=[0.5, 0.6, -0.1])),
    (ValueError, "probabilities do not sum to 1", lambda: qt.random.choice(3, p=[0.5, 0.6, 0.1])),
    (ValueError, "probabilities do not sum to 1", lambda: qt.random.choice(3, p=qt.asarray([0.3, 0.3, 0.3]))),
    (ValueError, "probabilities contain NaN", lambda: qt.random.choice(3, p=[0.5, np.nan, 0.5])),
    (ValueError, "'p' must be 1-dimensional", lambda: qt.random.choice(3, p=[[0.5, 0.5, 0.0]])),
    (ValueError, "Cannot take a larger sample than population",
     lambda: qt.random.choice(3, 4, replace=False)),
    (ValueError, "Fewer non-zero entries in p than size",
     lambda: qt.random.choice(3, 2, replace=False, p=[1.0, 0.0, 0.0])),
    (IndexError, "x must be an integer or at least 1-dimensional",
     lambda: qt.random.permutation(np.array(3))),
    (IndexError, "x must be an integer or at least 1-dimensional",
     lambda: qt.random.permutation(3.0)),
]


@pytest.mark.parametrize("exc,match,call", ERRORS, ids=[f"{e[0].__name__}{i}" for i, e in enumerate(ERRORS)])
def test_errors_are_numpys(exc, match, call):
    with pytest.raises(exc, match=match):
        call()


def test_a_failed_call_does_not_advance_the_hidden_key(rng):
    s = _seed(rng)
    with pytest.raises(ValueError):
        qt.random.normal(0.0, -1.0, 3)
    a = np.asarray(qt.random.rand(3))
    qt.random.seed(s)
    np.testing.assert_array_equal(a, np.asarray(qt.random.rand(3)))


# --- qt.jit ----------------------------------------------------------------------------------
LEGACY_IN_JIT = [
    ("seed", lambda x: qt.random.seed(0)),
    ("rand", lambda x: x + qt.random.rand(3)),
    ("randn", lambda x: x + qt.random.randn(3)),
    ("random_sample", lambda x: x + qt.random.random(3)),     # (an alias: its name is random_sample)
    ("random_sample", lambda x: x + qt.random.random_sample(3)),
    ("standard_normal", lambda x: x + qt.random.standard_normal(3)),
    ("randint", lambda x: x + qt.random.randint(0, 5, 3)),
    ("exponential", lambda x: x + qt.random.exponential(1.0, 3)),
    ("normal", lambda x: x + qt.random.normal(0.0, 1.0, 3)),
    ("normal", lambda x: x + qt.random.normal(size=3)),
    ("uniform", lambda x: x + qt.random.uniform(x, 2.0)),
    ("choice", lambda x: x + qt.random.choice(3, 3)),
    ("permutation", lambda x: x + qt.random.permutation(3)),
    ("shuffle", lambda x: qt.random.shuffle(x)),
]


@pytest.mark.parametrize("name,body", LEGACY_IN_JIT, ids=[f"{c[0]}{i}" for i, c in enumerate(LEGACY_IN_JIT)])
def test_legacy_calls_are_refused_inside_jit(name, body):
    qt.random.seed(0)
    before = np.asarray(qt.random.rand(2))
    qt.random.seed(0)
    f = qt.jit(body)
    with pytest.raises(qt.TracerError, match=rf"qt\.random\.{name} .*inside qt\.jit.*pass a key"):
        f(qt.zeros(3))
    np.testing.assert_array_equal(np.asarray(qt.random.rand(2)), before)   # the hidden key did not move


def test_generator_refusal_message_is_unchanged():
    g = qt.random.default_rng(0)
    with pytest.raises(qt.TracerError, match=r"^qt\.random\.Generator inside qt\.jit: its key would be "
                                             r"frozen into the trace"):
        qt.jit(lambda x: x + g.random(3))(qt.zeros(3))


def test_public_names_have_examples():
    for name in ("seed", "rand", "randn", "randint", "random", "random_sample", "ranf", "sample",
                 "standard_normal", "exponential", "shuffle", "normal", "uniform", "choice", "permutation"):
        assert name in qt.random.__all__
        assert "Example:" in getattr(qt.random, name).__doc__


def test_generator_methods_follow_numpy(fusion):
    """``default_rng``'s methods share the legacy functions' NumPy rules: ``integers`` with
    ``endpoint``, array bounds and the whole ``uint64`` range; ``uniform`` with array bounds;
    ``normal`` refusing a negative scale; ``choice`` checking ``p``."""
    g = qt.random.default_rng(11)
    v = g.integers(1, 6, size=4000, endpoint=True).numpy()
    assert v.dtype == np.int64 and v.min() == 1 and v.max() == 6
    w = g.integers(np.array([0, 10]), np.array([5, 20]), size=(500, 2)).numpy()
    assert (w[:, 0] < 5).all() and (w[:, 1] >= 10).all() and (w[:, 1] < 20).all()
    big = g.integers(0, 2**64, size=2000, dtype=np.uint64).numpy()
    assert big.dtype == np.uint64 and big.max() > 2**63   # (the top half is reached)
    with pytest.raises(ValueError, match="^qt.random.Generator.integers: low >= high"):
        g.integers(5, 3)
    u = g.uniform(np.array([0.0, 10.0]), 11.0, size=(400, 2)).numpy()
    assert (u[:, 0] < 11).all() and (u[:, 1] >= 10).all()
    with pytest.raises(ValueError, match="scale < 0"):
        g.normal(0.0, -1.0, size=3)
    with pytest.raises(ValueError, match="probabilities do not sum to 1"):
        g.choice(3, size=2, p=[0.5, 0.5, 0.5])


def test_generator_shuffle_and_exponential(fusion):
    """``Generator.shuffle`` writes in place (a view sees it); ``exponential`` has mean
    ``scale`` (within 5 standard errors) and refuses a negative scale."""
    g = qt.random.default_rng(21)
    x = qt.arange(12.0)
    v = x[3:]
    g.shuffle(x)
    assert sorted(x.tolist()) == list(range(12)) and v.tolist() == x.tolist()[3:]
    assert x.tolist() != list(range(12))
    e = g.exponential(2.0, size=40_000).numpy()
    assert e.min() >= 0 and abs(e.mean() - 2.0) < 5 * 2.0 / np.sqrt(e.size)
    assert g.standard_exponential((2, 3)).shape == (2, 3)
    with pytest.raises(ValueError, match="scale < 0"):
        g.exponential(-1.0)


def test_review_fixes(fusion):
    """``Generator.choice`` of a 2-D array gives rows (NumPy's ``axis=0``); a two-element
    list with a shape is read as a (bad) key, not as ``loc``; float32 probabilities are
    checked at float32's tolerance (NumPy's rule); a Generator method refuses ``qt.jit``
    before reading its arguments; ``default_rng()`` draws its seed from entropy."""
    g = qt.random.default_rng(5)
    table = np.arange(12.0).reshape(4, 3)
    rows = g.choice(qt.asarray(table), size=5).numpy()
    assert rows.shape == (5, 3) and all(r.tolist() in table.tolist() for r in rows)
    assert g.choice(table, size=(2, 2), replace=False).shape == (2, 2, 3)
    with pytest.raises(ValueError, match="a must be 1-dimensional"):
        qt.random.choice(table, 2)
    with pytest.raises(TypeError, match="a key is a uint32 tensor"):
        qt.random.normal([0, 7], (3,))
    assert qt.random.choice(3, size=4, p=np.array([0.3, 0.3, 0.4000001], np.float32)).shape == (4,)
    with pytest.raises(ValueError, match="do not sum to 1"):
        qt.random.choice(3, p=np.array([0.3, 0.3, 0.4000001]))
    with pytest.raises(qt.TracerError, match="Generator inside qt.jit"):
        qt.jit(lambda s: g.normal(0.0, s))(qt.ones(2))
    assert qt.random.default_rng().random(4).tolist() != qt.random.default_rng().random(4).tolist()
