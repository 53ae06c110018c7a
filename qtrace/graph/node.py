"""Immutable, hash-consed graph nodes with a content hash fixed by their structure.

A node is ``(primitive, params, shape, dtype, weak, device, inputs)``. Its ``key`` is a
content hash of exactly that, where each input contributes its own key and the
*positions* of its leaves in this node's leaf list — never an object identity or a
counter. Two structurally identical programs therefore have the same key in every
process (this is what kernel caches are keyed by), while ``a + b`` and ``a + a`` differ
because their leaf patterns differ.

Leaves are inputs (``prim == "input"``): a concrete buffer in eager code, or a
placeholder while ``qt.jit`` traces. Constants (``prim == "const"``) are not leaves:
their value is part of the key.

Recording is on the per-operation path of eager code, so a node does not hash anything
when it is created. It points to its :class:`Struct`: the interned tuple of what its key
is made of (its inputs contribute their own structs and leaf positions). Equal structure
is the same ``Struct`` object, so in-process caches (the eager plan cache) are keyed by
structs, compared by identity; the content hash (``blake2b``) is computed from the
struct on first use of ``key`` — for a compile, a disk cache entry, a diagnostic — and
kept on the struct.

Nodes are shared: creating a node equal to a live one recorded since the last evaluation
(same struct, same input nodes) returns that one, which is common-subexpression
elimination for free. The table is emptied at each evaluation (it stays small; no
callbacks run when nodes die). Sharing is lock-free: two threads racing to create the
same node may both create one (both are correct; only that sharing is missed).
"""

from __future__ import annotations

import functools
import hashlib
import weakref

import numpy as np

from . import native
from .device import Device


def content_hash(obj: object) -> str:
    """A stable 32-hex-digit hash of ``repr(obj)`` (obj built of tuples, str, int, float)."""
    return hashlib.blake2b(repr(obj).encode(), digest_size=16).hexdigest()


class Struct:
    """The structure of a node: exactly what its content key is a hash of. Interned.

    ``parts`` is ``(prim, params repr, shape, dtype, weak, device)`` followed, for each
    input, by the input's ``Struct`` and the positions of its leaves in the node's leaf
    list. Input leaves have ``("input", strides, shape, dtype, weak, device)``. Structs
    compare by identity: equal parts give the same object while the intern table holds
    it (a struct made after the table was emptied is a new object: caches keyed by it
    miss, never hit wrongly).
    """

    __slots__ = ("parts", "_key", "_result", "__weakref__")

    def __init__(self, parts: tuple):
        self.parts = parts
        self._key = None
        self._result = None  # (params, struct) of a C-contiguous leaf holding this value

    @property
    def key(self) -> str:
        k = self._key
        if k is None:
            k = _compute_keys(self)
        return k

    def __repr__(self) -> str:
        return f"Struct({self.parts[0]}, {self.parts[2]}, {self.parts[3]})"


_structs: dict = {}       # parts -> Struct
STRUCTS_CAP = 1 << 16     # emptied beyond this (live nodes keep their structs)


def _struct(parts: tuple) -> Struct:
    s = _structs.get(parts)
    if s is None:
        if len(_structs) >= STRUCTS_CAP:
            _structs.clear()
            if native.active():  # (the compiled recorder's cache in front of this table)
                native.module().forget_structs()
        s = _structs.setdefault(parts, Struct(parts))
    return s


def _ints(t: tuple) -> tuple:
    # equal structs may hold equal tuples of int-likes (16 == np.int64(16)): the key is
    # that of plain ints, whichever of them was interned first
    return tuple(map(int, t))


def _own_key(s: Struct) -> str:
    p = s.parts
    if p[0] == "input":
        _, strides, shape, dtype, weak, device = p
        return content_hash(("input", (_ints(strides),), _ints(shape), dtype.str, bool(weak),
                             str(device)))
    prim, params, shape, dtype, weak, device = p[:6]
    ptoken = params if type(params) is str else repr(params) if params else ""
    parts = [prim, ptoken, repr(_ints(shape)), dtype.str, "w" if weak else "", device.name]
    for i in range(6, len(p), 2):
        parts.append(p[i]._key)
        parts.extend(map(str, p[i + 1]))
        parts.append(";")
    return hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()


def _compute_keys(root: Struct) -> str:
    """Content keys of ``root`` and every struct below it still missing one (no recursion:
    a pending chain can be many thousands of nodes deep)."""
    stack = [root]
    while stack:
        s = stack[-1]
        if s._key is not None:
            stack.pop()
            continue
        p = s.parts
        missing = [] if p[0] == "input" else [p[i] for i in range(6, len(p), 2) if p[i]._key is None]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        s._key = _own_key(s)
    return root._key


class Node:
    """One operation (or input, or constant) of the dataflow graph. Immutable."""

    __slots__ = (
        "prim", "params", "shape", "dtype", "weak", "device", "inputs",
        "struct", "leaves", "count", "buffer", "sig", "__weakref__",
    )

    prim: str
    params: tuple
    shape: tuple
    dtype: np.dtype
    weak: bool
    device: Device
    inputs: tuple
    struct: Struct
    leaves: tuple
    count: int
    buffer: object

    @property
    def key(self) -> str:
        """The content hash (stable across processes), computed on first use."""
        return self.struct.key

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


class Leaf(Node):
    """An input node (``prim == "input"``). Its leaf list is itself.

    That list is built on access: stored, ``(self,)`` would be a reference cycle, and
    every leaf (with its buffer, often megabytes) would then live until the cyclic
    garbage collector happened to run instead of dying with its last reference.

    ``_views`` (unset until the first): the leaves of views of this evaluated input, by
    view steps (``qtrace.tracer.views._leaf_view``; they hold NumPy views of the buffer,
    never this leaf, so no cycle either).
    """

    __slots__ = ("_views",)

    @property
    def leaves(self) -> tuple:
        return (self,)


# (id of the struct, of each input) -> weak reference to the node made from them (the
# compiled recorder keeps one- and two-input nodes in a table of its own)
_recent: dict = {}
RECENT_CAP = 1 << 16
COUNT_CAP = 1 << 30


def forget_recent() -> None:
    """Let common-subexpression sharing start afresh (at an evaluation: the pending graph
    was cut, and the nodes it held need not stay alive for sharing)."""
    _recent.clear()
    _leafsets.clear()
    _merged.clear()
    if native.active():  # its table of one- and two-input nodes
        native.module().forget_recent()


_N_IOTA = 64
_IOTA = [tuple(range(n)) for n in range(_N_IOTA)]
_ZERO, _ONE = (0,), (1,)


def _iota(n: int) -> tuple:
    """``tuple(range(n))``, shared (the leaf positions of an input seen first)."""
    return _IOTA[n] if n < _N_IOTA else tuple(range(n))


# Leaf lists merged from several are interned (one tuple object per content), so that the
# inputs of later nodes share theirs (``la is lb``) and merges of the same two lists are
# looked up, not redone: a step's operations mostly combine values over the same leaves.
# Both hold leaves (and their buffers) alive only until the next evaluation.
_leafsets: dict = {}  # merged leaf tuple -> itself
_merged: dict = {}    # (id(la), id(lb)) -> (la, lb, leaves, positions in it of la's, of lb's)
_MERGE_CAP = 1 << 12


def _merge(inputs) -> tuple[list, tuple]:
    """Leaf list of a node over ``inputs`` (first seen first) and each input's positions."""
    acc = ()           # an input's own leaf tuple until two lists must merge
    where = None
    positions = []
    for inp in inputs:
        il = inp.leaves
        if not il:
            pos = ()
        elif not acc or il is acc:
            acc = il
            pos = _iota(len(il))
        else:
            if where is None:
                acc = list(acc)
                where = {id(leaf): i for i, leaf in enumerate(acc)}
            pos = []
            for leaf in il:
                i = where.get(id(leaf))
                if i is None:
                    i = where[id(leaf)] = len(acc)
                    acc.append(leaf)
                pos.append(i)
            pos = tuple(pos)
        positions.append(pos)
    if type(acc) is tuple:
        return acc, positions
    acc = tuple(acc)
    if len(_leafsets) >= _MERGE_CAP:
        _leafsets.clear()
    return _leafsets.setdefault(acc, acc), positions


def _merge2(la: tuple, lb: tuple, inputs) -> tuple:
    """``(leaves, positions of la's, of lb's)`` for two inputs with distinct leaf tuples."""
    if len(lb) == 1 and lb[0] in la:   # an operand over one leaf the other already reads
        return la, _iota(len(la)), (la.index(lb[0]),)
    if len(la) == 1 and la[0] in lb:
        return lb, (lb.index(la[0]),), _iota(len(lb))
    key = (id(la), id(lb))
    hit = _merged.get(key)
    if hit is not None and hit[0] is la and hit[1] is lb:  # (held: the ids are not reused)
        return hit[2:]
    leaves, (pa, pb) = _merge(inputs)
    if len(_merged) >= _MERGE_CAP:
        _merged.clear()
    _merged[key] = (la, lb, leaves, pa, pb)
    return leaves, pa, pb


def make_node(prim: str, params: tuple, shape: tuple, dtype: np.dtype, inputs: tuple,
              device: Device, weak: bool = False) -> Node:
    """Create (or find the live equal) node. ``inputs`` must be on ``device``."""
    # params go into the structure as they are (tuples of ints, strings, subgraphs compare
    # by value); a constant's value by repr, so 0.0 and -0.0 stay distinct structures
    ptoken = params if prim != "const" else repr(params)
    n_in = len(inputs)
    if n_in == 2:  # the common cases, spelled out: this is every eager op's path
        a, b = inputs
        la, lb = a.leaves, b.leaves
        na, nb = len(la), len(lb)
        if la is lb or not nb:
            leaves = la
            pa = _IOTA[na] if na < _N_IOTA else _iota(na)
            pb = _IOTA[nb] if nb < _N_IOTA else _iota(nb)
        elif not na:
            leaves, pa = lb, ()
            pb = _IOTA[nb] if nb < _N_IOTA else _iota(nb)
        elif na == 1 and nb == 1:
            if la[0] is lb[0]:
                leaves, pa, pb = la, _ZERO, _ZERO
            else:
                leaves, pa, pb = (la[0], lb[0]), _ZERO, _ONE
        else:
            leaves, pa, pb = _merge2(la, lb, inputs)
        parts = (prim, ptoken, shape, dtype, weak, device, a.struct, pa, b.struct, pb)
        ident_tail = (id(a), id(b))
        count = a.count if a.count > b.count else b.count
    elif n_in == 1:
        a = inputs[0]
        leaves = a.leaves
        na = len(leaves)
        parts = (prim, ptoken, shape, dtype, weak, device, a.struct,
                 _IOTA[na] if na < _N_IOTA else _iota(na))
        ident_tail = (id(a),)
        count = a.count
    else:
        leaves, positions = _merge(inputs)
        plist = [prim, ptoken, shape, dtype, weak, device]
        count = 0
        for inp, pos in zip(inputs, positions):
            plist.append(inp.struct)
            plist.append(pos)
            if inp.count > count:
                count = inp.count
        parts = tuple(plist)
        ident_tail = tuple(map(id, inputs))
    struct = _structs.get(parts)
    if struct is None:
        struct = _struct(parts)
    ident = (id(struct), *ident_tail)
    ref = _recent.get(ident)
    node = ref() if ref is not None else None   # (None too where the node was dropped)
    if node is not None:
        return node
    node = Node.__new__(Node)
    node.prim, node.params, node.shape, node.dtype = prim, params, shape, dtype
    node.weak, node.device, node.inputs, node.struct = weak, device, inputs, struct
    # pending-graph size estimate: the longest chain plus this node's fan-in (a sum over
    # inputs would count shared subgraphs once per path: exponential in a DAG)
    count += n_in
    node.leaves, node.count = leaves, count if count < COUNT_CAP else COUNT_CAP
    node.buffer = node.sig = None
    if len(_recent) >= RECENT_CAP:
        _recent.clear()
    # weakly: sharing must not keep a dropped graph (and its buffers) alive. While the node
    # lives it holds its inputs, so the ids in ``ident`` cannot be reused by other objects
    _recent[ident] = weakref.ref(node)
    return node


make_node_py = make_node  # the reference definition (``QTRACE_NATIVE=0`` records with it)
if native.active():  # the same algorithm in C, on the same tables (see qtrace.graph.native)
    native.module().bind(Node, Leaf, _structs, _struct, _merge2, _merged, _leafsets, make_node_py,
                         tuple(_IOTA), RECENT_CAP, COUNT_CAP, _MERGE_CAP)
    make_node = native.module().make_node  # noqa: F811


def make_input(shape: tuple, dtype: np.dtype, device: Device, strides: tuple | None = None,
               buffer: object = None, weak: bool = False) -> Node:
    """A leaf: a concrete buffer (``buffer`` set) or a tracing placeholder (``buffer=None``).

    ``strides`` are in elements (C-contiguous when omitted) and part of the key, so
    kernels specialise on the memory layout of what they read.
    """
    shape = _shared_shape(tuple(shape))
    strides = c_strides(shape) if strides is None else tuple(strides)
    node = Leaf.__new__(Leaf)
    node.prim, node.params, node.shape, node.dtype = "input", (strides,), shape, dtype
    node.weak, node.device, node.inputs = weak, device, ()
    node.struct = _input_struct(strides, shape, dtype, weak, device)
    node.count, node.buffer, node.sig = 0, buffer, None
    return node


def result_leaf(node: Node, buffer) -> Node:
    """A new C-contiguous input leaf holding ``buffer``, the computed value of ``node``.

    Same as ``make_input(node.shape, node.dtype, node.device, buffer=buffer,
    weak=node.weak)``; the leaf's signature is kept on ``node``'s struct.
    """
    s = node.struct
    result = s._result
    if result is None:
        strides = c_strides(node.shape)
        result = s._result = ((strides,), _input_struct(strides, node.shape, node.dtype,
                                                        node.weak, node.device))
    leaf = Leaf.__new__(Leaf)
    leaf.prim, (leaf.params, leaf.struct) = "input", result
    leaf.shape, leaf.dtype, leaf.weak, leaf.device = node.shape, node.dtype, node.weak, node.device
    leaf.inputs, leaf.count, leaf.buffer, leaf.sig = (), 0, buffer, None
    return leaf


def leaf_like(template: Node, buffer) -> Node:
    """A new input leaf with ``template``'s signature and key, holding ``buffer``."""
    node = Leaf.__new__(Leaf)
    node.prim, node.params, node.shape, node.dtype = "input", template.params, template.shape, template.dtype
    node.weak, node.device, node.inputs, node.struct = template.weak, template.device, (), template.struct
    node.count, node.buffer, node.sig = 0, buffer, template.sig
    return node


# Leaf shapes, one tuple per value: every node over a leaf takes its shape object, and the
# compiled recorder finds node structures by the identity of their parts first — a loop
# that makes new input arrays each pass (``qt.asarray(a)``: NumPy gives a new shape tuple)
# would otherwise miss that table for every node over them.
_shapes: dict = {}
SHAPES_CAP = 1 << 12


def _shared_shape(shape: tuple) -> tuple:
    """``shape``, or the equal tuple of plain ints seen before (a shape of other integer
    types, np.int64 extents, is kept as given)."""
    if any(type(d) is not int for d in shape):
        return shape
    known = _shapes.get(shape)
    if known is not None:
        return known
    if len(_shapes) >= SHAPES_CAP:
        _shapes.clear()
    return _shapes.setdefault(shape, shape)


@functools.lru_cache(maxsize=4096)
def _input_struct(strides: tuple, shape: tuple, dtype: np.dtype, weak: bool, device: Device) -> Struct:
    return _struct(("input", strides, shape, dtype, weak, device))


@functools.lru_cache(maxsize=4096)
def c_strides(shape: tuple) -> tuple:
    """C-order strides of ``shape``, in elements."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def graph_struct(outputs: tuple) -> tuple[tuple, tuple]:
    """The in-process structure key of a multi-output graph and its ordered leaf list.

    Equal structure keys mean equal content keys (:func:`graph_key`), without hashing:
    the key is a tuple of interned structs and leaf positions.
    """
    if len(outputs) == 1:
        out = outputs[0]
        return (out.struct, len(out.leaves)), out.leaves
    leaves, positions = _merge(outputs)
    spec = []
    for out, pos in zip(outputs, positions):
        spec += (out.struct, pos)
    return tuple(spec), leaves


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


def substitute(outputs: tuple, mapping: dict, rewrite=None) -> tuple:
    """``outputs`` rebuilt with nodes replaced per ``mapping`` (``id(node) -> node``), and
    per ``rewrite(node, new inputs)`` where it returns a node instead of None."""
    new = dict(mapping)
    for n in toposort(outputs):
        if id(n) in new:
            continue
        inputs = tuple(new.get(id(i), i) for i in n.inputs)
        if rewrite is not None:
            replaced = rewrite(n, inputs)
            if replaced is not None:
                new[id(n)] = replaced
                continue
        if any(a is not b for a, b in zip(inputs, n.inputs)):
            new[id(n)] = make_node(n.prim, n.params, n.shape, n.dtype, inputs, n.device, n.weak)
    return tuple(new.get(id(o), o) for o in outputs)


def toposort(outputs, stop=frozenset()) -> list[Node]:
    """Non-leaf nodes reachable from ``outputs``, each after all of its inputs; the inputs
    of nodes whose ``id`` is in ``stop`` are not followed (a reverse pass stops at the
    values it differentiates: what computed them before does not matter)."""
    order: list[Node] = []
    seen: set[int] = set()
    for out in outputs:
        if id(out) in seen or out.is_leaf:
            continue
        stack = [(out, 0)]
        while stack:
            node, i = stack.pop()
            if i < len(node.inputs) and id(node) not in stop:
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
