"""NumPy's ``ndarray.flat`` and the ``out=`` keyword of NumPy functions, on tensors.

Differential: each case runs the same program on NumPy arrays and on tensors (fresh random
shapes, layouts, keys and values; fusion on and off) and compares every array the program
holds at the end — the base and the view written through — exactly. Gradients through a
flat write against float64 central differences.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import qtrace as qt

SHAPES = [(), (7,), (3, 4), (2, 3, 4)]
LAYOUTS = ["plain", "transposed", "strided"]


def _layout(x, layout: str):
    """A view of ``x`` (NumPy array or tensor) in ``layout`` (as NumPy would make it)."""
    if layout == "transposed" or x.ndim < 1:
        return x.T
    if layout == "strided":
        return x[::-2] if x.ndim == 1 else x[:, ::2]
    return x[...]


def _keys(rng, size: int):
    """Flat keys of every kind NumPy's ``flat`` takes, for a view of ``size`` elements."""
    ints = rng.integers(-size, size, 3)   # (repeats too: NumPy's last write wins)
    distinct = rng.permutation(size)[:3] - size * (rng.random(min(size, 3)) < 0.5)
    keys = [int(ints[0]), slice(None, None, 2), slice(size - 1, None, -3), Ellipsis,
            [int(k) for k in ints], distinct, rng.random(size) < 0.5]
    return [k for k in keys if size > 0]


def _values(rng, count: int):
    """Values for ``count`` elements: a scalar, one per element, fewer (NumPy repeats them)."""
    return [float(rng.standard_normal()), rng.standard_normal(count),
            rng.standard_normal(max(1, count - 1)), rng.standard_normal(count + 2)]


def _as_qt_key(key, as_tensor: bool):
    """``key``, its NumPy arrays as tensors when ``as_tensor`` (those keys hold no repeats:
    which of several writes of a tensor key to one element wins is unspecified, as a
    scatter's)."""
    if as_tensor and isinstance(key, np.ndarray):
        return qt.asarray(key)
    return key


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_flat_reads_match_numpy(shape, layout, fusion, rng):
    base = rng.standard_normal(shape)
    ref, got = _layout(base, layout), _layout(qt.asarray(base), layout)
    assert len(got.flat) == ref.size
    np.testing.assert_array_equal(np.asarray(got.flat), np.asarray(ref.flat))
    np.testing.assert_array_equal(got.flat.copy().numpy(), ref.flat.copy())
    np.testing.assert_array_equal([float(v) for v in got.flat], [float(v) for v in ref.flat])
    for key in _keys(rng, ref.size):
        for as_tensor in (False, True):
            want = ref.flat[key]
            have = got.flat[_as_qt_key(key, as_tensor)]
            np.testing.assert_array_equal(np.asarray(have), want, err_msg=f"key {key!r}")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_flat_writes_land_in_the_base_as_numpy(shape, layout, fusion, rng):
    """``view.flat[key] = value`` writes through the view into its base, NumPy's values
    repeated to the elements' number; every array held afterwards matches NumPy's."""
    base = rng.standard_normal(shape)
    size = _layout(base, layout).size
    for key in _keys(rng, size):
        count = np.arange(size)[key if key is not Ellipsis else slice(None)].size
        for value in _values(rng, count):
            for as_tensor in (False, True):
                ref_base = base.copy()
                ref = _layout(ref_base, layout)
                got_base = qt.asarray(base.copy())
                got = _layout(got_base, layout)
                got_value = qt.asarray(value) if as_tensor and np.ndim(value) else value
                what = f"key {key!r}, value of shape {np.shape(value)}, tensor operands {as_tensor}"
                try:
                    ref.flat[key] = value
                except ValueError:   # (NumPy: one element takes a scalar only)
                    with pytest.raises(ValueError, match="takes a scalar"):
                        got.flat[_as_qt_key(key, as_tensor)] = got_value
                    continue
                got.flat[_as_qt_key(key, as_tensor)] = got_value
                np.testing.assert_array_equal(got_base.numpy(), ref_base, err_msg=what)
                np.testing.assert_array_equal(got.numpy(), ref, err_msg=what)


def test_flat_attribute_assignment_fills_as_numpy(fusion, rng):
    base = rng.standard_normal((3, 5))
    for value in (2.5, rng.standard_normal(4), rng.standard_normal(15)):
        ref, got = base.copy(), qt.asarray(base.copy())
        ref[:, 1:].flat = value
        view = got[:, 1:]
        view.flat = value
        np.testing.assert_array_equal(got.numpy(), ref)


def test_flat_write_inside_jit_reaches_the_caller(fusion, rng):
    """A jitted step writing its argument through ``flat`` changes the caller's tensor, as
    NumPy's function would change the caller's array."""
    def step(a, idx):
        a.flat[idx] = a.flat[idx] * 2.0 + 1.0
        return a.sum()
    base, idx = rng.standard_normal((4, 6)), rng.choice(24, 5, replace=False)
    ref = base.copy()
    want = step(ref, idx)
    got = qt.asarray(base.copy())
    have = qt.jit(step)(got, qt.asarray(idx))
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-15)
    np.testing.assert_allclose(have.item(), want, rtol=1e-12)


def test_flat_write_gradient_matches_finite_differences(fusion, rng):
    """d/dy of ``sum(sin(z) * w)`` where ``z.flat[idx] = y ** 2`` (z a transposed view of a
    copy of x): the gradient flows into y at the written positions and into x elsewhere."""
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 3))
    idx = rng.choice(12, 5, replace=False)
    y = rng.standard_normal(5)

    def loss(xp, x, y):
        z = xp.asarray(x).copy().T
        z.flat[idx] = y ** 2
        return (xp.sin(z) * w).sum()
    gx, gy = qt.grad(lambda x, y: loss(qt, x, y), argnums=(0, 1))(qt.asarray(x), qt.asarray(y))
    h = 1e-6
    for arg, got in ((0, gx), (1, gy)):
        args = [x, y]
        fd = np.zeros_like(args[arg])
        for k in range(args[arg].size):
            hi, lo = [a.copy() for a in args], [a.copy() for a in args]
            hi[arg].flat[k] += h
            lo[arg].flat[k] -= h
            fd.flat[k] = (loss(np, *hi) - loss(np, *lo)) / (2 * h)
        np.testing.assert_allclose(got.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_flat_rejects_what_numpy_rejects(rng):
    x = qt.asarray(rng.standard_normal((2, 3)))
    with pytest.raises(IndexError, match="one index"):
        x.flat[0, 1]
    with pytest.raises(IndexError, match="integers or booleans"):
        x.flat[np.array([0.5])] = 1.0
    with pytest.raises(IndexError, match="boolean index must have shape"):
        x.flat[qt.asarray(np.ones(4, bool))] = 1.0
    with pytest.raises(IndexError, match="boolean lists are not supported"):
        x.flat[[True, False] * 3] = 1.0
    for key in (None, True):
        with pytest.raises(IndexError, match="unsupported index"):
            x.flat[key]
    with pytest.raises(IndexError, match="index -7 is out of bounds for size 6"):
        x.flat[[0, -7]] = 1.0
    with pytest.raises(ValueError, match="one element takes a scalar"):
        x.flat[np.array(2)] = [8.0, 9.0]


@pytest.mark.parametrize("shape", [(2, 3), (4,), (), (0, 3)])
def test_flat_iterates_and_compares_as_numpy(shape, fusion, rng):
    """``next``, ``index`` and ``coords`` step as NumPy's iterator does (to one past the
    end); ``x.flat == v`` and the other comparisons compare every element."""
    a = rng.integers(0, 3, shape).astype(float)
    want, got = a.flat, qt.asarray(a).flat
    assert iter(got) is got
    while True:
        assert got.index == want.index and got.coords == want.coords
        try:
            w = next(want)
        except StopIteration:
            with pytest.raises(StopIteration):
                next(got)
            break
        assert next(got).item() == w
    assert got.index == want.index and got.coords == want.coords
    for op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
        np.testing.assert_array_equal(getattr(qt.asarray(a).flat, op)(1.0).numpy(),
                                      getattr(a.flat, op)(1.0), err_msg=op)
    assert [v.item() for v in qt.asarray(a).flat] == list(a.flat)


def test_flat_writes_of_nothing_change_nothing(rng):
    """As NumPy's: an empty value, or an empty key, writes nothing."""
    a = rng.standard_normal((2, 3))
    x = qt.asarray(a.copy())
    x.flat[[0, 1]] = np.zeros(0)
    x.flat[[]] = 1.0
    np.testing.assert_array_equal(x.numpy(), a)
    assert x.flat[[]].shape == (0,)


def test_flat_mask_write_inside_jit(fusion, rng):
    """A boolean tensor key with a scalar value is a mask write: no count needed, so it
    runs inside ``qt.jit`` and changes the caller's tensor."""
    def zero(x, m):
        x.flat[m] = 0.0
        return x.sum()
    a, m = rng.standard_normal((3, 4)), rng.random(12) < 0.5
    ref = a.copy()
    want = zero(ref, m)
    got = qt.asarray(a.copy())
    have = qt.jit(zero)(got, qt.asarray(m))
    np.testing.assert_array_equal(got.numpy(), ref)
    np.testing.assert_allclose(have.item(), want, rtol=1e-12)


# --- out= --------------------------------------------------------------------------------
OUT_CASES = {
    "sum": (lambda xp, a, out: xp.sum(a, axis=0, out=out), lambda a: a.shape[1:]),
    "mean": (lambda xp, a, out: xp.mean(a, axis=1, out=out), lambda a: a.shape[:1]),
    "max": (lambda xp, a, out: xp.max(a, out=out), lambda a: ()),
    "cumsum": (lambda xp, a, out: xp.cumsum(a, axis=1, out=out), lambda a: a.shape),
    "clip": (lambda xp, a, out: xp.clip(a, -0.5, 0.5, out=out), lambda a: a.shape),
    "round": (lambda xp, a, out: xp.round(a, 2, out=out), lambda a: a.shape),
    "dot": (lambda xp, a, out: xp.dot(a, a.T, out=out), lambda a: (a.shape[0],) * 2),
}


@pytest.mark.parametrize("case", list(OUT_CASES))
def test_numpy_functions_write_out_into_a_view_as_numpy(case, fusion, rng):
    """``np.f(t, out=view)``: the result lands in the view and its base (NumPy's function
    called on a tensor dispatches to qtrace's), and is what is returned."""
    fn, out_shape = OUT_CASES[case]
    a = rng.standard_normal((4, 5))
    shape = out_shape(a)
    big = rng.standard_normal((2,) + shape)
    ref_big, got_big = big.copy(), qt.asarray(big.copy())
    ref_ret = fn(np, a, ref_big[1, ...])
    got_ret = fn(np, qt.asarray(a), got_big[1, ...])
    np.testing.assert_allclose(got_big.numpy(), ref_big, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(np.asarray(got_ret), ref_ret, rtol=1e-13, atol=1e-15)


def test_out_into_the_input_and_into_a_numpy_array(fusion, rng):
    a = rng.standard_normal(9)
    ref, got = a.copy(), qt.asarray(a.copy())
    np.clip(ref, -0.3, 0.3, out=ref)
    np.clip(got, -0.3, 0.3, out=got)
    np.testing.assert_array_equal(got.numpy(), ref)
    ref, got = a.copy(), qt.asarray(a.copy())
    ref.clip(-0.1, 0.2, out=ref)
    got.clip(-0.1, 0.2, out=got)
    np.testing.assert_array_equal(got.numpy(), ref)
    host = np.zeros(9)
    returned = np.round(qt.asarray(a), 1, out=host)
    assert returned is host
    np.testing.assert_array_equal(host, np.round(a, 1))


def test_out_of_the_wrong_shape_names_the_function(rng):
    t = qt.asarray(rng.standard_normal((3, 4)))
    with pytest.raises(ValueError, match=r"numpy\.sum: cannot write a result of shape \(4,\)"):
        np.sum(t, axis=0, out=qt.zeros(3))
    with pytest.raises(ValueError, match=r"numpy\.sum: out=: could not broadcast"):
        np.sum(t, axis=0, out=np.zeros(3))
    with pytest.raises(TypeError, match=r"numpy\.clip: cannot cast a result of dtype float64"):
        np.clip(t, 0, 1, out=qt.zeros((3, 4), dtype=qt.int64))
    with pytest.raises(ValueError, match=r"qt\.Tensor\.clip: cannot write"):
        t.clip(0, 1, out=qt.zeros(5))


def test_out_given_by_position_as_numpy(fusion, rng):
    """``out`` in its NumPy position (the arguments after it by NumPy's names too)."""
    a = rng.standard_normal((3, 4))
    calls = [(lambda arr, o: np.max(arr, None, o), ()),
             (lambda arr, o: np.sum(arr, 1, None, o, True), (3, 1)),
             (lambda arr, o: np.clip(arr, -0.5, 0.5, o), (3, 4)),
             (lambda arr, o: np.var(arr, 1, None, o, 1), (3,))]
    for call, shape in calls:
        ref, got = np.zeros(shape), qt.zeros(shape)
        assert call(a, ref) is ref
        assert call(qt.asarray(a), got) is got
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-13, atol=1e-15)


REDUCTIONS_INTO_OUT = [np.sum, np.prod, np.mean, np.cumsum, np.cumprod, np.max, np.min, np.argmax,
                       np.nanargmin, np.any, np.all, np.var, np.std, np.median, np.nansum, np.nanmean,
                       np.trace]
OUT_DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int16, np.bool_]


@pytest.mark.parametrize("fn", [np.max, np.min, np.nanmax, np.nanmin], ids=lambda f: f.__name__)
def test_max_and_min_start_from_their_first_element_cast_into_out(fn, fusion, rng):
    """NumPy's max/min into an out= that cannot hold the input's values start each output
    from its first element (index 0 along every reduced axis) cast into out='s dtype: a
    float32 max of [-1.5, 0.2] into bool is True, an int32 max of [-1, 0] too, a min of
    [200, 100] into int8 is -56. Random dtypes, shapes, axes and NaNs, against NumPy; the
    input is left as it was. (Values out of the integer range and NaN into integers are
    undefined casts: not drawn.)"""
    for _ in range(6):
        din = rng.choice([np.int16, np.int32, np.int64, np.float32, np.float64])
        dout = rng.choice([np.int8, np.uint8, np.int16, np.bool_, np.float32])
        shape = tuple(int(d) for d in rng.integers(1, 4, 3))
        x = rng.uniform(-400, 400, shape).astype(din)
        if x.dtype.kind == "f" and np.dtype(dout).kind in "iu":
            x = np.clip(x, np.iinfo(dout).min, np.iinfo(dout).max)
        elif x.dtype.kind == "f":
            x.flat[0] = np.nan
        for axis in (None, 1, (0, 2)):
            what = f"{fn.__name__} {np.dtype(din)} axis={axis} -> out {np.dtype(dout)}: {x.ravel()}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)   # (all-NaN slices)
                ref = np.zeros(np.shape(fn(x, axis=axis)), dout)
                got, t = qt.zeros(ref.shape, dtype=dout), qt.asarray(x)
                fn(x, axis=axis, out=ref)
                assert fn(t, axis=axis, out=got) is got
            np.testing.assert_array_equal(got.numpy(), ref, err_msg=what)
            np.testing.assert_array_equal(t.numpy(), x, err_msg=what)


@pytest.mark.parametrize("fn", REDUCTIONS_INTO_OUT, ids=lambda f: f.__name__)
def test_reductions_cast_into_out_as_numpy(fn, fusion, rng):
    """Every input dtype into every out= dtype, against NumPy: reductions accumulate in the
    common type of input and out= and cast their result unsafely (a float sum into an
    integer out= is truncated: 7.7 -> 7, not the sum of truncated terms), positions go
    only into integers, and what NumPy refuses (``std``, a square root, into integers)
    raises ``TypeError``."""
    x0 = rng.uniform(-1.5, 1.5, (3, 4))   # (products stay in int16: no out-of-range casts)
    for din in (np.float32, np.float64, np.int32, np.int64, np.bool_):
        x = (x0 > 0) if din is np.bool_ else x0.astype(din)
        shape = np.shape(fn(x))
        for dout in OUT_DTYPES:
            ref, got = np.zeros(shape, dout), qt.zeros(shape, dtype=dout)
            what = f"{fn.__name__} {np.dtype(din)} -> out {np.dtype(dout)}"
            try:
                fn(x, out=ref)
            except TypeError:
                with pytest.raises(TypeError, match=fn.__name__):
                    fn(qt.asarray(x), out=got)
                continue
            assert fn(qt.asarray(x), out=got) is got, what
            tol = 1e-5 if np.float32 in (din, dout) else 1e-12
            np.testing.assert_allclose(got.numpy(), ref, rtol=tol, atol=tol, err_msg=what)


METHODS_WITH_OUT = [   # (method, positional arguments before out=, keyword arguments)
    ("sum", (0, None), {}), ("prod", (1, None), {}), ("mean", (0, None), {"keepdims": True}),
    ("max", (0,), {}), ("min", (None,), {}), ("argmax", (1,), {}), ("argmin", (0,), {}),
    ("any", (0, None), {}), ("all", (1, None), {}), ("cumsum", (1, None), {}), ("cumprod", (0, None), {}),
    ("var", (0, None), {"ddof": 1}), ("std", (1, None), {}), ("trace", (0, 0, 1, None), {}),
    ("round", (2,), {}), ("clip", (-0.5, 0.75), {}), ("take", ([2, 0, 2], 1), {}),
    ("dot", ("matrix",), {}),
]


# (NumPy's any/all methods take a dtype before out= positionally, unlike np.any)
_METHOD_CASES = [(m, how) for m in METHODS_WITH_OUT for how in ("keyword", "position")]


@pytest.mark.parametrize("name,args,kwargs,how", [(*m, how) for m, how in _METHOD_CASES],
                         ids=[f"{m[0]}-{how}" for m, how in _METHOD_CASES])
def test_methods_take_out_as_ndarray_methods(name, args, kwargs, how, fusion, rng):
    """``x.sum(axis, dtype, out)`` and the other ndarray methods with ``out=``: the result is
    written into ``out`` (given by keyword or by position) and returned, as NumPy's; the
    same call without ``out=`` gives the same values."""
    x = rng.uniform(-1.5, 1.5, (4, 4))
    args = tuple(rng.uniform(-1, 1, (4, 3)) if a == "matrix" else a for a in args)
    want = getattr(x, name)(*args, **kwargs)
    ref, got = np.zeros(np.shape(want), want.dtype), qt.zeros(np.shape(want), dtype=want.dtype)
    call = (lambda t, out: getattr(t, name)(*args, out=out, **kwargs)) if how == "keyword" \
        else (lambda t, out: getattr(t, name)(*args, out, **kwargs))
    assert call(x, ref) is ref
    assert call(qt.asarray(x), got) is got
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-13, atol=1e-14)
    plain = getattr(qt.asarray(x), name)(*args, **kwargs)
    np.testing.assert_allclose(np.asarray(plain.numpy(), float), ref, rtol=1e-13, atol=1e-14)


def test_a_method_writes_into_a_view(fusion, rng):
    """``x.max(axis=0, out=x[0])``: the row of ``x`` is written, as in NumPy."""
    x = rng.standard_normal((3, 5))
    t = qt.asarray(x)
    t.max(axis=0, out=t[0])
    x.max(axis=0, out=x[0])
    np.testing.assert_array_equal(t.numpy(), x)


def test_sums_and_products_accumulate_in_the_dtype_of_out(fusion, rng):
    """As NumPy's: with no dtype=, a sum or product into a float64 out= accumulates in
    float64 (not in the float32 of the input, then cast)."""
    x = rng.uniform(1.0, 19.0, 40).astype(np.float32)
    for fn in (np.prod, np.sum, np.mean, np.cumsum):
        ref_out = np.zeros(() if fn is not np.cumsum else 40)
        got_out = qt.zeros(ref_out.shape)
        fn(x, out=ref_out)
        fn(qt.asarray(x), out=got_out)
        np.testing.assert_allclose(got_out.numpy(), ref_out, rtol=1e-14, err_msg=fn.__name__)
