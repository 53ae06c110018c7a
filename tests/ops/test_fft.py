"""``qt.fft`` (the Array API 2024.12 FFT extension) against NumPy and JAX.

* forward: every transform against ``numpy.fft`` on fresh random inputs (complex128 and
  float64 at float64 tolerances; complex64 and float32 at float32 tolerances against
  NumPy's double-precision result, with the standard's output dtypes), 1-D to 3-D,
  every ``norm``, ``n``/``s`` padding and cropping, negative axes;
* reverse: ``qt.grad`` of real-valued losses (``sum(abs(f(x))**2 * w)`` and
  ``sum(real(f(x) * conj(c)))``) against ``jax.grad`` of the same loss with
  ``jax.numpy.fft`` in float64 (``jax_enable_x64``), for real and complex ``x``;
* ``fftfreq``/``rfftfreq``/``fftshift``/``ifftshift``, ``qt.jit``, the NumPy protocol
  (``np.fft.fft(t, ...)``) and errors (``qt.fft.<name>: ...``).

The transforms and gradients run with fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt

jax.config.update("jax_enable_x64", True)

NORMS = ["backward", "ortho", "forward"]
C_IN = {"fft", "ifft", "fftn", "ifftn", "irfft", "irfftn", "hfft",   # complex (or promoted real) inputs
        "fft2", "ifft2", "irfft2"}
R_IN = {"rfft", "rfftn", "ihfft", "rfft2"}                            # real inputs only
REAL_OUT = {"irfft", "irfftn", "hfft", "irfft2"}
ONE_D = {"fft", "ifft", "rfft", "irfft", "hfft", "ihfft"}


def data(rng, shape, complex_: bool):
    x = rng.normal(size=shape)
    return x + 1j * rng.normal(size=shape) if complex_ else x


def close(got, want, single=False):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = 2e-5 if single else 1e-11
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def call(xp, name, x, kw):
    if xp is jnp and -1 in kw.get("s", ()):  # JAX takes no -1 sizes: the input's length
        kw = dict(kw, s=tuple(x.shape[a] if v == -1 else v for v, a in zip(kw["s"], kw["axes"])))
    return getattr(xp.fft, name)(x, **kw)


# (name, input shape, keyword arguments): 1-D to 3-D, n/s padding and cropping, negative axes
CASES = [
    ("fft", (8,), {}), ("fft", (3, 5), {"n": 8}), ("fft", (2, 3, 4), {"n": 3, "axis": 1}),
    ("fft", (4, 6), {"axis": -2}), ("fft", (7,), {"n": 7}),
    ("ifft", (6,), {}), ("ifft", (3, 5), {"n": 9, "axis": 0}), ("ifft", (2, 3, 4), {"n": 2, "axis": -3}),
    ("fftn", (8,), {}), ("fftn", (3, 5), {}), ("fftn", (2, 3, 4), {"axes": (0, -1)}),
    ("fftn", (2, 3, 4), {"s": (5, 2), "axes": (-1, 1)}), ("fftn", (3, 4), {"s": (-1, 6), "axes": (0, 1)}),
    ("fftn", (2, 3, 4), {"s": (4, 5, 3), "axes": (0, 1, 2)}),
    ("ifftn", (4, 5), {}), ("ifftn", (2, 3, 4), {"s": (3, 7), "axes": (2, -3)}),
    ("ifftn", (3, 4), {"axes": (-1,)}),
    ("rfft", (8,), {}), ("rfft", (7,), {}), ("rfft", (3, 5), {"n": 8}), ("rfft", (3, 6), {"n": 3}),
    ("rfft", (2, 3, 4), {"axis": -2}), ("rfft", (5, 2), {"n": 9, "axis": 0}),
    ("irfft", (5,), {}), ("irfft", (3, 5), {"n": 7}), ("irfft", (3, 5), {"n": 12}),
    ("irfft", (2, 4, 3), {"axis": 1}), ("irfft", (6, 2), {"n": 5, "axis": -2}),
    ("rfftn", (6,), {}), ("rfftn", (3, 5), {}), ("rfftn", (2, 3, 4), {"axes": (-1, 0)}),
    ("rfftn", (2, 3, 4), {"s": (5, 3), "axes": (1, 2)}), ("rfftn", (3, 4), {"s": (2, 7), "axes": (1, 0)}),
    ("irfftn", (4,), {}), ("irfftn", (3, 5), {}), ("irfftn", (2, 3, 4), {"axes": (0, 1)}),
    ("irfftn", (2, 3, 4), {"s": (4, 5), "axes": (-1, 1)}), ("irfftn", (3, 4), {"s": (5, 7), "axes": (0, 1)}),
    ("hfft", (5,), {}), ("hfft", (3, 4), {"n": 7}), ("hfft", (3, 4), {"n": 3}),
    ("hfft", (4, 2, 3), {"axis": 0, "n": 8}),
    ("ihfft", (8,), {}), ("ihfft", (3, 7), {}), ("ihfft", (3, 5), {"n": 8}),
    ("ihfft", (2, 6, 3), {"n": 4, "axis": -2}),
    # NumPy's two-dimensional transforms (NumPy's signatures: the last two axes by default)
    ("fft2", (3, 4), {}), ("fft2", (2, 3, 4), {"axes": (0, 2)}), ("fft2", (3, 5), {"s": (4, 2)}),
    ("ifft2", (2, 3, 5), {}), ("ifft2", (4, 3), {"s": (5, 6), "axes": (1, 0)}),
    ("rfft2", (4, 6), {}), ("rfft2", (2, 3, 5), {"s": (3, 4), "axes": (1, 2)}),
    ("irfft2", (3, 4), {}), ("irfft2", (2, 3, 4), {"s": (4, 6), "axes": (0, 2)}),
]
IDS = [f"{n}-{'x'.join(map(str, s))}-{'-'.join(f'{k}{v}' for k, v in kw.items())}" for n, s, kw in CASES]


# --- forward ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,shape,kw", CASES, ids=IDS)
def test_forward_float64(fusion, rng, name, shape, kw):
    kinds = [False] if name in R_IN else [True, False]
    for complex_ in kinds:
        x = data(rng, shape, complex_)
        for norm in NORMS:
            got = call(qt, name, qt.asarray(x) * 1.0, dict(kw, norm=norm))  # * 1.0: fused producer
            want = call(np, name, x, dict(kw, norm=norm))
            assert got.dtype == want.dtype, (got.dtype, want.dtype)
            close(got.numpy(), want)


@pytest.mark.parametrize("name,shape,kw", CASES[::3], ids=IDS[::3])
def test_forward_single(rng, name, shape, kw):
    kinds = [False] if name in R_IN else [True, False]
    for complex_ in kinds:
        x = data(rng, shape, complex_)
        x32 = x.astype(np.complex64 if complex_ else np.float32)
        for norm in NORMS:
            got = call(qt, name, qt.asarray(x32), dict(kw, norm=norm))
            want = call(np, name, x32.astype(np.complex128 if complex_ else np.float64), dict(kw, norm=norm))
            assert got.dtype == (np.float32 if name in REAL_OUT else np.complex64)
            close(got.numpy(), want, single=True)


@pytest.mark.parametrize("name", sorted(C_IN | R_IN))
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128", "int32", "bool"])
def test_dtypes(name, dtype):
    x = qt.ones((2, 4), dtype=dtype)
    if name in R_IN and dtype.startswith("complex"):
        with pytest.raises(TypeError, match=f"^qt.fft.{name}: expected a real-valued array"):
            call(qt, name, x, {})
        return
    single = dtype in ("float32", "complex64")
    if name in REAL_OUT:
        want = np.float32 if single else np.float64
    else:
        want = np.complex64 if single else np.complex128
    out = call(qt, name, x, {})
    assert out.dtype == want
    assert out.numpy().dtype == want
    close(out.numpy(), call(np, name, np.ones((2, 4), dtype), {}), single=single)


def test_roundtrips(rng):
    x = data(rng, (3, 4, 5), True)
    r = rng.normal(size=(3, 4, 5))
    for norm in NORMS:
        close(qt.fft.ifft(qt.fft.fft(x, norm=norm), norm=norm).numpy(), x)
        close(qt.fft.ifftn(qt.fft.fftn(x, norm=norm), norm=norm).numpy(), x)
        close(qt.fft.irfft(qt.fft.rfft(r, norm=norm), n=5, norm=norm).numpy(), r)
        close(qt.fft.irfftn(qt.fft.rfftn(r, norm=norm), s=r.shape, axes=(0, 1, 2), norm=norm).numpy(), r)
        close(qt.fft.hfft(qt.fft.ihfft(r, norm=norm), n=5, norm=norm).numpy(), r)


def test_no_axes_and_empty_batch():
    x = qt.ones((2, 3), dtype=qt.float32)
    out = qt.fft.fftn(x, axes=())
    assert out.dtype == qt.complex64 and out.tolist() == [[1 + 0j] * 3] * 2
    e = qt.fft.rfft(qt.zeros((0, 6)))
    assert e.shape == (0, 4) and e.numpy().shape == (0, 4)


def test_s_without_axes_follows_numpy(rng):
    x = rng.normal(size=(2, 3, 4))
    with pytest.warns(DeprecationWarning):
        want = np.fft.fftn(x, s=(5, 2))
    close(qt.fft.fftn(x, s=(5, 2)).numpy(), want)


# --- gradients -------------------------------------------------------------------------
def loss(xp, name, kw, w, c):
    def abs2(x):
        return xp.sum(xp.abs(call(xp, name, x, kw)) ** 2 * w)

    def realdot(x):
        return xp.sum(xp.real(call(xp, name, x, kw) * xp.conj(c)))
    return abs2, realdot


@pytest.mark.parametrize("name,shape,kw", CASES, ids=IDS)
def test_gradients(fusion, rng, name, shape, kw):
    out_shape = call(np, name, np.zeros(shape), kw).shape
    kinds = [False] if name in R_IN else [True, False]
    for complex_ in kinds:
        x = data(rng, shape, complex_)
        for norm in NORMS:
            w = rng.uniform(0.5, 1.5, out_shape)
            c = data(rng, out_shape, name not in REAL_OUT)
            k = dict(kw, norm=norm)
            for fq, fj in zip(loss(qt, name, k, w, c), loss(jnp, name, k, w, c)):
                got = qt.grad(fq)(qt.asarray(x))
                want = jax.grad(fj)(jnp.asarray(x))
                assert got.dtype == x.dtype
                close(got.numpy(), want)


@pytest.mark.parametrize("name,shape,kw", CASES[1::4], ids=IDS[1::4])
def test_vjp_complex_cotangent(rng, name, shape, kw):
    """``qt.vjp`` with a random cotangent of the output's dtype against ``jax.vjp``."""
    x = data(rng, shape, name not in R_IN)
    for norm in NORMS:
        k = dict(kw, norm=norm)
        y, pull = qt.vjp(lambda v, k=k: call(qt, name, v, k), qt.asarray(x))
        yj, pullj = jax.vjp(lambda v, k=k: call(jnp, name, v, k), jnp.asarray(x))
        ct = data(rng, y.shape, np.iscomplexobj(np.asarray(yj)))
        close(y.numpy(), yj)
        close(pull(qt.asarray(ct))[0].numpy(), pullj(jnp.asarray(ct))[0])


def test_gradient_single_precision(rng):
    x = rng.normal(size=(3, 8)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, (3, 5))
    got = qt.grad(lambda v: qt.sum(qt.abs(qt.fft.rfft(v, norm="ortho")) ** 2 * w))(qt.asarray(x))
    want = jax.grad(lambda v: jnp.sum(jnp.abs(jnp.fft.rfft(v, norm="ortho")) ** 2 * w))(x.astype(np.float64))
    assert got.dtype == qt.float32
    close(got.numpy(), want, single=True)


def test_second_order(rng):
    """The rules are written with qt.fft calls: the gradient is differentiable again."""
    x = rng.normal(size=(2, 6)) + 1j * rng.normal(size=(2, 6))
    v = rng.normal(size=(2, 6))
    w = rng.uniform(0.5, 1.5, (2, 4))

    def f(xp):
        def inner(z):
            return xp.sum(xp.abs(xp.fft.rfft(xp.real(xp.fft.ifft(z, norm="ortho")), n=6)) ** 3 * w)
        return lambda z: xp.sum(xp.real(jax.grad(inner)(z) if xp is jnp else qt.grad(inner)(z)) * v)
    close(qt.grad(f(qt))(qt.asarray(x)).numpy(), jax.grad(f(jnp))(jnp.asarray(x)))


def test_fft_between_fused_ops(fusion, rng):
    """Producers and consumers of a transform fuse around the library boundary."""
    x = rng.normal(size=(4, 16))
    got = qt.fft.irfft(qt.fft.rfft(qt.sin(qt.asarray(x)) * 2.0) * (1.0 + 0.5j), n=16) + 1.0
    close(got.numpy(), np.fft.irfft(np.fft.rfft(np.sin(x) * 2.0) * (1.0 + 0.5j), n=16) + 1.0)
    g = qt.grad(lambda v: qt.sum(qt.exp(qt.real(qt.fft.fft(qt.tanh(v), axis=0)) * 0.1)))(qt.asarray(x))
    gj = jax.grad(lambda v: jnp.sum(jnp.exp(jnp.real(jnp.fft.fft(jnp.tanh(v), axis=0)) * 0.1)))(x)
    close(g.numpy(), gj)


# --- jit -------------------------------------------------------------------------------
def test_jit(rng):
    def f(x, k):
        y = qt.fft.rfftn(qt.sin(x), s=(4, 10), axes=(0, 1), norm="ortho")
        return qt.fft.fftshift(qt.fft.irfftn(y * k, s=(4, 10), axes=(0, 1), norm="ortho"), axes=1)

    def ref(x, k):
        y = np.fft.rfftn(np.sin(x), s=(4, 10), axes=(0, 1), norm="ortho")
        return np.fft.fftshift(np.fft.irfftn(y * k, s=(4, 10), axes=(0, 1), norm="ortho"), axes=1)

    jf = qt.jit(f)
    for _ in range(2):
        x, k = rng.normal(size=(3, 8)), data(rng, (4, 6), True)
        close(jf(x, k).numpy(), ref(x, k))
    jg = qt.jit(qt.grad(lambda v: qt.sum(qt.abs(qt.fft.fft(v, n=6)) ** 2 * qt.arange(6.0))))
    for _ in range(2):
        x = data(rng, (2, 5), True)
        want = jax.grad(lambda v: jnp.sum(jnp.abs(jnp.fft.fft(v, n=6)) ** 2 * jnp.arange(6.0)))(x)
        close(jg(qt.asarray(x)).numpy(), want)


# --- frequencies and shifts ------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 8])
@pytest.mark.parametrize("d", [1.0, 0.1, 3])
def test_freqs(n, d):
    for fn in ("fftfreq", "rfftfreq"):
        got = getattr(qt.fft, fn)(n, d=d)
        assert got.dtype == qt.float64
        np.testing.assert_array_equal(got.numpy(), getattr(np.fft, fn)(n, d))
        got32 = getattr(qt.fft, fn)(n, d=d, dtype=qt.float32, device=qt.Device("cpu"))
        assert got32.dtype == qt.float32 and got32.numpy().dtype == np.float32
        np.testing.assert_allclose(got32.numpy(), getattr(np.fft, fn)(n, d), rtol=1e-6)


def test_freq_traced_spacing():
    d = qt.asarray(0.25)
    close(qt.fft.fftfreq(6, d=d).numpy(), np.fft.fftfreq(6, 0.25))
    g = qt.grad(lambda s: qt.sum(qt.fft.rfftfreq(6, d=s) ** 2))(d)
    want = jax.grad(lambda s: jnp.sum((jnp.arange(4) / (6 * s)) ** 2))(0.25)
    close(g.numpy(), want)


@pytest.mark.parametrize("shape", [(5,), (4,), (3, 4), (2, 5, 3)])
@pytest.mark.parametrize("axes", [None, -1, 0, (0, -1)])
def test_shifts(fusion, rng, shape, axes):
    if isinstance(axes, tuple) and len(shape) == 1:
        axes = (0,)
    x = rng.normal(size=shape)
    for name in ("fftshift", "ifftshift"):
        got = getattr(qt.fft, name)(qt.asarray(x) * 2.0, axes=axes)
        np.testing.assert_array_equal(got.numpy(), getattr(np.fft, name)(x * 2.0, axes=axes))
    # differentiable: the gradient of sum(fftshift(x) * w) is ifftshift(w)
    w = rng.normal(size=shape)
    g = qt.grad(lambda v: qt.sum(qt.fft.fftshift(v, axes=axes) * w))(qt.asarray(x))
    np.testing.assert_array_equal(g.numpy(), np.fft.ifftshift(w, axes=axes))
    np.testing.assert_array_equal(qt.fft.ifftshift(qt.fft.fftshift(x, axes=axes), axes=axes).numpy(), x)


def test_shift_complex_and_0d():
    z = qt.asarray([1 + 1j, 2 - 1j, 3j])
    assert qt.fft.fftshift(z).tolist() == [3j, 1 + 1j, 2 - 1j]
    s = qt.asarray(2.0)
    out = qt.fft.fftshift(s)
    assert out is not s and out.item() == 2.0


# --- NumPy protocol --------------------------------------------------------------------
def test_numpy_protocol(rng):
    x = rng.normal(size=(3, 6))
    t = qt.asarray(x)
    for name, args in [("fft", (8, 0, "ortho")), ("ifft", (4,)), ("rfft", (None, -1, "forward")),
                       ("ihfft", (5,)), ("fftn", ((3, 4), (1, 0))), ("rfftn", (None, None, "ortho")),
                       ("fft2", ()), ("rfft2", ((4, 4),))]:
        got = getattr(np.fft, name)(t, *args)
        assert isinstance(got, qt.Tensor), name
        close(got.numpy(), getattr(np.fft, name)(x, *args))
    z = np.fft.rfft2(x)
    for name, args in [("irfft", (7,)), ("hfft", (None, 0)), ("irfftn", ((3, 6), (0, 1))),
                       ("irfft2", ((3, 6),)), ("ifft2", ()), ("ifftn", ())]:
        got = getattr(np.fft, name)(qt.asarray(z), *args)
        assert isinstance(got, qt.Tensor), name
        close(got.numpy(), getattr(np.fft, name)(z, *args))
    np.testing.assert_array_equal(np.fft.fftshift(t, axes=1).numpy(), np.fft.fftshift(x, axes=1))
    np.testing.assert_array_equal(np.fft.ifftshift(t).numpy(), np.fft.ifftshift(x))
    for out in (np.empty((3, 6), complex), qt.zeros((3, 6), dtype=qt.complex128)):
        got = np.fft.fft(t, out=out)   # (NumPy's out=: the result written into it)
        assert got is out
        close(np.asarray(out), np.fft.fft(x))
    with pytest.raises(ValueError, match=r"^numpy\.fft\.fft: out=: could not broadcast"):
        np.fft.fft(t, out=np.empty(6, complex))


# --- errors ----------------------------------------------------------------------------
TRANSFORMS = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft"]


@pytest.mark.parametrize("name", TRANSFORMS)
def test_errors(name):
    x = qt.ones((3, 4))
    with pytest.raises(ValueError, match=f'^qt.fft.{name}: norm must be "backward", "ortho" or "forward"'):
        call(qt, name, x, {"norm": "bad"})
    if name in ONE_D:
        with pytest.raises(np.exceptions.AxisError, match=f"^qt.fft.{name}: axis 2 is out of bounds"):
            call(qt, name, x, {"axis": 2})
        with pytest.raises(np.exceptions.AxisError, match=f"^qt.fft.{name}: axis -3 is out of bounds"):
            call(qt, name, x, {"axis": -3})
        with pytest.raises(ValueError, match=f"^qt.fft.{name}: invalid number of data points \\(0\\)"):
            call(qt, name, x, {"n": 0})
        with pytest.raises(TypeError, match=f"^qt.fft.{name}: n must be an integer"):
            call(qt, name, x, {"n": 2.5})
        with pytest.raises(ValueError, match=f"^qt.fft.{name}: expected an array of at least one dimension"):
            call(qt, name, qt.asarray(1.0), {})
    else:
        with pytest.raises(np.exceptions.AxisError, match=f"^qt.fft.{name}: axis 5 is out of bounds"):
            call(qt, name, x, {"axes": (0, 5)})
        with pytest.raises(ValueError, match=f"^qt.fft.{name}: repeated axis"):
            call(qt, name, x, {"axes": (1, -1)})
        with pytest.raises(ValueError, match=f"^qt.fft.{name}: s and axes must have the same length"):
            call(qt, name, x, {"s": (2, 2), "axes": (0,)})
        with pytest.raises(ValueError, match=f"^qt.fft.{name}: invalid number of data points \\(0\\)"):
            call(qt, name, x, {"s": (0,), "axes": (0,)})
        with pytest.raises(TypeError, match=f"^qt.fft.{name}: axes must be a sequence"):
            call(qt, name, x, {"axes": 0})
    if name in R_IN:
        with pytest.raises(TypeError, match=f"^qt.fft.{name}: expected a real-valued array"):
            call(qt, name, qt.ones(4, dtype=qt.complex64), {})


def test_more_errors():
    with pytest.raises(ValueError, match="^qt.fft.irfft: invalid number of data points \\(0\\)"):
        qt.fft.irfft(qt.ones(1, dtype=qt.complex128))
    with pytest.raises(ValueError, match="^qt.fft.hfft: invalid number of data points \\(0\\)"):
        qt.fft.hfft(qt.ones(1, dtype=qt.complex128))
    with pytest.raises(ValueError, match="^qt.fft.rfftn: needs at least one axis"):
        qt.fft.rfftn(qt.ones(3), axes=())
    with pytest.raises(ValueError, match="^qt.fft.fftfreq: invalid number of data points \\(0\\)"):
        qt.fft.fftfreq(0)
    with pytest.raises(TypeError, match="^qt.fft.rfftfreq: dtype must be a real floating-point dtype"):
        qt.fft.rfftfreq(4, dtype=qt.int32)
    with pytest.raises(np.exceptions.AxisError, match="^qt.fft.fftshift: axis 2 is out of bounds"):
        qt.fft.fftshift(qt.ones((2, 2)), axes=(0, 2))
    with pytest.raises(np.exceptions.AxisError, match="^qt.fft.ifftshift: axis -2 is out of bounds"):
        qt.fft.ifftshift(qt.ones(3), axes=-2)


def test_namespace():
    assert set(qt.fft.__all__) == {
        "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
        "fftfreq", "rfftfreq", "fftshift", "ifftshift", "fft2", "ifft2", "rfft2", "irfft2"}
    assert "fft" in qt.__all__
    for name in qt.fft.__all__:
        fn = getattr(qt.fft, name)
        assert fn.__doc__ and ">>> " in fn.__doc__, name
