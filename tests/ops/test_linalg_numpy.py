"""NumPy's ``numpy.linalg`` functions beyond the Array API extension
(``qtrace/tracer/linalg_numpy.py``): ``norm``, ``cond``, ``multi_dot``, ``lstsq``,
``tensorinv``, ``tensorsolve`` and ``LinAlgError``.

Each case is one callable ``fn(xp, *arrays)`` (the harness: ``composite_cases.py``) that
reaches the function through ``la(xp)``: this module for qtrace, ``xp.linalg`` for NumPy
and JAX. Forward against NumPy (dtype and shape exactly, values against NumPy in float64)
on fresh random inputs, ``qt.grad`` against ``jax.grad`` (float64); every test with fusion
on and off (``fusion`` fixture). Then the matrix-chain order, errors, NumPy dispatch and
``qt.jit``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from composite_cases import Case, forward_params, gradient_params, normal, run_forward, run_gradient

import qtrace as qt
from qtrace.tracer import linalg_numpy as L
from qtrace.tracer import protocols

INF = math.inf
F64 = ("float64",)
COMPLEX = ("complex128", "complex64")


def la(xp):
    """The namespace of the functions under test: this module for qtrace, ``xp.linalg`` else."""
    return L if xp is qt else xp.linalg


# --- inputs ----------------------------------------------------------------------------
def dominant(rng, shape, dtype):
    """Stacks of diagonally dominant (well-conditioned) matrices, either sign of diagonal."""
    x = normal(rng, shape, dtype)
    n = shape[-1]
    signs = np.where(rng.random(shape[:-1]) < 0.5, -1, 1)[..., None]
    return (x + (20 if x.dtype.kind in "iu" else 2) * n * np.eye(n, dtype=x.dtype) * signs).astype(dtype)


def square_tensor(rng, shape, dtype):
    """A diagonally dominant ``k x k`` matrix reshaped to ``shape`` when ``prod(shape)`` is a
    square (the ``a`` of tensorinv/tensorsolve), normal values otherwise (their ``b``)."""
    size = math.prod(shape)
    k = math.isqrt(size)
    if k * k != size or len(shape) < 2:
        return normal(rng, shape, dtype)
    return dominant(rng, (k, k), dtype).reshape(shape)


def lstsq_floats(xp, a, b, **kw):
    """``lstsq``'s floating outputs (``rank`` left out of the gradient's loss)."""
    x, residuals, _, s = la(xp).lstsq(a, b, **kw)
    return x, residuals, s


def low_rank_lstsq(xp, u, v, b):
    """``lstsq`` of the rank-2 ``u @ v`` (an ``rcond`` far from the cutoff: rank 2 on both sides)."""
    return la(xp).lstsq(u @ v, b, rcond=1e-10)


def tensorsolve_axes(xp, m, b):
    """``tensorsolve`` with ``axes=(2, 0)`` of the ``a`` whose moved form is ``m`` as
    ``(6, 2, 3)`` (so the solved matrix is the well-conditioned ``m``)."""
    return la(xp).tensorsolve(xp.transpose(xp.reshape(m, (6, 2, 3)), (2, 0, 1)), b, axes=(2, 0))


# --- the cases -------------------------------------------------------------------------
VECTOR_ORDS = (None, 2, 1, INF, -INF, 0, 3, -1, 0.5, -2.5)
MATRIX_ORDS = ("fro", "nuc", INF, -INF, 1, -1, 2, -2)

CASES = [
    # norm: ord None, axis None (any ndim)
    Case("norm", lambda xp, x: la(xp).norm(x), [(2, 3, 4)], dtypes=("float64", "float32", "int32") + COMPLEX),
    Case("norm-keepdims", lambda xp, x: la(xp).norm(x, keepdims=True), [(2, 3, 4)]),
    Case("norm-0d", lambda xp, x: la(xp).norm(x), [()], grad=None),
    Case("norm-1d-ord2", lambda xp, x: la(xp).norm(x, 2), [(5,)]),
    Case("norm-2d-fro", lambda xp, x: la(xp).norm(x, "fro"), [(3, 4)]),
    # vectors
    *[Case(f"norm-vector-{o}", lambda xp, x, o=o: la(xp).norm(x, ord=o, axis=-1), [(3, 5)],
           dtypes=("float64", "float32", "int32", "complex128"), grad=None if o == 0 else "jax")
      for o in VECTOR_ORDS],
    Case("norm-vector-1d-ord", lambda xp, x: la(xp).norm(x, -INF), [(6,)]),
    Case("norm-vector-keepdims", lambda xp, x: la(xp).norm(x, 3, axis=1, keepdims=True), [(2, 4, 3)]),
    Case("norm-vector-npint", lambda xp, x: la(xp).norm(x, np.int64(1), axis=np.int64(0)), [(4, 2)],
         dtypes=F64),
    Case("norm-vector-bool-ord", lambda xp, x: la(xp).norm(x, True, 0), [(4, 2)], dtypes=F64, grad=None),
    # matrices
    *[Case(f"norm-matrix-{o}", lambda xp, x, o=o: la(xp).norm(x, ord=o, axis=(2, 0)), [(3, 2, 4)],
           dtypes=("float64", "float32", "int32", "complex128"))
      for o in MATRIX_ORDS],
    *[Case(f"norm-2d-{o}", lambda xp, x, o=o: la(xp).norm(x, o), [(4, 3)]) for o in (1, -2, "nuc", INF)],
    Case("norm-matrix-keepdims", lambda xp, x: la(xp).norm(x, 2, (-1, 1), keepdims=True), [(2, 3, 4)]),
    *[Case(f"norm-empty-{o}-{axis}", lambda xp, x, o=o, axis=axis: la(xp).norm(x, o, axis, axis == 1),
           [(3, 0)], dtypes=F64, grad=None)
      for o, axis in ((INF, 1), (2, None), (1, (1, 0)), (INF, None), ("nuc", None), (None, None), (0, 1))],
    Case("norm-matrix-none", lambda xp, x: la(xp).norm(x, axis=(0, 1)), [(3, 4, 2)]),
    # cond
    *[Case(f"cond-{p}", lambda xp, x, p=p: la(xp).cond(x, p), [(2, 3, 3)], gen=dominant,
           dtypes=("float64", "float32", "int32", "complex128"))
      for p in (None, 2, -2, 1, -1, INF, -INF, "fro", "nuc")],
    Case("cond-2d", lambda xp, x: la(xp).cond(x), [(4, 4)], gen=dominant),
    Case("cond-wide", lambda xp, x: la(xp).cond(x), [(3, 5)]),
    Case("cond-tall-2", lambda xp, x: la(xp).cond(x, -2), [(2, 5, 3)]),
    # multi_dot (JAX's multi_dot: the same result; the order is checked below)
    Case("multi_dot-2", lambda xp, a, b: la(xp).multi_dot([a, b]), [(3, 4), (4, 2)]),
    Case("multi_dot-2-vectors", lambda xp, a, b: la(xp).multi_dot((a, b)), [(4,), (4,)]),
    Case("multi_dot-3", lambda xp, a, b, c: la(xp).multi_dot([a, b, c]), [(10, 2), (2, 8), (8, 3)]),
    Case("multi_dot-3-other", lambda xp, a, b, c: la(xp).multi_dot([a, b, c]), [(2, 8), (8, 3), (3, 10)]),
    Case("multi_dot-4", lambda xp, a, b, c, d: la(xp).multi_dot([a, b, c, d]),
         [(6, 2), (2, 7), (7, 3), (3, 5)]),
    Case("multi_dot-5", lambda xp, *m: la(xp).multi_dot(m), [(3, 6), (6, 2), (2, 5), (5, 4), (4, 3)]),
    Case("multi_dot-first-1d", lambda xp, a, b, c: la(xp).multi_dot([a, b, c]), [(4,), (4, 3), (3, 5)]),
    Case("multi_dot-last-1d", lambda xp, a, b, c, d: la(xp).multi_dot([a, b, c, d]),
         [(2, 4), (4, 3), (3, 5), (5,)]),
    Case("multi_dot-both-1d", lambda xp, a, b, c: la(xp).multi_dot([a, b, c]), [(4,), (4, 3), (3,)]),
    Case("multi_dot-complex", lambda xp, a, b, c: la(xp).multi_dot([a, b, c]), [(2, 3), (3, 4), (4,)],
         dtypes=COMPLEX, grad=None),
    # lstsq
    Case("lstsq-tall", lambda xp, a, b: la(xp).lstsq(a, b), [(6, 3), (6, 2)],
         dtypes=("float64", "float32", "int32") + COMPLEX, grad=None),
    Case("lstsq-tall-1d", lambda xp, a, b: la(xp).lstsq(a, b), [(5, 2), (5,)], grad=None),
    Case("lstsq-square", lambda xp, a, b: la(xp).lstsq(a, b), [(4, 4), (4, 3)], gen=square_tensor,
         grad=None),
    Case("lstsq-wide", lambda xp, a, b: la(xp).lstsq(a, b), [(3, 5), (3,)], dtypes=("float64", "complex128"),
         grad=None),
    Case("lstsq-rcond", lambda xp, a, b: la(xp).lstsq(a, b, rcond=0.3), [(6, 4), (6, 2)], dtypes=F64,
         grad=None),
    Case("lstsq-low-rank", low_rank_lstsq, [(6, 2), (2, 4), (6,)], dtypes=("float64", "int32"), grad=None),
    Case("lstsq-empty-columns", lambda xp, a, b: la(xp).lstsq(a, b), [(3, 0), (3,)], dtypes=F64, grad=None),
    Case("lstsq-empty-rows", lambda xp, a, b: la(xp).lstsq(a, b), [(0, 2), (0, 3)], dtypes=F64, grad=None),
    Case("lstsq-gradient", lstsq_floats, [(6, 3), (6, 2)], dtypes=()),
    Case("lstsq-gradient-1d", lstsq_floats, [(5, 2), (5,)], dtypes=()),
    # tensorinv / tensorsolve
    Case("tensorinv", lambda xp, a: la(xp).tensorinv(a), [(2, 3, 6)], gen=square_tensor),
    Case("tensorinv-ind1", lambda xp, a: la(xp).tensorinv(a, ind=1), [(6, 2, 3)], gen=square_tensor),
    Case("tensorinv-ind3", lambda xp, a: la(xp).tensorinv(a, 3), [(2, 2, 1, 4)], gen=square_tensor,
         dtypes=F64),
    Case("tensorsolve", lambda xp, a, b: la(xp).tensorsolve(a, b), [(2, 3, 6), (2, 3)], gen=square_tensor),
    Case("tensorsolve-axes", lambda xp, a, b: la(xp).tensorsolve(a, b, axes=(0,)), [(6, 2, 3), (2, 3)],
         gen=square_tensor),
    # (JAX moves several axes in another order than NumPy: finite differences)
    Case("tensorsolve-axes-2", tensorsolve_axes, [(6, 6), (6,)], gen=square_tensor, grad="fd"),
]


# --- forward and gradients -------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)


@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


def test_lstsq_low_rank_residuals(rng, fusion):
    """A rank-deficient tall ``a``: NumPy's empty residuals and the rank, eagerly; the
    minimum-norm solution."""
    a = rng.standard_normal((7, 2)) @ rng.standard_normal((2, 4))
    b = rng.standard_normal((7, 3))
    x, res, rank, s = L.lstsq(qt.asarray(a), qt.asarray(b), rcond=1e-10)
    want = np.linalg.lstsq(a, b, rcond=1e-10)
    assert res.shape == (0,) and res.dtype == np.float64
    assert rank.item() == want[2] == 2
    np.testing.assert_allclose(x.numpy(), want[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s.numpy(), want[3], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("rcond", [None, 0.0, -1.0, 0.5, 0.6, 1.0, 2.0, 1e-17])
def test_lstsq_rcond_like_lapack(rcond, fusion):
    """Singular values at or below ``rcond * s[0]`` count as zero; an ``rcond`` outside
    ``(0, 1)`` means double precision's unit roundoff (LAPACK's ``gelsd``)."""
    a = np.vstack([np.diag([1.0, 0.6, 1e-17, 0.0]), np.zeros((1, 4))])
    b = np.ones(5)
    x, _, rank, _ = L.lstsq(qt.asarray(a), qt.asarray(b), rcond=rcond)
    want = np.linalg.lstsq(a, b, rcond=rcond)
    assert rank.item() == want[2]
    np.testing.assert_allclose(x.numpy(), want[0], rtol=1e-12)


# --- multi_dot's order ---------------------------------------------------------------------
@pytest.mark.parametrize("n", [3, 4, 6, 9])
def test_chain_order_is_numpys(n, rng):
    """The split table of the dynamic programme is NumPy's (ties resolved the same way)."""
    from numpy.linalg._linalg import _multi_dot_matrix_chain_order

    for _ in range(5):
        dims = [int(d) for d in rng.integers(1, 6, n + 1)]   # small dims: many ties
        arrays = [np.empty((dims[i], dims[i + 1])) for i in range(n)]
        want = _multi_dot_matrix_chain_order(arrays)
        got = L._chain_order(dims)
        for i in range(n):
            for j in range(i + 1, n):
                assert got[i][j] == want[i, j], (dims, i, j)


def test_multi_dot_order(monkeypatch):
    """``(10, 2) @ (2, 8) @ (8, 3)``: ``A (B C)`` costs 108, ``(A B) C`` 400; the products
    multiply in the cheap order."""
    seen = []
    real = L.matmul
    monkeypatch.setattr(L, "matmul", lambda a, b: seen.append((a.shape, b.shape)) or real(a, b))
    L.multi_dot([qt.ones((10, 2)), qt.ones((2, 8)), qt.ones((8, 3))])
    assert seen == [((2, 8), (8, 3)), ((10, 2), (2, 3))]


# --- errors ----------------------------------------------------------------------------
ERRORS = [
    (lambda: L.norm(qt.ones(3), "fro"), ValueError, "qt.linalg.norm: Invalid norm order 'fro' for vectors"),
    (lambda: L.norm(qt.ones((2, 3)), "nuc", axis=1), ValueError, "Invalid norm order 'nuc' for vectors"),
    (lambda: L.norm(qt.ones((2, 3)), [1], axis=1), ValueError, r"Invalid norm order \[1\] for vectors"),
    (lambda: L.norm(qt.ones((2, 3)), 3), ValueError, "qt.linalg.norm: Invalid norm order 3 for matrices"),
    (lambda: L.norm(qt.ones((2, 3)), "f2", axis=(0, 1)), ValueError, "Invalid norm order 'f2' for matrices"),
    (lambda: L.norm(qt.ones((2, 3, 4)), 1), ValueError, "qt.linalg.norm: Improper number of dimensions"),
    (lambda: L.norm(qt.ones((2, 3)), axis=(0, -2)), ValueError, "qt.linalg.norm: Duplicate axes"),
    (lambda: L.norm(qt.ones((2, 3)), axis=[0, 1]), TypeError, "qt.linalg.norm: 'axis' must be None"),
    (lambda: L.norm(qt.ones((2, 3)), axis=2), np.exceptions.AxisError, "qt.linalg.norm: axis 2"),
    (lambda: L.cond(qt.ones((2, 3)), 1), np.linalg.LinAlgError,
     r"qt.linalg.cond: Last 2 dimensions .*square"),
    (lambda: L.cond(qt.ones((2, 3)), 1), ValueError, "qt.linalg.cond"),   # (LinAlgError is a ValueError)
    (lambda: L.cond(qt.eye(2), 3), ValueError, "qt.linalg.norm: Invalid norm order 3 for matrices"),
    (lambda: L.cond(qt.ones(3)), np.linalg.LinAlgError, "qt.linalg.cond: 1-dimensional array given"),
    (lambda: L.cond(qt.ones((2, 0, 0))), np.linalg.LinAlgError,
     "qt.linalg.cond: cond is not defined on empty"),
    (lambda: L.multi_dot([qt.ones((2, 2))] * 3, out=qt.ones((2, 2))), TypeError,
     "qt.linalg.multi_dot: out= is not supported"),
    (lambda: L.multi_dot([qt.ones((2, 2))]), ValueError,
     "qt.linalg.multi_dot: Expecting at least two arrays"),
    (lambda: L.multi_dot([qt.ones((2, 2)), qt.ones((2, 2, 2)), qt.ones(2)]), np.linalg.LinAlgError,
     "qt.linalg.multi_dot: 3-dimensional array given"),
    (lambda: L.multi_dot([qt.ones((2, 3)), qt.ones((2, 2)), qt.ones(2)]), ValueError,
     r"qt.linalg.multi_dot: shapes \(2, 3\) \(array 0\) and \(2, 2\) \(array 1\) not aligned"),
    (lambda: L.lstsq(qt.ones((3, 2)), qt.ones(4)), np.linalg.LinAlgError,
     "qt.linalg.lstsq: Incompatible dimensions"),
    (lambda: L.lstsq(qt.ones((2, 3, 2)), qt.ones(3)), np.linalg.LinAlgError,
     "qt.linalg.lstsq: 3-dimensional array given"),
    (lambda: L.lstsq(qt.ones((3, 2)), qt.ones((3, 2, 1))), np.linalg.LinAlgError,
     "qt.linalg.lstsq: 3-dimensional array given"),
    (lambda: L.tensorinv(qt.ones((2, 3)), ind=0), ValueError, "qt.linalg.tensorinv: Invalid ind argument 0"),
    (lambda: L.tensorinv(qt.ones((2, 3)), ind=1.5), TypeError, "qt.linalg.tensorinv: ind must be an integer"),
    (lambda: L.tensorinv(qt.ones((2, 3, 4))), np.linalg.LinAlgError, r"qt.linalg.tensorinv: .*not square"),
    (lambda: L.tensorsolve(qt.ones((2, 3, 4)), qt.ones((2, 3))), np.linalg.LinAlgError,
     r"qt.linalg.tensorsolve: Input arrays must satisfy .* shapes \(2, 3, 4\) and \(2, 3\)"),
    (lambda: L.tensorsolve(qt.ones((2, 3, 6)), qt.ones((2, 3)), axes=(0, 0)), ValueError,
     "qt.linalg.tensorsolve: repeated axis"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


@pytest.mark.cpu_only("on a GPU, cuSOLVER's status is not read (it would wait for the device): a "
                      "singular matrix gives NaN/inf, as the README says")
def test_linalg_error_is_numpys(fusion):
    """``LinAlgError`` is NumPy's class: ``except np.linalg.LinAlgError`` catches a singular
    matrix found when a result is computed."""
    assert L.LinAlgError is np.linalg.LinAlgError
    singular = qt.asarray([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(np.linalg.LinAlgError, match="qt.linalg.inv"):
        L.cond(singular, 1).numpy()
    try:
        L.tensorinv(qt.reshape(singular, (2, 2)), ind=1).numpy()
    except np.linalg.LinAlgError:
        pass
    else:
        pytest.fail("a singular tensorinv did not raise LinAlgError")


# --- NumPy dispatch ------------------------------------------------------------------
def test_numpy_dispatch(rng, monkeypatch, fusion):
    """``np.linalg.<name>(tensor)`` runs this module's function (a qt.Tensor comes back),
    with NumPy's positional signatures."""
    for np_fn, fn in L.NUMPY_FUNCTIONS.items():
        monkeypatch.setitem(protocols.FUNCTIONS, np_fn, fn)
    x = rng.standard_normal((4, 4)) + 8 * np.eye(4)
    b = rng.standard_normal(4)
    t, tb = qt.asarray(x), qt.asarray(b)
    calls = [
        (np.linalg.norm, (t,), (x,)), (np.linalg.norm, (t, 1, 0, True), (x, 1, 0, True)),
        (np.linalg.norm, (t, "nuc"), (x, "nuc")), (np.linalg.cond, (t, -INF), (x, -INF)),
        (np.linalg.multi_dot, ([t, t, tb],), ([x, x, b],)),
        (np.linalg.tensorinv, (qt.reshape(t, (2, 2, 4)),), (x.reshape(2, 2, 4),)),
        (np.linalg.tensorsolve, (t, tb), (x, b)),
    ]
    for fn, args, np_args in calls:
        got = fn(*args)
        assert isinstance(got, qt.Tensor), fn.__name__
        np.testing.assert_allclose(got.numpy(), fn(*np_args), rtol=1e-12, err_msg=fn.__name__)
    got = np.linalg.lstsq(t[:, :3], tb, None)
    assert all(isinstance(g, qt.Tensor) for g in got)
    for g, w in zip(got, np.linalg.lstsq(x[:, :3], b, None)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)


# --- inside qt.jit ---------------------------------------------------------------------
def test_inside_jit(rng, fusion):
    """``qt.jit`` of a function using them equals the eager call (and NumPy), traced once."""
    def f(ns, a, b, c):
        x, res, rank, s = ns.lstsq(a, b)
        return (ns.norm(a) + ns.norm(x, axis=0).sum() + ns.norm(c, "nuc") + ns.cond(c, 1),
                x, res, rank, s, ns.multi_dot([a[:, 0], a, x]), ns.tensorinv(c + 9.0 * np.eye(3), 1))

    step = qt.jit(lambda a, b, c: f(L, a, b, c))
    qt.reset_stats()
    for _ in range(2):
        a, b, c = rng.standard_normal((6, 3)), rng.standard_normal((6, 2)), rng.standard_normal((3, 3))
        args = [qt.asarray(v) for v in (a, b, c)]
        for got, eager, want in zip(step(*args), f(L, *args), f(np.linalg, a, b, c)):
            assert got.shape == eager.shape == np.shape(want) and got.dtype == eager.dtype
            np.testing.assert_allclose(got.numpy(), eager.numpy(), rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    assert qt.stats()["traces"] == 1


def test_lstsq_jit_rank_deficient(rng, fusion):
    """Inside ``qt.jit`` the rank is not known when the result's shapes are: the residuals of
    a tall ``a`` are the squared norms whatever the rank (eagerly: NumPy's empty array)."""
    a = rng.standard_normal((5, 1)) @ rng.standard_normal((1, 3))
    b = rng.standard_normal((5, 2))
    x, res, rank, _ = qt.jit(lambda p, q: L.lstsq(p, q, rcond=1e-10))(qt.asarray(a), qt.asarray(b))
    want = np.linalg.lstsq(a, b, rcond=1e-10)
    assert rank.item() == 1 and want[1].shape == (0,)
    np.testing.assert_allclose(x.numpy(), want[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.numpy(), np.sum((b - a @ want[0]) ** 2, axis=0), rtol=1e-10)


def test_jit_grad(rng, fusion):
    a, b, c = rng.standard_normal((6, 3)), rng.standard_normal(6), rng.standard_normal((3, 3)) + 4 * np.eye(3)

    def loss(ns, xp, a, c):
        x, res, _, s = ns.lstsq(a, b)
        return (xp.sum(x ** 2) + xp.sum(res) + xp.sum(s) + ns.norm(a, 2) + ns.norm(a, -0.5, 0).sum()
                + ns.cond(c, "fro") + ns.multi_dot([b, a, c, c]).sum())

    got = qt.jit(qt.grad(lambda p, q: loss(L, qt, p, q), argnums=(0, 1)))(qt.asarray(a), qt.asarray(c))
    want = jax.grad(lambda p, q: loss(jnp.linalg, jnp, p, q), argnums=(0, 1))(a, c)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-10, atol=1e-12)
