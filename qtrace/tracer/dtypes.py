"""NumPy dtypes and NEP 50 promotion (Python scalars are weak) for qtrace operations."""

from __future__ import annotations

import numpy as np

float32 = np.dtype("float32")
float64 = np.dtype("float64")
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
uint16 = np.dtype("uint16")
uint32 = np.dtype("uint32")
uint64 = np.dtype("uint64")
bool_ = np.dtype("bool")
complex64 = np.dtype("complex64")
complex128 = np.dtype("complex128")

SUPPORTED = frozenset({float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
                       uint64, bool_, complex64, complex128})
PY_SCALARS = (bool, int, float, complex)


def canonical(dtype, op: str = "qt.dtype") -> np.dtype:
    """``dtype`` as a supported ``numpy.dtype``; ``TypeError`` naming ``op`` otherwise."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{op}: {dtype!r} is not a dtype") from None
    check(op, dt)
    return dt


def check(op: str, dtype: np.dtype) -> None:
    if dtype not in SUPPORTED:
        names = ", ".join(sorted(str(d) for d in SUPPORTED))
        raise TypeError(f"{op}: dtype {dtype} is not supported (supported: {names})")


def weak_dtype(value) -> np.dtype:
    """The dtype a weak Python scalar takes when nothing stronger is around it."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return float64
    if isinstance(value, complex):
        return complex128
    raise TypeError(f"qtrace: Python scalars of type {type(value).__name__} are not supported")


def resolve_spec(dtype: np.dtype, weak: bool):
    """What to hand ``ufunc.resolve_dtypes`` for one operand (a type for weak scalars)."""
    if not weak or dtype == bool_:
        return dtype
    return {"f": float, "c": complex}.get(dtype.kind, int)


def resolve_ufunc(op: str, ufunc: np.ufunc, operands: list[tuple[np.dtype, bool]]):
    """Loop dtypes ``(inputs..., output)`` NumPy would use, or ``TypeError`` naming ``op``."""
    key = (op, tuple(operands))
    loop = _resolved.get(key)
    if loop is None:
        loop = _resolved[key] = _resolve(op, ufunc, operands)
    return loop


_resolved: dict = {}


def _resolve(op: str, ufunc: np.ufunc, operands):
    specs = tuple(resolve_spec(dt, weak) for dt, weak in operands) + (None,) * ufunc.nout
    try:
        loop = ufunc.resolve_dtypes(specs)
    except (TypeError, np.exceptions.DTypePromotionError) as err:
        shown = ", ".join(describe(dt, weak) for dt, weak in operands)
        raise TypeError(f"qt.{op}: not supported for dtype(s) {shown}: {err}") from None
    for dt in loop:
        check(f"qt.{op}", dt)
    if op in COMPLEX_UNORDERED and any(dt.kind == "c" for dt in loop):
        raise TypeError(f"qt.{op}: not supported for complex dtypes ({', '.join(map(str, loop))}): "
                        "complex numbers have no order")
    return loop


# NumPy orders complex numbers lexicographically; the Array API leaves these undefined, and
# qtrace does not define them
COMPLEX_UNORDERED = frozenset({"less", "less_equal", "greater", "greater_equal", "maximum",
                               "minimum", "fmax", "fmin", "floor_divide", "remainder", "arctan2",
                               "hypot"})


def describe(dtype: np.dtype, weak: bool) -> str:
    spec = resolve_spec(dtype, weak)
    return f"python {spec.__name__}" if isinstance(spec, type) else str(dtype)


def check_int_fits(op: str, value, dtype: np.dtype) -> None:
    """NumPy 2 raises for a Python int that does not fit the other operand's int dtype."""
    if isinstance(value, bool) or not isinstance(value, int) or dtype.kind not in "iu":
        return
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise OverflowError(f"qt.{op}: Python integer {value} out of bounds for {dtype}")


def scalar_value(value, dtype: np.dtype):
    """A Python scalar converted to ``dtype``, as a Python value (for graph constants)."""
    if dtype == float64 and type(value) in (float, int, bool):
        return float(value)
    if dtype == bool_:
        return bool(value)
    return np.array(value).astype(dtype).item()


def assignable(value, dtype: np.dtype, op: str):
    """Python scalar ``value`` as stored into an array of ``dtype`` (``a[i] = value``):
    NumPy's conversion — floats truncate into integers; NaN, infinities and integers out
    of range raise (``ValueError`` / ``OverflowError``, naming ``op``)."""
    try:
        return np.array(value, dtype=dtype).item()
    except (ValueError, OverflowError) as err:
        raise type(err)(f"{op}: cannot store {value!r} in an array of {dtype}: {err}") from None
