"""Selection, placement and set routines (``qtrace/tracer/selecting.py``).

Each case is one callable ``fn(xp, *arrays)`` run with ``xp`` = ``qt``, ``np`` and
``jax.numpy`` (the harness: ``composite_cases.py``): results against NumPy (dtype and
shape exactly), gradients against ``jax.grad`` or central finite differences. The
in-place functions (``copyto``, ``putmask``, ``place``, ``put``, ``put_along_axis``,
``fill_diagonal``) run on a copy in the cases, and on views in the aliasing tests: the
same program on ndarrays and on tensors leaves the base and every view equal. Every test
runs with fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

import numpy as np
import pytest
from composite_cases import (
    Case,
    _check_forward,
    forward_params,
    gradient_params,
    run_forward,
    run_gradient,
)

import qtrace as qt
from qtrace.tracer import protocols, selecting

I4 = np.array([[0, 1, 2, 1], [2, 0, 0, 1], [1, 1, 2, 0]])   # choose indices of 3 choices


def _ints(xp, x):
    """Integer data derived from ``x`` (a tensor for qt: the lazy paths)."""
    return xp.floor(x * 2).astype(np.int64) if x.dtype.kind == "f" else x.astype(np.int64)


def _in_place(fn):
    """``fn(xp, y, *args)`` writing into a copy ``y`` of the first array; returns ``y``."""
    def case(xp, x, *args):
        y = x.copy()
        fn(xp, y, *args)
        return y
    return case


def _on_view(fn):
    """``fn`` writing into ``y[1:]`` of a copy ``y``; returns ``y``."""
    def case(xp, x, *args):
        y = x.copy()
        fn(xp, y[1:], *args)
        return y
    return case


CASES = [
    # select
    Case("select", lambda xp, x, y: xp.select([x > 0, y > 0], [x, y * 2]), [(3, 4), (3, 4)]),
    Case("select-default", lambda xp, x, y: xp.select([x > 1, x < -1], [x, y], default=0.5),
         [(3, 4), (3, 4)]),
    Case("select-bcast", lambda xp, x, y, d: xp.select([x > 0, y > 0], [x, y], default=d),
         [(3, 1), (4,), ()]),
    Case("select-one", lambda xp, x: xp.select([x > 0], [x * 3]), [(5,)]),
    Case("select-bool", lambda xp, x, y: xp.select([x, y], [y, x], default=True), [(4,), (4,)],
         dtypes=("bool",), grad=None),
    # piecewise
    Case("piecewise", lambda xp, x: xp.piecewise(x, [x < 0, x > 1], [lambda v: v * v, lambda v: -v]),
         [(3, 4)]),
    Case("piecewise-otherwise", lambda xp, x: xp.piecewise(
        x, [x < 0, x > 1], [lambda v: v * 3, 2, lambda v: v + 1]), [(7,)]),
    Case("piecewise-single", lambda xp, x: xp.piecewise(x, x > 0, [lambda v: v * 2.5, -1]), [(6,)],
         grad="fd"),
    Case("piecewise-args", lambda xp, x: xp.piecewise(x, [x > 0], [lambda v, k: v * k, 0.5], 3),
         [(2, 3)]),
    Case("piecewise-sqrt", lambda xp, x: xp.piecewise(x, [x > 0], [xp.sqrt, 0.0]), [(8,)],
         dtypes=("float64", "float32")),
    Case("piecewise-0d", lambda xp, x: xp.piecewise(x, [x > 0], [lambda v: v * 2, -3.0]), [()]),
    # choose
    Case("choose", lambda xp, x, y: xp.choose(I4, [x, y, x * y]), [(3, 4), (3, 4)]),
    Case("choose-bcast", lambda xp, x, y: xp.choose(I4, [x, y, 1.5]), [(3, 1), (4,)]),
    Case("choose-tensor-index", lambda xp, x, y: xp.choose((x > 0) * 1, [x, y]), [(2, 5), (2, 5)],
         grad_args=(1,)),
    Case("choose-wrap", lambda xp, x, y: xp.choose(I4 * 3 - 4, [x, y], mode="wrap"), [(3, 4), (3, 4)]),
    Case("choose-clip", lambda xp, x, y: xp.choose(I4 * 2 - 1, [x, y], mode="clip"), [(3, 4), (4,)]),
    Case("choose-0d", lambda xp, x, y: xp.choose(1, [x, y]), [(), ()]),
    # compress / extract
    Case("compress-axis", lambda xp, x: xp.compress(np.array([True, False, True]), x, axis=1), [(2, 3)]),
    Case("compress-flat", lambda xp, x: xp.compress(np.array([0, 1, 1, 0, 1]), x), [(2, 3)]),
    Case("compress-short", lambda xp, x: xp.compress(np.array([False, True]), x, axis=-2), [(4, 2)]),
    Case("compress-tensor", lambda xp, x: xp.compress(x[:, 0] > 0, x, axis=0), [(5, 2)], grad="fd"),
    Case("compress-none", lambda xp, x: xp.compress([False, False], x, axis=0), [(2, 2)], grad=None),
    Case("extract", lambda xp, x: xp.extract(x > 0, x), [(3, 4)], grad="fd"),
    Case("extract-other", lambda xp, x, y: xp.extract(y > 0, x * 2), [(2, 3), (2, 3)], grad="fd",
         grad_args=(0,)),
    # argwhere / flatnonzero
    Case("argwhere", lambda xp, x: xp.argwhere(x > 0), [(3, 4)], grad=None),
    Case("argwhere-3d", lambda xp, x: xp.argwhere(x), [(2, 2, 3)], dtypes=("int32", "bool"), grad=None),
    Case("argwhere-0d", lambda xp, x: xp.argwhere(x), [()], dtypes=("float64", "bool"), grad=None),
    Case("flatnonzero", lambda xp, x: xp.flatnonzero(x), [(3, 4)], dtypes=("int32", "bool"), grad=None),
    # unravel_index / ravel_multi_index (tensor indices: the kernel-checked path)
    Case("unravel_index", lambda xp, x: xp.unravel_index(_ints(xp, x) % 12, (3, 4)), [(2, 3)],
         grad=None),
    Case("unravel_index-F", lambda xp, x: xp.unravel_index(_ints(xp, x) % 24, (2, 3, 4), order="F"),
         [(5,)], grad=None),
    Case("ravel_multi_index", lambda xp, x, y: xp.ravel_multi_index(
        (_ints(xp, x) % 3, _ints(xp, y) % 4), (3, 4)), [(2, 3), (2, 3)], grad=None),
    Case("ravel_multi_index-modes", lambda xp, x, y: xp.ravel_multi_index(
        (_ints(xp, x), _ints(xp, y)), (3, 5), mode=("wrap", "clip"), order="F"), [(4,), (2, 1)],
         grad=None),
    # copyto
    Case("copyto", _in_place(lambda xp, y, v: xp.copyto(y, v)), [(3, 4), (4,)], grad="fd"),
    Case("copyto-where", _in_place(lambda xp, y, v: xp.copyto(y, v, where=v > 0)), [(2, 3), (2, 3)],
         grad="fd"),
    Case("copyto-view", _on_view(lambda xp, y, v: xp.copyto(y, v * 2, where=[True, False, True])),
         [(3, 3), (3,)], grad="fd"),
    Case("copyto-scalar", _in_place(lambda xp, y: xp.copyto(y, 7)), [(2, 2)], grad="fd"),
    Case("copyto-leading-ones", _in_place(lambda xp, y, v: xp.copyto(y, v)), [(3,), (1, 1, 3)],
         grad="fd"),
    # putmask / place
    Case("putmask", _in_place(lambda xp, y, v: xp.putmask(y, v > 0, v)), [(2, 3), (2, 3)], grad="fd"),
    Case("putmask-cycle", _in_place(lambda xp, y, m, v: xp.putmask(y, m > 0, v)), [(7,), (7,), (3,)],
         grad="fd", grad_args=(0, 2)),
    Case("putmask-view", _on_view(lambda xp, y, v: xp.putmask(y, v > 0, v[::-1])), [(4, 2), (3, 2)],
         grad="fd"),
    Case("place", _in_place(lambda xp, y, m, v: xp.place(y, m > 0, v)), [(3, 4), (3, 4), (5,)],
         grad="fd", grad_args=(0, 2)),
    Case("place-view", _on_view(lambda xp, y, m: xp.place(y, m > 0, [1, 2])), [(3, 2), (2, 2)],
         grad="fd", grad_args=(0,)),
    # put / put_along_axis / fill_diagonal
    Case("put", _in_place(lambda xp, y, v: xp.put(y, [0, -1, 5], v)), [(2, 4), (3,)], grad="fd"),
    Case("put-cycle", _in_place(lambda xp, y, v: xp.put(y, np.array([[1, 2], [3, 6]]), v)), [(7,), (3,)],
         grad="fd"),
    Case("put-wrap", _in_place(lambda xp, y, v: xp.put(y, [9, -6, 0], v, mode="wrap")), [(2, 2), (3,)],
         grad="fd"),
    Case("put-repeated", _in_place(lambda xp, y, v: xp.put(y, [1, 3, -3, 9], v, mode="wrap")),
         [(4,), (4,)], grad="fd"),
    Case("put-clip", _in_place(lambda xp, y, v: xp.put(y, [9, -7], v, mode="clip")), [(5,), (2,)],
         grad="fd"),
    Case("put-tensor-index", _in_place(lambda xp, y, v: xp.put(y, _ints(xp, v) % 5 - 2, 1)),
         [(5,), (3,)], grad=None),
    Case("put_along_axis", _in_place(lambda xp, y, v: xp.put_along_axis(
        y, np.array([[1], [3], [-1]]), v, axis=1)), [(3, 4), (3, 1)], grad="fd"),
    Case("put_along_axis-0", _in_place(lambda xp, y, v: xp.put_along_axis(
        y, np.array([[2, 0, 1]]), v, axis=0)), [(3, 3), (1, 3)], grad="fd"),
    Case("put_along_axis-none", _in_place(lambda xp, y, v: xp.put_along_axis(
        y, np.array([0, 5]), v, axis=None)), [(2, 3), (2,)], grad="fd"),
    Case("put_along_axis-tensor", _in_place(lambda xp, y, v: xp.put_along_axis(
        y, _ints(xp, v) % 4, 2, axis=-1)), [(2, 4), (2, 2)], grad=None),
    Case("fill_diagonal", _in_place(lambda xp, y, v: xp.fill_diagonal(y, v)), [(3, 3), (2,)],
         grad="fd"),
    Case("fill_diagonal-tall", _in_place(lambda xp, y: xp.fill_diagonal(y, 5)), [(5, 2)], grad="fd"),
    Case("fill_diagonal-wrap", _in_place(lambda xp, y, v: xp.fill_diagonal(y, v, wrap=True)),
         [(7, 2), (3,)], grad="fd"),
    Case("fill_diagonal-wide", _in_place(lambda xp, y, v: xp.fill_diagonal(y, v)), [(2, 5), ()],
         grad="fd"),
    Case("fill_diagonal-3d", _in_place(lambda xp, y, v: xp.fill_diagonal(y, v)), [(2, 2, 2), (2,)],
         grad="fd"),
    # sets
    Case("unique", lambda xp, x: xp.unique(_ints(xp, x)), [(3, 4)], grad=None),
    Case("unique-all", lambda xp, x: xp.unique(_ints(xp, x), return_index=True, return_inverse=True,
                                               return_counts=True), [(3, 4)], grad=None),
    Case("unique-axis", lambda xp, x: xp.unique(_ints(xp, x) % 2, return_index=True,
                                                return_inverse=True, return_counts=True, axis=0),
         [(6, 2)], grad=None),
    Case("unique-values", lambda xp, x: xp.unique(x), [(5,)], dtypes=("float64", "float32", "bool"),
         grad=None),
    Case("intersect1d", lambda xp, x, y: xp.intersect1d(_ints(xp, x), _ints(xp, y)), [(9,), (3, 3)],
         grad=None),
    Case("intersect1d-indices", lambda xp, x, y: xp.intersect1d(
        _ints(xp, x), _ints(xp, y), return_indices=True), [(9,), (8,)], grad=None),
    Case("union1d", lambda xp, x, y: xp.union1d(_ints(xp, x), _ints(xp, y)), [(6,), (2, 3)], grad=None),
    Case("setdiff1d", lambda xp, x, y: xp.setdiff1d(_ints(xp, x), _ints(xp, y)), [(9,), (5,)],
         grad=None),
    Case("setxor1d", lambda xp, x, y: xp.setxor1d(_ints(xp, x), _ints(xp, y)), [(9,), (5,)], grad=None),
    Case("set-floats", lambda xp, x, y: xp.union1d(x, y), [(4,), (3,)], dtypes=("float64", "float32"),
         grad=None),
    # lexsort / partition
    Case("lexsort", lambda xp, x, y: xp.lexsort((_ints(xp, x), _ints(xp, y))), [(9,), (9,)], grad=None),
    Case("lexsort-axis", lambda xp, x, y, z: xp.lexsort((x, _ints(xp, y) % 2, _ints(xp, z) % 2), axis=0),
         [(6, 3), (6, 3), (6, 3)], grad=None),
    Case("lexsort-array", lambda xp, x: xp.lexsort(x % 3), [(3, 8)], dtypes=("int32",), grad=None),
    Case("partition", lambda xp, x: xp.sort(xp.partition(x, 2), axis=-1), [(3, 5)]),
    Case("partition-kth", lambda xp, x: xp.partition(x, (1, -1), axis=0)[np.array([1, 5])], [(6, 2)],
         grad="fd"),
    Case("partition-none", lambda xp, x: xp.partition(x, 3, axis=None)[3], [(2, 3)], grad="fd"),
    Case("argpartition", lambda xp, x: xp.take_along_axis(x, xp.argpartition(x, 1, axis=0), axis=0)[1],
         [(4, 3)], grad="fd"),
]


# --- forward -------------------------------------------------------------------------
# float32 for one case of each function (the variants take the same paths: the file's
# runtime stays small)
WITH_FLOAT32 = {"select", "piecewise", "piecewise-sqrt", "choose", "compress-axis", "extract",
                "unravel_index", "copyto-where", "putmask", "place", "put", "put_along_axis",
                "fill_diagonal", "unique-values", "set-floats", "lexsort-axis", "partition"}


@pytest.mark.parametrize("case,dtype", forward_params(
    CASES, lambda c, dt: dt != "float32" or c.id in WITH_FLOAT32))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)


# functions of Python/NumPy data only (host indices: checked at once)
HOST = [
    ("unravel_index", lambda xp: xp.unravel_index(np.array([[0, 5], [11, 7]]), (3, 4))),
    ("unravel_index-F", lambda xp: xp.unravel_index([1, 4], (2, 3), order="F")),
    ("unravel_index-0d", lambda xp: xp.unravel_index(5, (2, 3))),
    ("unravel_index-empty", lambda xp: xp.unravel_index(np.array([], np.int64), (2, 3))),
    ("unravel_index-int32", lambda xp: xp.unravel_index(np.array([3], np.int32), 7)),
    ("ravel_multi_index", lambda xp: xp.ravel_multi_index(([1, 1], [2, 0]), (2, 3))),
    ("ravel_multi_index-bcast", lambda xp: xp.ravel_multi_index(([[1], [0]], [2, 0, 1]), (2, 3), order="F")),
    ("ravel_multi_index-wrap", lambda xp: xp.ravel_multi_index(([1, -1], [2, 7]), (2, 3), mode="wrap")),
    ("ravel_multi_index-0d", lambda xp: xp.ravel_multi_index((1, 2), (2, 3))),
    ("lexsort-0d-keys", lambda xp: xp.lexsort([1, 2, 0])),
    ("choose-list", lambda xp: xp.choose([0, 2, 1], [[1, 2, 3], [4, 5, 6], [7, 8, 9]])),
    ("select-ints", lambda xp: xp.select([np.array([True, False])], [np.array([3, 4], np.int32)])),
    ("argwhere-empty", lambda xp: xp.argwhere(np.zeros((0, 3)))),
]


@pytest.mark.parametrize("name,fn", HOST, ids=[h[0] for h in HOST])
def test_host_data(name, fn, fusion):
    _check_forward(fn(qt), fn(np), fn(np), 0.0, name)


def test_dtypes_follow_numpy(fusion):
    f32 = qt.asarray(np.ones(3, np.float32))
    i32 = qt.asarray(np.ones(3, np.int32))
    assert qt.select([f32 > 0], [f32]).dtype == np.float32            # default 0 is weak
    assert qt.select([f32 > 0], [f32], 2.5).dtype == np.float32
    assert qt.select([f32 > 0], [i32]).dtype == np.int32
    assert qt.choose([0, 1, 0], [f32, 0]).dtype == np.float32          # Python scalars weak
    assert qt.choose([0, 1, 0], [i32, np.float32(1)]).dtype == np.float64
    ones = np.ones(3, np.int32)
    np.testing.assert_array_equal(qt.piecewise(i32, [i32 > 0], [2.7]).numpy(),   # x's dtype
                                  np.piecewise(ones, [ones > 0], [2.7]))
    assert qt.unravel_index(qt.asarray(np.array([1], np.int32)), (2, 2))[0].dtype == np.int64
    assert qt.lexsort((f32,)).dtype == np.int64 and qt.argpartition(f32, 0).dtype == np.int64


def test_numpy_dispatch(rng, fusion):
    """``np.<name>(tensor)`` runs the qtrace function and returns a qt.Tensor equal to NumPy's."""
    x = rng.standard_normal((3, 4))
    t = qt.asarray(x)
    xi, ti = np.floor(x * 2).astype(np.int64), qt.asarray(np.floor(x * 2).astype(np.int64))
    calls = [
        (np.select, lambda a: ([a > 0, a < -1], [a, a * 2])),
        (np.piecewise, lambda a: (a, [a > 0], [lambda v: v * 3, 1.0])),
        (np.choose, lambda a: (I4, [a, a * 2, -a])),
        (np.compress, lambda a: ([True, False, True], a, 1)),
        (np.extract, lambda a: (a > 0, a)),
        (np.argwhere, lambda a: (a > 0,)),
        (np.flatnonzero, lambda a: (a > 0,)),
        (np.partition, lambda a: (a, 0)),
        (np.lexsort, lambda a: ((a[0], a[1]),)),
    ]
    for fn, args in calls:
        got = fn(*args(t))
        assert isinstance(got, qt.Tensor), fn.__name__
        want = fn(*args(x))
        if fn is np.partition:
            got, want = got[:, 0], want[:, 0]
        np.testing.assert_array_equal(got.numpy(), want, err_msg=fn.__name__)
    for fn, args in [(np.unravel_index, lambda a: (a % 12, (3, 4))),
                     (np.ravel_multi_index, lambda a: ((a % 3, a % 4), (3, 4))),
                     (np.unique, lambda a: (a, True, True, True)),
                     (np.intersect1d, lambda a: (a, a[::-1] + 1, False, True)),
                     (np.union1d, lambda a: (a, a + 3)), (np.setdiff1d, lambda a: (a, a[1])),
                     (np.setxor1d, lambda a: (a, a[0]))]:
        got, want = fn(*args(ti)), fn(*args(xi))
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        for g, w in zip(got, want):
            assert isinstance(g, qt.Tensor), fn.__name__
            np.testing.assert_array_equal(g.numpy(), w, err_msg=fn.__name__)
    g = qt.grad(lambda v: qt.sum(np.select([v > 0], [v * v], -v)))(t)
    np.testing.assert_allclose(g.numpy(), np.where(x > 0, 2 * x, -1.0), rtol=1e-14)


# --- gradients -----------------------------------------------------------------------
# one or two cases of each function's gradient paths (the other variants share them)
NO_GRAD = {"choose-0d", "choose-bcast", "choose-clip", "choose-tensor-index", "choose-wrap", "compress-axis",
           "compress-flat", "compress-short", "copyto", "copyto-leading-ones", "copyto-scalar",
           "extract-other", "fill_diagonal", "fill_diagonal-tall", "fill_diagonal-wide", "partition-none",
           "piecewise", "piecewise-0d", "piecewise-args", "piecewise-otherwise", "piecewise-single",
           "place-view", "put-clip", "put-cycle", "put_along_axis-0", "putmask", "putmask-view",
           "select-bcast", "select-default", "select-one"}


@pytest.mark.parametrize("case", gradient_params([c for c in CASES if c.id not in NO_GRAD]))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


def test_piecewise_gradient_ignores_unselected_nan(rng, fusion):
    """``sqrt`` of the negative elements is NaN, and so is its derivative there: neither
    reaches the gradient (only the selected elements were NumPy's)."""
    x = rng.standard_normal(8) * 4
    g = qt.grad(lambda v: qt.sum(qt.piecewise(v, [v > 0], [qt.sqrt, lambda u: u * 3])))(qt.asarray(x))
    with np.errstate(invalid="ignore"):
        want = np.where(x > 0, 0.5 / np.sqrt(x), 3.0)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-14)


# --- in place: aliasing --------------------------------------------------------------
# each writes into ``dst`` (a view of a base) as NumPy does; ``src`` has shape (2, 4)
IN_PLACE = {
    "copyto": lambda xp, dst, src: xp.copyto(dst, src * 2),
    "copyto-where": lambda xp, dst, src: xp.copyto(dst, src, where=src > 0),
    "putmask": lambda xp, dst, src: xp.putmask(dst, src > 0, src[0]),
    "place": lambda xp, dst, src: xp.place(dst, src < 0, src[1]),
    "put": lambda xp, dst, src: xp.put(dst, [1, -2, 3], src[0]),
    "put-wrap": lambda xp, dst, src: xp.put(dst, [9, -2], src[1], mode="wrap"),  # (no duplicates)
    "put_along_axis": lambda xp, dst, src: xp.put_along_axis(dst, np.array([[1], [0]]), src[:, :1], 1),
    "fill_diagonal": lambda xp, dst, src: xp.fill_diagonal(dst, src[0], wrap=True),
}


def _aliases(xp, base, src, name, view):
    """``IN_PLACE[name]`` written through a view of ``base`` (``view``: rows 1: or a strided
    transposed window); returns the base, the written view and another view."""
    dst = base[1:] if view == "rows" else base[::2, ::-1].T[1:3].T
    other = base[:, 1:3]
    IN_PLACE[name](xp, dst, src)
    return base, dst, other


@pytest.mark.parametrize("name", list(IN_PLACE))
@pytest.mark.parametrize("view", ["rows", "strided"])
def test_write_through_views(name, view, rng, fusion):
    x = rng.standard_normal((3, 4))
    src = rng.standard_normal((2, 4)) if view == "rows" else rng.standard_normal((2, 2))
    want = [a.copy() for a in _aliases(np, x.copy(), src, name, view)]
    got = _aliases(qt, qt.asarray(x).copy(), qt.asarray(src), name, view)
    for g, w in zip(got, want):
        assert isinstance(g, qt.Tensor)
        np.testing.assert_array_equal(g.numpy(), w, err_msg=name)


@pytest.mark.parametrize("name", list(IN_PLACE))
def test_write_through_views_in_jit(name, rng, fusion):
    @qt.jit
    def program(x, src):
        base = x.copy()
        b, d, o = _aliases(qt, base, src, name, "rows")
        return b, d * 1, o * 1

    for _ in range(2):
        x, src = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
        want = _aliases(np, x.copy(), src, name, "rows")
        for g, w in zip(program(qt.asarray(x), qt.asarray(src)), want):
            np.testing.assert_array_equal(g.numpy(), w, err_msg=name)
        np.testing.assert_array_equal(np.asarray(qt.asarray(x)), x)  # the input is untouched


def test_write_through_numpy_dispatch(rng, fusion):
    """``np.putmask(tensor_view, ...)`` (NumPy's dispatch) writes through the views too."""
    x, src = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    for name in IN_PLACE:
        base = qt.asarray(x).copy()
        other = base[:, 1:3]
        IN_PLACE[name](np, base[1:], qt.asarray(src))
        want, _, want_other = _aliases(np, x.copy(), src, name, "rows")
        np.testing.assert_array_equal(base.numpy(), want, err_msg=name)
        np.testing.assert_array_equal(other.numpy(), want_other, err_msg=name)


def test_copyto_dispatch_is_selecting():
    assert protocols.FUNCTIONS[np.copyto] is selecting.copyto, (
        "qtrace/tracer/protocols.py's own np.copyto entry overrides selecting.copyto: remove it")


def test_numpy_array_destination(rng, fusion):
    """A NumPy destination with tensor operands receives the computed value, as NumPy would."""
    x, src = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    for name in IN_PLACE:
        want = x.copy()
        IN_PLACE[name](np, want[1:], src)
        got = x.copy()
        IN_PLACE[name](np, got[1:], qt.asarray(src))
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_read_only_destination(fusion):
    b = qt.broadcast_to(qt.arange(3.0), (2, 3))
    for fn in (lambda: qt.copyto(b, 1.0), lambda: qt.putmask(b, [True] * 6, 1.0),
               lambda: qt.place(b, [True] * 6, [1.0]), lambda: qt.put(b, [0], 1.0),
               lambda: qt.put_along_axis(b, np.zeros((2, 1), int), 1.0, 1),
               lambda: qt.fill_diagonal(b, 1.0)):
        with pytest.raises(ValueError, match=r"qt\.\w+: assignment destination is read-only"):
            fn()


def test_in_place_gradient_through_view(rng, fusion):
    """The gradient reaches the values written into a view and the base's kept elements."""
    x, v, w = rng.standard_normal((3, 4)), rng.standard_normal((2, 4)), rng.standard_normal((3, 4))

    def f(xp, a, s):
        base = a.copy()
        xp.putmask(base[1:], s > 0, s * s)
        xp.fill_diagonal(base, s[0, :3])
        return (base * w).sum()

    got = qt.grad(lambda a, s: f(qt, a, s), argnums=(0, 1))(qt.asarray(x), qt.asarray(v))
    mask = np.zeros((3, 4), bool)
    mask[1:] = v > 0
    diag = np.eye(3, 4, dtype=bool)
    want_x = np.where(mask | diag, 0.0, w)
    want_v = np.where((v > 0) & ~diag[1:], 2 * v * w[1:], 0.0)
    want_v[0, :3] += np.diag(w)
    np.testing.assert_allclose(got[0].numpy(), want_x, rtol=1e-14)
    np.testing.assert_allclose(got[1].numpy(), want_v, rtol=1e-14)


# --- inside qt.jit -------------------------------------------------------------------
def test_inside_jit(rng, fusion):
    @qt.jit
    def step(x, y, i):
        s = qt.select([x > 0.5, y > 0], [x, y * 2], default=-1.0)
        p = qt.piecewise(x, [x < 0], [lambda v: v * v, qt.sin])
        c = qt.choose(i, [x, y, s], mode="wrap")
        r, col = qt.unravel_index(i % 12, (3, 4))
        order = qt.lexsort((x[0], y[0]))
        part = qt.partition(p, 1, axis=0)[1]
        return s + p + c, r * 4 + col, order, part

    def ref(x, y, i):
        s = np.select([x > 0.5, y > 0], [x, y * 2], default=-1.0)
        p = np.piecewise(x, [x < 0], [lambda v: v * v, np.sin])
        c = np.choose(i, [x, y, s], mode="wrap")
        r, col = np.unravel_index(i % 12, (3, 4))
        return (s + p + c, r * 4 + col, np.lexsort((x[0], y[0])),
                np.partition(p, 1, axis=0)[1])

    qt.reset_stats()
    for _ in range(3):
        x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
        i = rng.integers(-5, 20, (3, 4))
        # (atol: sin is within an ulp of NumPy's, and s + p + c can cancel to near zero)
        for g, w in zip(step(qt.asarray(x), qt.asarray(y), qt.asarray(i)), ref(x, y, i)):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-14, atol=1e-14)
    assert qt.stats()["traces"] == 1


def test_jit_grad(rng, fusion):
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))

    def f(t):
        y = qt.choose(I4, [t, t * t, 2.0])
        z = t.copy()
        qt.copyto(z[1:], y[:2], where=y[:2] > 0)
        return qt.sum(qt.select([t > 0], [z], t) * w)

    g = qt.jit(qt.grad(f))(qt.asarray(x))
    h = 1e-6
    fd = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        fd[idx] = (f(qt.asarray(x + e)).item() - f(qt.asarray(x - e)).item()) / (2 * h)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn", [
    lambda x: qt.compress(x > 0, x), lambda x: qt.extract(x > 0, x), lambda x: qt.argwhere(x),
    lambda x: qt.flatnonzero(x), lambda x: qt.unique(x), lambda x: qt.union1d(x, x),
    lambda x: qt.intersect1d(x, x), lambda x: qt.setdiff1d(x, x), lambda x: qt.setxor1d(x, x),
], ids=["compress", "extract", "argwhere", "flatnonzero", "unique", "union1d", "intersect1d",
        "setdiff1d", "setxor1d"])
def test_data_dependent_shapes_refused_in_jit(fn, fusion):
    with pytest.raises(qt.TracerError, match=r"qt\.\w+: the result's shape depends"):
        qt.jit(fn)(qt.arange(4.0))


def test_compress_with_host_condition_in_jit(rng, fusion):
    x = rng.standard_normal((2, 3))
    got = qt.jit(lambda t: qt.compress([True, False, True], t, axis=1))(qt.asarray(x))
    np.testing.assert_array_equal(got.numpy(), np.compress([True, False, True], x, axis=1))


# --- tensor indices checked in the kernel --------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda: qt.choose(qt.asarray([0, 2]), [qt.zeros(2), qt.ones(2)]),
    lambda: qt.choose(qt.asarray([0, -1]), [qt.zeros(2), qt.ones(2)]),
    lambda: qt.unravel_index(qt.asarray([1, 12]), (3, 4))[0],
    lambda: qt.unravel_index(qt.asarray([-1]), (3, 4))[1],
    lambda: qt.ravel_multi_index((qt.asarray([1, 3]), [0, 0]), (3, 4)),
], ids=["choose", "choose-negative", "unravel_index", "unravel_index-negative", "ravel_multi_index"])
def test_tensor_indices_out_of_range(fn, fusion):
    with pytest.raises(IndexError, match="out of bounds"):
        fn().numpy()


@pytest.mark.parametrize("idx", [[4], [-5]])
def test_put_tensor_indices_out_of_range(idx, fusion):
    a = qt.zeros(4)
    qt.put(a, qt.asarray(idx), 1.0)
    with pytest.raises(IndexError, match="out of bounds"):
        a.numpy()


# --- errors --------------------------------------------------------------------------
X = np.arange(6.0).reshape(2, 3)
ERRORS = [
    (lambda: qt.select([qt.ones(2)], [qt.ones(2)]), TypeError, "qt.select: invalid entry 0 in condlist"),
    (lambda: qt.select([], []), ValueError, "qt.select: select with an empty condition list"),
    (lambda: qt.select([qt.ones(2) > 0], []), ValueError, "qt.select: list of cases must be same length"),
    (lambda: qt.select([qt.ones(2) > 0], [qt.ones(3)]), ValueError,
     r"qt.select: operands could not be broadcast together with shapes .*\(2,\) and \(3,\)"),
    (lambda: qt.choose([0, 1], [qt.ones(3)] * 2), ValueError, "qt.choose: operands could not be broadcast"),
    (lambda: qt.piecewise(qt.ones(3), [qt.ones(3) > 0], [1, 2, 3]), ValueError,
     r"qt.piecewise: with 1 condition\(s\), either 1 or 2"),
    (lambda: qt.piecewise(qt.ones((2, 3)), [qt.ones(3) > 0], [1]), IndexError,
     "qt.piecewise: boolean index did not match"),
    (lambda: qt.choose([0, 2], [qt.ones(2), qt.ones(2)]), ValueError, "qt.choose: invalid entry in choice"),
    (lambda: qt.choose([0, -1], [qt.ones(2), qt.ones(2)]), ValueError, "qt.choose: invalid entry in choice"),
    (lambda: qt.choose(qt.asarray([0.0, 1.0]), [qt.ones(2)] * 2), TypeError, "qt.choose: only int indices"),
    (lambda: qt.choose([0, 1], [qt.ones(2)] * 2, mode="bad"), ValueError, "qt.choose: clipmode must be"),
    (lambda: qt.choose([0], [qt.ones(1)], out=qt.ones(1)), TypeError, "qt.choose: out= is not supported"),
    (lambda: qt.compress([[True]], qt.ones(3)), ValueError, "qt.compress: condition must be a 1-d array"),
    (lambda: qt.compress([0, 0, 0, 1], qt.ones(3)), IndexError, "qt.compress: index 3 is out of bounds"),
    (lambda: qt.compress([True], qt.ones(3), axis=1), ValueError, "qt.compress: axis 1"),
    (lambda: qt.extract([0, 0, 0, 1], qt.ones(3)), IndexError, "qt.extract: index 3 is out of bounds"),
    (lambda: qt.unravel_index(6, (2, 3)), ValueError, "qt.unravel_index: index 6 is out of bounds"),
    (lambda: qt.unravel_index(-1, (2, 3)), ValueError, "qt.unravel_index: index -1 is out of bounds"),
    (lambda: qt.unravel_index(1.0, (2, 3)), TypeError, "qt.unravel_index: only int indices permitted"),
    (lambda: qt.unravel_index(1, qt.asarray(3)), TypeError, "qt.unravel_index: shape must be"),
    (lambda: qt.unravel_index(1, (2, 3), order="K"), ValueError, "qt.unravel_index: only 'C' or 'F'"),
    (lambda: qt.unravel_index(1, (2, -3)), ValueError, "qt.unravel_index: dimensions must be non-negative"),
    (lambda: qt.ravel_multi_index(([1], [1]), (2, -3)), ValueError,
     "qt.ravel_multi_index: dimensions must be non-negative"),
    (lambda: qt.ravel_multi_index(([1, 2], [0, 0]), (2, 3)), ValueError,
     "qt.ravel_multi_index: invalid entry in coordinates"),
    (lambda: qt.ravel_multi_index(([1],), (2, 3)), ValueError,
     "qt.ravel_multi_index: parameter multi_index must be a sequence of length 2"),
    (lambda: qt.ravel_multi_index(([1], [1]), (2, 3), mode="foo"), ValueError,
     "qt.ravel_multi_index: clipmode must be"),
    (lambda: qt.ravel_multi_index(([1.0], [1]), (2, 3)), TypeError,
     "qt.ravel_multi_index: only int indices permitted"),
    (lambda: qt.copyto(qt.zeros(3, dtype=qt.int64), 2.5), TypeError,
     "qt.copyto: Cannot cast scalar from dtype\\('float64'\\)"),
    (lambda: qt.copyto(qt.zeros(3, dtype=qt.float32), qt.ones(3), casting="safe"), TypeError,
     "qt.copyto: Cannot cast array data"),
    (lambda: qt.copyto(qt.zeros(3), qt.ones(2)), ValueError,
     r"qt.copyto: could not broadcast input array from shape \(2,\) into shape \(3,\)"),
    (lambda: qt.copyto(qt.zeros(3), 1.0, where=[True, False]), ValueError,
     "qt.copyto: could not broadcast where mask"),
    (lambda: qt.copyto(qt.zeros(3), 1.0, casting="foo"), ValueError, "qt.copyto: casting must be one of"),
    (lambda: qt.copyto([0.0], qt.ones(1)), TypeError, "qt.copyto: the array written must be"),
    (lambda: qt.putmask(qt.zeros(3), [True], 1.0), ValueError,
     "qt.putmask: mask and data must be the same size"),
    (lambda: qt.place(qt.zeros(3), [True, False], [1.0]), ValueError, "qt.place: mask and data must be"),
    (lambda: qt.place(qt.zeros(3), [True, False, False], []), ValueError,
     "qt.place: Cannot insert from an empty array"),
    (lambda: qt.put(qt.zeros(3), [3], 1.0), IndexError,
     "qt.put: index 3 is out of bounds for axis 0 with size 3"),
    (lambda: qt.put(qt.zeros(3), [-4], 1.0), IndexError, "qt.put: index -4 is out of bounds"),
    (lambda: qt.put(qt.zeros(3), [0], 1.0, mode="x"), ValueError, "qt.put: clipmode must be"),
    (lambda: qt.put_along_axis(qt.zeros((2, 3)), np.array([[0.0]]), 1.0, 1), IndexError,
     "qt.put_along_axis: `indices` must be an integer array"),
    (lambda: qt.put_along_axis(qt.zeros((2, 3)), np.array([0]), 1.0, 1), ValueError,
     "qt.put_along_axis: `indices` and `arr` must have the same number of dimensions"),
    (lambda: qt.put_along_axis(qt.zeros((2, 3)), np.array([[0]]), 1.0, None), ValueError,
     "qt.put_along_axis: when axis=None, `indices` must have a single dimension"),
    (lambda: qt.put_along_axis(qt.zeros((2, 3)), np.array([[3]]), 1.0, 1), IndexError, "out of bounds"),
    (lambda: qt.fill_diagonal(qt.zeros(3), 1.0), ValueError, "qt.fill_diagonal: array must be at least 2-d"),
    (lambda: qt.fill_diagonal(qt.zeros((2, 2, 3)), 1.0), ValueError,
     "qt.fill_diagonal: All dimensions of input must be of equal length"),
    (lambda: qt.unique(qt.ones((2, 2)), axis=2), ValueError, "qt.unique: axis 2"),
    (lambda: qt.lexsort([]), TypeError, "qt.lexsort: need sequence of keys with len > 0"),
    (lambda: qt.lexsort((qt.ones(2), qt.ones(3))), ValueError,
     "qt.lexsort: all keys need to be the same shape"),
    (lambda: qt.lexsort(qt.asarray(1.0)), TypeError, "qt.lexsort: need sequence of keys"),
    (lambda: qt.partition(qt.ones(3), 3), ValueError, r"qt.partition: kth\(=3\) out of bounds \(3\)"),
    (lambda: qt.argpartition(qt.ones(3), -4), ValueError, r"qt.argpartition: kth\(=-4\) out of bounds"),
    (lambda: qt.partition(qt.ones(3), 1.0), TypeError, "qt.partition: Partition index must be integer"),
    (lambda: qt.partition(qt.ones(3), qt.asarray(1)), TypeError, "qt.partition: kth must be Python"),
    (lambda: qt.partition(qt.ones(3), 1, order="x"), TypeError, "qt.partition: order="),
    (lambda: qt.partition(qt.asarray(1.0), 0), ValueError, "qt.partition: a 0-d array"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[f"error{i}" for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_errors_match_numpy_types():
    """The NumPy functions raise the same exception types on the same bad arguments."""
    for qt_fn, np_fn in [
        (lambda: qt.choose([0, 2], [qt.ones(2)] * 2), lambda: np.choose([0, 2], [np.ones(2)] * 2)),
        (lambda: qt.unravel_index(6, (2, 3)), lambda: np.unravel_index(6, (2, 3))),
        (lambda: qt.put(qt.zeros(3), [3], 1.0), lambda: np.put(np.zeros(3), [3], 1.0)),
        (lambda: qt.partition(qt.ones(3), 3), lambda: np.partition(np.ones(3), 3)),
        (lambda: qt.lexsort([]), lambda: np.lexsort([])),
        (lambda: qt.copyto(qt.zeros(3, dtype=qt.int64), 2.5), lambda: np.copyto(np.zeros(3, int), 2.5)),
        (lambda: qt.place(qt.zeros(3), [True, False, False], []),
         lambda: np.place(np.zeros(3), [True, False, False], [])),
    ]:
        with pytest.raises(Exception) as want:
            np_fn()
        with pytest.raises(want.type):
            qt_fn()


_CONVERSIONS = [
    ("put", lambda xp, a, v: xp.put(a, [0, 2], v)),
    ("put_along_axis", lambda xp, a, v: xp.put_along_axis(a, np.array([0]), v, 0)),
    ("fill_diagonal", lambda xp, a, v: xp.fill_diagonal(a.reshape(2, 2), v)),
    ("putmask", lambda xp, a, v: xp.putmask(a, np.array([True, False, True, False]), v)),
    ("place", lambda xp, a, v: xp.place(a, np.array([True, False, True, False]), v)),
]


@pytest.mark.parametrize("name,fn", _CONVERSIONS, ids=[c[0] for c in _CONVERSIONS])
@pytest.mark.parametrize("dtype,value", [("int8", 300), ("uint8", -1), ("float64", 1 + 2j),
                                          ("int64", 1.75), ("int32", np.array([1.5])),
                                          ("int8", np.array([7], np.int64))])
def test_values_convert_as_numpy_converts_them(name, fn, dtype, value, fusion):
    """Values written in place convert as NumPy converts them: a Python integer out of the
    destination's range raises OverflowError, a complex number into a real array TypeError,
    a float into an integer array truncates; arrays cast unsafely, but ``putmask``'s and
    ``place``'s by the 'safe' rule (TypeError) — the same exception as NumPy's, or the same
    values."""
    want = np.zeros(4, dtype)
    try:
        fn(np, want, value)
    except Exception as err:  # noqa: BLE001 - NumPy's exception is the expectation
        with pytest.raises(type(err), match=f"qt.{name}: "):
            fn(qt, qt.zeros(4, dtype=dtype), value)
        return
    got = qt.zeros(4, dtype=dtype)
    fn(qt, got, value)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)
