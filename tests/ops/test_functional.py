"""``apply_along_axis`` and ``apply_over_axes`` (``qtrace/tracer/functional.py``): the function
is called on tensors, so results stay lazy and gradients flow through it. Cases run with
``xp`` = ``qt``, ``np`` and ``jax.numpy`` through the harness of ``composite_cases.py``
(fresh random inputs, values against NumPy in float64, gradients against JAX's), with fusion
on and off."""

from __future__ import annotations

import numpy as np
import pytest
from composite_cases import (
    Case,
    forward_params,
    gradient_params,
    run_forward,
    run_gradient,
)

import qtrace as qt

CASES = [
    Case("along-centre", lambda xp, x: xp.apply_along_axis(lambda v: v - xp.mean(v), 1, x),
         [(3, 4)], dtypes=("float64", "float32")),
    Case("along-scalar-result", lambda xp, x: xp.apply_along_axis(lambda v: xp.sum(v * v), 0, x),
         [(4, 3, 2)]),
    Case("along-grows", lambda xp, x: xp.apply_along_axis(lambda v: xp.outer(v, v[:2]), 1, x),
         [(2, 3, 4)]),
    Case("along-neg-axis", lambda xp, x: xp.apply_along_axis(xp.cumsum, -1, x), [(2, 5)]),
    Case("along-args", lambda xp, x: xp.apply_along_axis(lambda v, k, s=1.0: v[::k] * s, 0, x, 2, s=3.0),
         [(5, 2)]),
    Case("along-1d", lambda xp, x: xp.apply_along_axis(lambda v: v[::-1] * v[0], 0, x), [(4,)]),
    Case("along-sort", lambda xp, x: xp.apply_along_axis(xp.sort, 1, x), [(3, 5)], grad="fd"),
    Case("over-sum", lambda xp, x: xp.apply_over_axes(xp.sum, x, [0, 2]), [(2, 3, 4)]),
    Case("over-neg", lambda xp, x: xp.apply_over_axes(xp.max, x, -1), [(3, 4)], grad="fd"),
    Case("over-keepdims-fn", lambda xp, x: xp.apply_over_axes(
        lambda a, ax: xp.mean(a, axis=ax, keepdims=True), x, (1, 0)), [(3, 2)],
        dtypes=("float64", "float32")),
]


@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)




@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


def test_numpy_dispatch_and_jit(rng, fusion):
    """``np.apply_along_axis`` on a tensor calls the function with tensors and returns one;
    inside ``qt.jit`` it is traced like any other code."""
    x = rng.standard_normal((3, 4))
    seen = []

    def centre(v):
        seen.append(type(v))
        return v - v.mean()

    got = np.apply_along_axis(centre, 1, qt.asarray(x))
    assert isinstance(got, qt.Tensor) and set(seen) == {qt.Tensor}
    want = np.apply_along_axis(lambda v: v - v.mean(), 1, x)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-13, atol=1e-13)
    jitted = qt.jit(lambda t: qt.apply_over_axes(qt.sum, qt.apply_along_axis(qt.cumsum, 0, t), [1]))
    np.testing.assert_allclose(jitted(qt.asarray(x)).numpy(),
                               np.apply_over_axes(np.sum, np.apply_along_axis(np.cumsum, 0, x), [1]),
                               rtol=1e-13, atol=1e-13)


def test_results_take_the_first_slice_dtype(fusion):
    """NumPy fills a buffer of the first result's dtype: later results are cast to it."""
    x = np.array([[1.5, 2.5], [3.5, 4.5]])

    def first_as_int(xp):
        calls = []

        def fn(v):
            calls.append(v)
            return (v * 2).astype(xp.int64) if len(calls) == 1 else v * 2
        return fn

    want = np.apply_along_axis(first_as_int(np), 1, x)
    got = qt.apply_along_axis(first_as_int(qt), 1, qt.asarray(x))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)


ERRORS = [
    (lambda: qt.apply_along_axis(qt.sum, 2, qt.zeros((2, 3))), np.exceptions.AxisError, "axis 2"),
    (lambda: qt.apply_along_axis(qt.sum, 0, qt.asarray(1.0)), np.exceptions.AxisError, "0-d"),
    (lambda: qt.apply_along_axis(qt.sum, 1, qt.zeros((0, 3))), ValueError,
     r"length 0 \(array shape \(0, 3\)\)"),
    (lambda: qt.apply_along_axis(lambda v: v[:1] if float(v[0]) > 0 else v[:2], 1,
                                 qt.asarray([[1.0, 2.0], [-1.0, 3.0]])),
     ValueError, r"returned shape \(2,\) for slice \(1,\), but \(1,\)"),
    (lambda: qt.apply_over_axes(lambda a, ax: qt.sum(a), qt.zeros((2, 3, 4)), [0]), ValueError,
     "returned an array of 0 dimensions for axis 0"),
    (lambda: qt.apply_over_axes(qt.sum, qt.zeros((2, 3)), [0.5]), TypeError, "axes must be an integer"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()
