"""Selection and placement: NumPy's select, choose, compress, put and their relatives.

Every function is built from recorded qtrace operations (nothing is evaluated behind the
caller's back), so it works inside ``qt.jit`` and is differentiated by ``qt.grad``.
``NUMPY_FUNCTIONS`` maps NumPy's functions to these (``__array_function__``),
``NUMPY_UFUNCS`` the NumPy ufuncs among them (``__array_ufunc__``).

Three groups of functions differ from that rule as NumPy's semantics demand:

* **Shapes that depend on the data** (``compress``, ``extract``, ``argwhere``,
  ``flatnonzero``, ``unique``, ``intersect1d``, ``union1d``, ``setdiff1d``, ``setxor1d``):
  a tensor that decides how long the result is (a condition, the set's elements) is
  evaluated, outside ``qt.jit``; inside it they raise ``qt.TracerError``. ``compress`` with
  a Python/NumPy condition stays lazy in its data (a gather).
* **In place** (``copyto``, ``putmask``, ``place``, ``put``, ``put_along_axis``,
  ``fill_diagonal``): they modify their first argument as NumPy does. A ``qt.Tensor``
  destination is written through :mod:`qtrace.tracer.views`, exactly as ``t[idx] = v``:
  its base and every other view of that memory see the write (nothing is copied, and a
  read-only view, such as a ``broadcast_to`` result, refuses it). A NumPy-array
  destination given tensor operands (``np.copyto(ndarray, tensor)``) is written now: the
  value is computed and stored into the array.
* **Bounds** of tensor indices (``choose`` and ``ravel_multi_index`` in ``mode='raise'``,
  ``unravel_index``, ``put``, ``put_along_axis``) are checked in the kernel, as ``take``
  checks them: an out-of-range index raises ``IndexError`` when the value is computed.
  Python/NumPy indices are checked at once, with NumPy's exception.

``partition``/``argpartition`` sort fully (a full sort is one valid partition: NumPy
leaves the order on either side of ``kth`` unspecified).
"""

from __future__ import annotations

import math

import numpy as np

from ..config import config
from ..errors import TracerError
from ..graph import buffers
from ..graph.device import Device
from ..graph.primitives import broadcast_shapes
from . import dtypes, views
from . import elementwise as _ew
from . import reductions as _red
from .composites import _along, _holds_tensor, _int, _ints, _no_out, _tensor, _written_values
from .context import tracing
from .convert import astype, cast, held, input_node, operand, promote, wrap
from .creation import full, zeros
from .indexing import gather_at, scatter, scatter_at
from .shape_ops import broadcast_to, normalize_axis, ravel, reshape, stack
from .sorting import _coordinates, argsort, sort, take_along_axis
from .tensor import Tensor

_MODES = ("raise", "wrap", "clip")
_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


# --- argument helpers ------------------------------------------------------------------
def _items(v, op: str, what: str) -> list:
    """The entries of a list argument (``condlist``, ``choices``, ``keys``): a list or
    tuple, or the rows of an array (a tensor's rows stay lazy)."""
    if isinstance(v, (list, tuple)):
        return list(v)
    if isinstance(v, Tensor):
        if v.ndim == 0:
            raise TypeError(f"qt.{op}: {what} must be a sequence of arrays, got a 0-d tensor")
        return [v[i] for i in range(v.shape[0])]
    if isinstance(v, np.ndarray) and v.ndim:
        return list(v)
    raise TypeError(f"qt.{op}: {what} must be a sequence of arrays, got {type(v).__name__}")


def _device_of(*xs) -> Device:
    """The device of the first tensor among ``xs`` (else the configured one)."""
    for x in xs:
        if isinstance(x, Tensor):
            return x.device
    return Device(config.device)


def _host(arr: np.ndarray, op: str, device: Device) -> Tensor:
    """A result computed on the host (a shape decided by the data) as a tensor on ``device``."""
    return wrap(input_node(np.ascontiguousarray(arr), op, device=device, owned=True))


def _values(x, op: str) -> np.ndarray:
    """The values of ``x`` for a result whose shape they decide: a tensor is evaluated now
    (``qt.TracerError`` inside ``qt.jit``, where a shape cannot depend on data)."""
    if isinstance(x, Tensor) and tracing():
        raise TracerError(f"qt.{op}: the result's shape depends on the values of a tensor "
                          "argument, which a function traced by qt.jit cannot have; call it "
                          "outside qt.jit")
    return np.asarray(x)


def _on(x, op: str, device: Device | None = None) -> Tensor:
    """``x`` as a tensor, host data (Python scalars, lists, NumPy arrays) placed on
    ``device`` (that of the other operands) when given."""
    if device is None or isinstance(x, Tensor) or _holds_tensor(x):
        return _tensor(x, op)
    return wrap(input_node(x, op, device=device))


def _int_tensor(x, op: str, what: str, device: Device | None = None) -> Tensor:
    """Integer (or bool) index data as an int64 tensor."""
    t = _on(x, op, device)
    if t.dtype.kind not in "iub":
        raise TypeError(f"qt.{op}: only int indices permitted, got {what} of dtype {t.dtype}")
    return t if t.dtype == dtypes.int64 else astype(t, dtypes.int64)


def _mode(mode, op: str) -> str:
    if mode not in _MODES:
        raise ValueError(f"qt.{op}: clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    return mode


def _checked(idx: Tensor, n: int) -> Tensor:
    """``idx`` unchanged, plus a bounds-checked read at it (of zeros: nothing is stored), so
    an index outside ``[0, n)`` raises ``IndexError`` when the value is computed."""
    idx = _ew.where(_ew.apply("less", idx, 0), n, idx)  # (a gather reads negatives from the end)
    zeros_ = broadcast_to(full((), 0, dtypes.int64, idx.device), (n,))
    return _ew.apply("add", idx, gather_at(zeros_, [idx]))


def _cyclic(values: Tensor, count: int, dtype) -> Tensor:
    """``count`` elements of flattened ``values`` repeated cyclically (NumPy's rule for too
    few values), converted to ``dtype``."""
    flat = ravel(values)
    if flat.size != count:
        flat = _along(flat, 0, np.arange(count, dtype=np.int64) % flat.size)
    return flat if flat.dtype == dtype else astype(flat, dtype)


def _as_bool(x, op: str, device: Device | None = None) -> Tensor:
    t = _on(x, op, device)
    return t if t.dtype == dtypes.bool_ else astype(t, dtypes.bool_)


# --- choosing among arrays -------------------------------------------------------------
def select(condlist, choicelist, default=0) -> Tensor:
    """``numpy.select``: from ``choicelist[i]`` where ``condlist[i]`` is the first true
    condition, ``default`` where none is.

    Conditions must be boolean; all arrays broadcast together. The result's dtype is
    NumPy's (``default`` a Python scalar is weak: ``float32`` choices stay ``float32``).

    Example:
        >>> import qtrace as qt
        >>> x = qt.arange(6)
        >>> qt.select([x < 2, x > 3], [x, x ** 2], default=-1).tolist()
        [0, 1, -1, -1, 16, 25]
    """
    conds = _items(condlist, "select", "condlist")
    choices = _items(choicelist, "select", "choicelist")
    if len(conds) != len(choices):
        raise ValueError(f"qt.select: list of cases must be same length as list of conditions "
                         f"(got {len(conds)} conditions and {len(choices)} choices)")
    if not conds:
        raise ValueError("qt.select: select with an empty condition list is not possible")
    dev = _device_of(*conds, *choices, default)
    cs = [_on(c, "select", dev) for c in conds]
    for i, c in enumerate(cs):
        if c.dtype != dtypes.bool_:
            raise TypeError(f"qt.select: invalid entry {i} in condlist: should be boolean ndarray, "
                            f"got dtype {c.dtype}")
    chs = [_on(c, "select", dev) for c in choices]
    dt = promote([operand(c, "select") for c in chs] + [operand(default, "select")], "select")
    if isinstance(default, Tensor):
        out = astype(default, dt)
    elif type(default) in dtypes.PY_SCALARS:
        out = full((), default, dt, dev)
    else:
        out = astype(_on(default, "select", dev), dt)
    shape = broadcast_shapes("qt.select", out.shape, *(c.shape for c in cs), *(c.shape for c in chs))
    for c, ch in zip(reversed(cs), reversed(chs)):  # the first true condition wins
        out = _ew.where(c, astype(ch, dt) if ch.dtype != dt else ch, out)
    return out if out.shape == shape else broadcast_to(out, shape)


def _conditions(condlist, x: Tensor) -> list:
    """``piecewise``'s conditions as NumPy reads ``condlist``: one condition, or a list."""
    if isinstance(condlist, (bool, np.bool_)):
        items = [condlist]
    elif isinstance(condlist, (Tensor, np.ndarray)):
        items = [condlist] if condlist.ndim == 0 or (x.ndim and condlist.ndim == 1) \
            else _items(condlist, "piecewise", "condlist")
    elif isinstance(condlist, (list, tuple)):
        if condlist and x.ndim and not isinstance(condlist[0], (list, np.ndarray, Tensor)):
            items = [condlist]
        else:
            items = list(condlist)
    else:
        items = [condlist]
    conds = []
    for c in items:
        m = _as_bool(c, "piecewise", x.device)
        if m.ndim > x.ndim or m.shape != x.shape[:m.ndim]:
            raise IndexError(f"qt.piecewise: boolean index did not match indexed array: condition of "
                             f"shape {m.shape} for x of shape {x.shape}")
        conds.append(reshape(m, m.shape + (1,) * (x.ndim - m.ndim)))
    return conds


def piecewise(x, condlist, funclist, *args, **kw) -> Tensor:
    """``numpy.piecewise``: ``funclist[i](x)`` (or the scalar ``funclist[i]``) where
    ``condlist[i]`` holds, zero elsewhere; one more function than conditions gives the
    value where no condition holds. Later conditions win, as in NumPy.

    Unlike NumPy, which calls each function on the selected elements ``x[cond]``, each
    function is called on the whole ``x`` (a ``qt.Tensor``; extra ``args``/``kw`` passed
    on) and its result is kept where the condition holds: the same values for elementwise
    functions (the common case) — a function that reduces or reshapes its argument
    (``len``, ``sum``) sees all of ``x``. The gradient flows only through the selected
    elements (inf or NaN computed elsewhere does not reach it). Results take ``x``'s dtype.

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([-2.0, -0.5, 1.0, 3.0])
        >>> qt.piecewise(x, [x < 0, x > 2], [lambda v: -v, 9.0, lambda v: v * 10]).tolist()
        [2.0, 0.5, 10.0, 9.0]
    """
    t = _tensor(x, "piecewise")
    conds = _conditions(condlist, t)
    funcs = list(funclist) if isinstance(funclist, (list, tuple)) else [funclist]
    if len(funcs) == len(conds) + 1:
        none = conds[0]
        for c in conds[1:]:
            none = _ew.apply("logical_or", none, c)
        conds.append(_ew.apply("logical_not", none))
    elif len(funcs) != len(conds):
        raise ValueError(f"qt.piecewise: with {len(conds)} condition(s), either {len(conds)} or "
                         f"{len(conds) + 1} functions are expected, got {len(funcs)}")
    out = zeros(t.shape, t.dtype, t.device)
    for c, f in zip(conds, funcs):
        if callable(f):
            arg = _ew.where(c, t, _ew.stop_gradient(t)) if t.dtype.kind in "fc" else t
            value = f(arg, *args, **kw)
        else:
            value = f
        v = _on(value, "piecewise", t.device)
        out = _ew.where(c, v if v.dtype == t.dtype else astype(v, t.dtype), out)
    return out if out.shape == t.shape else broadcast_to(out, t.shape)


def choose(a, choices, out=None, mode="raise") -> Tensor:
    """``numpy.choose``: ``choices[a[i]][i]`` elementwise (``a`` and the choices broadcast).

    ``mode='raise'``: an index outside ``[0, len(choices))`` raises — at once for
    Python/NumPy ``a`` (``ValueError``, as NumPy), when computed for a tensor ``a``
    (``IndexError``, as ``take`` checks tensor indices). ``'wrap'`` takes it modulo the
    number of choices, ``'clip'`` clips it. ``out=`` is not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.choose(qt.asarray([0, 1, 1]), [qt.zeros(3), qt.arange(3.0)]).tolist()
        [0.0, 1.0, 2.0]
    """
    _no_out(out, "choose")
    mode = _mode(mode, "choose")
    items = _items(choices, "choose", "choices")
    if not items:
        raise ValueError("qt.choose: choices must hold at least one array")
    dev = _device_of(a, *items)
    idx = _int_tensor(a, "choose", "a", dev)
    dt = promote([operand(c, "choose") for c in items], "choose")
    cs = [astype(_on(c, "choose", dev), dt) for c in items]
    shape = broadcast_shapes("qt.choose", idx.shape, *(c.shape for c in cs))
    n = len(cs)
    idx = broadcast_to(idx, shape)
    known = True
    if mode == "wrap":
        idx = _ew.apply("remainder", idx, n)
    elif mode == "clip":
        idx = _ew.clip(idx, 0, n - 1)
    elif isinstance(a, Tensor):
        known = False
        idx = _ew.where(_ew.apply("less", idx, 0), n, idx)  # the kernel reports it
    else:
        host = np.asarray(a)
        if host.size and (host.min() < 0 or host.max() >= n):
            raise ValueError(f"qt.choose: invalid entry in choice array (entries must lie in "
                             f"[0, {n}) for {n} choices)")
    stacked = stack([broadcast_to(c, shape) for c in cs])
    return gather_at(stacked, [idx] + _coordinates(shape, -1, None), known)


# --- selecting by a condition ----------------------------------------------------------
def _positions(condition, op: str) -> np.ndarray:
    """Flat positions of the true entries of a condition (evaluated if a tensor)."""
    cond = _values(condition, op)
    return np.flatnonzero(cond).astype(np.int64)


def _take_positions(t: Tensor, ax: int, idx: np.ndarray, op: str) -> Tensor:
    n = t.shape[ax]
    if idx.size and idx[-1] >= n:
        raise IndexError(f"qt.{op}: index {idx[-1]} is out of bounds for axis {ax} with size {n}")
    return _along(t, ax, idx) if idx.size else _along(t, ax, slice(0, 0))


def compress(condition, a, axis=None, out=None) -> Tensor:
    """``numpy.compress``: the slices of ``a`` along ``axis`` (flattened if None) where the
    1-D ``condition`` is true.

    The result's length is the number of true entries: a tensor ``condition`` is evaluated
    (``qt.TracerError`` inside ``qt.jit``); a Python/NumPy condition keeps everything lazy.
    The gradient reaches the selected elements of ``a``. ``out=`` is not supported.

    Example:
        >>> import qtrace as qt
        >>> qt.compress([True, False, True], qt.arange(6).reshape(3, 2), axis=0).tolist()
        [[0, 1], [4, 5]]
    """
    _no_out(out, "compress")
    t = _tensor(a, "compress")
    if np.ndim(condition) != 1:
        raise ValueError(f"qt.compress: condition must be a 1-d array, got shape {np.shape(condition)}")
    if axis is None:
        t, ax = ravel(t), 0
    else:
        ax = normalize_axis(axis, t.ndim, "compress")
    return _take_positions(t, ax, _positions(condition, "compress"), "compress")


def extract(condition, arr) -> Tensor:
    """``numpy.extract``: the elements of flattened ``arr`` where flattened ``condition`` is
    non-zero (evaluates a tensor ``condition``: the length depends on it; ``qt.TracerError``
    inside ``qt.jit``). The gradient reaches the extracted elements.

    Example:
        >>> import qtrace as qt
        >>> x = qt.arange(6.0)
        >>> qt.extract(x % 2 == 0, x).tolist()
        [0.0, 2.0, 4.0]
    """
    t = ravel(_tensor(arr, "extract"))
    return _take_positions(t, 0, _positions(condition, "extract"), "extract")


def argwhere(a) -> Tensor:
    """``numpy.argwhere``: the indices of the non-zero elements, one row each (shape
    ``(N, a.ndim)``, int64). Evaluates ``a`` (``qt.TracerError`` inside ``qt.jit``).

    Example:
        >>> import qtrace as qt
        >>> qt.argwhere(qt.asarray([[0, 3], [5, 0]])).tolist()
        [[0, 1], [1, 0]]
    """
    return _host(np.argwhere(_values(a, "argwhere")).astype(np.int64), "argwhere", _device_of(a))


def flatnonzero(a) -> Tensor:
    """``numpy.flatnonzero``: the indices of the non-zero elements of flattened ``a`` (int64).
    Evaluates ``a`` (``qt.TracerError`` inside ``qt.jit``).

    Example:
        >>> import qtrace as qt
        >>> qt.flatnonzero(qt.asarray([[0, 3], [5, 0]])).tolist()
        [1, 2]
    """
    return _host(_positions(a, "flatnonzero"), "flatnonzero", _device_of(a))


# --- flat and multi-dimensional indices ------------------------------------------------
def _order(order, op: str) -> str:
    if order not in ("C", "F"):
        raise ValueError(f"qt.{op}: only 'C' or 'F' order is permitted, got {order!r}")
    return order


def _dims(shape, op: str, what: str) -> tuple:
    dims = _ints(shape, op, what)
    if any(d < 0 for d in dims):
        raise ValueError(f"qt.{op}: dimensions must be non-negative, got {what} {dims}")
    return dims


def unravel_index(indices, shape, order="C") -> tuple:
    """``numpy.unravel_index``: flat indices into an array of ``shape`` as a tuple of
    coordinate arrays (int64, each of ``indices``' shape), C or Fortran ``order``.

    ``shape`` must be Python/NumPy integers. Out-of-range indices raise ``ValueError`` at
    once for Python/NumPy ``indices``; for a tensor, ``IndexError`` when computed.

    Example:
        >>> import qtrace as qt
        >>> [c.tolist() for c in qt.unravel_index(qt.asarray([5, 7]), (3, 4))]
        [[1, 1], [1, 3]]
    """
    dims = _dims(shape, "unravel_index", "shape")
    order = _order(order, "unravel_index")
    idx = _int_tensor(indices, "unravel_index", "indices")
    size = math.prod(dims)
    if isinstance(indices, Tensor):
        idx = _checked(idx, size)
    else:
        host = np.asarray(indices)
        bad = host[(host < 0) | (host >= size)]
        if bad.size:
            raise ValueError(f"qt.unravel_index: index {bad.reshape(-1)[0]} is out of bounds for "
                             f"array with size {size}")
    if size == 0:  # nothing is in range: only empty indices came here
        return tuple(idx for _ in dims)
    coords = []
    for d in (reversed(dims) if order == "C" else dims):
        coords.append(_ew.apply("remainder", idx, d))
        idx = _ew.apply("floor_divide", idx, d)
    return tuple(reversed(coords)) if order == "C" else tuple(coords)


def ravel_multi_index(multi_index, dims, mode="raise", order="C") -> Tensor:
    """``numpy.ravel_multi_index``: coordinate arrays (broadcast together) into flat indices
    of an array of shape ``dims`` (int64).

    ``mode`` (one, or one per axis): ``'raise'`` (coordinates out of range raise:
    ``ValueError`` at once for Python/NumPy coordinates, ``IndexError`` when computed for
    tensors), ``'wrap'`` or ``'clip'``. ``dims`` must be Python/NumPy integers.

    Example:
        >>> import qtrace as qt
        >>> qt.ravel_multi_index((qt.asarray([1, 2]), qt.asarray([3, 0])), (3, 4)).tolist()
        [7, 8]
    """
    shape = _dims(dims, "ravel_multi_index", "dims")
    order = _order(order, "ravel_multi_index")
    coords = _items(multi_index, "ravel_multi_index", "multi_index")
    if len(coords) != len(shape):
        raise ValueError(f"qt.ravel_multi_index: parameter multi_index must be a sequence of length "
                         f"{len(shape)}, got {len(coords)} arrays")
    modes = (mode,) * len(shape) if isinstance(mode, str) else tuple(mode)
    if len(modes) != len(shape):
        raise ValueError(f"qt.ravel_multi_index: mode must be one mode or one per dimension "
                         f"({len(shape)}), got {mode!r}")
    modes = [_mode(m, "ravel_multi_index") for m in modes]
    dev = _device_of(*coords)
    ts = [_int_tensor(c, "ravel_multi_index", "multi_index", dev) for c in coords]
    if not ts:
        return full((), 0, dtypes.int64)
    out_shape = broadcast_shapes("qt.ravel_multi_index", *(t.shape for t in ts))
    stride = 1
    strides = []
    for d in (reversed(shape) if order == "C" else shape):
        strides.append(stride)
        stride *= d
    if order == "C":
        strides.reverse()
    total = None
    for c, src, d, m, s in zip(ts, coords, shape, modes, strides):
        if m == "wrap":
            c = _ew.apply("remainder", c, d)
        elif m == "clip":
            c = _ew.clip(c, 0, d - 1)
        elif isinstance(src, Tensor):
            c = _checked(c, d)
        else:
            host = np.asarray(src)
            if host.size and (host.min() < 0 or host.max() >= d):
                raise ValueError("qt.ravel_multi_index: invalid entry in coordinates array "
                                 f"(coordinates must lie in [0, {d}) for an axis of length {d})")
        term = _ew.apply("multiply", c, s)
        total = term if total is None else _ew.apply("add", total, term)
    return total if total.shape == out_shape else broadcast_to(total, out_shape)


# --- writing in place ------------------------------------------------------------------
def _write(dst: Tensor, op: str, update) -> None:
    """Give ``dst`` (and all that shares its memory) the value ``update(current)`` — a tensor
    of ``dst``'s shape, converted to its dtype — as ``dst[...] = value`` does."""
    if views.is_read_only(dst):
        raise ValueError(f"qt.{op}: {views.READ_ONLY_MESSAGE}")
    views.write(dst, lambda node: cast(update(held(node))._node, dst.dtype, weak=False))


def _into_ndarray(dst: np.ndarray, op: str, fn, *args) -> None:
    """A NumPy-array destination with tensor operands (NumPy's dispatch): ``fn`` runs on a
    tensor copy of ``dst`` and the value computed is stored into ``dst`` now."""
    tmp = wrap(input_node(dst, op, copy=True, device=_device_of(*args)))
    fn(tmp, *args)
    np.copyto(dst, np.asarray(tmp), casting="unsafe")
    buffers.bump(dst)


def _destination(a, op: str):
    if not isinstance(a, (Tensor, np.ndarray)):
        raise TypeError(f"qt.{op}: the array written must be a qt.Tensor or a NumPy array, got "
                        f"{type(a).__name__}")


def _check_cast(src, dst: Tensor, casting: str) -> None:
    o = operand(src, "copyto")
    if o.weak and type(src) is not bool:  # a Python number takes the destination's kind if it can
        from_dt = np.result_type(dst.dtype, src)
    else:
        from_dt = o.dtype
    if not np.can_cast(from_dt, dst.dtype, casting):
        what = "scalar" if o.node is None or o.node.ndim == 0 else "array data"
        raise TypeError(f"qt.copyto: Cannot cast {what} from {from_dt!r} to {dst.dtype!r} according "
                        f"to the rule {casting!r}")
    if o.weak:
        dtypes.check_int_fits("copyto", src, dst.dtype)


def _fits(shape: tuple, into: tuple, op: str, what: str, lead: bool = True) -> None:
    """NumPy's check that ``shape`` broadcasts into ``into`` (``lead``: leading axes of
    length 1 beyond ``into``'s may go, as they do for the values copied)."""
    while lead and len(shape) > len(into) and shape[0] == 1:
        shape = shape[1:]
    try:
        ok = broadcast_shapes(op, shape, into) == into
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"qt.{op}: could not broadcast {what} from shape {shape} into shape {into}")


def copyto(dst, src, casting="same_kind", where=True) -> None:
    """``numpy.copyto``: copy ``src`` (broadcast) into ``dst`` where ``where`` holds, in place.

    ``casting`` checks ``src``'s dtype against ``dst``'s as NumPy does (Python numbers are
    weak: ``copyto(float32_tensor, 1.5)`` is safe). A tensor ``dst`` is written through its
    views (its base and every view of that memory see the write); a NumPy-array ``dst``
    (``np.copyto(ndarray, tensor)``) receives the computed value now. The gradient reaches
    ``src`` where it was copied and ``dst``'s old value elsewhere.

    Example:
        >>> import qtrace as qt
        >>> x = qt.zeros(4)
        >>> qt.copyto(x[1:], qt.asarray([1.0, 2.0, 3.0]), where=[True, False, True])
        >>> x.tolist()
        [0.0, 1.0, 0.0, 3.0]
    """
    if casting not in _CASTINGS:
        raise ValueError(f"qt.copyto: casting must be one of 'no', 'equiv', 'safe', 'same_kind', "
                         f"'unsafe' (got {casting!r})")
    _destination(dst, "copyto")
    if isinstance(dst, np.ndarray):
        return _into_ndarray(dst, "copyto", copyto, src, casting, where)
    _check_cast(src, dst, casting)
    value = _on(src, "copyto", dst.device)
    _fits(value.shape, dst.shape, "copyto", "input array")
    if value.ndim > dst.ndim:  # leading axes of length 1 (NumPy drops them)
        value = reshape(value, value.shape[value.ndim - dst.ndim:])
    if where is True:
        mask = None
    else:
        mask = _on(where, "copyto", dst.device)
        if not np.can_cast(mask.dtype, dtypes.bool_, "safe") and mask.dtype.kind not in "iu":
            raise TypeError(f"qt.copyto: where must be boolean, got dtype {mask.dtype}")
        mask = mask if mask.dtype == dtypes.bool_ else astype(mask, dtypes.bool_)
        _fits(mask.shape, dst.shape, "copyto", "where mask", lead=False)
    value = astype(value, dst.dtype) if value.dtype != dst.dtype else value

    def update(cur):
        new = value if mask is None else _ew.where(mask, value, cur)
        return new if new.shape == dst.shape else broadcast_to(new, dst.shape)
    _write(dst, "copyto", update)


def _flat_mask(mask, a, op: str) -> Tensor:
    m = _as_bool(mask, op, a.device)
    if m.size != a.size:
        raise ValueError(f"qt.{op}: mask and data must be the same size (mask has {m.size} elements, "
                         f"the array {a.size})")
    return reshape(m, a.shape)


def putmask(a, mask, values) -> None:
    """``numpy.putmask``: ``a.flat[n] = values.flat[n % len(values)]`` where ``mask.flat[n]``,
    in place (``mask`` has ``a``'s size; empty ``values`` change nothing).

    A tensor ``a`` is written through its views; a NumPy array receives the computed value.
    The gradient reaches the placed ``values`` and ``a``'s kept elements.

    Example:
        >>> import qtrace as qt
        >>> x = qt.zeros(5)
        >>> qt.putmask(x, [True, False, True, True, False], qt.asarray([7.0, 8.0]))
        >>> x.tolist()
        [7.0, 0.0, 7.0, 8.0, 0.0]
    """
    _destination(a, "putmask")
    if isinstance(a, np.ndarray):
        return _into_ndarray(a, "putmask", putmask, mask, values)
    m = _flat_mask(mask, a, "putmask")
    v = _written_values(values, a.dtype, "putmask", a.device, "safe")
    if v.size == 0 or a.size == 0:
        return None
    vals = reshape(_cyclic(v, a.size, a.dtype), a.shape)
    _write(a, "putmask", lambda cur: _ew.where(m, vals, cur))


def place(arr, mask, vals) -> None:
    """``numpy.place``: the ``k``-th true element of ``mask`` takes ``vals.flat[k % len(vals)]``,
    in place (``mask`` has ``arr``'s size).

    Stays lazy (the rank of each true element is a cumulative sum); only empty ``vals``
    need the mask's values (``ValueError`` if any is true; a tensor mask is then
    evaluated). A tensor ``arr`` is written through its views; a NumPy array receives the
    computed value. The gradient reaches the placed ``vals``.

    Example:
        >>> import qtrace as qt
        >>> x = qt.zeros(5)
        >>> qt.place(x, [True, False, True, True, False], qt.asarray([7.0, 8.0]))
        >>> x.tolist()
        [7.0, 0.0, 8.0, 7.0, 0.0]
    """
    _destination(arr, "place")
    if isinstance(arr, np.ndarray):
        return _into_ndarray(arr, "place", place, mask, vals)
    m = _flat_mask(mask, arr, "place")
    v = ravel(_written_values(vals, arr.dtype, "place", arr.device, "safe"))
    if v.size == 0:
        if _values(m, "place").any():
            raise ValueError("qt.place: Cannot insert from an empty array!")
        return None
    if arr.size == 0:
        return None
    rank = _red.cumsum(astype(ravel(m), dtypes.int64))
    pos = _ew.apply("remainder", _ew.apply("subtract", rank, 1), v.size)
    v = v if v.dtype == arr.dtype else astype(v, arr.dtype)
    picked = reshape(gather_at(v, [pos], known=True), arr.shape)
    _write(arr, "place", lambda cur: _ew.where(m, picked, cur))


def _flat(cur: Tensor) -> Tensor:
    """The value ``cur`` flattened (a node-level reshape: no view is registered)."""
    return wrap(views.reshape_node(cur._node, (cur.size,)))


def _unflat(flat: Tensor, shape: tuple) -> Tensor:
    return wrap(views.reshape_node(flat._node, shape))


def put(a, ind, v, mode="raise") -> None:
    """``numpy.put``: ``a.flat[ind] = v`` in place (``v`` repeated cyclically over ``ind``).

    ``mode='raise'``: indices in ``[-a.size, a.size)`` (negative ones count from the end),
    others raise ``IndexError`` (at once for Python/NumPy ``ind``, when computed for a
    tensor); ``'wrap'``/``'clip'`` wrap or clip them. Of repeated Python/NumPy indices the
    last value wins, as in NumPy (and only it receives a gradient); of repeated tensor
    indices one does (the last on the CPU, any on a GPU). A tensor ``a`` is written
    through its views; a NumPy array receives the computed value. The gradient reaches
    ``v``.

    Example:
        >>> import qtrace as qt
        >>> x = qt.zeros(5)
        >>> qt.put(x, [0, -1], qt.asarray([1.0, 2.0]))
        >>> x.tolist()
        [1.0, 0.0, 0.0, 0.0, 2.0]
    """
    _destination(a, "put")
    mode = _mode(mode, "put")
    if isinstance(a, np.ndarray):
        return _into_ndarray(a, "put", put, ind, v, mode)
    idx = ravel(_int_tensor(ind, "put", "ind", a.device))
    vals = _written_values(v, a.dtype, "put", a.device)
    if idx.size == 0 or vals.size == 0:
        return None
    n = a.size
    if n == 0:
        raise IndexError("qt.put: cannot replace elements of an empty array")
    vals = _cyclic(vals, idx.size, a.dtype)
    if isinstance(ind, Tensor):
        known = mode != "raise"   # (raise: the kernel checks [-n, n); negative count from the end)
        if mode == "wrap":
            idx = _ew.apply("remainder", idx, n)
        elif mode == "clip":
            idx = _ew.clip(idx, 0, n - 1)
    else:  # host indices: resolved now, and of repeated ones the last kept (NumPy writes in order)
        host = np.asarray(ind).reshape(-1).astype(np.int64)
        if mode == "wrap":
            host = host % n
        elif mode == "clip":
            host = np.clip(host, 0, n - 1)
        else:
            bad = host[(host < -n) | (host >= n)]
            if bad.size:
                raise IndexError(f"qt.put: index {bad[0]} is out of bounds for axis 0 with size {n}")
            host = np.where(host < 0, host + n, host)
        last = np.sort(host.size - 1 - np.unique(host[::-1], return_index=True)[1])
        if last.size != host.size:
            host, vals = host[last], _along(vals, 0, last)
        idx, known = wrap(input_node(host, "put", device=a.device, owned=True)), True
    _write(a, "put", lambda cur: _unflat(scatter_at(_flat(cur), vals, [idx], "set", known), a.shape))


def put_along_axis(arr, indices, values, axis) -> None:
    """``numpy.put_along_axis``: ``arr[..., indices, ...] = values`` matching 1-D slices
    along ``axis`` (``axis=None``: the flattened ``arr``, 1-D ``indices``), in place.

    ``indices`` has ``arr``'s number of dimensions and broadcasts against it off ``axis``;
    negative indices count from the end, out-of-range ones raise ``IndexError`` (when
    computed, for a tensor). Of repeated indices one value wins (the last on the CPU, as
    in NumPy; any on a GPU). A tensor ``arr`` is written through its views; a NumPy array
    receives the computed value. The gradient reaches ``values``.

    Example:
        >>> import qtrace as qt
        >>> x = qt.zeros((2, 3))
        >>> qt.put_along_axis(x, qt.asarray([[2], [0]]), 5.0, axis=1)
        >>> x.tolist()
        [[0.0, 0.0, 5.0], [5.0, 0.0, 0.0]]
    """
    _destination(arr, "put_along_axis")
    if isinstance(arr, np.ndarray):
        return _into_ndarray(arr, "put_along_axis", put_along_axis, indices, values, axis)
    idx = _tensor(indices, "put_along_axis")
    if idx.dtype.kind not in "iu":
        raise IndexError(f"qt.put_along_axis: `indices` must be an integer array, got dtype {idx.dtype}")
    flat = axis is None
    if flat:
        if idx.ndim != 1:
            raise ValueError(f"qt.put_along_axis: when axis=None, `indices` must have a single "
                             f"dimension, got shape {idx.shape}")
        shape, ax = (arr.size,), 0
    else:
        shape = arr.shape
        ax = normalize_axis(axis, arr.ndim, "put_along_axis")
        if idx.ndim != arr.ndim:
            raise ValueError(f"qt.put_along_axis: `indices` and `arr` must have the same number of "
                             f"dimensions, got shapes {idx.shape} and {arr.shape}")
    if not isinstance(indices, Tensor):  # host indices: checked now, as NumPy does
        idx = np.asarray(indices)
    key = tuple(idx if k == ax else np.arange(d, dtype=np.int64).reshape(
        tuple(d if j == k else 1 for j in range(len(shape)))) for k, d in enumerate(shape))
    op = "qt.put_along_axis"
    vals = _written_values(values, arr.dtype, "put_along_axis", arr.device)

    def update(cur):
        target = _flat(cur) if flat else cur
        return _unflat(scatter(target, key, vals, "set", op), arr.shape)
    _write(arr, "put_along_axis", update)


def fill_diagonal(a, val, wrap=False) -> None:
    """``numpy.fill_diagonal``: write ``val`` (repeated cyclically) on the main diagonal of
    ``a`` (2-D, or n-D with all axes equal), in place; ``wrap=True`` restarts the diagonal
    below a tall matrix's square part, as NumPy does.

    A tensor ``a`` is written through its views; a NumPy array receives the computed
    value. The gradient reaches ``val``.

    Example:
        >>> import qtrace as qt
        >>> x = qt.zeros((2, 3))
        >>> qt.fill_diagonal(x, qt.asarray([4.0, 5.0]))
        >>> x.tolist()
        [[4.0, 0.0, 0.0], [0.0, 5.0, 0.0]]
    """
    _destination(a, "fill_diagonal")
    if isinstance(a, np.ndarray):
        return _into_ndarray(a, "fill_diagonal", fill_diagonal, val, wrap)
    if a.ndim < 2:
        raise ValueError(f"qt.fill_diagonal: array must be at least 2-d, got shape {a.shape}")
    if a.ndim == 2:
        step = a.shape[1] + 1
        end = a.size if wrap else min(a.size, a.shape[1] * a.shape[1])
    else:
        if len(set(a.shape)) != 1:
            raise ValueError(f"qt.fill_diagonal: All dimensions of input must be of equal length, "
                             f"got shape {a.shape}")
        step = 1 + sum(math.prod(a.shape[:k]) for k in range(1, a.ndim))
        end = a.size
    count = len(range(0, end, step))
    v = _written_values(val, a.dtype, "fill_diagonal", a.device)
    if v.size == 0 or count == 0:
        return None
    vals = _cyclic(v, count, a.dtype)
    _write(a, "fill_diagonal", lambda cur: Tensor(views.reshape_node(  # (wrap: the argument)
        views.update_node(_flat(cur)._node, vals._node, (0,), (step,)), a.shape)))


# --- sets (1-D, shapes decided by the data) --------------------------------------------
def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, sorted=True):  # noqa: A002 - NumPy's name
    """``numpy.unique``: the sorted distinct elements (of flattened ``ar``, or the distinct
    slices along ``axis``), with the indices of first occurrences, the inverse and the counts
    on request (int64), NaNs merged unless ``equal_nan=False``.

    The number of distinct elements depends on the data: ``ar`` is evaluated (outside
    ``qt.jit``; ``qt.TracerError`` inside it) and NumPy's ``unique`` computes the results
    (``sorted=False`` keeps NumPy's order). They are new tensors: no gradient flows
    through them. ``qt.unique_values`` and its siblings are the Array API's spellings.

    Example:
        >>> import qtrace as qt
        >>> values, counts = qt.unique(qt.asarray([3, 1, 3, 2]), return_counts=True)
        >>> values.tolist(), counts.tolist()
        ([1, 2, 3], [1, 1, 2])
    """
    host = _values(ar, "unique")
    if axis is not None:
        axis = normalize_axis(_int(axis, "unique", "axis"), host.ndim, "unique")
    got = np.unique(host, return_index=return_index, return_inverse=return_inverse,
                    return_counts=return_counts, axis=axis, equal_nan=equal_nan, sorted=sorted)
    dev = _device_of(ar)
    if not isinstance(got, tuple):
        return _host(got, "unique", dev)
    return (_host(got[0], "unique", dev),) + tuple(_host(g.astype(np.int64), "unique", dev) for g in got[1:])


def _sets(op: str, *arrays):
    return [_values(a, op) for a in arrays], _device_of(*arrays)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False):
    """``numpy.intersect1d``: the sorted values in both (flattened) arrays; with
    ``return_indices`` also the indices of their first occurrences in each (int64).
    Evaluates its inputs (``qt.TracerError`` inside ``qt.jit``); no gradient.

    Example:
        >>> import qtrace as qt
        >>> qt.intersect1d(qt.asarray([1, 3, 4, 3]), [3, 1, 2, 1]).tolist()
        [1, 3]
    """
    (a, b), dev = _sets("intersect1d", ar1, ar2)
    got = np.intersect1d(a, b, assume_unique=assume_unique, return_indices=return_indices)
    if not return_indices:
        return _host(got, "intersect1d", dev)
    return (_host(got[0], "intersect1d", dev),) + tuple(
        _host(g.astype(np.int64), "intersect1d", dev) for g in got[1:])


def union1d(ar1, ar2) -> Tensor:
    """``numpy.union1d``: the sorted values in either (flattened) array. Evaluates its inputs
    (``qt.TracerError`` inside ``qt.jit``); no gradient.

    Example:
        >>> import qtrace as qt
        >>> qt.union1d(qt.asarray([-1, 0, 1]), [-2, 0, 2]).tolist()
        [-2, -1, 0, 1, 2]
    """
    (a, b), dev = _sets("union1d", ar1, ar2)
    return _host(np.union1d(a, b), "union1d", dev)


def setdiff1d(ar1, ar2, assume_unique=False) -> Tensor:
    """``numpy.setdiff1d``: the sorted distinct values of ``ar1`` not in ``ar2`` (in ``ar1``'s
    order if ``assume_unique``). Evaluates its inputs (``qt.TracerError`` inside ``qt.jit``);
    no gradient.

    Example:
        >>> import qtrace as qt
        >>> qt.setdiff1d(qt.asarray([1, 2, 3, 2, 4, 1]), [3, 4, 5, 6]).tolist()
        [1, 2]
    """
    (a, b), dev = _sets("setdiff1d", ar1, ar2)
    return _host(np.setdiff1d(a, b, assume_unique=assume_unique), "setdiff1d", dev)


def setxor1d(ar1, ar2, assume_unique=False) -> Tensor:
    """``numpy.setxor1d``: the sorted values in exactly one of the two (flattened) arrays.
    Evaluates its inputs (``qt.TracerError`` inside ``qt.jit``); no gradient.

    Example:
        >>> import qtrace as qt
        >>> qt.setxor1d(qt.asarray([1, 2, 3, 2, 4]), [2, 3, 5, 7, 5]).tolist()
        [1, 4, 5, 7]
    """
    (a, b), dev = _sets("setxor1d", ar1, ar2)
    return _host(np.setxor1d(a, b, assume_unique=assume_unique), "setxor1d", dev)


# --- sorting by keys, partitions -------------------------------------------------------
def lexsort(keys, axis=-1) -> Tensor:
    """``numpy.lexsort``: the stable permutation sorting by several keys along ``axis``, the
    last key the primary one (int64). Lazy: one stable argsort per key (NaNs last).

    ``keys`` is a sequence of equally shaped arrays, or an array whose rows are the keys.

    Example:
        >>> import qtrace as qt
        >>> surnames = qt.asarray([2, 1, 2, 1])
        >>> firsts = qt.asarray([0, 5, 3, 4])
        >>> qt.lexsort((firsts, surnames)).tolist()
        [3, 1, 0, 2]
    """
    if isinstance(keys, (Tensor, np.ndarray)) and keys.ndim == 0:
        raise TypeError("qt.lexsort: need sequence of keys with len > 0 in lexsort, got a 0-d array")
    items = _items(keys, "lexsort", "keys")
    ks = [_on(k, "lexsort", _device_of(*items)) for k in items]
    if not ks:
        raise TypeError("qt.lexsort: need sequence of keys with len > 0 in lexsort")
    shape = ks[0].shape
    if any(k.shape != shape for k in ks):
        raise ValueError(f"qt.lexsort: all keys need to be the same shape, got {[k.shape for k in ks]}")
    if not shape:
        return full((), 0, dtypes.int64, ks[0].device)
    ax = normalize_axis(axis, len(shape), "lexsort")
    perm = argsort(ks[0], axis=ax)
    for k in ks[1:]:  # least significant key first; each stable sort keeps the earlier order
        perm = take_along_axis(perm, argsort(take_along_axis(k, perm, axis=ax), axis=ax), axis=ax)
    return perm


def _partition(op: str, a, kth, axis, kind, order):
    if order is not None:
        raise TypeError(f"qt.{op}: order= (structured arrays) is not supported")
    if kind != "introselect":
        raise ValueError(f"qt.{op}: kind must be 'introselect', got {kind!r}")
    t = _tensor(a, op)
    if axis is None:
        t, ax = ravel(t), 0
    else:
        if t.ndim == 0:
            raise ValueError(f"qt.{op}: a 0-d array cannot be partitioned along axis {axis}")
        ax = normalize_axis(axis, t.ndim, op)
    if isinstance(kth, Tensor):
        raise TypeError(f"qt.{op}: kth must be Python or NumPy integers, not a qt.Tensor")
    ks = np.asarray(kth)
    if ks.dtype.kind not in "iu" or ks.ndim > 1:
        raise TypeError(f"qt.{op}: Partition index must be integer (or a 1-D sequence of them), "
                        f"got {kth!r}")
    n = t.shape[ax]
    for k in ks.reshape(-1).tolist():
        if not -n <= k < n:
            raise ValueError(f"qt.{op}: kth(={k}) out of bounds ({n})")
    return t, ax


def partition(a, kth, axis=-1, kind="introselect", order=None) -> Tensor:
    """``numpy.partition``: the elements along ``axis`` rearranged so that the ``kth`` ones
    are where sorting would put them, smaller ones before, larger after.

    This sorts fully (stable, NaNs last): one valid partition of the many NumPy allows —
    compare results by their ``kth`` elements or sorted, not elementwise with NumPy's
    introselect. ``kth`` must be Python/NumPy integers. The gradient flows as ``sort``'s.

    Example:
        >>> import qtrace as qt
        >>> p = qt.partition(qt.asarray([3.0, 4.0, 2.0, 1.0]), 2)
        >>> p[2].item()
        3.0
    """
    t, ax = _partition("partition", a, kth, axis, kind, order)
    return sort(t, axis=ax)


def argpartition(a, kth, axis=-1, kind="introselect", order=None) -> Tensor:
    """``numpy.argpartition``: the indices that partition ``a`` (see ``partition``; this is a
    full stable argsort, a valid answer; int64). ``kth`` must be Python/NumPy integers.

    Example:
        >>> import qtrace as qt
        >>> qt.argpartition(qt.asarray([3.0, 4.0, 2.0, 1.0]), 1)[1].item()
        2
    """
    t, ax = _partition("argpartition", a, kth, axis, kind, order)
    return argsort(t, axis=ax)


NUMPY_FUNCTIONS: dict = {
    np.select: select, np.piecewise: piecewise, np.choose: choose, np.compress: compress,
    np.extract: extract, np.argwhere: argwhere, np.flatnonzero: flatnonzero,
    np.unravel_index: unravel_index, np.ravel_multi_index: ravel_multi_index, np.copyto: copyto,
    np.putmask: putmask, np.place: place, np.put: put, np.put_along_axis: put_along_axis,
    np.fill_diagonal: fill_diagonal, np.unique: unique, np.intersect1d: intersect1d,
    np.union1d: union1d, np.setdiff1d: setdiff1d, np.setxor1d: setxor1d, np.lexsort: lexsort,
    np.partition: partition, np.argpartition: argpartition,
}
NUMPY_UFUNCS: dict = {}

__all__: list[str] = [
    "argpartition", "argwhere", "choose", "compress", "copyto", "extract", "fill_diagonal",
    "flatnonzero", "intersect1d", "lexsort", "partition", "piecewise", "place", "put",
    "put_along_axis", "putmask", "ravel_multi_index", "select", "setdiff1d", "setxor1d",
    "union1d", "unique", "unravel_index",
]
