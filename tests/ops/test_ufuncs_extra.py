"""NumPy ufuncs and elementwise functions beyond SPEC §2 (``qtrace/tracer/elementwise.py``).

New primitives (``cbrt``, ``fmod``, ``ldexp``, ``frexp``, ``gcd``, ``lcm``,
``bitwise_count``) also have op-table rows (``op_table.py``), so the forward, gradient and
GPU suites cover them; the composites (``fabs``, ``divmod``, ``modf``, ``float_power``,
``fix``, ``isposinf``, ``isneginf``, ``bitwise_not``, ``sinc``, ``spacing``, ``i0``) are
tested here with the case harness (``composite_cases.py``): results against NumPy (dtype,
shape, values), gradients against ``jax.grad``; then special values (NaN, infinities, signed
zeros, subnormals, integer extremes, division by zero), dispatch from NumPy (multi-output
ufuncs and ``out=`` included), ``qt.jit`` and errors.

Every test runs with fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

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

FLOATS = ("float64", "float32")
INTS = ("int8", "int32", "int64", "uint32")


# --- inputs --------------------------------------------------------------------------
def tiny(rng, shape, dtype):
    """Floats around the subnormal range (both signs, zeros among them); ints as ``wide``."""
    dt = np.dtype(dtype)
    if dt.kind != "f":
        return wide(rng, shape, dtype)
    fi = np.finfo(dt)
    lo, hi = np.log2(float(fi.smallest_subnormal)), np.log2(float(fi.smallest_normal)) + 4
    x = np.exp2(rng.uniform(lo, hi, shape))
    x = np.where(rng.random(shape) < 0.5, -x, x)
    return np.where(rng.random(shape) < 0.1, 0.0, x).astype(dt)


def extremes(rng, shape, dtype):
    """Edge values of the dtype in random order: ±max, ±smallest (sub)normals, powers of
    two, NaN, ±inf, ±0 (floats); min, max, 0, ±1 and small values (integers)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        fi = np.finfo(dt)
        pool = [fi.max, fi.smallest_subnormal, fi.smallest_normal, 2.0 ** fi.nmant, 1.0, 0.5,
                np.nan, np.inf, 0.0, 3.0, float(fi.max) / 3]
        pool = np.array(pool + [-float(v) for v in pool], dtype=dt)
    elif dt.kind == "b":
        pool = np.array([False, True])
    else:
        ii = np.iinfo(dt)
        pool = np.array([ii.min, ii.max, 0, 1, 2, 6, ii.max - 1, ii.min + 1, ii.max // 2 + 1]
                        + ([-1, -6, -4] if dt.kind == "i" else [12, 4]), dtype=dt)
    return rng.choice(pool, shape)


def with_zeros(rng, shape, dtype):
    """Normal values, a third of them exactly 0."""
    x = wide(rng, shape, dtype) / (10 if np.dtype(dtype).kind == "f" else 1)
    return np.where(rng.random(shape) < 1 / 3, 0, x).astype(dtype)


def exponents(rng, shape, dtype):
    """Integer-valued arguments for ldexp's exponent: wide as floats (cast by the case)."""
    return (rng.standard_normal(shape) * 600).astype(dtype) if np.dtype(dtype).kind == "f" \
        else rng.integers(-9, 10, shape).astype(dtype)


def _ldexp(xp, x, n):
    """ldexp with an int32 exponent (the second argument drawn in the case's dtype)."""
    return xp.ldexp(x, xp.astype(n, "int32"))


def _floor_divide_array_api(x, y):
    """NumPy's floor division, but ``floor(x / y)`` where an operand is infinite (qtrace's
    ``floor_divide``, the Array API's special cases, also used by ``divmod``)."""
    q = np.floor_divide(x, y)
    if q.dtype.kind != "f":
        return q
    return np.where(np.isinf(x) | np.isinf(y), np.floor(x / y), q).astype(q.dtype)


# --- the cases -----------------------------------------------------------------------
CASES = [
    Case("cbrt", lambda xp, x: xp.cbrt(x), [(3, 4)], dtypes=FLOATS + ("int32",), gen=wide),
    Case("cbrt-special", lambda xp, x: xp.cbrt(x), [(24,)], dtypes=FLOATS, gen=specials, grad=None),
    Case("cbrt-tiny", lambda xp, x: xp.cbrt(x), [(24,)], dtypes=FLOATS, gen=tiny, grad=None),
    Case("fabs", lambda xp, x: xp.fabs(x), [(3, 4)], dtypes=FLOATS + ("uint32",)),
    Case("fabs-special", lambda xp, x: xp.fabs(x), [(24,)], dtypes=FLOATS, gen=specials,
         grad=None),
    Case("fmod", lambda xp, x, y: xp.fmod(x, y), [(3, 1), (4,)], dtypes=FLOATS + ("int32",),
         gen=wide, grad_gen=positive),
    Case("fmod-special", lambda xp, x, y: xp.fmod(x, y), [(12, 1), (12,)], dtypes=FLOATS,
         gen=specials, grad=None),
    Case("fmod-int-edges", lambda xp, x, y: xp.fmod(x, y), [(16, 1), (16,)], dtypes=INTS,
         gen=extremes, grad=None),
    Case("fmod-scalar", lambda xp, x: xp.fmod(x, -3), [(7,)], dtypes=FLOATS + ("int32",), gen=wide),
    Case("divmod", lambda xp, x, y: xp.divmod(x, y), [(3, 1), (4,)], dtypes=FLOATS + ("int32",),
         gen=wide, grad_gen=positive),
    Case("divmod-int-edges", lambda xp, x, y: xp.divmod(x, y), [(16, 1), (16,)], dtypes=INTS,
         gen=extremes, grad=None),
    Case("modf", lambda xp, x: xp.modf(x), [(3, 4)], dtypes=FLOATS + ("int32",), gen=wide),
    Case("modf-special", lambda xp, x: xp.modf(x), [(24,)], dtypes=FLOATS, gen=specials,
         grad=None),
    Case("frexp", lambda xp, x: xp.frexp(x), [(3, 4)], dtypes=FLOATS + ("int32",), gen=wide,
         ref64=False),
    Case("frexp-tiny", lambda xp, x: xp.frexp(x), [(24,)], dtypes=FLOATS, gen=tiny, grad=None,
         ref64=False),
    Case("frexp-extremes", lambda xp, x: xp.frexp(x), [(24,)], dtypes=FLOATS, gen=extremes,
         grad=None, ref64=False),
    Case("ldexp", _ldexp, [(3, 1), (4,)], dtypes=FLOATS + ("int32",), gen=wide, grad_args=(0,),
         ref64=False),
    Case("ldexp-range", lambda xp, x, n: _ldexp(xp, x, n), [(12, 1), (12,)], dtypes=FLOATS,
         gen=exponents, grad=None, ref64=False),
    Case("ldexp-tiny", lambda xp, x: xp.ldexp(x, xp.asarray([-30, -3, 0, 5, 60, 1100])),
         [(4, 6)], dtypes=FLOATS, gen=tiny, grad=None, ref64=False),
    Case("ldexp-int64-exp", lambda xp, x: xp.ldexp(x, xp.asarray([2**40, -2**40, -1075, 1024])),
         [(3, 4)], dtypes=FLOATS, gen=extremes, grad=None, ref64=False),
    Case("float_power", lambda xp, x, y: xp.float_power(x, y), [(3, 1), (4,)],
         dtypes=FLOATS + ("int32",), gen=positive),
    Case("float_power-neg", lambda xp, x: xp.float_power(x, -2), [(5,)], dtypes=("int32", "float32"),
         gen=positive),
    Case("fix", lambda xp, x: xp.fix(x), [(3, 4)], dtypes=FLOATS + ("int32", "bool"), gen=wide,
         grad="fd"),   # (jax.numpy.fix is gone from JAX 0.10)
    Case("fix-special", lambda xp, x: xp.fix(x), [(24,)], dtypes=FLOATS, gen=specials, grad=None),
    Case("isposinf", lambda xp, x: xp.isposinf(x), [(24,)], dtypes=FLOATS + ("int32", "bool"),
         gen=specials, grad=None),
    Case("isneginf", lambda xp, x: xp.isneginf(x), [(24,)], dtypes=FLOATS + ("uint32",),
         gen=specials, grad=None),
    Case("bitwise_not", lambda xp, x: xp.bitwise_not(x), [(3, 4)], dtypes=INTS + ("bool",),
         gen=extremes, grad=None),
    Case("gcd", lambda xp, x, y: xp.gcd(x, y), [(3, 1), (4,)], dtypes=("int32", "uint32"), gen=wide,
         grad=None),
    Case("gcd-edges", lambda xp, x, y: xp.gcd(x, y), [(16, 1), (16,)], dtypes=INTS, gen=extremes,
         grad=None),
    Case("lcm", lambda xp, x, y: xp.lcm(x, y), [(3, 1), (4,)], dtypes=("int32", "uint32"), gen=wide,
         grad=None),
    Case("lcm-edges", lambda xp, x, y: xp.lcm(x, y), [(16, 1), (16,)], dtypes=INTS, gen=extremes,
         grad=None),
    Case("bitwise_count", lambda xp, x: xp.bitwise_count(x), [(24,)], dtypes=INTS + ("bool",),
         gen=extremes, grad=None),
    Case("sinc", lambda xp, x: xp.sinc(x), [(3, 4)], dtypes=FLOATS + ("int32", "bool"),
         gen=with_zeros),
    Case("sinc-special", lambda xp, x: xp.sinc(x), [(24,)], dtypes=FLOATS, gen=specials, grad=None),
    Case("sinc-complex", lambda xp, x: xp.sinc(x * (1 + 0.5j)), [(6,)], dtypes=("float64",),
         gen=with_zeros, grad=None),
    Case("spacing", lambda xp, x: xp.spacing(x), [(3, 4)], dtypes=FLOATS + ("int32",), gen=wide,
         grad=None, ref64=False),
    Case("spacing-tiny", lambda xp, x: xp.spacing(x), [(24,)], dtypes=FLOATS, gen=tiny, grad=None,
         ref64=False),
    Case("spacing-extremes", lambda xp, x: xp.spacing(x), [(24,)], dtypes=FLOATS, gen=extremes,
         grad=None, ref64=False),
    Case("i0", lambda xp, x: xp.i0(x), [(3, 4)], dtypes=("float64", "int32"), gen=wide),
    # (float32 from 88.7 on: NumPy's exp overflows before i0 does; below that, both agree)
    Case("i0-float32", lambda xp, x: xp.i0(x * 15), [(3, 4)], dtypes=("float32",), grad=None),
    Case("i0-large", lambda xp, x: xp.i0(x * 30), [(24,)], dtypes=("float64",), gen=wide, grad=None),
    Case("i0-special", lambda xp, x: xp.i0(x), [(24,)], dtypes=FLOATS, gen=specials, grad=None),
]


@pytest.mark.parametrize("case,dtype", forward_params(CASES))
def test_forward(case, dtype, rng, fusion):
    run_forward(case, dtype, rng)


@pytest.mark.parametrize("case", gradient_params(CASES))
def test_gradient(case, rng, fusion):
    run_gradient(case, rng)


# --- special values ------------------------------------------------------------------
def _same_bits(got: qt.Tensor, want: np.ndarray, what: str) -> None:
    """Equal values, NaN where NumPy has NaN, and the same sign on zeros."""
    v = got.numpy()
    assert v.dtype == want.dtype, what
    np.testing.assert_array_equal(v, want, err_msg=what)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(v[zero]), np.signbit(want[zero]), err_msg=what)


SIGNED_ZEROS = {
    "modf": lambda xp, x: xp.modf(x),
    "frexp": lambda xp, x: xp.frexp(x),
    "fix": lambda xp, x: xp.fix(x),
    "fabs": lambda xp, x: xp.fabs(x),
    "fmod": lambda xp, x: xp.fmod(x, 2.0),
    "fmod-neg": lambda xp, x: xp.fmod(x, -0.75),
    "ldexp": lambda xp, x: xp.ldexp(x, -1080),
    "remainder-of-divmod": lambda xp, x: xp.divmod(x, -2.0)[1],
    "spacing": lambda xp, x: xp.spacing(x),
    # not correctly rounded in general: checked on the special values only
    "cbrt": lambda xp, x: xp.cbrt(x),
    "sinc": lambda xp, x: xp.sinc(x),
}
_ROUNDED = {"cbrt", "sinc"}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(SIGNED_ZEROS))
def test_special_values_bit_exact(name, dtype, fusion):
    """±0, ±inf, NaN, subnormals, integers and halves: exactly NumPy's (signs of zeros too)."""
    fi = np.finfo(dtype)
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0, -2.0, 2.5, -2.5, -0.25, 1.0, -6.0,
                  float(fi.smallest_subnormal), -float(fi.smallest_subnormal), float(fi.max),
                  -float(fi.smallest_normal)], dtype=dtype)
    if name in _ROUNDED:
        x = x[:5]
    fn = SIGNED_ZEROS[name]
    with np.errstate(all="ignore"):
        want = fn(np, x)
    got = fn(qt, qt.asarray(x))
    for i, (g, w) in enumerate(zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,))))):
        _same_bits(g, np.asarray(w), f"{name}[{i}]")


def test_divmod_float_specials_follow_floor_divide(rng, fusion):
    """divmod is (floor_divide, remainder): NumPy's values where both operands are finite;
    an infinite operand gives ``floor(x / y)`` as ``qt.floor_divide`` does (NumPy: NaN)."""
    x, y = specials(rng, (12, 1), "float64"), specials(rng, (12,), "float64")
    q, r = qt.divmod(qt.asarray(x), qt.asarray(y))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(q.numpy(), _floor_divide_array_api(x, y))
        np.testing.assert_array_equal(r.numpy(), np.remainder(x, y))
        np.testing.assert_array_equal(q.numpy(), qt.floor_divide(qt.asarray(x), qt.asarray(y)).numpy())


@pytest.mark.parametrize("dtype", ("int8", "int64", "uint32"))
def test_integer_division_by_zero_gives_zero(dtype, fusion):
    """fmod, divmod by 0 and MIN by -1: NumPy's 0 (no trap); gcd/lcm with 0 and MIN."""
    info = np.iinfo(dtype)
    x = np.array([7, 0, info.min, info.max, info.min, 5], dtype=dtype)
    y = np.array([0, 0, 0, 0, -1 if info.min else 3, 0], dtype=dtype)
    with np.errstate(all="ignore"):
        for fn in (np.fmod, np.gcd, np.lcm, np.floor_divide, np.remainder):
            np.testing.assert_array_equal(fn(qt.asarray(x), qt.asarray(y)).numpy(), fn(x, y),
                                          err_msg=fn.__name__)
        for g, w in zip(qt.divmod(qt.asarray(x), qt.asarray(y)), np.divmod(x, y)):
            np.testing.assert_array_equal(g.numpy(), w)


def test_gcd_lcm_exhaustive_small(fusion):
    """Every pair of int8 values (the whole table, MIN included), and a large int64 sample."""
    v = np.arange(-128, 128, dtype=np.int8)
    a, b = v[:, None], v[None, :]
    np.testing.assert_array_equal(qt.gcd(qt.asarray(a), qt.asarray(b)).numpy(), np.gcd(a, b))
    np.testing.assert_array_equal(qt.lcm(qt.asarray(a), qt.asarray(b)).numpy(), np.lcm(a, b))


def test_gcd_of_large_int64(rng, fusion):
    """Random 62-bit operands (the most steps of the binary algorithm) and Fibonacci pairs."""
    x = rng.integers(-(2**62), 2**62, 64)
    y = rng.integers(-(2**62), 2**62, 64)
    fib = [1, 1]
    while len(fib) < 92:
        fib.append(fib[-1] + fib[-2])
    x = np.concatenate([x, np.array(fib[1:], dtype=np.int64)])
    y = np.concatenate([y, np.array(fib[:-1], dtype=np.int64)])
    np.testing.assert_array_equal(qt.gcd(qt.asarray(x), qt.asarray(y)).numpy(), np.gcd(x, y))
    np.testing.assert_array_equal(qt.lcm(qt.asarray(x), qt.asarray(y)).numpy(), np.lcm(x, y))


def test_ldexp_frexp_round_trip(rng, fusion):
    """ldexp(frexp(x)) == x over the whole float range, subnormals included."""
    for dtype in FLOATS:
        x = np.concatenate([tiny(rng, (40,), dtype), wide(rng, (40,), dtype),
                            extremes(rng, (40,), dtype)])
        m, e = qt.frexp(qt.asarray(x))
        np.testing.assert_array_equal(qt.ldexp(m, e).numpy(), x)


def test_ldexp_underflow_rounds_once(fusion):
    """Results in the subnormal range are rounded once (as C's ldexp), from any scale."""
    for dtype in FLOATS:
        fi = np.finfo(dtype)
        x = np.array([1.5, 1.75, 1.0 + float(fi.eps), 3.0, -1.25, 1.5 * float(fi.max) / 2], dtype=dtype)
        n = np.array([fi.minexp - fi.nmant - 1, fi.minexp - fi.nmant - 2, fi.minexp - 3,
                      fi.minexp - fi.nmant, -fi.nmant + fi.minexp - 1, 2 * fi.minexp], dtype=np.int32)
        a, b = x[:, None], n[None, :]
        np.testing.assert_array_equal(qt.ldexp(qt.asarray(a), qt.asarray(b)).numpy(), np.ldexp(a, b))


def test_dtypes_follow_numpy(fusion):
    f32 = qt.asarray(np.ones(3, np.float32))
    i32 = qt.asarray(np.ones(3, np.int32))
    u8 = qt.asarray(np.ones(3, np.uint8))
    assert qt.frexp(f32)[1].dtype == np.int32 and qt.frexp(f32)[0].dtype == np.float32
    assert qt.frexp(i32)[0].dtype == np.float64
    assert qt.ldexp(f32, 2).dtype == np.float32
    assert qt.ldexp(f32, qt.asarray(np.ones(3, np.int64))).dtype == np.float32
    assert qt.float_power(f32, 2).dtype == np.float64
    assert qt.fabs(i32).dtype == np.float64
    assert qt.cbrt(f32).dtype == np.float32
    assert qt.fmod(u8, 3).dtype == np.uint8
    assert qt.bitwise_count(i32).dtype == np.uint8
    assert qt.gcd(u8, i32).dtype == np.gcd(np.ones(1, np.uint8), np.ones(1, np.int32)).dtype
    assert qt.sinc(i32).dtype == np.float64 and qt.i0(f32).dtype == np.float32
    assert qt.spacing(f32).dtype == np.float32 and qt.fix(i32).dtype == np.int32
    assert qt.modf(f32)[0].dtype == np.float32
    assert qt.divmod(i32, 2.5)[0].dtype == np.float64
    assert qt.isposinf(i32).dtype == np.bool_


def test_empty_and_0d(fusion):
    for fn in (qt.cbrt, qt.spacing, qt.sinc, qt.i0, qt.fix, qt.isneginf):
        assert fn(qt.zeros((0, 3))).shape == (0, 3)
        assert fn(qt.asarray(2.0)).shape == ()
    m, e = qt.frexp(qt.zeros((0,)))
    assert m.shape == e.shape == (0,)
    f, w = qt.modf(qt.asarray(-3.5))
    assert f.item() == -0.5 and w.item() == -3.0
    m, e = qt.frexp(6.0)   # a Python scalar (the mantissa is folded)
    assert (m.item(), e.item()) == (0.75, 3)


# --- gradients at special points -----------------------------------------------------
def test_sinc_gradient_at_zero_like_jax(fusion):
    """JAX's gradient at 0 and away from it; near 0 the derivative itself, ``-pi**2 x / 3``
    to within ``(pi x)**2 / 10`` relative (the quotient's derivative cancels there: JAX's own
    value at 1e-9 is 0 or -3.3e-9 depending on its build)."""
    x = np.array([0.0, 0.0, 0.5, -2.0, 0.3])
    got = qt.grad(lambda t: qt.sum(qt.sinc(t)))(qt.asarray(x)).numpy()
    np.testing.assert_allclose(got, jax.grad(lambda t: jnp.sum(jnp.sinc(t)))(x), rtol=1e-9, atol=1e-12)
    tiny = np.array([1e-9, -2e-7, 3e-5, 1e-12])
    got = qt.grad(lambda t: qt.sum(qt.sinc(t)))(qt.asarray(tiny)).numpy()
    np.testing.assert_allclose(got, -np.pi ** 2 * tiny / 3, rtol=1e-8, atol=0)
    # second derivative at 0: -pi**2 / 3 (JAX's Maclaurin rule)
    d2 = qt.grad(lambda t: qt.grad(lambda u: qt.sum(qt.sinc(u)))(t).sum())(qt.asarray(np.zeros(2)))
    np.testing.assert_allclose(d2.numpy(), -np.pi ** 2 / 3, rtol=1e-12)


def test_gradients_at_special_points_like_jax(fusion):
    """cbrt at 0 (inf), fabs at ±0 (1), i0 at 0 (0) and across its two series, modf and
    frexp at integers, zeros and powers of two, fmod at multiples of the divisor."""
    def f(xp, a, b, c, d, e, g):
        m = xp.modf(d)
        return (xp.sum(xp.cbrt(a)) + xp.sum(xp.fabs(b)) + xp.sum(xp.i0(c)) + xp.sum(m[0] + 3 * m[1])
                + xp.sum(xp.frexp(e)[0]) + xp.sum(xp.fmod(g, 1.5)))

    xs = [np.array(v) for v in ([0.0, 8.0, -1.0], [0.0, -0.0, -2.0, 3.0], [0.0, 25.0, -19.5, 20.0],
                                [-2.0, 0.0, 2.5], [0.0, 4.0, -0.5, 3.0], [3.0, -3.0, 0.5])]
    argnums = tuple(range(len(xs)))
    got = qt.grad(lambda *ts: f(qt, *ts), argnums=argnums)(*[qt.asarray(x) for x in xs])
    want = jax.grad(lambda *ts: f(jnp, *ts), argnums=argnums)(*xs)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-10, atol=1e-12, err_msg=f"argument {i}")


# --- NumPy dispatch ------------------------------------------------------------------
def test_numpy_dispatch(rng, fusion):
    """``np.<name>(tensor)`` runs qtrace: a qt.Tensor (or a tuple of them) equal to NumPy's."""
    x = rng.standard_normal((3, 4)) * 4
    k = rng.integers(-20, 20, (3, 4))
    t, kt = qt.asarray(x), qt.asarray(k)
    for fn, args in [(np.cbrt, (t,)), (np.fabs, (t,)), (np.fmod, (t, 1.5)), (np.fmod, (x, kt)),
                     (np.divmod, (t, 1.5)), (np.divmod, (kt, 3)), (np.modf, (t,)), (np.frexp, (t,)),
                     (np.ldexp, (t, kt)), (np.ldexp, (x, kt)), (np.float_power, (kt, 2)),
                     (np.fix, (t,)), (np.isneginf, (t / 0,)), (np.isposinf, (t / 0,)),
                     (np.bitwise_not, (kt,)), (np.gcd, (kt, 12)), (np.lcm, (k, kt)), (np.sinc, (t,)),
                     (np.spacing, (t,)), (np.i0, (t,)), (np.bitwise_count, (kt,))]:
        got = fn(*args)
        with np.errstate(all="ignore"):
            want = fn(*[np.asarray(a) if isinstance(a, qt.Tensor) else a for a in args])
        _check_forward(got, want, want, 1e-12, fn.__name__)


def test_numpy_out_for_multiple_outputs(rng, fusion):
    """``np.modf(t, out=(a, b))`` writes both targets (tensors or arrays) and returns them."""
    x = rng.standard_normal(5) * 3
    frac, whole = qt.zeros(5), qt.zeros(5)
    got = np.modf(qt.asarray(x), out=(frac, whole))
    assert got[0] is frac and got[1] is whole
    np.testing.assert_array_equal(frac.numpy(), np.modf(x)[0])
    np.testing.assert_array_equal(whole.numpy(), np.modf(x)[1])
    q = np.empty(5)
    got = np.divmod(qt.asarray(x), 2.0, out=(q, None))
    assert got[0] is q and isinstance(got[1], qt.Tensor)
    np.testing.assert_array_equal(q, np.floor_divide(x, 2.0))
    np.testing.assert_array_equal(got[1].numpy(), np.remainder(x, 2.0))


# --- inside qt.jit -------------------------------------------------------------------
def test_inside_jit(rng, fusion):
    def f(xp, x, k):
        m, e = xp.frexp(x)
        frac, whole = xp.modf(x)
        q, r = xp.divmod(x, 0.75)
        y = xp.ldexp(m, e + 1) + xp.cbrt(x) * xp.sinc(frac) + xp.fmod(x, 1.25)
        z = xp.gcd(k, 12) + xp.lcm(k, 4) + xp.bitwise_count(k) + xp.bitwise_not(k)
        return y + q * r + xp.spacing(x) * 1e10 + xp.fix(x) + xp.fabs(x), z

    step = qt.jit(lambda x, k: f(qt, x, k))
    qt.reset_stats()
    for _ in range(3):
        x, k = rng.standard_normal((4, 5)) * 3, rng.integers(-30, 30, (4, 5)).astype(np.int32)
        got = step(qt.asarray(x), qt.asarray(k))
        want = f(np, x, k)
        np.testing.assert_allclose(got[0].numpy(), want[0], rtol=1e-12)
        np.testing.assert_array_equal(got[1].numpy(), want[1])
    assert qt.stats()["traces"] == 1


def test_jit_grad(rng, fusion):
    def f(xp, x):
        return xp.sum(xp.sinc(x) * xp.cbrt(x) + xp.modf(x)[0] * xp.frexp(x)[0] + xp.fmod(x, 0.7))

    x = rng.standard_normal(6)
    g = qt.jit(qt.grad(lambda t: f(qt, t)))(qt.asarray(x))
    np.testing.assert_allclose(g.numpy(), jax.grad(lambda t: f(jnp, t))(x), rtol=1e-10)


# --- errors --------------------------------------------------------------------------
_Z = np.array([1 + 1j, 2j])
ERRORS = [
    (lambda: qt.gcd(qt.ones(3), qt.ones(3)), TypeError, "qt.gcd: .*float64"),
    (lambda: qt.lcm(qt.ones(2, dtype=qt.int32), 2.5), TypeError, "qt.lcm:"),
    (lambda: qt.lcm(qt.ones(2, dtype=qt.int8), 1000), OverflowError, "qt.lcm:"),
    (lambda: qt.bitwise_count(qt.ones(3)), TypeError, "qt.bitwise_count: .*float64"),
    (lambda: qt.ldexp(qt.ones(3), 2.0), TypeError, "qt.ldexp:"),
    (lambda: qt.ldexp(qt.ones(3), qt.ones(3)), TypeError, "qt.ldexp: .*float64"),
    (lambda: qt.frexp(qt.asarray(_Z)), TypeError, "qt.frexp: .*complex128"),
    (lambda: qt.modf(qt.asarray(_Z)), TypeError, "qt.modf: .*complex128"),
    (lambda: qt.fabs(qt.asarray(_Z)), TypeError, "qt.fabs: .*complex128"),
    (lambda: qt.cbrt(qt.asarray(_Z)), TypeError, "qt.cbrt: .*complex128"),
    (lambda: qt.divmod(qt.asarray(_Z), 2), TypeError, "qt.divmod: .*complex128"),
    (lambda: qt.spacing(qt.asarray([True])), TypeError, "qt.spacing: .*float16"),
    (lambda: qt.fix(qt.asarray(_Z)), TypeError, "qt.fix: .*complex128"),
    (lambda: qt.fix(qt.ones(2), out=qt.ones(2)), TypeError, "qt.fix: out="),
    (lambda: qt.isposinf(qt.asarray(_Z)), TypeError, "qt.isposinf: .*complex128 .*ambiguous"),
    (lambda: qt.isneginf(qt.ones(2), out=qt.ones(2)), TypeError, "qt.isneginf: out="),
    (lambda: qt.i0(qt.asarray(_Z)), TypeError, "qt.i0: .*complex"),
    (lambda: qt.fmod(qt.ones(2), qt.ones(3)), ValueError, r"qt.fmod: .*\(3,\)"),
    (lambda: qt.divmod(qt.ones(2), qt.ones(3)), ValueError, r"\(3,\)"),
    (lambda: np.modf(qt.ones(2), dtype=np.float32), TypeError, "numpy.modf with .*dtype"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()
