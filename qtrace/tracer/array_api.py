"""The Array API standard's names that NumPy spells differently, its data-type functions
(``finfo``, ``iinfo``, ``result_type``, ``can_cast``, ``isdtype``) and the inspection
namespace (``__array_namespace_info__``): with them ``qtrace`` is an Array API 2024.12
namespace, and ``qt.Tensor.__array_namespace__()`` returns it.

Example:
    >>> import qtrace as qt
    >>> x = qt.asarray([1.0, 2.0])
    >>> xp = x.__array_namespace__()
    >>> xp.acos(xp.asarray([1.0])).tolist(), xp.finfo(xp.float32).eps == 2.0 ** -23
    ([0.0], True)
"""

from __future__ import annotations

import numpy as np

from ..errors import TracerError
from ..graph.device import Device
from . import dtypes
from . import elementwise as ew
from .context import tracing
from .evaluation import devices
from .reductions import all as all_
from .shape_ops import as_tensor, concatenate, transpose
from .tensor import Tensor

__array_api_version__ = "2024.12"

_ALIASES = {  # standard name -> NumPy name of the same elementwise function
    "acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan",
    "atan2": "arctan2", "atanh": "arctanh", "pow": "power", "bitwise_invert": "invert",
    "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift",
}
ALIASES = {name: ew.FUNCTIONS[numpy_name] for name, numpy_name in _ALIASES.items()}


def _dtype_of(x) -> np.dtype:
    if isinstance(x, Tensor):
        return x.dtype
    if isinstance(x, np.ndarray):
        return x.dtype
    return dtypes.canonical(x, "qt.dtype")


class finfo_object:  # noqa: N801 - the standard's name for what finfo returns
    """Machine limits of a floating-point dtype (``bits``, ``eps``, ``max``, ``min``,
    ``smallest_normal``, ``dtype``), as Python floats."""

    def __init__(self, dtype: np.dtype):
        info = np.finfo(dtype)
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.smallest_normal = float(info.smallest_normal)
        self.dtype = np.dtype(info.dtype)

    def __repr__(self) -> str:
        return f"qt.finfo(dtype={self.dtype}, bits={self.bits}, eps={self.eps})"


class iinfo_object:  # noqa: N801
    """Limits of an integer dtype (``bits``, ``max``, ``min``, ``dtype``)."""

    def __init__(self, dtype: np.dtype):
        info = np.iinfo(dtype)
        self.bits, self.max, self.min, self.dtype = int(info.bits), int(info.max), int(info.min), dtype

    def __repr__(self) -> str:
        return f"qt.iinfo(dtype={self.dtype}, min={self.min}, max={self.max})"


def finfo(type, /) -> finfo_object:  # noqa: A002 - the standard's parameter name
    """``finfo`` (Array API): limits of a floating-point dtype or of an array's dtype.

    Example:
        >>> import qtrace as qt
        >>> qt.finfo(qt.float64).bits
        64
    """
    dt = _dtype_of(type)
    if dt.kind not in "fc":
        raise TypeError(f"qt.finfo: {dt} is not a floating-point dtype")
    return finfo_object(dt)


def iinfo(type, /) -> iinfo_object:  # noqa: A002
    """``iinfo`` (Array API): limits of an integer dtype or of an array's dtype.

    Example:
        >>> import qtrace as qt
        >>> qt.iinfo(qt.int8).max
        127
    """
    dt = _dtype_of(type)
    if dt.kind not in "iu":
        raise TypeError(f"qt.iinfo: {dt} is not an integer dtype")
    return iinfo_object(dt)


def result_type(*arrays_and_dtypes):
    """``result_type`` (Array API): the dtype NumPy 2 promotion gives (Python scalars weak).

    Example:
        >>> import qtrace as qt
        >>> qt.result_type(qt.float32, 1.0)
        dtype('float32')
    """
    if not arrays_and_dtypes:
        raise ValueError("qt.result_type: at least one array or dtype is required")
    args = []
    for a in arrays_and_dtypes:
        if isinstance(a, Tensor) and a.weak_type and a.dtype.kind in "fiu":
            args.append(0.0 if a.dtype.kind == "f" else 0)  # a traced Python scalar: weak
        elif isinstance(a, Tensor):
            args.append(a.dtype)
        elif isinstance(a, (bool, int, float, complex)):
            args.append(a)
        else:
            args.append(_dtype_of(a))
    try:
        dt = np.result_type(*args)
    except (TypeError, np.exceptions.DTypePromotionError) as err:
        raise TypeError(f"qt.result_type: {err}") from None
    dtypes.check("qt.result_type", dt)
    return dt


def can_cast(from_, to, /) -> bool:
    """``can_cast`` (Array API): whether NumPy's ``same_kind``-safe casting allows it.

    Example:
        >>> import qtrace as qt
        >>> qt.can_cast(qt.int32, qt.float64), qt.can_cast(qt.float64, qt.int32)
        (True, False)
    """
    return bool(np.can_cast(_dtype_of(from_), _dtype_of(to), casting="safe"))


_KINDS = {
    "bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
    "real floating": "f", "complex floating": "c", "numeric": "iufc",
}


def isdtype(dtype, kind) -> bool:
    """``isdtype`` (Array API): whether ``dtype`` is ``kind`` (a dtype, a kind name such as
    ``'real floating'``, or a tuple of them).

    Example:
        >>> import qtrace as qt
        >>> qt.isdtype(qt.int8, "integral"), qt.isdtype(qt.float32, ("bool", qt.float32))
        (True, True)
    """
    dt = np.dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        letters = _KINDS.get(kind)
        if letters is None:
            raise ValueError(f"qt.isdtype: unknown kind {kind!r} (known: {sorted(_KINDS)})")
        return dt.kind in letters
    return dt == np.dtype(kind)


# -- functions the standard names differently or NumPy lacks ------------------------------
def concat(arrays, /, *, axis: int | None = 0) -> Tensor:
    """``concat`` (Array API; ``numpy.concatenate``)."""
    return concatenate(arrays, axis=axis)


def unstack(x, /, *, axis: int = 0) -> tuple:
    """``unstack`` (Array API): the slices of ``x`` along ``axis`` (views), as a tuple."""
    t = as_tensor(x, "unstack")
    from .shape_ops import normalize_axis
    ax = normalize_axis(axis, t.ndim, "unstack")
    moved = transpose(t, (ax,) + tuple(a for a in range(t.ndim) if a != ax)) if ax else t
    return tuple(moved[i] for i in range(t.shape[ax]))


class _Info:
    """What ``qt.__array_namespace_info__()`` returns (the standard's inspection API)."""

    def capabilities(self) -> dict:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self):
        from ..config import config
        return Device(config.device)

    def devices(self) -> list:
        return list(devices())

    def default_dtypes(self, *, device=None) -> dict:
        self._check(device)
        return {"real floating": dtypes.float64, "complex floating": np.dtype("complex128"),
                "integral": dtypes.int64, "indexing": dtypes.int64}

    def dtypes(self, *, device=None, kind=None) -> dict:
        self._check(device)
        names = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float32", "float64"]
        out = {n: np.dtype(n) for n in names if np.dtype(n) in dtypes.SUPPORTED}
        if kind is None:
            return out
        return {n: d for n, d in out.items() if isdtype(d, kind)}

    def _check(self, device) -> None:
        if device is not None and Device(device) not in devices():
            raise ValueError(f"qt.__array_namespace_info__: unknown device {device}")


def __array_namespace_info__() -> _Info:
    """The standard's inspection namespace: capabilities, devices, default and supported dtypes."""
    return _Info()


def _part(x, prim: str) -> Tensor:
    from ..graph.primitives import PRIMITIVES  # noqa: F401 - the parts are primitives
    from .context import record
    from .convert import wrap
    t = as_tensor(x, prim)
    part = np.dtype(np.float32 if t.dtype == np.complex64 else np.float64)
    return wrap(record(prim, (t._node,), (), t.shape, part, weak=t._node.weak))


def complex_from_parts(re: Tensor, im: Tensor) -> Tensor:
    """``re + i im`` exactly (signed zeros, infinities and NaNs kept part by part), from
    real tensors of one dtype (float32 parts make complex64, float64 complex128)."""
    from .context import record
    from .convert import wrap
    cdt = np.dtype(np.complex64 if re.dtype == np.float32 else np.complex128)
    shape = np.broadcast_shapes(re.shape, im.shape)
    return wrap(record("complex", (re._node, im._node), (), shape, cdt,
                       weak=re._node.weak and im._node.weak))


def real(x, /) -> Tensor:
    """``real`` (Array API): the real part (of a real array: its own values).

    Example:
        >>> import qtrace as qt
        >>> qt.real(qt.asarray([1 + 2j])).tolist()
        [1.0]
    """
    t = as_tensor(x, "real")
    return _part(t, "real") if t.dtype.kind == "c" else Tensor(t._node)


def imag(x, /) -> Tensor:
    """``imag`` (Array API): the imaginary part (zeros for a real array)."""
    t = as_tensor(x, "imag")
    if t.dtype.kind == "c":
        return _part(t, "imag")
    from .creation import zeros_like
    return zeros_like(t)


def angle(z, deg: bool = False) -> Tensor:
    """``numpy.angle``: the argument of each element (radians, or degrees with ``deg``)."""
    t = as_tensor(z, "angle")
    if t.dtype.kind == "c":
        out = _part(t, "angle")
    else:
        from .convert import astype
        f = astype(t, np.result_type(t.dtype, np.float64) if t.dtype.kind != "f" else t.dtype)
        out = ew.where(ew.apply2("less", f, 0), np.pi, 0.0) + f * 0.0
    return ew.apply2("multiply", out, 180.0 / np.pi) if deg else out


def abs_squared(t: Tensor) -> Tensor:
    """``abs(t) ** 2``, real (``real(t * conj(t))`` for complex ``t``), differentiable at 0."""
    if t.dtype.kind == "c":
        return real(ew.apply2("multiply", t, ew.apply1("conj", t)))
    return ew.apply2("multiply", t, t)


def iscomplex(x) -> Tensor:
    """``numpy.iscomplex``: where the imaginary part is non-zero (all False for a real array).

    Example:
        >>> import qtrace as qt
        >>> qt.iscomplex(qt.asarray([1 + 1j, 2 + 0j])).tolist()
        [True, False]
    """
    t = as_tensor(x, "iscomplex")
    if t.dtype.kind == "c":
        return ew.apply2("not_equal", _part(t, "imag"), 0)
    from .creation import zeros
    return zeros(t.shape, dtypes.bool_, device=t.device)


def isreal(x) -> Tensor:
    """``numpy.isreal``: where the imaginary part is zero (all True for a real array).

    Example:
        >>> import qtrace as qt
        >>> qt.isreal(qt.asarray([1 + 1j, 2 + 0j])).tolist()
        [False, True]
    """
    return ew.apply1("logical_not", iscomplex(x))


def iscomplexobj(x) -> bool:
    """``numpy.iscomplexobj``: whether ``x``'s dtype is complex (the dtype alone decides, not
    the values).

    Example:
        >>> import qtrace as qt
        >>> qt.iscomplexobj(qt.asarray([1.0])), qt.iscomplexobj(qt.asarray([1.0 + 0j]))
        (False, True)
    """
    dt = x.dtype if isinstance(getattr(x, "dtype", None), np.dtype) else np.asarray(x).dtype
    return dt.kind == "c"


def isrealobj(x) -> bool:
    """``numpy.isrealobj``: whether ``x``'s dtype is not complex.

    Example:
        >>> import qtrace as qt
        >>> qt.isrealobj(qt.asarray([1.0]))
        True
    """
    return not iscomplexobj(x)


def real_if_close(a, tol=100) -> Tensor:
    """``numpy.real_if_close``: the real part of a complex array whose imaginary parts are all
    below ``tol`` (in machine epsilons of its precision when ``tol > 1``), else the array.

    The result's dtype depends on the values: the array is evaluated here (inside
    ``qt.jit`` it raises ``TracerError``; use ``qt.real`` there).

    Example:
        >>> import qtrace as qt
        >>> qt.real_if_close(qt.asarray([2.0 + 1e-15j])).tolist()
        [2.0]
    """
    t = as_tensor(a, "real_if_close")
    if t.dtype.kind != "c":
        return t
    if tracing():
        raise TracerError("qt.real_if_close: the result's dtype depends on the values, which a "
                          "function traced by qt.jit does not have; use qt.real")
    if tol > 1:
        tol = np.finfo(t.dtype).eps * tol
    close = all_(ew.apply2("less", ew.apply1("abs", _part(t, "imag")), tol))
    return _part(t, "real") if bool(close) else t


conj = ew.FUNCTIONS["conj"]


def nextafter(x1, x2, /) -> Tensor:
    """``nextafter`` (Array API): the next representable float after ``x1`` towards ``x2``
    (a library call: it works on the floats' bits). Not differentiable.

    Example:
        >>> import qtrace as qt
        >>> float(qt.nextafter(qt.asarray(1.0), 2.0)) - 1.0 == 2.0 ** -52
        True
    """
    from . import library
    from .convert import astype
    from .shape_ops import broadcast_arrays
    a, b = as_tensor(x1, "nextafter"), as_tensor(x2, "nextafter")
    dt = result_type(a, b)
    if dt.kind != "f":
        raise TypeError(f"qt.nextafter: needs real floating-point arrays, got {a.dtype} and {b.dtype}")
    a, b = broadcast_arrays(astype(a, dt), astype(b, dt))
    return library.call("nextafter", [a, b], (), [(a.shape, dt)])[0]


def broadcast_shapes(*shapes) -> tuple:
    """``broadcast_shapes`` (Array API; ``numpy.broadcast_shapes``): the shape broadcasting gives.

    Example:
        >>> import qtrace as qt
        >>> qt.broadcast_shapes((2, 1), (3,))
        (2, 3)
    """
    from ..graph.primitives import broadcast_shapes as _broadcast
    if not shapes:
        return ()
    return _broadcast("qt.broadcast_shapes", *(tuple(int(d) for d in s) for s in shapes))
