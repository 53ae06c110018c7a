"""Immutable, hash-consed graph nodes with a content hash fixed at creation.

A node is ``(primitive, params, shape, dtype, weak, device, inputs)``. Its ``key`` is a
content hash of exactly that, where each input contributes its own key and the
*positions* of its leaves in this node's leaf list — never an object identity or a
counter. Two structurally identical programs therefore have the same key in every
process (this is what kernel caches are keyed by), while ``a + b`` and ``a + a`` differ
because their leaf patterns differ.

Leaves are inputs (``prim == "input"``): a concrete buffer in eager code, or a
placeholder while ``qt.jit`` traces. Constants (``prim == "const"``) are not leaves:
their value is part of the key.

Nodes are interned: creating a node equal to a live one (same key, same leaf objects)
returns the live one, which is common-subexpression elimination for free.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import weakref

import numpy as np

from .device import Device


def content_hash(obj: object) -> str:
    """A stable 32-hex-digit hash of ``repr(obj)`` (obj built of tuples, str, int, float)."""
    return hashlib.blake2b(repr(obj).encode(), digest_size=16).hexdigest()


class Node:
    """One operation (or input, or constant) of the dataflow graph. Immutable."""

    __slots__ = (
        "prim", "params", "shape", "dtype", "weak", "device", "inputs",
        "key", "leaves", "count", "buffer", "sig", "__weakref__",
    )

    prim: str
    params: tuple
    shape: tuple
    dtype: np.dtype
    weak: bool
    device: Device
    inputs: tuple
    key: str
    leaves: tuple
    count: int
    buffer: object

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def is_leaf(self) -> bool:
        return self.prim == "input"

    def __repr__(self) -> str:
        return f"Node({self.prim}{list(self.params) if self.params else ''}, {self.shape}, {self.dtype})"


_intern: dict = {}  # identity -> weakref to the live node (the ref's callback removes it)
# re-entrant: a garbage collection triggered while the lock is held (allocating a node)
# runs the weak-reference callbacks, which take it again on the same thread
_intern_lock = threading.RLock()


def _forget(ident):
    def drop(_ref, ident=ident):
        with _intern_lock:
            ref = _intern.get(ident)
            if ref is not None and ref() is None:
                del _intern[ident]
    return drop
COUNT_CAP = 1 << 30


def make_node(prim: str, params: tuple, shape: tuple, dtype: np.dtype, inputs: tuple,
              device: Device, weak: bool = False) -> Node:
    """Create (or find the live equal) node. ``inputs`` must be on ``device``."""
    leaves: list[Node] = []
    where: dict[int, int] = {}
    parts = [prim, repr(params) if params else "", repr(shape), dtype.str, "w" if weak else "",
             device.name]
    count = 0
    for inp in inputs:
        parts.append(inp.key)
        if len(inp.leaves) == 1 and not leaves:  # the common case: one leaf, first seen
            leaf = inp.leaves[0]
            where[id(leaf)] = 0
            leaves.append(leaf)
            parts.append("0")
        else:
            for leaf in inp.leaves:
                pos = where.get(id(leaf))
                if pos is None:
                    pos = where[id(leaf)] = len(leaves)
                    leaves.append(leaf)
                parts.append(str(pos))
        parts.append(";")
        if inp.count > count:
            count = inp.count
    key = hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()
    ident = (key, tuple(map(id, leaves)))
    ref = _intern.get(ident)
    if ref is not None:
        node = ref()
        if node is not None:
            return node
    with _intern_lock:
        node = Node.__new__(Node)
        node.prim, node.params, node.shape, node.dtype = prim, params, shape, dtype
        node.weak, node.device, node.inputs, node.key = weak, device, inputs, key
        # pending-graph size estimate: the longest chain plus this node's fan-in (a sum over
        # inputs would count shared subgraphs once per path: exponential in a DAG)
        node.leaves, node.count, node.buffer = tuple(leaves), min(count + len(inputs), COUNT_CAP), None
        node.sig = None
        _intern[ident] = weakref.ref(node, _forget(ident))
    return node


def make_input(shape: tuple, dtype: np.dtype, device: Device, strides: tuple | None = None,
               buffer: object = None, weak: bool = False) -> Node:
    """A leaf: a concrete buffer (``buffer`` set) or a tracing placeholder (``buffer=None``).

    ``strides`` are in elements (C-contiguous when omitted) and part of the key, so
    kernels specialise on the memory layout of what they read.
    """
    shape = tuple(shape)
    strides = c_strides(shape) if strides is None else tuple(strides)
    node = Node.__new__(Node)
    node.prim, node.params, node.shape, node.dtype = "input", (strides,), shape, dtype
    node.weak, node.device, node.inputs = weak, device, ()
    node.key = _input_key(strides, shape, dtype, weak, device)
    node.leaves, node.count, node.buffer = (node,), 0, buffer
    node.sig = None
    return node


def leaf_like(template: Node, buffer) -> Node:
    """A new input leaf with ``template``'s signature and key, holding ``buffer``."""
    node = Node.__new__(Node)
    node.prim, node.params, node.shape, node.dtype = "input", template.params, template.shape, template.dtype
    node.weak, node.device, node.inputs, node.key = template.weak, template.device, (), template.key
    node.leaves, node.count, node.buffer, node.sig = (node,), 0, buffer, template.sig
    return node


@functools.lru_cache(maxsize=4096)
def _input_key(strides: tuple, shape: tuple, dtype: np.dtype, weak: bool, device: Device) -> str:
    return content_hash(("input", (strides,), shape, dtype.str, weak, str(device)))


@functools.lru_cache(maxsize=4096)
def c_strides(shape: tuple) -> tuple:
    """C-order strides of ``shape``, in elements."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def graph_key(outputs: tuple) -> tuple[str, tuple]:
    """The content key of a multi-output graph and its ordered leaf list."""
    leaves: list[Node] = []
    where: dict[int, int] = {}
    specs = []
    for out in outputs:
        positions = []
        for leaf in out.leaves:
            pos = where.get(id(leaf))
            if pos is None:
                pos = where[id(leaf)] = len(leaves)
                leaves.append(leaf)
            positions.append(pos)
        specs.append((out.key, tuple(positions)))
    return content_hash(tuple(specs)), tuple(leaves)


def toposort(outputs) -> list[Node]:
    """Non-leaf nodes reachable from ``outputs``, each after all of its inputs."""
    order: list[Node] = []
    seen: set[int] = set()
    for out in outputs:
        if id(out) in seen or out.is_leaf:
            continue
        stack = [(out, 0)]
        while stack:
            node, i = stack.pop()
            if i < len(node.inputs):
                stack.append((node, i + 1))
                child = node.inputs[i]
                if id(child) not in seen and not child.is_leaf:
                    seen.add(id(child))
                    stack.append((child, 0))
            else:
                order.append(node)
        seen.add(id(out))
    # the root is appended when its frame completes; guard against double entries
    unique, done = [], set()
    for n in order:
        if id(n) not in done:
            done.add(id(n))
            unique.append(n)
    return unique
