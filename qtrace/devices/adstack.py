"""Adstack sizing and allocation for reverse-mode loops, on the host, at launch.

The depth a loop's reverse needs is the largest per-element trip count. Three paths,
each counted in ``qt.stats()``:

1. the count depends only on shapes and scalars (a constant, or a 0-d value), or is an
   integer expression (``+ - *``, negation, ``maximum``/``minimum``, ``where``, converts,
   views) of inputs that are all small (at most ``SMALL_LEAF`` elements: a weak Python
   scalar of a jitted call): read on the host, no reduction (``adstack_host_sized``);
2. it depends on tensor data. Counts that are such an expression of the plan's inputs
   (``n``, ``n + k``, ``where(mask, K, 0)``, ``hi - lo``) are never computed by a task:
   their maximum is bounded on the host (``qtrace.graph.loops.bound``: interval
   arithmetic, an upper bound, e.g. ``max(hi - lo) <= max(hi) - min(lo)``) from the
   largest and smallest elements of the inputs, each reduced once and cached against the
   identity and version of its buffer (``qtrace.graph.buffers``). Other counts (computed
   by a task from the data) are reduced after that task, cached against the versions of
   every input they come from. A launch whose sizing found everything in the cache counts
   ``adstack_reducer_hits``; one that reduced anything, ``adstack_reducer_dispatches``
   (once per launch and level, however many inputs it reduced). Borrowed host memory and
   buffers exported for writing are volatile (``buffers.identity`` is None): never
   cached, reduced on every launch that reads them;
3. ``while_loop``: the forward pass records each element's trip count; the reverse is
   sized from those counts (``adstack_recorded``: a reduction, never cached, since the
   counts are fresh each run).

``adstack_device_sized`` (paths 2 and 3) and ``max_reducer_dispatches`` (reductions
run: misses of path 2 and path 3) are the older, coarser counters, kept for the
benchmarks and ``python -m qtrace``.

Stacks belong to workers, not elements: ``workers x depth x entry bytes``, floats and
integers in separate stacks, carved from memory kept per calling thread and grown by
doubling — on the CPU (:class:`Scratch`), and on a GPU per thread and stream, where the
workers are the at most 65,536 threads of a launch and the headers are written by the
device (nothing is uploaded). A GPU's interleaved float stacks are a heap instead: a
thread claims a row when its first element loops, and the heap has a row per element
that loops, at most one per thread (:func:`heap_rows`; counted with the depth where the
counts, or an elementwise expression of them, are reduced: :func:`_count_active`), so
memory follows the active elements. On a GPU, leaves that came from the host (Python scalars,
loop bounds, NumPy arguments) are read where they came from, never copied back.
``QTRACE_DEBUG_ADSTACK=1`` prints, per launch of a loop task, each level's sizing path
and depth and the bytes bound. Loops nested in a differentiated loop's body push above
its rows: one level per depth of nesting, each sized by the largest trip count at that
depth, which the forward loop records as it runs (path 3 again).
``qt.config.adstack_max_depth`` caps the depth (a debug setting that provokes the
overflow diagnostic).
"""

from __future__ import annotations

import operator
import sys
import threading
import weakref

import numpy as np

from ..config import config
from ..graph import buffers
from ..graph.instrs import STACK_HEADER as HEADER
from ..graph.loops import bound, depth_source, host_bound
from ..graph.node import Node, make_input, make_node, toposort
from ..stats import bump, bump_many
from . import cpu

SMALL_LEAF = 8      # leaves of at most this many elements are keyed by their values
_cache: dict = {}
_lock = threading.Lock()

_HOST = (("adstack_host_sized", 1),)
_HIT = (("adstack_reducer_hits", 1), ("adstack_device_sized", 1))
_DISPATCH = (("adstack_reducer_dispatches", 1), ("adstack_device_sized", 1),
             ("max_reducer_dispatches", 1))
_RECORDED = (("adstack_recorded", 1), ("adstack_device_sized", 1), ("max_reducer_dispatches", 1))
PATHS = {"host": _HOST, "hit": _HIT, "dispatch": _DISPATCH, "recorded": _RECORDED}
_SAID = {"host": "host", "hit": "reducer hit", "dispatch": "reducer dispatched",
         "recorded": "recorded counts"}


class Stack:
    """The adstack of one loop task: a :class:`DepthSource` and the float and int row bytes
    of each level, and the task's name for ``QTRACE_DEBUG_ADSTACK``."""

    def __init__(self, levels: list, label: str, interleaved: bool = False):
        self.sources = levels   # (DepthSource, float row bytes, int row bytes) per level
        self.label = label
        self.interleaved = interleaved   # on a GPU, the threads' stacks word by word

    def levels(self, bufs: list, host: list | None = None) -> Levels:
        """This launch's levels, sized (each sizing counted in ``qt.stats()``). ``host``:
        the host arrays the plan's leading (leaf) slots were uploaded from, when the plan
        runs on a device (``None`` per slot that was device memory already)."""
        out = Levels()
        out.interleaved = self.interleaved
        paths = []
        for level, (source, fb, ib) in enumerate(self.sources):
            d, path, active = source.depth(bufs, host, count=self.interleaved and level == 0)
            bump_many(PATHS[path])
            out.append((d, fb, ib))
            paths.append(path)
            if level == 0:
                out.active = active
        if config.debug_adstack:
            out.report = (self.label, paths)
        return out


class Levels(list):
    """``(depth, float row bytes, int row bytes)`` per level of one launch, ``interleaved``
    (a GPU interleaves the threads' stacks: :func:`qtrace.graph.instrs.word_stacks`),
    ``active``: ``(elements whose loop runs, elements counted)`` where the outermost loop's
    counts were reduced (None otherwise: see :func:`heap_rows`), and (under
    ``QTRACE_DEBUG_ADSTACK``) ``report``: the task's name and each level's sizing path."""

    __slots__ = ("report", "interleaved", "active")

    def __init__(self):
        super().__init__()
        self.report = None
        self.interleaved = False
        self.active = None


def _say(levels: list, caps: list, workers: int, nbytes: int, rows: int) -> None:
    """The ``QTRACE_DEBUG_ADSTACK`` line of one launch (stderr)."""
    label, paths = levels.report
    sized = ", ".join(f"level {i} depth {d} ({_SAID[p]})" + (f" capped at {c}" if c != d else "")
                      for i, ((d, _, _), c, p) in enumerate(zip(levels, caps, paths)))
    heap = f" ({rows} float heap rows for {levels.active[0]} looping elements)" if rows else ""
    print(f"[qtrace adstack] {label}: {sized}; {workers} stacks{heap}, bound {nbytes} bytes",
          file=sys.stderr, flush=True)


def _detached(root: Node) -> dict:
    """``{id(node): copy}`` for every node of ``root``'s graph, rebuilt over placeholder
    leaves that hold no buffer: what a cached plan keeps of a trip-count expression (the
    graph's own leaves would keep the buffers of the first call alive)."""
    copies: dict = {}

    def copy(n: Node) -> Node:
        c = copies.get(id(n))
        if c is None:   # (toposort lists no leaf: they are made here, when first read)
            c = copies[id(n)] = make_input(n.shape, n.dtype, n.device, strides=n.params[0],
                                           weak=n.weak)
        return c
    for n in toposort((root,)):
        copies[id(n)] = make_node(n.prim, n.params, n.shape, n.dtype,
                                  tuple(copy(i) for i in n.inputs), n.device, n.weak)
    if root.is_leaf:
        copy(root)
    return copies


class DepthSource:
    """How one adstack's depth is found at launch (built once per plan; it keeps no node
    of the plan's graph)."""

    def __init__(self, depth: Node, slot_of: dict, leaf_slots: dict):
        base = depth_source(depth)
        self.const = self.bounded = None
        self.slot = slot_of.get(id(base))
        self.scalar = base.size == 1
        copies: dict = {}
        if base.prim == "const":
            self.const = max(int(base.params[0]), 0)
        elif host_bound(base):  # bounded from its leaves' extremes, not computed by a task
            copies = _detached(base)
            self.bounded = copies[id(base)]
        nodes = toposort((base,))
        self.recorded = any(n.prim in ("loop", "loop_vjp") for n in nodes)
        # counts computed by a task: a function of the leaves' data only (not recorded by a
        # loop), every leaf a buffer of the plan: the key below then determines them
        self.cacheable = all(id(leaf) in leaf_slots for leaf in base.leaves)
        # in the order of base.leaves: the positions base.key describes them by
        self.leaf_slots = tuple(leaf_slots[id(leaf)] for leaf in base.leaves if id(leaf) in leaf_slots)
        self.slot_of_leaf = {id(copies.get(id(leaf), leaf)): leaf_slots[id(leaf)]
                             for leaf in base.leaves if id(leaf) in leaf_slots}
        self.key = base.key
        # found before the plan runs, from its leaves alone (what a CUDA graph's capture and
        # replays need: nothing computed by the plan is read back)
        self.from_leaves = (self.const is not None or self.bounded is not None or (
            not self.recorded and self.slot is not None and self.slot in leaf_slots.values()))

    def depth(self, bufs: list, host: list | None = None, count: bool = False) -> tuple:
        """``(depth, path, active)`` for this launch: read on the host (``"host"``), found in
        the cache (``"hit"``), reduced now (``"dispatch"``; device buffers are reduced on the
        device and 16 bytes read back), or reduced from counts a forward loop recorded
        (``"recorded"``). ``active``: ``(counts above 0, counts)`` where ``count`` asks for it
        and a buffer of counts was reduced (or its reduction cached), else None. Counted in
        ``qt.stats()`` (``PATHS``). Leaves that came from the host (``host``: Python scalars
        and NumPy arguments of a device plan) are read there: sizing from them never copies
        from the device."""
        def read(slot: int):
            if host is not None and slot < len(host) and host[slot] is not None:
                return host[slot]
            buf = bufs[slot]
            if not isinstance(buf, np.ndarray) and buf.size <= SMALL_LEAF:
                kept = buffers.host_value(buf)
                if kept is not None:
                    return kept
            return buf
        if self.const is not None:
            return self.const, "host", None
        if self.bounded is not None:
            paths: set = set()

            def extreme(leaf: Node, upper: bool) -> int:
                return _extreme(read(self.slot_of_leaf[id(leaf)]), upper, paths)
            d = max(bound(self.bounded, extreme), 0)
            active = None
            if count and d > 0:
                def leaf_value(leaf: Node):
                    return read(self.slot_of_leaf[id(leaf)])
                key, by_identity = self._key(bufs) if self.cacheable else (None, ())
                active, path = _cached(None if key is None else ("active", key),
                                       tuple(bufs[s] for s in by_identity),
                                       lambda: _count_active(self.bounded, leaf_value))
                paths.add(path)
            return d, "dispatch" if "dispatch" in paths else "hit" if "hit" in paths else "host", active
        buf = read(self.slot)
        if self.scalar:
            return (max(int(_scalar(buf)) if buf.size else 0, 0)), "host", None
        if self.recorded:
            d, active = _max_active(buf, count)
            return d, "recorded", active
        key, by_identity = self._key(bufs) if self.cacheable else (None, ())
        if key is not None:
            key = (key, count)
        (d, active), path = _cached(key, tuple(bufs[s] for s in by_identity),
                                    lambda: _max_active(buf, count))
        return d, path, active

    def _key(self, bufs: list) -> tuple:
        """``(cache key, slots keyed by identity)`` of this launch's leaves, or ``(None, ())``
        when one of them is volatile. Small leaves are keyed by value (exact, and a fresh
        buffer of the same value hits); others by identity and version, which a hit checks
        against a weak reference to the buffer (a recycled ``id`` must not hit)."""
        parts, by_identity = [self.key], []
        for s in self.leaf_slots:
            leaf = bufs[s]
            if leaf.size <= SMALL_LEAF and not isinstance(leaf, np.ndarray):
                kept = buffers.host_value(leaf)   # a small upload: keyed by its value too
                leaf = leaf if kept is None else kept
            if leaf.size <= SMALL_LEAF and isinstance(leaf, np.ndarray):
                parts.append((leaf.dtype.str, leaf.shape, leaf.tobytes()))
                continue
            ident = buffers.identity(leaf)
            if ident is None:
                return None, ()
            parts.append(ident)
            by_identity.append(s)
        return tuple(parts), by_identity


def _cached(key, held: tuple, reduce) -> tuple:
    """``(value, "hit")`` from the cache entry ``key`` made while the buffers ``held`` were
    these very objects, else ``(reduce(), "dispatch")``, remembered under ``key`` (not
    None: volatile data)."""
    if key is not None:
        with _lock:
            hit = _cache.get(key)
        if hit is not None and len(hit[1]) == len(held) and all(
                ref() is buf for ref, buf in zip(hit[1], held)):
            return hit[0], "hit"
    value = reduce()
    if key is not None:
        refs = tuple(weakref.ref(buf) for buf in held)
        with _lock:
            if len(_cache) > 1024:
                _cache.clear()
            _cache[key] = (value, refs)
    return value, "dispatch"


def _extreme(buf, upper: bool, paths: set) -> int:
    """The largest (``upper``) or smallest element of a trip-count leaf, adding how it was
    found to ``paths``: small host buffers (a weak Python scalar of a jitted call) are
    read, others reduced once per data version (``qtrace.graph.buffers``; volatile and
    device memory on every launch)."""
    if buf.size == 0:   # the loop has no elements (it broadcasts against this leaf)
        paths.add("host")
        return 0
    if buf.size <= SMALL_LEAF and isinstance(buf, np.ndarray):
        paths.add("host")   # a Python scalar's buffer: its value read, as a scalar count is
        return int(buf.max() if upper else buf.min())
    ident = buffers.identity(buf)
    key = None if ident is None else ("extreme", ident, upper)
    value, path = _cached(key, (buf,), lambda: _scalar(buf.max() if upper else buf.min()))
    paths.add(path)
    return value


def _scalar(value) -> int:
    """A one-element array as a Python int (a device value is read back: 8 bytes, a wait)."""
    if not isinstance(value, (np.ndarray, np.generic)):
        bump_many((("bytes_device_to_host", value.nbytes), ("device_syncs", 1)))
    return int(value.reshape(-1)[0]) if value.ndim else int(value)


def _max_active(buf, count: bool) -> tuple:
    """The reducer: ``(the largest count (at least 0), active)``; ``active``: ``(how many
    counts are positive, how many there are)`` where ``count`` asks for it (a GPU's
    interleaved stacks), read back with the largest (16 bytes, one wait), else None."""
    if not buf.size:
        return 0, (0, 0) if count else None
    if not count:
        return max(_scalar(buf.max()), 0), None
    if isinstance(buf, np.ndarray):
        return max(int(buf.max()), 0), (int(np.count_nonzero(buf > 0)), buf.size)
    import cupy
    both = cupy.stack([buf.max().astype(np.int64), cupy.count_nonzero(buf > 0).astype(np.int64)])
    bump_many((("bytes_device_to_host", both.nbytes), ("device_syncs", 1)))
    both = both.get()
    return max(int(both[0]), 0), (int(both[1]), buf.size)


_COUNTED = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
            "equal": operator.eq, "not_equal": operator.ne, "less": operator.lt,
            "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge,
            "logical_and": operator.and_, "logical_or": operator.or_}


def _count_active(root: Node, leaf_value) -> tuple | None:
    """``(elements of trip-count expression root above 0, elements)``, evaluated element by
    element where every input is a whole buffer of the result's shape or a single number
    and every operation elementwise (``n``, ``hi - lo``, ``maximum(n - k, 0)``,
    ``where(mask, n, 0)``, comparisons): CuPy's kernels on a GPU buffer, 8 bytes read back.
    None otherwise (a slice, a transpose, a float function in a condition, an operation
    NumPy refuses on these dtypes: unknown, so a heap row per thread)."""
    memo: dict = {}

    def ev(n: Node):
        got = memo.get(id(n), memo)
        if got is not memo:
            return got
        p, ins = n.prim, n.inputs
        if p == "input":
            v = leaf_value(n)
            v = (int(v.reshape(-1)[0]) if v.size == 1 and isinstance(v, np.ndarray)
                 else v if v.shape == root.shape else None)
        elif p == "const":
            v = int(n.params[0])
        elif p in ("broadcast", "reshape", "positive", "convert"):
            v = ev(ins[0])
            if (p in ("broadcast", "reshape") and ins[0].size != 1 and ins[0].shape != n.shape) or (
                    p == "convert" and n.dtype.itemsize < ins[0].dtype.itemsize):
                v = None   # (a change of layout, or a narrowing that may wrap)
            elif p in ("broadcast", "reshape") and ins[0].size == 1 and not isinstance(v, int):
                v = None
        elif p == "negative":
            v = ev(ins[0])
            v = None if v is None else -v
        elif p == "select":
            c, a, b = (ev(i) for i in ins)
            v = None if c is None or a is None or b is None else _array_module(c, a, b).where(c, a, b)
        elif p in _COUNTED or p in ("maximum", "minimum"):
            a, b = ev(ins[0]), ev(ins[1])
            if a is None or b is None:
                v = None
            elif p in _COUNTED:
                v = _COUNTED[p](a, b)
            else:
                xp = _array_module(a, b)
                v = (xp.maximum if p == "maximum" else xp.minimum)(a, b)
        else:
            v = None
        memo[id(n)] = v
        return v
    try:
        v = ev(root)
    except (TypeError, OverflowError, ValueError):   # (NumPy's refusals — a negated bool, a
        return None                                  # constant out of the dtype's range: unknown)
    if v is None or isinstance(v, int) or v.shape != root.shape:
        return None
    active = _array_module(v).count_nonzero(v > 0)
    if not isinstance(v, np.ndarray):
        bump_many((("bytes_device_to_host", 8), ("device_syncs", 1)))
    return int(active), v.size


def _array_module(*values):
    """NumPy, or CuPy where one of ``values`` is a CuPy array."""
    for v in values:
        if not isinstance(v, (int, np.ndarray)):
            import cupy
            return cupy
    return np


def heap_rows(levels, threads: int, extent: int) -> int:
    """Float heap rows for a launch of ``threads`` threads over ``extent`` elements (see
    ``qtrace.kernels.codegen``'s ``_stack_words``): the elements whose outermost loop runs,
    at least 1 and fewer than ``threads``, where the launch's counts were reduced, one per
    element (``levels.active``); else 0, a row per thread — also where as many elements
    loop as there are threads: the heap would hold a row per thread anyway, and rows
    claimed by the lanes that loop need not start at a 32-byte sector (B3's adjoint kernel,
    every element looping, read 25% more L2 bytes with claimed rows: 4.42 vs 4.08 ms)."""
    active = getattr(levels, "active", None)
    if not levels.interleaved or active is None or active[1] != extent or active[0] >= threads:
        return 0
    return max(1, active[0])


class Scratch(threading.local):
    """Adstack memory kept between launches, one block per thread (launches from several
    Python threads run at once; a thread's launches run one after another, and its
    workers share the block at distinct offsets). A launch needing more than the block
    holds replaces it with one of at least twice its size, so a run of launches
    allocates O(log(largest / first)) times (``adstack_scratch_allocs``,
    ``adstack_scratch_bytes``); the block lives as long as its thread."""

    def __init__(self):
        self.block = None

    def take(self, nbytes: int) -> np.ndarray:
        """At least ``nbytes`` of 64-byte aligned, uninitialised memory."""
        block = self.block
        if block is None or block.nbytes < nbytes:
            size = max(nbytes, 2 * block.nbytes if block is not None else 0)
            self.block = block = None   # the old block can go before the new one is taken
            self.block = block = cpu.aligned_empty((size,), np.dtype(np.uint8))
            bump_many((("adstack_scratch_allocs", 1), ("adstack_scratch_bytes", size)))
        return block


def layout(workers: int, levels: list, rows: int = 0) -> tuple:
    """``(header, stride, total)`` of ``workers`` stack blocks for ``levels``: ``(depth,
    float row bytes, int row bytes)`` per level — the loop's own rows, then (for loops
    nested in its body) the rows above them. A block is a header ``[level-0 depth, float
    bytes, int bytes, heap rows, 0, 0]`` (64 bytes), the float stack, the int stack;
    ``stride`` bytes apart, ``total`` bytes in all. ``rows``: interleaved stacks whose float
    stacks are a heap of that many rows (:func:`heap_rows`; 0: one per worker): ``total``
    is then the headers, the heap and the int stacks. Counts ``adstack_bytes`` (and says so
    under ``QTRACE_DEBUG_ADSTACK``)."""
    caps = [d if config.adstack_max_depth is None else min(d, int(config.adstack_max_depth))
            for d, _, _ in levels]
    fbytes = sum(c * fb for c, (_, fb, _) in zip(caps, levels))
    ibytes = sum(c * ib for c, (_, _, ib) in zip(caps, levels))
    fround, iround = (fbytes + 63) // 64 * 64, (ibytes + 63) // 64 * 64
    stride = HEADER + fround + iround
    total = workers * stride if not rows else workers * (HEADER + iround) + rows * fround
    nbytes = (rows or workers) * fbytes + workers * ibytes
    bump("adstack_bytes", nbytes)
    if getattr(levels, "report", None) is not None:
        _say(levels, caps, workers, nbytes, rows)
    return (caps[0], fbytes, ibytes, rows, 0, 0), stride, total


def scratch(workers: int, levels: list, keep: Scratch | None = None):
    """Per-worker host stack blocks (see :func:`layout`); returns (array, stride).

    ``keep``: memory kept between launches (the array is then a prefix of its block);
    without it, a fresh array.
    """
    header, stride, _ = layout(workers, levels)
    if keep is not None:
        block = keep.take(workers * stride)[:workers * stride]
    else:
        block = cpu.aligned_empty((workers * stride,), np.dtype(np.uint8))
    block.reshape(workers, stride)[:, :8 * len(header)].view(np.int64)[:] = header
    return block, stride
