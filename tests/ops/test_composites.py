"""NumPy functions composed from qtrace operations (``qtrace/tracer/composites.py``).

Each case is one callable ``fn(xp, *arrays)`` run with ``xp`` = ``qt``, ``np`` and
``jax.numpy`` (the harness: ``composite_cases.py``):

* forward: fresh random inputs (``rng`` fixture; the session seed is in the pytest
  header, ``QTRACE_TEST_SEED`` reproduces a run) in float64, float32 and int32 (bool for
  some), compared with NumPy: the result's dtype and shape exactly, values against NumPy
  computed in float64;
* gradients: ``qt.grad`` of ``sum(f(x) * w)`` (``w`` random) against ``jax.grad`` of the
  same composition with ``jax.numpy`` in float64, or central finite differences where JAX
  has no such function;
* errors name the function, and a few run inside ``qt.jit``.

Every test runs with fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from composite_cases import (
    Case,
    _check_forward,
    forward_params,
    gradient_params,
    positive,
    run_forward,
    run_gradient,
    specials,
    wide,
)

import qtrace as qt


def _split_concat(xp, parts):
    return xp.concatenate([p * (i + 1) for i, p in enumerate(parts)], axis=None)


CASES = [
    # roll
    Case("roll-flat", lambda xp, x: xp.roll(x, 3), [(7,)]),
    Case("roll-flat-3d", lambda xp, x: xp.roll(x, -5), [(2, 3, 4)]),
    Case("roll-0d", lambda xp, x: xp.roll(x, 2), [()]),
    Case("roll-neg-axis", lambda xp, x: xp.roll(x, -1, axis=-1), [(2, 3, 4)]),
    Case("roll-big-shift", lambda xp, x: xp.roll(x, 10, axis=1), [(2, 3, 4)]),
    Case("roll-tuple", lambda xp, x: xp.roll(x, (1, -2), axis=(0, 2)), [(2, 3, 4)]),
    Case("roll-same-axis", lambda xp, x: xp.roll(x, (1, 3), axis=(1, 1)), [(2, 5)]),
    Case("roll-bool", lambda xp, x: xp.roll(x, 2, axis=0), [(5, 2)], dtypes=("bool",), grad=None),
    # tile
    Case("tile-int", lambda xp, x: xp.tile(x, 3), [(4,)]),
    Case("tile-prepend", lambda xp, x: xp.tile(x, (2, 3)), [(3,)]),
    Case("tile-3d", lambda xp, x: xp.tile(x, (2, 1, 2)), [(2, 3)]),
    Case("tile-fewer-reps", lambda xp, x: xp.tile(x, 2), [(2, 2, 3)]),
    Case("tile-0d", lambda xp, x: xp.tile(x, (2, 2)), [()]),
    Case("tile-zero", lambda xp, x: xp.tile(x, (0, 2)), [(2, 3)], grad=None),
    # repeat
    Case("repeat-flat", lambda xp, x: xp.repeat(x, 2), [(2, 3)]),
    Case("repeat-axis", lambda xp, x: xp.repeat(x, 3, axis=-1), [(2, 3, 2)]),
    Case("repeat-list", lambda xp, x: xp.repeat(x, [1, 0, 2], axis=0), [(3, 2)], grad="fd"),
    Case("repeat-array", lambda xp, x: xp.repeat(x, np.array([2, 1]), axis=1), [(3, 2)]),
    Case("repeat-0d", lambda xp, x: xp.repeat(x, 4), [()]),
    Case("repeat-one-list", lambda xp, x: xp.repeat(x, [3], axis=0), [(2, 2)], grad="fd"),
    # stacking
    Case("hstack-1d", lambda xp, a, b: xp.hstack([a, b]), [(3,), (2,)]),
    Case("hstack-2d", lambda xp, a, b: xp.hstack((a, b)), [(2, 3), (2, 1)]),
    Case("hstack-0d", lambda xp, a, b: xp.hstack([a, b]), [(), ()]),
    Case("vstack-1d", lambda xp, a, b: xp.vstack([a, b]), [(3,), (3,)]),
    Case("vstack-2d", lambda xp, a, b, c: xp.vstack([a, b, c]), [(2, 3), (1, 3), (3,)]),
    Case("dstack-2d", lambda xp, a, b: xp.dstack([a, b]), [(2, 3), (2, 3)]),
    Case("dstack-1d", lambda xp, a, b: xp.dstack([a, b]), [(3,), (3,)]),
    Case("column_stack", lambda xp, a, b: xp.column_stack([a, b]), [(3,), (3, 2)]),
    Case("column_stack-0d", lambda xp, a, b: xp.column_stack([a, b]), [(), ()]),
    Case("atleast_1d", lambda xp, a, b: xp.atleast_1d(a, b), [(), (2, 3)]),
    Case("atleast_2d", lambda xp, a, b, c: xp.atleast_2d(a, b, c), [(), (3,), (2, 3, 4)]),
    Case("atleast_3d", lambda xp, a, b, c: xp.atleast_3d(a, b, c), [(), (3,), (2, 3)]),
    Case("atleast_1d-one", lambda xp, a: xp.atleast_1d(a), [()]),
    # split
    Case("split-sections", lambda xp, x: _split_concat(xp, xp.split(x, 3)), [(6, 4)]),
    Case("split-indices", lambda xp, x: _split_concat(xp, xp.split(x, [1, 3], axis=-1)), [(3, 5)]),
    Case("split-out-of-range", lambda xp, x: _split_concat(xp, xp.split(x, [2, -1, 10])), [(5, 2)],
         grad="fd"),
    Case("array_split", lambda xp, x: _split_concat(xp, xp.array_split(x, 3)), [(7,)]),
    Case("array_split-axis", lambda xp, x: _split_concat(xp, xp.array_split(x, 4, axis=1)), [(2, 6, 2)]),
    Case("split-list", lambda xp, x: xp.array_split(x, 3, axis=2), [(2, 2, 5)]),
    # diff
    Case("diff", lambda xp, x: xp.diff(x), [(6,)]),
    Case("diff-n2-axis", lambda xp, x: xp.diff(x, n=2, axis=1), [(3, 5, 2)]),
    Case("diff-n0", lambda xp, x: xp.diff(x, n=0), [(4,)]),
    Case("diff-long-n", lambda xp, x: xp.diff(x, n=7), [(2, 5)], grad=None),
    Case("diff-prepend", lambda xp, x: xp.diff(x, prepend=0, append=x[..., -1:] * 2), [(3, 4)],
         grad_args=(0,)),
    Case("diff-bool", lambda xp, x: xp.diff(x, axis=0), [(5, 3)], dtypes=("bool",), grad=None),
    Case("diff-uint8", lambda xp, x: xp.diff(x), [(6,)], dtypes=("uint8",), grad=None),
    # products
    Case("outer", lambda xp, a, b: xp.outer(a, b), [(3,), (4,)]),
    Case("outer-2d", lambda xp, a, b: xp.outer(a, b), [(2, 2), (3,)]),
    Case("inner-1d", lambda xp, a, b: xp.inner(a, b), [(5,), (5,)]),
    Case("inner-2d", lambda xp, a, b: xp.inner(a, b), [(2, 3), (4, 3)]),
    Case("inner-3d", lambda xp, a, b: xp.inner(a, b), [(2, 2, 3), (3,)]),
    Case("inner-0d", lambda xp, a, b: xp.inner(a, b), [(), (2, 3)]),
    Case("inner-bool", lambda xp, a, b: xp.inner(a, b), [(2, 3), (3,)], dtypes=("bool",), grad=None),
    Case("kron-2d", lambda xp, a, b: xp.kron(a, b), [(2, 2), (3, 2)]),
    Case("kron-1d", lambda xp, a, b: xp.kron(a, b), [(2,), (3,)]),
    Case("kron-mixed", lambda xp, a, b: xp.kron(a, b), [(2, 3), (2,)]),
    Case("cross", lambda xp, a, b: xp.cross(a, b), [(3,), (3,)]),
    Case("cross-broadcast", lambda xp, a, b: xp.cross(a, b), [(4, 3), (3,)]),
    Case("cross-3d", lambda xp, a, b: xp.cross(a, b), [(2, 1, 3), (5, 3)]),
    Case("cross-axis", lambda xp, a, b: xp.cross(a, b, axisa=0, axisb=1, axisc=0), [(3, 4), (4, 3)]),
    Case("cross-axis-all", lambda xp, a, b: xp.cross(a, b, axis=0), [(3, 2), (3, 2)]),
    # grids
    Case("meshgrid-xy", lambda xp, a, b: xp.meshgrid(a, b), [(3,), (4,)]),
    Case("meshgrid-ij", lambda xp, a, b, c: xp.meshgrid(a, b, c, indexing="ij"), [(3,), (2,), (4,)]),
    Case("meshgrid-xy3", lambda xp, a, b, c: xp.meshgrid(a, b, c), [(3,), (2,), (2, 2)], grad="fd"),
    Case("meshgrid-sparse", lambda xp, a, b: xp.meshgrid(a, b, sparse=True), [(3,), (2,)]),
    Case("meshgrid-one", lambda xp, a: xp.meshgrid(a), [(3,)]),
    # pad
    Case("pad-constant", lambda xp, x: xp.pad(x, ((1, 2), (0, 3)), constant_values=1.5), [(2, 3)]),
    Case("pad-constant-pairs", lambda xp, x: xp.pad(x, 1, constant_values=((1, 2), (3, 4))), [(2, 3)]),
    Case("pad-constant-3d", lambda xp, x: xp.pad(x, (1, 2)), [(2, 1, 3)]),
    Case("pad-edge", lambda xp, x: xp.pad(x, ((2, 0), (1, 3)), mode="edge"), [(2, 3)]),
    Case("pad-wrap", lambda xp, x: xp.pad(x, 5, mode="wrap"), [(3,)]),
    Case("pad-wrap-2d", lambda xp, x: xp.pad(x, ((1, 2), (2, 1)), mode="wrap"), [(3, 4)]),
    Case("pad-reflect", lambda xp, x: xp.pad(x, 5, mode="reflect"), [(3,)]),
    Case("pad-reflect-2d", lambda xp, x: xp.pad(x, ((3, 1), (1, 2)), mode="reflect"), [(4, 3)]),
    Case("pad-reflect-1", lambda xp, x: xp.pad(x, ((2, 1), (1, 1)), mode="reflect"), [(1, 3)]),
    Case("pad-symmetric", lambda xp, x: xp.pad(x, (4, 7), mode="symmetric"), [(3,)]),
    Case("pad-0d", lambda xp, x: xp.pad(x, 2), [()]),
    # elementwise (NumPy ufuncs)
    Case("logaddexp", lambda xp, a, b: xp.logaddexp(a, b), [(5,), (5,)], gen=wide),
    Case("logaddexp-bcast", lambda xp, a, b: xp.logaddexp(a, b), [(2, 3), (3,)]),
    Case("logaddexp-scalar", lambda xp, a: xp.logaddexp(a, 0.5), [(2, 3)]),
    Case("logaddexp-special", lambda xp, a, b: xp.logaddexp(a, b), [(40,), (40,)], gen=specials,
         grad=None),
    Case("logaddexp2", lambda xp, a, b: xp.logaddexp2(a, b), [(5,), (5,)], gen=wide),
    Case("logaddexp2-special", lambda xp, a, b: xp.logaddexp2(a, b), [(40,), (40,)], gen=specials,
         grad=None),
    Case("deg2rad", lambda xp, x: xp.deg2rad(x), [(2, 3)], gen=wide),
    Case("rad2deg", lambda xp, x: xp.rad2deg(x), [(4,)]),
    Case("radians", lambda xp, x: xp.radians(x), [()], gen=wide),
    Case("degrees", lambda xp, x: xp.degrees(x), [(3,)]),
    Case("fmax", lambda xp, a, b: xp.fmax(a, b), [(6,), (6,)]),
    Case("fmin-bcast", lambda xp, a, b: xp.fmin(a, b), [(2, 3), (3,)]),
    Case("fmax-special", lambda xp, a, b: xp.fmax(a, b), [(40,), (40,)], gen=specials, grad=None),
    Case("fmin-special", lambda xp, a, b: xp.fmin(a, b), [(40,), (40,)], gen=specials, grad=None),
    Case("heaviside", lambda xp, a, b: xp.heaviside(a, b), [(40,), (40,)], gen=specials, grad=None),
    Case("heaviside-grad", lambda xp, a, b: xp.heaviside(a * 0.0, b) + xp.heaviside(a, 0.5), [(4,), (4,)],
         dtypes=("float64",), grad_args=(1,)),
    Case("copysign", lambda xp, a, b: xp.copysign(a, b), [(6,), (6,)]),
    Case("copysign-special", lambda xp, a, b: xp.copysign(a, b), [(40,), (40,)], gen=specials,
         grad=None),
    Case("nan_to_num", lambda xp, x: xp.nan_to_num(x), [(40,)], gen=specials, grad=None, ref64=False),
    Case("nan_to_num-args", lambda xp, x: xp.nan_to_num(x, nan=-1.0, posinf=9.0, neginf=-9.0), [(40,)],
         gen=specials, grad=None, ref64=False),
    Case("nan_to_num-grad", lambda xp, x: xp.nan_to_num(x), [(3, 2)]),
    # phase unwrapping
    Case("unwrap", lambda xp, x: xp.unwrap(x), [(9,)], gen=wide),
    Case("unwrap-axis-discont", lambda xp, x: xp.unwrap(x, discont=4.0, axis=0), [(6, 3)], gen=wide),
    Case("unwrap-period", lambda xp, x: xp.unwrap(x, period=6), [(2, 8)], gen=wide),
    Case("unwrap-odd-period", lambda xp, x: xp.unwrap(x, period=7), [(8,)], gen=wide, grad=None),
    # bits
    Case("packbits", lambda xp, x: xp.packbits(x), [(13,)], dtypes=("int32", "bool"), grad=None),
    Case("packbits-axis-little", lambda xp, x: xp.packbits(x, axis=1, bitorder="little"), [(3, 10)],
         dtypes=("int32", "bool", "uint8"), grad=None),
    Case("packbits-0d", lambda xp, x: xp.packbits(x), [()], dtypes=("bool",), grad=None),
    Case("unpackbits", lambda xp, x: xp.unpackbits(x), [(3,)], dtypes=("uint8",), gen=lambda r, s, d:
         r.integers(0, 256, s).astype(d), grad=None),
    Case("unpackbits-axis-count", lambda xp, x: xp.unpackbits(x, axis=0, count=-3, bitorder="little"),
         [(2, 3)], dtypes=("uint8",), gen=lambda r, s, d: r.integers(0, 256, s).astype(d), grad=None),
    Case("unpackbits-pad", lambda xp, x: xp.unpackbits(x, axis=1, count=21), [(2, 2)], dtypes=("uint8",),
         gen=lambda r, s, d: r.integers(0, 256, s).astype(d), grad=None),
    Case("bits-roundtrip", lambda xp, x: xp.unpackbits(xp.packbits(x, axis=-1), axis=-1, count=x.shape[-1]),
         [(4, 11)], dtypes=("bool",), grad=None),
    # statistics
    Case("var", lambda xp, x: xp.var(x), [(7,)]),
    Case("var-axis", lambda xp, x: xp.var(x, axis=-1), [(2, 3, 4)]),
    Case("var-axes", lambda xp, x: xp.var(x, axis=(0, 2), ddof=1, keepdims=True), [(2, 3, 4)]),
    Case("var-ddof-large", lambda xp, x: xp.var(x, axis=0, ddof=3), [(3, 2)], grad=None),
    Case("var-0d", lambda xp, x: xp.var(x), [()]),
    Case("std", lambda xp, x: xp.std(x, axis=1), [(3, 5)]),
    Case("std-ddof", lambda xp, x: xp.std(x, ddof=1, keepdims=True), [(2, 3, 2)]),
    Case("average", lambda xp, x: xp.average(x, axis=-1), [(3, 4)]),
    Case("average-weights", lambda xp, x, w: xp.average(x, weights=w), [(3, 4), (3, 4)], gen=positive),
    Case("average-weights-axis", lambda xp, x, w: xp.average(x, axis=1, weights=w), [(2, 3, 2), (3,)],
         gen=positive),
    Case("average-weights-keep", lambda xp, x, w: xp.average(x, axis=(2, 0), weights=w, keepdims=True),
         [(2, 3, 4), (4, 2)], gen=positive),
    Case("average-returned", lambda xp, x, w: xp.average(x, axis=0, weights=w, returned=True),
         [(3, 2), (3,)], gen=positive),
    Case("cumprod", lambda xp, x: xp.cumprod(x), [(7,)]),
    Case("cumprod-axis", lambda xp, x: xp.cumprod(x, axis=-1), [(3, 9)]),
    Case("cumprod-flat", lambda xp, x: xp.cumprod(x), [(2, 3)]),
    Case("cumprod-zeros", lambda xp, x: xp.cumprod(x * (xp.abs(x) > 0.7), axis=0), [(6, 2)], grad="fd"),
    Case("cumprod-bool", lambda xp, x: xp.cumprod(x), [(5,)], dtypes=("bool",), grad=None),
    # matrices
    Case("tril", lambda xp, x: xp.tril(x), [(4, 4)]),
    Case("tril-k", lambda xp, x: xp.tril(x, k=-1), [(3, 5)]),
    Case("tril-3d", lambda xp, x: xp.tril(x, 2), [(2, 3, 4)]),
    Case("tril-1d", lambda xp, x: xp.tril(x), [(3,)], grad="fd"),
    Case("triu", lambda xp, x: xp.triu(x), [(4, 4)]),
    Case("triu-k", lambda xp, x: xp.triu(x, k=1), [(5, 3)]),
    Case("triu-bool", lambda xp, x: xp.triu(x, k=-1), [(3, 3)], dtypes=("bool",), grad=None),
    Case("diag-1d", lambda xp, v: xp.diag(v), [(3,)]),
    Case("diag-1d-k", lambda xp, v: xp.diag(v, k=2), [(3,)]),
    Case("diag-1d-negk", lambda xp, v: xp.diag(v, -1), [(4,)]),
    Case("diag-2d", lambda xp, m: xp.diag(m), [(3, 4)]),
    Case("diag-2d-k", lambda xp, m: xp.diag(m, k=1), [(3, 4)]),
    Case("diag-2d-negk", lambda xp, m: xp.diag(m, k=-2), [(4, 3)]),
    Case("diag-2d-outside", lambda xp, m: xp.diag(m, k=5), [(3, 4)], grad=None),
    Case("trace", lambda xp, m: xp.trace(m), [(3, 4)]),
    Case("trace-offset", lambda xp, m: xp.trace(m, offset=1), [(4, 3)]),
    Case("trace-3d", lambda xp, m: xp.trace(m, offset=-1, axis1=2, axis2=-2), [(2, 3, 4)]),
    Case("trace-dtype", lambda xp, m: xp.trace(m, dtype=np.float64), [(3, 3)]),
    # comparisons
    Case("isclose", lambda xp, a, b: xp.isclose(a, b), [(40,), (40,)], gen=specials, grad=None),
    Case("isclose-near", lambda xp, a: xp.isclose(a, a + 1e-7, rtol=1e-3), [(3, 4)], grad=None),
    Case("isclose-nan", lambda xp, a, b: xp.isclose(a, b, equal_nan=True, atol=0.5), [(40,), (40,)],
         gen=specials, grad=None),
    Case("isclose-scalar", lambda xp, a: xp.isclose(a, 1), [(5,)], gen=positive, grad=None),
    Case("allclose", lambda xp, a: xp.allclose(a, a * (1 + 1e-9)), [(3, 4)], grad=None),
    Case("allclose-false", lambda xp, a, b: xp.allclose(a, b), [(3,), (3,)], grad=None),
    Case("allclose-nan", lambda xp, a: xp.allclose(a, a, equal_nan=True), [(9,)], gen=specials,
         grad=None),
    Case("array_equal", lambda xp, a: xp.array_equal(a, a + 0), [(2, 3)], grad=None),
    Case("array_equal-false", lambda xp, a, b: xp.array_equal(a, b), [(2, 3), (2, 3)], grad=None),
    Case("array_equal-shape", lambda xp, a, b: xp.array_equal(a, b), [(2, 3), (3,)], grad=None),
    Case("array_equal-nan", lambda xp, a: xp.array_equal(a, a, equal_nan=True), [(9,)], gen=specials,
         dtypes=("float64", "float32"), grad=None),
]

# functions with no array input (creation)
EQUIV = [
    Case("array_equiv-bcast", lambda xp, a: xp.array_equiv(a, xp.stack([a, a])), [(3,)], grad=None),
    Case("array_equiv-unequal", lambda xp, a, b: xp.array_equiv(a, b), [(2, 3), (3,)], grad=None),
    Case("array_equiv-shapes", lambda xp, a, b: xp.array_equiv(a, b), [(2, 3), (2,)], grad=None),
]
CASES += EQUIV

CREATION = [
    ("eye", lambda xp: xp.eye(3)),
    ("eye-rect-k", lambda xp: xp.eye(3, 4, k=1)),
    ("eye-negk-int", lambda xp: xp.eye(4, k=-2, dtype=np.int32)),
    ("eye-far-k", lambda xp: xp.eye(2, 3, k=5)),
    ("eye-bool", lambda xp: xp.eye(3, 2, dtype=bool)),
    ("eye-float32", lambda xp: xp.eye(2, dtype=np.float32)),
    ("identity", lambda xp: xp.identity(3)),
    ("identity-int", lambda xp: xp.identity(2, dtype=np.uint8)),
]


# --- helpers -------------------------------------------------------------------------
# --- forward -------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Degrees of freedom <= 0")
@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)


@pytest.mark.parametrize("name,fn", CREATION, ids=[c[0] for c in CREATION])
def test_creation(name, fn, fusion):
    _check_forward(fn(qt), fn(np), fn(np), 0.0, name)


def test_copysign_negative_zero(fusion):
    x = qt.asarray([1.0, 2.0, -3.0, 0.0])
    y = qt.asarray([-0.0, 0.0, 0.0, -1.0])
    got = qt.copysign(x, y).numpy()
    want = np.copysign(x.numpy(), y.numpy())
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_dtypes_follow_nep50(fusion):
    f32 = qt.asarray(np.ones(3, np.float32))
    i32 = qt.asarray(np.ones(3, np.int32))
    assert qt.logaddexp(f32, 1.0).dtype == np.float32      # weak Python scalar
    assert qt.logaddexp(i32, i32).dtype == np.float64
    assert qt.fmax(i32, 2).dtype == np.int32
    assert qt.copysign(i32, -1.0).dtype == np.float64
    assert qt.var(i32).dtype == np.float64 and qt.var(f32).dtype == np.float32
    assert qt.cumprod(i32).dtype == np.int64
    assert qt.trace(qt.asarray(np.ones((2, 2), np.int32))).dtype == np.int64
    assert qt.inner(i32, i32).dtype == np.int32
    assert qt.hstack([f32, 1.0]).dtype == np.hstack([np.ones(3, np.float32), 1.0]).dtype
    assert qt.pad(i32, 1, constant_values=2.7).tolist() == [2, 1, 1, 1, 2]
    assert qt.average(i32).dtype == np.float64


def test_allclose_is_a_0d_bool_tensor(fusion):
    out = qt.allclose(qt.ones(3), qt.ones(3))
    assert isinstance(out, qt.Tensor) and out.shape == () and out.dtype == np.bool_
    assert bool(out) is True
    assert bool(qt.allclose(qt.ones(3), qt.zeros(3))) is False
    assert bool(qt.array_equal(qt.ones(3), qt.ones(2))) is False


def test_numpy_dispatch(rng, fusion):
    """``np.<name>(tensor)`` runs the composite (a qt.Tensor comes back, gradients flow)."""
    x = rng.standard_normal((3, 4))
    t = qt.asarray(x)
    for fn, args in [(np.roll, (1,)), (np.tile, ((2, 1),)), (np.repeat, (2,)), (np.diff, ()),
                     (np.var, ()), (np.std, ()), (np.tril, ()), (np.triu, ()), (np.trace, ()),
                     (np.diag, ()), (np.cumprod, ()), (np.nan_to_num, ()), (np.average, ()),
                     (np.pad, (1,)), (np.atleast_3d, ()), (np.kron, (x,)), (np.inner, (x,)),
                     (np.outer, (x,)), (np.isclose, (x,)), (np.allclose, (x,)),
                     (np.array_equal, (x,)), (np.array_equiv, (x[0],)), (np.unwrap, ())]:
        got = fn(t, *args)
        assert isinstance(got, qt.Tensor), fn.__name__
        np.testing.assert_allclose(got.numpy(), fn(x, *args), rtol=1e-12, err_msg=fn.__name__)
    bits = (x > 0).astype(np.uint8)
    for fn in (np.packbits, np.unpackbits):
        got = fn(qt.asarray(bits), axis=1)
        assert isinstance(got, qt.Tensor), fn.__name__
        np.testing.assert_array_equal(got.numpy(), fn(bits, axis=1))
    for fn in (np.hstack, np.vstack, np.dstack, np.column_stack):
        got = fn([t, t])
        assert isinstance(got, qt.Tensor), fn.__name__
        np.testing.assert_array_equal(got.numpy(), fn([x, x]))
    parts = np.split(t, 2, axis=1)
    assert all(isinstance(p, qt.Tensor) for p in parts)
    np.testing.assert_array_equal(np.array_split(t, 3)[2].numpy(), np.array_split(x, 3)[2])
    gx, gy = np.meshgrid(t[0], t[1])
    np.testing.assert_array_equal(gx.numpy(), np.meshgrid(x[0], x[1])[0])
    a, b = qt.asarray(x[:, :3]), qt.asarray(x[::-1, :3])
    np.testing.assert_allclose(np.cross(a, b).numpy(), np.cross(x[:, :3], x[::-1, :3]), rtol=1e-12)
    np.testing.assert_array_equal(np.eye(3, like=t).numpy(), np.eye(3))
    g = qt.grad(lambda v: qt.sum(np.roll(v, 2) * np.arange(12.0).reshape(3, 4)))(t)
    np.testing.assert_array_equal(g.numpy(), np.roll(np.arange(12.0).reshape(3, 4), -2))


# --- gradients -----------------------------------------------------------------------


@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


def test_gradient_of_traced_constant_values(fusion):
    """``pad``'s constant may be a tensor: the gradient reaches it."""
    x = qt.asarray([1.0, 2.0])
    gx, gc = qt.grad(lambda x, c: qt.sum(qt.pad(x, (2, 1), constant_values=c) * qt.arange(5.0)),
                     argnums=(0, 1))(x, qt.asarray(0.5))
    np.testing.assert_array_equal(gx.numpy(), [2.0, 3.0])
    assert gc.item() == 0.0 + 1.0 + 4.0


# --- chains of composites ------------------------------------------------------------
CHAIN_OPS = {
    "roll": lambda xp, x: xp.roll(x, 2, axis=-1),
    "pad": lambda xp, x: xp.pad(x, ((0, 0), (1, 2)))[:, 1:x.shape[1] + 1],
    "pad-edge": lambda xp, x: xp.pad(x, ((1, 0), (2, 1)), mode="edge")[1:, 1:x.shape[1] + 1],
    "diff": lambda xp, x: xp.diff(x, prepend=0.0),
    "hstack": lambda xp, x: xp.hstack([x[:, 1:], x[:, :1] * 2]),
    "tril": lambda xp, x: xp.tril(x) + x,
    "cumprod": lambda xp, x: xp.cumprod(x, axis=-1),
    "logaddexp": lambda xp, x: xp.logaddexp(x, 0.3),
    "tile": lambda xp, x: xp.tile(x, (1, 2))[:, 1:x.shape[1] + 1],
    "var": lambda xp, x: x - xp.var(x, axis=0, keepdims=True),
}
CHAINS = [(a, b) for a in CHAIN_OPS for b in CHAIN_OPS]


@pytest.mark.parametrize("first,second", CHAINS, ids=[f"{a}-{b}" for a, b in CHAINS])
def test_chained_gradient(first, second, rng, fusion):
    x, w = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))

    def f(xp, t):
        return xp.sum(CHAIN_OPS[second](xp, CHAIN_OPS[first](xp, t)) * w)

    # a sum of terms of both signs: its rounding is relative to the terms, not to the sum
    scale = np.abs(CHAIN_OPS[second](np, CHAIN_OPS[first](np, x)) * w).sum()
    np.testing.assert_allclose(f(qt, qt.asarray(x)).item(), f(np, x), rtol=1e-12, atol=1e-14 * scale)
    got = qt.grad(lambda t: f(qt, t))(qt.asarray(x)).numpy()
    np.testing.assert_allclose(got, jax.grad(lambda t: f(jnp, t))(x), rtol=1e-10, atol=1e-12)


# --- inside qt.jit -------------------------------------------------------------------
def test_inside_jit(rng, fusion):
    @qt.jit
    def step(x, s):
        y = qt.roll(x, 2, axis=-1) + qt.roll(x, s, axis=0)
        y = qt.pad(y, ((1, 0), (2, 1)), mode="reflect") + 1.0
        y = qt.tile(qt.diff(y, axis=1), (1, 2))
        return qt.std(y, axis=0) + qt.trace(qt.tril(y[:, :4])) + qt.logaddexp(y, 0.0).sum()

    def ref(x, s):
        y = np.roll(x, 2, axis=-1) + np.roll(x, s, axis=0)
        y = np.pad(y, ((1, 0), (2, 1)), mode="reflect") + 1.0
        y = np.tile(np.diff(y, axis=1), (1, 2))
        return np.std(y, axis=0) + np.trace(np.tril(y[:, :4])) + np.logaddexp(y, 0.0).sum()

    qt.reset_stats()
    for s in (1, -2, 7):  # the shift is a traced Python int: one trace
        x = rng.standard_normal((4, 5))
        np.testing.assert_allclose(step(qt.asarray(x), s).numpy(), ref(x, s), rtol=1e-12)
    assert qt.stats()["traces"] == 1


def test_jit_grad(rng, fusion):
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((5, 8))

    def f(xp, x):
        y = xp.pad(xp.roll(x, 1, axis=1), ((1, 1), (3, 2)), mode="wrap")
        return xp.sum(xp.repeat(xp.diff(y, axis=1), 1, axis=0) * w)

    g = qt.jit(qt.grad(lambda t: f(qt, t)))(qt.asarray(x))
    np.testing.assert_allclose(g.numpy(), jax.grad(lambda t: f(jnp, t))(x), rtol=1e-12)


# --- errors --------------------------------------------------------------------------
ERRORS = [
    (lambda: qt.packbits(qt.ones(3)), TypeError, "qt.packbits: expected an input array of integer"),
    (lambda: qt.packbits(qt.ones(3, dtype=qt.int8), bitorder="mid"), ValueError, "qt.packbits: 'bitorder'"),
    (lambda: qt.unpackbits(qt.ones(3, dtype=qt.int8)), TypeError, "qt.unpackbits: expected .* unsigned byte"),
    (lambda: qt.unpackbits(qt.ones(2, dtype=qt.uint8), count=-17), ValueError, "-count larger than number"),
    (lambda: qt.unpackbits(qt.ones((2, 2), dtype=qt.uint8), axis=2), np.exceptions.AxisError,
     "qt.unpackbits: axis 2"),
    (lambda: qt.unwrap(qt.asarray(1.0)), np.exceptions.AxisError, "qt.unwrap: axis is out of bounds"),
    (lambda: qt.roll(qt.ones((2, 3)), 1, axis=2), ValueError, "qt.roll: axis 2"),
    (lambda: qt.roll(qt.ones(3), (1, 2), axis=(0, 0, 0)), ValueError, "qt.roll:"),
    (lambda: qt.roll(qt.ones(3), 1.5), TypeError, "qt.roll:"),
    (lambda: qt.tile(qt.ones(3), -1), ValueError, "qt.tile:"),
    (lambda: qt.repeat(qt.ones((2, 3)), [1, 2], axis=1), ValueError, "qt.repeat: 2 repeats"),
    (lambda: qt.repeat(qt.ones(3), -1), ValueError, "qt.repeat:"),
    (lambda: qt.repeat(qt.ones(3), qt.asarray(2)), TypeError, "qt.repeat: repeats"),
    (lambda: qt.repeat(qt.ones(3), 2, axis=-2), ValueError, "qt.repeat: axis -2"),
    (lambda: qt.hstack([qt.ones((2, 3)), qt.ones((3, 3))]), ValueError, r"qt.hstack: .*\(3, 3\)"),
    (lambda: qt.vstack([qt.ones((2, 3)), qt.ones(2)]), ValueError, r"qt.vstack: .*\(1, 2\)"),
    (lambda: qt.dstack([qt.ones((2, 3)), qt.ones((3, 2))]), ValueError, "qt.dstack:"),
    (lambda: qt.column_stack([qt.ones(3), qt.ones(2)]), ValueError, "qt.column_stack:"),
    (lambda: qt.hstack([]), ValueError, "qt.hstack:"),
    (lambda: qt.hstack([qt.ones(2), qt.ones((2, 2))]), ValueError, "qt.hstack:"),
    (lambda: qt.split(qt.ones(7), 2), ValueError, "qt.split: .*length 7"),
    (lambda: qt.split(qt.ones(6), 2, axis=1), ValueError, "qt.split: axis 1"),
    (lambda: qt.array_split(qt.ones(6), 0), ValueError, "qt.array_split:"),
    (lambda: qt.diff(qt.asarray(1.0)), ValueError, r"qt.diff: .*\(\)"),
    (lambda: qt.diff(qt.ones(3), n=-1), ValueError, "qt.diff:"),
    (lambda: qt.diff(qt.ones((2, 3)), axis=2), ValueError, "qt.diff: axis 2"),
    (lambda: qt.diff(qt.ones((2, 3)), prepend=qt.ones((3, 1))), ValueError, "qt.diff:"),
    (lambda: qt.inner(qt.ones(3), qt.ones(4)), ValueError, r"qt.inner: .*\(4,\)"),
    (lambda: qt.cross(qt.ones(3), qt.ones(4)), ValueError, r"qt.cross: .*\(4,\)"),
    (lambda: qt.cross(qt.ones((3, 2)), qt.ones(3), axisa=2), ValueError, "qt.cross: axis 2"),
    (lambda: qt.outer(qt.ones(2), qt.ones(2), out=np.zeros((2, 2))), TypeError, "qt.outer:"),
    (lambda: qt.meshgrid(qt.ones(2), indexing="yx"), ValueError, "qt.meshgrid:"),
    (lambda: qt.pad(qt.ones(3), -1), ValueError, "qt.pad:"),
    (lambda: qt.pad(qt.ones(3), 1.5), TypeError, "qt.pad:"),
    (lambda: qt.pad(qt.ones((2, 2)), ((1, 2, 3),)), ValueError, r"qt.pad: .*\(1, 3\)"),
    (lambda: qt.pad(qt.ones(3), 1, mode="median"), ValueError, "qt.pad: mode 'median'"),
    (lambda: qt.pad(qt.ones(3), 1, mode="edge", constant_values=1), ValueError, "qt.pad:"),
    (lambda: qt.pad(qt.ones((0, 2)), 1, mode="wrap"), ValueError, "qt.pad: .*axis 0"),
    (lambda: qt.pad(qt.ones(3), 1, mode="reflect", reflect_type="odd"), ValueError, "qt.pad:"),
    (lambda: qt.var(qt.ones((2, 3)), axis=-3), ValueError, "qt.var: axis -3"),
    (lambda: qt.std(qt.ones((2, 3)), axis=(0, 0)), ValueError, "qt.std:"),
    (lambda: qt.var(qt.ones(3), ddof=1, correction=1), ValueError, "qt.var:"),
    (lambda: qt.average(qt.ones((2, 3)), weights=qt.ones(3)), TypeError, "qt.average:"),
    (lambda: qt.average(qt.ones((2, 3)), axis=0, weights=qt.ones(3)), ValueError, r"qt.average: .*\(3,\)"),
    (lambda: qt.cumprod(qt.ones((2, 3)), axis=5), ValueError, "qt.cumprod: axis 5"),
    (lambda: qt.tril(qt.asarray(1.0)), ValueError, "qt.tril:"),
    (lambda: qt.triu(qt.ones((2, 2)), k=0.5), TypeError, "qt.triu:"),
    (lambda: qt.eye(-1), ValueError, "qt.eye:"),
    (lambda: qt.diag(qt.ones((2, 2, 2))), ValueError, r"qt.diag: .*\(2, 2, 2\)"),
    (lambda: qt.trace(qt.ones(3)), ValueError, r"qt.trace: .*\(3,\)"),
    (lambda: qt.trace(qt.ones((2, 2)), axis1=1, axis2=1), ValueError, "qt.trace:"),
    (lambda: qt.trace(qt.ones((2, 2)), axis2=2), ValueError, "qt.trace: axis 2"),
    (lambda: qt.logaddexp(qt.ones(2), qt.ones(3)), ValueError, r"qt.(logaddexp|maximum).*\(3,\)"),
    (lambda: qt.fmax(qt.ones(2), qt.ones(3)), ValueError, r"\(3,\)"),
    (lambda: qt.logaddexp(qt.ones(2, dtype=qt.int8), qt.ones(2, dtype=qt.int8)), TypeError,
     "qt.logaddexp:"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_shape_parameters_must_be_concrete():
    """Inside qt.jit a traced shape parameter is refused by name (never evaluated)."""
    @qt.jit
    def f(x, n):
        return qt.tile(x, n)

    with pytest.raises(TypeError, match="qt.tile: reps"):
        f(qt.ones(3), 2)
    assert math.isclose(qt.jit(lambda x, k: qt.tril(x, k).sum())(qt.ones((3, 3)), 1).item(), 8.0)
