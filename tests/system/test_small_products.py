"""Matrix products with a small contracted dimension run as multiply-adds fused into their
consumers (``qtrace/graph/small_products.py``) with fusion on, and as library calls with
fusion off: both against NumPy in float64 (or exactly, for integers), values and gradients,
on every test device; the plan's shape (no library step, one kernel) and its report."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt
from qtrace.graph.small_products import MAX_CONTRACTED

jax.config.update("jax_enable_x64", True)

DTYPES = ["float64", "float32", "complex128", "int64"]
RTOL = {"float64": 1e-13, "float32": 2e-6, "complex128": 1e-13, "int64": 0}


def _operands(rng, m: int, k: int, n: int, dtype: str):
    if dtype == "int64":
        return rng.integers(-50, 50, (m, k)), rng.integers(-50, 50, (k, n))
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if dtype == "complex128":
        a, b = a + 1j * rng.standard_normal((m, k)), b + 1j * rng.standard_normal((k, n))
    return a.astype(dtype), b.astype(dtype)


def _close(got, want, dtype: str, what: str = ""):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    if dtype == "int64":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    # each element is a sum of k products: bounded by the sum of their magnitudes
    scale = np.maximum(np.abs(want), 1.0)
    np.testing.assert_array_less(np.abs(got - want), RTOL[dtype] * 8 * scale + 1e-300, err_msg=what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 2, 3, MAX_CONTRACTED, MAX_CONTRACTED + 1])
def test_products_alone_and_in_chains_match_numpy(fusion, rng, dtype, k):
    """A product as an output, inside an elementwise chain, read by a reduction and by a
    second product, with transposed and sliced operands: all as NumPy computes them."""
    m, n = int(rng.integers(1, 40)), int(rng.integers(1, 70))
    a, b = _operands(rng, m, k, n, dtype)
    bias = _operands(rng, 1, 1, n, dtype)[1]
    c = _operands(rng, n, k, 1, dtype)[0]            # (n, k): c.T is a transposed operand

    def fn(xp, a, b, bias, c):
        p = a @ b
        chain = (p + bias) * 2 - p if dtype == "int64" else xp.tanh(p + bias) if dtype != "complex128" \
            else xp.exp(0.01 * (p + bias))
        twice = (a @ b) @ c                             # (m, k): a product of a product
        strided = a[::2] @ c.T[:, ::-1]                 # (m/2, n): strided, reversed operands
        return p, chain, xp.sum(p, axis=0), twice, strided

    got = fn(qt, *(qt.asarray(x) for x in (a, b, bias, c)))
    qt.eval(*got)
    for name, g, w in zip(["product", "chain", "column sums", "product of a product", "strided"],
                          got, fn(np, a, b, bias, c)):
        _close(g.numpy(), np.asarray(w), dtype, name)


def test_a_vector_times_a_matrix_and_a_matrix_times_a_vector(fusion, rng):
    """1-D operands (NumPy's matmul promotes them to a row or column and drops it)."""
    a, b = rng.standard_normal((50, 3)), rng.standard_normal(3)
    v, w = rng.standard_normal(2), rng.standard_normal((2, 40))
    got = qt.exp(qt.asarray(a) @ qt.asarray(b)), qt.asarray(v) @ qt.asarray(w)
    qt.eval(*got)
    _close(got[0].numpy(), np.exp(a @ b), "float64", "matrix @ vector")
    _close(got[1].numpy(), v @ w, "float64", "vector @ matrix")


def _layer_loss(xp):
    def loss(w1, b1, w2, x):
        hidden = xp.tanh(x @ w1 + b1)                   # K = 2: written as multiply-adds
        scores = hidden @ w2                             # K = 30: a library call
        return xp.sum(xp.exp(-scores ** 2)) + xp.sum((scores @ w2.T) * hidden)  # K = 3
    return loss


@pytest.mark.parametrize("how", ["eager", "jit"])
def test_gradients_through_small_products_match_jax(fusion, rng, how):
    """Reverse mode records the products (the rewrite happens after differentiation):
    ``qt.grad`` eager and jitted vs ``jax.grad`` in float64."""
    x = rng.standard_normal((200, 2))
    w1, b1, w2 = rng.standard_normal((2, 30)), rng.standard_normal((1, 30)), rng.standard_normal((30, 3))
    grad = qt.grad(_layer_loss(qt), argnums=(0, 1, 2, 3))
    if how == "jit":
        grad = qt.jit(grad)
    got = grad(*(qt.asarray(t) for t in (w1, b1, w2, x)))
    want = jax.grad(_layer_loss(jnp), argnums=(0, 1, 2, 3))(w1, b1, w2, x)
    for name, g, w in zip(["w1", "b1", "w2", "x"], got, want):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-10, atol=1e-12, err_msg=name)


def _plan(fn, *arrays, fusion: bool = True) -> str:
    old = qt.config.fusion
    qt.config.fusion = fusion
    try:
        return str(qt.explain(fn, *(qt.asarray(a) for a in arrays)))
    finally:
        qt.config.fusion = old


def test_a_layer_is_one_kernel_with_no_library_step(rng):
    """``tanh(x @ w + b)`` with K = 2 is one map kernel reading x, w and b, and the report
    says why; fusion off keeps the library call; K above the limit keeps it too."""
    def layer(x, w, b):
        return qt.tanh(x @ w + b)

    x, w, b = rng.standard_normal((300, 2)), rng.standard_normal((2, 20)), rng.standard_normal((1, 20))
    fused = _plan(layer, x, w, b)
    assert "1 task(s)" in fused and "library" not in fused, fused
    assert "matmul[300, 20] -> multiply-adds: fused (contracted extent 2" in fused, fused
    assert "library: matmul" in _plan(layer, x, w, b, fusion=False)
    k = MAX_CONTRACTED + 1
    wide = _plan(layer, rng.standard_normal((300, k)), rng.standard_normal((k, 20)), b)
    assert "library: matmul" in wide and "multiply-adds" not in wide, wide


def test_a_jitted_layer_launches_one_task(rng):
    """Counted at run time: one task per call of the jitted layer, its values NumPy's."""
    layer = qt.jit(lambda x, w, b: qt.tanh(x @ w + b))
    x, w, b = rng.standard_normal((500, 3)), rng.standard_normal((3, 64)), rng.standard_normal(64)
    args = [qt.asarray(t) for t in (x, w, b)]
    layer(*args).numpy()
    qt.reset_stats()
    got = layer(*args).numpy()
    assert qt.stats()["tasks_run"] == 1
    _close(got, np.tanh(x @ w + b), "float64")
