"""Creating tensors: from data (``array``, ``asarray``, DLPack) and by shape (``zeros``, ...)."""

from __future__ import annotations

import math

import numpy as np

from ..errors import TracerError
from ..graph.device import Device
from . import dtypes
from . import elementwise as _ew
from .context import record, tracing
from .convert import astype, cast, const_node, input_node, usable_device, wrap
from .shape_ops import broadcast_to
from .tensor import Tensor


def _device(device) -> Device:
    return usable_device(device, "device")


def array(obj, dtype=None, device=None) -> Tensor:
    """A new tensor holding a copy of ``obj`` (array-like, tensor, or DLPack object).

    Example:
        >>> import qtrace as qt
        >>> qt.array([[1, 2], [3, 4]]).shape
        (2, 2)
    """
    if isinstance(obj, Tensor):
        t = obj if dtype is None else wrap(cast(obj._node, dtypes.canonical(dtype, "qt.array"), weak=False))
        return Tensor(t._node)
    if dtype is not None:
        dtype = dtypes.canonical(dtype, "qt.array")
    return wrap(input_node(obj, "array", dtype=dtype, copy=True, device=_device(device)))


def asarray(obj, /, dtype=None, device=None, copy: bool | None = None) -> Tensor:
    """``obj`` as a tensor, sharing its memory where the layout and dtype allow.

    NumPy arrays are wrapped without a copy (qtrace never writes into them: a write to the
    tensor makes its own copy). ``copy=True`` always copies, ``copy=False`` raises where
    a copy would be needed (the Array API's rule); a tensor is returned as is.

    Example:
        >>> import numpy as np, qtrace as qt
        >>> a = np.arange(3.0)
        >>> qt.asarray(a).dtype
        dtype('float64')
    """
    if isinstance(obj, Tensor):
        same = dtype is None or np.dtype(dtype) == obj.dtype
        if copy is False and not same:
            raise ValueError(f"qt.asarray: converting {obj.dtype} to {np.dtype(dtype)} needs a copy "
                             "(copy=False)")
        t = obj if same else wrap(cast(obj._node, dtypes.canonical(dtype, "qt.asarray"), weak=False))
        return Tensor(t._node) if copy and t is obj else t
    if dtype is not None:
        dtype = dtypes.canonical(dtype, "qt.asarray")
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__"):
        t = from_dlpack(obj)
        return asarray(t, dtype, copy=copy)
    if copy:
        return wrap(input_node(obj, "asarray", dtype=dtype, copy=True, device=_device(device)))
    if copy is False:
        arr = np.asarray(obj)
        if not isinstance(obj, np.ndarray) or (dtype is not None and arr.dtype != dtype):
            raise ValueError("qt.asarray: copy=False, but this input can only be converted by copying")
    return wrap(input_node(obj, "asarray", dtype=dtype, device=_device(device)))


_ORDERS = (None, "C", "F", "A", "K")


def _order(order, op: str) -> None:
    """NumPy's memory ``order`` argument: accepted and checked (qtrace lays out its own
    memory; values do not depend on it)."""
    if order not in _ORDERS:
        raise ValueError(f"qt.{op}: order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")


def asanyarray(a, dtype=None, order=None, *, device=None, copy=None, like=None) -> Tensor:
    """``numpy.asanyarray``: :func:`asarray` (qtrace has no array subclasses to keep).
    ``order`` is checked and otherwise ignored: a tensor's memory layout is qtrace's.

    Example:
        >>> import qtrace as qt
        >>> qt.asanyarray([1.0, 2.0]).tolist()
        [1.0, 2.0]
    """
    _order(order, "asanyarray")
    return asarray(a, dtype, device, copy)


def ascontiguousarray(a, dtype=None, *, like=None) -> Tensor:
    """``numpy.ascontiguousarray``: :func:`asarray`, with at least one dimension (a 0-d
    input becomes shape ``(1,)``, as in NumPy). qtrace's own memory is always contiguous.

    Example:
        >>> import qtrace as qt
        >>> qt.ascontiguousarray(3.0).shape
        (1,)
    """
    t = asarray(a, dtype)
    return t if t.ndim else t.reshape((1,))


def asarray_chkfinite(a, dtype=None, order=None) -> Tensor:
    """``numpy.asarray_chkfinite``: :func:`asarray`, raising ``ValueError`` if an element of
    a floating or complex array is infinite or NaN.

    The check needs the values: the array is evaluated here (inside ``qt.jit``, where no
    value exists yet, it raises ``TracerError``; use ``qt.isfinite`` there).

    Example:
        >>> import qtrace as qt
        >>> qt.asarray_chkfinite([1.0, 2.0]).tolist()
        [1.0, 2.0]
    """
    _order(order, "asarray_chkfinite")
    t = asarray(a, dtype)
    if t.dtype.kind in "fc":
        from .reductions import all as all_  # (reductions imports this module)
        if tracing():
            raise TracerError("qt.asarray_chkfinite: checking for infs and NaNs needs the values, "
                              "which a function traced by qt.jit does not have; use qt.isfinite")
        if not bool(all_(_ew.apply("isfinite", t))):
            raise ValueError("qt.asarray_chkfinite: array must not contain infs or NaNs")
    return t


def from_dlpack(obj, /, *, device=None, copy=None) -> Tensor:
    """A tensor sharing the memory of a DLPack-exporting object (host or CUDA memory);
    ``copy=True`` copies, ``copy=False`` refuses to (the Array API's keywords); ``device``,
    if given, must be where the memory is.

    Example:
        >>> import numpy as np, qtrace as qt
        >>> qt.from_dlpack(np.arange(3.0)).tolist()
        [0.0, 1.0, 2.0]
    """
    if hasattr(obj, "__dlpack_device__") and obj.__dlpack_device__()[0] == 2:  # kDLCUDA
        import cupy
        arr = cupy.from_dlpack(obj)
        return wrap(input_node(arr, "from_dlpack", copy=bool(copy), device=device))
    if device is not None and _device(device).kind != "cpu":
        raise ValueError(f"qt.from_dlpack: the memory is on the host, not on {device}")
    kwargs = {} if copy is None else {"copy": copy}
    try:
        arr = np.from_dlpack(obj, **kwargs)
    except TypeError:  # an exporter that predates the copy keyword
        arr = np.from_dlpack(obj)
        if copy:
            arr = arr.copy()
    return wrap(input_node(arr, "from_dlpack", owned=bool(copy)))


def _shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"qtrace: negative dimensions are not allowed, got {shape}")
    return shape


def full(shape, fill_value, dtype=None, device=None, *, _op: str = "full") -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (recorded lazily: no memory until used).

    Example:
        >>> import qtrace as qt
        >>> qt.full((2,), 7, dtype=qt.int32).tolist()
        [7, 7]
    """
    shape = _shape(shape)
    if isinstance(fill_value, Tensor):
        dt = dtypes.canonical(dtype, f"qt.{_op}") if dtype is not None else fill_value.dtype
        return broadcast_to(wrap(cast(fill_value._node, dt, weak=False)), shape)
    dt = dtypes.canonical(dtype if dtype is not None else np.asarray(fill_value).dtype, f"qt.{_op}")
    node = const_node(fill_value, dt, _device(device))
    if not shape:
        return wrap(node)
    return wrap(record("broadcast", (node,), (shape,), shape, dt))


def zeros(shape, dtype=None, device=None) -> Tensor:
    """``numpy.zeros``: float64 unless ``dtype`` says otherwise."""
    return full(shape, 0, dtype if dtype is not None else dtypes.float64, device, _op="zeros")


def ones(shape, dtype=None, device=None) -> Tensor:
    """``numpy.ones``: float64 unless ``dtype`` says otherwise."""
    return full(shape, 1, dtype if dtype is not None else dtypes.float64, device, _op="ones")


def empty(shape, dtype=None, device=None) -> Tensor:
    """``numpy.empty``; qtrace fills it with zeros (reading it is then well defined)."""
    return zeros(shape, dtype, device)


def _like(x, dtype):
    t = x if isinstance(x, Tensor) else asarray(x)
    return t.shape, (dtype if dtype is not None else t.dtype), t.device


def zeros_like(x, dtype=None, device=None) -> Tensor:
    """Zeros with the shape (and dtype) of ``x``."""
    shape, dt, dev = _like(x, dtype)
    return zeros(shape, dt, device or dev)


def ones_like(x, dtype=None, device=None) -> Tensor:
    """Ones with the shape (and dtype) of ``x``."""
    shape, dt, dev = _like(x, dtype)
    return ones(shape, dt, device or dev)


def empty_like(x, dtype=None, device=None) -> Tensor:
    return zeros_like(x, dtype, device)


def full_like(x, fill_value, dtype=None, device=None) -> Tensor:
    """``fill_value`` with the shape (and dtype) of ``x``."""
    shape, dt, dev = _like(x, dtype)
    return full(shape, fill_value, dt, device or dev)


def arange(start, stop=None, step=1, dtype=None, device=None) -> Tensor:
    """``numpy.arange`` (values exactly as NumPy computes them).

    Example:
        >>> import qtrace as qt
        >>> qt.arange(1, 7, 2).tolist()
        [1, 3, 5]
    """
    if dtype is not None:
        dtype = dtypes.canonical(dtype, "qt.arange")
    if stop is None:
        start, stop = 0, start
    dev = _device(device)
    n = _arange_length(start, stop, step)
    if n is None or n < LAZY_ARANGE_MIN:
        values = np.arange(start, stop, step, dtype=dtype)  # also raises NumPy's errors
        return wrap(input_node(values, "arange", device=dev, owned=True))
    dt = dtype or np.result_type(np.arange(start, start, step), np.arange(stop, stop, step))
    if dt.kind not in "iuf":
        return wrap(input_node(np.arange(start, stop, step, dtype=dt), "arange", device=dev, owned=True))
    # NumPy's fill: element 0 is start, 1 is start + step (each cast to dt), then
    # start + i * delta in dt's arithmetic with delta = element 1 - element 0
    first, second = np.arange(start, start + 1.5 * step, step, dtype=dt)[:2].tolist()
    i = wrap(record("iota", (), (), (n,), dtypes.int64, device=dev))
    delta = (np.array(second, dt) - np.array(first, dt)).item()
    vals = _ew.add(_ew.multiply(astype(i, dt), wrap(const_node(delta, dt, dev))),
                   wrap(const_node(first, dt, dev)))
    vals = _ew.where(_ew.equal(i, 1), wrap(const_node(second, dt, dev)), vals)
    return _ew.where(_ew.equal(i, 0), wrap(const_node(first, dt, dev)), vals)


# From this many elements ``arange`` is an index generator computed where it is read (it
# fuses into its consumers: ``qt.arange(n) % 7 == 0`` never stores ``n`` integers); below,
# NumPy fills the values (cheaper than a graph for small ranges).
LAZY_ARANGE_MIN = 1 << 16


def _arange_length(start, stop, step) -> int | None:
    """NumPy's ``arange`` length, ``ceil((stop - start) / step)`` (at least 0), or None where
    NumPy must decide (a zero or non-finite step or length, complex or odd arguments)."""
    try:
        q = (stop - start) / step
        return max(0, math.ceil(q)) if math.isfinite(q) else None
    except (TypeError, ZeroDivisionError, OverflowError, ValueError):
        return None


def linspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, device=None) -> Tensor:
    """``numpy.linspace`` (values exactly as NumPy computes them).

    A long one (``num >= 65536``, real start and stop, a floating dtype) is an index
    generator, computed where it is used — no memory of its own — with NumPy's
    arithmetic: ``i * step + start`` in float64 (``i / div * delta`` when ``step`` is 0),
    the last element ``stop`` when ``endpoint``, then cast to ``dtype``.

    Example:
        >>> import qtrace as qt
        >>> qt.linspace(0.0, 1.0, 5).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if dtype is not None:
        dtype = dtypes.canonical(dtype, "qt.linspace")
    dev = _device(device)
    lazy = (type(num) is int and num >= max(LAZY_ARANGE_MIN, 2) and (dtype is None or dtype.kind == "f")
            and all(type(v) in (int, float) for v in (start, stop)))
    if not lazy:
        values = np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)
        return wrap(input_node(values, "linspace", device=dev, owned=True))
    div = num - 1 if endpoint else num
    delta = float(stop) - float(start)
    step = delta / div
    i = astype(wrap(record("iota", (), (), (num,), dtypes.int64, device=dev)), dtypes.float64)

    def const(v):
        return wrap(const_node(v, dtypes.float64, dev))
    if step == 0:
        y = _ew.multiply(_ew.divide(i, const(float(div))), const(delta))
    else:
        y = _ew.multiply(i, const(step))
    y = _ew.add(y, const(float(start)))
    if endpoint:
        y = _ew.where(_ew.equal(i, const(float(num - 1))), const(float(stop)), y)
    return y if dtype is None or dtype == dtypes.float64 else astype(y, dtype)


def copy(x) -> Tensor:
    """A copy of ``x`` (tensors are immutable, so this is cheap)."""
    return array(x)
