"""The case harness of the NumPy-function tests (``test_composites.py`` and its siblings).

A :class:`Case` is one callable ``fn(xp, *arrays)`` run with ``xp`` = ``qt``, ``np`` and
``jax.numpy``: :func:`run_forward` compares qtrace with NumPy on fresh random inputs
(``rng`` fixture: the session seed is in the pytest header, ``QTRACE_TEST_SEED``
reproduces a run) — the result's dtype and shape exactly, values against NumPy computed in
float64; :func:`run_gradient` compares ``qt.grad`` of ``sum(f(x) * w)`` (``w`` random) with
``jax.grad`` of the same composition in float64, or with central finite differences where
JAX has no such function. Callers run both under the ``fusion`` fixture (fusion on and off).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qtrace as qt

jax.config.update("jax_enable_x64", True)

NAN, INF = float("nan"), float("inf")


# --- inputs --------------------------------------------------------------------------
def normal(rng, shape, dtype):
    """Standard normal values (complex: both parts), small integers, random bools."""
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-9, 10, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":   # (a zero imaginary part could not catch a missing conj)
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def wide(rng, shape, dtype):
    if np.dtype(dtype).kind in "iub":
        return normal(rng, shape, dtype)
    return (rng.standard_normal(shape) * 30).astype(dtype)


def positive(rng, shape, dtype):
    if np.dtype(dtype).kind in "iub":
        return rng.integers(1, 4, shape).astype(dtype)
    return rng.uniform(0.5, 1.5, shape).astype(dtype)


def separated(rng, shape, dtype):
    """Positive values in (0.5, 1.5), any two at least ``0.5 / size`` apart (a random order of
    jittered steps): finite differences of order statistics never cross a tie."""
    if np.dtype(dtype).kind in "iub":
        return positive(rng, shape, dtype)
    n = int(np.prod(shape, dtype=np.int64))
    steps = rng.permutation(n) + rng.uniform(0.25, 0.75, n)
    return (0.5 + steps / max(n, 1)).reshape(shape).astype(dtype)


def specials(rng, shape, dtype):
    """Normal values with NaN, +-inf, 0.0 and -0.0 sprinkled in (floats only)."""
    x = normal(rng, shape, dtype)
    if np.dtype(dtype).kind != "f" or x.size == 0:
        return x
    flat = x.reshape(-1)
    picks = rng.choice(np.array([NAN, INF, -INF, 0.0, -0.0], dtype=dtype), flat.size)
    mask = rng.random(flat.size) < 0.4
    flat[mask] = picks[mask]
    return flat.reshape(shape)


@dataclass
class Case:
    id: str
    fn: object                      # fn(xp, *arrays)
    shapes: tuple                   # the shapes of the array arguments
    dtypes: tuple = ("float64", "float32", "int32")
    gen: object = normal
    grad: str | None = "jax"        # "jax", "fd" (finite differences) or None
    grad_gen: object = None         # inputs for the gradient check (default: gen)
    grad_args: tuple | None = None  # which arguments to differentiate (default: all)
    tol32: float = 2e-5
    ref64: bool = True              # compare float32 results with NumPy's float64 result


def _leaves(out) -> list:
    if isinstance(out, (list, tuple)):
        return [leaf for o in out for leaf in _leaves(o)]
    return [out]


def _inputs(case: Case, rng, dtype, gen=None) -> list:
    gen = gen or case.gen
    return [gen(rng, s, dtype) for s in case.shapes]


def _as64(a: np.ndarray) -> np.ndarray:
    return a.astype({np.float32: np.float64, np.complex64: np.complex128}.get(a.dtype.type, a.dtype))


def _check_forward(got, want, want64, tol: float, what: str, tol32: float = 2e-5) -> None:
    """``got`` (tensors) against NumPy's ``want`` (dtype, shape) and ``want64`` (values, to
    ``tol``; a float32/complex64 output of a float64 computation, to ``tol32``: its sums may be
    ordered differently on a device, a last-bit difference that ``tol`` would refuse)."""
    got, want, want64 = _leaves(got), _leaves(want), _leaves(want64)
    assert len(got) == len(want), f"{what}: {len(got)} outputs, NumPy {len(want)}"
    for i, (g, w, w64) in enumerate(zip(got, want, want64)):
        assert isinstance(g, qt.Tensor), f"{what}[{i}]: got {type(g).__name__}, not a qt.Tensor"
        w = np.asarray(w)
        assert g.shape == w.shape, f"{what}[{i}]: shape {g.shape} != NumPy {w.shape}"
        assert g.dtype == w.dtype, f"{what}[{i}]: dtype {g.dtype} != NumPy {w.dtype}"
        v = g.numpy()
        t = max(tol, tol32) if w.dtype in (np.float32, np.complex64) else tol
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(v, w, err_msg=what)
            continue
        if w.dtype.kind == "c":   # (both parts compared)
            np.testing.assert_allclose(v.astype(np.complex128), np.asarray(w64, dtype=np.complex128),
                                       rtol=t, atol=t, equal_nan=True, err_msg=what)
            continue
        ref = np.asarray(w64, dtype=np.float64)
        np.testing.assert_allclose(v.astype(np.float64), ref, rtol=t, atol=t, equal_nan=True,
                                   err_msg=what)
        # infinities and signed zeros of the reference come out the same
        same_inf = np.isinf(ref)
        np.testing.assert_array_equal(v[same_inf], ref[same_inf], err_msg=what)


def qt_grads(case, xs, argnums, ws):
    wts = [qt.asarray(w) for w in ws]

    def loss(*ts):
        outs = _leaves(case.fn(qt, *ts))
        total = qt.sum(outs[0] * wts[0])
        for o, w in zip(outs[1:], wts[1:]):
            total = total + qt.sum(o * w)
        return total

    g = qt.grad(loss, argnums=tuple(argnums))(*[qt.asarray(x) for x in xs])
    return [gi.numpy() for gi in g]


def jax_grads(case, xs, argnums, ws):
    def loss(*ts):
        outs = _leaves(case.fn(jnp, *ts))
        return sum(jnp.sum(o * w) for o, w in zip(outs, ws))

    g = jax.grad(loss, argnums=tuple(argnums))(*[jnp.asarray(x) for x in xs])
    return [np.asarray(gi) for gi in g]


def fd_grads(case, xs, argnums, ws):
    def loss(*arrays):
        outs = _leaves(case.fn(np, *arrays))
        return sum(float(np.sum(np.asarray(o, dtype=np.float64) * w)) for o, w in zip(outs, ws))

    grads = []
    for i in argnums:
        g = np.zeros_like(xs[i])
        for idx in np.ndindex(xs[i].shape):
            h = 1e-6 * max(1.0, abs(xs[i][idx]))
            plus, minus = [x.copy() for x in xs], [x.copy() for x in xs]
            plus[i][idx] += h
            minus[i][idx] -= h
            g[idx] = (loss(*plus) - loss(*minus)) / (2 * h)
        grads.append(g)
    return grads


def run_forward(case: Case, dtype: str, rng) -> None:
    """``case`` on two fresh draws of inputs in ``dtype``: qtrace against NumPy (dtype and
    shape exactly; values against NumPy in float64 where ``case.ref64``)."""
    for _ in range(2):  # two fresh draws
        xs = _inputs(case, rng, dtype)
        with np.errstate(all="ignore"):
            want = case.fn(np, *xs)
            want64 = case.fn(np, *[_as64(x) for x in xs]) if case.ref64 else want
        got = case.fn(qt, *[qt.asarray(x) for x in xs])
        tol = 1e-12 if dtype != "float32" else case.tol32
        _check_forward(got, want, want64, tol, f"{case.id}[{dtype}] on {[x.tolist() for x in xs]}",
                       case.tol32)


def run_gradient(case: Case, rng) -> None:
    """``qt.grad`` of ``sum(case(x) * w)`` against JAX's (``case.grad == "jax"``) or central
    finite differences (``"fd"``), on two fresh draws in float64."""
    for _ in range(2):
        xs = _inputs(case, rng, "float64", case.grad_gen)
        argnums = case.grad_args if case.grad_args is not None else tuple(range(len(xs)))
        ws = [rng.standard_normal(np.shape(o)) for o in _leaves(case.fn(np, *xs))]
        got = qt_grads(case, xs, argnums, ws)
        if case.grad == "jax":
            want, rtol = jax_grads(case, xs, argnums, ws), 1e-10
        else:
            want, rtol = fd_grads(case, xs, argnums, ws), 1e-6
        for i, g, w in zip(argnums, got, want):
            assert g.shape == xs[i].shape and g.dtype == np.float64
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol,
                                       err_msg=f"{case.id}: d/darg{i} on {[x.tolist() for x in xs]}")


def forward_params(cases, keep=None) -> list:
    """``pytest.param(case, dtype)`` for each case in each of its dtypes (those ``keep(case,
    dtype)`` accepts), with ids ``<case>-<dtype>``: what ``run_forward`` is parametrized by."""
    return [pytest.param(c, dt, id=f"{c.id}-{dt}") for c in cases for dt in c.dtypes
            if keep is None or keep(c, dt)]


def gradient_params(cases) -> list:
    """``pytest.param(case)`` for each case with a gradient check: ``run_gradient``'s."""
    return [pytest.param(c, id=c.id) for c in cases if c.grad]
