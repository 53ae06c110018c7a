"""``qt.linalg`` with NumPy's options and dtypes, and ``numpy.linalg`` called on tensors.

* integer and bool inputs: float64 results (NumPy's conversion) for the functions defined
  on floating-point arrays, integer/bool results for the numeric ones (``matrix_power``,
  ``matmul``, ``tensordot``, ``vecdot``, ``outer``, ``cross``, ``trace``, ``diagonal``),
  dtypes and values against NumPy;
* NumPy's keywords (``svd``'s ``compute_uv``/``hermitian``, ``pinv``'s ``rcond``/
  ``hermitian``, ``matrix_rank``'s ``tol``/``hermitian``, ``qr``'s ``'r'``/``'raw'``,
  ``eigh``/``eigvalsh``'s ``UPLO``, ``cholesky``'s ``upper`` reading the upper triangle)
  against NumPy in float64 and complex128 on fresh random inputs, with fusion on and off;
  gradients where they change the computation against ``jax.grad``;
* ``np.linalg.<fn>(tensor, positional...)`` (``__array_function__``) returning tensors
  equal to NumPy's;
* the standard's signatures unchanged (parameter kinds and defaults); errors.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt

jax.config.update("jax_enable_x64", True)


# --- inputs (the generators of test_linalg_ext.py, and two more) -----------------------
from test_linalg_ext import mH, normal, spd  # noqa: E402 - a sibling test module's helpers


def symmetric(rng, shape, cx=False):
    """Hermitian with well-separated eigenvalues of both signs (distinct absolute values)."""
    n = shape[-1]
    q, _ = np.linalg.qr(normal(rng, shape, cx))
    w = np.arange(n) * 1.5 - n / 2 + 0.2 + rng.uniform(-0.1, 0.1, shape[:-1])
    return (q * w[..., None, :]) @ mH(q)


def spread(rng, shape, cx=False):
    """Singular values 10**0 ... 10**-(k-1) (k = min(M, N)), random singular vectors."""
    m, n = shape[-2:]
    k = min(m, n)
    u, _ = np.linalg.qr(normal(rng, shape[:-2] + (m, k), cx))
    v, _ = np.linalg.qr(normal(rng, shape[:-2] + (n, k), cx))
    return (u * 10.0 ** -np.arange(k)) @ mH(v)


def lower_only(a, rng):
    """``a`` with random garbage in its strict upper triangle (the lower one is read)."""
    junk = normal(rng, a.shape, np.iscomplexobj(a))
    return np.where(np.tri(a.shape[-1], k=0, dtype=bool), a, junk)


def upper_only(a, rng):
    junk = normal(rng, a.shape, np.iscomplexobj(a))
    return np.where(np.tri(a.shape[-1], k=-1, dtype=bool), junk, a)


def phase_cols(v):
    """Eigen/singular vectors (columns) with the first row's phase (sign) divided out."""
    p = v[..., 0:1, :]
    return v * np.conj(p / np.abs(p))


def _close(got, want, rtol=1e-9, atol=1e-11, what=""):
    assert isinstance(got, qt.Tensor), f"{what}: {type(got)} is not a qt.Tensor"
    g, w = got.numpy(), np.asarray(want)
    assert g.dtype == w.dtype, f"{what}: dtype {g.dtype} != {w.dtype}"
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale, err_msg=what)


CX = pytest.mark.parametrize("cx", [False, True], ids=["float64", "complex128"])


# --- integer and bool inputs -----------------------------------------------------------
def int_square(rng, dtype, kind="general"):
    """Well-conditioned integer (or bool) stacks: NumPy converts them to float64."""
    if np.dtype(dtype) == np.bool_:
        if kind == "spd":
            return np.broadcast_to(np.eye(3, dtype=bool), (2, 3, 3)).copy()
        b = rng.random((2, 3, 3)) < 0.5
        return (
            (b | b.swapaxes(-1, -2)) | np.eye(3, dtype=bool)
            if kind == "sym"
            else np.triu(b) | np.eye(3, dtype=bool)
        )
    a = rng.integers(0 if np.dtype(dtype).kind == "u" else -3, 4, (2, 3, 3))
    if kind in ("spd", "sym"):
        a = a @ a.swapaxes(-1, -2) + (3 * np.eye(3, dtype=a.dtype) if kind == "spd" else 0)
    else:
        a = a + 12 * np.eye(3, dtype=a.dtype)
    return a.astype(dtype)


FLOAT_FUNCTIONS = {  # name: (input kind, f(xp, a) with a sign-free result)
    "inv": ("general", lambda xp, a: xp.linalg.inv(a)),
    "det": ("general", lambda xp, a: xp.linalg.det(a)),
    "slogdet": ("general", lambda xp, a: tuple(xp.linalg.slogdet(a))),
    "solve": ("general", lambda xp, a: xp.linalg.solve(a, a[..., :, :1])),
    "cholesky": ("spd", lambda xp, a: xp.linalg.cholesky(a)),
    "eigvalsh": ("sym", lambda xp, a: xp.linalg.eigvalsh(a)),
    "eigh": ("sym", lambda xp, a: xp.linalg.eigh(a).eigenvalues),
    "pinv": ("general", lambda xp, a: xp.linalg.pinv(a)),
    "qr": ("general", lambda xp, a: abs(xp.linalg.qr(a).R)),
    "svd": ("general", lambda xp, a: xp.linalg.svd(a).S),
    "svdvals": ("general", lambda xp, a: xp.linalg.svdvals(a)),
    "matrix_rank": ("general", lambda xp, a: xp.linalg.matrix_rank(a)),
    "matrix_norm": ("general", lambda xp, a: xp.linalg.matrix_norm(a, ord=2)),
    "vector_norm": ("general", lambda xp, a: xp.linalg.vector_norm(a, ord=3)),
    "norm": ("general", lambda xp, a: xp.linalg.norm(a)),
    "cond": ("general", lambda xp, a: xp.linalg.cond(a)),
}


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("name", list(FLOAT_FUNCTIONS))
def test_integer_inputs_give_float64(name, dtype, fusion, rng):
    kind, f = FLOAT_FUNCTIONS[name]
    a = int_square(rng, dtype, kind)
    want = f(np, a)
    got = f(qt, qt.asarray(a))
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        _close(g, w, what=f"{name}({np.dtype(dtype)})")
    if name != "norm" and name != "cond":  # through numpy.linalg on a tensor, too
        got = f(np, qt.asarray(a))
        for g, w in zip(
            got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)
        ):
            _close(g, w, what=f"np.linalg.{name}(tensor of {np.dtype(dtype)})")


def test_integer_promotion_with_other_dtypes(fusion, rng):
    a = int_square(rng, np.int32)
    for b in (
        normal(rng, (2, 3, 1)).astype(np.float32),
        normal(rng, (2, 3, 1), cx=True).astype(np.complex64),
    ):
        _close(
            qt.linalg.solve(qt.asarray(a), qt.asarray(b)), np.linalg.solve(a, b), what=f"solve int, {b.dtype}"
        )
    f32 = normal(rng, (3, 3)).astype(np.float32) + 6 * np.eye(3, dtype=np.float32)
    _close(qt.linalg.inv(qt.asarray(f32)), np.linalg.inv(f32), rtol=1e-5, atol=1e-6, what="inv float32")
    c64 = (f32 + 1j * f32.T).astype(np.complex64)
    _close(
        qt.linalg.svdvals(qt.asarray(c64)),
        np.linalg.svd(c64, compute_uv=False),
        rtol=1e-5,
        atol=1e-6,
        what="svdvals complex64",
    )


NUMERIC_FUNCTIONS = {  # NumPy keeps integer (and bool) dtypes
    "matrix_power_0": lambda xp, a: xp.linalg.matrix_power(a, 0),
    "matrix_power_1": lambda xp, a: xp.linalg.matrix_power(a, 1),
    "matrix_power_3": lambda xp, a: xp.linalg.matrix_power(a, 3),
    "matrix_power_-2": lambda xp, a: xp.linalg.matrix_power(a, -2),
    "matmul": lambda xp, a: xp.linalg.matmul(a, a),
    "tensordot": lambda xp, a: xp.linalg.tensordot(a, a[0], axes=1),
    "vecdot": lambda xp, a: xp.linalg.vecdot(a, a),
    "outer": lambda xp, a: xp.linalg.outer(a[0, 0], a[1, 1]),
    "trace": lambda xp, a: xp.linalg.trace(a, offset=1),
    "diagonal": lambda xp, a: xp.linalg.diagonal(a),
    "matrix_transpose": lambda xp, a: xp.linalg.matrix_transpose(a),
    "cross": lambda xp, a: xp.linalg.cross(a, a[::-1]),
}


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("name", list(NUMERIC_FUNCTIONS))
def test_numeric_functions_keep_integer_dtypes(name, dtype, fusion, rng):
    f = NUMERIC_FUNCTIONS[name]
    a = int_square(rng, dtype)
    if np.dtype(dtype).kind == "u":
        a = (np.triu(a % 3, 1) + np.eye(3, dtype=a.dtype)).astype(dtype)  # small, invertible
    try:
        want = f(np, a)
    except TypeError:  # NumPy's cross of bools
        with pytest.raises(TypeError, match=rf"^qt\.linalg\.{name}: .*bool"):
            f(qt, qt.asarray(a))
        return
    _close(f(qt, qt.asarray(a)), want, what=f"{name}({np.dtype(dtype)})")
    _close(f(np, qt.asarray(a)), want, what=f"np.linalg.{name}(tensor of {np.dtype(dtype)})")


# --- NumPy's keywords against NumPy ----------------------------------------------------
@CX
@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 4)])
def test_svd_compute_uv_false(shape, cx, fusion, rng):
    a = spread(rng, shape, cx)
    s = qt.linalg.svd(qt.asarray(a), compute_uv=False)
    _close(s, np.linalg.svd(a, compute_uv=False), what="svd(compute_uv=False)")
    _close(np.linalg.svd(qt.asarray(a), False, False), np.linalg.svd(a, False, False), what="np.linalg.svd")


@CX
def test_svd_hermitian(cx, fusion, rng):
    a = lower_only(symmetric(rng, (2, 4, 4), cx), rng)  # NumPy reads the lower triangle only
    u, s, vh = np.linalg.svd(a, hermitian=True)
    for got in (qt.linalg.svd(qt.asarray(a), hermitian=True), np.linalg.svd(qt.asarray(a), True, True, True)):
        _close(got.S, s, what="svd(hermitian=True).S")
        _close(got.U @ (got.S[..., None] * got.Vh), u @ (s[..., None] * vh), what="U S Vh")
        _close(phase_cols(got.U), phase_cols(u), rtol=1e-8, atol=1e-10, what="U")
    _close(
        qt.linalg.svd(qt.asarray(a), compute_uv=False, hermitian=True),
        np.linalg.svd(a, compute_uv=False, hermitian=True),
        what="svd(compute_uv=False, hermitian=True)",
    )


@CX
def test_pinv_rcond_and_hermitian(cx, fusion, rng):
    a = spread(rng, (2, 4, 3), cx)  # singular values 1, 0.1, 0.01
    for rcond in (0.05, 1e-3):
        want = np.linalg.pinv(a, rcond)
        _close(qt.linalg.pinv(qt.asarray(a), rcond=rcond), want, rtol=1e-8, atol=1e-10, what=f"rcond={rcond}")
        _close(np.linalg.pinv(qt.asarray(a), rcond), want, rtol=1e-8, atol=1e-10, what=f"np rcond={rcond}")
    r = rng.uniform(0.02, 0.2, (2,))  # a tolerance per matrix
    _close(
        qt.linalg.pinv(qt.asarray(a), rcond=qt.asarray(r)),
        np.linalg.pinv(a, r),
        rtol=1e-8,
        atol=1e-10,
        what="array rcond",
    )
    _close(
        np.linalg.pinv(qt.asarray(a), rtol=0.05),
        np.linalg.pinv(a, rtol=0.05),
        rtol=1e-8,
        atol=1e-10,
        what="np rtol",
    )
    h = lower_only(symmetric(rng, (2, 4, 4), cx), rng)
    want = np.linalg.pinv(h, hermitian=True)
    _close(qt.linalg.pinv(qt.asarray(h), hermitian=True), want, rtol=1e-8, atol=1e-10, what="hermitian")
    _close(np.linalg.pinv(qt.asarray(h), None, True), want, rtol=1e-8, atol=1e-10, what="np hermitian")


def test_pinv_numpy_default_rcond(fusion):
    # singular values 1, 9.5e-16, 1: NumPy's default rcond 1e-15 drops the small one, the
    # standard's max(M, N) * eps (6.7e-16) keeps it
    a = np.diag([1.0, 9.5e-16, 1.0])[[2, 0, 1]]
    _close(np.linalg.pinv(qt.asarray(a)), np.linalg.pinv(a), what="np.linalg.pinv default")
    _close(
        qt.linalg.pinv(qt.asarray(a)),
        np.linalg.pinv(a, rtol=None),
        rtol=1e-9,
        atol=0,
        what="standard default",
    )
    assert np.abs(qt.linalg.pinv(qt.asarray(a)).numpy()).max() > 1e15


@CX
def test_matrix_rank_tol_and_hermitian(cx, fusion, rng):
    a = spread(rng, (3, 5, 4), cx)  # singular values 1, 0.1, 0.01, 0.001
    for tol in (0.5, 0.05, 0.005, 1e-4):
        want = np.linalg.matrix_rank(a, tol)
        _close(qt.linalg.matrix_rank(qt.asarray(a), tol=tol), want, what=f"tol={tol}")
        _close(np.linalg.matrix_rank(qt.asarray(a), tol), want, what=f"np tol={tol}")
    tols = np.array([0.5, 0.05, 1e-4])
    _close(
        qt.linalg.matrix_rank(qt.asarray(a), tol=qt.asarray(tols)),
        np.linalg.matrix_rank(a, tols),
        what="array tol",
    )
    _close(
        np.linalg.matrix_rank(qt.asarray(a), rtol=0.05), np.linalg.matrix_rank(a, rtol=0.05), what="np rtol"
    )
    h = lower_only(symmetric(rng, (2, 4, 4), cx), rng)
    v = normal(rng, (4, 2), cx)
    h[0] = lower_only(v @ mH(v), rng)  # its lower triangle's Hermitian matrix has rank 2
    for tol in (None, 1e-6):
        want = np.linalg.matrix_rank(h, tol, True)
        _close(
            qt.linalg.matrix_rank(qt.asarray(h), tol=tol, hermitian=True), want, what=f"hermitian tol={tol}"
        )
        _close(np.linalg.matrix_rank(qt.asarray(h), tol, True), want, what=f"np hermitian tol={tol}")


def test_matrix_rank_of_vectors(fusion):
    for v in (np.array([1.0, 0.0]), np.zeros(3), np.array([0, 2])):
        _close(qt.linalg.matrix_rank(qt.asarray(v)), np.int64(np.linalg.matrix_rank(v)), what=f"{v}")


@CX
@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 5), (4, 4)])
def test_qr_modes(shape, cx, fusion, rng):
    a = normal(rng, shape, cx)
    r = np.linalg.qr(a, "r")
    for got in (qt.linalg.qr(qt.asarray(a), mode="r"), np.linalg.qr(qt.asarray(a), "r")):
        assert isinstance(got, qt.Tensor)
        _close(abs(got), np.abs(r), what="qr(mode='r')")
    q, rc = np.linalg.qr(a, "complete")
    got = np.linalg.qr(qt.asarray(a), "complete")
    _close(abs(got.R), np.abs(rc), what="np.linalg.qr(t, 'complete').R")
    _close(got.Q @ got.R, a, what="Q R")
    for call in (lambda: qt.linalg.qr(qt.asarray(a), mode="raw"), lambda: np.linalg.qr(qt.asarray(a), "raw")):
        with pytest.raises(NotImplementedError, match=r"^qt\.linalg\.qr: mode='raw'"):
            call()


@CX
@pytest.mark.parametrize("uplo", ["L", "U", "u", "l"])
def test_eigh_uplo(uplo, cx, fusion, rng):
    h = symmetric(rng, (2, 4, 4), cx)
    a = upper_only(h, rng) if uplo.upper() == "U" else lower_only(h, rng)
    w, v = np.linalg.eigh(a, uplo)
    for got in (qt.linalg.eigh(qt.asarray(a), UPLO=uplo), np.linalg.eigh(qt.asarray(a), uplo)):
        _close(got.eigenvalues, w, what="eigenvalues")
        _close(phase_cols(got.eigenvectors), phase_cols(v), rtol=1e-8, atol=1e-10, what="eigenvectors")
    want = np.linalg.eigvalsh(a, uplo)
    _close(qt.linalg.eigvalsh(qt.asarray(a), UPLO=uplo), want, what="eigvalsh")
    _close(np.linalg.eigvalsh(qt.asarray(a), uplo), want, what="np eigvalsh")


@CX
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_reads_its_triangle(upper, cx, fusion, rng):
    s = spd(rng, (2, 4, 4), cx)
    a = upper_only(s, rng) if upper else lower_only(s, rng)
    want = np.linalg.cholesky(a, upper=upper)
    _close(qt.linalg.cholesky(qt.asarray(a), upper=upper), want, what="cholesky")
    _close(np.linalg.cholesky(qt.asarray(a), upper=upper), want, what="np cholesky")


# --- numpy.linalg on tensors: every registered function returns a tensor ----------------
def test_numpy_linalg_dispatch_of_standard_functions(fusion, rng):
    a, b = normal(rng, (2, 3, 3)), normal(rng, (3, 3))
    la = np.linalg
    calls = {
        "svdvals": lambda a, b: la.svdvals(a),
        "matrix_norm": lambda a, b: la.matrix_norm(a, ord=1),
        "vector_norm": lambda a, b: la.vector_norm(a, axis=-1),
        "matrix_transpose": lambda a, b: la.matrix_transpose(a),
        "diagonal": lambda a, b: la.diagonal(a, offset=1),
        "trace": lambda a, b: la.trace(a),
        "outer": lambda a, b: la.outer(b[0], b[1]),
        "cross": lambda a, b: la.cross(a, b),
        "tensordot": lambda a, b: la.tensordot(a, b, axes=1),
        "vecdot": lambda a, b: la.vecdot(a, b),
        "matmul": lambda a, b: la.matmul(a, b),
        "matrix_power": lambda a, b: la.matrix_power(a, 3),
        "inv": lambda a, b: la.inv(a),
        "det": lambda a, b: la.det(a),
        "solve": lambda a, b: la.solve(a, b),
        "slogdet": lambda a, b: la.slogdet(a).logabsdet,
    }
    for name, call in calls.items():
        if hasattr(np.linalg, name):
            _close(call(qt.asarray(a), qt.asarray(b)), call(a, b), what=f"np.linalg.{name}")


# --- gradients against JAX -------------------------------------------------------------
def _grad_vs_jax(f, a, rng, rtol=1e-6):
    out = np.asarray(f(jnp, jnp.asarray(a)))
    w = normal(rng, out.shape)
    got = qt.grad(lambda x: qt.sum(qt.real(f(qt, x)) * qt.asarray(w)))(qt.asarray(a))
    want = jax.grad(lambda x: jnp.sum(jnp.real(f(jnp, x)) * w))(jnp.asarray(a))
    want = np.asarray(want)  # JAX's convention, as qt.grad
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=rtol * 1e-2 * max(1, np.abs(want).max()))


def _eig_canon(xp, v):
    p = v[..., 0:1, :]
    return v * xp.conj(p / xp.abs(p))


GRADIENTS = {  # name: (input maker, f(xp, a)); JAX's spelling of NumPy's options
    "svd_compute_uv_false": (
        lambda rng, cx: spread(rng, (2, 4, 3), cx),
        lambda xp, a: xp.linalg.svd(a, compute_uv=False),
    ),
    "svd_hermitian_s": (
        lambda rng, cx: symmetric(rng, (2, 4, 4), cx),
        lambda xp, a: xp.linalg.svd(a, compute_uv=False, hermitian=True),
    ),
    "svd_hermitian_usv": (
        lambda rng, cx: symmetric(rng, (4, 4), cx),
        lambda xp, a: (lambda r: r[0] @ (r[1][..., None] * r[2]))(xp.linalg.svd(a, hermitian=True)),
    ),
    "eigh_upper": (
        lambda rng, cx: symmetric(rng, (2, 4, 4), cx),
        lambda xp, a: (lambda r: r[0][..., None, :] * _eig_canon(xp, r[1]))(xp.linalg.eigh(a, UPLO="U")),
    ),
    "eigvalsh_upper": (
        lambda rng, cx: symmetric(rng, (2, 4, 4), cx),
        lambda xp, a: xp.linalg.eigvalsh(a, UPLO="U"),
    ),
    "cholesky_upper": (
        lambda rng, cx: spd(rng, (2, 4, 4), cx),
        lambda xp, a: xp.linalg.cholesky(a, upper=True),
    ),
    "pinv_rcond": (
        lambda rng, cx: spread(rng, (2, 4, 3), cx),
        lambda xp, a: xp.linalg.pinv(a, rcond=0.05) if xp is qt else xp.linalg.pinv(a, rtol=0.05),
    ),
    "pinv_hermitian": (
        lambda rng, cx: symmetric(rng, (4, 4), cx),
        lambda xp, a: xp.linalg.pinv(a, hermitian=True),
    ),
    "qr_r": (
        lambda rng, cx: normal(rng, (2, 5, 3), cx),
        lambda xp, a: (lambda r: r * xp.sign(xp.linalg.diagonal(r))[..., :, None])(xp.linalg.qr(a, mode="r")),
    ),
}


@CX
@pytest.mark.parametrize("name", list(GRADIENTS))
def test_gradients_vs_jax(name, cx, fusion, rng):
    make, f = GRADIENTS[name]
    if cx and name == "qr_r":  # R's diagonal phase, not a sign, for complex input
        pytest.skip("the sign canonicalization of R is real-only")
    _grad_vs_jax(f, make(rng, cx), rng)


def test_numpy_dispatch_gradient(fusion, rng):
    a = spread(rng, (2, 4, 3))
    got = qt.grad(lambda x: qt.sum(np.linalg.svd(x, False, False) ** 2))(qt.asarray(a))
    np.testing.assert_allclose(got.numpy(), 2 * a, rtol=1e-9, atol=1e-11)  # sum(S**2) = |A|_F**2


# --- signatures and errors -------------------------------------------------------------
STANDARD = {  # the Array API's parameters: (name, kind, default)
    "svd": [("x", "POSITIONAL_ONLY", None), ("full_matrices", "KEYWORD_ONLY", True)],
    "pinv": [("x", "POSITIONAL_ONLY", None), ("rtol", "KEYWORD_ONLY", None)],
    "matrix_rank": [("x", "POSITIONAL_ONLY", None), ("rtol", "KEYWORD_ONLY", None)],
    "qr": [("x", "POSITIONAL_ONLY", None), ("mode", "KEYWORD_ONLY", "reduced")],
    "eigh": [("x", "POSITIONAL_ONLY", None)],
    "eigvalsh": [("x", "POSITIONAL_ONLY", None)],
    "cholesky": [("x", "POSITIONAL_ONLY", None), ("upper", "KEYWORD_ONLY", False)],
}


@pytest.mark.parametrize("name", list(STANDARD))
def test_standard_signatures_kept(name):
    params = inspect.signature(getattr(qt.linalg, name)).parameters
    ps = list(params.values())
    for i, (pname, kind, default) in enumerate(STANDARD[name]):
        assert ps[i].name == pname and ps[i].kind.name == kind
        if kind == "KEYWORD_ONLY":
            assert ps[i].default == default
    assert all(p.kind.name == "KEYWORD_ONLY" for p in ps[len(STANDARD[name]) :])  # NumPy's extras


ERRORS = {
    "pinv_both": (
        lambda: qt.linalg.pinv(qt.eye(3), rtol=1e-3, rcond=1e-3),
        ValueError,
        r"pinv: rtol and rcond",
    ),
    "np_pinv_both": (lambda: np.linalg.pinv(qt.eye(3), 1e-3, rtol=1e-3), ValueError, r"pinv: rtol and rcond"),
    "np_pinv_both_none": (lambda: np.linalg.pinv(qt.eye(3), 1e-3, rtol=None), ValueError,
                          r"pinv: rtol and rcond"),
    "rank_both": (
        lambda: qt.linalg.matrix_rank(qt.eye(3), rtol=0.1, tol=0.1),
        ValueError,
        r"matrix_rank: tol and rtol",
    ),
    "rank_tol_shape": (
        lambda: qt.linalg.matrix_rank(qt.ones((2, 3, 3)), tol=qt.ones((3, 1))),
        ValueError,
        r"matrix_rank: tol of shape",
    ),
    "eigh_uplo": (lambda: np.linalg.eigh(qt.eye(3), "X"), ValueError, r"eigh: UPLO must be 'L' or 'U'"),
    "eigvalsh_uplo": (lambda: qt.linalg.eigvalsh(qt.eye(3), UPLO=1), ValueError, r"eigvalsh: UPLO"),
    "qr_mode": (lambda: qt.linalg.qr(qt.eye(3), mode="full"), ValueError, r"qr: mode must be"),
    "svd_hermitian_wide": (
        lambda: qt.linalg.svd(qt.ones((3, 4)), hermitian=True),
        ValueError,
        r"svd: .*square",
    ),
    "complex_rtol_rank": (
        lambda: qt.linalg.matrix_rank(qt.eye(3), tol=qt.asarray([1j])),
        TypeError,
        r"matrix_rank: tol must be",
    ),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors(name, fusion):
    call, error, match = ERRORS[name]
    with pytest.raises(error, match=r"^qt\.linalg\." + match):
        call()
