"""Conversions (``asanyarray``, ``ascontiguousarray``, ``asarray_chkfinite``), tests of
complex kinds (``iscomplex``, ``isreal``, ``iscomplexobj``, ``isrealobj``,
``real_if_close``) and ``sort_complex``: against NumPy on fresh random inputs (harness of
``composite_cases.py``), with fusion on and off; the functions whose results depend on
values raise ``TracerError`` inside ``qt.jit`` and say so."""

from __future__ import annotations

import numpy as np
import pytest
from composite_cases import (
    Case,
    forward_params,
    gradient_params,
    normal,
    run_forward,
    run_gradient,
)

import qtrace as qt


def _complexish(rng, shape, dtype):
    """Complex values, some with a zero imaginary part; real dtypes as ``normal``."""
    if np.dtype(dtype).kind != "c":
        return normal(rng, shape, dtype)
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape) * (rng.random(shape) < 0.5)
    return x.astype(dtype)


def _nearly_real(rng, shape, dtype):
    """Imaginary parts far below ``100 * eps`` of the dtype's precision."""
    eps = np.finfo(dtype).eps
    return (rng.standard_normal(shape) + 1j * eps * rng.uniform(-1, 1, shape)).astype(dtype)


CASES = [
    Case("asanyarray", lambda xp, x: xp.asanyarray(x) * 2, [(2, 3)], grad="fd"),
    Case("asanyarray-dtype-order", lambda xp, x: xp.asanyarray(x, dtype="float32", order="F"), [(3,)],
         grad=None),
    Case("ascontiguousarray-0d", lambda xp, x: xp.ascontiguousarray(x) + 1, [()], grad="fd"),
    Case("ascontiguousarray", lambda xp, x: xp.ascontiguousarray(x.T), [(2, 3)], grad="fd"),
    Case("asarray_chkfinite", lambda xp, x: xp.asarray_chkfinite(x) * x, [(4,)], grad="fd"),
    Case("iscomplex", lambda xp, x: xp.iscomplex(x), [(6,)],
         dtypes=("complex128", "complex64", "float64", "int32"), gen=_complexish, grad=None),
    Case("isreal", lambda xp, x: xp.isreal(x), [(2, 3)],
         dtypes=("complex128", "float32", "bool"), gen=_complexish, grad=None),
    # (ref64=False: the tolerance is in epsilons of the input's precision, so a complex64
    # input's NumPy result is the reference, not that of the same values in complex128)
    Case("real_if_close", lambda xp, x: xp.real_if_close(x), [(5,)], dtypes=("complex128", "complex64"),
         ref64=False, gen=_nearly_real, grad=None),
    Case("real_if_close-far", lambda xp, x: xp.real_if_close(x, tol=1e-300), [(5,)],
         dtypes=("complex128",), gen=_complexish, grad=None),
    Case("real_if_close-real", lambda xp, x: xp.real_if_close(x), [(3,)], grad=None),
    Case("sort_complex", lambda xp, x: xp.sort_complex(x), [(7,)],
         dtypes=("int8", "uint16", "int32", "float32", "float64", "complex128"), gen=_complexish,
         grad=None),
    Case("sort_complex-2d", lambda xp, x: xp.real(xp.sort_complex(x)), [(3, 4)], dtypes=("float64",)),
    Case("sort_complex-2d-complex", lambda xp, x: xp.sort_complex(x), [(3, 4)], dtypes=("complex128",),
         grad=None),
]


@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)




@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


@pytest.mark.parametrize("name", ["iscomplexobj", "isrealobj"])
def test_object_kinds_follow_the_dtype(name):
    """Decided by the dtype alone (a complex array with zero imaginary parts is complex), for
    tensors, NumPy arrays and Python data, as NumPy decides."""
    for x in ([1.0, 2.0], [1 + 0j], np.zeros(2, np.complex64), 3, qt.asarray([1.0]),
              qt.asarray([1 + 0j]), qt.zeros(2, dtype=qt.int32)):
        want = getattr(np, name)(np.asarray(x) if isinstance(x, qt.Tensor) else x)
        assert getattr(qt, name)(x) is want, (name, x)


def test_numpy_dispatch(rng, fusion):
    """NumPy's functions of values come back as tensors (its conversions, ``np.asanyarray``
    and friends, make NumPy arrays of a tensor's values: that is what they are for)."""
    z = rng.standard_normal(4) + 1j * rng.standard_normal(4)
    for fn in (np.iscomplex, np.isreal, np.real_if_close, np.sort_complex):
        got = fn(qt.asarray(z))
        assert isinstance(got, qt.Tensor), fn.__name__
        np.testing.assert_array_equal(got.numpy(), fn(z), err_msg=fn.__name__)


def test_chkfinite_raises_for_infs_and_nans(rng, fusion):
    for bad in (np.inf, -np.inf, np.nan):
        x = rng.standard_normal(5)
        x[rng.integers(5)] = bad
        with pytest.raises(ValueError, match="qt.asarray_chkfinite: array must not contain infs or NaNs"):
            qt.asarray_chkfinite(qt.asarray(x) * 2)
    qt.asarray_chkfinite(qt.asarray([1, 2]))  # integers: nothing to check


def test_value_dependent_results_need_values_outside_jit():
    for fn, match in ((qt.asarray_chkfinite, "asarray_chkfinite: checking for infs"),
                      (qt.real_if_close, "real_if_close: the result's dtype depends")):
        with pytest.raises(qt.TracerError, match=match):
            qt.jit(fn)(qt.asarray([1.0 + 0j]))


def test_order_is_checked():
    with pytest.raises(ValueError, match=r"qt.asanyarray: order must be one of .*\(got 'X'\)"):
        qt.asanyarray([1.0], order="X")
