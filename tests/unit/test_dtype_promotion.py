"""NumPy 2 (NEP 50) dtype promotion of qtrace operations, checked against NumPy itself.

Only result dtypes are checked here (recording an operation computes nothing), except
for a few comparisons between mixed-signedness integers whose *values* depend on the
loop NumPy picks.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np
import pytest

import qtrace as qt

SUPPORTED = [np.dtype(d) for d in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float32", "float64")]

# (name, qtrace function, NumPy function)
OPS = [
    ("add", qt.add, np.add),
    ("multiply", qt.multiply, np.multiply),
    ("true_divide", qt.true_divide, np.true_divide),
    ("equal", qt.equal, np.equal),
    ("not_equal", qt.not_equal, np.not_equal),
    ("less", qt.less, np.less),
    ("less_equal", qt.less_equal, np.less_equal),
    ("greater", qt.greater, np.greater),
    ("greater_equal", qt.greater_equal, np.greater_equal),
]
# failures gathered per case so that one report lists every wrong pair
# (pytest.raises reports "DID NOT RAISE" with a BaseException)
COLLECT = (Exception, pytest.fail.Exception)

OPERATORS = [("+", operator.add), ("*", operator.mul), ("/", operator.truediv),
             ("==", operator.eq), ("<", operator.lt), (">=", operator.ge)]


def _np_value(dtype: np.dtype) -> np.ndarray:
    return np.ones(3, dtype)


def _numpy_result(fn, *args):
    """NumPy's result dtype, or the exception type it raises."""
    try:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*args)).dtype
    except Exception as err:  # noqa: BLE001 - we compare the exception type
        return type(err)


def _check(qt_call, expected, what: str):
    with np.errstate(all="ignore"):  # 1e300 -> float32 warns in NumPy too
        _check_quiet(qt_call, expected, what)


def _check_quiet(qt_call, expected, what: str):
    if isinstance(expected, type):  # NumPy raised
        # NumPy's UFuncTypeError / DTypePromotionError are TypeErrors; OverflowError stays
        want = OverflowError if issubclass(expected, OverflowError) else TypeError
        with pytest.raises(want):
            qt_call()
        return
    if expected == np.float16:  # float16 is optional in qtrace: either NumPy's dtype or TypeError
        try:
            out = qt_call()
        except TypeError as err:
            assert "float16" in str(err), what
            return
        assert out.dtype == expected, what
        return
    out = qt_call()
    assert isinstance(out, qt.Tensor), what
    assert out.dtype == expected, f"{what}: qtrace gives {out.dtype}, NumPy {expected}"
    assert out.shape == (3,), what


@pytest.mark.parametrize("name, qfn, nfn", OPS, ids=[o[0] for o in OPS])
def test_tensor_tensor_promotion_matches_numpy(name, qfn, nfn):
    failures = []
    for d1, d2 in itertools.product(SUPPORTED, SUPPORTED):
        a, b = _np_value(d1), _np_value(d2)
        expected = _numpy_result(nfn, a, b)
        try:
            _check(lambda a=a, b=b: qfn(qt.asarray(a), qt.asarray(b)), expected,
                   f"{name}({d1}, {d2})")
        except COLLECT as err:  # collect every failing pair
            failures.append(f"{name}({d1}, {d2}): {type(err).__name__}: {err}".splitlines()[0])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("sym, fn", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_operators_promote_like_numpy(sym, fn):
    failures = []
    for d1, d2 in itertools.product(SUPPORTED, SUPPORTED):
        a, b = _np_value(d1), _np_value(d2)
        expected = _numpy_result(fn, a, b)
        for qa, qb in ((qt.asarray(a), qt.asarray(b)), (qt.asarray(a), b), (a, qt.asarray(b))):
            try:
                _check(lambda qa=qa, qb=qb: fn(qa, qb), expected, f"{d1} {sym} {d2}")
            except COLLECT as err:
                failures.append(f"{d1} {sym} {d2} ({type(qa).__name__}, {type(qb).__name__}): "
                                f"{type(err).__name__}: {err}".splitlines()[0])
    assert not failures, "\n".join(failures)


PY_SCALARS = [True, False, 2, 0, -3, 300, 2**40, 2.5, -0.5, 1e300]
COMPARISONS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}


def _out_of_range(s, dt: np.dtype) -> bool:
    if isinstance(s, bool) or not isinstance(s, int) or dt.kind not in "iu":
        return False
    info = np.iinfo(dt)
    return not info.min <= s <= info.max


@pytest.mark.parametrize("name, qfn, nfn", OPS, ids=[o[0] for o in OPS])
def test_python_scalars_are_weak(name, qfn, nfn):
    """``f32_tensor * 2.0`` stays float32; out-of-range Python ints behave as in NumPy 2."""
    failures = []
    for dt, s in itertools.product(SUPPORTED, PY_SCALARS):
        a = _np_value(dt)
        if name in COMPARISONS and _out_of_range(s, dt):
            continue  # test_comparison_with_out_of_range_python_int
        for order in ("ts", "st"):
            args_np = (a, s) if order == "ts" else (s, a)
            expected = _numpy_result(nfn, *args_np)
            t = qt.asarray(a)
            args_qt = (t, s) if order == "ts" else (s, t)
            try:
                _check(lambda args_qt=args_qt: qfn(*args_qt), expected,
                       f"{name}{tuple(type(x).__name__ for x in args_qt)} {dt} {s!r}")
            except COLLECT as err:
                failures.append(f"{name}({'tensor' if order == 'ts' else repr(s)}, "
                                f"{repr(s) if order == 'ts' else 'tensor'}) with {dt}: "
                                f"{type(err).__name__}: {err}".splitlines()[0])
    assert not failures, "\n".join(failures)


def test_weak_float_keeps_float32():
    x = qt.ones(4, dtype=qt.float32)
    assert (x * 2.0).dtype == np.float32
    assert (2.0 * x).dtype == np.float32
    assert (x / 3).dtype == np.float32
    assert (x + True).dtype == np.float32
    assert qt.ones(4, dtype=qt.int32).__add__(2).dtype == np.int32
    assert (qt.ones(4, dtype=qt.uint8) + 255).dtype == np.uint8
    assert (qt.ones(4, dtype=qt.int32) * 2.0).dtype == np.float64


def test_default_dtypes():
    assert qt.zeros(2).dtype == np.float64
    assert qt.arange(3).dtype == np.int64
    assert qt.asarray([1.0, 2.0]).dtype == np.float64
    assert qt.asarray([1, 2]).dtype == np.int64
    assert qt.asarray([True]).dtype == np.bool_
    assert qt.full((2,), 1.5).dtype == np.float64


@pytest.mark.parametrize("scalar", [np.float64(2.0), np.float32(2.0), np.int64(2), np.int8(2),
                                    np.uint16(2), np.bool_(True), np.array(2.0), np.array(2)],
                         ids=lambda s: f"{type(s).__name__}-{np.asarray(s).dtype}")
@pytest.mark.parametrize("dt", ["float32", "int8", "uint32", "bool"])
def test_numpy_scalars_and_0d_arrays_are_strong(scalar, dt):
    """NEP 50: NumPy scalars and 0-d arrays take part in promotion with their dtype."""
    a = np.ones(3, dt)
    for nfn, qfn in ((np.add, qt.add), (np.multiply, qt.multiply), (np.less, qt.less)):
        expected = _numpy_result(nfn, a, scalar)
        _check(lambda qfn=qfn: qfn(qt.asarray(a), scalar), expected,
               f"{nfn.__name__}({dt} tensor, {type(scalar).__name__} {np.asarray(scalar).dtype})")
        expected = _numpy_result(nfn, scalar, a)
        _check(lambda qfn=qfn: qfn(scalar, qt.asarray(a)), expected,
               f"{nfn.__name__}({type(scalar).__name__}, {dt} tensor)")


@pytest.mark.parametrize("a, b", [
    (np.array([2**63, 5, 0], np.uint64), np.array([-1, 7, 0], np.int64)),
    (np.array([200, 5, 0], np.uint8), np.array([-1, 7, 0], np.int8)),
    (np.array([2**32 - 1, 1, 0], np.uint32), np.array([-1, 1, 0], np.int32)),
    (np.array([2**64 - 1, 2**63, 3, 1], np.uint64), np.array([-1, -1, 3, 2], np.int8)),
], ids=["u64-i64", "u8-i8", "u32-i32", "u64-i8"])
def test_mixed_signedness_comparisons_values(a, b):
    """The values of comparisons follow NumPy's loop (exact for uint64 vs int64)."""
    ta, tb = qt.asarray(a), qt.asarray(b)
    for nfn, qfn in ((np.less, qt.less), (np.greater, qt.greater), (np.equal, qt.equal),
                     (np.less_equal, qt.less_equal), (np.not_equal, qt.not_equal)):
        np.testing.assert_array_equal(qfn(ta, tb).numpy(), nfn(a, b), err_msg=nfn.__name__)
        np.testing.assert_array_equal(qfn(tb, ta).numpy(), nfn(b, a), err_msg=nfn.__name__)


@pytest.mark.parametrize("value", [-1, 256, 2**70])
def test_comparison_with_out_of_range_python_int(value):
    """NumPy 2 compares ``uint8_array < -1`` exactly (no OverflowError for comparisons)."""
    a = np.array([0, 7, 255], np.uint8)
    t = qt.asarray(a)
    for nfn, qfn in ((np.less, qt.less), (np.greater_equal, qt.greater_equal),
                     (np.equal, qt.equal), (np.not_equal, qt.not_equal)):
        expected = nfn(a, value)
        got = qfn(t, value)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got.numpy(), expected, err_msg=nfn.__name__)


# --- unsupported dtypes: TypeError naming the operation and the dtype ------------------

@pytest.mark.parametrize("make, op, dtype", [
    (lambda: qt.asarray(np.ones(3, np.float16)), "asarray", "float16"),
    (lambda: qt.asarray(np.array([object(), 1], dtype=object)), "asarray", "object"),
    (lambda: qt.asarray(np.array(["a", "b"])), "asarray", "<U1"),
    (lambda: qt.ones(3) * np.ones(3, np.float16), "multiply", "float16"),
    (lambda: qt.ones(3).astype(np.float16), "astype", "float16"),
    (lambda: qt.zeros(3, dtype=np.float16), "zeros", "float16"),
    (lambda: qt.less(qt.ones(3, dtype=qt.complex64), 1.0), "less", "complex64"),
    (lambda: qt.floor(qt.ones(3, dtype=qt.complex128)), "floor", "complex128"),
    (lambda: qt.arange(3, dtype=np.float16), "arange", "float16"),
    (lambda: qt.sin(qt.ones(3, dtype=qt.int8)), "sin", "float16"),
    (lambda: qt.invert(qt.ones(3)), "invert", "float64"),
    (lambda: qt.ones(3, dtype=qt.float32) & 1, "bitwise_and", "float32"),
    (lambda: qt.left_shift(qt.ones(3), 2), "left_shift", "float64"),
    (lambda: qt.ones(3, dtype=qt.bool_) - qt.ones(3, dtype=qt.bool_), "subtract", "bool"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_unsupported_dtype_raises_type_error_naming_op_and_dtype(make, op, dtype):
    with pytest.raises(TypeError) as info:
        make()
    msg = str(info.value)
    assert op in msg, msg
    assert dtype in msg, msg


def test_complex_python_scalars_are_weak():
    """NEP 50: a Python complex promotes float32 to complex64, float64 to complex128."""
    assert (qt.ones(3, dtype=qt.float32) + 1j).dtype == np.complex64
    assert (qt.ones(3) + 1j).dtype == np.complex128
    assert (qt.ones(3, dtype=qt.int32) * 2j).dtype == np.complex128
    np.testing.assert_array_equal(np.asarray(qt.ones(2) + 1j), np.ones(2) + 1j)


