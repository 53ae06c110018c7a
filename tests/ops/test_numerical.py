"""NumPy's numerical routines on tensors (``qtrace/tracer/numerical.py``): einsum, vdot,
convolve/correlate, interp, gradient, trapezoid and the poly* functions, against NumPy
(forward) and JAX or finite differences (gradients)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from composite_cases import (
    Case,
    forward_params,
    gradient_params,
    positive,
    run_forward,
    run_gradient,
    specials,
)

import qtrace as qt

FLOATS = ("float64", "float32")
F64 = ("float64",)
ALL = ("float64", "float32", "int32")


def _knots(xp, d):
    """Increasing sample points from any values (for interp's ``xp``)."""
    return xp.cumsum(xp.abs(d) + 0.25)


CONV_GRADS = {"convolve-same-2-6", "correlate-valid-3-5"}

CASES = [
    # einsum
    Case("einsum-matmul", lambda xp, a, b: xp.einsum("ij,jk->ik", a, b), [(2, 3), (3, 4)]),
    Case("einsum-implicit", lambda xp, a, b: xp.einsum("ij,jk", a, b), [(2, 3), (3, 4)],
         dtypes=F64, grad=None),
    Case("einsum-implicit-order", lambda xp, a: xp.einsum("ba", a), [(2, 3)], dtypes=F64, grad=None),
    Case("einsum-upper", lambda xp, a, b: xp.einsum("Ab,bC", a, b), [(2, 3), (3, 2)], dtypes=F64, grad=None),
    Case("einsum-spaces", lambda xp, a: xp.einsum(" i j -> j i ", a), [(2, 3)], dtypes=F64, grad=None),
    Case("einsum-trace", lambda xp, a: xp.einsum("ii", a), [(3, 3)], grad=None),
    Case("einsum-diag", lambda xp, a: xp.einsum("ii->i", a), [(3, 3)], dtypes=F64, grad=None),
    Case("einsum-diag3", lambda xp, a: xp.einsum("iji->j", a), [(3, 2, 3)], dtypes=F64, grad=None),
    Case("einsum-triple", lambda xp, a: xp.einsum("iii->i", a), [(2, 2, 2)], dtypes=F64, grad=None),
    Case("einsum-diag-pair", lambda xp, a, b: xp.einsum("ii,ij->j", a, b), [(3, 3), (3, 2)], dtypes=F64),
    Case("einsum-sum", lambda xp, a: xp.einsum("ij->", a), [(2, 3)], grad=None),
    Case("einsum-colsum", lambda xp, a: xp.einsum("ijk->j", a), [(2, 3, 2)], dtypes=F64, grad=None),
    Case("einsum-dot", lambda xp, a, b: xp.einsum("i,i", a, b), [(4,), (4,)], dtypes=F64, grad=None),
    Case("einsum-outer", lambda xp, a, b: xp.einsum("i,j->ij", a, b), [(2,), (3,)], dtypes=F64, grad=None),
    Case("einsum-hadamard", lambda xp, a, b: xp.einsum("ij,ij->ij", a, b), [(2, 3), (2, 3)],
         dtypes=F64, grad=None),
    Case("einsum-bcast-label", lambda xp, a, b: xp.einsum("ij,ij->ij", a, b), [(1, 3), (2, 3)],
         dtypes=F64, grad=None),
    Case("einsum-bcast-sum", lambda xp, a, b: xp.einsum("ij,jk", a, b), [(2, 1), (3, 2)], grad="fd",
         dtypes=F64),
    Case("einsum-batch", lambda xp, a, b: xp.einsum("bij,bjk->bik", a, b), [(2, 3, 4), (2, 4, 2)],
         dtypes=F64, grad=None),
    Case("einsum-batch-kept", lambda xp, a, b: xp.einsum("bij,bj->bi", a, b), [(2, 3, 4), (2, 4)],
         dtypes=F64, grad=None),
    Case("einsum-ellipsis", lambda xp, a, b: xp.einsum("...ij,...jk->...ik", a, b), [(3, 2, 3), (3, 4)],
         dtypes=F64, grad=None),
    Case("einsum-ellipsis-bcast", lambda xp, a, b: xp.einsum("...i,...i", a, b), [(2, 3), (4, 1, 3)]),
    Case("einsum-ellipsis-mid", lambda xp, a: xp.einsum("i...j->j...i", a), [(2, 3, 4, 2)],
         dtypes=F64, grad=None),
    Case("einsum-ellipsis-sum", lambda xp, a: xp.einsum("i...->...", a), [(2, 3, 4)], dtypes=F64, grad=None),
    Case("einsum-chain", lambda xp, a, b, c: xp.einsum("ij,jk,kl->il", a, b, c), [(2, 3), (3, 4), (4, 2)],
         grad=None),
    Case("einsum-three", lambda xp, a, b, c: xp.einsum("abc,cda,d->b", a, b, c),
         [(2, 3, 4), (4, 3, 2), (3,)], dtypes=F64, grad=None),
    Case("einsum-ring", lambda xp, a, b, c, d: xp.einsum("ab,bc,cd,da->", a, b, c, d),
         [(2, 3), (3, 4), (4, 2), (2, 2)], dtypes=F64),
    Case("einsum-scalar", lambda xp, a, b: xp.einsum(",i->i", a, b), [(), (3,)], dtypes=F64, grad=None),
    Case("einsum-empty", lambda xp, a, b: xp.einsum("ij,jk", a, b), [(2, 0), (0, 3)], grad=None, dtypes=F64),
    Case("einsum-empty-out", lambda xp, a: xp.einsum("ij->j", a), [(0, 3)], grad=None, dtypes=F64),
    Case("einsum-bool", lambda xp, a, b: xp.einsum("ij,jk", a, b), [(2, 3), (3, 2)], dtypes=("bool",),
         grad=None),
    Case("einsum-bool-sum", lambda xp, a: xp.einsum("ij->i", a), [(2, 3)], dtypes=("bool",), grad=None),
    Case("einsum-int8-wraps", lambda xp, a, b: xp.einsum("ij,jk", a, b), [(2, 4), (4, 3)],
         dtypes=("int8", "uint8"), grad=None),
    Case("einsum-int8-trace", lambda xp, a: xp.einsum("ii", a), [(4, 4)], dtypes=("int8",), grad=None),
    Case("einsum-mixed", lambda xp, a, b: xp.einsum("ij,j", a, b.astype(np.float32)), [(2, 3), (3,)],
         dtypes=("int32", "float64"), grad=None),
    Case("einsum-dtype", lambda xp, a, b: xp.einsum("i,i", a, b, dtype=np.float64), [(4,), (4,)],
         dtypes=("float32", "int32"), grad=None),
    Case("einsum-optimize", lambda xp, a, b, c: xp.einsum("ij,jk,k", a, b, c, optimize="greedy"),
         [(2, 3), (3, 4), (4,)], dtypes=F64, grad=None),
    Case("einsum-sublist", lambda xp, a, b: xp.einsum(a, [0, 1], b, [1, 2], [0, 2]), [(2, 3), (3, 4)],
         dtypes=F64, grad=None),
    Case("einsum-sublist-implicit", lambda xp, a, b: xp.einsum(a, [Ellipsis, 1], b, [1]), [(2, 3), (3,)],
         dtypes=F64, grad=None),
    # vdot
    Case("vdot", lambda xp, a, b: xp.vdot(a, b), [(2, 3), (6,)], dtypes=ALL + ("bool",)),
    Case("vdot-0d", lambda xp, a, b: xp.vdot(a, b), [(), ()], dtypes=F64, grad=None),
    # convolve / correlate
    *[Case(f"{fn}-{mode}-{n}-{m}", lambda xp, a, v, fn=fn, mode=mode: getattr(xp, fn)(a, v, mode),
           [(n,), (m,)], dtypes=F64, grad="jax" if f"{fn}-{mode}-{n}-{m}" in CONV_GRADS else None)
      for fn in ("convolve", "correlate") for mode in ("full", "same", "valid")
      for n, m in ((5, 3), (4, 2), (3, 5), (2, 6), (4, 4))],
    Case("convolve-default", lambda xp, a, v: xp.convolve(a, v), [(6,), (3,)], grad=None),
    Case("correlate-default", lambda xp, a, v: xp.correlate(a, v), [(6,), (3,)], grad=None),
    Case("convolve-0d", lambda xp, a, v: xp.convolve(a, v), [(), (3,)], dtypes=F64, grad=None),
    Case("convolve-bool", lambda xp, a, v: xp.convolve(a, v), [(5,), (2,)], dtypes=("bool",), grad=None),
    Case("correlate-uint8", lambda xp, a, v: xp.correlate(a, v, "full"), [(5,), (2,)], dtypes=("uint8",),
         grad=None),
    # interp
    Case("interp", lambda xp, x, d, f: xp.interp(x, _knots(xp, d), f), [(3, 4), (6,), (6,)], gen=positive,
         grad_gen=lambda rng, s, dt: rng.uniform(0.1, 3.0, s)),
    Case("interp-outside", lambda xp, x, d, f: xp.interp(x * 3.0, _knots(xp, d), f), [(12,), (5,), (5,)],
         grad=None),
    Case("interp-left-right", lambda xp, x, d, f: xp.interp(x * 3.0, _knots(xp, d), f, left=-7.0, right=9.0),
         [(12,), (5,), (5,)], dtypes=F64, grad=None),
    Case("interp-left-tensor", lambda xp, x, d, f, l: xp.interp(x * 3.0, _knots(xp, d), f, left=l[0],
                                                              right=l[1]), [(12,), (4,), (4,), (2,)],
         dtypes=F64, grad=None),
    # (floats only: ties among integer xp are ordered by NumPy's sort, which is not stable)
    Case("interp-period", lambda xp, x, p, f: xp.interp(x * 5.0, p * 2.0, f, period=2.5),
         [(10,), (6,), (6,)], dtypes=FLOATS),
    Case("interp-period-neg", lambda xp, x, p, f: xp.interp(x, p, f, period=-1.5), [(10,), (3,), (3,)],
         dtypes=FLOATS, grad=None),
    Case("interp-one-point", lambda xp, x, p, f: xp.interp(x, p, f), [(7,), (1,), (1,)],
         dtypes=F64, grad=None),
    Case("interp-0d", lambda xp, x, d, f: xp.interp(x, _knots(xp, d), f), [(), (4,), (4,)], gen=positive,
         dtypes=F64, grad=None),
    Case("interp-special", lambda xp, x, f: xp.interp(x, xp.arange(5.0) * 0.7 - 1.5, f), [(30,), (5,)],
         gen=specials, dtypes=FLOATS, grad=None),
    # gradient
    Case("gradient-1d", lambda xp, f: xp.gradient(f), [(6,)], dtypes=ALL, grad=None),
    Case("gradient-2d", lambda xp, f: xp.gradient(f), [(4, 3)], dtypes=ALL),
    Case("gradient-spacing", lambda xp, f: xp.gradient(f, 0.5), [(4, 3)], dtypes=F64, grad=None),
    Case("gradient-spacings", lambda xp, f: xp.gradient(f, 0.5, 2.0), [(4, 3)], dtypes=F64, grad=None),
    Case("gradient-axis", lambda xp, f: xp.gradient(f, axis=-1), [(2, 3, 4)], dtypes=F64, grad=None),
    Case("gradient-axes", lambda xp, f: xp.gradient(f, 3.0, axis=(2, 0)), [(3, 2, 4)], dtypes=F64, grad=None),
    Case("gradient-coords", lambda xp, f, c: xp.gradient(f, _knots(xp, c)), [(5,), (5,)],
         dtypes=F64, grad=None),
    Case("gradient-coords-2d", lambda xp, f, a, b: xp.gradient(f, _knots(xp, a), _knots(xp, b)),
         [(4, 5), (4,), (5,)], grad="fd", dtypes=F64),
    Case("gradient-mixed", lambda xp, f, a: xp.gradient(f, _knots(xp, a), 0.25), [(4, 3), (4,)],
         dtypes=F64, grad=None),
    Case("gradient-edge2", lambda xp, f: xp.gradient(f, edge_order=2), [(5, 3)], dtypes=ALL, grad=None),
    Case("gradient-edge2-h", lambda xp, f: xp.gradient(f, 0.3, axis=0, edge_order=2), [(3, 2)],
         dtypes=F64, grad=None),
    Case("gradient-edge2-coords", lambda xp, f, c: xp.gradient(f, _knots(xp, c), edge_order=2),
         [(6,), (6,)], grad="fd", dtypes=F64),
    Case("gradient-edge2-coords-2d", lambda xp, f, c: xp.gradient(f, _knots(xp, c), axis=1, edge_order=2),
         [(2, 4), (4,)], dtypes=F64, grad=None),
    Case("gradient-two", lambda xp, f: xp.gradient(f), [(2,)], dtypes=F64, grad=None),
    # trapezoid
    Case("trapezoid", lambda xp, y: xp.trapezoid(y), [(6,)], dtypes=ALL + ("bool",), grad=None),
    Case("trapezoid-axis", lambda xp, y: xp.trapezoid(y, axis=0), [(4, 3)], dtypes=F64, grad=None),
    Case("trapezoid-dx", lambda xp, y: xp.trapezoid(y, dx=0.3, axis=-2), [(2, 4, 3)], dtypes=F64),
    Case("trapezoid-x", lambda xp, y, x: xp.trapezoid(y, x), [(2, 5), (5,)]),
    Case("trapezoid-x-axis", lambda xp, y, x: xp.trapezoid(y, x, axis=0), [(5, 2), (5,)],
         dtypes=F64, grad=None),
    Case("trapezoid-x-nd", lambda xp, y, x: xp.trapezoid(y, x=x, axis=1), [(2, 4), (2, 4)], dtypes=F64,
         grad=None),
    Case("trapezoid-one", lambda xp, y: xp.trapezoid(y), [(3, 1)], dtypes=F64, grad=None),
    Case("trapezoid-empty", lambda xp, y: xp.trapezoid(y), [(2, 0)], grad=None, dtypes=F64),
    # polynomials
    Case("polyval", lambda xp, p, x: xp.polyval(p, x), [(4,), (3, 2)], dtypes=ALL),
    Case("polyval-0d", lambda xp, p, x: xp.polyval(p, x), [(3,), ()], dtypes=F64, grad=None),
    Case("polyval-one", lambda xp, p, x: xp.polyval(p, x), [(1,), (3,)], dtypes=F64, grad=None),
    Case("polyval-2d-coeffs", lambda xp, p, x: xp.polyval(p, x), [(3, 2), (2,)], dtypes=F64, grad=None),
    Case("polyval-scalar-x", lambda xp, p: xp.polyval(p, 2.5), [(4,)], dtypes=ALL, grad=None),
    Case("polyadd", lambda xp, a, b: xp.polyadd(a, b), [(4,), (2,)], dtypes=ALL),
    Case("polyadd-swap", lambda xp, a, b: xp.polyadd(a, b), [(1,), (3,)], dtypes=F64, grad=None),
    Case("polyadd-same", lambda xp, a, b: xp.polyadd(a, b), [(3,), (3,)], dtypes=F64, grad=None),
    Case("polyadd-0d", lambda xp, a, b: xp.polyadd(a, b), [(), (3,)], dtypes=F64, grad=None),
    Case("polysub", lambda xp, a, b: xp.polysub(a, b), [(2,), (4,)], dtypes=ALL, grad=None),
    Case("polysub-longer", lambda xp, a, b: xp.polysub(a, b), [(5,), (2,)], dtypes=F64, grad=None),
    Case("polymul", lambda xp, a, b: xp.polymul(a, b), [(3,), (4,)], dtypes=ALL),
    Case("polymul-0d", lambda xp, a, b: xp.polymul(a, b), [(), (3,)], dtypes=F64, grad=None),
    Case("polymul-leading-zeros", lambda xp, a, b: xp.polymul(a * (xp.arange(4) > 1), b), [(4,), (2,)],
         dtypes=ALL, grad=None),
    Case("polyder", lambda xp, p: xp.polyder(p), [(5,)], dtypes=ALL, grad=None),
    Case("polyder-2", lambda xp, p: xp.polyder(p, 2), [(5,)], dtypes=ALL),
    Case("polyder-0", lambda xp, p: xp.polyder(p, 0), [(3,)], dtypes=F64, grad=None),
    Case("polyder-all", lambda xp, p: xp.polyder(p, 4), [(3,)], grad=None, dtypes=F64),
    Case("polyint", lambda xp, p: xp.polyint(p), [(4,)], dtypes=ALL, grad=None),
    Case("polyint-2", lambda xp, p: xp.polyint(p, 2), [(3,)], dtypes=ALL, grad=None),
    Case("polyint-k", lambda xp, p, k: xp.polyint(p, 2, k), [(3,), (2,)], dtypes=F64),
    Case("polyint-k-scalar", lambda xp, p: xp.polyint(p, 3, 1.5), [(2,)], dtypes=ALL, grad=None),
    Case("polyint-0", lambda xp, p: xp.polyint(p, 0), [(3,)], dtypes=F64, grad=None),
    Case("polyfit", lambda xp, x, y: xp.polyfit(x, y, 2), [(8,), (8,)], dtypes=ALL, grad=None),
    Case("polyfit-deg0", lambda xp, x, y: xp.polyfit(x, y, 0), [(5,), (5,)], dtypes=F64, grad=None),
    Case("polyfit-w", lambda xp, x, y, w: xp.polyfit(x * 4.0 - 4.0, y, 3, w=w), [(9,), (9,), (9,)],
         gen=positive, dtypes=F64),
    Case("polyfit-2d", lambda xp, x, y: xp.polyfit(x, y, 1), [(6,), (6, 2)], dtypes=F64, grad=None),
    Case("polyfit-2d-w", lambda xp, x, y, w: xp.polyfit(x * 4.0 - 4.0, y, 2, w=w), [(6,), (6, 3), (6,)],
         gen=positive, dtypes=F64, grad=None),
    Case("polyfit-rcond", lambda xp, x, y: xp.polyfit(x, y, 2, rcond=1e-3), [(7,), (7,)],
         dtypes=F64, grad=None),
    Case("polyfit-exact", lambda xp, x, y: xp.polyfit(x, y, 2), [(3,), (3,)], dtypes=F64, grad=None),
    Case("poly", lambda xp, z: xp.poly(z), [(4,)], dtypes=ALL),
    Case("poly-one", lambda xp, z: xp.poly(z), [(1,)], dtypes=F64, grad=None),
    Case("polydiv", lambda xp, u, v: xp.polydiv(u, v), [(5,), (3,)], dtypes=("float64", "int32"),
         gen=positive, grad="fd"),
    Case("polydiv-short", lambda xp, u, v: xp.polydiv(u, v), [(2,), (3,)], dtypes=F64, gen=positive,
         grad=None),
    Case("polydiv-exact", lambda xp, r, v: xp.polydiv(xp.polymul(r, v), v), [(3,), (2,)], dtypes=F64,
         gen=positive, grad=None),
]




@pytest.mark.filterwarnings("ignore::numpy.exceptions.RankWarning")
@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)




@pytest.mark.filterwarnings("ignore::numpy.exceptions.RankWarning")
@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


# --- complex inputs --------------------------------------------------------------------
def _complex(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


COMPLEX = [
    ("einsum", lambda xp, a, b: xp.einsum("ij,jk->ki", a, b), [(2, 3), (3, 2)]),
    ("einsum-trace", lambda xp, a, b: xp.einsum("ii,i", a, b), [(3, 3), (3,)]),
    ("vdot", lambda xp, a, b: xp.vdot(a, b), [(2, 3), (3, 2)]),
    ("convolve", lambda xp, a, b: xp.convolve(a, b, "same"), [(5,), (3,)]),
    *[(f"correlate-{mode}-{n}-{m}", lambda xp, a, b, mode=mode: xp.correlate(a, b, mode), [(n,), (m,)])
      for mode in ("full", "same", "valid") for n, m in ((5, 2), (2, 5), (3, 3))],
    ("polyval", lambda xp, p, x: xp.polyval(p, x), [(3,), (4,)]),
    ("polymul", lambda xp, a, b: xp.polymul(a, b), [(3,), (2,)]),
    ("polyint", lambda xp, p: xp.polyint(p, 2), [(3,)]),
    ("polyfit", lambda xp, x, y: xp.polyfit(x, y, 2), [(6,), (6,)]),
]


@pytest.mark.parametrize("name,fn,shapes", COMPLEX, ids=[c[0] for c in COMPLEX])
def test_complex(name, fn, shapes, rng, fusion):
    xs = [_complex(rng, s) for s in shapes]
    got, want = fn(qt, *[qt.asarray(x) for x in xs]), fn(np, *xs)
    assert got.dtype == want.dtype == np.complex128 and got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-11, atol=1e-12)


def test_interp_complex_fp(rng, fusion):
    x = rng.uniform(-1.0, 6.0, 9)
    xp = np.cumsum(rng.uniform(0.5, 1.5, 5))
    fp = _complex(rng, 5)
    for kw in ({}, {"left": 1 + 2j, "right": -3j}, {"period": 3.0}):
        got = qt.interp(qt.asarray(x), qt.asarray(xp), qt.asarray(fp), **kw)
        want = np.interp(x, xp, fp, **kw)
        assert got.dtype == np.complex128
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-14)


def test_interp_knots_and_duplicates(fusion):
    """Exactly at a sample point the sample's value; repeated points as NumPy; infinite
    values at the ends of an interval."""
    xp = np.array([0.0, 1.0, 1.0, 2.0, 3.0])
    fp = np.array([0.0, 5.0, 7.0, np.inf, 1.0])
    x = np.array([0.0, 1.0, 2.0, 3.0, 0.5, 1.5, 2.5, -1.0, 4.0, np.nan])
    got = qt.interp(qt.asarray(x), qt.asarray(xp), qt.asarray(fp)).numpy()
    np.testing.assert_array_equal(got, np.interp(x, xp, fp))
    fp2 = np.array([1.0, np.inf, np.inf, 2.0, 2.0])
    np.testing.assert_array_equal(qt.interp(qt.asarray(x), qt.asarray(xp), qt.asarray(fp2)).numpy(),
                                  np.interp(x, xp, fp2))


@pytest.mark.filterwarnings("ignore::numpy.exceptions.RankWarning")
def test_dtypes_follow_numpy(fusion):
    f32, i32 = np.ones(4, np.float32), np.arange(4, dtype=np.int32)
    for fn, args in [(np.einsum, ("i,i", f32, i32)), (np.einsum, ("i,i->i", i32, i32)),
                     (np.vdot, (f32, i32)), (np.convolve, (i32, f32)), (np.interp, (f32, f32, f32)),
                     (np.gradient, (f32,)), (np.gradient, (i32,)), (np.gradient, (f32, np.arange(4.0))),
                     (np.trapezoid, (f32,)), (np.trapezoid, (i32,)), (np.trapezoid, (f32, i32)),
                     (np.polyval, (f32, 2.0)), (np.polyval, (i32, f32)), (np.polyder, (f32,)),
                     (np.polyint, (f32,)), (np.polyint, (i32, 1, 2)), (np.polyfit, (f32, f32, 1)),
                     (np.polyadd, (f32, i32)), (np.polysub, (i32, np.ones(2, np.int8)))]:
        got = fn(*[qt.asarray(a) if isinstance(a, np.ndarray) else a for a in args])
        assert got.dtype == np.asarray(fn(*args)).dtype, (fn.__name__, args)
    assert qt.einsum("i,i", qt.asarray(f32), qt.asarray(f32), dtype=np.float64).dtype == np.float64
    assert qt.einsum("i", qt.asarray(np.ones(2)), dtype=np.float32, casting="same_kind").dtype == np.float32


# --- NumPy dispatch ------------------------------------------------------------------
def test_numpy_dispatch(rng, fusion):
    """``np.<name>(tensor)`` runs qtrace's function (a qt.Tensor equal to NumPy's comes back)."""
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    v, w = rng.standard_normal(6), rng.standard_normal(3)
    xp = np.cumsum(rng.uniform(0.5, 1.0, 6))
    ta, tb, tv, tw, txp = (qt.asarray(x) for x in (a, b, v, w, xp))
    calls = [
        (np.einsum, ("ij,jk->ik", ta, tb), ("ij,jk->ik", a, b)),
        (np.einsum, (ta, [0, 1], tb, [1, 2]), (a, [0, 1], b, [1, 2])),
        (np.vdot, (ta, ta), (a, a)),
        (np.convolve, (tv, tw), (v, w)),
        (np.correlate, (tv, tw, "same"), (v, w, "same")),
        (np.interp, (tv, txp, tv), (v, xp, v)),
        (np.gradient, (ta, 0.5), (a, 0.5)),
        (np.gradient, (tv, txp), (v, xp)),
        (np.trapezoid, (ta,), (a,)),
        (np.trapezoid, (tv, txp), (v, xp)),
        (np.polyval, (tw, ta), (w, a)),
        (np.polyadd, (tv, tw), (v, w)),
        (np.polysub, (tv, tw), (v, w)),
        (np.polymul, (tv, tw), (v, w)),
        (np.polyder, (tv, 2), (v, 2)),
        (np.polyint, (tv,), (v,)),
        (np.polyfit, (txp, tv, 2), (xp, v, 2)),
    ]
    for fn, targs, args in calls:
        got, want = fn(*targs), fn(*args)
        pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
        for g, w_ in pairs:
            assert isinstance(g, qt.Tensor), fn.__name__
            np.testing.assert_allclose(g.numpy(), w_, rtol=1e-10, atol=1e-12, err_msg=fn.__name__)
    g = qt.grad(lambda t: qt.sum(np.einsum("ij,jk->ik", t, tb) ** 2))(ta)
    np.testing.assert_allclose(g.numpy(), 2 * (a @ b) @ b.T, rtol=1e-12)


# --- inside qt.jit -------------------------------------------------------------------
def test_inside_jit(rng, fusion):
    def body(m, a, b, v, xp):
        y = m.einsum("ij,jk->ik", a, b) + m.einsum("ii", a[:, :3])
        z = m.convolve(v, xp[:3], "same") + m.correlate(v, xp[:2], "same")
        s = m.interp(v * 3.0, xp, v) + m.gradient(v, xp, edge_order=2)
        t = m.trapezoid(y, axis=0).sum() + m.vdot(v, xp)
        p = m.polyval(m.polyint(m.polyder(xp, 1)), v) + m.polyfit(xp, v, 2)[0]
        q = m.polymul(v, xp[:2], **({"trim_leading_zeros": False} if m is qt else {}))
        return y.sum(axis=1), z + s + t + p + q[1:]

    step = qt.jit(lambda *args: body(qt, *args))
    qt.reset_stats()
    for _ in range(2):
        a, b, v = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal(6)
        xp = np.cumsum(rng.uniform(0.5, 1.0, 6))
        got = step(*[qt.asarray(x) for x in (a, b, v, xp)])
        for g, w in zip(got, body(np, a, b, v, xp)):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-10, atol=1e-12)
    assert qt.stats()["traces"] == 1


def test_jit_grad(rng, fusion):
    x, xp, fp = rng.uniform(0.0, 4.0, 5), np.cumsum(rng.uniform(0.5, 1.0, 5)), rng.standard_normal(5)

    def loss(m, x, fp):
        return m.sum(m.interp(x, xp, fp) * m.einsum("i,j->ij", x, fp)) + m.trapezoid(m.convolve(x, fp))

    g = qt.jit(qt.grad(lambda a, b: loss(qt, a, b), argnums=(0, 1)))(qt.asarray(x), qt.asarray(fp))
    want = jax.grad(lambda a, b: loss(jnp, a, b), argnums=(0, 1))(x, fp)
    for gi, wi in zip(g, want):
        np.testing.assert_allclose(gi.numpy(), wi, rtol=1e-10, atol=1e-12)


# --- errors --------------------------------------------------------------------------
O2, O3 = qt.ones((2, 3)), qt.ones(3)
ERRORS = [
    (lambda: qt.poly(qt.ones((2, 2))), TypeError, "qt.poly: the characteristic polynomial of a matrix"),
    (lambda: qt.poly(qt.ones((2, 3))), ValueError, "qt.poly: input must be 1d or non-empty square 2d"),
    (lambda: qt.polydiv(qt.ones((2, 2)), qt.ones(2)), ValueError, "qt.polydiv: polynomials must be 1-D"),
    (lambda: qt.jit(qt.polydiv)(qt.ones(3), qt.ones(2)), qt.TracerError, "qt.polydiv: the remainder's"),
    (lambda: qt.jit(qt.poly)(qt.asarray([1j, -1j])), qt.TracerError, "qt.poly: whether the coefficients"),
    (lambda: qt.einsum(), ValueError, "qt.einsum: must specify"),
    (lambda: qt.einsum("ij,jk", O2), ValueError, "qt.einsum: .*2 operands, 1 given"),
    (lambda: qt.einsum("ij", O2, O2), ValueError, "qt.einsum: .*1 operands, 2 given"),
    (lambda: qt.einsum("i", O2), ValueError, "qt.einsum: operand 0 has 2 dimensions"),
    (lambda: qt.einsum("ijk...", O2), ValueError, "qt.einsum: .*more than operand 0"),
    (lambda: qt.einsum("i1", O2), ValueError, "qt.einsum: invalid subscript '1'"),
    (lambda: qt.einsum("i.j", O2), ValueError, "qt.einsum: invalid ellipsis"),
    (lambda: qt.einsum("ij->k", O2), ValueError, "qt.einsum: output subscript 'k' never appeared"),
    (lambda: qt.einsum("ij->ii", O2), ValueError, "qt.einsum: output subscript 'i' appears more"),
    (lambda: qt.einsum("ij->i->j", O2), ValueError, "qt.einsum: .*one '->'"),
    (lambda: qt.einsum("...i->i", qt.ones((2, 3, 3))), ValueError, "qt.einsum: output has more dimensions"),
    (lambda: qt.einsum("ii", O2), ValueError, "qt.einsum: .*collapsing index 'i' don't match \\(2 != 3\\)"),
    (lambda: qt.einsum("ij,jk", O2, O2), ValueError, "qt.einsum: .*subscript 'j' has size 3 and 2"),
    (lambda: qt.einsum("i,i", O3, O3, dtype=np.int32), TypeError, "qt.einsum: cannot cast operand 0 "
     "from dtype float64 to int32 according to the rule 'safe'"),
    (lambda: qt.einsum("i", O3, out=np.zeros(3)), TypeError, "qt.einsum: out="),
    (lambda: qt.einsum(O2, [0, 52]), ValueError, "qt.einsum: subscript 52 is not within"),
    (lambda: qt.einsum(O2, [0, 1.5j]), TypeError, "qt.einsum: subscripts in the operand-list form"),
    (lambda: qt.einsum("i", O3, order="X"), ValueError, "qt.einsum: order"),
    (lambda: qt.vdot(O2, O3), ValueError, "qt.vdot: vectors have different lengths"),
    (lambda: qt.convolve(O2, O3), ValueError, r"qt.convolve: a must be 1-D, got shape \(2, 3\)"),
    (lambda: qt.convolve(O3, qt.ones(0)), ValueError, "qt.convolve: v cannot be empty"),
    (lambda: qt.correlate(qt.ones(0), O3), ValueError, "qt.correlate: a cannot be empty"),
    (lambda: qt.correlate(O3, O3, mode="middle"), ValueError, "qt.correlate: mode must be one of"),
    (lambda: qt.interp(O3, O2, O3), ValueError, r"qt.interp: xp and fp must be 1-D.*\(2, 3\)"),
    (lambda: qt.interp(O3, O3, qt.ones(4)), ValueError, "qt.interp: fp and xp are not of the same length"),
    (lambda: qt.interp(O3, qt.ones(0), qt.ones(0)), ValueError, "qt.interp: array of sample points"),
    (lambda: qt.interp(O3, O3, O3, period=0), ValueError, "qt.interp: period must be a non-zero"),
    (lambda: qt.interp(O3, O3, O3, period=qt.asarray(1.0)), TypeError, "qt.interp: period"),
    (lambda: qt.interp(qt.asarray([1j]), O3, O3), TypeError, "qt.interp: x must be real"),
    (lambda: qt.gradient(qt.ones(1)), ValueError, "qt.gradient: shape of array too small"),
    (lambda: qt.gradient(qt.ones(2), edge_order=2), ValueError, "qt.gradient: shape of array too small"),
    (lambda: qt.gradient(O3, edge_order=3), ValueError, "qt.gradient: edge_order must be 1 or 2"),
    (lambda: qt.gradient(O2, 1.0, 2.0, 3.0), TypeError, "qt.gradient: invalid number of arguments"),
    (lambda: qt.gradient(O2, qt.ones(2), qt.ones(2)), ValueError, "qt.gradient: when 1-D, distances must"),
    (lambda: qt.gradient(O3, qt.ones((3, 1))), ValueError, "qt.gradient: distances must be either"),
    (lambda: qt.gradient(O2, axis=2), ValueError, "qt.gradient: axis 2"),
    (lambda: qt.gradient(O2, axis=(0, -2)), ValueError, "qt.gradient: repeated axis"),
    (lambda: qt.gradient(qt.ones(3, dtype=qt.bool_)), TypeError, "qt.gradient: boolean"),
    (lambda: qt.gradient(O3, edge_order=qt.asarray(1)), TypeError, "qt.gradient: edge_order"),
    (lambda: qt.trapezoid(O2, x=qt.ones(2)), ValueError, "qt.trapezoid: x of length 2"),
    (lambda: qt.trapezoid(O2, axis=2), ValueError, "qt.trapezoid: axis 2"),
    (lambda: qt.polyval(qt.asarray(1.0), O3), TypeError, "qt.polyval: p must be a sequence"),
    (lambda: qt.polyadd(qt.ones((2, 2)), O3), ValueError, "qt.polyadd: coefficient arrays"),
    (lambda: qt.polyder(O3, -1), ValueError, "qt.polyder: order of derivative"),
    (lambda: qt.polyder(O3, qt.asarray(1)), TypeError, "qt.polyder: m must be a Python"),
    (lambda: qt.polyint(O3, -1), ValueError, "qt.polyint: order of integral"),
    (lambda: qt.polyint(O3, 3, k=[1.0, 2.0]), ValueError, "qt.polyint: k must be a scalar"),
    (lambda: qt.polyfit(O3, O3, -1), ValueError, "qt.polyfit: expected deg >= 0"),
    (lambda: qt.polyfit(O2, O3, 1), TypeError, "qt.polyfit: expected 1-D vector for x"),
    (lambda: qt.polyfit(qt.ones(0), qt.ones(0), 1), TypeError, "qt.polyfit: expected non-empty"),
    (lambda: qt.polyfit(O3, qt.ones((3, 1, 1)), 1), TypeError, "qt.polyfit: expected 1-D or 2-D"),
    (lambda: qt.polyfit(O3, qt.ones(4), 1), TypeError, "qt.polyfit: expected x and y to have same"),
    (lambda: qt.polyfit(O3, O3, 1, w=qt.ones(2)), TypeError, "qt.polyfit: expected w and y"),
    (lambda: qt.polyfit(O3, O3, 1, full=True), TypeError, "qt.polyfit: full=True is not supported"),
    (lambda: qt.polyfit(O3, O3, 1, cov=True), TypeError, "qt.polyfit: cov"),
    (lambda: qt.polyfit(O3, O3, qt.asarray(1)), TypeError, "qt.polyfit: deg must be a Python"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_polymul_leading_zeros_inside_jit(rng, fusion):
    """NumPy's trimming reads the values: refused inside qt.jit, where
    ``trim_leading_zeros=False`` keeps the full length (JAX's default)."""
    a, b = np.array([0.0, 0.0, 2.0, 3.0]), rng.standard_normal(3)
    with pytest.raises(qt.TracerError, match="qt.polymul: .*trim_leading_zeros=False"):
        qt.jit(lambda x, y: qt.polymul(x, y))(qt.asarray(a), qt.asarray(b))
    got = qt.jit(lambda x, y: qt.polymul(x, y, trim_leading_zeros=False))(qt.asarray(a), qt.asarray(b))
    np.testing.assert_allclose(got.numpy(), np.convolve(a, b), rtol=1e-12)
    np.testing.assert_allclose(qt.polymul(qt.asarray(a), qt.asarray(b)).numpy(), np.polymul(a, b))
    assert qt.polymul(qt.zeros(3), qt.asarray(b)).shape == np.polymul(np.zeros(3), b).shape == (3,)


def test_shape_parameters_must_be_concrete():
    """Inside qt.jit a traced degree or order is refused by name (never evaluated)."""
    with pytest.raises(TypeError, match="qt.polyder: m"):
        qt.jit(lambda p, m: qt.polyder(p, m))(qt.ones(4), qt.asarray(2))
    with pytest.raises(TypeError, match="qt.polyfit: deg"):
        qt.jit(lambda x, d: qt.polyfit(x, x, d))(qt.ones(4), qt.asarray(1))
