"""Index grids, triangular index sets, spaced sequences and windows (``qtrace/tracer/grids.py``).

Functions of arrays run through the harness of ``composite_cases.py`` (forward against NumPy
in float64, float32 and int32 — dtype and shape exactly — and gradients against
``jax.grad`` or finite differences in float64); creation functions are compared with
NumPy's results directly. Every test runs with fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

import numpy as np
import pytest
from composite_cases import (
    Case,
    _check_forward,
    forward_params,
    gradient_params,
    positive,
    run_forward,
    run_gradient,
)

import qtrace as qt

INTS = ("float64", "float32", "int32", "bool")


def _negative(rng, shape, dtype):
    x = np.array(positive(rng, shape, dtype))
    x *= -1
    return x


CASES = [
    # vander
    Case("vander", lambda xp, x: xp.vander(x), [(4,)], dtypes=INTS),
    Case("vander-N", lambda xp, x: xp.vander(x, 6), [(3,)], grad="fd"),
    Case("vander-increasing", lambda xp, x: xp.vander(x, 3, increasing=True), [(5,)]),
    Case("vander-N1", lambda xp, x: xp.vander(x, 1), [(3,)], grad=None),
    Case("vander-N0", lambda xp, x: xp.vander(x, N=0), [(3,)], grad=None),
    Case("vander-empty", lambda xp, x: xp.vander(x), [(0,)], grad=None),
    # logspace / geomspace of array endpoints
    Case("logspace", lambda xp, a, b: xp.logspace(a, b, 5), [(), ()]),
    Case("kaiser-beta", lambda xp, b: xp.kaiser(6, b * 3.0), [()], dtypes=("float64",), grad="fd"),
    Case("logspace-arrays", lambda xp, a, b: xp.logspace(a, b, 4, base=2.0, axis=-1), [(2,), (3, 1)]),
    Case("logspace-noend", lambda xp, a, b: xp.logspace(a, b, 3, endpoint=False, axis=1), [(2,), ()],
         grad="fd"),
    Case("logspace-equal", lambda xp, a: xp.logspace(a, a, 3), [(2,)], grad="fd"),
    Case("logspace-one", lambda xp, a, b: xp.logspace(a, b, 1), [(), ()], grad="fd"),
    Case("logspace-base-array", lambda xp, a, b, c: xp.logspace(a, b, 3, base=c, axis=-1),
         [(), (), (2,)], gen=positive, grad="fd", grad_args=(0, 1)),
    Case("logspace-dtype", lambda xp, a, b: xp.logspace(a, b, 4, dtype=np.float32), [(), ()],
         grad=None),
    Case("geomspace", lambda xp, a, b: xp.geomspace(a, b, 5), [(), ()], gen=positive, grad="fd"),
    Case("geomspace-neg", lambda xp, a, b: xp.geomspace(a, b, 4), [(2,), ()], gen=_negative, grad="fd"),
    Case("geomspace-axis", lambda xp, a, b: xp.geomspace(a, b, 3, endpoint=False, axis=-1),
         [(2,), (2,)], gen=positive, grad="fd"),
    Case("geomspace-one", lambda xp, a, b: xp.geomspace(a, b, 1), [(), ()], gen=positive, grad="fd"),
    Case("geomspace-dtype", lambda xp, a, b: xp.geomspace(a, b, 4, dtype=np.float32), [(), ()],
         gen=positive, grad=None),
    # index sets of arrays
    Case("tril_indices_from", lambda xp, a: xp.tril_indices_from(a), [(3, 4)], dtypes=("bool",), grad=None),
    Case("tril_indices_from-k", lambda xp, a: xp.tril_indices_from(a, k=-1), [(4, 2)], dtypes=("int32",),
         grad=None),
    Case("triu_indices_from", lambda xp, a: xp.triu_indices_from(a, 1), [(3, 3)], dtypes=("float32",),
         grad=None),
    Case("diag_indices_from", lambda xp, a: xp.diag_indices_from(a), [(3, 3, 3)], dtypes=("float64",),
         grad=None),
    Case("ix_", lambda xp, a, b: xp.ix_(a, b), [(3,), (2,)], dtypes=("int32", "float64", "bool"),
         grad=None),
]


# creation functions (no array input): compared with NumPy's result
CREATION = [
    ("tri", lambda xp: xp.tri(3)),
    ("tri-rect-k", lambda xp: xp.tri(3, 5, k=2, dtype=np.int32)),
    ("tri-neg-k", lambda xp: xp.tri(4, 2, -1, dtype=bool)),
    ("tri-empty", lambda xp: xp.tri(0, 3)),
    ("tri-negative", lambda xp: xp.tri(-1)),
    ("tri-negative-M", lambda xp: xp.tri(3, -2)),
    ("indices", lambda xp: xp.indices((2, 3))),
    ("indices-float", lambda xp: xp.indices((2, 1, 3), dtype=np.float32)),
    ("indices-sparse", lambda xp: xp.indices((2, 3, 4), sparse=True)),
    ("indices-0d", lambda xp: xp.indices(())),
    ("indices-empty", lambda xp: xp.indices((0, 2))),
    ("ix_-lists", lambda xp: xp.ix_([0, 2], [True, False, True, True], [])),
    ("ix_-empty-arrays", lambda xp: xp.ix_(np.zeros(0), np.array([], bool), np.array([1.5]))),
    ("tril_indices", lambda xp: xp.tril_indices(4)),
    ("tril_indices-k-m", lambda xp: xp.tril_indices(3, 1, 5)),
    ("triu_indices", lambda xp: xp.triu_indices(4, -1)),
    ("triu_indices-m", lambda xp: xp.triu_indices(2, m=4)),
    ("triu_indices-far", lambda xp: xp.triu_indices(3, 9)),
    ("tril_indices-negative", lambda xp: xp.tril_indices(-2)),
    ("diag_indices-negative", lambda xp: xp.diag_indices(-1)),
    ("diag_indices", lambda xp: xp.diag_indices(3)),
    ("diag_indices-3", lambda xp: xp.diag_indices(2, 3)),
    ("logspace", lambda xp: xp.logspace(0, 3, 7)),
    ("logspace-base", lambda xp: xp.logspace(1, 2, 5, base=2, endpoint=False)),
    ("logspace-int", lambda xp: xp.logspace(0, 2, 3, dtype=int)),
    ("logspace-zero", lambda xp: xp.logspace(0, 1, 0)),
    ("logspace-lists", lambda xp: xp.logspace([0, 1], [2, 3], 4, axis=1)),
    ("logspace-base-list", lambda xp: xp.logspace(1, 2, 3, base=np.array([2.0, 3.0]), axis=-1)),
    ("logspace-f32", lambda xp: xp.logspace(np.float32(0), np.array(2, np.float32), 3)),
    ("geomspace", lambda xp: xp.geomspace(1, 1000, 4)),
    ("geomspace-neg", lambda xp: xp.geomspace(-1000, -1, 4)),
    ("geomspace-complex", lambda xp: xp.geomspace(1j, 1000j, 4)),
    ("geomspace-complex-turn", lambda xp: xp.geomspace(-1 + 0j, 1 + 0j, 5)),
    ("geomspace-lists", lambda xp: xp.geomspace([1, -2], [100, -200], 3, axis=1)),
    ("geomspace-f32", lambda xp: xp.geomspace(np.float32(2), np.float32(3), 3)),
    ("geomspace-empty", lambda xp: xp.geomspace(2, 3, 0)),
    ("fromfunction", lambda xp: xp.fromfunction(lambda i, j: i * 10 + j, (2, 3))),
    ("fromfunction-int", lambda xp: xp.fromfunction(lambda i, j, c: i * c - j, (3, 2), dtype=int, c=3)),
    ("bartlett", lambda xp: xp.bartlett(7)),
    ("bartlett-even", lambda xp: xp.bartlett(6)),
    ("blackman", lambda xp: xp.blackman(8)),
    ("hamming", lambda xp: xp.hamming(9)),
    ("hanning", lambda xp: xp.hanning(10)),
    ("hanning-float-M", lambda xp: xp.hanning(5.5)),
    ("hamming-one", lambda xp: xp.hamming(1)),
    ("kaiser", lambda xp: xp.kaiser(9, 8.6)),
    ("kaiser-even-zero-beta", lambda xp: xp.kaiser(4, 0.0)),
    ("kaiser-one", lambda xp: xp.kaiser(1, 3.0)),
    ("kaiser-empty", lambda xp: xp.kaiser(0, 3.0)),
    ("mask_indices-triu", lambda xp: xp.mask_indices(4, xp.triu, 1)),
    ("mask_indices-tril", lambda xp: xp.mask_indices(3, xp.tril, -1)),
    ("mask_indices-numpy-fn", lambda xp: xp.mask_indices(3, np.triu)),
    ("blackman-empty", lambda xp: xp.blackman(0)),
    ("bartlett-negative", lambda xp: xp.bartlett(-2)),
]


@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)


@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


@pytest.mark.parametrize("name,fn", CREATION, ids=[c[0] for c in CREATION])
def test_creation(name, fn, fusion):
    _check_forward(fn(qt), fn(np), fn(np), 1e-13, name)


def test_geomspace_integer_dtype_truncates(fusion):
    """``dtype=int`` truncates the float values, as NumPy: equal to NumPy's except where the
    float value is within 1e-9 of an integer (there the last bit of a device's ``exp``/``log``
    decides, e.g. 127 or 128 for 2**7: either is NumPy's rule applied to that device's value)."""
    got = qt.geomspace(1, 256, 9, dtype=int)
    floats = np.geomspace(1, 256, 9)
    want = np.geomspace(1, 256, 9, dtype=int)
    assert got.dtype == want.dtype and got.shape == want.shape
    got = got.numpy()
    near = np.abs(floats - np.round(floats)) < 1e-9
    np.testing.assert_array_equal(got[~near], want[~near])
    assert np.all((got[near] == want[near]) | (got[near] == np.round(floats[near]))), (got, want)


def test_geomspace_endpoints_are_exact(rng, fusion):
    # (complex endpoints are rotated to the positive reals and back, as NumPy does: to an ulp)
    for start, stop in [(rng.uniform(0.1, 9), rng.uniform(10, 99)),
                        (-rng.uniform(1, 2), -rng.uniform(3, 4))]:
        got = qt.geomspace(start, stop, 7).numpy()
        want = np.geomspace(start, stop, 7)
        assert got[0] == want[0] == start and got[-1] == want[-1] == stop
        np.testing.assert_allclose(got, want, rtol=1e-13)
    t = qt.asarray(rng.uniform(1, 2, 3))
    got = qt.geomspace(t, 2 * t, 4, axis=1).numpy()
    np.testing.assert_array_equal(got[:, 0], t.numpy())
    np.testing.assert_array_equal(got[:, -1], 2 * t.numpy())


def test_created_on_the_asked_device(fusion):
    dev = qt.zeros(1).device
    for t in (qt.tri(2, device=dev), qt.indices((2, 2), device=dev), qt.logspace(0, 1, 3, device=dev),
              qt.geomspace(1, 2, 3, device=dev), qt.hanning(4, device=dev), qt.bartlett(3, device=dev),
              qt.tril_indices(3, device=dev)[0], qt.diag_indices(2, device=dev)[1],
              qt.fromfunction(lambda i: i, (3,), device=dev), *qt.indices((2, 1), sparse=True, device=dev)):
        assert t.device == dev
    a = qt.ones((2, 2))
    assert qt.tril_indices_from(a)[0].device == a.device
    assert qt.vander(qt.ones(2)).device == a.device


def test_fromfunction_calls_once_with_tensors(fusion):
    calls = []

    def f(i, j, scale=1.0):
        calls.append((type(i), type(j)))
        return (i - j) * scale

    got = qt.fromfunction(f, (3, 4), scale=2.0)
    np.testing.assert_array_equal(got.numpy(), np.fromfunction(lambda i, j: (i - j) * 2.0, (3, 4)))
    assert calls == [(qt.Tensor, qt.Tensor)]


def test_numpy_dispatch(rng, fusion):
    """``np.<name>(tensor)`` (and ``like=tensor``) runs qtrace's function."""
    x = rng.standard_normal(4)
    t = qt.asarray(x)
    for fn, args in [(np.vander, ()), (np.vander, (3, True)), (np.logspace, (x[::-1], 3))]:
        got = fn(t, *args)
        assert isinstance(got, qt.Tensor), fn.__name__
        np.testing.assert_allclose(got.numpy(), fn(x, *args), rtol=1e-13)
    m = qt.asarray(rng.standard_normal((3, 3)))
    for fn in (np.tril_indices_from, np.triu_indices_from, np.diag_indices_from):
        got = fn(m)
        assert all(isinstance(g, qt.Tensor) for g in got), fn.__name__
        for g, w in zip(got, fn(np.ones((3, 3)))):
            np.testing.assert_array_equal(g.numpy(), w)
    got = np.ix_(t, qt.asarray([True, False]))
    assert all(isinstance(g, qt.Tensor) for g in got)
    assert [g.shape for g in got] == [(4, 1), (1, 1)]
    got = np.geomspace(qt.abs(t) + 1, 3.0, 5)
    assert isinstance(got, qt.Tensor)
    np.testing.assert_allclose(got.numpy(), np.geomspace(np.abs(x) + 1, 3.0, 5), rtol=1e-13)
    np.testing.assert_array_equal(np.tri(3, like=t).numpy(), np.tri(3))
    got = np.fromfunction(lambda i, j: i + j, (2, 2), like=t)
    assert isinstance(got, qt.Tensor) and got.tolist() == [[0.0, 1.0], [1.0, 2.0]]


def test_inside_jit(rng, fusion):
    @qt.jit
    def step(x, a, k):
        v = qt.vander(x, 4) @ qt.logspace(a, a + 1, 4)
        w = qt.geomspace(qt.exp(a), 8.0, 4) * qt.hanning(4) + qt.bartlett(4)
        r, c = qt.tril_indices_from(qt.tri(4))
        return v + w + qt.sum(qt.tri(4, k=k)) + qt.sum(qt.indices((4, 2)), axis=(0, 2)) + qt.sum(r[c])

    def ref(x, a, k):
        v = np.vander(x, 4) @ np.logspace(a, a + 1, 4)
        w = np.geomspace(np.exp(a), 8.0, 4) * np.hanning(4) + np.bartlett(4)
        r, c = np.tril_indices_from(np.tri(4))
        return v + w + np.sum(np.tri(4, k=k)) + np.sum(np.indices((4, 2)), axis=(0, 2)) + np.sum(r[c])

    qt.reset_stats()
    for k in (0, -1):   # k may be traced: one trace
        x, a = rng.standard_normal(4), rng.standard_normal()
        np.testing.assert_allclose(step(qt.asarray(x), qt.asarray(a), k).numpy(), ref(x, a, k), rtol=1e-12)
    assert qt.stats()["traces"] == 1
    with pytest.raises(qt.TracerError, match="qt.ix_"):
        qt.jit(lambda m: qt.ix_(m))(qt.asarray([True, False]))


# --- errors --------------------------------------------------------------------------
ERRORS = [
    (lambda: qt.tri(2.5), TypeError, "qt.tri: N"),
    (lambda: qt.tri(2, qt.asarray(2)), TypeError, "qt.tri: M must be a Python or NumPy integer"),
    (lambda: qt.tri(2, like=np.ones(2)), TypeError, "qt.tri: like= must be None"),
    (lambda: qt.vander(qt.ones((2, 2))), ValueError, r"qt.vander: x must be a one-dimensional .*\(2, 2\)"),
    (lambda: qt.vander(qt.ones(2), -1), ValueError, "qt.vander: N must be non-negative"),
    (lambda: qt.indices((2, -1)), ValueError, "qt.indices: negative dimensions"),
    (lambda: qt.indices((2, 1.5)), TypeError, "qt.indices: dimensions"),
    (lambda: qt.ix_(qt.ones((2, 2))), ValueError, r"qt.ix_: Cross index .*\(2, 2\)"),
    (lambda: qt.ix_([[1, 2]]), ValueError, "qt.ix_: Cross index must be 1 dimensional"),
    (lambda: qt.triu_indices(3, k=0.5), TypeError, "qt.triu_indices: k must be an integer"),
    (lambda: qt.triu_indices(3, k=qt.asarray(1)), TypeError, "qt.triu_indices: k must be a Python"),
    (lambda: qt.tri(3, k=0.5), TypeError, "qt.tri: k must be an integer"),
    (lambda: qt.tril_indices_from(qt.ones(3)), ValueError,
     r"qt.tril_indices_from: input array must be 2-d.*\(3,\)"),
    (lambda: qt.triu_indices_from(qt.ones((2, 2, 2))), ValueError,
     "qt.triu_indices_from: input array must be 2-d"),
    (lambda: qt.diag_indices(2.0), TypeError, "qt.diag_indices: n"),
    (lambda: qt.diag_indices_from(qt.ones(3)), ValueError,
     "qt.diag_indices_from: input array must be at least 2-d"),
    (lambda: qt.diag_indices_from(qt.ones((2, 3))), ValueError,
     r"qt.diag_indices_from: All dimensions.*\(2, 3\)"),
    (lambda: qt.logspace(0, 1, -1), ValueError, "qt.logspace: Number of samples, -1"),
    (lambda: qt.logspace(0, 1, 2.5), TypeError, "qt.logspace: num"),
    (lambda: qt.logspace(0, 1, 3, axis=1), np.exceptions.AxisError, "qt.logspace: axis 1"),
    (lambda: qt.geomspace(0, 1), ValueError, "qt.geomspace: Geometric sequence cannot include zero"),
    (lambda: qt.geomspace([1, 2], [3, 0]), ValueError, "qt.geomspace: Geometric sequence"),
    (lambda: qt.geomspace(1, 2, qt.asarray(3)), TypeError, "qt.geomspace: num"),
    (lambda: qt.fromfunction(lambda i: i, (2,), like=[1]), TypeError, "qt.fromfunction: like="),
    (lambda: qt.hanning(qt.asarray(3)), TypeError, "qt.hanning: M must be a Python or NumPy number"),
    (lambda: qt.kaiser(3, qt.ones(2)), ValueError, r"qt.kaiser: beta must be a number \(0-d\)"),
    (lambda: qt.jit(lambda: qt.mask_indices(3, qt.triu))(), qt.TracerError, "qt.nonzero: the result's shape"),
    (lambda: qt.bartlett("three"), TypeError, "qt.bartlett: M must be a real number"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()
