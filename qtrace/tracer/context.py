"""Tracing state of the current thread and the one entry point that records operations."""

from __future__ import annotations

import threading

import numpy as np

from ..config import config
from ..errors import TracerError
from ..graph.device import Device
from ..graph.node import Node, make_node
from ..graph.primitives import PRIMITIVES, lookup


class ThreadState:
    """What one thread is doing: tracing depth, differentiation depth, pending tensors."""

    __slots__ = ("depth", "special", "ad", "pending", "epoch", "count", "cut", "gate")

    def __init__(self):
        self.depth = self.special = self.ad = 0
        self.pending = []   # weak references to tensors and storages holding pending values
        self.epoch = object()   # a new token with each new pending list (Storage.noted)
        self.count = 0      # operations recorded since this thread last evaluated
        self.cut = None     # the cut policy's memory (qtrace.tracer.pending)
        self.gate = None    # (prim, shape[, code, offset]) of its anchor while it has one:
                            # past the limit, only such an operation (or four times the
                            # limit) consults the policy; code and offset: the anchor's
                            # innermost user frame, which the compiled recorder compares


_local = threading.local()


def state() -> ThreadState:
    """This thread's :class:`ThreadState`."""
    try:
        return _local.s
    except AttributeError:
        s = _local.s = ThreadState()
        return s


def tracing() -> bool:
    """True while ``qt.jit`` traces a function on this thread."""
    return state().depth > 0


def special() -> bool:
    """True while tracing or differentiating on this thread (one check on the fast path)."""
    return state().special > 0


def ad_level() -> int:
    """How many ``qt.grad``/``qt.vjp`` calls are differentiating on this thread right now."""
    return state().ad


class ad_scope:
    """Marks the current thread as differentiating (``qt.jit`` then traces through)."""

    def __enter__(self):
        s = state()
        s.ad += 1
        s.special += 1
        return s.ad

    def __exit__(self, *exc):
        s = state()
        s.ad -= 1
        s.special -= 1
        return False


class trace_scope:
    """Marks the current thread as tracing for the duration of a ``with`` block."""

    def __enter__(self):
        s = state()
        s.depth += 1
        s.special += 1
        return self

    def __exit__(self, *exc):
        s = state()
        s.depth -= 1
        s.special -= 1
        return False


def is_abstract(node: Node) -> bool:
    """True when ``node`` depends on a tracing placeholder (no concrete value exists)."""
    return any(leaf.buffer is None for leaf in node.leaves)


def concrete_error(what: str) -> TracerError:
    return TracerError(
        f"{what}: this value depends on the inputs of a function being traced by qt.jit, so it "
        "has no concrete value yet. Keep Python control flow on static arguments "
        "(static_argnums), or use qt.where / qt.fori_loop / qt.while_loop.")


def same_device(op: str, nodes) -> Device:
    device = nodes[0].device
    for n in nodes:
        if n.device is not device and n.device != device:
            raise ValueError(f"qt.{op}: operands are on different devices: {device} and {n.device}; "
                             "move them with .to(device) first")
    return device


def record(prim: str, inputs: tuple, params: tuple, shape: tuple, dtype: np.dtype,
           weak: bool = False, device: Device | None = None) -> Node:
    """Add one operation to the graph (the single place every op goes through)."""
    if prim not in PRIMITIVES:
        lookup(prim)  # raises, naming it
    if device is None:
        device = same_device(prim, inputs) if inputs else Device(config.device)
    if type(shape) is not tuple:
        shape = tuple(shape)
    if not isinstance(dtype, np.dtype):
        dtype = np.dtype(dtype)
    if type(inputs) is not tuple:
        inputs = tuple(inputs)
    return make_node(prim, params, shape, dtype, inputs, device, weak)


def record_checked(prim: str, inputs: tuple, shape: tuple, dtype: np.dtype, weak: bool,
                   device: Device) -> Node:
    """:func:`record` without its checks, for a caller that made them: ``prim`` exists and
    takes no params, ``inputs`` is a tuple of nodes on ``device``, ``shape`` a tuple,
    ``dtype`` a ``numpy.dtype`` (the elementwise fast path)."""
    return make_node(prim, (), shape, dtype, inputs, device, weak)


def buffered(node: Node) -> Node:
    """``node``, as something that has a buffer when evaluated (a constant gets a copy task).

    Library steps (``call``) receive buffers; constants are immediates in kernels and have
    none of their own.
    """
    if node.prim != "const":
        return node
    return record("positive", (node,), (), node.shape, node.dtype, weak=node.weak)
