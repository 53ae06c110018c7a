"""``qt.linalg`` (the Array API 2024.12 linear-algebra extension) against NumPy and JAX.

Every case is one function ``f(xp, *arrays)`` written once for the three namespaces
(``xp`` is ``qtrace``, ``numpy`` or ``jax.numpy``; all three spell the standard's names
``xp.linalg.<name>``), run on fresh random, well-conditioned inputs (SPD matrices for
``cholesky``, symmetric ones with distinct eigenvalues for ``eigh``, diagonally dominant
ones for ``inv``/``solve``/``det``), mostly stacks of matrices:

* forward: qtrace's results in float64 against NumPy's, and in float32 (inputs cast)
  against NumPy's float64 at float32 tolerances;
* reverse: qtrace's gradient of ``sum(f(*xs) * w)`` (``w`` random per output) against
  ``jax.grad`` of the same composition, in float64 (``jax_enable_x64``);
* complex: the same cases (most of them) on complex128 inputs (Hermitian ones where
  the real case is symmetric) against NumPy, complex64 result dtypes against NumPy's
  (the standard's: real norms, singular values, eigenvalues and ``logabsdet``), and
  gradients of the real loss ``real(sum(f(*xs) * w))`` (``w`` complex for complex
  outputs: JAX's cotangents) against ``jax.grad``, plus ``qt.vjp`` against ``jax.vjp``.

Results that are unique only up to signs or, complex, phases (eigenvectors, singular
vectors, ``Q`` and ``R``) are compared through a canonical form (``v * conj(p)`` with
``p = v[0] / abs(v[0])`` the phase of the first row, ``sign(v[0])`` for real ``v``)
that is a differentiable function of the decomposition. Everything runs with fusion
on and off (``fusion`` fixture). Then namedtuple fields, dtypes, errors and ``qt.jit``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt

jax.config.update("jax_enable_x64", True)


# --- inputs (cx=True: complex128, Hermitian where the real one is symmetric) ----------
def normal(rng, shape, cx=False):
    return rng.normal(size=shape) + 1j * rng.normal(size=shape) if cx else rng.normal(size=shape)


def mH(a):
    return np.conj(np.swapaxes(a, -1, -2))


def general(rng, shape, cx=False):
    return normal(rng, shape, cx)


def spd(rng, shape, cx=False):
    a = normal(rng, shape, cx)
    return a @ mH(a) + shape[-1] * np.eye(shape[-1])


def dominant(rng, shape, cx=False):
    """Diagonally dominant (well-conditioned, either sign of determinant)."""
    n = shape[-1]
    signs = np.where(rng.random(shape[:-1]) < 0.5, -1.0, 1.0)
    return normal(rng, shape, cx) + 2.0 * n * np.eye(n) * signs[..., None]


def symmetric(rng, shape, cx=False):
    """Symmetric with well-separated eigenvalues (the eigenvector gradient divides by gaps)."""
    n = shape[-1]
    q, _ = np.linalg.qr(normal(rng, shape, cx))
    w = np.arange(n) * 1.5 - n / 2 + rng.uniform(-0.3, 0.3, shape[:-1])
    return (q * w[..., None, :]) @ mH(q)


def low_rank(rng, shape, rank=2, cx=False):
    b = normal(rng, shape[:-1] + (rank,), cx)
    return b @ normal(rng, shape[:-2] + (rank, shape[-1]), cx)


def spread(rng, shape, cx=False):
    """Well-separated singular values (the singular-vector gradients divide by gaps)."""
    m, n = shape[-2:]
    k = min(m, n)
    u, _ = np.linalg.qr(normal(rng, shape[:-2] + (m, k), cx))
    v, _ = np.linalg.qr(normal(rng, shape[:-2] + (n, k), cx))
    s = np.arange(k, 0, -1) * 1.5 + rng.uniform(0.0, 0.3, shape[:-2] + (k,))
    return (u * s[..., None, :]) @ mH(v)


# --- canonical forms (differentiable: a real sign has a zero derivative, and the phase
# ``x / abs(x)`` of a real ``x`` too) ------------------------------------------------------
def _phase(xp, x):
    """``sign(x)`` for real ``x``, ``x / abs(x)`` for complex ones."""
    return x / xp.abs(x) if x.dtype.kind == "c" else xp.sign(x)


def _cols(xp, v):
    """``v`` with each column's sign (phase) fixed by its first row (made real positive)."""
    return v * xp.conj(_phase(xp, v[..., 0:1, :]))


def eigh_c(xp, a):
    w, v = xp.linalg.eigh(a)
    return w, _cols(xp, v)


def svd_c(xp, a, full_matrices=False):
    u, s, vh = xp.linalg.svd(a, full_matrices=full_matrices)
    k = s.shape[-1]
    d = _phase(xp, u[..., 0:1, :k])
    return u[..., :, :k] * xp.conj(d), s, vh[..., :k, :] * xp.matrix_transpose(d)


def qr_c(xp, a, mode="reduced"):
    q, r = xp.linalg.qr(a, mode=mode)
    k = min(a.shape[-2:])
    d = _phase(xp, xp.linalg.diagonal(r)[..., :k])
    return q[..., :, :k] * xp.conj(d)[..., None, :], r[..., :k, :] * d[..., :, None]


# --- the cases -------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    name: str
    fn: Callable                  # f(xp, *arrays) -> array or tuple of arrays
    inputs: list                  # (maker, shape) per argument
    diff: bool = True             # compare gradients with JAX
    f32: bool = True              # a float32 run makes sense
    rtol32: float = 2e-4


C = Case
INF = math.inf
CASES = [
    C("cholesky", lambda xp, a: xp.linalg.cholesky(a), [(spd, (2, 4, 4))]),
    C("cholesky_upper", lambda xp, a: xp.linalg.cholesky(a, upper=True), [(spd, (4, 4))]),
    C("cross", lambda xp, a, b: xp.linalg.cross(a, b, axis=-2), [(general, (2, 3, 4)), (general, (3, 1))]),
    C("cross_last", lambda xp, a, b: xp.linalg.cross(a, b), [(general, (5, 3)), (general, (3,))]),
    C("det", lambda xp, a: xp.linalg.det(a), [(dominant, (2, 3, 3))]),
    C("det_2d", lambda xp, a: xp.linalg.det(a), [(dominant, (4, 4))]),
    C("diagonal", lambda xp, a: xp.linalg.diagonal(a, offset=1), [(general, (2, 3, 4))]),
    C("diagonal_neg", lambda xp, a: xp.linalg.diagonal(a, offset=-2), [(general, (4, 3))]),
    C("eigh", eigh_c, [(symmetric, (2, 4, 4))]),
    C("eigh_vectors", lambda xp, a: eigh_c(xp, a)[1], [(symmetric, (3, 3))]),
    C("eigvalsh", lambda xp, a: xp.linalg.eigvalsh(a), [(symmetric, (2, 4, 4))]),
    C("inv", lambda xp, a: xp.linalg.inv(a), [(dominant, (2, 3, 3))]),
    C("inv_2d", lambda xp, a: xp.linalg.inv(a), [(dominant, (5, 5))]),
    C("matmul", lambda xp, a, b: xp.linalg.matmul(a, b), [(general, (2, 1, 3, 4)), (general, (3, 4, 2))]),
    C("matmul_vec", lambda xp, a, b: xp.linalg.matmul(a, b), [(general, (4,)), (general, (2, 4, 3))]),
    C("matmul_stack_2d", lambda xp, a, b: xp.linalg.matmul(a, b), [(general, (3, 2, 4)), (general, (4, 5))]),
    *[C(f"matrix_norm_{o}", lambda xp, a, o=o: xp.linalg.matrix_norm(a, ord=o), [(spread, (2, 4, 3))])
      for o in ("fro", "nuc", 1, -1, 2, -2, INF, -INF)],
    C("matrix_norm_keepdims", lambda xp, a: xp.linalg.matrix_norm(a, keepdims=True), [(general, (2, 3, 4))]),
    *[C(f"matrix_power_{n}", lambda xp, a, n=n: xp.linalg.matrix_power(a, n), [(dominant, (2, 3, 3))],
        rtol32=1e-3) for n in (0, 1, 3, 6, -2)],
    C("matrix_rank", lambda xp, a: xp.linalg.matrix_rank(a), [(low_rank, (2, 5, 4))], diff=False),
    C("matrix_rank_rtol", lambda xp, a: xp.linalg.matrix_rank(a, rtol=0.4), [(spread, (2, 4, 4))],
      diff=False),
    C("matrix_transpose", lambda xp, a: xp.linalg.matrix_transpose(a), [(general, (2, 3, 4))]),
    C("outer", lambda xp, a, b: xp.linalg.outer(a, b), [(general, (3,)), (general, (4,))]),
    C("pinv_tall", lambda xp, a: xp.linalg.pinv(a), [(spread, (2, 5, 3))], rtol32=1e-3),
    C("pinv_wide", lambda xp, a: xp.linalg.pinv(a), [(spread, (3, 4))], rtol32=1e-3),
    C("qr_tall", qr_c, [(general, (2, 5, 3))], rtol32=1e-3),
    C("qr_wide", qr_c, [(general, (2, 3, 5))], rtol32=1e-3),
    C("qr_square", qr_c, [(general, (4, 4))], rtol32=1e-3),
    C("qr_complete_wide", lambda xp, a: qr_c(xp, a, "complete"), [(general, (3, 4))], rtol32=1e-3),
    C("qr_complete_tall_r", lambda xp, a: qr_c(xp, a, "complete")[1], [(general, (2, 5, 3))], rtol32=1e-3),
    C("slogdet", lambda xp, a: tuple(xp.linalg.slogdet(a)), [(dominant, (2, 3, 3))]),
    C("solve", lambda xp, a, b: xp.linalg.solve(a, b), [(dominant, (2, 3, 3)), (general, (2, 3, 2))]),
    C("solve_broadcast", lambda xp, a, b: xp.linalg.solve(a, b), [(dominant, (2, 1, 3, 3)),
                                                                  (general, (4, 3, 2))]),
    C("solve_vector", lambda xp, a, b: xp.linalg.solve(a, b), [(dominant, (2, 4, 4)), (general, (4,))]),
    C("svd_tall", svd_c, [(spread, (2, 5, 3))], rtol32=1e-3),
    C("svd_wide", svd_c, [(spread, (3, 5))], rtol32=1e-3),
    C("svd_full_square", lambda xp, a: svd_c(xp, a, True), [(spread, (2, 4, 4))], rtol32=1e-3),
    C("svd_values", lambda xp, a: xp.linalg.svd(a, full_matrices=False).S, [(spread, (2, 4, 3))]),
    C("svdvals", lambda xp, a: xp.linalg.svdvals(a), [(spread, (2, 3, 5))]),
    C("tensordot", lambda xp, a, b: xp.linalg.tensordot(a, b), [(general, (2, 3, 4)), (general, (3, 4, 2))]),
    C("tensordot_axes", lambda xp, a, b: xp.linalg.tensordot(a, b, axes=([0, 2], [2, 0])),
      [(general, (2, 3, 4)), (general, (4, 5, 2))]),
    C("tensordot_0", lambda xp, a, b: xp.linalg.tensordot(a, b, axes=0),
      [(general, (2, 3)), (general, (4,))]),
    C("trace", lambda xp, a: xp.linalg.trace(a), [(general, (2, 4, 4))]),
    C("trace_offset", lambda xp, a: xp.linalg.trace(a, offset=-1), [(general, (3, 4))]),
    C("vecdot", lambda xp, a, b: xp.linalg.vecdot(a, b), [(general, (2, 3, 4)), (general, (4,))]),
    C("vecdot_axis", lambda xp, a, b: xp.linalg.vecdot(a, b, axis=-2), [(general, (2, 3, 4)),
                                                                        (general, (3, 1))]),
    *[C(f"vector_norm_{o}", lambda xp, a, o=o: xp.linalg.vector_norm(a, ord=o), [(general, (3, 4))])
      for o in (2, 1, INF, -INF, 3, -1, 0.5)],
    C("vector_norm_0", lambda xp, a: xp.linalg.vector_norm(a, ord=0), [(general, (3, 4))], diff=False),
    C("vector_norm_axis", lambda xp, a: xp.linalg.vector_norm(a, axis=1), [(general, (2, 3, 4))]),
    C("vector_norm_axes", lambda xp, a: xp.linalg.vector_norm(a, axis=(0, -1), keepdims=True, ord=1),
      [(general, (2, 3, 4))]),
    C("top_level", lambda xp, a, b: (xp.matmul(a, b), xp.tensordot(a, b, axes=1),
                                     xp.vecdot(a, xp.matrix_transpose(b)), xp.matrix_transpose(a)),
      [(general, (2, 3, 4)), (general, (4, 3))]),
]
BY_NAME = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES)


def _leaves(out) -> list:
    return list(out) if isinstance(out, tuple) else [out]


def _inputs(case: Case, rng, cx=False) -> list:
    return [make(rng, shape, cx=cx) for make, shape in case.inputs]


LOW = {np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}  # float32 runs


def _close(got, want, rtol, atol, what):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=what)


# --- forward ---------------------------------------------------------------------------
@pytest.mark.parametrize("cx", [False, True], ids=["float64", "complex128"])
@pytest.mark.parametrize("name", list(BY_NAME))
def test_forward_float64(name, cx, fusion, rng):
    case = BY_NAME[name]
    xs = _inputs(case, rng, cx)
    want = _leaves(case.fn(np, *xs))
    got = _leaves(case.fn(qt, *[qt.asarray(x) for x in xs]))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, qt.Tensor)
        assert g.dtype == np.asarray(w).dtype, f"output {k}: dtype {g.dtype} != {np.asarray(w).dtype}"
        _close(g.numpy(), w, 1e-9, 1e-11, f"{name} output {k}")


@pytest.mark.parametrize("cx", [False, True], ids=["float32", "complex64"])
@pytest.mark.parametrize("name", [c.name for c in CASES if c.f32])
def test_forward_float32(name, cx, fusion, rng):
    """float32/complex64 inputs: the dtypes of NumPy's float64/complex128 results in single
    precision (real ones for norms, singular values, ...), values within float32 accuracy."""
    case = BY_NAME[name]
    xs = _inputs(case, rng, cx)
    want = _leaves(case.fn(np, *xs))                                   # double-precision reference
    got = _leaves(case.fn(qt, *[qt.asarray(x.astype(LOW[x.dtype])) for x in xs]))
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.dtype == LOW.get(w.dtype, w.dtype), f"output {k}: {g.dtype} (double: {w.dtype})"
        _close(g.numpy(), w, case.rtol32, case.rtol32, f"{name} single-precision output {k}")


# --- reverse ---------------------------------------------------------------------------
_JAX_GRADS: dict = {}   # case name -> jitted JAX gradient (compiled once for both fusion runs)
_FAST_COMPILE = {"xla_backend_optimization_level": 0}   # references compile in half the time


def _jax_grad(case: Case, cx=False):
    key = (case.name, cx)
    fn = _JAX_GRADS.get(key)
    if fn is None:
        def loss(xs, ws):
            return sum(jnp.real(jnp.sum(o * w)) for o, w in zip(_leaves(case.fn(jnp, *xs)), ws))
        fn = _JAX_GRADS[key] = jax.jit(jax.grad(loss), compiler_options=_FAST_COMPILE)
    return fn


def _weights(case: Case, xs, rng) -> list:
    """One random weight (JAX's cotangent) per output: complex for complex outputs."""
    shapes = jax.eval_shape(lambda *a: _leaves(case.fn(jnp, *a)), *xs)
    return [normal(rng, s.shape, s.dtype.kind == "c") for s in shapes]


# complex gradients: one case per rule or composition (the time of JAX's compilations)
COMPLEX_GRADS = ["cholesky", "cholesky_upper", "cross_last", "det", "eigh", "eigvalsh", "inv", "matmul",
                 "matrix_norm_fro", "matrix_norm_nuc", "matrix_norm_1", "matrix_norm_2", "matrix_power_3",
                 "matrix_power_-2", "outer", "pinv_tall", "pinv_wide", "qr_tall", "qr_wide",
                 "qr_complete_tall_r", "slogdet", "solve_broadcast", "svd_tall", "svd_wide",
                 "svd_full_square", "svdvals", "trace", "top_level", "vecdot_axis", "vector_norm_2",
                 "vector_norm_inf", "vector_norm_3"]


@pytest.mark.parametrize("name, cx", [(c.name, False) for c in CASES if c.diff]
                         + [(name, True) for name in COMPLEX_GRADS])
def test_gradient_vs_jax(name, cx, fusion, rng):
    """The gradient of the real loss ``real(sum(f(*xs) * w))``: for complex inputs, JAX's
    convention (``dL/dRe(z) - 1j * dL/dIm(z)``). Where JAX's gradient is not finite at
    finite inputs (its complex ``vector_norm(ord=inf)`` gives -inf at the largest element
    for ~5% of draws) that element is checked against central differences instead."""
    case = BY_NAME[name]
    xs = _inputs(case, rng, cx)
    ws = _weights(case, xs, rng)
    want = _jax_grad(case, cx)(list(xs), ws)

    got = qt.grad(_qt_loss(case, ws), argnums=tuple(range(len(xs))))(*[qt.asarray(x) for x in xs])
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == xs[i].shape and g.dtype == xs[i].dtype
        g, w = np.array(g.numpy()), np.array(w)   # (copies: elements are blanked below)
        for index in map(tuple, np.argwhere(~np.isfinite(w))):
            fd = _central_difference(case, xs, ws, i, index, cx)
            np.testing.assert_allclose(g[index], fd, rtol=1e-5, atol=1e-7,
                                       err_msg=f"{name}: d/darg{i}{list(index)} vs central differences")
            g[index] = w[index] = 0.0
        _close(g, w, 1e-7, 1e-9, f"{name}: d/darg{i} vs JAX")


def _central_difference(case: Case, xs, ws, i: int, index: tuple, cx: bool):
    """d real(sum(f(*xs) * w)) / d xs[i][index] by central differences of the float64 JAX
    forward (complex: JAX's convention, ``dL/dRe - 1j dL/dIm``)."""
    def loss(delta):
        args = [np.array(x) for x in xs]
        args[i][index] += delta
        outs = _leaves(case.fn(jnp, *map(jnp.asarray, args)))
        return sum(float(np.real(np.sum(np.asarray(o) * w))) for o, w in zip(outs, ws))
    h = 1e-6 * max(1.0, float(np.abs(xs[i][index])))
    g = (loss(h) - loss(-h)) / (2 * h)
    return g - 1j * (loss(1j * h) - loss(-1j * h)) / (2 * h) if cx else g


def _qt_loss(case: Case, ws):
    def loss(*ts):
        total = None
        for o, w in zip(_leaves(case.fn(qt, *ts)), ws):
            term = qt.real(qt.sum(o * w))
            total = term if total is None else total + term
        return total
    return loss


_JAX_VJPS: dict = {}


def _jax_vjp(case: Case):
    fn = _JAX_VJPS.get(case.name)
    if fn is None:
        def pull(xs, cts):
            return jax.vjp(lambda *a: _leaves(case.fn(jnp, *a)), *xs)[1](cts)
        fn = _JAX_VJPS[case.name] = jax.jit(pull, compiler_options=_FAST_COMPILE)
    return fn


@pytest.mark.parametrize("name", ["cholesky_upper", "qr_square", "slogdet", "svd_wide", "top_level"])
def test_vjp_complex_vs_jax(name, fusion, rng):
    """``qt.vjp`` of the complex outputs themselves with random complex cotangents."""
    case = BY_NAME[name]
    xs = _inputs(case, rng, True)
    cts = _weights(case, xs, rng)
    _, qt_vjp = qt.vjp(lambda *a: _leaves(case.fn(qt, *a)), *[qt.asarray(x) for x in xs])
    got = qt_vjp([qt.asarray(c) for c in cts])
    for i, (g, w) in enumerate(zip(got, _jax_vjp(case)(list(xs), cts))):
        assert g.dtype == np.complex128
        _close(g.numpy(), w, 1e-7, 1e-9, f"{name}: vjp arg{i} vs JAX")


GRAD32 = ["cholesky", "det", "eigh", "inv", "pinv_tall", "qr_wide", "slogdet", "solve_broadcast", "svd_tall",
          "svdvals"]


@pytest.mark.parametrize("cx", [False, True], ids=["float32", "complex64"])
@pytest.mark.parametrize("name", GRAD32)
def test_gradient_float32(name, cx, fusion, rng):
    """float32 (complex64) inputs: gradients of their dtype, within float32 accuracy of
    JAX's float64 (complex128) ones."""
    case = BY_NAME[name]
    xs = _inputs(case, rng, cx)
    ws = _weights(case, xs, rng)
    want = _jax_grad(case, cx)(list(xs), ws)
    ws32 = [w.astype(LOW[w.dtype]) for w in ws]
    got = qt.grad(_qt_loss(case, ws32), argnums=tuple(range(len(xs))))(
        *[qt.asarray(x.astype(LOW[x.dtype])) for x in xs])
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == LOW[xs[i].dtype]
        _close(g.numpy(), w, 2e-3, 2e-3, f"{name}: single-precision d/darg{i} vs JAX")


# --- results, dtypes -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_namedtuple_results(dtype, fusion, rng):
    tol = 1e-4 if dtype == np.float32 else 1e-10
    a = general(rng, (2, 5, 3)).astype(dtype)
    s = symmetric(rng, (2, 4, 4)).astype(dtype)
    la = qt.linalg

    res = la.eigh(qt.asarray(s))
    assert isinstance(res, la.EighResult) and res._fields == ("eigenvalues", "eigenvectors")
    w, v = res
    assert w.dtype == v.dtype == dtype and w.shape == (2, 4) and v.shape == (2, 4, 4)
    _close((v.numpy() * w.numpy()[..., None, :]) @ np.swapaxes(v.numpy(), -1, -2), s, tol, tol, "V w V^T")

    for mode, (qs, rs) in {"reduced": ((2, 5, 3), (2, 3, 3)), "complete": ((2, 5, 5), (2, 5, 3))}.items():
        res = la.qr(qt.asarray(a), mode=mode)
        assert isinstance(res, la.QRResult) and res._fields == ("Q", "R")
        assert res.Q.shape == qs and res.R.shape == rs and res.Q.dtype == res.R.dtype == dtype
        _close(res.Q.numpy() @ res.R.numpy(), a, tol, tol, f"QR {mode}")
        r = res.R.numpy()
        assert np.all(np.tril(r, -1) == 0)

    for full, (us, vs) in {True: ((2, 5, 5), (2, 3, 3)), False: ((2, 5, 3), (2, 3, 3))}.items():
        res = la.svd(qt.asarray(a), full_matrices=full)
        assert isinstance(res, la.SVDResult) and res._fields == ("U", "S", "Vh")
        assert res.U.shape == us and res.S.shape == (2, 3) and res.Vh.shape == vs
        assert {res.U.dtype, res.S.dtype, res.Vh.dtype} == {np.dtype(dtype)}
        sv = res.S.numpy()
        assert np.all(np.diff(sv, axis=-1) <= 0)
        _close((res.U.numpy()[..., :, :3] * sv[..., None, :]) @ res.Vh.numpy(), a, tol, tol, "U S Vh")

    sq = dominant(rng, (2, 3, 3)).astype(dtype)
    res = la.slogdet(qt.asarray(sq))
    assert isinstance(res, la.SlogdetResult) and res._fields == ("sign", "logabsdet")
    assert res.sign.dtype == res.logabsdet.dtype == dtype
    _close(res.sign.numpy() * np.exp(res.logabsdet.numpy()), np.linalg.det(sq.astype(np.float64)),
           tol, tol, "sign * exp(logabsdet)")


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_result_dtypes(dtype, fusion, rng):
    """The standard's dtypes: real norms, singular values, eigenvalues and logabsdet (of the
    input's precision), a complex sign, int64 ranks, complex factors."""
    la, real = qt.linalg, np.finfo(dtype).dtype
    a = qt.asarray(dominant(rng, (2, 3, 3), cx=True).astype(dtype))
    h = qt.asarray(symmetric(rng, (3, 3), cx=True).astype(dtype))
    p = qt.asarray(spd(rng, (3, 3), cx=True).astype(dtype))
    want = {real: [la.vector_norm(a), la.vector_norm(a, ord=0), la.matrix_norm(a), la.matrix_norm(a, ord=2),
                   la.matrix_norm(a, ord=1), la.svdvals(a), la.svd(a).S, la.eigvalsh(h),
                   la.eigh(h).eigenvalues, la.slogdet(a).logabsdet],
            np.dtype(dtype): [la.slogdet(a).sign, la.det(a), la.inv(a), la.eigh(h).eigenvectors, la.svd(a).U,
                              la.qr(a).R, la.cholesky(p),
                              la.pinv(a), la.solve(a, a), la.trace(a), la.vecdot(a, a), la.tensordot(a, a[0]),
                              la.matrix_power(a, -2), la.outer(a[0, 0], a[1, 1]), la.cross(a, a)],
            np.dtype(np.int64): [la.matrix_rank(a)]}
    for dt, results in want.items():
        for k, t in enumerate(results):
            assert t.dtype == dt, f"{dt} result {k}: {t.dtype}"
    z = np.array([[1.0, 2.0j], [2.0, 4.0j]], dtype=dtype)   # singular
    sign, logabsdet = la.slogdet(qt.asarray(z))
    assert sign.item() == 0 and logabsdet.item() == -math.inf
    assert la.matrix_rank(qt.asarray(z)).item() == 1


def test_singular_slogdet_and_rank(fusion):
    z = np.array([[[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]]])
    sign, logabsdet = qt.linalg.slogdet(qt.asarray(z))
    assert sign.tolist() == [0.0, 0.0] and logabsdet.tolist() == [-math.inf, -math.inf]
    assert qt.linalg.det(qt.asarray(z)).tolist() == [0.0, 0.0]
    assert qt.linalg.matrix_rank(qt.asarray(z)).tolist() == [1, 0]


def test_integer_and_mixed_dtypes(fusion, rng):
    la = qt.linalg
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert la.trace(qt.asarray(i)).dtype == np.int64 and la.trace(qt.asarray(i)).item() == 15
    assert la.trace(qt.asarray(i.astype(np.uint8))).dtype == np.uint64
    assert la.trace(qt.asarray(i), dtype=qt.float32).dtype == np.float32
    assert la.trace(qt.asarray(i.astype(np.float32))).dtype == np.float32
    assert la.vecdot(qt.asarray(i), qt.asarray(i)).dtype == np.int32
    np.testing.assert_array_equal(la.vecdot(qt.asarray(i), qt.asarray(i)).numpy(), np.linalg.vecdot(i, i))
    np.testing.assert_array_equal(la.tensordot(qt.asarray(i), qt.asarray(i.T), axes=1).numpy(), i @ i.T)
    np.testing.assert_array_equal(la.outer(qt.asarray(i[0]), qt.asarray(i[1])).numpy(), np.outer(i[0], i[1]))
    np.testing.assert_array_equal(la.cross(qt.asarray(i[:, :3]), qt.asarray(i[:, 1:])).numpy(),
                                  np.linalg.cross(i[:, :3], i[:, 1:]))
    np.testing.assert_array_equal(la.diagonal(qt.asarray(i)).numpy(), np.linalg.diagonal(i))
    assert la.matrix_rank(qt.asarray(low_rank(rng, (2, 4, 4)))).dtype == np.int64
    a32 = dominant(rng, (3, 3)).astype(np.float32)
    b64 = general(rng, (3, 2))
    x = la.solve(qt.asarray(a32), qt.asarray(b64))
    assert x.dtype == np.float64
    _close(x.numpy(), np.linalg.solve(a32.astype(np.float64), b64), 1e-9, 1e-11, "mixed solve")
    assert la.vector_norm(qt.asarray(a32)).dtype == np.float32
    assert la.matrix_norm(qt.asarray(a32), ord="nuc").dtype == np.float32


# --- errors ----------------------------------------------------------------------------

# (integer and bool inputs are converted to float64 as NumPy does:
# tests/ops/test_linalg_numpy_signatures.py)
def test_bool_cross_raises(fusion):
    """NumPy's ``cross`` refuses booleans (``outer``, ``tensordot``, ``vecdot``, ``trace``
    take them, as NumPy's do)."""
    bad = np.ones((3, 3), dtype=bool)
    with pytest.raises(TypeError, match=r"^qt\.linalg\.cross: .*bool"):
        qt.linalg.cross(bad, bad)


SQUARE_ONLY = ["cholesky", "det", "eigh", "eigvalsh", "inv", "slogdet"]


@pytest.mark.parametrize("name", SQUARE_ONLY + ["matrix_power", "solve"])
def test_non_square_raises(name, fusion):
    fn = getattr(qt.linalg, name)
    extra = {"matrix_power": (2,), "solve": (np.ones(3),)}.get(name, ())
    with pytest.raises(ValueError, match=rf"^qt\.linalg\.{name}: .*square"):
        fn(qt.ones((2, 3, 4)), *extra)
    with pytest.raises(ValueError, match=rf"^qt\.linalg\.{name}: "):
        fn(qt.ones(3), *extra)


ARGUMENT_ERRORS = {
    "solve_rows": (lambda la: la.solve(qt.eye(3), qt.ones(4)), ValueError),
    "solve_batch": (lambda la: la.solve(qt.ones((2, 3, 3)), qt.ones((3, 3, 1))), ValueError),
    "qr_mode": (lambda la: la.qr(qt.eye(3), mode="full"), ValueError),
    "matrix_norm_ord": (lambda la: la.matrix_norm(qt.eye(3), ord=3), ValueError),
    "matrix_norm_1d": (lambda la: la.matrix_norm(qt.ones(3)), ValueError),
    "vector_norm_ord": (lambda la: la.vector_norm(qt.ones(3), ord="fro"), ValueError),
    "cross_size": (lambda la: la.cross(qt.ones(4), qt.ones(4)), ValueError),
    "cross_broadcast": (lambda la: la.cross(qt.ones((2, 3)), qt.ones((4, 3))), ValueError),
    "tensordot_int": (lambda la: la.tensordot(qt.ones((2, 3)), qt.ones((3, 2))), ValueError),
    "tensordot_axes": (lambda la: la.tensordot(qt.ones((2, 3)), qt.ones((3, 2)), axes=([0], [0])),
                       ValueError),
    "vecdot_size": (lambda la: la.vecdot(qt.ones((2, 3)), qt.ones((2, 4))), ValueError),
    "outer_2d": (lambda la: la.outer(qt.ones((2, 2)), qt.ones(2)), ValueError),
    "matrix_transpose_1d": (lambda la: la.matrix_transpose(qt.ones(3)), ValueError),
    "diagonal_1d": (lambda la: la.diagonal(qt.ones(3)), ValueError),
    "matrix_power_float": (lambda la: la.matrix_power(qt.eye(2), 1.5), TypeError),
    "rtol_shape": (lambda la: la.pinv(qt.ones((2, 3, 3)), rtol=qt.ones((4, 1))), ValueError),
}


@pytest.mark.parametrize("name", list(ARGUMENT_ERRORS))
def test_argument_errors(name, fusion):
    call, error = ARGUMENT_ERRORS[name]
    with pytest.raises(error, match=r"^qt\.linalg\.\w+: "):
        call(qt.linalg)


@pytest.mark.cpu_only("on a GPU, cuSOLVER's status is not read (it would wait for the device): a "
                     "singular or indefinite matrix gives NaN/inf there, as the README says")
def test_lapack_failures_name_the_function(fusion):
    with pytest.raises(np.linalg.LinAlgError, match=r"^qt\.linalg\.inv: "):
        qt.linalg.inv(qt.zeros((2, 2))).numpy()
    with pytest.raises(np.linalg.LinAlgError, match=r"^qt\.linalg\.cholesky: "):
        qt.linalg.cholesky(-qt.eye(3)).numpy()


def test_undefined_gradients_raise(fusion, rng):
    a = qt.asarray(general(rng, (4, 3)))
    with pytest.raises(NotImplementedError, match=r"^qt\.linalg\.svd: "):
        qt.grad(lambda x: qt.sum(qt.linalg.svd(x).U))(a)
    with pytest.raises(NotImplementedError, match=r"^qt\.linalg\.qr: "):
        qt.grad(lambda x: qt.sum(qt.linalg.qr(x, mode="complete").Q))(a)
    # the singular values of a full SVD and R of a complete QR stay differentiable
    g = qt.grad(lambda x: qt.sum(qt.linalg.svd(x).S))(a)
    u, _, vh = np.linalg.svd(a.numpy(), full_matrices=False)
    _close(g.numpy(), u @ vh, 1e-10, 1e-12, "d sum(S)")
    qt.grad(lambda x: qt.sum(qt.linalg.qr(x, mode="complete").R))(a).numpy()


# --- structure: compositions stay compositions ---------------------------------------
def _prims(t) -> set:
    seen, stack, prims = set(), [t._node], set()
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            prims.add(n.prim if n.prim != "lib" else n.params[0])
            stack.extend(n.inputs)
    return prims


def test_compositions_and_library_calls(fusion, rng):
    x = qt.asarray(general(rng, (2, 3, 3)))
    la = qt.linalg
    for t in (la.vector_norm(x), la.matrix_norm(x), la.matrix_norm(x, ord=1), la.trace(x), la.vecdot(x, x),
              la.diagonal(x), la.matrix_transpose(x), la.cross(x, x), la.outer(x[0, 0], x[1, 1])):
        assert not {p for p in _prims(t) if p.startswith("linalg.")}, _prims(t)
    assert "linalg.svdvals" in _prims(la.matrix_norm(x, ord="nuc"))
    assert "linalg.inv" in _prims(la.inv(x)) and "linalg.solve" in _prims(la.solve(x, x))
    assert qt.tensordot is la.tensordot and qt.vecdot is la.vecdot
    np.testing.assert_array_equal(qt.matrix_transpose(x).numpy(), la.matrix_transpose(x).numpy())


# --- qt.jit ----------------------------------------------------------------------------
def test_jit_forward(fusion, rng):
    @qt.jit
    def f(a, b):
        x = qt.linalg.solve(a, b)
        w, v = qt.linalg.eigh(a @ qt.linalg.matrix_transpose(a))
        return x, qt.linalg.det(a), w, qt.linalg.vector_norm(x, axis=-2)

    for _ in range(2):  # the second call replays the traced plan on new values
        a, b = dominant(rng, (2, 3, 3)), general(rng, (2, 3, 2))
        x, d, w, n = f(qt.asarray(a), qt.asarray(b))
        _close(x.numpy(), np.linalg.solve(a, b), 1e-9, 1e-11, "jit solve")
        _close(d.numpy(), np.linalg.det(a), 1e-9, 1e-11, "jit det")
        _close(w.numpy(), np.linalg.eigvalsh(a @ np.swapaxes(a, -1, -2)), 1e-9, 1e-11, "jit eigh")
        _close(n.numpy(), np.linalg.vector_norm(np.linalg.solve(a, b), axis=-2), 1e-9, 1e-11, "jit norm")


def test_jit_namedtuple_result(fusion, rng):
    f = qt.jit(lambda a: qt.linalg.svd(a, full_matrices=False))
    a = general(rng, (4, 3))
    res = f(qt.asarray(a))
    assert isinstance(res, qt.linalg.SVDResult)
    _close(res.S.numpy(), np.linalg.svdvals(a), 1e-10, 1e-12, "jit svd S")


def _model(xp, a, b):
    """A scalar mixing several library calls and compositions."""
    la = xp.linalg
    sign, logabsdet = la.slogdet(a)
    x = la.solve(a, b)
    c = la.cholesky(la.matmul(la.matrix_transpose(a), a))
    return (xp.sum(logabsdet) + xp.sum(la.inv(a) * 0.3) + xp.sum(x * x) + la.trace(c).sum()
            + xp.sum(la.svdvals(b)) + la.vector_norm(la.matrix_power(a, 2)))


def test_jit_of_grad(fusion, rng):
    g = qt.jit(qt.grad(lambda a, b: _model(qt, a, b), argnums=(0, 1)))
    jg = jax.jit(jax.grad(lambda a, b: _model(jnp, a, b), argnums=(0, 1)), compiler_options=_FAST_COMPILE)
    for _ in range(2):
        a, b = dominant(rng, (2, 3, 3)), general(rng, (2, 3, 2))
        for got, want in zip(g(qt.asarray(a), qt.asarray(b)), jg(a, b)):
            _close(got.numpy(), want, 1e-7, 1e-9, "jit(grad(model))")


def test_second_order_through_inv(fusion, rng):
    """The rules are qtrace graphs: they differentiate again (Hessian-vector product of
    logabsdet, compared with JAX)."""
    a, v = dominant(rng, (3, 3)), general(rng, (3, 3))

    def hvp(xp_grad, la, s, a):
        return xp_grad(lambda x: s(xp_grad(lambda y: la.slogdet(y)[1])(x) * v))(a)

    got = hvp(qt.grad, qt.linalg, qt.sum, qt.asarray(a))
    want = hvp(jax.grad, jnp.linalg, jnp.sum, a)
    _close(got.numpy(), want, 1e-8, 1e-10, "hvp of logabsdet")
