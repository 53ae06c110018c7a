"""How a target wants task IR lowered: one explicit value.

Every choice that differs between targets and that the code generator makes while
emitting a kernel lives in :class:`Lowering`; the target (:mod:`qtrace.kernels.target`)
gives it, and the emitter hands it on through
:class:`~qtrace.kernels.builder.KernelBuilder`, the IR builder that carries it (scalar
helpers and the math library receive only a builder).

Example:
    >>> from qtrace.kernels import lowering
    >>> lowering.CPU.math, lowering.NVPTX.math
    ('ir', 'libdevice')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..graph.instrs import word_stacks
from ..graph.partition import REGION_BYTES


@dataclass(frozen=True)
class Lowering:
    """Target choices of the code generator.

    ``math``: ``"ir"`` (qtrace's own vectorizable IR math library, the C library inside
    scalar code) or ``"libdevice"`` (NVIDIA's libdevice, ``__nv_*`` functions, linked in).
    ``fast_trig``: float32 and float64 ``sin``/``cos``/``tan`` run an optimistic fast pass and the exact
    reduction only if an argument was large (pays where loops vectorize).
    ``lanes``: per-element loops run in blocks of this many lanes (0: one element at a
    time). ``interrupt``: long ranges poll the process's abort flag between chunks (a
    host-memory flag: CPU only). ``flat``: a task's domain is walked as one flat range
    (a GPU launches one thread per element; the CPU splits the outer axis). ``scalar``:
    the code being emitted runs one element at a time (a loop body that is not blocked),
    where C library calls beat branch-free vector code. ``split_reductions``: reductions
    with few outputs are split over threads (:mod:`qtrace.kernels.split_reduce`) in
    ``"interleaved"`` segments (a GPU: neighbouring threads read neighbouring elements) or
    ``"contiguous"`` ones (a CPU: each worker streams through its own chunk); ``""``: not.
    Under ``"contiguous"``, scans with few long rows are split in the same chunks
    (:mod:`qtrace.kernels.split_scan`; a GPU hands a few long rows to its library's
    parallel scan instead: ``qtrace.tracer.reductions._library_scan``).
    ``vector_hints``: loops whose cost model would pick too narrow a vector width carry a
    hint (a float32 reduction accumulating in float64 is vectorized at the float32 width;
    the CPU back end turns the hint into LLVM loop metadata for the host).
    ``outline_math``: transcendental functions are emitted once per module as internal
    functions the kernels call (:mod:`qtrace.kernels.outline`; the back end then adds their
    vector variants), not inline at every call site. ``interleaved_stacks``: the adstack
    rows of a launch's threads are interleaved word by word (a GPU: a warp's pushes
    coalesce; see ``qtrace.kernels.codegen``), not a block per worker. ``ldexp``: the math
    library scales by powers of two with ``llvm.ldexp`` (the host has an instruction for
    it: AVX-512's ``vscalef``, one correctly rounded operation), not with exponent-bit
    arithmetic and two multiplications (where LLVM would make ``llvm.ldexp`` a C call).
    ``stream_bytes``: a map kernel that stores at least this many bytes, every output at
    the loop's own index, with no transcendental function (memory-bound), gets a second
    entry whose vector stores are non-temporal (x86 ``movnt``: the outputs bypass the
    caches, so no line is read before it is overwritten — a third less memory traffic for
    ``y = a * x``); the kernel enters it when every output is 64-byte aligned at the start
    of its range (:func:`qtrace.kernels.codegen.streams`). 0: never.
    ``region_bytes``: a small slice assignment writes into its base in place (a region
    task, :mod:`qtrace.graph.partition`) only if the base has at least this many bytes:
    the task saves a pass over the base and costs a launch (on a GPU a launch costs as
    much as a pass over several megabytes; on a CPU small tasks share one launch).
    ``warp_combine``: a split reduction's threads combine their partials a warp (32) at a
    time in registers (shuffles, in a fixed tree order) before the levels that go through
    scratch memory: a 32nd of the partial stores, fences and atomic arrivals (NVPTX).
    ``split_registers``: a trip of an interleaved segment's loop reads as many chunks as
    fit this many 32-bit registers of loaded values
    (:func:`qtrace.kernels.split_reduce.chunks_in_flight`; a split reduction runs with at
    most 32 registers per thread, so that a whole multiprocessor of threads is resident).
    ``scalars_by_value``: the 0-d arguments a kernel only reads are passed by value too
    (:func:`by_value_args`: a jitted call's Python scalar goes in the launch's parameters,
    nothing is uploaded).
    ``sorted_loops``: a launch of a task whose per-element ``fori`` loops run different trip
    counts for different elements (:func:`qtrace.kernels.codegen.sorted_trips`) deals each
    block's tile of elements out to its threads in order of their trip counts (a GPU: a warp
    runs as long as its longest lane, so lanes with like counts share warps;
    ``qtrace.kernels.llvm_nvptx.grid_entry``).
    """

    math: str = "ir"
    fast_trig: bool = True
    lanes: int = 64
    interrupt: bool = True
    flat: bool = False
    scalar: bool = False
    split_reductions: str = ""
    vector_hints: bool = False
    outline_math: bool = False
    interleaved_stacks: bool = False
    ldexp: bool = False
    stream_bytes: int = 0
    region_bytes: int = REGION_BYTES
    split_registers: int = 16
    warp_combine: bool = False
    scalars_by_value: bool = False
    sorted_loops: bool = False

    def scalar_code(self, on: bool) -> Lowering:
        """The same lowering, emitting scalar code (``on``) or not."""
        return self if on == self.scalar else replace(self, scalar=on)


CPU = Lowering(split_reductions="contiguous", vector_hints=True, outline_math=True)
NVPTX = Lowering(math="libdevice", fast_trig=False, lanes=0, interrupt=False, flat=True,
                 split_reductions="interleaved", interleaved_stacks=True, region_bytes=8 << 20,
                 warp_combine=True, scalars_by_value=True, sorted_loops=True)

STREAM_BYTES = 1 << 24     # outputs from which a CPU kernel streams its stores (at least;
                           # the CPU target raises it to its last-level cache)
STREAM_SUFFIX = "_nt"      # the streaming entry of kernel ``k`` is ``k_nt``
THREADS = 1 << 18          # an interleaved split aims at outputs x segments threads in flight
MIN_SEGMENT = 32           # elements per interleaved segment at least
CHUNK = 1 << 16            # elements per contiguous segment at least (a worker's share)
MAX_CHUNKS = 1024          # contiguous segments per output at most
FEW_OUTPUTS = 8            # contiguous splits only for reductions with fewer outputs


def reduce_segments(task, lowering: Lowering) -> int:
    """Segments per output for ``task`` under ``lowering`` (1: not split)."""
    if not lowering.split_reductions or task.kind != "reduce" or task.stack is not None:
        return 1
    if np.dtype(task.reduce[2]).kind == "c":
        return 1
    outputs, length = math.prod(task.domain), math.prod(task.inner)
    if lowering.split_reductions == "contiguous":
        return contiguous_segments(outputs, length)
    s = 1
    while outputs * s * 2 <= THREADS and length // (s * 2) >= MIN_SEGMENT:
        s *= 2
    return s


def contiguous_segments(outputs: int, length: int) -> int:
    """Contiguous chunks per row of ``outputs`` rows of ``length`` (1: not split). The
    chunks depend on the row length only: the same result for any number of workers."""
    s = 1
    if outputs < FEW_OUTPUTS:
        while s * 2 <= MAX_CHUNKS and length // (s * 2) >= CHUNK:
            s *= 2
    return s


def scan_segments(task, lowering: Lowering) -> int:
    """Chunks per row of scan ``task`` under ``lowering`` (1: not split; see
    :mod:`qtrace.kernels.split_scan`): the CPU's contiguous chunks of reductions."""
    if lowering.split_reductions != "contiguous" or task.kind != "scan" or task.stack is not None:
        return 1
    if np.dtype(task.reduce[2]).kind == "c":
        return 1
    return contiguous_segments(math.prod(task.domain), math.prod(task.inner))


def task_segments(task, lowering: Lowering) -> int:
    """Segments per row of a reduction or scan task (1: not split)."""
    return scan_segments(task, lowering) if task.kind == "scan" else reduce_segments(task, lowering)


def split_phases(task, s: int) -> int:
    """Ordered launches of a split task over its index space: a split scan runs its chunk
    totals, then its chunks from their offsets (2); everything else in one (1)."""
    return 2 if task.kind == "scan" and s > 1 else 1


GROUP = 32                 # partials combined by one thread at each level of a split
COUNTERS = 4096            # leading scratch bytes of a split reduction kept for arrival counters


@dataclass(frozen=True)
class SplitLevel:
    """One level of a split reduction's combine tree: ``count`` partials per output, in
    groups of ``group``; byte offsets of its counters, values and indices in scratch."""

    count: int
    group: int
    counters: int
    values: int
    indices: int


@dataclass(frozen=True)
class SplitLayout:
    """A split reduction's scratch: its ``levels``, ``nbytes`` in all, and ``zeroed``: the
    leading bytes that must be zero at launch — the arrival counters of every level, padded
    to at least :data:`COUNTERS` — which the kernel leaves zero again (the last arriver of a
    group resets its counter), and below which it writes nothing else. So a block of
    scratch zeroed once serves any number of split reductions, one after another, without
    being zeroed again unless one needs more counters than the block was zeroed for."""

    levels: tuple
    nbytes: int
    zeroed: int = 0


def warp_combined(s: int, lowering: Lowering) -> bool:
    """Whether a reduction split in ``s`` segments combines its partials a warp at a time
    first (``lowering.warp_combine``, and a warp's 32 threads hold 32 segments of one row)."""
    return lowering.warp_combine and s >= GROUP


def split_layout(outputs: int, s: int, is_arg: bool, warp: bool = False) -> SplitLayout:
    """The scratch layout of a reduction of ``outputs`` rows split in ``s`` segments
    (``warp``: their partials combined a warp at a time first: ``s // GROUP`` per row; with
    one left, no level at all): the counters of every level first, then each level's
    values (and indices of an arg reduction) from ``zeroed`` on."""
    count = s // GROUP if warp else s
    if count == 1:   # (a warp holds the whole row: its lane 0 stores the result)
        return SplitLayout((), 0)
    counts = [count]
    while counts[-1] > GROUP:
        counts.append(counts[-1] // GROUP)
    counters, offset = [], 0
    for c in counts:
        counters.append(offset)
        offset += 4 * outputs * (c // min(GROUP, c))
    zeroed = max((offset + 7) // 8 * 8, COUNTERS)
    levels, offset = [], zeroed
    for c, at in zip(counts, counters):
        values = offset
        offset += 8 * outputs * c
        indices = offset
        offset += 8 * outputs * c if is_arg else 0
        levels.append(SplitLevel(c, min(GROUP, c), at, values, indices))
    return SplitLayout(tuple(levels), offset, zeroed)


def split_scratch(task, s: int, lowering: Lowering) -> tuple[int, int]:
    """``(bytes, zeroed)`` of the scratch a split reduction or scan needs under ``lowering``
    (``(0, 0)`` when not split): its size, and how many leading bytes must be zero at
    launch (a reduction: :attr:`SplitLayout.zeroed`; a scan: all of it)."""
    if s <= 1:
        return 0, 0
    if task.kind == "scan":   # one 8-byte total per piece of a chunk
        from .split_scan import PIECES
        n = 8 * math.prod(task.domain) * s * PIECES
        return n, n
    layout = split_layout(math.prod(task.domain), s, task.reduce[0] in ("argmax", "argmin"),
                          warp_combined(s, lowering))
    return layout.nbytes, layout.zeroed


def interleaves_stacks(task, lowering: Lowering) -> bool:
    """Whether ``task``'s adstacks are interleaved across a launch's threads under
    ``lowering`` (its ``interleaved_stacks``, and every pushed value one word:
    :func:`qtrace.graph.instrs.word_stacks`); the kernel and the runtime laying out its
    stack block both ask this."""
    return lowering.interleaved_stacks and word_stacks(task.instrs)


def by_value_args(task, lowering: Lowering) -> tuple:
    """The arguments of ``task`` whose value a launch may pass instead of their address,
    under ``lowering`` (its ``scalars_by_value``): every 0-d one the task only reads, of a
    bool, integer or float dtype, as ``(argument index, bytes)``. Such a kernel takes one
    8-byte parameter per such argument after its pointers: a launch passes a null pointer
    and the value's bytes (a host scalar, not uploaded), or the device address and 0."""
    if not lowering.scalars_by_value:
        return ()
    return tuple((i, n.dtype.itemsize) for i, n in enumerate(task.arg_nodes)
                 if n.shape == () and i not in task.writes and n.dtype.kind in "biuf")
