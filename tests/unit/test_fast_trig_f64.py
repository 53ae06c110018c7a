"""float64 sin/cos/tan: the fast pass (Cody-Waite, |x| < 2^20) and its exact fallback.

The fast pass alone is checked against mpmath at the doubles nearest to multiples of pi/2
(the worst cancellations of the reduction) and against long double elsewhere; through
qtrace, kernels, reductions and per-element loops with and without arguments outside the
fast range (those ranges run again with the C library's functions) against the same
references, fused and unfused.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from test_mathlib import reference, ulp_distance
from test_mathlib_f32 import _b3_reference, _fast_trig_compiled

import qtrace as qt
from qtrace.graph.plan import build_plan
from qtrace.kernels import codegen, llvm_cpu
from qtrace.kernels.mathlib import FAST_TRIG_LIMIT

F64 = np.float64
FAST = ["sin", "cos", "tan"]
# measured maxima of the fast pass: sin 0.79, cos 0.92, tan 2.11 ulp (tan's quotient)
LIMIT_ULP = {"sin": 1, "cos": 1, "tan": 3}
# a GPU computes with libdevice (CUDA Math API, double precision: sin/cos 2 ulp, tan 2 ulp)
LIBDEVICE_ULP = {"sin": 2, "cos": 2, "tan": 3}
OUTSIDE = [FAST_TRIG_LIMIT, -FAST_TRIG_LIMIT, 3.5e6, -1.0e7, 1e22, 2.0 ** 1000, np.inf,
           -np.inf, np.nan]


def _near_multiples_of_pio2(rng, count=3000):
    """The doubles nearest to k pi/2 for k spread over [1, 2^20 2/pi), and their neighbours."""
    top = int(FAST_TRIG_LIMIT / (np.pi / 2))
    k = np.unique(np.concatenate([np.arange(1, 200), rng.integers(1, top, count)]))
    mpmath.mp.prec = 200
    near = np.array([float(mpmath.mpf(int(j)) * mpmath.pi / 2) for j in k], F64)
    near = near[near < FAST_TRIG_LIMIT]
    return np.concatenate([near, np.nextafter(near, np.inf), np.nextafter(near, 0)])


def _mpmath_reference(name, x):
    mpmath.mp.prec = 200
    fn = getattr(mpmath, name)
    return np.array([float(fn(mpmath.mpf(float(v)))) for v in x], F64)


def _check(name, x, got, ref, limit):
    d = ulp_distance(got, ref, F64)
    i = int(np.argmax(d))
    assert d[i] <= limit, f"{name}: {d[i]} ulp at x={x[i]!r}: got {got[i]!r}, want {ref[i]!r}"


@pytest.mark.parametrize("name", FAST)
def test_fast_pass_alone_near_multiples_of_pi_over_2(name, rng):
    x = _near_multiples_of_pio2(rng)
    x = np.concatenate([x, -x])
    _check(name, x, _fast_trig_compiled(F64)(name, x), _mpmath_reference(name, x), LIMIT_ULP[name])


@pytest.mark.parametrize("name", FAST)
def test_fast_pass_alone_over_its_range(name, rng):
    n = 200_000
    x = np.concatenate([
        rng.uniform(-FAST_TRIG_LIMIT, FAST_TRIG_LIMIT, n), rng.uniform(-10, 10, n),
        10.0 ** rng.uniform(-12, 6, n) * rng.choice([-1.0, 1.0], n),
        np.nextafter(FAST_TRIG_LIMIT, 0) * np.array([1.0, -1.0]),
        [0.0, -0.0, 2.0 ** -27, -(2.0 ** -27), 2.0 ** -28, 5e-324, 0.7853981633974483],
    ])
    x = x[np.abs(x) < FAST_TRIG_LIMIT]
    got = _fast_trig_compiled(F64)(name, x)
    _check(name, x, got, reference(name, (x,), F64), LIMIT_ULP[name])
    zero = x == 0
    assert np.array_equal(np.signbit(got[zero]), np.signbit(reference(name, (x[zero],), F64)))


@pytest.mark.parametrize("large", [False, True], ids=["fast range", "with large arguments"])
@pytest.mark.parametrize("name", FAST)
def test_kernels_run_the_fast_pass_and_redo_ranges_with_large_arguments(name, large, fusion,
                                                                        device, rng):
    """Elementwise kernels (and a fused chain around the call): in-range values from the fast
    pass, a range holding an argument outside it (incl. inf and NaN) recomputed exactly."""
    n = 100_000
    x = np.concatenate([rng.uniform(-20, 20, n - 3000), _near_multiples_of_pio2(rng, 300)[:3000]])
    x = x[rng.permutation(x.size)]
    if large:
        x[rng.choice(x.size, len(OUTSIDE), replace=False)] = OUTSIDE
    limit = (LIBDEVICE_ULP if device.kind == "cuda" else LIMIT_ULP)[name]
    t = qt.asarray(x)
    got = getattr(qt, name)(t).numpy()
    with np.errstate(invalid="ignore"):
        _check(name, x, got, reference(name, (x,), F64), limit)
        chained = (getattr(qt, name)(t * 0.5) + 1.0).numpy()   # one kernel, fused
        half = reference(name, (x * 0.5,), F64)
        tol = (limit + 1) * np.spacing(np.maximum(np.abs(half), 1.0))
        ok = (np.abs(chained - (half + 1.0)) <= tol) | (np.isnan(chained) & np.isnan(half))
        assert ok.all(), f"{name}(x/2) + 1 at x={x[~ok][:3]}: {chained[~ok][:3]} vs {half[~ok][:3]} + 1"


@pytest.mark.parametrize("n", [1000, 3_000_000])   # one row per thread; a split reduction
@pytest.mark.parametrize("large", [False, True], ids=["fast range", "with large arguments"])
def test_reductions_of_float64_trig_count_each_element_once(large, n, fusion, rng):
    """A reduction over float64 sin/cos recomputes a partial from scratch when its range
    holds a large argument (the exact re-run): sums and maxima against long double."""
    x = rng.uniform(-3.0, 3.0, n)
    if large:
        x[rng.choice(n, 3, replace=False)] = 3.5e6, -1.0e7, FAST_TRIG_LIMIT
    t = qt.asarray(x)
    for name in ("sin", "cos"):
        ref = getattr(np, name)(x.astype(np.longdouble))
        got = float(qt.sum(getattr(qt, name)(t)).numpy())
        assert abs(got - float(ref.sum())) <= 1e-13 * float(np.abs(ref).sum())
        got_max = float(qt.max(getattr(qt, name)(t) * 0.5).numpy())
        # the reduction's maximum is exactly the largest element computed (each counted
        # once), and that is the function's value within its ulp limit (not correctly
        # rounded: an exact comparison with long double failed for 1 ulp near cos(x) = 1)
        assert got_max == float((getattr(qt, name)(t) * 0.5).numpy().max())
        want = float(0.5 * ref.max().astype(F64))
        assert abs(got_max - want) <= LIMIT_ULP[name] * np.spacing(want)


@pytest.mark.parametrize("large", [False, True], ids=["fast range", "with large arguments"])
def test_per_element_loops_run_float64_trig_fast_and_redo_large_blocks(large, fusion, rng):
    """Per-element loops blocked into lanes compute float64 sin with the fast pass; a block
    with an argument outside its range runs again exactly, forward and reverse (B3's
    loop ``v <- sin(v) c + v/2``, ``n[i]`` times, against float64 NumPy)."""
    n_el = 5000
    x = rng.uniform(-1.0, 1.0, n_el)
    c = rng.uniform(0.5, 1.5, n_el)
    n = rng.integers(0, 12, n_el)
    if large:
        where = rng.choice(n_el, 4, replace=False)
        x[where] = 3.0e6, -7.5e9, 2.5e20, 7e33
        n[where] = 1
    v, gx, gc = _b3_reference(x, c, n)

    def out(xv, cv, nv):
        return qt.fori_loop(0, nv, lambda i, u: qt.sin(u) * cv + 0.5 * u, xv)
    xs, cs, ns = qt.asarray(x), qt.asarray(c), qt.asarray(n)
    np.testing.assert_allclose(out(xs, cs, ns).numpy(), v, rtol=1e-13, atol=1e-13)
    got_gx, got_gc = qt.grad(lambda a, b: qt.sum(out(a, b, ns)), argnums=(0, 1))(xs, cs)
    np.testing.assert_allclose(got_gx.numpy(), gx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_gc.numpy(), gc, rtol=1e-12, atol=1e-12 * np.abs(gc).max())


@pytest.mark.parametrize("name", FAST)
def test_float64_kernel_vectorizes_the_fast_pass_and_calls_libm_only_to_redo(name):
    a = qt.asarray(np.ones(4096))
    spec = build_plan((getattr(qt, name)(a)._node,), True)
    (task,) = spec.tasks
    module = llvm_cpu.new_module("qtrace_test")
    codegen.lower_task(task, module, task.symbol, True)
    opt = str(llvm_cpu.optimize(module))
    assert "x double>" in opt, "the fast pass is not vectorized"
    calls = [line for line in opt.splitlines() if f"@{name}(double" in line and "call" in line]
    assert calls, "no exact re-run"
    assert "udiv" not in opt, "a Payne-Hanek reduction is left in the kernel"
