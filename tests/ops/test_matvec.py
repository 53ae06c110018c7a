"""``matvec``, ``vecmat`` (NumPy 2.2's gufuncs) and ``np.vecdot`` on tensors: stacks broadcast,
the vector of ``vecmat`` (and the first of ``vecdot``) conjugated, NumPy's result dtypes;
values against NumPy in float64, gradients against JAX's, fusion on and off."""

from __future__ import annotations

import jax.numpy as jnp
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


def _complex(rng, shape, dtype):
    if dtype == "complex128":
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return rng.standard_normal(shape).astype(dtype)


def _jax_safe(name):
    """jax.numpy may lack matvec/vecmat (they are NumPy 2.2's): then the gradient is checked
    against the same product written with matmul."""
    def call(xp, a, b):
        if xp is jnp and not hasattr(jnp, name):
            return jnp.matmul(a, b[..., None])[..., 0] if name == "matvec" else \
                jnp.matmul(jnp.conj(a)[..., None, :], b)[..., 0, :]
        return getattr(xp, name)(a, b)
    return call


CASES = [
    Case("matvec", _jax_safe("matvec"), [(3, 4), (4,)]),
    Case("matvec-stack", _jax_safe("matvec"), [(2, 1, 3, 4), (5, 4)]),
    Case("matvec-complex", _jax_safe("matvec"), [(2, 3), (3,)], dtypes=("complex128",),
         gen=_complex, grad=None),
    Case("vecmat", _jax_safe("vecmat"), [(3,), (3, 2)]),
    Case("vecmat-stack", _jax_safe("vecmat"), [(4, 1, 3), (2, 3, 5)]),
    Case("vecmat-complex", _jax_safe("vecmat"), [(2, 3), (3, 4)], dtypes=("complex128",),
         gen=_complex, grad=None),
    Case("vecdot-ufunc", lambda xp, a, b: xp.vecdot(a, b), [(3, 4), (4,)]),
]


@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)




@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


@pytest.mark.parametrize("name", ["matvec", "vecmat", "vecdot"])
def test_numpy_ufunc_dispatch(name, rng, fusion):
    """``np.matvec(tensor, ...)`` arrives through ``__array_ufunc__`` and returns a tensor."""
    a, b = (rng.standard_normal((3, 3)), rng.standard_normal(3)) if name != "vecmat" else \
        (rng.standard_normal(3), rng.standard_normal((3, 3)))
    fn = getattr(np, name)
    got = fn(qt.asarray(a), b)
    assert isinstance(got, qt.Tensor)
    np.testing.assert_allclose(got.numpy(), fn(a, b), rtol=1e-13, atol=1e-13)


def test_errors():
    with pytest.raises(ValueError, match=r"qt.matvec: operand 1 has 0 dimension\(s\), it needs at least 1"):
        qt.matvec(qt.ones((2, 2)), 1.0)
    with pytest.raises(ValueError, match=r"qt.vecmat: operand 1 has 1 dimension\(s\), it needs at least 2"):
        qt.vecmat(qt.ones(2), qt.ones(2))
    with pytest.raises(ValueError, match="qt.matmul: mismatch in contracted dimension"):
        qt.matvec(qt.ones((2, 3)), qt.ones(2))
