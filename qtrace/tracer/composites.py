"""NumPy functions composed from qtrace's own operations (``roll``, ``pad``, ``var``, ...).

Every function here is built only from recorded qtrace operations (views, concatenation,
gathers, elementwise functions, reductions): nothing is evaluated and NumPy never sees a
tensor's values, so each works inside ``qt.jit`` and is differentiated by ``qt.grad``
through its parts. Parameters that decide a result's shape (shifts of ``roll`` aside,
which may be traced) must be Python or NumPy integers.

``NUMPY_FUNCTIONS`` maps the NumPy functions to these (``__array_function__``);
``NUMPY_UFUNCS`` maps the NumPy ufuncs among them (``logaddexp``, ``fmax``, ...), which
NumPy dispatches through ``__array_ufunc__`` instead.

Example:
    >>> import qtrace as qt
    >>> x = qt.arange(5.0)
    >>> qt.roll(x, 2).tolist()
    [3.0, 4.0, 0.0, 1.0, 2.0]
    >>> qt.grad(lambda v: qt.sum(qt.pad(v, 1, mode="edge")))(x).tolist()
    [2.0, 1.0, 1.0, 1.0, 2.0]
"""

from __future__ import annotations

import math
import operator

import numpy as np

from ..config import config
from ..errors import TracerError
from ..graph.device import Device
from . import dtypes, views
from . import elementwise as _ew
from . import reductions as _red
from .array_api import abs_squared
from .context import tracing
from .convert import astype, const_node, input_node, operand, place, wrap
from .creation import arange, full, zeros
from .indexing import getitem
from .linalg import matmul
from .shape_ops import (
    broadcast_arrays,
    broadcast_to,
    concatenate,
    moveaxis,
    normalize_axes,
    normalize_axis,
    ravel,
    reshape,
    stack,
    transpose,
)
from .tensor import Tensor

_NOVALUE = object()  # "argument not given" (NumPy's own marker is accepted too)


# --- argument helpers ------------------------------------------------------------------
def _given(v) -> bool:
    return v is not _NOVALUE and v is not np._NoValue


def _tensor(x, op: str) -> Tensor:
    """``x`` as a tensor the way ``numpy.asanyarray`` sees it (Python scalars become strong)."""
    if isinstance(x, Tensor):
        return x
    if type(x) in dtypes.PY_SCALARS:
        return wrap(const_node(x, dtypes.weak_dtype(x), Device(config.device)))
    if isinstance(x, (list, tuple)) and _holds_tensor(x):
        return stack([_tensor(v, op) for v in x])
    return wrap(input_node(x, op))


def _written_values(values, dtype, op: str, device, casting: str = "unsafe") -> Tensor:
    """``values`` about to be written into an array of ``dtype`` by ``op`` (``put``,
    ``insert``, ...), converted as NumPy converts them: Python numbers and lists of them as
    ``numpy.array(values, dtype)`` does (an integer out of range raises ``OverflowError``, a
    complex number into a real array ``TypeError``), arrays and tensors by ``casting``
    (``'unsafe'``: any; ``'safe'``: ``putmask``'s and ``place``'s rule)."""
    if not isinstance(values, (Tensor, np.ndarray)) and not _holds_tensor(values):
        try:
            host = np.array(values, dtype=dtype)
        except (OverflowError, TypeError, ValueError) as err:
            raise type(err)(f"qt.{op}: {err}") from None
        return wrap(input_node(host, op, device=device, owned=True))
    v = _tensor(values, op) if isinstance(values, Tensor) or _holds_tensor(values) else \
        wrap(input_node(values, op, device=device))
    if casting != "unsafe" and not np.can_cast(v.dtype, dtype, casting):
        raise TypeError(f"qt.{op}: Cannot cast array data from {v.dtype!r} to {np.dtype(dtype)!r} "
                        f"according to the rule {casting!r}")
    return v


def _holds_tensor(x) -> bool:
    if isinstance(x, Tensor):
        return True
    return isinstance(x, (list, tuple)) and any(_holds_tensor(v) for v in x)


def _sequence(arrays, op: str) -> list:
    """The arrays of a ``*stack``/``*split`` argument (a tensor counts as its rows)."""
    if isinstance(arrays, Tensor):
        if arrays.ndim == 0:
            raise TypeError(f"qt.{op}: arrays to stack must be passed as a sequence, got a 0-d tensor")
        return [arrays[i] for i in range(arrays.shape[0])]
    if not isinstance(arrays, (list, tuple)):
        if isinstance(arrays, np.ndarray) and arrays.ndim:
            return list(arrays)
        raise TypeError(f"qt.{op}: arrays to stack must be passed as a sequence type such as list "
                        f"or tuple, got {type(arrays).__name__}")
    return list(arrays)


def _int(v, op: str, what: str) -> int:
    """A shape-deciding integer parameter (never a tensor: its value is needed now)."""
    if isinstance(v, Tensor):
        raise TypeError(f"qt.{op}: {what} must be a Python or NumPy integer, not a qt.Tensor "
                        "(it decides the result's shape; inside qt.jit mark it static)")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"qt.{op}: {what} must be an integer, got {v!r}") from None


def _ints(v, op: str, what: str) -> tuple:
    """An integer or a sequence of integers as a tuple of ints."""
    if isinstance(v, Tensor) and v.ndim > 0:
        if tracing():
            raise TracerError(f"qt.{op}: {what} given as a tensor decide the result's shape, which a "
                              "function traced by qt.jit cannot have; pass them as a static tuple")
        v = np.asarray(v)
    if isinstance(v, Tensor):
        _int(v, op, what)
    if isinstance(v, np.ndarray):
        if v.dtype.kind not in "iu":
            raise TypeError(f"qt.{op}: {what} must be integers, got an array of dtype {v.dtype}")
        return tuple(int(i) for i in v.reshape(-1))
    if isinstance(v, (list, tuple)):
        return tuple(_int(i, op, what) for i in v)
    return (_int(v, op, what),)


def _is_sequence(v) -> bool:
    return isinstance(v, (list, tuple)) or isinstance(v, np.ndarray) and v.ndim > 0


def _along(t: Tensor, ax: int, index) -> Tensor:
    """``t`` indexed by ``index`` (a slice or an integer array) along axis ``ax``."""
    return getitem(t, (slice(None),) * ax + (index,))


def _ufunc_operands(name: str, ufunc, *args):
    """Operands converted to the loop dtypes NumPy's ``ufunc`` picks (NEP 50), and its output dtype."""
    ops = [operand(a, name) for a in args]
    loop = dtypes.resolve_ufunc(name, ufunc, [(o.dtype, o.weak) for o in ops])
    nodes = place(ops, loop[: len(ops)], name)
    return [wrap(n) for n in nodes], loop[len(ops)]


def _no_out(out, op: str) -> None:
    if out is not None:
        raise TypeError(f"qt.{op}: out= is not supported by qtrace's own functions: assign the "
                        f"result (o[...] = qt.{op}(...)), or call NumPy's function on the tensor "
                        f"(np.{op}(t, out=o) writes into o)")


# --- rearranging -----------------------------------------------------------------------
def roll(a, shift, axis=None) -> Tensor:
    """``numpy.roll``: shift elements along axes, those leaving one end re-entering at the other.

    ``shift`` and ``axis`` may be integers or equally long tuples; with ``axis=None`` the
    flattened array is rolled. A shift may also be a 0-d integer tensor (a traced value).

    Example:
        >>> import qtrace as qt
        >>> qt.roll(qt.arange(6).reshape(2, 3), -1, axis=1).tolist()
        [[1, 2, 0], [4, 5, 3]]
    """
    t = _tensor(a, "roll")
    if axis is None:
        return reshape(roll(ravel(t), shift, 0), t.shape)
    axes = _ints(axis, "roll", "axis")
    if isinstance(shift, Tensor):
        if shift.ndim != 0 or shift.dtype.kind not in "iu":
            raise TypeError(f"qt.roll: a tensor shift must be a 0-d integer tensor, got shape "
                            f"{shift.shape} dtype {shift.dtype}")
        shifts = (astype(shift, dtypes.int64),) * len(axes)
    else:
        shifts = _ints(shift, "roll", "shift")
        if len(shifts) == 1:
            shifts = shifts * len(axes)
        elif len(axes) == 1:
            axes = axes * len(shifts)
        elif len(shifts) != len(axes):
            raise ValueError(f"qt.roll: shift {shift!r} and axis {axis!r} must have the same length")
    total = {}
    for s, ax in zip(shifts, axes):
        ax = normalize_axis(ax, t.ndim, "roll")
        total[ax] = s if ax not in total else total[ax] + s
    for ax, s in total.items():
        n = t.shape[ax]
        if n == 0:
            continue
        if isinstance(s, Tensor):
            idx = _ew.apply("remainder", _ew.apply("subtract", arange(n), s), n)
            t = _along(t, ax, idx)
            continue
        s %= n
        if s:  # two region writes (they fuse into what reads the result; a concatenation
            # would be a task of its own): the last n - s elements first, then the first s
            at = [0] * t.ndim
            ones = (1,) * t.ndim
            node = t._node
            for start, part in ((s, slice(None, n - s)), (0, slice(n - s, None))):
                at[ax] = start
                node = views.update_node(node, _along(t, ax, part)._node, tuple(at), ones)
            t = wrap(node)
    return t


def tile(A, reps) -> Tensor:
    """``numpy.tile``: repeat the whole array ``reps`` times along each axis.

    Example:
        >>> import qtrace as qt
        >>> qt.tile(qt.arange(3), 2).tolist()
        [0, 1, 2, 0, 1, 2]
        >>> qt.tile(qt.arange(2), (2, 2)).tolist()
        [[0, 1, 0, 1], [0, 1, 0, 1]]
    """
    t = _tensor(A, "tile")
    reps = _ints(reps, "tile", "reps")
    if any(r < 0 for r in reps):
        raise ValueError(f"qt.tile: negative repetitions are not allowed, got reps {reps}")
    d = max(len(reps), t.ndim)
    reps = (1,) * (d - len(reps)) + reps
    shape = (1,) * (d - t.ndim) + t.shape
    t = reshape(t, shape)
    if all(r == 1 for r in reps):
        return t
    pairs = tuple(v for s in shape for v in (1, s))
    full_pairs = tuple(v for r, s in zip(reps, shape) for v in (r, s))
    out = broadcast_to(reshape(t, pairs), full_pairs)
    return reshape(out, tuple(r * s for r, s in zip(reps, shape)))


def repeat(a, repeats, axis=None) -> Tensor:
    """``numpy.repeat``: repeat each element ``repeats`` times along ``axis`` (flattened if None).

    ``repeats`` is an integer, or a sequence of Python/NumPy integers (one per element).

    Example:
        >>> import qtrace as qt
        >>> qt.repeat(qt.arange(3), 2).tolist()
        [0, 0, 1, 1, 2, 2]
        >>> qt.repeat(qt.arange(3), [1, 0, 2]).tolist()
        [0, 2, 2]
    """
    t = _tensor(a, "repeat")
    if axis is None:
        t, ax = ravel(t), 0
    else:
        ax = normalize_axis(axis, t.ndim, "repeat")
    n = t.shape[ax]
    reps = _ints(repeats, "repeat", "repeats")
    if any(r < 0 for r in reps):
        raise ValueError(f"qt.repeat: repeats may not contain negative values, got {repeats!r}")
    if len(reps) == 1 and not (_is_sequence(repeats) and n != 1):
        r = reps[0]
        if r == 1:
            return t
        shape = t.shape[: ax + 1] + (1,) + t.shape[ax + 1:]
        wide = broadcast_to(reshape(t, shape), t.shape[: ax + 1] + (r,) + t.shape[ax + 1:])
        return reshape(wide, t.shape[:ax] + (n * r,) + t.shape[ax + 1:])
    if len(reps) == 1:
        reps = reps * n
    if len(reps) != n:
        raise ValueError(f"qt.repeat: {len(reps)} repeats given for axis {ax} of length {n} "
                         f"(shape {t.shape})")
    idx = np.repeat(np.arange(n, dtype=np.int64), reps)
    if idx.size == 0:
        return _along(t, ax, slice(0, 0))
    return _along(t, ax, idx)


def _atleast(t: Tensor, nd: int) -> Tensor:
    if t.ndim >= nd:
        return t
    if nd == 1:
        return reshape(t, (1,))
    if nd == 2:
        return reshape(t, (1,) * (2 - t.ndim) + t.shape)
    if t.ndim == 0:
        return reshape(t, (1, 1, 1))
    if t.ndim == 1:
        return reshape(t, (1,) + t.shape + (1,))
    return reshape(t, t.shape + (1,))


def _atleast_all(arys, nd: int, op: str):
    res = [_atleast(_tensor(a, op), nd) for a in arys]
    return res[0] if len(res) == 1 else tuple(res)


def atleast_1d(*arys):
    """``numpy.atleast_1d``: 0-d inputs become shape ``(1,)`` (a tuple for several inputs).

    Example:
        >>> import qtrace as qt
        >>> qt.atleast_1d(qt.asarray(3.0)).shape
        (1,)
    """
    return _atleast_all(arys, 1, "atleast_1d")


def atleast_2d(*arys):
    """``numpy.atleast_2d``: ``()`` becomes ``(1, 1)``, ``(n,)`` becomes ``(1, n)``.

    Example:
        >>> import qtrace as qt
        >>> qt.atleast_2d(qt.arange(3)).shape
        (1, 3)
    """
    return _atleast_all(arys, 2, "atleast_2d")


def atleast_3d(*arys):
    """``numpy.atleast_3d``: ``(n,)`` becomes ``(1, n, 1)``, ``(m, n)`` becomes ``(m, n, 1)``.

    Example:
        >>> import qtrace as qt
        >>> qt.atleast_3d(qt.arange(3)).shape
        (1, 3, 1)
    """
    return _atleast_all(arys, 3, "atleast_3d")


def _join(ts: list, axis: int, op: str, dtype=None, casting="same_kind") -> Tensor:
    """``concatenate`` with the checks (and error messages) of ``op``."""
    if not ts:
        raise ValueError(f"qt.{op}: need at least one array to concatenate")
    nd = ts[0].ndim
    ax = normalize_axis(axis, nd, op)
    ref = ts[0].shape[:ax] + ts[0].shape[ax + 1:]
    for t in ts:
        if t.ndim != nd or t.shape[:ax] + t.shape[ax + 1:] != ref:
            raise ValueError(f"qt.{op}: all the input array dimensions except for the concatenation "
                             f"axis {ax} must match, got shapes {[x.shape for x in ts]}")
    if dtype is not None:
        dt = dtypes.canonical(dtype, f"qt.{op}")
        for t in ts:
            if not np.can_cast(t.dtype, dt, casting=casting):
                raise TypeError(f"qt.{op}: cannot cast array data from {t.dtype} to {dt} according "
                                f"to the rule {casting!r}")
        ts = [astype(t, dt) for t in ts]
    return concatenate(ts, ax)


def hstack(tup, *, dtype=None, casting="same_kind") -> Tensor:
    """``numpy.hstack``: join along axis 1 (axis 0 for 1-D inputs).

    Example:
        >>> import qtrace as qt
        >>> qt.hstack([qt.zeros(2), qt.ones(1)]).tolist()
        [0.0, 0.0, 1.0]
    """
    ts = [_atleast(_tensor(a, "hstack"), 1) for a in _sequence(tup, "hstack")]
    axis = 0 if ts and ts[0].ndim == 1 else 1
    return _join(ts, axis, "hstack", dtype, casting)


def vstack(tup, *, dtype=None, casting="same_kind") -> Tensor:
    """``numpy.vstack``: join along axis 0 (1-D inputs become rows).

    Example:
        >>> import qtrace as qt
        >>> qt.vstack([qt.zeros(2), qt.ones(2)]).tolist()
        [[0.0, 0.0], [1.0, 1.0]]
    """
    ts = [_atleast(_tensor(a, "vstack"), 2) for a in _sequence(tup, "vstack")]
    return _join(ts, 0, "vstack", dtype, casting)


def dstack(tup) -> Tensor:
    """``numpy.dstack``: join along axis 2 (inputs made at least 3-D first).

    Example:
        >>> import qtrace as qt
        >>> qt.dstack([qt.zeros(2), qt.ones(2)]).shape
        (1, 2, 2)
    """
    ts = [_atleast(_tensor(a, "dstack"), 3) for a in _sequence(tup, "dstack")]
    return _join(ts, 2, "dstack")


def column_stack(tup) -> Tensor:
    """``numpy.column_stack``: 1-D inputs become columns, then join along axis 1.

    Example:
        >>> import qtrace as qt
        >>> qt.column_stack([qt.arange(2), qt.arange(2) + 5]).tolist()
        [[0, 5], [1, 6]]
    """
    ts = []
    for a in _sequence(tup, "column_stack"):
        t = _tensor(a, "column_stack")
        if t.ndim < 2:
            t = reshape(t, (t.size, 1))
        ts.append(t)
    return _join(ts, 1, "column_stack")


def array_split(ary, indices_or_sections, axis=0) -> list:
    """``numpy.array_split``: split into ``n`` nearly equal parts, or at the given indices.

    Example:
        >>> import qtrace as qt
        >>> [p.tolist() for p in qt.array_split(qt.arange(5), 2)]
        [[0, 1, 2], [3, 4]]
    """
    return _split(ary, indices_or_sections, axis, "array_split")


def split(ary, indices_or_sections, axis=0) -> list:
    """``numpy.split``: split into ``n`` equal parts (``ValueError`` if impossible), or at indices.

    Example:
        >>> import qtrace as qt
        >>> [p.tolist() for p in qt.split(qt.arange(6), [1, 4])]
        [[0], [1, 2, 3], [4, 5]]
    """
    return _split(ary, indices_or_sections, axis, "split")


def _split(ary, indices_or_sections, axis, op: str) -> list:
    t = _tensor(ary, op)
    ax = normalize_axis(axis, t.ndim, op)
    n = t.shape[ax]
    if _is_sequence(indices_or_sections):
        points = [0, *_ints(indices_or_sections, op, "indices"), n]
    else:
        sections = _int(indices_or_sections, op, "indices_or_sections")
        if sections <= 0:
            raise ValueError(f"qt.{op}: number of sections must be larger than 0, got {sections}")
        if op == "split" and n % sections:
            raise ValueError(f"qt.split: array split does not result in an equal division "
                             f"(axis {ax} of length {n} into {sections} sections)")
        each, extras = divmod(n, sections)
        points = [0]
        for i in range(sections):
            points.append(points[-1] + each + (i < extras))
    return [_along(t, ax, slice(points[i], points[i + 1])) for i in range(len(points) - 1)]


def diff(a, n=1, axis=-1, prepend=_NOVALUE, append=_NOVALUE) -> Tensor:
    """``numpy.diff``: the ``n``-th discrete difference along ``axis`` (``!=`` for bools).

    Example:
        >>> import qtrace as qt
        >>> qt.diff(qt.asarray([1, 4, 9, 16])).tolist()
        [3, 5, 7]
        >>> qt.diff(qt.asarray([1, 4, 9, 16]), n=2).tolist()
        [2, 2]
    """
    n = _int(n, "diff", "n")
    if n < 0:
        raise ValueError(f"qt.diff: order must be non-negative, got n={n}")
    t = _tensor(a, "diff")
    if t.ndim == 0:
        raise ValueError("qt.diff: diff requires input that is at least one dimensional, got shape ()")
    ax = normalize_axis(axis, t.ndim, "diff")
    if n == 0:
        return t
    parts = []
    for extra in (prepend, append):
        if not _given(extra):
            parts.append(None)
            continue
        e = _tensor(extra, "diff")
        if e.ndim == 0:
            e = broadcast_to(e, t.shape[:ax] + (1,) + t.shape[ax + 1:])
        parts.append(e)
    if parts[0] is not None or parts[1] is not None:
        pieces = [p for p in (parts[0], t, parts[1]) if p is not None]
        t = _join(pieces, ax, "diff")
    name = "not_equal" if t.dtype == dtypes.bool_ else "subtract"
    for _ in range(n):
        m = t.shape[ax]
        if m == 0:
            break
        t = _ew.apply(name, _along(t, ax, slice(1, None)), _along(t, ax, slice(None, m - 1)))
    return t


# --- products --------------------------------------------------------------------------
def outer(a, b, out=None) -> Tensor:
    """``numpy.outer``: ``out[i, j] = a.ravel()[i] * b.ravel()[j]``.

    Example:
        >>> import qtrace as qt
        >>> qt.outer(qt.arange(1, 3), qt.arange(3)).tolist()
        [[0, 1, 2], [0, 2, 4]]
    """
    _no_out(out, "outer")
    x, y = ravel(_tensor(a, "outer")), ravel(_tensor(b, "outer"))
    return _ew.apply("multiply", reshape(x, (x.size, 1)), reshape(y, (1, y.size)))


def inner(a, b) -> Tensor:
    """``numpy.inner``: sum products over the last axes (``a.shape[:-1] + b.shape[:-1]``).

    Example:
        >>> import qtrace as qt
        >>> qt.inner(qt.asarray([1.0, 2.0]), qt.asarray([3.0, 4.0])).item()
        11.0
    """
    x, y = _tensor(a, "inner"), _tensor(b, "inner")
    if x.ndim == 0 or y.ndim == 0:
        return _ew.apply("multiply", x, y)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"qt.inner: shapes {x.shape} and {y.shape} not aligned: last dimensions "
                         f"{x.shape[-1]} and {y.shape[-1]} differ")
    k = x.shape[-1]
    prod = _ew.apply("multiply", reshape(x, x.shape[:-1] + (1,) * (y.ndim - 1) + (k,)), y)
    dt = prod.dtype
    if dt.kind == "f" and x.ndim <= 2 and y.ndim <= 2 and x.dtype == dt and y.dtype == dt:
        return matmul(x, transpose(y))
    if dt == dtypes.bool_:
        return _red.any(prod, axis=-1)
    return _red.sum(prod, axis=-1, dtype=dt)


def kron(a, b) -> Tensor:
    """``numpy.kron``: the Kronecker product (blocks ``a[i, j] * b``).

    Example:
        >>> import qtrace as qt
        >>> qt.kron(qt.eye(2, dtype=int), qt.asarray([[1, 2]])).tolist()
        [[1, 2, 0, 0], [0, 0, 1, 2]]
    """
    x, y = _tensor(a, "kron"), _tensor(b, "kron")
    nd = max(x.ndim, y.ndim)
    xs = (1,) * (nd - x.ndim) + x.shape
    ys = (1,) * (nd - y.ndim) + y.shape
    xi = reshape(x, tuple(v for s in xs for v in (s, 1)))
    yi = reshape(y, tuple(v for s in ys for v in (1, s)))
    return reshape(_ew.apply("multiply", xi, yi), tuple(p * q for p, q in zip(xs, ys)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None) -> Tensor:
    """``numpy.cross`` of 3-vectors (along the last axis unless ``axis*`` say otherwise).

    Example:
        >>> import qtrace as qt
        >>> qt.cross(qt.asarray([1.0, 0.0, 0.0]), qt.asarray([0.0, 1.0, 0.0])).tolist()
        [0.0, 0.0, 1.0]
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = _tensor(a, "cross"), _tensor(b, "cross")
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"qt.cross: inputs must be at least 1-D, got shapes {x.shape} and {y.shape}")
    x = moveaxis(x, normalize_axis(axisa, x.ndim, "cross"), -1)
    y = moveaxis(y, normalize_axis(axisb, y.ndim, "cross"), -1)
    if x.shape[-1] != 3 or y.shape[-1] != 3:
        raise ValueError(f"qt.cross: incompatible dimensions for cross product (vector dimension "
                         f"must be 3), got shapes {x.shape} and {y.shape} along the vector axis")
    x0, x1, x2 = (x[..., i] for i in range(3))
    y0, y1, y2 = (y[..., i] for i in range(3))
    mul, sub = (lambda p, q: _ew.apply("multiply", p, q)), (lambda p, q: _ew.apply("subtract", p, q))
    c = stack([sub(mul(x1, y2), mul(x2, y1)), sub(mul(x2, y0), mul(x0, y2)),
               sub(mul(x0, y1), mul(x1, y0))], axis=-1)
    return moveaxis(c, -1, normalize_axis(axisc, c.ndim, "cross"))


# --- padding ---------------------------------------------------------------------------
_PAD_MODES = ("constant", "edge", "wrap", "reflect", "symmetric", "empty")


def _pairs(value, ndim: int, op: str, what: str) -> np.ndarray:
    arr = np.asarray(value)
    try:
        return np.broadcast_to(arr, (ndim, 2))
    except ValueError:
        raise ValueError(f"qt.{op}: {what} of shape {arr.shape} cannot be broadcast to "
                         f"({ndim}, 2) for an array of dimension {ndim}") from None


def pad(array, pad_width, mode="constant", **kwargs) -> Tensor:
    """``numpy.pad`` with modes ``constant`` (``constant_values``), ``edge``, ``wrap``,
    ``reflect``, ``symmetric`` and ``empty`` (zeros).

    Example:
        >>> import qtrace as qt
        >>> qt.pad(qt.arange(1, 4), (2, 1), mode="reflect").tolist()
        [3, 2, 1, 2, 3, 2]
        >>> qt.pad(qt.ones((1, 1)), 1).tolist()
        [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    """
    t = _tensor(array, "pad")
    if not isinstance(mode, str):
        raise TypeError(f"qt.pad: mode must be a string (callable modes are not supported), got {mode!r}")
    if mode not in _PAD_MODES:
        raise ValueError(f"qt.pad: mode {mode!r} is not supported (supported: {', '.join(_PAD_MODES)})")
    allowed = {"constant": {"constant_values"}, "reflect": {"reflect_type"},
               "symmetric": {"reflect_type"}}.get(mode, set())
    unsupported = set(kwargs) - allowed
    if unsupported:
        raise ValueError(f"qt.pad: unsupported keyword arguments for mode {mode!r}: {sorted(unsupported)}")
    if kwargs.get("reflect_type", "even") != "even":
        raise ValueError(f"qt.pad: only reflect_type='even' is supported, got {kwargs['reflect_type']!r}")
    if isinstance(pad_width, Tensor):
        _int(pad_width, "pad", "pad_width")
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise TypeError(f"qt.pad: pad_width must be of integral type, got {pad_width!r}")
    widths = _pairs(widths, t.ndim, "pad", "pad_width")
    if (widths < 0).any():
        raise ValueError(f"qt.pad: pad_width can't contain negative values, got {pad_width!r}")
    cvals = kwargs.get("constant_values", 0)
    if isinstance(cvals, Tensor):  # a traced value: its gradient flows
        if cvals.ndim != 0:
            raise ValueError(f"qt.pad: a tensor constant_values must be 0-d, got shape {cvals.shape}")
        cvals = [[kwargs["constant_values"]] * 2] * t.ndim
    elif mode == "constant":
        if _holds_tensor(cvals):
            raise TypeError("qt.pad: constant_values may be numbers or one 0-d tensor, not a "
                            "sequence holding tensors")
        cvals = _pairs(np.asarray(cvals), t.ndim, "pad", "constant_values")
    for ax in range(t.ndim):
        before, after = int(widths[ax, 0]), int(widths[ax, 1])
        if not before and not after:
            continue
        n = t.shape[ax]
        if mode in ("constant", "empty"):
            pieces = []
            for width, value in ((before, cvals[ax][0] if mode == "constant" else 0), (None, None),
                                 (after, cvals[ax][1] if mode == "constant" else 0)):
                if width is None:
                    pieces.append(t)
                elif width:
                    fill = value if isinstance(value, Tensor) else _scalar(value)
                    pieces.append(full(t.shape[:ax] + (width,) + t.shape[ax + 1:], fill, t.dtype))
            t = concatenate(pieces, ax)
            continue
        if n == 0:
            raise ValueError(f"qt.pad: can't extend empty axis {ax} (shape {t.shape}) using modes "
                             "other than 'constant' or 'empty'")
        i = np.arange(-before, n + after, dtype=np.int64)
        if mode == "edge":
            idx = np.clip(i, 0, n - 1)
        elif mode == "wrap":
            idx = i % n
        elif mode == "reflect":
            if n == 1:
                idx = np.zeros_like(i)
            else:
                p = 2 * (n - 1)
                j = i % p
                idx = np.where(j >= n, p - j, j)
        else:  # symmetric
            p = 2 * n
            j = i % p
            idx = np.where(j >= n, p - 1 - j, j)
        t = _along(t, ax, idx)
    return t


def _scalar(v):
    """A padding value as a Python scalar (NumPy scalars and 0-d arrays included)."""
    return np.asarray(v).item()


# --- elementwise (NumPy ufuncs) --------------------------------------------------------
_LN2 = math.log(2.0)


def logaddexp(x1, x2) -> Tensor:
    """``numpy.logaddexp``: ``log(exp(x1) + exp(x2))`` without overflow.

    Example:
        >>> import qtrace as qt
        >>> round(qt.logaddexp(1000.0, qt.asarray(1000.0)).item(), 4)
        1000.6931
    """
    (x, y), _ = _ufunc_operands("logaddexp", np.logaddexp, x1, x2)
    ap = _ew.apply
    m = ap("maximum", x, y)
    r = ap("add", m, ap("log1p", ap("exp", ap("negative", ap("abs", ap("subtract", x, y))))))
    both_inf = ap("logical_and", ap("equal", x, y), ap("isinf", x))  # inf - inf would be NaN
    return _ew.where(both_inf, x, r)


def logaddexp2(x1, x2) -> Tensor:
    """``numpy.logaddexp2``: ``log2(2**x1 + 2**x2)`` without overflow.

    Example:
        >>> import qtrace as qt
        >>> qt.logaddexp2(qt.asarray(3.0), 3.0).item()
        4.0
    """
    (x, y), _ = _ufunc_operands("logaddexp2", np.logaddexp2, x1, x2)
    ap = _ew.apply
    m = ap("maximum", x, y)
    tail = ap("log1p", ap("exp2", ap("negative", ap("abs", ap("subtract", x, y)))))
    r = ap("add", m, ap("multiply", tail, 1.0 / _LN2))
    both_inf = ap("logical_and", ap("equal", x, y), ap("isinf", x))
    return _ew.where(both_inf, x, r)


def deg2rad(x) -> Tensor:
    """``numpy.deg2rad``: degrees to radians.

    Example:
        >>> import qtrace as qt
        >>> round(qt.deg2rad(qt.asarray(180.0)).item(), 6)
        3.141593
    """
    (t,), _ = _ufunc_operands("deg2rad", np.deg2rad, x)
    return _ew.apply("multiply", t, math.pi / 180.0)


def rad2deg(x) -> Tensor:
    """``numpy.rad2deg``: radians to degrees.

    Example:
        >>> import qtrace as qt
        >>> round(qt.rad2deg(qt.asarray(3.141592653589793)).item(), 6)
        180.0
    """
    (t,), _ = _ufunc_operands("rad2deg", np.rad2deg, x)
    return _ew.apply("multiply", t, 180.0 / math.pi)


def radians(x) -> Tensor:
    """``numpy.radians``: degrees to radians (same as ``deg2rad``).

    Example:
        >>> import qtrace as qt
        >>> round(qt.radians(qt.asarray(90.0)).item(), 6)
        1.570796
    """
    (t,), _ = _ufunc_operands("radians", np.radians, x)
    return _ew.apply("multiply", t, math.pi / 180.0)


def degrees(x) -> Tensor:
    """``numpy.degrees``: radians to degrees (same as ``rad2deg``).

    Example:
        >>> import qtrace as qt
        >>> round(qt.degrees(qt.asarray(1.5707963267948966)).item(), 6)
        90.0
    """
    (t,), _ = _ufunc_operands("degrees", np.degrees, x)
    return _ew.apply("multiply", t, 180.0 / math.pi)


def fmax(x1, x2) -> Tensor:
    """``numpy.fmax``: elementwise maximum ignoring NaN (NaN only where both are NaN).

    Example:
        >>> import qtrace as qt
        >>> qt.fmax(qt.asarray([1.0, float("nan")]), 0.5).tolist()
        [1.0, 0.5]
    """
    return _fminmax("fmax", np.fmax, "maximum", x1, x2)


def fmin(x1, x2) -> Tensor:
    """``numpy.fmin``: elementwise minimum ignoring NaN (NaN only where both are NaN).

    Example:
        >>> import qtrace as qt
        >>> qt.fmin(qt.asarray([1.0, float("nan")]), 0.5).tolist()
        [0.5, 0.5]
    """
    return _fminmax("fmin", np.fmin, "minimum", x1, x2)


def _fminmax(name, ufunc, prim, x1, x2) -> Tensor:
    (x, y), dt = _ufunc_operands(name, ufunc, x1, x2)
    m = _ew.apply(prim, x, y)
    if dt.kind != "f":
        return m
    return _ew.where(_ew.apply("isnan", y), x, _ew.where(_ew.apply("isnan", x), y, m))


def heaviside(x1, x2) -> Tensor:
    """``numpy.heaviside``: 0 where ``x1 < 0``, ``x2`` where ``x1 == 0``, 1 where ``x1 > 0``.

    Example:
        >>> import qtrace as qt
        >>> qt.heaviside(qt.asarray([-1.0, 0.0, 2.0]), 0.5).tolist()
        [0.0, 0.5, 1.0]
    """
    (x, h0), dt = _ufunc_operands("heaviside", np.heaviside, x1, x2)
    ap = _ew.apply
    r = _ew.where(ap("less", x, 0), 0.0, _ew.where(ap("greater", x, 0), 1.0, h0))
    r = _ew.where(ap("isnan", x), x, r)
    return r if r.dtype == dt else astype(r, dt)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None) -> Tensor:
    """``numpy.nan_to_num``: NaN to ``nan``, infinities to ``posinf``/``neginf`` (or the
    largest finite values of the dtype); integer and bool inputs are returned unchanged.

    Example:
        >>> import qtrace as qt
        >>> qt.nan_to_num(qt.asarray([float("nan"), float("-inf"), 1.0]), neginf=-9.0).tolist()
        [0.0, -9.0, 1.0]
    """
    t = _tensor(x, "nan_to_num")
    if t.dtype.kind != "f":
        return t
    info = np.finfo(t.dtype)
    dt = t.dtype
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    ap = _ew.apply
    r = _ew.where(ap("isnan", t), full((), nan, dt), t)
    r = _ew.where(ap("equal", t, math.inf), full((), posinf, dt), r)
    return _ew.where(ap("equal", t, -math.inf), full((), neginf, dt), r)


# --- statistics ------------------------------------------------------------------------
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None) -> Tensor:
    """``numpy.var``: mean squared deviation from the mean, divided by ``N - ddof``.

    Example:
        >>> import qtrace as qt
        >>> qt.var(qt.asarray([1.0, 2.0, 3.0, 4.0])).item()
        1.25
        >>> qt.var(qt.asarray([1.0, 2.0, 3.0, 4.0]), ddof=1).item()
        1.6666666666666667
    """
    return _var("var", a, axis, dtype, out, ddof, keepdims, where, mean, correction)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
        correction=None) -> Tensor:
    """``numpy.std``: the square root of ``var``.

    Example:
        >>> import qtrace as qt
        >>> qt.std(qt.asarray([[1.0, 3.0], [5.0, 9.0]]), axis=1).tolist()
        [1.0, 2.0]
    """
    v = _var("std", a, axis, dtype, out, ddof, keepdims, where, mean, correction)
    return _ew.apply("sqrt", v)


def _var(op, a, axis, dtype, out, ddof, keepdims, where, mean, correction) -> Tensor:
    _no_out(out, op)
    if where is not None and where is not np._NoValue and where is not True:
        raise TypeError(f"qt.{op}: where= is not supported")
    if correction is not None and correction is not np._NoValue:
        if ddof != 0:
            raise ValueError(f"qt.{op}: ddof and correction can't be provided simultaneously")
        ddof = correction
    if isinstance(ddof, Tensor):
        raise TypeError(f"qt.{op}: ddof must be a Python number, not a qt.Tensor")
    keepdims = False if keepdims is np._NoValue else bool(keepdims)
    t = _tensor(a, op)
    axes = normalize_axes(axis, t.ndim, op)
    if dtype is not None:
        dt = dtypes.canonical(dtype, f"qt.{op}")
    else:
        dt = t.dtype if t.dtype.kind in "fc" else dtypes.float64
    x = t if t.dtype == dt else astype(t, dt)
    count = 1
    for ax in axes:
        count *= t.shape[ax]
    if mean is not None and mean is not np._NoValue:
        mu = _tensor(mean, op)
    else:
        mu = _red.mean(x, axis=axes, keepdims=True)
    d = _ew.apply("subtract", x, mu)
    total = _red.sum(abs_squared(d), axis=axes, keepdims=keepdims)   # (real for complex input)
    return _ew.apply("divide", total, float(max(count - ddof, 0)))


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """``numpy.average``: the (weighted) mean along ``axis``; ``returned=True`` adds the
    sum of the weights. Weights summing to zero give inf/NaN (NumPy raises; that would need
    the values).

    Example:
        >>> import qtrace as qt
        >>> qt.average(qt.asarray([1.0, 2.0, 4.0]), weights=[1.0, 1.0, 2.0]).item()
        2.75
    """
    t = _tensor(a, "average")
    keepdims = False if keepdims is np._NoValue else bool(keepdims)
    if weights is None:
        avg = _red.mean(t, axis=axis, keepdims=keepdims)
        if not returned:
            return avg
        return avg, full(avg.shape, t.size / max(avg.size, 1), avg.dtype)
    w = _tensor(weights, "average")
    if t.dtype.kind in "iub":
        dt = np.result_type(t.dtype, w.dtype, dtypes.float64)
    else:
        dt = np.result_type(t.dtype, w.dtype)
    dtypes.check("qt.average", dt)
    if t.shape != w.shape:
        if axis is None:
            raise TypeError(f"qt.average: axis must be specified when shapes of a {t.shape} and "
                            f"weights {w.shape} differ")
        given = tuple(normalize_axis(ax, t.ndim, "average")
                      for ax in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        if w.shape != tuple(t.shape[ax] for ax in given):
            raise ValueError(f"qt.average: shape of weights {w.shape} must be consistent with shape "
                             f"of a {t.shape} along axis {axis}")
        w = transpose(w, tuple(int(i) for i in np.argsort(given)))
        w = reshape(w, tuple(s if ax in given else 1 for ax, s in enumerate(t.shape)))
    scl = _red.sum(astype(w, dt), axis=axis, keepdims=keepdims)
    num = _red.sum(_ew.apply("multiply", astype(t, dt), astype(w, dt)), axis=axis, keepdims=keepdims)
    avg = _ew.apply("divide", num, scl)
    if not returned:
        return avg
    if scl.shape != avg.shape:
        scl = broadcast_to(scl, avg.shape)
    return avg, scl


def cumprod(a, axis=None, dtype=None, out=None) -> Tensor:
    """``numpy.cumprod`` (``axis=None`` flattens first; ints accumulate like ``numpy.prod``).

    Computed by log-step doubling (``ceil(log2 n)`` multiplications by shifted copies, the
    vacated places filled with ones), so zeros are exact and the gradient needs no division.

    Example:
        >>> import qtrace as qt
        >>> qt.cumprod(qt.asarray([1, 2, 3, 4])).tolist()
        [1, 2, 6, 24]
    """
    _no_out(out, "cumprod")
    t = _tensor(a, "cumprod")
    if axis is None:
        t, ax = ravel(t), 0
    else:
        ax = normalize_axis(axis, t.ndim, "cumprod")
    if dtype is not None:
        dt = dtypes.canonical(dtype, "qt.cumprod")
    else:
        dt = np.prod(np.ones((1,), t.dtype)).dtype
    x = t if t.dtype == dt else astype(t, dt)
    n = x.shape[ax]
    positions = np.arange(n, dtype=np.int64)
    trailing = (1,) * (x.ndim - ax - 1)
    d = 1
    while d < n:
        # x shifted by d along ax (a gather: the concatenation of ones and a slice would be
        # the same values, but see the report on fused gradients of chained concatenations)
        shifted = _along(x, ax, np.maximum(positions - d, 0))
        keep = wrap(input_node((positions >= d).reshape((n,) + trailing), "cumprod"))
        x = _ew.apply("multiply", x, _ew.where(keep, shifted, full((), 1, dt)))
        d *= 2
    return x


# --- matrices --------------------------------------------------------------------------
def _offset_mask(n: int, m: int, k, prim: str) -> Tensor:
    """``(col - row) prim k`` over an ``(n, m)`` grid (``k`` may be a traced integer)."""
    cols = reshape(arange(m), (1, m))
    rows = reshape(arange(n), (n, 1))
    return _ew.apply(prim, _ew.apply("subtract", cols, rows), k)


def _offset(k, op: str):
    if isinstance(k, Tensor):
        if k.ndim != 0 or k.dtype.kind not in "iu":
            raise TypeError(f"qt.{op}: a tensor k must be a 0-d integer tensor, got shape {k.shape} "
                            f"dtype {k.dtype}")
        return k
    return _int(k, op, "k")


def tril(m, k=0) -> Tensor:
    """``numpy.tril``: zero the elements above the ``k``-th diagonal (of the last two axes).

    Example:
        >>> import qtrace as qt
        >>> qt.tril(qt.ones((3, 3), dtype=int)).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    return _tri(m, k, "tril", "less_equal")


def triu(m, k=0) -> Tensor:
    """``numpy.triu``: zero the elements below the ``k``-th diagonal (of the last two axes).

    Example:
        >>> import qtrace as qt
        >>> qt.triu(qt.ones((2, 3), dtype=int), k=1).tolist()
        [[0, 1, 1], [0, 0, 1]]
    """
    return _tri(m, k, "triu", "greater_equal")


def _tri(m, k, op: str, prim: str) -> Tensor:
    t = _tensor(m, op)
    k = _offset(k, op)
    if t.ndim == 0:
        raise ValueError(f"qt.{op}: input must be at least 1-D, got shape ()")
    n, cols = t.shape[-2:] if t.ndim >= 2 else (t.shape[0], t.shape[0])
    mask = _offset_mask(n, cols, k, prim)
    return _ew.where(mask, t, zeros((), t.dtype))


def eye(N, M=None, k=0, dtype=float, order="C", *, device=None, like=None) -> Tensor:
    """``numpy.eye``: ones on the ``k``-th diagonal of an ``N x M`` matrix.

    Example:
        >>> import qtrace as qt
        >>> qt.eye(2, 3, k=1).tolist()
        [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    n = _int(N, "eye", "N")
    m = n if M is None else _int(M, "eye", "M")
    if n < 0 or m < 0:
        raise ValueError(f"qt.eye: negative dimensions are not allowed, got N={n}, M={m}")
    if order not in ("C", "F"):
        raise ValueError(f"qt.eye: order must be 'C' or 'F', got {order!r}")
    dt = dtypes.canonical(dtype if dtype is not None else float, "qt.eye")
    mask = _offset_mask(n, m, _offset(k, "eye"), "equal")
    return mask if dt == dtypes.bool_ else astype(mask, dt)


def identity(n, dtype=None, *, like=None) -> Tensor:
    """``numpy.identity``: the ``n x n`` identity matrix.

    Example:
        >>> import qtrace as qt
        >>> qt.identity(2, dtype=int).tolist()
        [[1, 0], [0, 1]]
    """
    return eye(_int(n, "identity", "n"), dtype=dtype if dtype is not None else float)


def _diagonal(t: Tensor, offset: int, axis1: int, axis2: int, op: str) -> Tensor:
    """The ``offset`` diagonal of axes ``axis1``/``axis2``, as the last axis: a view of ``t``
    (the view step ``diagonal``, :func:`qtrace.tracer.views.diagonal_node`)."""
    a1, a2 = normalize_axis(axis1, t.ndim, op), normalize_axis(axis2, t.ndim, op)
    if a1 == a2:
        raise ValueError(f"qt.{op}: axis1 and axis2 cannot be the same (both {a1})")
    rows, cols = t.shape[a1], t.shape[a2]
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    shape = tuple(d for i, d in enumerate(t.shape) if i not in (a1, a2)) + (length,)
    return views.view_chain(t, (("diagonal", offset, a1, a2, shape),))


def read_only_diagonal(t: Tensor, offset: int, axis1: int, axis2: int, op: str) -> Tensor:
    """:func:`_diagonal` as NumPy returns it from ``diagonal`` and ``diag``: a read-only view
    (it follows later writes to ``t``; a write through it raises ``ValueError``)."""
    d = _diagonal(t, offset, axis1, axis2, op)
    return views.view_chain(d, ((views.READ_ONLY, d.shape),))


def diag(v, k=0) -> Tensor:
    """``numpy.diag``: the ``k``-th diagonal of a 2-D input (a read-only view, as NumPy's), or
    a 2-D matrix with a 1-D input on its ``k``-th diagonal.

    Example:
        >>> import qtrace as qt
        >>> qt.diag(qt.asarray([1, 2])).tolist()
        [[1, 0], [0, 2]]
        >>> qt.diag(qt.arange(9).reshape(3, 3), k=1).tolist()
        [1, 5]
    """
    t = _tensor(v, "diag")
    k = _int(k, "diag", "k")
    if t.ndim == 2:
        return read_only_diagonal(t, k, 0, 1, "diag")
    if t.ndim != 1:
        raise ValueError(f"qt.diag: input must be 1-D or 2-D, got shape {t.shape}")
    n = t.shape[0]
    s = n + abs(k)
    col = t
    if k:
        pad_ = zeros((abs(k),), t.dtype)
        col = concatenate([pad_, t] if k < 0 else [t, pad_])
    return _ew.where(_offset_mask(s, s, k, "equal"), reshape(col, (s, 1)), zeros((), t.dtype))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None) -> Tensor:
    """``numpy.trace``: the sum along the ``offset`` diagonal of axes ``axis1`` and ``axis2``.

    Example:
        >>> import qtrace as qt
        >>> qt.trace(qt.arange(9).reshape(3, 3)).item()
        12
    """
    _no_out(out, "trace")
    t = _tensor(a, "trace")
    if t.ndim < 2:
        raise ValueError(f"qt.trace: input must be at least 2-D, got shape {t.shape}")
    d = _diagonal(t, _int(offset, "trace", "offset"), axis1, axis2, "trace")
    return _red.sum(d, axis=-1, dtype=dtype)


# --- comparisons -----------------------------------------------------------------------
def _close_operand(v, op: str):
    if isinstance(v, Tensor) or type(v) in dtypes.PY_SCALARS:
        return v
    return _tensor(v, op)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """``numpy.isclose``: ``|a - b| <= atol + rtol * |b|`` elementwise (infinities equal to
    themselves; NaNs equal only with ``equal_nan``).

    Example:
        >>> import qtrace as qt
        >>> qt.isclose(qt.asarray([1.0, 1.1]), 1.0 + 1e-9).tolist()
        [True, False]
    """
    x = _close_operand(a, "isclose")
    y = _close_operand(b, "isclose")
    rtol = _close_operand(rtol, "isclose")
    atol = _close_operand(atol, "isclose")
    if isinstance(y, Tensor):
        dt = np.result_type(y.dtype, 1.0)
        if dt != y.dtype:
            y = astype(y, dt)
    elif isinstance(y, (bool, int)):
        y = float(y)
    ap = _ew.apply
    abs_y = ap("abs", y)
    close = ap("less_equal", ap("abs", ap("subtract", x, y)), ap("add", atol, ap("multiply", rtol, abs_y)))
    result = ap("logical_or", ap("logical_and", close, ap("isfinite", y)), ap("equal", x, y))
    if equal_nan:
        result = ap("logical_or", result, ap("logical_and", ap("isnan", x), ap("isnan", y)))
    return result


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """``numpy.allclose``: whether ``isclose`` holds everywhere, as a 0-d bool tensor
    (``bool()`` of it computes the answer).

    Example:
        >>> import qtrace as qt
        >>> bool(qt.allclose(qt.ones(3), qt.ones(3) + 1e-10))
        True
    """
    return _red.all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def array_equal(a1, a2, equal_nan=False) -> Tensor:
    """``numpy.array_equal``: same shape and equal elements, as a 0-d bool tensor.

    Example:
        >>> import qtrace as qt
        >>> bool(qt.array_equal(qt.arange(3), [0, 1, 2])), bool(qt.array_equal(qt.arange(3), [0, 1]))
        (True, False)
    """
    x, y = _tensor(a1, "array_equal"), _tensor(a2, "array_equal")
    if x.shape != y.shape:
        return full((), False, dtypes.bool_)
    eq = _ew.apply("equal", x, y)
    if equal_nan:
        eq = _ew.apply("logical_or", eq, _ew.apply("logical_and", _ew.apply("isnan", x),
                                                   _ew.apply("isnan", y)))
    return _red.all(eq)


def array_equiv(a1, a2) -> Tensor:
    """``numpy.array_equiv``: equal elements once the shapes are broadcast against each other,
    as a 0-d bool tensor (False where the shapes do not broadcast).

    Example:
        >>> import qtrace as qt
        >>> bool(qt.array_equiv(qt.asarray([1, 2]), [[1, 2], [1, 2]])), bool(qt.array_equiv([1, 2], [1, 3]))
        (True, False)
    """
    x, y = _tensor(a1, "array_equiv"), _tensor(a2, "array_equiv")
    try:
        np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        return full((), False, dtypes.bool_, device=x.device)
    return _red.all(_ew.apply("equal", x, y))


# --- grids -----------------------------------------------------------------------------
def meshgrid(*xi, copy=True, sparse=False, indexing="xy") -> tuple:
    """``numpy.meshgrid``: coordinate grids from 1-D coordinate vectors (``'xy'`` or ``'ij'``).

    Example:
        >>> import qtrace as qt
        >>> xs, ys = qt.meshgrid(qt.arange(3), qt.arange(2))
        >>> xs.tolist(), ys.tolist()
        ([[0, 1, 2], [0, 1, 2]], [[0, 0, 0], [1, 1, 1]])
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"qt.meshgrid: valid values for indexing are 'xy' and 'ij', got {indexing!r}")
    ts = [ravel(_tensor(x, "meshgrid")) for x in xi]
    nd = len(ts)
    out = []
    for i, t in enumerate(ts):
        shape = [1] * nd
        shape[i] = t.size
        if indexing == "xy" and nd > 1 and i < 2:
            shape[0], shape[1] = shape[1], shape[0]
        out.append(reshape(t, tuple(shape)))
    if not sparse and out:
        out = broadcast_arrays(*out)
    return list(out)  # the Array API (2024.12) returns a list


def unwrap(p, discont=None, axis=-1, *, period=2 * math.pi) -> Tensor:
    """``numpy.unwrap``: ``p`` with every jump between neighbours along ``axis`` larger than
    ``discont`` (default ``period / 2``) replaced by its remainder modulo ``period``.

    The correction is built from ``diff``, ``remainder`` and ``cumsum``: its gradient is
    the identity (the corrections are piecewise constant). The result has NumPy's dtype
    (that of the differences and ``period``: float64 for integers with a float period).

    Example:
        >>> import qtrace as qt
        >>> [round(v, 6) for v in qt.unwrap(qt.asarray([0.0, 3.0, 6.5, 1.0])).tolist()]
        [0.0, 3.0, 6.5, 7.283185]
    """
    t = _tensor(p, "unwrap")
    if t.ndim == 0:
        raise np.exceptions.AxisError("qt.unwrap: axis is out of bounds for a 0-d array")
    axis = normalize_axis(axis, t.ndim, "unwrap")
    d = diff(t, axis=axis)
    dt = np.result_type(d.dtype, period)
    if dt.kind in "iu":
        high, rem = divmod(period, 2)   # (integers: NumPy's interval and its ambiguity)
        ambiguous = rem == 0
    else:
        high, ambiguous = period / 2, True
    d = astype(d, dt)
    folded = _ew.apply("add", _ew.apply("remainder", _ew.apply("add", d, high), period), -high)
    if ambiguous:   # a jump of exactly half a period keeps its sign
        folded = _ew.where(_ew.apply("logical_and", _ew.apply("equal", folded, -high),
                                     _ew.apply("greater", d, 0)), high, folded)
    correction = _ew.apply("subtract", folded, d)
    small = _ew.apply("less", _ew.apply("abs", d), period / 2 if discont is None else discont)
    correction = _ew.where(small, 0, correction)
    base = astype(t, dt)
    head = getitem(base, (slice(None),) * axis + (slice(0, 1),))
    rest = getitem(base, (slice(None),) * axis + (slice(1, None),))
    rest = _ew.apply("add", rest, _red.cumsum(correction, axis=axis, dtype=dt))
    return concatenate([head, rest], axis=axis)


def _bits_axis(a, axis, op: str) -> tuple:
    """``a`` with the packed/unpacked axis last (flattened for ``axis=None``) and the axis."""
    if axis is None:
        return ravel(a), None
    axis = normalize_axis(axis, max(a.ndim, 1), op)
    return moveaxis(a, axis, -1), axis


def _bit_shifts(bitorder: str, op: str, device) -> Tensor:
    """The shift of each of a byte's eight elements: 7..0 (``'big'``) or 0..7 (``'little'``)."""
    if bitorder not in ("big", "little"):
        raise ValueError(f"qt.{op}: 'bitorder' must be either 'little' or 'big', got {bitorder!r}")
    k = arange(8, dtype=dtypes.uint8, device=device)
    return _ew.apply("subtract", 7, k) if bitorder == "big" else k


def packbits(a, /, axis=None, bitorder="big") -> Tensor:
    """``numpy.packbits``: the elements of a bool or integer array as bits (non-zero: 1),
    eight per ``uint8`` along ``axis`` (the flattened array for ``axis=None``), the last
    byte padded with zero bits; ``bitorder`` ``'big'`` (first element in the high bit) or
    ``'little'``.

    Example:
        >>> import qtrace as qt
        >>> qt.packbits(qt.asarray([1, 0, 1, 1, 0, 0, 0, 0, 1])).tolist()
        [176, 128]
    """
    t = _tensor(a, "packbits")
    if t.dtype.kind not in "biu":
        raise TypeError(f"qt.packbits: expected an input array of integer or boolean data type, "
                        f"got {t.dtype}")
    moved, axis = _bits_axis(t, axis, "packbits")
    shifts = _bit_shifts(bitorder, "packbits", t.device)
    n = moved.shape[-1]
    bits = astype(_ew.apply("not_equal", moved, 0), dtypes.uint8)
    pad = -n % 8
    if pad:
        bits = concatenate([bits, zeros(moved.shape[:-1] + (pad,), dtypes.uint8, device=t.device)], axis=-1)
    groups = reshape(bits, moved.shape[:-1] + ((n + pad) // 8, 8))
    packed = _red.sum(_ew.apply("left_shift", groups, shifts), axis=-1, dtype=dtypes.uint8)
    return packed if axis is None else moveaxis(packed, -1, axis)


def unpackbits(a, /, axis=None, count=None, bitorder="big") -> Tensor:
    """``numpy.unpackbits``: the bits of a ``uint8`` array, eight elements (0 or 1, ``uint8``)
    per byte along ``axis`` (the flattened array for ``axis=None``); ``count`` keeps that
    many (negative: drops as many from the end; larger than the bits there: pads zeros);
    ``bitorder`` as :func:`packbits`.

    Example:
        >>> import qtrace as qt
        >>> qt.unpackbits(qt.asarray([176], dtype=qt.uint8), count=5).tolist()
        [1, 0, 1, 1, 0]
    """
    t = _tensor(a, "unpackbits")
    if t.dtype != np.uint8:
        raise TypeError(f"qt.unpackbits: expected an input array of unsigned byte data type, got {t.dtype}")
    moved, axis = _bits_axis(t, axis, "unpackbits")
    shifts = _bit_shifts(bitorder, "unpackbits", t.device)
    n = moved.shape[-1] * 8
    bits = _ew.apply("bitwise_and", _ew.apply("right_shift", reshape(moved, moved.shape + (1,)), shifts), 1)
    bits = reshape(bits, moved.shape[:-1] + (n,))
    if count is not None:
        count = _int(count, "unpackbits", "count")
        if count < -n:
            raise ValueError("qt.unpackbits: -count larger than number of elements")
        keep = count if count >= 0 else n + count
        if keep <= n:
            bits = getitem(bits, (..., slice(0, keep)))
        else:
            bits = concatenate([bits, zeros(bits.shape[:-1] + (keep - n,), dtypes.uint8, device=t.device)],
                               axis=-1)
    return bits if axis is None else moveaxis(bits, -1, axis)


NUMPY_FUNCTIONS = {
    np.roll: roll, np.tile: tile, np.repeat: repeat, np.hstack: hstack, np.vstack: vstack,
    np.dstack: dstack, np.column_stack: column_stack, np.atleast_1d: atleast_1d,
    np.atleast_2d: atleast_2d, np.atleast_3d: atleast_3d, np.split: split,
    np.array_split: array_split, np.diff: diff, np.outer: outer, np.inner: inner,
    np.meshgrid: meshgrid, np.pad: pad, np.var: var, np.std: std, np.cumprod: cumprod,
    np.tril: tril, np.triu: triu, np.eye: eye, np.identity: identity, np.diag: diag,
    np.trace: trace, np.isclose: isclose, np.allclose: allclose, np.array_equal: array_equal,
    np.nan_to_num: nan_to_num, np.cross: cross, np.kron: kron, np.average: average,
    np.array_equiv: array_equiv, np.unwrap: unwrap, np.packbits: packbits,
    np.unpackbits: unpackbits,
}

# NumPy dispatches these through ``__array_ufunc__`` (not ``__array_function__``)
NUMPY_UFUNCS = {
    np.logaddexp: logaddexp, np.logaddexp2: logaddexp2, np.deg2rad: deg2rad,
    np.rad2deg: rad2deg, np.radians: radians, np.degrees: degrees, np.fmax: fmax,
    np.fmin: fmin, np.heaviside: heaviside,
}

__all__ = [
    "allclose", "array_equal", "array_equiv", "array_split", "atleast_1d", "atleast_2d", "atleast_3d",
    "average", "column_stack", "cross", "cumprod", "deg2rad", "degrees", "diag",
    "diff", "dstack", "eye", "fmax", "fmin", "heaviside", "hstack", "identity", "inner",
    "isclose", "kron", "logaddexp", "logaddexp2", "meshgrid", "nan_to_num", "outer", "packbits", "pad",
    "rad2deg", "radians", "repeat", "roll", "split", "std", "tile", "trace", "tril", "triu",
    "unpackbits", "unwrap", "var", "vstack",
]
