"""What evaluates a pending tensor (SPEC §1), what shows its value, and its properties."""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt


def _pending(rng, shape=(4,), dtype=np.float64):
    x = rng.standard_normal(shape).astype(dtype)
    t = qt.asarray(x) * 2.0 + 1.0
    return t, x.astype(np.float64) * 2.0 + 1.0


def _is_pending(t: qt.Tensor) -> bool:
    return t._node.prim != "input"


TRIGGERS = {
    "numpy": lambda t: t.numpy(),
    "np.asarray": lambda t: np.asarray(t),
    "np.array": lambda t: np.array(t),
    "__array__": lambda t: t.__array__(),
    "item": lambda t: t[0].item() if t.ndim else t.item(),
    "float": lambda t: float(t.sum()),
    "int": lambda t: int(t.sum()),
    "bool": lambda t: bool(t.sum() > 0),
    "tolist": lambda t: t.tolist(),
    "repr": repr,
    "str": str,
    "print": lambda t: print(t),
    "format": lambda t: f"{t.sum():.3f}",
    "__dlpack__": lambda t: np.from_dlpack(t),
    "qt.eval": lambda t: qt.eval(t),
}


@pytest.mark.parametrize("name", list(TRIGGERS))
def test_each_trigger_evaluates(rng, name, capsys):
    t, ref = _pending(rng)
    assert _is_pending(t)
    qt.reset_stats()
    TRIGGERS[name](t)
    assert qt.stats()["kernel_launches"] >= 1, f"{name} launched nothing"
    if name not in ("item", "float", "int", "bool", "format"):
        assert not _is_pending(t), f"{name} left the tensor pending"
        qt.reset_stats()
        np.testing.assert_allclose(t.numpy(), ref, rtol=1e-12)
        assert qt.stats()["kernel_launches"] == 0


def test_scalar_conversions_give_values(rng):
    x = rng.standard_normal(5)
    t = qt.asarray(x)
    s = (t * 3.0).sum()
    assert isinstance(float(s), float) and float(s) == pytest.approx(3.0 * x.sum())
    assert isinstance(s.item(), float)
    i = (qt.asarray(np.array([3, 4])) * 2).sum()
    assert int(i) == 14 and isinstance(i.item(), int)
    assert bool(qt.asarray(np.array([1.0])) > 0.5) is True
    assert bool(qt.asarray(np.array([1.0])) < 0.5) is False
    assert isinstance((qt.asarray(np.array([True])) & True).item(), bool)
    assert (t * 1.0).tolist() == pytest.approx(x.tolist())
    assert qt.asarray(np.arange(6).reshape(2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert qt.full((), 2.5).tolist() == 2.5
    assert f"{qt.full((), 2.5) * 2:.2f}" == "5.00"


def test_index_follows_numpy(rng):
    """``operator.index`` (``range(t)``, ``seq[t]``) takes exactly what NumPy takes: a 0-d
    integer tensor; one-element arrays, bools and floats raise ``TypeError`` in both."""
    import operator
    k = int(rng.integers(1, 9))
    for dt in ("int32", "int64", "uint8"):
        t = qt.asarray(np.array(k, dtype=dt)) * 1
        assert operator.index(t) == operator.index(np.array(k, dtype=dt)) == k
        assert list(range(t)) == list(range(k)) and "abcdefghij"[t] == "abcdefghij"[k]
    for bad in (np.array([k]), np.array(True), np.array(float(k)), np.array([[k]])):
        with pytest.raises(TypeError):
            operator.index(bad)
        with pytest.raises(TypeError, match="integer scalar"):
            operator.index(qt.asarray(bad))


def test_ambiguous_truth_value_raises(rng):
    t = qt.asarray(rng.standard_normal(3))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t > 0)
    with pytest.raises(ValueError):
        (t * 2).item()


def test_repr_shows_values():
    t = qt.asarray(np.array([1.5, 2.0, -3.0])) * 2.0
    r = repr(t)
    assert r.startswith("qt.Tensor(")
    for v in ("3.", "4.", "-6."):
        assert v in r
    assert "float32" in repr(qt.ones(2, dtype=qt.float32) + 1)
    assert "int32" in repr(qt.ones(2, dtype=qt.int32) + 1)
    assert "[[0, 1, 2]" in repr(qt.arange(6).reshape(2, 3) + 0).replace("\n", "")
    assert "True" in repr(qt.asarray(np.array([1, 0])) > 0)
    s = str(qt.asarray(np.array([1.0, 2.0])) + 1)
    assert "2." in s and "3." in s


def test_print_shows_values(capsys):
    print(qt.asarray(np.array([7.25, 8.5])) * 2)
    out = capsys.readouterr().out
    assert "14.5" in out and "17." in out


def test_repr_inside_jit_does_not_concretize():
    seen = []

    @qt.jit
    def f(x):
        seen.append(repr(x * 2))
        return x

    f(qt.ones(3))
    assert "traced" in seen[0] and "(3,)" in seen[0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint32", "bool"])
def test_properties(rng, dtype):
    x = (rng.standard_normal((2, 3, 4)) * 10).astype(dtype)
    t = qt.asarray(x)
    pending = t + t if dtype != "bool" else t | t
    for tensor in (t, pending):
        assert tensor.shape == (2, 3, 4) and type(tensor.shape) is tuple
        assert all(type(d) is int for d in tensor.shape)
        assert isinstance(tensor.dtype, np.dtype) and tensor.dtype == np.dtype(dtype)
        assert tensor.ndim == 3 and type(tensor.ndim) is int
        assert tensor.size == 24 and type(tensor.size) is int
        assert isinstance(tensor.device, qt.Device)
        assert str(tensor.device) == "cpu"
        assert tensor.T.shape == (4, 3, 2)
        assert len(tensor) == 2
    np.testing.assert_array_equal(t.T.numpy(), x.T)
    np.testing.assert_array_equal(pending.T.numpy(), (x + x if dtype != "bool" else x | x).T)


def test_properties_need_no_evaluation(rng):
    t, _ = _pending(rng, (5, 6))
    qt.reset_stats()
    _ = t.shape, t.dtype, t.ndim, t.size, t.device, t.T.shape, len(t)
    assert qt.stats()["kernel_launches"] == 0
    assert _is_pending(t)


def test_dtype_aliases_are_numpy_dtypes():
    assert qt.float32 is np.dtype("float32") or qt.float32 == np.dtype("float32")
    for name in ("float32", "float64", "int32", "int64", "uint32", "bool_"):
        assert isinstance(getattr(qt, name), np.dtype)
        assert getattr(qt, name) == np.dtype(name.rstrip("_"))


def test_zero_dim_tensors():
    t = qt.asarray(np.float32(3.0)) * 2
    assert t.shape == () and t.ndim == 0 and t.size == 1
    assert float(t) == 6.0
    with pytest.raises(TypeError):
        len(t)
    assert t.T.shape == ()


def test_empty_elementwise_result(fusion):
    t = qt.asarray(np.zeros((0, 3))) + 1.0
    assert t.shape == (0, 3) and t.size == 0
    out = t.numpy()
    assert isinstance(out, np.ndarray) and out.shape == (0, 3) and out.dtype == np.float64
    assert t.tolist() == []
    assert qt.zeros((0, 3)).numpy().shape == (0, 3)


def test_reductions_over_empty_axes(fusion):
    a = qt.asarray(np.zeros((0, 3)))
    np.testing.assert_array_equal(a.sum(axis=0).numpy(), np.zeros(3))
    np.testing.assert_array_equal(a.prod(axis=0).numpy(), np.ones(3))
    assert a.sum().item() == 0.0
    assert a.sum(axis=1).numpy().shape == (0,)


def test_devices():
    devs = qt.devices()
    assert isinstance(devs, list) and devs
    assert all(isinstance(d, qt.Device) for d in devs)
    assert any(str(d) == "cpu" for d in devs)
    cpu = qt.Device("cpu")
    assert cpu == devs[0] and cpu == "cpu" and hash(cpu) == hash(qt.Device("cpu"))
    assert str(cpu) == "cpu" and repr(cpu) == "Device('cpu')"
    assert qt.zeros(3).device == cpu
    assert qt.zeros(3, device="cpu").device == cpu
    assert qt.Device(cpu) == cpu


def test_sync_returns():
    t = qt.ones(3) + 1
    t.numpy()
    assert qt.sync() is None


def test_evaluated_values_are_read_only(rng):
    t, _ = _pending(rng)
    arr = t.numpy()
    with pytest.raises(ValueError):
        arr[0] = 1.0


def test_matmul_writes_into_the_runtimes_buffers(rng, monkeypatch):
    """A matrix product is written into a buffer of the device runtime (whose large buffers
    are reused, where NumPy's own large result is fresh memory, page faults and all), when
    its result comes out in the node's dtype; values as NumPy's either way. (The contracted
    dimension, 8, is above the products written as multiply-adds.)"""
    from qtrace.devices import library

    seen = []
    impl = library.IMPLEMENTATIONS[("matmul", "cpu")]

    def spy(xp, static, a, b, out=None):
        seen.append(out)
        return impl(xp, static, a, b, out=out)

    monkeypatch.setitem(library.IMPLEMENTATIONS, ("matmul", "cpu"), spy)
    a, b = rng.standard_normal((600, 8)), rng.standard_normal((8, 400))
    got = (qt.asarray(a) @ qt.asarray(b)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-13)
    assert seen[-1] is not None and np.shares_memory(got, seen[-1][0])
    i = rng.integers(-5, 5, (7, 8)).astype(np.int8)
    got = (qt.asarray(i) @ qt.asarray(b[:, :5].astype(np.float32))).numpy()
    want = i @ b[:, :5].astype(np.float32)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("shapes", [((0, 1), (1, 3)), ((2, 0), (0, 3)), ((0, 4), (4, 0))])
def test_matrix_products_of_empty_constants(shapes, fusion):
    """An empty operand made by ``zeros`` (a constant no task computes) read through a view by
    the matrix product: its buffer is allocated empty (it was None: AttributeError), and an
    empty contracted axis gives zeros, as NumPy."""
    (n, k), (k2, m) = shapes
    got = qt.zeros(n * k).reshape(n, k).T.T @ qt.zeros((m, k2)).T
    want = np.zeros((n, k)) @ np.zeros((k2, m))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
