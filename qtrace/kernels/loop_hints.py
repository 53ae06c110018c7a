"""Vectorization hints on loops, emitted target-neutrally and resolved by the CPU back end.

LLVM's loop vectorizer picks a loop's vector width from its widest type. A float32
reduction accumulating in float64 (qtrace's sums and products of float32 data) thus gets
half the float32 width: its float32 arithmetic, usually the expensive part, runs at half
speed. The code generator marks such loops with a placeholder ``llvm.loop`` node
(:func:`vector_hint`); :func:`resolve` turns each into a distinct loop ID carrying
``llvm.loop.vectorize.width`` of the host's float32 lanes (16 with AVX-512) before the
module is parsed. Measured: the fused sum of the B1 chain, one thread, 3.0-3.9 -> 2.3 ms per
1e6 elements (the float64 partial sums are then two vectors each).

Loops whose properties are known when they are emitted (a width, an interleave count)
take :func:`loop_properties`, a placeholder :func:`resolve` turns into a distinct loop
ID with those properties.

LLVM leaves the elements after a vectorized loop's last whole block (up to vector width x
interleave - 1) to a scalar copy of the loop. The CPU back end turns off vectorizing that
remainder ("epilogue vectorization": a third copy of every loop body, ~15% of a kernel's
compile time), which costs nothing where a loop runs once per launch; but the innermost
loop of a nest runs once per row, and a row of 100 float64 ``tanh`` then spent a third of
its time on the 4 scalar elements after its three blocks of 32. A kernel computing a
transcendental function whose rows leave such a remainder marks its module
(:func:`vector_epilogues`) and the back end compiles that module with epilogues vectorized
(cheap arithmetic's scalar remainder costs little: those modules keep the shorter compile).
Measured, one thread, ``tanh(h + b)`` on [3000, 100] float64: 338 -> 254 us (the same count
of elements in one row: 232).
"""

from __future__ import annotations

import itertools
import re
import weakref

import numpy as np
from llvmlite import ir

HINT = "qtrace.vectorize.float32"
_counts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # module -> its loop numbers
_PLACEHOLDER = re.compile(r'^(!\d+) = !\{\s*!"' + re.escape(HINT) + r'", i32 \d+\s*\}$', re.M)
PROPERTIES = "qtrace.loop"
_PROPERTIES = re.compile(
    r'^(!\d+) = !\{\s*!"' + re.escape(PROPERTIES) + r'", i32 \d+((?:, !"[\w.]+", i32 \d+)*)\s*\}$', re.M)
_PROPERTY = re.compile(r'!"([\w.]+)", i32 (\d+)')
ROW_BLOCK = 64      # elements: rows of a multiple of this leave no remainder to any vector loop
_epilogues: weakref.WeakSet = weakref.WeakSet()   # modules whose rows leave remainders


def vector_hint(module: ir.Module):
    """A placeholder for a loop's ``llvm.loop`` metadata: vectorize at the float32 width
    (unique per loop, as loop IDs must be)."""
    number = ir.Constant(ir.IntType(32), _number(module))
    return module.add_metadata([ir.MetaDataString(module, HINT), number])


def _number(module: ir.Module) -> int:
    """A new number for a loop of ``module``: loops are numbered per module, so that a
    module's text depends only on what it holds (kernels of equal text are shared:
    :mod:`qtrace.devices.kernel_bodies`)."""
    count = _counts.get(module)
    if count is None:
        count = _counts[module] = itertools.count()
    return next(count)


def loop_properties(module: ir.Module, properties: dict):
    """A placeholder for a loop's ``llvm.loop`` metadata with ``properties`` (LLVM loop
    property names, e.g. ``llvm.loop.vectorize.width``, to integers; unique per loop)."""
    i32 = ir.IntType(32)
    items = [ir.MetaDataString(module, PROPERTIES), ir.Constant(i32, _number(module))]
    for name, value in sorted(properties.items()):
        items += [ir.MetaDataString(module, name), ir.Constant(i32, value)]
    return module.add_metadata(items)


def vector_epilogues(module: ir.Module, row: int) -> None:
    """Note that a kernel of ``module`` walks rows of ``row`` elements in an innermost loop
    inside an outer one: unless ``row`` is a multiple of :data:`ROW_BLOCK`, the module is
    compiled with vectorized loop remainders (module doc)."""
    if row % ROW_BLOCK:
        _epilogues.add(module)


def wants_epilogues(module: ir.Module) -> bool:
    """Whether ``module`` asked for vectorized loop remainders (:func:`vector_epilogues`)."""
    return module in _epilogues


def narrow_accumulation(task) -> bool:
    """Whether ``task`` (a reduction) sums or multiplies float32 values in a float64
    accumulator."""
    prim, ssa, acc = task.reduce
    return (prim in ("reduce_sum", "reduce_prod") and np.dtype(acc) == np.float64
            and np.dtype(task.instrs[ssa].dt) == np.float32)


def resolve(text: str, float32_lanes: int) -> str:
    """Module text with every placeholder made a distinct, self-referencing loop ID: a
    :func:`vector_hint` asks for ``float32_lanes``-wide vectors, a :func:`loop_properties`
    for its properties."""
    if HINT not in text and PROPERTIES not in text:
        return text
    ids = [int(m) for m in re.findall(r"^!(\d+) = ", text, re.M)]
    nodes: dict = {}   # (property, value) -> its metadata node, shared by the loops

    def node(name: str, value: int) -> str:
        if (name, value) not in nodes:
            nodes[name, value] = f"!{max(ids, default=0) + 1 + len(nodes)}"
        return nodes[name, value]

    def hinted(m):
        width = node("llvm.loop.vectorize.width", float32_lanes)
        return f"{m.group(1)} = distinct !{{{m.group(1)}, {width}}}"

    def listed(m):
        props = [node(name, int(value)) for name, value in _PROPERTY.findall(m.group(2))]
        return f"{m.group(1)} = distinct !{{{', '.join([m.group(1), *props])}}}"
    text = _PROPERTIES.sub(listed, _PLACEHOLDER.sub(hinted, text))
    defined = "".join(f'\n{ref} = !{{!"{name}", i32 {value}}}' for (name, value), ref in nodes.items())
    return text + defined + "\n"
