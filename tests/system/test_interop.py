"""NumPy protocols and DLPack on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt


def test_dlpack_export_to_numpy(rng, fusion):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = qt.asarray(x) * 2.0
    arr = np.from_dlpack(t)
    assert isinstance(arr, np.ndarray)
    assert arr.shape == (3, 4) and arr.dtype == np.float32
    np.testing.assert_allclose(arr, x * 2, rtol=1e-6)
    # zero-copy: the export views the tensor's own buffer
    assert np.shares_memory(arr, t.numpy())


def test_dlpack_device():
    assert qt.ones(2).__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint32", "bool"])
def test_from_dlpack_is_zero_copy(rng, dtype):
    x = (rng.standard_normal(10) * 5).astype(dtype)
    t = qt.from_dlpack(x)
    assert isinstance(t, qt.Tensor) and t.dtype == x.dtype and t.shape == x.shape
    assert np.shares_memory(t.numpy(), x)
    np.testing.assert_array_equal(t.numpy(), x)


def test_from_dlpack_strided_and_round_trip(rng):
    base = rng.standard_normal((6, 8))
    view = base[::2, 1::3]
    t = qt.from_dlpack(view)
    np.testing.assert_array_equal(t.numpy(), view)
    np.testing.assert_allclose((t * 2).numpy(), view * 2)
    back = qt.from_dlpack(qt.asarray(base) + 1.0)  # tensor -> tensor through DLPack
    np.testing.assert_allclose(back.numpy(), base + 1)


def test_asarray_takes_dlpack_objects(rng):
    class OnlyDLPack:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    x = rng.standard_normal(5)
    t = qt.asarray(OnlyDLPack(x))
    np.testing.assert_array_equal(t.numpy(), x)


def test_asarray_is_zero_copy_and_array_copies(rng):
    x = rng.standard_normal(8)
    assert np.shares_memory(qt.asarray(x).numpy(), x)
    c = qt.array(x)
    assert not np.shares_memory(c.numpy(), x)
    x[0] = 123.0
    assert c.numpy()[0] != 123.0


def test_array_protocol(rng):
    x = rng.standard_normal(4)
    t = qt.asarray(x) + 1.0
    a = np.asarray(t)
    assert isinstance(a, np.ndarray)
    np.testing.assert_allclose(a, x + 1)
    np.testing.assert_allclose(np.asarray(t, dtype=np.float32), (x + 1).astype(np.float32))
    np.testing.assert_allclose(np.array(t), x + 1)
    assert np.array(t, copy=True) is not t.numpy()


@pytest.mark.parametrize("ufunc", [np.sin, np.exp, np.sqrt, np.negative, np.absolute, np.floor])
def test_array_ufunc_unary_returns_tensor(rng, ufunc):
    x = rng.uniform(0.1, 2.0, 6)
    t = qt.asarray(x)
    r = ufunc(t)
    assert isinstance(r, qt.Tensor)
    np.testing.assert_allclose(r.numpy(), ufunc(x), rtol=1e-12)


@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.divide,
                                   np.power, np.maximum, np.less, np.arctan2, np.hypot])
def test_array_ufunc_binary_returns_tensor(rng, ufunc):
    x, y = rng.uniform(0.1, 2.0, 6), rng.uniform(0.1, 2.0, 6)
    t = qt.asarray(x)
    for args in ((t, y), (x, t), (t, t), (t, 2.0)):
        r = ufunc(*args)
        assert isinstance(r, qt.Tensor), f"np.{ufunc.__name__}{tuple(type(a).__name__ for a in args)}"
        ref = ufunc(*[a.numpy() if isinstance(a, qt.Tensor) else a for a in args])
        np.testing.assert_allclose(r.numpy(), ref, rtol=1e-12)


def test_ndarray_operators_with_tensor_return_tensors(rng):
    x, y = rng.uniform(0.5, 2, 5), rng.uniform(0.5, 2, 5)
    t = qt.asarray(y)
    for r, ref in ((x + t, x + y), (x - t, x - y), (x * t, x * y), (x / t, x / y),
                   (x ** t, x ** y), (x < t, x < y)):
        assert isinstance(r, qt.Tensor)
        np.testing.assert_allclose(r.numpy(), ref)


def test_array_ufunc_dtype_keyword(rng):
    t = qt.asarray(rng.standard_normal(3))
    r = np.add(t, 1.0, dtype=np.float32)
    assert isinstance(r, qt.Tensor) and r.dtype == np.float32


def test_array_ufunc_out_falls_back_to_numpy(rng):
    x = rng.standard_normal(4)
    out = np.empty(4)
    np.sin(qt.asarray(x), out=out)
    np.testing.assert_allclose(out, np.sin(x))


def test_array_function(rng, fusion):
    x = rng.standard_normal((3, 4))
    t = qt.asarray(x)
    s = np.sum(t)
    assert isinstance(s, qt.Tensor)
    np.testing.assert_allclose(s.item(), x.sum())
    s1 = np.sum(t, axis=1)
    assert isinstance(s1, qt.Tensor)
    np.testing.assert_allclose(s1.numpy(), x.sum(axis=1))
    c = np.concatenate([t, t])
    assert isinstance(c, qt.Tensor) and c.shape == (6, 4)
    np.testing.assert_array_equal(c.numpy(), np.concatenate([x, x]))
    c1 = np.concatenate([t, t * 2], axis=1)
    np.testing.assert_allclose(c1.numpy(), np.concatenate([x, x * 2], axis=1))
    for fn in (np.mean, np.max, np.transpose, np.ravel, np.cumsum):
        r = fn(t)
        assert isinstance(r, qt.Tensor), fn.__name__
        np.testing.assert_allclose(r.numpy(), fn(x), rtol=1e-12, err_msg=fn.__name__)
    w = np.where(t > 0, t, 0.0)
    assert isinstance(w, qt.Tensor)
    np.testing.assert_allclose(w.numpy(), np.where(x > 0, x, 0.0))


@pytest.mark.parametrize("call", [
    lambda t: np.roots(t), lambda t: np.linalg.eig(t.reshape(2, 3)[:, :2]),
    lambda t: np.add.reduceat(t, [0, 2]), lambda t: np.sin(t, where=t > 0),
    lambda t: np.lib.stride_tricks.sliding_window_view(t, 2),
    lambda t: np.linalg.eigvals(t.reshape(2, 3)[:, :2])])
def test_numpy_functions_qtrace_lacks_raise_type_error(rng, call):
    """Never a silent fallback: NumPy would compute on the values and drop laziness and
    gradients; qtrace names the function and says how to proceed."""
    t = qt.asarray(rng.standard_normal(6))
    with pytest.raises(TypeError, match=r"numpy\.\w+.*np\.asarray"):
        call(t)


def test_no_numpy_function_drops_a_gradient(rng):
    """A NumPy function reached on a tensor under qt.grad either differentiates (as JAX does)
    or raises; it never returns a value whose gradient is silently zero."""
    x = rng.standard_normal(5)
    w = rng.standard_normal(5)
    g = qt.grad(lambda t: qt.sum(np.roll(t, 2) * w))(qt.asarray(x))
    np.testing.assert_allclose(g.numpy(), np.roll(w, -2))
    g = qt.grad(lambda t: qt.sum(np.logaddexp(t, 0.5 * t)))(qt.asarray(x))
    np.testing.assert_allclose(g.numpy(), (np.exp(x) + 0.5 * np.exp(0.5 * x)) / (np.exp(x) + np.exp(0.5 * x)))
    g = qt.grad(lambda t: qt.sum(np.sort(t) * w))(qt.asarray(x))
    np.testing.assert_allclose(g.numpy(), w[np.argsort(np.argsort(x))])
    u = rng.standard_normal(9)   # d/dt sum(u * convolve(t, w)) = correlate(u, w, 'valid')
    g = qt.grad(lambda t: qt.sum(np.convolve(t, w) * u))(qt.asarray(x))
    np.testing.assert_allclose(g.numpy(), np.correlate(u, w, "valid"), rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError):
        qt.grad(lambda t: qt.sum(np.roots(t)))(qt.asarray(x))


def test_value_consumers_and_ufunc_methods(rng, tmp_path):
    x = rng.standard_normal(6)
    t = qt.asarray(x)
    np.save(tmp_path / "t.npy", t)
    np.testing.assert_array_equal(np.load(tmp_path / "t.npy"), x)
    np.testing.assert_allclose(np.add.reduce(t).item(), x.sum())
    np.testing.assert_allclose(np.asarray(np.multiply.outer(t, t)), np.multiply.outer(x, x))
    np.testing.assert_allclose(np.asarray(np.add.accumulate(t)), np.add.accumulate(x))
    acc, ref = qt.zeros(3), np.zeros(3)
    np.add.at(acc, [0, 0, 2], t[:3])
    np.add.at(ref, [0, 0, 2], x[:3])
    np.testing.assert_allclose(np.asarray(acc), ref)
    out, ref = qt.zeros(6), np.zeros(6)
    view = out[::2]
    np.sin(t[::2], out=view)
    np.sin(x[::2], out=ref[::2])
    np.testing.assert_allclose(np.asarray(out), ref)
