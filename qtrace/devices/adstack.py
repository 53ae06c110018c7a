"""Adstack sizing and allocation for reverse-mode loops, on the host, at launch.

The depth a loop's reverse needs is the largest per-element trip count. Three paths,
each counted in ``qt.stats()``:

1. the count depends only on shapes and scalars (a constant, or a 0-d value): read on
   the host, no reduction (``adstack_host_sized``);
2. it depends on tensor data: a max-reduction over the counts
   (``adstack_device_sized``, ``max_reducer_dispatches``), whose result is cached
   against the identity and version of every input buffer the counts were computed
   from — repeated launches on unchanged data dispatch no reducer;
3. ``while_loop``: the forward pass records each element's trip count; the reverse is
   sized from those counts (path 2 without caching, since they are fresh each run).

Stacks belong to workers, not elements: ``workers x depth x entry bytes``, floats and
integers in separate stacks. Loops nested in a differentiated loop's body push above its
rows: a second level sized by the largest nested trip count, which the forward loop
records as it runs (path 2 again, uncached). ``qt.config.adstack_max_depth`` caps the depth (a debug
setting that provokes the overflow diagnostic).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ..config import config
from ..graph import buffers
from ..graph.loops import depth_source
from ..graph.node import Node, toposort
from ..stats import bump
from . import cpu

HEADER = 64
_cache: dict = {}
_lock = threading.Lock()


class DepthSource:
    """How one adstack's depth is found at launch (built once per plan)."""

    def __init__(self, depth: Node, slot_of: dict, leaf_slots: dict):
        base = depth_source(depth)
        self.const = None
        self.slot = slot_of.get(id(base))
        self.scalar = base.size == 1
        if base.prim == "const":
            self.const = max(int(base.params[0]), 0)
        nodes = toposort((base,))
        self.cacheable = not any(n.prim in ("loop", "loop_vjp") for n in nodes)
        self.leaf_slots = sorted({leaf_slots[id(leaf)] for leaf in base.leaves if id(leaf) in leaf_slots})
        self.key = base.key

    def depth(self, bufs: list) -> int:
        if self.const is not None:
            bump("adstack_host_sized")
            return self.const
        buf = bufs[self.slot]
        if self.scalar:
            bump("adstack_host_sized")
            return max(int(np.asarray(buf).reshape(-1)[0]) if buf.size else 0, 0)
        bump("adstack_device_sized")
        if self.cacheable:
            key = (self.key, tuple(buffers.identity(bufs[s]) for s in self.leaf_slots))
            with _lock:
                hit = _cache.get(key)
            if hit is not None and all(bufs[s] is ref() for s, ref in zip(self.leaf_slots, hit[1])):
                return hit[0]
        bump("max_reducer_dispatches")
        d = max(int(buf.max()), 0) if buf.size else 0
        if self.cacheable:
            refs = tuple(weakref.ref(bufs[s]) for s in self.leaf_slots)
            with _lock:
                if len(_cache) > 1024:
                    _cache.clear()
                _cache[key] = (d, refs)
        return d


def scratch(workers: int, levels: list):
    """Per-worker stack blocks; returns (array, stride).

    ``levels``: ``(depth, float row bytes, int row bytes)`` per level — the loop's own
    rows, then (for loops nested in its body) the rows above them. A block is a header
    ``[level-0 depth, float bytes, int bytes]`` (64 bytes), the float stack, the int stack.
    """
    caps = [d if config.adstack_max_depth is None else min(d, int(config.adstack_max_depth))
            for d, _, _ in levels]
    fbytes = sum(c * fb for c, (_, fb, _) in zip(caps, levels))
    ibytes = sum(c * ib for c, (_, _, ib) in zip(caps, levels))
    stride = HEADER + (fbytes + 63) // 64 * 64 + (ibytes + 63) // 64 * 64
    block = cpu.aligned_empty((workers * stride,), np.dtype(np.uint8))
    header = block.reshape(workers, stride)[:, :24].view(np.int64)
    header[:] = (caps[0], fbytes, ibytes)
    bump("adstack_bytes", workers * (fbytes + ibytes))
    return block, stride
