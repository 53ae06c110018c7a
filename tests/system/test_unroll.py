"""Matrix products with a small contracted dimension and reductions over a few elements run
unrolled into elementwise operations fused into their consumers (``qtrace/graph/unroll.py``)
with fusion on, and as library calls and reduction tasks with fusion off: both against NumPy
in float64 (or exactly, for integers), values and gradients, on every test device; the
plan's shape (no library step, one kernel) and its report."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt
from qtrace.graph.unroll import MAX_TERMS

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
@pytest.mark.parametrize("k", [1, 2, 3, MAX_TERMS, MAX_TERMS + 1])
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
    assert "matmul[300, 20] -> elementwise: fused (contracted extent 2 <= 4: multiply-adds)" in fused, fused
    assert "library: matmul" in _plan(layer, x, w, b, fusion=False)
    k = MAX_TERMS + 1
    wide = _plan(layer, rng.standard_normal((300, k)), rng.standard_normal((k, 20)), b)
    assert "library: matmul" in wide and "multiply-adds" not in wide, wide


REDUCTIONS = {"sum": "reduce_sum", "prod": "reduce_prod", "max": "reduce_max", "min": "reduce_min",
              "any": "reduce_any", "all": "reduce_all"}


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool"])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_over_a_few_elements_match_numpy(fusion, rng, name, dtype):
    """Every reduction over axes of 1 to 5 elements in all (inner, outer, two axes, all),
    with keepdims, inside a chain and as an output, NaN and -0.0 included for floats."""
    x = rng.standard_normal((7, 3, 2))
    if dtype == "bool":
        x = x > 0
    elif dtype == "int64":
        x = rng.integers(-3, 4, x.shape)
    else:
        x = x.astype(dtype)
        x[1, 2, 0], x[4, 0, 1], x[2, 1, 1] = np.nan, -0.0, 0.0
    if name in ("sum", "prod") and dtype == "bool":
        pytest.skip("NumPy sums and multiplies bools as int64: covered by the int64 case")

    def fn(xp, x):
        f = getattr(xp, name)
        inner, outer, both = f(x, axis=2), f(x[:4], axis=0), f(x[:, :2], axis=(1, 2))
        keep = f(x, axis=1, keepdims=True)
        whole, one = f(x[0, :, 1]), f(x[:, 1:2], axis=1)
        chain = (keep == x) if dtype == "bool" else x - keep
        return inner, outer, both, keep, whole, one, chain

    got = fn(qt, qt.asarray(x))
    qt.eval(*got)
    for k, (g, w) in enumerate(zip(got, fn(np, x))):
        g = np.asarray(g.numpy())
        assert g.dtype == np.asarray(w).dtype and g.shape == np.shape(w), (k, g.dtype, g.shape)
        if name in ("sum", "prod") and dtype == "float32":  # (qtrace accumulates in float64)
            np.testing.assert_allclose(g, w, rtol=3e-7, atol=2e-6, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
        if dtype.startswith("float"):  # -0.0 stays -0.0
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w), err_msg=f"output {k} sign")


def _softmax_loss(xp):
    def loss(s, y):
        s = s - xp.max(s, axis=1, keepdims=True)
        e = xp.exp(s)
        p = e / xp.sum(e, axis=1, keepdims=True)
        return -xp.sum(xp.log(p[xp.arange(s.shape[0]), y]))
    return loss


@pytest.mark.parametrize("how", ["eager", "jit"])
def test_softmax_gradient_matches_jax(fusion, rng, how):
    """A softmax over three classes (max and sum over three elements: unrolled) and its
    gradient, eager and jitted, vs JAX."""
    s, y = rng.standard_normal((500, 3)) * 3, rng.integers(0, 3, 500)
    vg = qt.value_and_grad(_softmax_loss(qt))
    if how == "jit":
        vg = qt.jit(vg)
    value, grad = vg(qt.asarray(s), qt.asarray(y))
    want_value, want_grad = jax.value_and_grad(_softmax_loss(jnp))(s, y)
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-12)
    np.testing.assert_allclose(grad.numpy(), np.asarray(want_grad), rtol=1e-10, atol=1e-13)


def test_a_softmax_has_no_reduction_task(rng):
    """The softmax's reductions over three classes are unrolled into its one kernel; over
    five classes they stay reduction tasks."""
    def softmax(s):
        e = qt.exp(s - qt.max(s, axis=1, keepdims=True))
        return e / qt.sum(e, axis=1, keepdims=True)

    three = _plan(softmax, rng.standard_normal((400, 3)))
    assert "reduce" not in three.split("fusion decisions")[0], three
    assert "reduce_max[400] -> elementwise: fused (3 element(s) per result <= 4: unrolled)" in three
    five = _plan(softmax, rng.standard_normal((400, 5)))
    assert "(reduce)" in five and "unrolled" not in five, five


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
