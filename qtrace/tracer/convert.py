"""Turning user values (tensors, NumPy arrays, Python scalars) into graph operands."""

from __future__ import annotations

import numpy as np

from ..config import config
from ..graph import buffers
from ..graph import evaluate as graph_evaluate
from ..graph.device import Device
from ..graph.node import Node, make_input
from . import dtypes
from .context import record, tracing
from .selections import Selection, refuse
from .tensor import Tensor


class Operand:
    """One argument of an operation: a graph node, or a weak Python scalar not yet placed."""

    __slots__ = ("node", "value", "dtype", "weak")

    def __init__(self, node: Node | None, value, dtype: np.dtype, weak: bool):
        self.node, self.value, self.dtype, self.weak = node, value, dtype, weak


def operand(x, op: str) -> Operand:
    if isinstance(x, Tensor):
        n = x._node
        return Operand(n, None, n.dtype, n.weak)
    if type(x) in dtypes.PY_SCALARS:  # NumPy scalars (np.float64 subclasses float) are strong
        return Operand(None, x, dtypes.weak_dtype(x), True)
    if type(x) is Selection:
        raise refuse(f"qt.{op}")
    node = input_node(x, op)
    return Operand(node, None, node.dtype, False)


def input_node(x, op: str = "asarray", dtype=None, copy: bool = False,
               device: Device | str | None = None, owned: bool = False) -> Node:
    """A leaf node holding ``x`` (array-like) — zero-copy where the memory allows.

    Memory kept zero-copy is *borrowed* (``qtrace.graph.buffers``): its owner may write it
    behind qtrace's back, so caches keyed on its data are not trusted. ``owned=True``:
    ``x`` is a fresh array qtrace made and nobody else holds.
    Device arrays (``__cuda_array_interface__``: CuPy, PyTorch, Numba) stay on their GPU,
    zero-copy unless ``copy``; host data for a GPU ``device`` is copied there.
    """
    if not isinstance(x, np.ndarray) and hasattr(x, "__cuda_array_interface__"):
        return _gpu_input(x, op, dtype, copy, device, owned)
    arr = np.array(x, dtype=dtype, copy=True) if copy else np.asarray(x, dtype=dtype)
    if arr.dtype not in dtypes.SUPPORTED:
        raise TypeError(f"qt.{op}: dtype {arr.dtype} is not supported "
                        f"(supported: {', '.join(sorted(map(str, dtypes.SUPPORTED)))})")
    strides = _element_strides(arr)
    if strides is None:
        arr = np.ascontiguousarray(arr)
        strides = _element_strides(arr)
    dev = usable_device(device, op)
    if dev.kind != "cpu":
        host = arr if arr.flags.c_contiguous else arr.copy()   # (0-d stays 0-d)
        return make_input(arr.shape, arr.dtype, dev, buffer=graph_evaluate.to_device(host, dev))
    if not (copy or owned) and (arr is x or not arr.flags.owndata):
        buffers.borrow(arr)
    return make_input(arr.shape, arr.dtype, dev, strides=strides, buffer=arr)


def usable_device(device, op: str) -> Device:
    """``device`` (default ``qt.config.device``) as a :class:`Device` qtrace can run on
    here, or an error naming what is missing (a driver, CuPy, the GPU)."""
    dev = Device(device if device is not None else config.device)
    if dev.kind != "cpu":
        why = graph_evaluate.unavailable(dev)
        if why is not None:
            raise ValueError(f"qt.{op}: device {dev} is not available: {why}")
    return dev


def _gpu_input(x, op: str, dtype, copy: bool, device, owned: bool = False) -> Node:
    """A leaf over a GPU array (CuPy's, or anything with ``__cuda_array_interface__``);
    kept zero-copy, it is borrowed memory (``qtrace.graph.buffers``)."""
    import cupy
    arr = cupy.asarray(x)   # zero-copy for CUDA array interface exporters
    zero_copy = True
    dev = Device(f"cuda:{arr.device.id}")
    if device is not None and Device(device) != dev:
        raise ValueError(f"qt.{op}: the array is on {dev}, not on {Device(device)}; move it "
                         "first (qt.asarray(x).to(device))")
    usable_device(dev, op)
    if arr.dtype not in dtypes.SUPPORTED:
        raise TypeError(f"qt.{op}: dtype {arr.dtype} is not supported")
    if dtype is not None and np.dtype(dtype) != arr.dtype:
        arr, zero_copy = arr.astype(dtype), False
    elif copy:
        arr, zero_copy = arr.copy(), False
    if not arr.flags.c_contiguous:
        arr, zero_copy = arr.copy(), False   # (ascontiguousarray would make a 0-d array 1-d)
    if zero_copy and not owned:
        buffers.borrow(arr)
    return make_input(arr.shape, arr.dtype, dev, buffer=arr)


def _element_strides(arr: np.ndarray):
    item = arr.dtype.itemsize
    if arr.ctypes.data % item:
        return None
    if any(s % item for s in arr.strides):
        return None
    return tuple(s // item for s in arr.strides)


def number_key(value) -> tuple:
    """A dictionary key telling Python number ``value`` apart from every other number: the
    number itself, except where ``==`` does not tell them apart (``0.0 == -0.0``, ``1 ==
    1.0 == True``: the type is part of the key) or a NaN never equals itself (by repr)."""
    tv = type(value)
    exact = tv is int or tv is bool or tv is float and value == value and value != 0.0  # complex: by repr
    return (tv, value if exact else repr(value))


def const_node(value, dtype: np.dtype, device: Device, weak: bool = False) -> Node:
    """A 0-d constant (its value is part of the graph's content hash)."""
    key = (*number_key(value), dtype, device, weak)
    node = _consts.get(key)
    if node is None:
        node = record("const", (), (dtypes.scalar_value(value, dtype),), (), dtype, weak=weak,
                      device=device)
        if len(_consts) > 4096:  # the constants of a program are few; a runaway one is not
            _consts.clear()
        _consts[key] = node
    return node


_consts: dict = {}  # recent constants, so a repeated step does not rebuild them


def scalar_node(value, dtype: np.dtype, device: Device) -> Node:
    """The node of a Python number operand of an elementwise op, in ``dtype``.

    In eager code a number whose value does not shape the code — a time step, a
    coefficient, a threshold — becomes a 0-d input holding it: kernels read it like any
    other input, so a step run with a new ``dt`` reuses its compiled kernels and plan
    instead of compiling them again for the new value. Small integers (``x * 2``,
    ``x ** 2``, ``x - 1``, ``|v| <= 4``), booleans and complex numbers stay constants of
    the graph (LLVM simplifies with them), as does every number while ``qt.jit`` traces
    (the trace is compiled once).
    """
    tv = type(value)
    if (tv is bool or tv is complex or tracing() or value != value
            or (abs(value) <= 4 and value == int(value))):
        return const_node(value, dtype, device)
    key = (tv, value if value != 0 else repr(value), dtype, device)
    node = _scalars.get(key)
    if node is None:
        arr = np.array(dtypes.scalar_value(value, dtype), dtype=dtype)
        node = make_input((), dtype, device, buffer=graph_evaluate.to_device(arr, device))
        if len(_scalars) > 4096:
            _scalars.clear()
        _scalars[key] = node
    return node


_scalars: dict = {}  # 0-d inputs of recent eager scalars (a repeated step finds its own)


def cast(node: Node, dtype: np.dtype, weak: bool | None = None) -> Node:
    """``node`` converted to ``dtype`` (NumPy ``astype`` semantics)."""
    weak = node.weak if weak is None else weak
    if node.dtype == dtype and node.weak == weak:
        return node
    if node.prim == "const":
        return const_node(node.params[0], dtype, node.device, weak)
    return record("convert", (node,), (), node.shape, dtype, weak=weak)


def place(ops: list[Operand], dts, op: str, device: Device | None = None) -> list[Node]:
    """Nodes for ``ops`` converted to the loop dtypes ``dts`` (weak scalars become constants)."""
    if device is None:
        device = next((o.node.device for o in ops if o.node is not None), Device(config.device))
    nodes = []
    for o, dt in zip(ops, dts):
        if o.node is None:
            dtypes.check_int_fits(op, o.value, dt)
            nodes.append(scalar_node(o.value, dt, device))
        else:
            nodes.append(cast(o.node, dt, weak=False) if o.node.dtype != dt else o.node)
    return nodes


def promote(ops: list[Operand], op: str) -> np.dtype:
    """``numpy.result_type`` of the operands with Python scalars weak (NEP 50)."""
    args = []
    for o in ops:
        if o.weak and o.dtype != dtypes.bool_:
            args.append({"f": 0.0, "c": 0j}.get(o.dtype.kind, 0))
        else:
            args.append(o.dtype)
    try:
        dt = np.result_type(*args)
    except (TypeError, np.exceptions.DTypePromotionError) as err:
        raise TypeError(f"qt.{op}: cannot promote dtypes {[str(o.dtype) for o in ops]}: {err}") from None
    dtypes.check(f"qt.{op}", dt)
    return dt


def wrap(node: Node) -> Tensor:
    return Tensor(node)


def held(node: Node) -> Tensor:
    """A tensor over ``node`` that is not noted as pending work: for a value that the tensors
    which recorded it already hold (a reverse pass hands each rule its node's inputs and
    output as tensors; noting them again would only list them twice)."""
    t = Tensor.__new__(Tensor)
    t._node = node
    t._view = None
    return t


def astype(x, dtype, /, *, copy: bool = True, device=None) -> Tensor:
    """``x`` converted to ``dtype`` (NumPy ``astype`` semantics: C casts, NaN to int undefined).

    Example:
        >>> import qtrace as qt
        >>> qt.astype(qt.arange(3), qt.float32).dtype
        dtype('float32')
    """
    dt = dtypes.canonical(dtype, "qt.astype")
    here = x.device if isinstance(x, Tensor) else Device(config.device)
    if device is not None and Device(device) != here:
        raise ValueError(f"qt.astype: device {device} is not available (use .to_device first)")
    if isinstance(x, Tensor) and not copy and x.dtype == dt:
        return x
    node = x._node if isinstance(x, Tensor) else operand(x, "astype").node
    if node is None:
        node = const_node(x, dt, Device(config.device))
    return wrap(cast(node, dt, weak=False))
