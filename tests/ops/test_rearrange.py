"""NumPy's array rearrangements (``qtrace/tracer/rearrange.py``): flips, rotations,
``append``/``delete``/``insert``, ``diagonal`` (a read-only view), ``block``, splits,
``ediff1d``, ``resize``, ``trim_zeros`` and the array-like queries ``ndim``/``shape``/
``size``/``isscalar``.

Cases run through the harness of ``composite_cases.py``: forward against NumPy (dtype and
shape exactly) in float64, float32 and int32 (bool where NumPy takes it), gradients against
``jax.grad`` in float64 (finite differences where JAX differs); every test runs with
fusion on and off (``fusion`` fixture).
"""

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

ALL = ("float64", "float32", "int32", "bool")


def _sparse(rng, shape, dtype):
    """Values with runs of zeros at both ends of every axis (for ``trim_zeros``)."""
    x = rng.integers(1, 9, shape).astype(dtype) if np.dtype(dtype).kind != "b" else np.ones(shape, bool)
    x[rng.random(shape) < 0.3] = 0
    for ax in range(x.ndim):
        lo, hi = rng.integers(0, 2), rng.integers(0, 2)
        idx = [slice(None)] * x.ndim
        idx[ax] = slice(0, lo)
        x[tuple(idx)] = 0
        idx[ax] = slice(x.shape[ax] - hi, None)
        x[tuple(idx)] = 0
    return x


def _concat(xp, parts):
    return xp.concatenate([xp.ravel(p) * (i + 1) for i, p in enumerate(parts)])


CASES = [
    # flips and rotations
    Case("fliplr", lambda xp, x: xp.fliplr(x), [(3, 4)], dtypes=ALL),
    Case("fliplr-3d", lambda xp, x: xp.fliplr(x), [(2, 3, 2)], grad="fd"),
    Case("flipud", lambda xp, x: xp.flipud(x), [(3, 4)], dtypes=ALL),
    Case("flipud-1d", lambda xp, x: xp.flipud(x), [(5,)], grad="fd"),
    Case("rot90", lambda xp, x: xp.rot90(x), [(3, 4)], dtypes=ALL),
    Case("rot90-k2", lambda xp, x: xp.rot90(x, 2), [(3, 4)], grad="fd"),
    Case("rot90-k3", lambda xp, x: xp.rot90(x, 3), [(3, 4)], grad="fd"),
    Case("rot90-neg", lambda xp, x: xp.rot90(x, -1, axes=(1, 0)), [(3, 4)], grad="fd"),
    Case("rot90-k4", lambda xp, x: xp.rot90(x, 4), [(2, 3)], grad="fd"),
    Case("rot90-3d", lambda xp, x: xp.rot90(x, 1, axes=(2, 0)), [(2, 3, 4)], grad="fd"),
    Case("rot90-negaxes", lambda xp, x: xp.rot90(x, 5, axes=(-1, -2)), [(2, 3, 4)], grad="fd"),
    Case("rollaxis", lambda xp, x: xp.rollaxis(x, 2), [(2, 3, 4)], dtypes=ALL),
    Case("rollaxis-start", lambda xp, x: xp.rollaxis(x, 0, 3), [(2, 3, 4)], grad="fd"),
    Case("rollaxis-neg", lambda xp, x: xp.rollaxis(x, -1, -2), [(2, 3, 4)], grad="fd"),
    Case("rollaxis-same", lambda xp, x: xp.rollaxis(x, 1, 1), [(2, 3, 4)], grad="fd"),
    Case("rollaxis-start-end", lambda xp, x: xp.rollaxis(x, 1, 3), [(2, 3, 4)], grad="fd"),
    # append
    Case("append-flat", lambda xp, x, v: xp.append(x, v), [(2, 3), (4,)], dtypes=ALL),
    Case("append-axis", lambda xp, x, v: xp.append(x, v, axis=0), [(2, 3), (1, 3)], grad="fd"),
    Case("append-neg-axis", lambda xp, x, v: xp.append(x, v, axis=-1), [(2, 3), (2, 2)], grad="fd"),
    Case("append-0d", lambda xp, x, v: xp.append(x, v), [(), ()], grad="fd"),
    Case("append-scalar", lambda xp, x: xp.append(x, 2.5), [(3,)], grad="fd"),
    # delete
    Case("delete-int", lambda xp, x: xp.delete(x, 1), [(2, 3)], dtypes=ALL),
    Case("delete-neg-axis", lambda xp, x: xp.delete(x, -1, axis=-1), [(2, 3, 4)], grad="fd"),
    Case("delete-list", lambda xp, x: xp.delete(x, np.array([0, 2, 2]), axis=1), [(3, 5)],
         grad="fd"),
    Case("delete-slice", lambda xp, x: xp.delete(x, slice(1, None, 2), axis=0), [(5, 2)],
         grad="fd"),
    Case("delete-step-left", lambda xp, x: xp.delete(x, np.array([1, 3])), [(5,)], grad="fd"),
    Case("delete-mask", lambda xp, x: xp.delete(x, np.array([True, False, True, False]), axis=1),
         [(2, 4)], dtypes=ALL, grad="fd"),
    Case("delete-all", lambda xp, x: xp.delete(x, slice(None), axis=0), [(3, 2)], grad=None),
    Case("delete-none", lambda xp, x: xp.delete(x, np.array([], dtype=int), axis=0), [(3, 2)],
         grad="fd"),
    Case("delete-array", lambda xp, x: xp.delete(x, np.array([-1, 0])), [(3, 2)], grad="fd"),
    # insert
    Case("insert-scalar", lambda xp, x: xp.insert(x, 1, 7), [(4,)], dtypes=ALL, grad="fd"),
    Case("insert-values", lambda xp, x, v: xp.insert(x, 2, v, axis=1), [(3, 4), (3,)], grad="fd"),
    Case("insert-row", lambda xp, x, v: xp.insert(x, 0, v, axis=0), [(3, 4), (4,)], grad="fd"),
    Case("insert-end", lambda xp, x, v: xp.insert(x, 4, v, axis=-1), [(2, 4), (2, 1)], grad="fd"),
    Case("insert-neg", lambda xp, x, v: xp.insert(x, -1, v), [(2, 3), ()], grad="fd"),
    Case("insert-one-list", lambda xp, x, v: xp.insert(x, np.array([1]), v, axis=1), [(3, 2), (3, 1)],
         grad="fd"),
    Case("insert-many", lambda xp, x, v: xp.insert(x, np.array([3, 0, 3, -1]), v), [(5,), (4,)], dtypes=ALL,
         grad="fd"),
    Case("insert-many-axis", lambda xp, x, v: xp.insert(x, np.array([1, 1]), v, axis=1), [(3, 4), (3, 2)],
         grad="fd"),
    Case("insert-many-bcast", lambda xp, x, v: xp.insert(x, np.array((0, 2)), v, axis=0), [(3, 2), (2,)],
         grad="fd"),
    Case("insert-slice", lambda xp, x, v: xp.insert(x, slice(0, 4, 2), v, axis=1), [(2, 4), (2,)],
         grad="fd"),
    Case("insert-mask", lambda xp, x, v: xp.insert(x, np.array([True, False, True]), v), [(3,), ()],
         grad="fd"),
    Case("insert-empty", lambda xp, x: xp.insert(x, [], 1.0), [(2, 2)], grad=None),
    Case("insert-cast", lambda xp, x: xp.insert(x, 1, 2.75), [(3,)], dtypes=("int32", "float32"),
         grad=None),
    # diagonals
    Case("diagonal", lambda xp, x: xp.diagonal(x), [(3, 4)], dtypes=ALL),
    Case("diagonal-offset", lambda xp, x: xp.diagonal(x, 1), [(3, 4)], grad="fd"),
    Case("diagonal-neg-offset", lambda xp, x: xp.diagonal(x, -2), [(4, 3)], grad="fd"),
    Case("diagonal-far", lambda xp, x: xp.diagonal(x, 5), [(3, 4)], grad=None),
    Case("diagonal-3d", lambda xp, x: xp.diagonal(x, 1, 2, 0), [(3, 2, 4)], grad="fd"),
    Case("diagonal-3d-neg", lambda xp, x: xp.diagonal(x, -1, axis1=-1, axis2=1), [(2, 3, 4)], grad="fd"),
    Case("diagonal-4d", lambda xp, x: xp.diagonal(x, 0, 1, 3), [(2, 3, 2, 3)], grad="fd"),
    Case("diagonal-then-op", lambda xp, x: xp.diagonal(x * 2) + 1, [(3, 3)], grad="fd"),
    Case("diagflat", lambda xp, v: xp.diagflat(v), [(2, 2)], dtypes=ALL, grad="fd"),
    Case("diagflat-k", lambda xp, v: xp.diagflat(v, -1), [(3,)], grad="fd"),
    Case("diagflat-0d", lambda xp, v: xp.diagflat(v, 2), [()], grad="fd"),
    # block
    Case("block-2x2", lambda xp, a, b, c, d: xp.block([[a, b], [c, d]]),
         [(2, 2), (2, 3), (1, 2), (1, 3)], dtypes=ALL),
    Case("block-1d", lambda xp, a, b: xp.block([a, b]), [(2,), (3,)], grad="fd"),
    Case("block-promote", lambda xp, a, b: xp.block([[a], [b]]), [(3,), (2, 3)], grad="fd"),
    Case("block-3d", lambda xp, a, b: xp.block([[[a, b]]]), [(2, 1), (2, 2)], grad="fd"),
    Case("block-scalars", lambda xp, a, b: xp.block([[a, b], [b, a]]), [(), ()], grad="fd"),
    Case("block-array", lambda xp, a: xp.block(a), [(2, 3)], grad="fd"),
    Case("block-deep-array", lambda xp, a, b: xp.block([a, b]), [(2, 1, 2), (2, 1, 1)], grad="fd"),
    # splits
    Case("vsplit", lambda xp, x: _concat(xp, xp.vsplit(x, 2)), [(4, 3)]),
    Case("vsplit-idx", lambda xp, x: xp.vsplit(x, [1, 3]), [(4, 3)], dtypes=ALL, grad="fd"),
    Case("hsplit", lambda xp, x: _concat(xp, xp.hsplit(x, 3)), [(2, 6)]),
    Case("hsplit-1d", lambda xp, x: xp.hsplit(x, [2]), [(5,)], dtypes=ALL, grad="fd"),
    Case("dsplit", lambda xp, x: _concat(xp, xp.dsplit(x, [1, 1, 3])), [(2, 1, 4)]),
    # ediff1d
    Case("ediff1d", lambda xp, x: xp.ediff1d(x), [(2, 3)]),
    Case("ediff1d-ends", lambda xp, x, b, e: xp.ediff1d(x, to_end=e, to_begin=b), [(5,), (2,), (1, 2)],
         grad="fd"),
    Case("ediff1d-scalar-ends", lambda xp, x: xp.ediff1d(x, -1, 0), [(4,)], grad="fd"),
    Case("ediff1d-short", lambda xp, x, b: xp.ediff1d(x, to_begin=b), [(1,), ()], grad="fd"),
    Case("ediff1d-empty", lambda xp, x: xp.ediff1d(x), [(0,)], grad=None),
    # resize
    Case("resize-grow", lambda xp, x: xp.resize(x, (3, 5)), [(2, 3)], dtypes=ALL),
    Case("resize-shrink", lambda xp, x: xp.resize(x, 4), [(2, 3)], grad="fd"),
    Case("resize-same", lambda xp, x: xp.resize(x, (3, 2)), [(2, 3)], grad="fd"),
    Case("resize-0d", lambda xp, x: xp.resize(x, (2, 2)), [()], grad="fd"),
    Case("resize-empty", lambda xp, x: xp.resize(x, (2, 3)), [(0,)], grad=None),
    Case("resize-to-empty", lambda xp, x: xp.resize(x, (0, 3)), [(4,)], grad=None),
    # trim_zeros (the values decide the shape: evaluated)
    Case("trim_zeros", lambda xp, x: xp.trim_zeros(x), [(9,)], gen=_sparse, dtypes=ALL),
    Case("trim_zeros-f", lambda xp, x: xp.trim_zeros(x, "f"), [(9,)], gen=_sparse, grad=None),
    Case("trim_zeros-b", lambda xp, x: xp.trim_zeros(x, trim="B"), [(9,)], gen=_sparse, grad=None),
    Case("trim_zeros-2d", lambda xp, x: xp.trim_zeros(x), [(5, 6)], gen=_sparse, grad=None),
    Case("trim_zeros-axis", lambda xp, x: xp.trim_zeros(x, axis=-1), [(4, 6)], gen=_sparse, grad=None),
    Case("trim_zeros-all-zero", lambda xp, x: xp.trim_zeros(x * 0), [(4,)], grad=None),
]



@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)


@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


def test_trim_zeros_gradient(rng, fusion):
    """The gradient of the kept region (the harness's finite differences would move the
    zeros that decide the shape)."""
    x = _sparse(rng, (5, 6), "float64")
    x[2, 3] = 1.0
    at = np.argwhere(x)
    for trim, axis in (("fb", None), ("fb", 1), ("b", 0)):
        axes = (0, 1) if axis is None else (axis,)
        key = tuple(slice(at[:, a].min() if a in axes and "f" in trim else None,
                          at[:, a].max() + 1 if a in axes and "b" in trim else None) for a in range(2))
        np.testing.assert_array_equal(x[key], np.trim_zeros(x, trim, axis))
        w = rng.standard_normal(x[key].shape)
        g = qt.grad(lambda t, trim=trim, axis=axis, w=w: qt.sum(qt.trim_zeros(t, trim, axis) * w))
        want = np.zeros_like(x)
        want[key] = w
        np.testing.assert_array_equal(g(qt.asarray(x)).numpy(), want)


def test_insert_gradient_reaches_values(rng, fusion):
    x, v = rng.standard_normal((3, 4)), rng.standard_normal((3, 2))
    w = rng.standard_normal((3, 6))
    gx, gv = qt.grad(lambda a, b: qt.sum(qt.insert(a, [0, 3], b, axis=1) * w), argnums=(0, 1))(
        qt.asarray(x), qt.asarray(v))
    np.testing.assert_array_equal(gx.numpy(), np.delete(w, [0, 4], axis=1))
    np.testing.assert_array_equal(gv.numpy(), w[:, [0, 4]])


def test_numpy_dispatch(rng, fusion):
    """``np.<name>(tensor)`` runs qtrace's function: a qt.Tensor equal to NumPy's result."""
    x = rng.standard_normal((4, 6))
    t = qt.asarray(x)
    for fn, args in [(np.fliplr, ()), (np.flipud, ()), (np.rot90, (3,)), (np.append, (x,)),
                     (np.delete, ([1, 2], 1)), (np.insert, (2, 5.0)), (np.rollaxis, (1,)),
                     (np.diagonal, (1,)), (np.diagflat, ()), (np.ediff1d, ()),
                     (np.resize, ((3, 9),)), (np.trim_zeros, ())]:
        got = fn(t, *args)
        assert isinstance(got, qt.Tensor), fn.__name__
        np.testing.assert_array_equal(got.numpy(), fn(x, *args), err_msg=fn.__name__)
    got = np.block([[t, t], [t, t]])
    assert isinstance(got, qt.Tensor)
    np.testing.assert_array_equal(got.numpy(), np.block([[x, x], [x, x]]))
    for fn in (np.vsplit, np.hsplit):
        parts = fn(t, 2)
        assert all(isinstance(p, qt.Tensor) for p in parts)
        np.testing.assert_array_equal(parts[1].numpy(), fn(x, 2)[1])
    parts = np.dsplit(qt.reshape(t, (2, 2, 6)), 3)
    np.testing.assert_array_equal(parts[2].numpy(), np.dsplit(x.reshape(2, 2, 6), 3)[2])
    assert np.ndim(t) == 2 and np.shape(t) == (4, 6) and np.size(t) == 24 and np.size(t, 1) == 6


def test_array_queries():
    t = qt.zeros((2, 3, 4))
    assert qt.ndim(t) == 3 and type(qt.ndim(t)) is int
    assert qt.shape(t) == (2, 3, 4) and all(type(d) is int for d in qt.shape(t))
    assert qt.size(t) == 24 and qt.size(t, -1) == 4 and qt.size(t, (0, 2)) == 8
    assert type(qt.size(t)) is int
    for a in ([[1, 2, 3]], 5.0, np.ones((2, 0)), [], ()):
        assert qt.ndim(a) == np.ndim(a) and qt.shape(a) == np.shape(a) and qt.size(a) == np.size(a)
    assert qt.size([[1, 2, 3]], 1) == 3
    pair = [qt.zeros(3), qt.ones(3)]   # a list of tensors: its shape, nothing evaluated
    assert qt.shape(pair) == (2, 3) and qt.ndim(pair) == 2 and qt.size(pair, 0) == 2
    for v in (3, 2.5, 1j, np.float32(1), "s", b"b", True):
        assert qt.isscalar(v) is True
    for v in (qt.asarray(3.0), qt.zeros(2), np.array(3.0), [1], None):
        assert qt.isscalar(v) is False
    with pytest.raises(np.exceptions.AxisError, match="qt.size: axis 3"):
        qt.size(t, 3)


# --- diagonal: a read-only view ------------------------------------------------------
def test_diagonal_follows_writes_to_its_base(rng, fusion):
    x = rng.standard_normal((3, 4, 5))
    for base in (qt.asarray(x.copy()), qt.asarray(x) * 1.0):   # evaluated and pending bases
        d = qt.diagonal(base, 1, 2, 0)
        expect = x.copy()
        base[1, :, :] = 7.0
        expect[1] = 7.0
        np.testing.assert_array_equal(d.numpy(), np.diagonal(expect, 1, 2, 0))
        base += 1.0
        np.testing.assert_array_equal(d.numpy(), np.diagonal(expect + 1.0, 1, 2, 0))


def test_diagonal_is_read_only(fusion):
    d = qt.diagonal(qt.ones((3, 3)))
    with pytest.raises(ValueError, match="read-only"):
        d[0] = 2.0
    with pytest.raises(ValueError, match="read-only"):
        d += 1.0
    with pytest.raises(ValueError, match="read-only"):
        np.diagonal(qt.ones((2, 2)))[...] = 0.0
    c = qt.copy(d)   # a copy is writable
    c[0] = 5.0
    assert c.tolist() == [5.0, 1.0, 1.0]


def test_views_of_a_diagonal(rng, fusion):
    x = rng.standard_normal((4, 5, 3))
    t = qt.asarray(x)
    d = qt.diagonal(t, -1, 0, 1)                    # (3, 3): read-only
    np.testing.assert_array_equal(d[1:, ::-1].numpy(), np.diagonal(x, -1, 0, 1)[1:, ::-1])
    np.testing.assert_array_equal(qt.ravel(d).numpy(), np.diagonal(x, -1, 0, 1).ravel())
    np.testing.assert_array_equal(d.T.reshape(-1).numpy(), np.diagonal(x, -1, 0, 1).T.reshape(-1))
    with pytest.raises(ValueError, match="read-only"):
        d[1:][0, 0] = 1.0


# --- inside qt.jit -------------------------------------------------------------------
def test_inside_jit(rng, fusion):
    @qt.jit
    def step(x, v):
        y = qt.rot90(qt.fliplr(x), 1) + qt.flipud(qt.rollaxis(x[None], 2, 1)[0].T)
        y = qt.insert(y, [0, 2], v, axis=0)
        y = qt.delete(y, 1, axis=1)
        top, bottom = qt.vsplit(y, [3])
        blocks = qt.block([[top, top], [bottom, bottom]])
        return qt.append(qt.diagonal(blocks, 1), qt.ediff1d(qt.resize(x, (7,)), to_begin=0.0))

    def ref(x, v):
        y = np.rot90(np.fliplr(x), 1) + np.flipud(np.rollaxis(x[None], 2, 1)[0].T)
        y = np.insert(y, [0, 2], v, axis=0)
        y = np.delete(y, 1, axis=1)
        top, bottom = np.vsplit(y, [3])
        blocks = np.block([[top, top], [bottom, bottom]])
        return np.append(np.diagonal(blocks, 1), np.ediff1d(np.resize(x, (7,)), to_begin=0.0))

    qt.reset_stats()
    for _ in range(2):
        x, v = rng.standard_normal((3, 3)), rng.standard_normal((2, 3))
        np.testing.assert_allclose(step(qt.asarray(x), qt.asarray(v)).numpy(), ref(x, v), rtol=1e-12)
    assert qt.stats()["traces"] == 1


def test_jit_grad(rng, fusion):
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4,))

    def f(t):
        return qt.sum(qt.diagonal(qt.insert(qt.rot90(t), 1, 2.0 * t[0, :], axis=1), -1) * w[:3])

    got = qt.jit(qt.grad(f))(qt.asarray(x)).numpy()
    want = qt.grad(f)(qt.asarray(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)


# --- tensors as obj -----------------------------------------------------------------
def test_insert_with_an_integer_tensor_obj_stays_lazy(rng, fusion):
    """The result's shape depends only on the index tensor's shape: traced, also in qt.jit."""
    x = rng.standard_normal((3, 4))
    for obj, v, axis in [(np.array([3, 0, 3, -1]), rng.standard_normal(4), None),
                         (np.array([1, 1]), rng.standard_normal((3, 2)), 1),
                         (np.array(2), rng.standard_normal(3), 1),
                         (np.array([4], np.int32), rng.standard_normal((3, 1)), 1),
                         (np.array(-1), 5.0, 0), (np.array([], int), 1.0, 0)]:
        want = np.insert(x, obj, v, axis=axis)
        got = qt.insert(qt.asarray(x), qt.asarray(obj), v, axis=axis)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)
    f = qt.jit(lambda a, i, v: qt.insert(a, i, v, axis=1))
    for idx in ([0, 4], [2, 1]):
        v = rng.standard_normal((3, 2))
        np.testing.assert_array_equal(f(qt.asarray(x), qt.asarray(np.array(idx)), qt.asarray(v)).numpy(),
                                      np.insert(x, idx, v, axis=1))
    w = rng.standard_normal((3, 6))
    idx = qt.asarray(np.array([2, 0]))
    gx, gv = qt.grad(lambda a, v: qt.sum(qt.insert(a, idx, v, axis=1) * w), argnums=(0, 1))(
        qt.asarray(x), qt.asarray(np.ones((3, 2))))
    np.testing.assert_array_equal(gx.numpy(), np.delete(w, [3, 0], axis=1))
    np.testing.assert_array_equal(gv.numpy(), w[:, [3, 0]])


def test_shape_deciding_tensors_are_evaluated(rng, fusion):
    """delete's obj (its count of distinct indices), a boolean mask of insert, and
    trim_zeros' values decide the shape: evaluated outside qt.jit, TracerError inside."""
    x = rng.standard_normal((3, 5))
    idx = qt.asarray(np.array([4, 0, 4]))
    np.testing.assert_array_equal(qt.delete(qt.asarray(x), idx, axis=1).numpy(),
                                  np.delete(x, [4, 0, 4], axis=1))
    mask = qt.asarray(x[0] > 0)
    np.testing.assert_array_equal(qt.delete(qt.asarray(x), mask, axis=1).numpy(),
                                  np.delete(x, x[0] > 0, axis=1))
    np.testing.assert_array_equal(qt.insert(qt.asarray(x), mask, 1.5, axis=1).numpy(),
                                  np.insert(x, x[0] > 0, 1.5, axis=1))
    with pytest.raises(qt.TracerError, match="qt.delete: obj"):
        qt.jit(lambda a, i: qt.delete(a, i))(qt.asarray(x), idx)
    with pytest.raises(qt.TracerError, match="qt.insert: obj"):
        qt.jit(lambda a, m: qt.insert(a, m, 0.0, axis=1))(qt.asarray(x), mask)
    with pytest.raises(qt.TracerError, match="qt.trim_zeros"):
        qt.jit(qt.trim_zeros)(qt.asarray(x))
    # a static obj is fine inside jit
    got = qt.jit(lambda a: qt.delete(a, [0, 2], axis=0))(qt.asarray(x)).numpy()
    np.testing.assert_array_equal(got, np.delete(x, [0, 2], axis=0))


def test_results_are_new_arrays(fusion):
    """As in NumPy, delete/insert/append/resize/block return new arrays (writing to them
    leaves the input alone); flips, rotations, splits and trim_zeros are views."""
    t = qt.asarray(np.arange(12.0).reshape(3, 4))
    for out in (qt.delete(t, 0, axis=0), qt.delete(t, [], axis=1), qt.insert(t, [], 1.0, axis=0),
                qt.append(t, []), qt.resize(t, (3, 4)), qt.block(t), qt.block([[t]])):
        out[...] = -1.0
    assert t.numpy().min() == 0.0
    for view in (qt.fliplr(t), qt.rot90(t, 0), qt.hsplit(t, 2)[0], qt.trim_zeros(t, axis=1)):
        view[...] = view + 100.0
    assert t.numpy().min() >= 100.0


# --- errors --------------------------------------------------------------------------
ERRORS = [
    (lambda: qt.fliplr(qt.ones(3)), ValueError, r"qt.fliplr: .*\(3,\)"),
    (lambda: qt.flipud(qt.asarray(1.0)), ValueError, r"qt.flipud: .*\(\)"),
    (lambda: qt.rot90(qt.ones((2, 2)), axes=(0, 1, 2)), ValueError, "qt.rot90: len"),
    (lambda: qt.rot90(qt.ones((2, 2)), axes=(1, 1)), ValueError, "qt.rot90: axes must be different"),
    (lambda: qt.rot90(qt.ones((2, 2)), axes=(0, -2)), ValueError, "qt.rot90: axes must be different"),
    (lambda: qt.rot90(qt.ones((2, 2)), axes=(0, 3)), ValueError, "qt.rot90: axes=.* out of range"),
    (lambda: qt.rot90(qt.ones((2, 2)), k=1.5), TypeError, "qt.rot90: k"),
    (lambda: qt.rollaxis(qt.ones((2, 3)), 2), np.exceptions.AxisError, "qt.rollaxis: axis 2"),
    (lambda: qt.rollaxis(qt.ones((2, 3)), 0, 3), np.exceptions.AxisError, "qt.rollaxis: 'start'"),
    (lambda: qt.rollaxis(qt.ones((2, 3)), 0, -3), np.exceptions.AxisError, "qt.rollaxis: 'start'"),
    (lambda: qt.append(qt.ones((2, 3)), qt.ones(3), axis=0), ValueError, r"qt.append: .*\(3,\)"),
    (lambda: qt.append(qt.ones((2, 3)), qt.ones((2, 2)), axis=0), ValueError, "qt.concatenate:"),
    (lambda: qt.append(qt.ones((2, 3)), qt.ones((2, 3)), axis=2), np.exceptions.AxisError,
     "qt.append: axis 2"),
    (lambda: qt.append(qt.asarray(1.0), 2.0, axis=0), ValueError, "qt.append: zero-dimensional"),
    (lambda: qt.delete(qt.ones(3), 3), IndexError, "qt.delete: index 3 is out of bounds for axis 0"),
    (lambda: qt.delete(qt.ones((2, 3)), [0, -4], axis=1), IndexError, "qt.delete: index -4"),
    (lambda: qt.delete(qt.ones(3), [True, False]), ValueError, "qt.delete: boolean array"),
    (lambda: qt.delete(qt.ones(3), [0.5]), IndexError, "qt.delete: obj must be integers"),
    (lambda: qt.delete(qt.ones(3), 0, axis=1), np.exceptions.AxisError, "qt.delete: axis 1"),
    (lambda: qt.insert(qt.ones(3), 1.5, 0.0), TypeError, "qt.insert: obj must be an integer"),
    (lambda: qt.insert(qt.ones(3), 4, 0.0), IndexError, "qt.insert: index 4 is out of bounds"),
    (lambda: qt.insert(qt.ones(3), [0, -4], 0.0), IndexError, "qt.insert: index -4"),
    (lambda: qt.insert(qt.ones(3), [[0]], 0.0), ValueError, "qt.insert: index array"),
    (lambda: qt.insert(qt.ones(3), np.ones((1, 1), bool), 0.0), ValueError, "qt.insert: boolean"),
    (lambda: qt.insert(qt.ones((3, 4)), 1, qt.ones(4), axis=1), ValueError,
     r"qt.insert: could not broadcast .*\(4, 1\)"),
    (lambda: qt.insert(qt.ones(3), [1, 2], qt.ones(3)), ValueError, "qt.insert: could not broadcast"),
    (lambda: qt.diagonal(qt.ones(3)), ValueError, r"qt.diagonal: .*\(3,\)"),
    (lambda: qt.diagonal(qt.ones((2, 2)), axis1=1, axis2=-1), ValueError, "qt.diagonal: axis1 and axis2"),
    (lambda: qt.diagonal(qt.ones((2, 2)), axis2=2), np.exceptions.AxisError, "qt.diagonal: axis 2"),
    (lambda: qt.diagonal(qt.ones((2, 2)), offset=qt.asarray(1)), TypeError, "qt.diagonal: offset"),
    (lambda: qt.diagflat(qt.ones(2), k=1.0), TypeError, "qt.diagflat: k"),
    (lambda: qt.block([qt.ones(2), [qt.ones(2)]]), ValueError, r"qt.block: List depths .*arrays\[1\]\[0\]"),
    (lambda: qt.block((qt.ones(2), qt.ones(2))), TypeError, "qt.block: arrays is a tuple"),
    (lambda: qt.block([[qt.ones(2)], (qt.ones(2),)]), TypeError, r"qt.block: arrays\[1\] is a tuple"),
    (lambda: qt.block([[qt.ones(2)], []]), ValueError, r"qt.block: List at arrays\[1\] cannot be empty"),
    (lambda: qt.block([]), ValueError, "qt.block: List at arrays cannot be empty"),
    (lambda: qt.block([[qt.ones((2, 2)), qt.ones((3, 1))]]), ValueError,
     r"qt.block: .*concatenation axis 1.*\(3, 1\)"),
    (lambda: qt.vsplit(qt.ones(4), 2), ValueError, r"qt.vsplit: .*2 or more.*\(4,\)"),
    (lambda: qt.vsplit(qt.ones((3, 2)), 2), ValueError, "qt.split: array split does not result"),
    (lambda: qt.hsplit(qt.asarray(1.0), 1), ValueError, "qt.hsplit: .*1 or more"),
    (lambda: qt.dsplit(qt.ones((2, 2)), 2), ValueError, r"qt.dsplit: .*3 or more.*\(2, 2\)"),
    (lambda: qt.ediff1d(qt.ones(3, dtype=qt.int32), to_begin=0.5), TypeError,
     "qt.ediff1d: dtype of `to_begin`"),
    (lambda: qt.ediff1d(qt.ones(3), to_end=1j), TypeError, "qt.ediff1d: dtype of `to_end`"),
    (lambda: qt.ediff1d(qt.asarray([True, False])), TypeError, "qt.ediff1d: numpy boolean subtract"),
    (lambda: qt.resize(qt.ones(3), (2, -1)), ValueError, "qt.resize: all elements of `new_shape`"),
    (lambda: qt.resize(qt.ones(3), qt.asarray(2)), TypeError, "qt.resize: new_shape"),
    (lambda: qt.trim_zeros(qt.ones(3), "x"), ValueError, "qt.trim_zeros: unexpected character"),
    (lambda: qt.trim_zeros(qt.ones((2, 2)), axis=2), np.exceptions.AxisError, "qt.trim_zeros: axis 2"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()



@pytest.mark.parametrize("dtype,value", [("int8", 300), ("float64", 1 + 2j), ("int64", np.array([1.7])),
                                          ("int32", 2.5)])
def test_inserted_values_convert_as_numpy_converts_them(dtype, value, fusion):
    """``insert``'s values take the array's dtype as NumPy's ``array(values, dtype)`` does:
    OverflowError or TypeError for Python numbers that do not fit, truncation otherwise."""
    base = np.arange(3).astype(dtype)
    try:
        want = np.insert(base, 1, value)
    except Exception as err:  # noqa: BLE001 - NumPy's exception is the expectation
        with pytest.raises(type(err), match="qt.insert: "):
            qt.insert(qt.asarray(base), 1, value)
        return
    got = qt.insert(qt.asarray(base), 1, value)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)
