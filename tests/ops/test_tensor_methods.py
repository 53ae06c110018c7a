"""``ndarray`` methods of ``qt.Tensor`` that sort, search, select and place (``sort``,
``argsort``, ``partition``, ``argpartition``, ``searchsorted``, ``take``, ``nonzero``, ``put``,
``choose``, ``compress``) and NumPy's positional signatures of ``np.take`` and
``np.searchsorted``: each program runs on a NumPy array and on a tensor (fresh random data),
and every array the program holds at the end — including views taken before an in-place
method — must equal NumPy's; with fusion on and off."""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt


def _program(name):
    """(x, k, xp) -> the values a NumPy program holds after calling the method."""
    def run(x, k, xp):
        view = x[1]                                   # a view taken before the call
        if name == "sort":
            x.sort(axis=k % 2)
            return [x, view]
        if name == "sort-neg-axis":
            x.sort(-1)
            return [x, view]
        if name == "partition":                       # any partition: compare its kth column
            x.partition(1, axis=1)
            return [x[:, 1], view[1]]
        if name == "argpartition":
            idx = x.argpartition(2)
            return [xp.take_along_axis(x, idx, axis=-1)[:, 2]]
        if name == "argsort":
            return [x.argsort(axis=0), x.argsort(axis=None)]
        if name == "searchsorted":
            row = xp.sort(x[0])
            return [row.searchsorted(x[1]), row.searchsorted(x[1], "right"),
                    xp.searchsorted(row, x[2], "right")]
        if name == "take":
            return [x.take([0, k, -1]), x.take([1, 0], 1), xp.take(x, [k % 3, 2], 0),
                    x.take([7, -9], axis=1, mode="wrap"), xp.take(x, [99, -99], None, None, "clip")]
        if name == "nonzero":
            return list((x > 0).nonzero())
        if name == "put":
            x.put([0, k, 5], [9.0, -9.0, 7.0])
            return [x, view]
        if name == "choose":
            which = (x > 0).astype(xp.int64)
            return [which.choose([x, -x]), which.choose([x[0], 2.0 * x[0]], mode="clip")]
        if name == "compress":
            return [x.compress([True, False, True], axis=0), x.compress([False, True], axis=None)]
        raise AssertionError(name)
    return run


NAMES = ["sort", "sort-neg-axis", "partition", "argpartition", "argsort", "searchsorted", "take",
         "nonzero", "put", "choose", "compress"]


@pytest.mark.parametrize("name", NAMES)
def test_method_matches_numpy(name, rng, fusion):
    for _ in range(2):
        data = rng.standard_normal((3, 5))
        k = int(rng.integers(0, 4))
        want = _program(name)(data.copy(), k, np)
        got = _program(name)(qt.asarray(data.copy()), k, qt)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert isinstance(g, qt.Tensor), (name, i)
            w = np.asarray(w)
            assert g.shape == w.shape and g.dtype == w.dtype, (name, i, g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_array_equal(g.numpy(), w, err_msg=f"{name}[{i}]")


def test_in_place_methods_return_none_and_gradients_flow(rng, fusion):
    """``sort``/``partition``/``put`` return None like NumPy's; the gradient of a loss of the
    sorted values reaches the original elements (a permutation of the weights)."""
    x = rng.standard_normal(6)
    w = rng.standard_normal(6)

    def loss(t):
        u = t * 1.0
        assert u.sort() is None
        return qt.sum(u * w)

    g = qt.grad(loss)(qt.asarray(x)).numpy()
    want = np.empty_like(w)
    want[np.argsort(x, kind="stable")] = w
    np.testing.assert_array_equal(g, want)


def test_take_errors():
    with pytest.raises(ValueError, match="qt.Tensor.take: cannot write a result of shape"):
        qt.ones(3).take([0, 1], out=qt.ones(3))   # (out= as ndarray.take's: the result's shape)
    with pytest.raises(ValueError, match="qt.take: mode must be"):
        qt.ones(3).take([0], mode="bounce")
    with pytest.raises(IndexError, match="qt.take: cannot do a non-empty take from an empty axis"):
        qt.ones((2, 0)).take([0], axis=1, mode="wrap")


def test_numpy_take_along_axis_positional_and_flat(rng, fusion):
    """``np.take_along_axis(t, idx, axis)`` on tensors: the axis positional (NumPy's
    signature), and ``axis=None`` on the flattened array; gradients reach ``t``."""
    a = rng.standard_normal((3, 5))
    idx = np.argsort(a, axis=1)
    got = np.take_along_axis(qt.asarray(a), qt.asarray(idx), 1)
    assert isinstance(got, qt.Tensor)
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(a, idx, 1))
    flat = rng.integers(0, a.size, 7)
    np.testing.assert_array_equal(np.take_along_axis(qt.asarray(a), qt.asarray(flat), None).numpy(),
                                  np.take_along_axis(a, flat, None))
    g = qt.grad(lambda t: qt.sum(np.take_along_axis(t, qt.asarray(flat), None)))(qt.asarray(a))
    np.testing.assert_array_equal(g.numpy(), np.bincount(flat, minlength=a.size).reshape(a.shape))
