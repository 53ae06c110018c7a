"""Forward values, dtypes and shapes of every operation of SPEC §2 against NumPy.

Driven by ``op_table``: each record is checked over its dtypes and shape cases, with
fusion on and off (``fusion`` fixture), on fresh random inputs (``rng`` fixture; the
session seed is printed in the pytest header, ``QTRACE_TEST_SEED`` reproduces a run).

A check: compute with qtrace, evaluate with ``.numpy()``, compare with NumPy on the same
inputs. The result dtype and shape must equal NumPy's exactly; integer and bool values
must be equal; float values within the record's tolerance, with NaN at the same places
and infinities equal.
"""

from __future__ import annotations

import operator
import os
import warnings
import zlib

import numpy as np
import pytest
from op_table import (
    BIG_RECORDS,
    BINARY_OPERATORS,
    DTYPES,
    ELEMENTWISE,
    ELEMENTWISE_CASES,
    EPS32,
    EPS64,
    FLOATS,
    INDEXING,
    INTS,
    LARGE_CASES,
    LINALG,
    OPERATORS,
    REDUCTIONS,
    SHAPE_OPS,
    SPEC_ELEMENTWISE,
    SPEC_OTHER,
    TABLE,
    UPDATES,
    WIDE_SIZE,
    Tol,
    accumulation_tolerance,
    layout,
    make_input,
    numpy_rejects,
    special_values,
    wide_values,
)

import qtrace as qt


# --- comparison ----------------------------------------------------------------------
def _describe(inputs) -> str:
    lines = []
    for i, a in enumerate(inputs):
        if isinstance(a, np.ndarray):
            lines.append(f"  arg{i}: {a.dtype}{list(a.shape)} strides={a.strides} "
                         f"{np.array2string(a, threshold=40, precision=9)}")
        else:
            lines.append(f"  arg{i}: {a!r}")
    return "\n".join(lines)


def assert_matches(got, want, tol: Tol | None = None, inputs=(), atol_array=None) -> None:
    """``got`` (a qt.Tensor) equals NumPy's ``want`` in type, dtype, shape and value."""
    assert isinstance(got, qt.Tensor), f"expected a qt.Tensor, got {type(got).__name__}"
    want = np.asarray(want)
    g = got.numpy()
    assert isinstance(g, np.ndarray), f".numpy() returned {type(g).__name__}"
    assert g.dtype == want.dtype, f"dtype: qtrace {g.dtype}, NumPy {want.dtype}\n{_describe(inputs)}"
    assert got.dtype == want.dtype, f"Tensor.dtype {got.dtype} != NumPy {want.dtype}\n{_describe(inputs)}"
    assert g.shape == want.shape, f"shape: qtrace {g.shape}, NumPy {want.shape}\n{_describe(inputs)}"
    assert got.shape == want.shape, f"Tensor.shape {got.shape} != NumPy {want.shape}\n{_describe(inputs)}"
    if want.dtype.kind != "f":
        bad = g != want
        assert not bad.any(), (f"values differ at {np.argwhere(bad)[:8].tolist()}:\n"
                               f"  qtrace {g[bad][:8]}\n  numpy  {want[bad][:8]}\n{_describe(inputs)}")
        return
    gn, wn = np.isnan(g), np.isnan(want)
    assert (gn == wn).all(), (f"NaN positions differ at {np.argwhere(gn != wn)[:8].tolist()}:\n"
                              f"  qtrace {g[gn != wn][:8]}\n  numpy  {want[gn != wn][:8]}\n"
                              f"{_describe(inputs)}")
    tol = tol or Tol(0.0, 0.0)
    with np.errstate(all="ignore"):
        w64 = want.astype(np.float64)
        g64 = g.astype(np.float64)
        err = np.abs(g64 - w64)
        limit = tol.atol + tol.rtol * np.abs(w64)
        if atol_array is not None:
            limit = limit + np.broadcast_to(atol_array, limit.shape)
        inf = np.isinf(w64) | np.isinf(g64)
        bad = ~wn & np.where(inf, g64 != w64, ~(err <= limit))
    if bad.any():
        idx = np.argwhere(bad)[:8].tolist()
        rel = err[bad] / np.maximum(np.abs(w64[bad]), np.finfo(want.dtype).tiny)
        raise AssertionError(
            f"values differ at {idx} (tol {tol}):\n  qtrace {g[bad][:8]!r}\n  numpy  "
            f"{want[bad][:8]!r}\n  rel err {rel[:8]}\n{_describe(inputs)}")


def numpy_ref(fn, *args):
    """NumPy's result, or the exception class it raises."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # e.g. "Mean of empty slice"
        try:
            return fn(*args), None
        except (TypeError, ValueError, OverflowError, ZeroDivisionError, IndexError) as err:
            return None, type(err)


def to_qt(args):
    return [qt.asarray(a) if isinstance(a, np.ndarray) else a for a in args]


def _arg_dtype(op, i, dtype):
    return dict(op.arg_dtypes or ()).get(i, dtype)


# QTRACE_OPS_EXHAUSTIVE=1: every shape case for every dtype (the default samples them to
# keep the suite at a few minutes; each distinct graph compiles once, ~50 ms)
EXHAUSTIVE = os.environ.get("QTRACE_OPS_EXHAUSTIVE", "") not in ("", "0")


def _stable_pick(items, n, *key):
    """``n`` of ``items`` chosen by a stable hash of ``key`` (rotates coverage over records);
    all of them with ``QTRACE_OPS_EXHAUSTIVE=1``."""
    if EXHAUSTIVE:
        return list(items)
    start = zlib.crc32(repr(key).encode()) % len(items)
    return [items[(start + k) % len(items)] for k in range(min(n, len(items)))]


# --- elementwise functions and operators ---------------------------------------------
# ops whose integer edge cases (extremes, overflow, zero divisors, wide shifts) matter
_INT_SPECIAL = {"abs", "negative", "positive", "add", "subtract", "multiply", "floor_divide",
                "remainder", "power", "square", "sign", "minimum", "maximum", "bitwise_and",
                "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift", "equal",
                "less", "greater_equal", "clip", "round:decimals=-1"}


_OPERATOR_FUNCTION = {op.name: name for op in OPERATORS for name in [
    {"op+": "add", "op-": "subtract", "op*": "multiply", "op/": "divide", "op//": "floor_divide",
     "op%": "remainder", "op**": "power", "op&": "bitwise_and", "op|": "bitwise_or",
     "op^": "bitwise_xor", "op<<": "left_shift", "op>>": "right_shift", "op==": "equal",
     "op!=": "not_equal", "op<": "less", "op<=": "less_equal", "op>": "greater",
     "op>=": "greater_equal", "op:neg": "negative", "op:pos": "positive", "op:abs": "abs",
     "op:~": "invert"}[op.name]]}


def _computes_in_float(op, dtype: str) -> bool:
    """True when NumPy computes ``op`` on a non-float ``dtype`` in a float loop (the int
    input is only converted, e.g. ``np.sin(int32) -> float64``)."""
    if dtype in FLOATS:
        return False
    with np.errstate(all="ignore"):
        out = op.ref(*[np.ones(2, dtype=dict(op.arg_dtypes or ()).get(i, dtype))
                       for i in range(op.arity)])
    return np.asarray(out).dtype.kind == "f"


def _elementwise_params():
    """Every record x every dtype, with a handful of shape cases per pair.

    Kernels compile once per distinct graph (~50 ms each), so shape cases are sampled
    (``QTRACE_OPS_EXHAUSTIVE=1`` runs them all): every dtype gets one non-contiguous case
    and one rotating other case; a stable hash of record and dtype picks them, so the
    suite covers every combination across records. Integer/bool inputs of float-only
    functions (a cast, then the float loop) get the non-contiguous case alone. The
    special-values case runs for float dtypes, and for integer dtypes where integer edge
    values matter. Large inputs (vectorized loops, parallel chunks): "wide" (40k floats
    over the dtype's whole range, special values scattered in) for float dtypes, "large"
    (40k elements, views, broadcasting) for one rotating dtype: float32 or an integer
    dtype with an integer loop.
    Operators compile the same kernels as their functions, and take the same cases.
    """
    params = []
    picked = {}
    for op in ELEMENTWISE:
        cases = list(ELEMENTWISE_CASES[op.arity])
        noncontig = [c for c in cases if c in ("T", "neg", "views")]
        rest = [c for c in cases if c not in noncontig]
        native = [d for d in op.dtypes if d not in FLOATS and not _computes_in_float(op, d)]
        for dt in op.dtypes:
            chosen = _stable_pick(noncontig, 1, op.name, dt, "nc")
            if EXHAUSTIVE or not _computes_in_float(op, dt):
                chosen += _stable_pick(rest, 1, op.name, dt)
            picked[op.name, dt] = chosen
            if op.special and op.arity <= 2 and (
                    dt in FLOATS or (dt in INTS and op.name in _INT_SPECIAL)):
                chosen = chosen + ["special"]
            if dt in FLOATS and not op.arg_dtypes:
                chosen = chosen + ["wide"]
            if dt in _stable_pick(["float32"] + native, 1, op.name, "L"):
                chosen = chosen + ["large"]
            for case in chosen:
                params.append(pytest.param(op, dt, case, id=f"{op.name}-{dt}-{case}"))
    for op in OPERATORS:  # the function's cases: same graphs, so the kernels are cached
        fn = _OPERATOR_FUNCTION[op.name]
        for dt in op.dtypes:
            for case in picked[fn, dt]:
                params.append(pytest.param(op, dt, case, id=f"{op.name}-{dt}-{case}"))
    return params


def elementwise_inputs(rng, op, dtype, case):
    if case == "wide":
        return [wide_values(rng, op.domain[i], dtype, WIDE_SIZE) for i in range(op.arity)]
    if case == "special":
        vals = [special_values(op.domain[i], _arg_dtype(op, i, dtype)) for i in range(op.arity)]
        if op.arity == 1:
            return vals
        return [vals[0][:, None], vals[1]]  # every pair, by broadcasting
    out = []
    cases = {**ELEMENTWISE_CASES[op.arity], **LARGE_CASES[op.arity]}
    for i, (shape, lay) in enumerate(cases[case]):
        a = make_input(rng, op.domain[i], _arg_dtype(op, i, dtype), shape)
        out.append(layout(a, lay))
    return out


@pytest.mark.parametrize("op, dtype, case", _elementwise_params())
def test_elementwise(op, dtype, case, fusion, rng):
    args = elementwise_inputs(rng, op, dtype, case)
    want, err = numpy_ref(op.ref, *args)
    if err is not None:
        with pytest.raises(err):
            op.qt(*to_qt(args)).numpy()
        return
    got = op.qt(*to_qt(args))
    if op.name == "round:decimals=-1" and np.dtype(dtype).kind == "u":
        want = _round_overflow_saturates(got, want, args[0])
    assert_matches(got, want, op.tol.get(np.asarray(want).dtype.name), args)


def _round_overflow_saturates(got, want, x):
    """``round(x, -1)`` of an unsigned integer near its maximum rounds up past it.

    NumPy computes ``rint(x / 10) * 10`` in float64 and casts back with C's conversion,
    which is undefined out of range: on x86 NumPy's array cast gives 0 for uint32
    4294967300.0 while its scalar cast gives 4. qtrace saturates (the maximum) there.
    Those elements are checked against that; returns NumPy's result with them replaced.
    """
    values = got.numpy()
    top = np.iinfo(values.dtype).max
    over = np.rint(np.asarray(x, np.float64) / 10) * 10 > top
    assert (values[over] == top).all(), values[over]
    return np.where(over, top, want).astype(want.dtype)


@pytest.mark.parametrize("op, dtype", [
    pytest.param(op, dt, id=f"{op.name}-{dt}")
    for op in ELEMENTWISE + OPERATORS
    for dt in numpy_rejects(op.ref, op.arity) if not op.arg_dtypes])
def test_unsupported_dtype_raises_type_error(op, dtype, fusion):
    """NumPy rejects the dtype: qtrace raises TypeError naming the dtype, at record time."""
    x = qt.asarray(np.ones(3, dtype=dtype))
    with pytest.raises(TypeError, match=np.dtype(dtype).name):
        op.qt(*[x] * op.arity)


# --- Python scalars (NEP 50: weak) ---------------------------------------------------
_SCALARS = {"int": 3, "float": 1.5, "bool": True}


def _scalar_params():
    """Operators x dtypes: one rotating scalar kind on the right, one on the left; the
    functions without an operator spelling: one rotating scalar kind on the right."""
    params = []
    kinds = list(_SCALARS)
    for op in OPERATORS:
        if op.arity != 2:
            continue
        for dt in DTYPES:
            sides = [(k, "right") for k in _stable_pick(kinds, 1, op.name, dt)]
            sides += [(k, "left") for k in _stable_pick(kinds, 1, op.name, dt, "left")]
            for sname, side in sides:
                params.append(pytest.param(op, dt, sname, side,
                                           id=f"{op.name}-{dt}-{sname}-{side}"))
    for op in ELEMENTWISE:
        if op.arity == 2 and op.name in ("arctan2", "hypot", "minimum", "maximum", "logical_and",
                                         "logical_or", "logical_xor"):
            for dt in DTYPES:
                for sname in _stable_pick(kinds, 1, op.name, dt):
                    params.append(pytest.param(op, dt, sname, "right",
                                               id=f"{op.name}-{dt}-{sname}-right"))
    return params


@pytest.mark.parametrize("op, dtype, scalar, side", _scalar_params())
def test_python_scalar_operand(op, dtype, scalar, side, fusion, rng):
    s = _SCALARS[scalar]
    i = 0 if side == "right" else 1          # which argument is the array
    a = make_input(rng, op.domain[i], dtype, (3, 4))
    args = [a, s] if side == "right" else [s, a]
    want, err = numpy_ref(op.ref, *args)
    if err is not None:
        with pytest.raises(err):
            op.qt(*to_qt(args)).numpy()
        return
    assert_matches(op.qt(*to_qt(args)), want, op.tol.get(np.asarray(want).dtype.name), args)


def test_nep50_examples(fusion):
    f32 = qt.asarray(np.array([1.0, 2.0], dtype=np.float32))
    i32 = qt.asarray(np.array([1, 2], dtype=np.int32))
    u32 = qt.asarray(np.array([1, 2], dtype=np.uint32))
    b = qt.asarray(np.array([True, False]))
    cases = [
        (f32 * 2.0, np.float32, [2.0, 4.0]),
        (2.0 * f32, np.float32, [2.0, 4.0]),
        (f32 + 1, np.float32, [2.0, 3.0]),
        (i32 + 1, np.int32, [2, 3]),
        (1 + i32, np.int32, [2, 3]),
        (i32 + 1.5, np.float64, [2.5, 3.5]),
        (i32 / 2, np.float64, [0.5, 1.0]),
        (i32 * True, np.int32, [1, 2]),
        (u32 + 1, np.uint32, [2, 3]),
        (b + 1, np.int64, [2, 1]),
        (b + 1.0, np.float64, [2.0, 1.0]),
        (b & True, np.bool_, [True, False]),
        (i32 ** 2, np.int32, [1, 4]),
        (f32 ** 2, np.float32, [1.0, 4.0]),
        (2 ** i32, np.int32, [2, 4]),
        (qt.maximum(f32, 1.5), np.float32, [1.5, 2.0]),
        (qt.where(b, f32, 0.0), np.float32, [1.0, 0.0]),
        (qt.where(b, i32, 0.5), np.float64, [1.0, 0.5]),
        (qt.clip(i32, 0, 1), np.int32, [1, 1]),
    ]
    for got, dt, vals in cases:
        want = np.array(vals, dtype=dt)
        assert_matches(got, want)


def test_nep50_python_int_out_of_range_raises(fusion):
    """NumPy 2 raises OverflowError for a Python int that does not fit the array's int dtype."""
    u32 = qt.asarray(np.array([1, 2], dtype=np.uint32))
    i32 = qt.asarray(np.array([1, 2], dtype=np.int32))
    for fn in (lambda: u32 + (-1), lambda: i32 + 2**40, lambda: qt.maximum(i32, 2**31)):
        with pytest.raises(OverflowError):
            fn().numpy()


# --- mixed dtypes --------------------------------------------------------------------
_MIXED = [("int32", "float32"), ("float32", "float64"), ("uint32", "int32"), ("int64", "uint32"),
          ("bool", "int32"), ("float32", "int64"), ("bool", "float32"), ("uint32", "float32")]


@pytest.mark.parametrize("op, pair", [
    pytest.param(op, pair, id=f"{op.name}-{pair[0]}+{pair[1]}")
    for op in ELEMENTWISE if op.arity == 2 and not op.arg_dtypes
    for pair in _MIXED[:1] + _stable_pick(_MIXED[1:], 3, op.name)])
def test_mixed_dtypes(op, pair, fusion, rng):
    args = [layout(make_input(rng, op.domain[i], pair[i], shape), lay)
            for i, (shape, lay) in enumerate(ELEMENTWISE_CASES[2]["bcast"])]
    want, err = numpy_ref(op.ref, *args)
    if err is not None:
        with pytest.raises(err):
            op.qt(*to_qt(args)).numpy()
        return
    assert_matches(op.qt(*to_qt(args)), want, op.tol.get(np.asarray(want).dtype.name), args)


# --- NumPy protocols: np.sin(t), ndarray + t -----------------------------------------
@pytest.mark.parametrize("op", [pytest.param(op, id=op.name) for op in ELEMENTWISE
                                if isinstance(op.ref, np.ufunc) and "float64" in op.dtypes])
def test_numpy_ufunc_on_tensor_returns_tensor(op, fusion, rng):
    """``np.<ufunc>(t)`` and ``np.<ufunc>(ndarray, t)`` dispatch to qtrace (a qt.Tensor)."""
    cases = ELEMENTWISE_CASES[op.arity]["bcast" if op.arity == 2 else "1d"]
    args = [make_input(rng, op.domain[i], "float64", shape) for i, (shape, _) in enumerate(cases)]
    want, _ = numpy_ref(op.ref, *args)
    assert_matches(op.ref(*to_qt(args)), want, op.tol["float64"], args)
    if op.arity == 2:  # ndarray on the left, tensor on the right
        assert_matches(op.ref(args[0], qt.asarray(args[1])), want, op.tol["float64"], args)


@pytest.mark.parametrize("op, dtype", [
    pytest.param(op, dt, id=f"{op.name}-{dt}") for op in BINARY_OPERATORS.values()
    for dt in ("float64", "int32") if dt in op.dtypes])
def test_ndarray_on_the_left_of_operator(op, dtype, fusion, rng):
    a = make_input(rng, op.domain[0], dtype, (3, 1))
    b = make_input(rng, op.domain[1], dtype, (4,))
    want, _ = numpy_ref(op.ref, a, b)
    assert_matches(op.ref(a, qt.asarray(b)), want, op.tol.get(dtype), [a, b])


@pytest.mark.parametrize("fn", [np.sum, np.mean, np.max, np.transpose, np.ravel, np.cumsum],
                         ids=lambda f: f.__name__)
def test_numpy_function_on_tensor_returns_tensor(fn, fusion, rng):
    a = rng.uniform(-1, 1, (3, 4))
    assert_matches(fn(qt.asarray(a)), fn(a), Tol(4 * EPS64, 1e-15), [a])


# --- in-place operators write into their target, as NumPy's do ---------------------------
_INPLACE = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "&=": operator.iand,
    "|=": operator.ior, "^=": operator.ixor, "<<=": operator.ilshift, ">>=": operator.irshift,
}


@pytest.mark.parametrize("sym, dtype", [
    pytest.param(sym, dt, id=f"{sym}-{dt}") for sym in _INPLACE for dt in ("float32", "int32")
    if dt in BINARY_OPERATORS["op" + sym[:-1]].dtypes])
def test_inplace_operator_writes_into_target(sym, dtype, fusion, rng):
    """``x op= y`` is NumPy's ``op(x, y, out=x)``: the same object is updated (every
    reference and view sees it), its dtype and shape stay, a value recorded before keeps
    the old value, and a cast NumPy refuses raises as NumPy does."""
    iop = _INPLACE[sym]
    rec = BINARY_OPERATORS["op" + sym[:-1]]
    a = make_input(rng, rec.domain[0], dtype, (3, 4))
    b = make_input(rng, rec.domain[1], dtype, (4,))
    a_copy = a.copy()
    for rhs in (b, 2):
        ref = a.copy()
        x = qt.asarray(a)
        alias, row = x, x[1]
        before = x * 1  # recorded before the update
        try:
            want = iop(ref, rhs)
        except TypeError:
            with pytest.raises(TypeError):
                iop(x, qt.asarray(rhs) if isinstance(rhs, np.ndarray) else rhs)
            continue
        got = iop(x, qt.asarray(rhs) if isinstance(rhs, np.ndarray) else rhs)
        assert got is alias
        assert got.dtype == want.dtype and got.shape == want.shape
        assert_matches(got, want, rec.tol.get(want.dtype.name), [a, b])
        assert_matches(row, want[1], rec.tol.get(want.dtype.name), [a, b])
        assert_matches(before, a * 1)
    np.testing.assert_array_equal(a, a_copy)  # qtrace never writes into a borrowed NumPy buffer


def test_inplace_refuses_what_numpy_refuses():
    x = qt.zeros(3, dtype=qt.int32)
    with pytest.raises(TypeError, match="same_kind"):
        x += 1.5
    y = qt.zeros(1)
    with pytest.raises(ValueError, match="broadcast"):
        y += qt.zeros(3)
    assert y.shape == (1,) and x.dtype == np.int32


def test_inplace_matmul_writes_into_target(fusion, rng):
    a, b = rng.uniform(-1, 1, (3, 3)), rng.uniform(-1, 1, (3, 3))
    x = qt.asarray(a)
    alias = x
    x @= qt.asarray(b)
    assert x is alias
    assert_matches(alias, a @ b, Tol(8 * EPS64, 1e-15), [a, b])


# --- reductions, shapes, linear algebra, indexing, updates ---------------------------
def _record_params(records, per_dtype=1, first_dtype_cases=None):
    """The record's first dtype gets every shape case (or ``first_dtype_cases`` rotating
    ones), the other dtypes ``per_dtype`` rotating ones."""
    params = []
    for op in records:
        cases = list(op.cases)
        extra = list(op.forward_cases or ())
        for i, dt in enumerate(op.dtypes):
            n = (first_dtype_cases or len(cases)) if i == 0 else per_dtype
            chosen = _stable_pick(cases, n, op.name, dt)
            # forward-only cases (NaN layouts, large inputs): one rotating case for the
            # first dtype and for float dtypes
            if extra and (i == 0 or dt in FLOATS):
                chosen += _stable_pick(extra, 1, op.name, dt, "extra")
            for case in chosen:
                params.append(pytest.param(op, dt, case, id=f"{op.name}-{dt}-{case}"))
    return params


def record_inputs(rng, op, dtype, case):
    out = []
    for i, spec in enumerate({**op.cases, **(op.forward_cases or {})}[case]):
        shape, lay = spec if len(spec) == 2 and isinstance(spec[0], tuple) else (spec, "c")
        a = make_input(rng, op.domain[i], dtype, shape)
        if lay == "nan" and a.dtype.kind == "f":  # NaN, infinities, -0.0 at random places
            where = rng.random(a.shape) < 0.2
            special = np.array([np.nan, np.inf, -np.inf, -0.0, np.nan], dtype=a.dtype)
            a = np.where(where, special[rng.integers(0, 5, a.shape)], a)
        out.append(layout(a, lay))
    return out


def _accumulation_bound(op, dtype, args):
    """Per-element absolute bound for sums/products/matmuls computed in another order."""
    name = op.name.split("[")[0]
    mags = [np.abs(np.asarray(a, dtype=np.float64)) for a in args]
    n = max(int(np.prod(np.shape(args[0]))), 1)
    if op.kind == "update" and name == "add":  # scatter-add: all updates of one element
        n = max(n, int(np.size(args[1])))
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return accumulation_tolerance(dtype, n) * np.asarray(op.ref(*mags), dtype=np.float64)
    if name in ("sum", "mean", "cumsum") or op.kind == "linalg":
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return accumulation_tolerance(dtype, n) * np.asarray(op.ref(*mags), dtype=np.float64)
    if name == "prod":
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return accumulation_tolerance(dtype, n) * np.abs(
                np.asarray(op.ref(*[a.astype(np.float64) for a in args]), dtype=np.float64))
    return None


def _check_record(op, dtype, case, rng):
    args = record_inputs(rng, op, dtype, case)
    if op.kind == "update" and args[1].ndim == 0:
        args[1] = args[1].item()  # a Python scalar value
    want, err = numpy_ref(op.ref, *args)
    if err is not None:
        with pytest.raises(err):
            op.qt(*to_qt(args)).numpy()
        return
    got = op.qt(*to_qt(args))
    bound = None
    tol = Tol(0.0, 0.0)
    if np.asarray(want).dtype.kind == "f":
        bound = _accumulation_bound(op, dtype if dtype in FLOATS else "float64", args)
        if op.kind == "update" and op.name.startswith(("add", "multiply")):
            eps = EPS32 if dtype == "float32" else EPS64
            tol = Tol(8 * eps, 8 * eps)
    assert_matches(got, want, tol, args, atol_array=bound)


@pytest.mark.parametrize("op, dtype, case", _record_params(REDUCTIONS, first_dtype_cases=2))
def test_reduction(op, dtype, case, fusion, rng):
    _check_record(op, dtype, case, rng)


@pytest.mark.parametrize("op, dtype, case", _record_params(SHAPE_OPS))
def test_shape_function(op, dtype, case, fusion, rng):
    _check_record(op, dtype, case, rng)


@pytest.mark.parametrize("op, dtype, case", _record_params(LINALG, per_dtype=2))
def test_linalg(op, dtype, case, fusion, rng):
    _check_record(op, dtype, case, rng)


@pytest.mark.parametrize("op, dtype, case", _record_params(INDEXING))
def test_getitem(op, dtype, case, fusion, rng):
    _check_record(op, dtype, case, rng)


@pytest.mark.parametrize("op, dtype, case", _record_params(UPDATES, first_dtype_cases=2))
def test_update(op, dtype, case, fusion, rng):
    _check_record(op, dtype, case, rng)


@pytest.mark.parametrize("op, dtype, case", _record_params(BIG_RECORDS, per_dtype=2))
def test_large_gather_and_scatter(op, dtype, case, fusion, rng):
    """50k indices: the kernels run in parallel chunks; colliding scatter updates must
    all land (scatter-add into 100 bins is a histogram)."""
    _check_record(op, dtype, case, rng)


@pytest.mark.parametrize("pair", [("int32", "float32"), ("float32", "float64"),
                                  ("bool", "int64"), ("uint32", "int32")], ids=str)
def test_matmul_mixed_dtypes(pair, fusion, rng):
    a = make_input(rng, "unit", pair[0], (3, 5))
    b = make_input(rng, "unit", pair[1], (5, 2))
    bound = accumulation_tolerance("float32", 5) * (np.abs(a.astype(float)) @ np.abs(b.astype(float)))
    assert_matches(qt.asarray(a) @ qt.asarray(b), a @ b, inputs=[a, b], atol_array=bound)
    assert_matches(a @ qt.asarray(b), a @ b, inputs=[a, b], atol_array=bound)


# --- update semantics beyond values --------------------------------------------------
def test_setitem_rebinds_to_a_copy(fusion, rng):
    a = rng.uniform(-1, 1, (4, 5))
    keep = a.copy()
    x = qt.asarray(a)
    before = x + 0  # recorded before the update
    x[1, ::2] = 7.0
    x[qt.asarray(np.array([0, -1])), 0] = qt.asarray(np.array([8.0, 9.0]))
    want = keep.copy()
    want[1, ::2] = 7.0
    want[[0, -1], 0] = [8.0, 9.0]
    assert_matches(x, want)
    assert_matches(before, keep)
    np.testing.assert_array_equal(a, keep)  # the NumPy buffer behind asarray is untouched


def test_at_returns_new_tensor_and_keeps_input(fusion, rng):
    a = rng.uniform(-1, 1, (6,))
    x = qt.asarray(a)
    idx = np.array([0, 0, 0, 5])
    y = x.at[idx].add(1.0)
    z = x.at[qt.asarray(idx)].multiply(2.0)
    want_y = a.copy()
    np.add.at(want_y, idx, 1.0)
    want_z = a.copy()
    np.multiply.at(want_z, idx, 2.0)
    assert_matches(y, want_y, Tol(4 * EPS64, 4 * EPS64))
    assert_matches(z, want_z, Tol(4 * EPS64, 4 * EPS64))
    assert_matches(x, a)


# --- coverage of SPEC §2 by the table ------------------------------------------------
def test_table_covers_spec(fusion):
    names = {op.name.split(":")[0].split("[")[0].split("(")[0] for op in TABLE}
    missing = [n for n in SPEC_ELEMENTWISE + SPEC_OTHER if n not in names]
    assert not missing, f"op_table lacks records for {missing}"
    ops = {op.name for op in OPERATORS}
    for sym in ["+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>", "==", "!=",
                "<", "<=", ">", ">="]:
        assert "op" + sym in ops
    for unary in ("neg", "pos", "abs", "~"):
        assert "op:" + unary in ops
    assert {op.name for op in LINALG} >= {"@", "matmul", "dot"}
    for name in SPEC_ELEMENTWISE + SPEC_OTHER:
        assert callable(getattr(qt, name, None)), f"qt.{name} is missing"
    assert EPS32 > 0


# --- comparisons with Python ints outside the dtype's range (NumPy 2: exact) ---------
@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64"])
def test_comparison_with_out_of_range_python_int(dtype, fusion, rng):
    a = make_input(rng, "real", dtype, (6,))
    x = qt.asarray(a)
    for value in (-1, -(2**40), 2**40, 2**63, -(2**63) - 1):
        for fn in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq,
                   operator.ne):
            want, err = numpy_ref(fn, a, value)
            if err is not None:
                with pytest.raises(err):
                    fn(x, value).numpy()
                continue
            assert_matches(fn(x, value), want, inputs=[a, value])
            assert_matches(fn(value, x), fn(value, a), inputs=[value, a])


# --- errors at record time -----------------------------------------------------------
_MISMATCH = [
    ("add", lambda a, b: qt.add(a, b)),
    ("+", lambda a, b: a + b),
    ("<", lambda a, b: a < b),
    ("arctan2", lambda a, b: qt.arctan2(a, b)),
    ("where", lambda a, b: qt.where(a > 0, a, b)),
    ("maximum", lambda a, b: qt.maximum(a, b)),
]


@pytest.mark.parametrize("name, fn", _MISMATCH, ids=[n for n, _ in _MISMATCH])
def test_broadcast_mismatch_raises_value_error_naming_both_shapes(name, fn, fusion):
    a, b = qt.ones((2, 3)), qt.ones((4,))
    with pytest.raises(ValueError) as info:
        fn(a, b)  # at record time: nothing is evaluated
    msg = str(info.value)
    assert "(2, 3)" in msg and "(4,)" in msg, msg


@pytest.mark.parametrize("case", ["matmul", "concatenate", "stack", "broadcast_to", "reshape"])
def test_shape_errors_raise_value_error_at_record_time(case, fusion):
    a = qt.ones((2, 3))
    fn = {"matmul": lambda: a @ qt.ones((4, 2)),
          "concatenate": lambda: qt.concatenate([a, qt.ones((2, 4))], axis=0),
          "stack": lambda: qt.stack([a, qt.ones((3, 2))]),
          "broadcast_to": lambda: qt.broadcast_to(a, (3, 3)),
          "reshape": lambda: a.reshape(4, -1)}[case]
    with pytest.raises(ValueError):
        fn()


# --- out-of-range indices ------------------------------------------------------------
@pytest.mark.parametrize("case", ["int", "neg_int", "slice_axis1_int", "float", "too_many"])
def test_bad_basic_index_raises_index_error_at_record_time(case, fusion):
    x = qt.asarray(np.arange(12.0).reshape(3, 4))
    key = {"int": 3, "neg_int": -4, "slice_axis1_int": (slice(None), 4), "float": 1.0,
           "too_many": (0, 0, 0)}[case]
    with pytest.raises(IndexError):
        x[key]


_OOB = {
    "gather": lambda x, i: x[i],
    "gather_2d": lambda x, i: x.reshape(2, 3)[:, i],
    "set": lambda x, i: x.at[i].set(1.0),
    "add": lambda x, i: x.at[i].add(1.0),
    "max": lambda x, i: x.at[i].max(1.0),
    "setitem": lambda x, i: _setitem(x, i),
}


def _setitem(x, i):
    x[i] = 5.0
    return x


@pytest.mark.parametrize("index", [[0, 6], [-7, 1], [2**40]], ids=["6", "-7", "2**40"])
@pytest.mark.parametrize("op", list(_OOB))
def test_out_of_range_index_array_raises_index_error(op, index, fusion):
    """Out-of-range gather/scatter indices raise IndexError naming the operation, no later
    than the evaluation of the result."""
    x = qt.asarray(np.arange(6.0))
    i = np.array(index)
    if op == "gather_2d":
        i = np.minimum(i, 3)  # axis 1 has size 3
    with pytest.raises(IndexError, match="bounds"):
        _OOB[op](x, i).numpy()


@pytest.mark.parametrize("op", ["gather", "add", "set"])
def test_out_of_range_index_unchecked_is_contained(op, fusion, rng):
    """``check_bounds = False``: no error and no stray reads/writes; in-range results exact."""
    qt.config.check_bounds = False
    a = rng.uniform(-1, 1, 6)
    guard = qt.asarray(rng.uniform(-1, 1, 6))
    guard_before = guard.numpy().copy()
    i = np.array([1, 9, -1, 1000000, 2])
    out = _OOB[op](qt.asarray(a), qt.asarray(i)).numpy()
    np.testing.assert_array_equal(guard.numpy(), guard_before)
    ok = np.array([1, -1, 2])
    if op == "gather":
        np.testing.assert_array_equal(out[[0, 2, 4]], a[ok])
    else:
        untouched = np.setdiff1d(np.arange(6), ok % 6)
        np.testing.assert_array_equal(out[untouched], a[untouched])


# --- update value casts --------------------------------------------------------------
def test_setitem_and_at_cast_values_to_the_array_dtype(fusion):
    a = np.arange(6, dtype=np.int32)
    x = qt.asarray(a)
    x[0] = 2.7
    x[np.array([1, 2])] = np.array([-1.5, 9.99])
    want = a.copy()
    want[0] = 2.7
    want[[1, 2]] = [-1.5, 9.99]
    assert_matches(x, want)
    y = qt.asarray(a).at[np.array([3, 3])].add(np.array([0.6, 0.6]))
    want = a.copy()
    want[3] += np.int32(0.6)  # JAX casts each update to the array dtype: 3 + 0 + 0
    assert_matches(y, want)
    z = qt.asarray(np.ones(3, np.float32)).at[1].set(np.float64(1 / 3))
    want = np.ones(3, np.float32)
    want[1] = 1 / 3
    assert_matches(z, want)


# --- NumPy scalars are strong (not weak like Python scalars) -------------------------
@pytest.mark.parametrize("scalar", [np.float64(2.5), np.float32(2.5), np.int64(3), np.int32(3),
                                    np.uint32(3), np.bool_(True)], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32"])
def test_numpy_scalar_operands_are_strong(scalar, dtype, fusion, rng):
    a = make_input(rng, "positive", dtype, (5,))
    x = qt.asarray(a)
    for fn in (operator.add, operator.truediv, operator.lt):
        want, err = numpy_ref(fn, a, scalar)
        if err is None:
            tol = Tol(0.0, 0.0)
            assert_matches(fn(x, scalar), want, tol, [a, scalar])
            assert_matches(fn(scalar, x), fn(scalar, a), tol, [scalar, a])


# --- lazily computed index tensors ---------------------------------------------------
def test_lazily_computed_negative_indices_wrap(fusion, rng):
    a = rng.uniform(-1, 1, (5, 4))
    x = qt.asarray(a)
    i = qt.arange(4) * 2 - 3          # [-3, -1, 1, 3], computed by qtrace
    j = qt.argmax(x, axis=1) - 4      # negative column indices
    ni, nj = np.arange(4) * 2 - 3, np.argmax(a, axis=1) - 4
    assert_matches(x[i], a[ni], inputs=[a])
    assert_matches(x[:, i[1:]], a[:, ni[1:]], inputs=[a])
    assert_matches(x[qt.arange(5), j], a[np.arange(5), nj], inputs=[a])
    want = a.copy()
    np.add.at(want, (ni, 0), 1.0)
    assert_matches(x.at[i, 0].add(1.0), want, inputs=[a])


def test_boolean_mask_setitem_with_array_values(fusion, rng):
    a = rng.uniform(-1, 1, (4, 5))
    m = a > 0
    v = rng.uniform(-1, 1, int(m.sum()))
    x = qt.asarray(a)
    x[qt.asarray(m)] = v
    want = a.copy()
    want[m] = v
    assert_matches(x, want, inputs=[a, v])
    y = qt.asarray(a)
    y[m[:, 0]] = 0.0  # a row mask
    want = a.copy()
    want[m[:, 0]] = 0.0
    assert_matches(y, want, inputs=[a])



@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_power_with_negative_python_int_exponent_raises(dtype, fusion):
    """NumPy: ``int_array ** -1`` raises ValueError (the exponent is known when recorded)."""
    x = qt.asarray(np.array([1, 2, 3], dtype=dtype))
    for fn in (lambda: x ** -1, lambda: qt.power(x, -2)):
        with pytest.raises(ValueError, match="negative"):
            fn().numpy()


# --- large reductions: ties across parallel chunks -----------------------------------
@pytest.mark.parametrize("name", ["argmax", "argmin", "max", "min", "any", "all", "sum"])
@pytest.mark.parametrize("dtype", ["int32", "bool", "float32"])
def test_large_reduction_with_ties_across_chunks(name, dtype, fusion, rng):
    """40k+ elements with few distinct values: argmax/argmin must return the first
    occurrence even when the kernel splits the range into parallel chunks."""
    shape = (3, 40013)
    if dtype == "bool":
        a = rng.random(shape) < 0.001
    else:
        a = rng.integers(-2, 3, shape).astype(dtype)
    a[:, :1000] = 0  # the extremes only occur well after the first chunk
    for axis in (None, 1, 0):
        want, err = numpy_ref(lambda v, axis=axis: getattr(np, name)(v, axis=axis), a)
        got = getattr(qt, name)(qt.asarray(a), axis=axis)
        assert_matches(got, want, inputs=[a])


# --- random indexing keys ------------------------------------------------------------
def _random_key(rng, shape):
    """A random NumPy key: ints, slices (any start/stop/step), None, one Ellipsis, integer
    arrays (NumPy or qt, broadcasting shapes, negative values)."""
    key, axis, ellipsis = [], 0, False
    while axis < len(shape):
        r, size = rng.random(), shape[axis]
        if r < 0.25:
            key.append(int(rng.integers(-size, size)))
            axis += 1
        elif r < 0.55:
            def bound(size=size):
                return int(rng.integers(-size - 2, size + 2)) if rng.random() < 0.6 else None
            step = int(rng.choice([1, 2, 3, -1, -2, -3])) if rng.random() < 0.7 else None
            key.append(slice(bound(), bound(), step))
            axis += 1
        elif r < 0.8:
            ashape = tuple(int(d) for d in rng.integers(1, 4, int(rng.integers(0, 3))))
            idx = rng.integers(-size, size, ashape)
            key.append(qt.asarray(idx) if rng.random() < 0.5 else idx)
            axis += 1
        elif r < 0.9:
            key.append(None)
        elif not ellipsis:
            ellipsis = True
            key.append(Ellipsis)
            axis = len(shape) - int(rng.integers(0, len(shape) - axis + 1))
    return tuple(key)


def _np_key(key):
    return tuple(np.asarray(k) if isinstance(k, qt.Tensor) else k for k in key)


@pytest.mark.parametrize("trial", range(2))
def test_random_indexing_keys(trial, fusion, rng):
    """Random keys on random 1-4-D arrays: ``x[key]``, ``x.at[key].add`` and
    ``x.at[key].max`` against NumPy (``np.add.at`` / ``np.maximum.at``)."""
    checked = 0
    while checked < 12:
        shape = tuple(int(d) for d in rng.integers(1, 6, int(rng.integers(1, 5))))
        a = rng.integers(-100, 100, shape).astype(np.float64)
        key = _random_key(rng, shape)
        nkey = _np_key(key)
        want, err = numpy_ref(lambda a, nkey=nkey: a[nkey], a)
        if err is not None:  # e.g. index arrays that do not broadcast together
            continue
        checked += 1
        ctx = f"x.shape={shape}, key={key!r}"
        got = qt.asarray(a)[key]
        assert got.shape == want.shape, f"{ctx}: shape {got.shape} != NumPy {want.shape}"
        np.testing.assert_array_equal(got.numpy(), want, err_msg=ctx)
        v = rng.integers(-5, 5, want.shape).astype(np.float64)
        for mode, ufunc in (("add", np.add), ("max", np.maximum)):
            ref = a.copy()
            ufunc.at(ref, nkey, v)
            out = getattr(qt.asarray(a).at[key], mode)(v)
            np.testing.assert_array_equal(out.numpy(), ref, err_msg=f"{ctx}, .at[].{mode}")
