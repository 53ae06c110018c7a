"""Reverse mode of every differentiable operation of SPEC §2, against JAX and finite differences.

Driven by ``op_table`` (the same records as the forward checks): each differentiable
record is run on fresh float64 inputs drawn from its domain (moved away from the
singularities and kinks of the derivative, see ``GRAD_DOMAINS``), and the gradient of
the scalar loss ``sum(f(*xs) * w)`` (``w`` random, so that every output element matters)
with respect to every float argument is compared with

* ``jax.grad`` of the same function (the record's callable rebound to ``jax.numpy``),
  in float64 (``jax_enable_x64``), and
* central finite differences of the record's NumPy reference, in float64.

Every check runs with fusion on and off (``fusion`` fixture). Ties of ``maximum`` /
``minimum`` / ``clip`` and of the ``max`` / ``min`` reductions and scatter-min/max are
checked against JAX only (finite differences are undefined there): JAX splits the
gradient equally between tied operands. A hypothesis test draws random composite
programs (chains of differentiable ops on 2-3 broadcasting inputs) and compares their
gradients with JAX.
"""

from __future__ import annotations

import functools
import operator
import os
import types
import zlib

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from op_table import (
    DOMAINS,
    ELEMENTWISE,
    ELEMENTWISE_CASES,
    INDEXING,
    LINALG,
    OPERATORS,
    REDUCTIONS,
    SHAPE_OPS,
    UPDATE_KEYS,
    UPDATES,
    layout,
)

import qtrace as qt

jax.config.update("jax_enable_x64", True)

try:  # the session seed printed in the pytest header (QTRACE_TEST_SEED reproduces a run)
    from conftest import SEED
except ImportError:  # pragma: no cover - another import mode
    SEED = int(os.environ.get("QTRACE_TEST_SEED") or np.random.SeedSequence().entropy % 2**32)

# Primitives whose derivative is zero almost everywhere (or that return ints/bools):
# not gradient records (``qtrace.ad.rules.NONDIFFERENTIABLE`` plus the integer-valued ops).
NONDIFF = {
    "floor", "ceil", "trunc", "round", "sign", "floor_divide", "isnan", "isinf", "isfinite",
    "logical_and", "logical_or", "logical_not", "logical_xor", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "bitwise_and", "bitwise_or", "bitwise_xor",
    "invert", "left_shift", "right_shift", "argmax", "argmin", "any", "all",
}


# --- inputs --------------------------------------------------------------------------
def _uniform(lo, hi):
    return lambda rng, shape: rng.uniform(lo, hi, shape)


def _away_from_zero(lo, hi):
    def sample(rng, shape):
        x = rng.uniform(lo, hi, shape)
        return np.where(rng.random(shape) < 0.5, -x, x)
    return sample


# Domains with the derivative's singularities kept at a distance (finite differences
# need a smooth neighbourhood of every input; JAX agrees anyway).
GRAD_DOMAINS = {
    "nonneg": _uniform(0.1, 10.0),          # sqrt'(0) = inf
    "unit": _away_from_zero(0.1, 0.9),      # arcsin/arccos at +-1; divisions by update values
    "open_unit": _uniform(-0.9, 0.9),       # arctanh
    "ge1": _uniform(1.1, 10.0),             # arccosh'(1) = inf
    "gt_m1": _uniform(-0.9, 10.0),          # log1p
    "halfpi": _uniform(-1.3, 1.3),          # tan
    "real": _away_from_zero(0.05, 5.0),     # abs, hypot, arctan2 at 0
}


def grad_input(rng, domain: str, shape: tuple) -> np.ndarray:
    sample = GRAD_DOMAINS.get(domain) or DOMAINS[domain][0]
    return np.asarray(sample(rng, shape), dtype=np.float64)


# --- the JAX version of a record's callable ------------------------------------------
class _Mutable:
    """A JAX array that accepts the table's update spellings: ``x[key] = v`` and ``x.at``.

    ``unique``: the key has no repeated index, which JAX's scatter-multiply needs to be
    told (``unique_indices=True``) before it differentiates.
    """

    def __init__(self, value, unique: bool):
        self.value, self.unique = value, unique

    def __setitem__(self, key, v):
        self.value = self.value.at[key].set(v)

    @property
    def at(self):
        return _At(self.value, self.unique)


class _At:
    def __init__(self, value, unique):
        self.value, self.unique = value, unique

    def __getitem__(self, key):
        ref = self.value.at[key]
        if not self.unique:
            return ref
        return types.SimpleNamespace(
            set=ref.set, add=ref.add, min=ref.min, max=ref.max,
            multiply=lambda v: ref.multiply(v, unique_indices=True))


def _update_key(op) -> tuple:
    """``(key, region shape, repeats an index)`` of an update record (``mode[key id]``)."""
    return UPDATE_KEYS[op.name.split("[", 1)[1][:-1]]


def _rebind(fn, **names):
    """``fn`` with some of its global names (``np``) bound to other modules (``jnp``)."""
    g = dict(fn.__globals__, **names)
    new = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def jax_fn(op):
    """The record's function written with ``jax.numpy``."""
    q = op.qt
    if isinstance(q, functools.partial) and q.args and q.args[0] is qt:
        return functools.partial(q.func, jnp, *q.args[1:])  # records written as f(xp, ...)
    if op.kind == "update":
        unique = not _update_key(op)[2]

        def f(x, v):
            out = q(_Mutable(x, unique), v)
            return out.value if isinstance(out, _Mutable) else out
        return f
    if op.kind == "index":
        return op.ref  # x[key]: the same spelling for NumPy and JAX
    ref = op.ref
    name = getattr(ref, "__name__", "")
    if getattr(np, name, None) is ref:  # np.sin, np.clip, ...
        return getattr(jnp, name)
    if isinstance(ref, types.BuiltinFunctionType) or ref in vars(operator).values():
        return ref  # operator.add, abs, ...: dispatch on the array type
    return _rebind(ref, np=jnp)


# --- the check -----------------------------------------------------------------------
def _loss_np(fn, w):
    def loss(*xs):
        with np.errstate(all="ignore"):
            return float(np.sum(np.asarray(fn(*xs), dtype=np.float64) * w))
    return loss


def finite_differences(fn, args, argnums, w) -> list:
    """Central differences of ``sum(fn(*args) * w)`` in float64, element by element."""
    loss = _loss_np(fn, w)
    grads = []
    for i in argnums:
        x = args[i]
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            h = 1e-6 * max(1.0, abs(x[idx]))
            plus, minus = list(args), list(args)
            xp, xm = x.copy(), x.copy()
            xp[idx] += h
            xm[idx] -= h
            plus[i], minus[i] = xp, xm
            g[idx] = (loss(*plus) - loss(*minus)) / (2 * h)
        grads.append(g)
    return grads


def qt_grads(fn, args, argnums, w) -> list:
    wt = qt.asarray(w)
    g = qt.grad(lambda *xs: qt.sum(fn(*xs) * wt), argnums=tuple(argnums))(
        *[qt.asarray(a) for a in args])
    assert isinstance(g, tuple) and len(g) == len(argnums)
    for gi, i in zip(g, argnums):
        assert isinstance(gi, qt.Tensor), f"gradient {i} is a {type(gi).__name__}"
        assert gi.shape == np.shape(args[i]), f"gradient {i}: shape {gi.shape} != {np.shape(args[i])}"
        assert gi.dtype == np.float64, f"gradient {i}: dtype {gi.dtype}"
    return [gi.numpy() for gi in g]


_JAX_CACHE: dict = {}


def jax_grads(fn, args, argnums, w, key=None) -> list:
    """``jax.grad`` of the same loss, jitted (one XLA compile beats many eager dispatches).

    With a ``key`` (record and case), the compiled gradient is shared by the fused and
    unfused runs of the same check; ``w`` is an argument, so new values reuse it.
    """
    ck = None if key is None else (key, tuple(np.shape(a) for a in args), tuple(argnums))
    g_fn = _JAX_CACHE.get(ck) if ck is not None else None
    if g_fn is None:
        def loss(w, *xs):
            return jnp.sum(jnp.asarray(fn(*xs)) * w)
        g_fn = jax.jit(jax.grad(loss, argnums=tuple(i + 1 for i in argnums)))
    jargs = [jnp.asarray(w)] + [jnp.asarray(a) for a in args]
    if not isinstance(g_fn, jax.stages.Compiled):
        # XLA's backend optimizations cost more than they save on these tiny graphs
        g_fn = g_fn.lower(*jargs).compile({"xla_backend_optimization_level": 0})
        if ck is not None:
            _JAX_CACHE[ck] = g_fn
    g = g_fn(*jargs)
    return [np.asarray(gi, dtype=np.float64) for gi in g]


def _compare(got, want, what: str, rtol: float, atol: float, args, exact=None) -> None:
    """``got`` equals ``want`` within ``rtol``/``atol`` (NaN where both are NaN).

    ``exact(index)``: the true value of one element (arbitrary precision), consulted where
    the two differ: ``got`` passes there if it is no farther from the truth than ``want``
    (an ill-conditioned element, e.g. ``1 - tanh(x)**2`` for large ``x``, where the float64
    reference itself is off by more than the tolerance).
    """
    finite = np.isfinite(want)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    err = np.abs(got - want)
    nan_both = np.isnan(got) & np.isnan(want)  # e.g. arctan2(0, 0): JAX's NaN is the reference
    bad = ~(nan_both | (got == want) | (err <= atol * scale + rtol * np.abs(want)))
    if bad.any() and exact is not None:
        for index in map(tuple, np.argwhere(bad & np.isfinite(got) & finite)):
            truth = exact(index)
            if abs(got[index] - truth) <= abs(want[index] - truth):
                bad[index] = False
    if bad.any():
        idx = np.argwhere(bad)[:6].tolist()
        ctx = "\n".join(f"  arg{i}: {np.array2string(np.asarray(a), precision=6, threshold=30)}"
                        for i, a in enumerate(args))
        raise AssertionError(f"{what}: gradients differ at {idx}\n  qtrace {got[bad][:6]}\n"
                             f"  want   {want[bad][:6]}\n{ctx}")


def check_grad(qfn, jfn, npfn, args, rng, fd: bool = True, argnums=None, key=None) -> None:
    """qtrace's gradient of ``sum(f(*args) * w)`` equals JAX's and finite differences'.

    ``jfn=None``: no JAX reference (JAX cannot differentiate it); ``fd=False``: no finite
    differences (ties, where the derivative is a convention).
    """
    args = [np.asarray(a) for a in args]
    if argnums is None:
        argnums = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    with np.errstate(all="ignore"):
        out = np.asarray(npfn(*args) if npfn is not None else jfn(*map(jnp.asarray, args)))
    w = rng.normal(size=out.shape)
    got = qt_grads(qfn, args, argnums, w)
    if jfn is not None:
        for g, want, i in zip(got, jax_grads(jfn, args, argnums, w, key), argnums):
            _compare(g, want, f"d/darg{i} vs JAX", 1e-9, 1e-12, args)
    if fd:
        for g, want, i in zip(got, finite_differences(npfn, args, argnums, w), argnums):
            _compare(g, want, f"d/darg{i} vs finite differences", 1e-5, 1e-6, args)


def _pick(items, n, *key):
    """``n`` of ``items`` chosen by a stable hash of ``key`` (rotates coverage over records)."""
    items = list(items)
    if not items:
        return []
    start = zlib.crc32(repr(key).encode()) % len(items)
    return [items[(start + k) % len(items)] for k in range(min(n, len(items)))]


# --- elementwise ---------------------------------------------------------------------
def _root(name: str) -> str:
    return name.split(":")[0]


_OPERATOR_NAMES = {"op+": "add", "op-": "subtract", "op*": "multiply", "op/": "divide",
                   "op%": "remainder", "op**": "power", "op:neg": "negative", "op:pos": "positive",
                   "op:abs": "abs"}


def _elementwise_params():
    params = []
    for op in ELEMENTWISE + OPERATORS:
        root = _OPERATOR_NAMES.get(op.name, _root(op.name))
        if root in NONDIFF or op.name.startswith("op") and op.name not in _OPERATOR_NAMES:
            continue
        if "float64" not in op.dtypes:
            continue
        cases = [c for c in ELEMENTWISE_CASES[op.arity] if c != "empty"]
        main = "bcast" if "bcast" in cases else "1d"
        chosen = [main] if op in OPERATORS else [main] + _pick([c for c in cases if c != main], 1,
                                                               op.name)
        for case in chosen:
            params.append(pytest.param(op, case, id=f"{op.name}-{case}"))
    return params


@pytest.mark.parametrize("op,case", _elementwise_params())
def test_elementwise_gradient(op, case, fusion, rng):
    args = []
    for i, (shape, lay) in enumerate(ELEMENTWISE_CASES[op.arity][case]):
        if dict(op.arg_dtypes or ()).get(i) == "bool":
            args.append(layout(rng.random(shape) < 0.5, lay))
        else:
            args.append(layout(grad_input(rng, op.domain[i], shape), lay))
    check_grad(op.qt, jax_fn(op), op.ref, args, rng, key=(op.name, case))


@pytest.mark.parametrize("name", ["minimum", "maximum"])
def test_minimum_maximum_ties_split_like_jax(name, fusion, rng):
    x = np.round(rng.uniform(-2, 2, (3, 4)))
    y = np.round(rng.uniform(-2, 2, (4,)))
    x[0, :] = y  # at least one full row of ties
    check_grad(getattr(qt, name), getattr(jnp, name), getattr(np, name), [x, y], rng, fd=False)


def test_clip_at_its_bounds_like_jax(fusion, rng):
    x = np.array([-1.0, -0.5, 0.0, 0.25, 0.5, 2.0])
    lo, hi = np.full(6, -0.5), np.full(6, 0.5)
    check_grad(qt.clip, jnp.clip, np.clip, [x, lo, hi], rng, fd=False)
    check_grad(lambda x: qt.clip(x, -0.5, 0.5), lambda x: jnp.clip(x, -0.5, 0.5),
               lambda x: np.clip(x, -0.5, 0.5), [x], rng, fd=False)


def test_power_special_exponents(fusion, rng):
    x = grad_input(rng, "base", (6,))
    y = np.array([0.0, 1.0, 2.0, -1.0, 0.5, 3.0])
    check_grad(qt.power, jnp.power, np.power, [x, y], rng)
    check_grad(lambda x: x ** 2, lambda x: x ** 2, lambda x: x ** 2, [x], rng)
    check_grad(lambda x: 2.0 ** x, lambda x: 2.0 ** x, lambda x: 2.0 ** x, [x], rng)


def test_where_with_computed_condition(fusion, rng):
    x, y = grad_input(rng, "real", (3, 4)), grad_input(rng, "real", (4,))

    def f(xp):
        return lambda x, y: xp.where(x > y, xp.sin(x) * y, xp.cos(y) + x)
    check_grad(f(qt), f(jnp), f(np), [x, y], rng)


# --- reductions, cumsum --------------------------------------------------------------
_DIFF_REDUCTIONS = ("sum", "prod", "mean", "max", "min", "cumsum")


def _reduction_params():
    """Each differentiable reduction record (function forms and methods) on one of its
    shape cases, rotating by record name."""
    params = []
    for op in REDUCTIONS:
        if op.name.split("[")[0] not in _DIFF_REDUCTIONS:
            continue
        for case in _pick(op.cases, 1, op.name):
            params.append(pytest.param(op, case, id=f"{op.name}-{case}"))
    return params


def _case_inputs(rng, op, case):
    args = []
    for i, spec in enumerate(op.cases[case]):
        shape, lay = spec if isinstance(spec, tuple) and spec and isinstance(spec[0], tuple) \
            else (spec, "c")
        args.append(layout(grad_input(rng, op.domain[min(i, len(op.domain) - 1)], shape), lay))
    return args


@pytest.mark.parametrize("op,case", _reduction_params())
def test_reduction_gradient(op, case, fusion, rng):
    check_grad(op.qt, jax_fn(op), op.ref, _case_inputs(rng, op, case), rng, key=(op.name, case))


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_max_min_reduction_ties_shared_like_jax(name, axis, fusion, rng):
    x = np.round(rng.uniform(-1.5, 1.5, (4, 5)))  # few distinct values: many ties
    x[1, :] = 2.0 if name == "max" else -2.0
    x[:, 2] = 2.0 if name == "max" else -2.0

    def f(xp):
        return lambda x: getattr(xp, name)(x, axis=axis)
    check_grad(f(qt), f(jnp), f(np), [x], rng, fd=False)


def test_prod_with_a_zero_like_jax(fusion, rng):
    """d prod / dx_i is the product of the other elements, also where an element is 0."""
    x = grad_input(rng, "base", (3, 4))
    x[1, 2] = 0.0

    def f(xp):
        return lambda x: xp.prod(x, axis=1)
    check_grad(f(qt), f(jnp), f(np), [x], rng)


def test_scatter_multiply_of_a_zero_like_jax(fusion, rng):
    """``x.at[i].multiply(v)`` where ``x[i] == 0``: d/dx[i] is ``v``, not 0/0."""
    x = grad_input(rng, "real", (5,))
    x[1] = 0.0
    idx = np.array([1, 3])

    def f(xp):
        if xp is qt:
            return lambda x, v: x.at[qt.asarray(idx)].multiply(v)
        return lambda x, v: x.at[idx].multiply(v, unique_indices=True)

    def ref(x, v):
        y = x.copy()
        y[idx] *= v
        return y
    check_grad(f(qt), f(jnp), ref, [x, grad_input(rng, "unit", (2,))], rng)


# --- shapes, linear algebra ----------------------------------------------------------
def _shape_params():
    """Each shape and linear-algebra record on one non-empty shape case (``@``: all)."""
    params = []
    for op in SHAPE_OPS + LINALG:
        cases = [c for c in op.cases if "empty" not in c]
        chosen = cases if op.name == "@" else _pick(cases, 1, op.name)
        for case in chosen:
            params.append(pytest.param(op, case, id=f"{op.name}-{case}"))
    return params


@pytest.mark.parametrize("op,case", _shape_params())
def test_shape_and_linalg_gradient(op, case, fusion, rng):
    check_grad(op.qt, jax_fn(op), op.ref, _case_inputs(rng, op, case), rng, key=(op.name, case))


@pytest.mark.parametrize("kind", ["empty_k", "empty_m"])
def test_matmul_empty_gradient(kind, fusion, rng):
    a_shape, b_shape = {"empty_k": ((3, 0), (0, 4)), "empty_m": ((0, 5), (5, 4))}[kind]
    a, b = rng.normal(size=a_shape), rng.normal(size=b_shape)
    check_grad(qt.matmul, jnp.matmul, np.matmul, [a, b], rng)


# --- indexing and updates ------------------------------------------------------------
_MASK_FREE = ("mask_full",)  # masks computed from the differentiated value itself


def _index_params():
    params = []
    for op in INDEXING:
        if any(m in op.name for m in _MASK_FREE) or ":qt_mask" in op.name:
            continue
        if "empty" in op.name:
            continue
        case = next(iter(op.cases))
        params.append(pytest.param(op, case, id=f"{op.name}-{case}"))
    return params


@pytest.mark.parametrize("op,case", _index_params())
def test_indexing_gradient(op, case, fusion, rng):
    check_grad(op.qt, jax_fn(op), op.ref, _case_inputs(rng, op, case), rng, key=(op.name, case))


def _update_params():
    """Each update record on one of its cases (array / scalar / broadcast ``v``), rotating.

    ``min``/``max`` with a repeated index and a broadcast ``v`` tie updates with each
    other: they take the array case here; ties are in
    ``test_scatter_min_max_ties_split_like_jax``.
    """
    params = []
    for op in UPDATES:
        if "mask" in op.name:
            continue
        mode = op.name.split("[")[0]
        cases = list(op.cases)
        if mode in ("min", "max") and _update_key(op)[2]:
            cases = cases[:1]
        for case in _pick(cases, 1, op.name):
            params.append(pytest.param(op, case, id=f"{op.name}-{case}"))
    return params


def _closest_pair(args) -> float:
    """The smallest gap between any two values of ``args`` (all arrays together).

    Scatter-min/max competitors closer than the finite-difference step (at most 5e-6
    here) are a tie to finite differences, which then split the gradient.
    """
    values = np.sort(np.concatenate([np.ravel(a) for a in args]))
    return float(np.min(np.diff(values))) if values.size > 1 else np.inf


@pytest.mark.parametrize("op,case", _update_params())
def test_update_gradient(op, case, fusion, rng):
    """``x.at[key].<mode>(v)`` and ``x[key] = v``: gradients w.r.t. ``x`` and ``v``.

    JAX differentiates scatter-multiply only with unique indices: with a repeated index
    the check is against finite differences alone.
    """
    args = _case_inputs(rng, op, case)
    mode = op.name.split("[")[0]
    while mode in ("min", "max") and _closest_pair(args) < 1e-5:
        args = _case_inputs(rng, op, case)   # a near-tie: finite differences would split it
    jfn = None if mode == "multiply" and _update_key(op)[2] else jax_fn(op)
    check_grad(op.qt, jfn, op.ref, args, rng, key=(op.name, case))


@pytest.mark.parametrize("updates", ["scalar", "array"])
@pytest.mark.parametrize("mode", ["min", "max"])
def test_scatter_min_max_ties_split_like_jax(mode, updates, fusion, rng):
    """Tied operands of scatter-min/max share the cotangent equally, as in JAX.

    Scalar update 0.5: index 0 receives it twice and equals ``x[0]`` (three-way tie);
    index 2 receives it once and equals ``x[2]`` (two-way tie). Array updates: index 0
    gets two equal updates that beat ``x[0]`` (``x`` gets nothing there), index 2 one
    that loses to ``x[2]``.
    """
    x = np.array([0.5, 2.0, 0.5, -1.0])
    idx = np.array([0, 0, 2])
    sign = 1.0 if mode == "max" else -1.0
    v = np.array(0.5) if updates == "scalar" else np.array([3.0, 3.0, -3.0]) * sign

    def f(xp):
        return lambda x, v: getattr(x.at[qt.asarray(idx) if xp is qt else idx], mode)(v)
    check_grad(f(qt), f(jnp), None, [x, v], rng, fd=False)


def test_scatter_add_repeated_indices(fusion, rng):
    x, v = grad_input(rng, "real", (5,)), grad_input(rng, "real", (6,))
    idx = np.array([0, 2, 2, 4, 0, 0])

    def f(xp):
        def g(x, v):
            return (x.at[qt.asarray(idx) if xp is qt else idx].add(v * v)) ** 2
        return g

    def ref(x, v):
        y = x.copy()
        np.add.at(y, idx, v * v)
        return y ** 2
    check_grad(f(qt), f(jnp), ref, [x, v], rng)


def test_gather_with_tensor_index_repeated(fusion, rng):
    table = grad_input(rng, "real", (6, 3))
    idx = np.array([[5, 0], [0, 0], [3, 5]])

    def f(xp):
        return lambda t: xp.sin(t[qt.asarray(idx) if xp is qt else idx, 1:])
    check_grad(f(qt), f(jnp), f(np), [table], rng)


# --- random composite programs -------------------------------------------------------
SHAPES = [(3, 4), (4,), (3, 1)]
UNARY = {
    "sin": lambda xp, a: xp.sin(a),
    "tanh": lambda xp, a: xp.tanh(a),
    "arctan": lambda xp, a: xp.arctan(a),
    "square": lambda xp, a: xp.square(a) * 0.5,
    "exp_tanh": lambda xp, a: xp.exp(xp.tanh(a)),
    "log1p_sq": lambda xp, a: xp.log1p(a * a),
    "sqrt1p": lambda xp, a: xp.sqrt(a * a + 1.0),
    "recip": lambda xp, a: 1.0 / (a * a + 1.0),
    "abs": lambda xp, a: xp.abs(a),
    "neg": lambda xp, a: -a,
    "cumsum0": lambda xp, a: xp.cumsum(a, axis=0) * 0.5,
    "flip": lambda xp, a: xp.flip(a, axis=-1),
    "sum_keep": lambda xp, a: xp.sum(a, axis=-1, keepdims=True) * 0.25,
    "max_keep": lambda xp, a: xp.max(a, axis=0, keepdims=True),
    "mean_keep": lambda xp, a: xp.mean(a, axis=0, keepdims=True),
    "step_slice": lambda xp, a: a[..., ::-1] * 0.5 if a.shape[-1] > 1 else a,
    "transpose_back": lambda xp, a: xp.transpose(xp.transpose(a) * 1.5),
}
BINARY = {
    "add": lambda xp, a, b: a + b,
    "sub": lambda xp, a, b: a - b,
    "mul": lambda xp, a, b: a * b,
    "div": lambda xp, a, b: a / (b * b + 1.0),
    "maximum": lambda xp, a, b: xp.maximum(a, b),
    "minimum": lambda xp, a, b: xp.minimum(a, b),
    "hypot": lambda xp, a, b: xp.hypot(a, b),
    "arctan2": lambda xp, a, b: xp.arctan2(a, b),
    "where": lambda xp, a, b: xp.where(a > b, a * b, a - b),
    "pow": lambda xp, a, b: (a * a + 1.0) ** xp.tanh(b),
}

step = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(sorted(UNARY)), st.integers(0, 99)),
    st.tuples(st.just("b"), st.sampled_from(sorted(BINARY)), st.integers(0, 99), st.integers(0, 99)),
)
program = st.tuples(st.integers(2, 3), st.lists(step, min_size=1, max_size=6))


def run_program(xp, prog, *inputs):
    n_inputs, steps = prog
    env = list(inputs[:n_inputs])
    for s in steps:
        if s[0] == "u":
            env.append(UNARY[s[1]](xp, env[s[2] % len(env)]))
        else:
            env.append(BINARY[s[1]](xp, env[s[2] % len(env)], env[s[3] % len(env)]))
    return env[-1] + 0.0 * env[0]  # at least the first input's shape


_PROGRAM_GRADS: dict = {}


@seed(SEED)  # the session seed: the fused and unfused runs draw the same programs
@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(prog=program, data_seed=st.integers(0, 2**32 - 1))
def test_random_programs_match_jax(prog, data_seed, fusion):
    """Chains of differentiable ops on 2-3 broadcasting inputs: gradients equal JAX's.

    JAX's gradient of each drawn program is computed once and shared by the fused and
    unfused runs (eager ``jax.grad``: for these few shapes its dispatch cache is warm).
    """
    rng = np.random.default_rng(data_seed)
    args = [grad_input(rng, "real", s) for s in SHAPES[:prog[0]]]
    w = rng.normal(size=SHAPES[0])
    argnums = tuple(range(len(args)))
    got = qt_grads(functools.partial(run_program, qt, prog), args, argnums, w)
    key = (prog[0], tuple(prog[1]), data_seed)
    if key not in _PROGRAM_GRADS:
        def loss(*xs):
            return jnp.sum(run_program(jnp, prog, *xs) * w)
        g = jax.grad(loss, argnums=argnums)(*map(jnp.asarray, args))
        _PROGRAM_GRADS[key] = [np.asarray(gi) for gi in g]
    for i, (g, want) in enumerate(zip(got, _PROGRAM_GRADS[key])):
        _compare(g, want, f"program {prog}: d/darg{i} vs JAX", 1e-9, 1e-12, args,
                 exact=functools.partial(_exact_grad, prog, args, w, i))


class _MP:
    """The NumPy functions the random programs use, on object arrays of ``mpmath`` numbers."""

    def __init__(self):
        for name, fn in (("sin", mp.sin), ("tanh", mp.tanh), ("arctan", mp.atan), ("exp", mp.exp),
                         ("log1p", lambda a: mp.log(1 + a)), ("sqrt", mp.sqrt), ("abs", abs),
                         ("hypot", mp.hypot), ("arctan2", mp.atan2)):
            setattr(self, name, np.vectorize(fn, otypes=[object]))

    def __getattr__(self, name):  # shape functions, sums, maximum/where: NumPy's own
        return getattr(np, name)

    @staticmethod
    def square(a):
        return a * a


def _exact_grad(prog, args, w, i: int, index: tuple) -> float:
    """d sum(program(args) * w) / d args[i][index], to 30 digits (``mpmath``; ``mp.diff``
    differentiates numerically at a precision far above float64's)."""
    xp = _MP()
    with mp.workdps(40):
        base = [np.vectorize(mp.mpf, otypes=[object])(np.asarray(a, np.float64)) for a in args]
        weights = np.vectorize(mp.mpf, otypes=[object])(w)

        def f(v):
            xs = [a.copy() for a in base]
            xs[i][index] = v
            return np.sum(run_program(xp, prog, *xs) * weights)

        return float(mp.diff(f, base[i][index]))
