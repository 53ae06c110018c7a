"""Reductions over leading axes (``x.sum(axis=0)``): on the CPU their loops are interchanged
(blocks of outputs, one accumulator each: see ``qtrace.kernels.column_reduce``). Every case
against NumPy in float64, fusion on and off, on every test device."""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt

CASES = [  # shape, axis: output blocks of 64 — exact, partial, several, with outer axes
    ((3000, 100), 0), ((40, 64), 0), ((17, 130), 0), ((5, 16), 0), ((50, 40, 30), 0),
    ((50, 40, 30), (0, 1)), ((7, 300, 33), 1), ((9, 8, 200), (0, 1)), ((2, 3, 4, 70), (1, 2)),
    ((140_000, 16), 0),   # long columns: split over workers and abort-checked blocks
]


@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("prim", ["sum", "prod", "max", "min", "mean"])
def test_leading_axis_reductions_match_numpy(fusion, rng, shape, axis, prim):
    x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    a, c = (0.02, 1.0) if prim == "prod" else (1.5, 0.25)   # products of thousands stay finite
    got = getattr(qt, prim)(qt.asarray(x) * a + c, axis=axis).numpy()
    want = getattr(np, prim)(x * a + c, axis=axis)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("shape,axis", CASES[:4])
def test_leading_axis_reductions_of_float32_bool_int(fusion, rng, shape, axis):
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(qt.sum(qt.asarray(x), axis=axis).numpy(),
                               x.astype(np.float64).sum(axis=axis), rtol=2e-6, atol=1e-5)
    b = x > 0.4
    np.testing.assert_array_equal(qt.any(qt.asarray(b), axis=axis).numpy(), b.any(axis=axis))
    np.testing.assert_array_equal(qt.all(qt.asarray(~b | (x > -3)), axis=axis).numpy(),
                                  (~b | (x > -3)).all(axis=axis))
    i = rng.integers(-1000, 1000, shape)
    np.testing.assert_array_equal(qt.sum(qt.asarray(i), axis=axis).numpy(), i.sum(axis=axis))
    np.testing.assert_array_equal(qt.max(qt.asarray(i), axis=axis).numpy(), i.max(axis=axis))


def test_leading_axis_max_propagates_nan_and_keeps_argmax(fusion, rng):
    x = rng.standard_normal((300, 70))
    x[17, 5] = np.nan
    x[299, 69] = np.nan
    got = qt.max(qt.asarray(x), axis=0).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x.max(axis=0)))
    np.testing.assert_array_equal(got[~np.isnan(got)], x.max(axis=0)[~np.isnan(got)])
    y = rng.standard_normal(x.shape)   # arg-reductions keep the plain loops
    np.testing.assert_array_equal(qt.argmax(qt.asarray(y), axis=0).numpy(), y.argmax(axis=0))


def test_leading_axis_sum_gradient(fusion, rng):
    x = rng.standard_normal((500, 90))
    w = rng.standard_normal(90)
    g = qt.grad(lambda a: qt.sum(qt.sum(qt.tanh(a), axis=0) * qt.asarray(w)))(qt.asarray(x)).numpy()
    np.testing.assert_allclose(g, (1 - np.tanh(x) ** 2) * w, rtol=1e-12, atol=1e-14)
