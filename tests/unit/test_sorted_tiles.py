"""GPU kernels of per-element loops sort their elements by trip count (``sorted_loops``):
which tasks do, the PTX of their entry (runs wherever LLVM has its NVPTX back end), and the
trip count classes (run on the host). Their values on a GPU: ``tests/gpu/test_cuda.py``."""

from __future__ import annotations

import ctypes
import dataclasses
import re

import llvmlite.binding as llvm
import numpy as np
import ptx_probe  # (tests/unit: pytest puts the folder on sys.path)
import pytest
from llvmlite import ir

import qtrace as qt
from qtrace.graph.plan import build_plan
from qtrace.kernels import codegen, llvm_nvptx, lowering


def _step(v, c):
    """A loop body without transcendental math (its PTX needs no libdevice)."""
    return v * v * c * 0.25 + 0.5 * v


def _programs(rng, n=300):
    """``{name: (output tensor, sorted?)}``: loops whose counts differ per element (sorted)
    and loops that every element runs alike or whose counts are not known ahead (not)."""
    x = qt.asarray(rng.uniform(-1, 1, n))
    c = qt.asarray(rng.uniform(0.5, 1.5, n))
    k = qt.asarray(rng.integers(0, 65, n))
    lo = qt.asarray(rng.integers(-3, 4, n))
    grad = qt.grad(lambda x: qt.sum(qt.fori_loop(0, k, lambda i, v: _step(v, c), x)))(x)
    return {
        "per-element count": (qt.fori_loop(0, k, lambda i, v: _step(v, c), x), True),
        "per-element bounds": (qt.fori_loop(lo, lo + k, lambda i, v: _step(v, c) + i * 1e-3, x), True),
        "count computed before the loop": (qt.fori_loop(0, k * 2 - 5, lambda i, v: _step(v, c), x), True),
        "gradient (adstack)": (grad, True),
        "one count for all": (qt.fori_loop(0, qt.asarray(7), lambda i, v: _step(v, c), x), False),
        "python count": (qt.fori_loop(0, 9, lambda i, v: _step(v, c), x), False),
        "while loop": (qt.while_loop(lambda v: v < 3.0, lambda v: v * 1.5 + 0.1, qt.abs(x) + 0.5), False),
    }


def _loop_task(out):
    tasks = [t for t in build_plan((out._node,), True).tasks
             if any(i.kind in ("loop", "loop_vjp") for i in t.instrs)]
    assert len(tasks) == 1
    return tasks[0]


@pytest.mark.parametrize("name", list(_programs(np.random.default_rng(0))))
def test_which_loop_tasks_are_sorted_and_their_entry(name, rng):
    out, sort = _programs(rng)[name]
    task = _loop_task(out)
    assert codegen.sorted_trips(task) == sort
    text = ptx_probe.ptx(task)
    size = 4 * llvm_nvptx.TILE_ROUNDS * llvm_nvptx.BLOCK
    if sort:   # the counting sort: a histogram by shared atomics, four barriers per tile
        assert re.search(rf"\.shared \.align 4 \.b8 k{llvm_nvptx.ORDER_SUFFIX}\[{size}\]", text)
        assert text.count("bar.sync") == 4
        assert text.count("atom.shared.add.u32") == llvm_nvptx.TILE_ROUNDS
        assert ".maxntid 256" in text   # (a tile is a block of BLOCK threads)
    else:
        assert "bar.sync" not in text and ".shared" not in text


def test_a_lowering_without_sorted_loops_runs_elements_in_place(rng):
    out, _ = _programs(rng)["per-element count"]

    class Unsorted(ptx_probe.Offline):
        lowering = dataclasses.replace(lowering.NVPTX, sorted_loops=False)
    target = Unsorted("sm_90")
    module = target.new_module("probe")
    target.lower(_loop_task(out), module, "k", True)
    text = llvm_nvptx.compile_module(module, ["k"], "sm_90").decode()
    assert "bar.sync" not in text and ".shared" not in text


def _trip_classes(counts: np.ndarray) -> np.ndarray:
    """:func:`llvm_nvptx.trip_class` of each count, compiled for the host and run there."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module("classes")
    module.triple = llvm.get_process_triple()
    i64, i32 = ir.IntType(64), ir.IntType(32)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, ir.PointerType(), ir.PointerType()]), "f")
    n, src, dst = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    count = b.load(b.gep(src, [i], source_etype=i64), typ=i64)
    b.store(llvm_nvptx.trip_class(b, count), b.gep(dst, [i], source_etype=i32))
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    tm = llvm.Target.from_default_triple().create_target_machine()
    mod = llvm.parse_assembly(str(module))
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    run = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(
        engine.get_function_address("f"))
    src_a = np.ascontiguousarray(counts, dtype=np.int64)
    out = np.empty(len(src_a), np.int32)
    run(len(src_a), src_a.ctypes.data, out.ctypes.data)
    return out


def test_trip_classes_keep_the_order_of_counts(rng):
    """Exact below 32, four classes per power of two above (so a tile's runs of 32 elements
    differ by at most a quarter of their count), negative counts with 0, every class in
    ``[0, TILE_KEYS)``, never out of order."""
    counts = np.concatenate([np.arange(-40, 20000), rng.integers(0, 2**62, 5000),
                             [2**63 - 1, -(2**63)], 2 ** np.arange(5, 62)])
    counts.sort()
    classes = _trip_classes(counts)
    assert classes.min() == 0 and classes.max() == llvm_nvptx.TILE_KEYS - 1
    assert np.all(np.diff(classes) >= 0)
    small = (counts >= 0) & (counts < 32)
    np.testing.assert_array_equal(classes[small], counts[small])
    assert np.all(classes[counts < 0] == 0)
    for k in range(5, 13):   # a power of two and the next quarter of it fall apart
        first, same, next_ = _trip_classes(np.array([2**k, 2**k + 2 ** (k - 2) - 1, 2**k + 2 ** (k - 2)]))
        assert first == same < next_


@pytest.mark.parametrize("capped", [False, True])
def test_sorted_launches_cover_every_element_once_and_fill_the_gpu(capped, rng):
    """The grid :meth:`CudaKernel.grid` gives a sorted kernel, and the tiles its blocks then
    take (as ``_sorted_tiles`` derives them: ``rounds = min(ceil(extent / threads),
    TILE_ROUNDS)``, block ``b``'s tiles at ``(b + k * blocks) * rounds * BLOCK``): every
    element in exactly one tile; a launch too small to fill the GPU with tiles of
    ``TILE_ROUNDS`` gets a block per ``BLOCK`` elements; an adstack launch stays within its
    threads."""
    fill = 132 * 2048
    kernel = object.__new__(llvm_nvptx.CudaKernel)
    kernel.max_blocks, kernel.fill = llvm_nvptx.MAX_GRID, fill
    block = llvm_nvptx.BLOCK
    for extent in [1, 255, 256, 1000, 1025, 70_001, fill - 1, 3 * fill + 17, 10**7,
                   *rng.integers(1, 2 * 10**7, 20).tolist()]:
        threads = min(-(-extent // block) * block, 65536) if capped else None
        blocks = kernel.grid(extent, threads)
        rounds = min(-(-extent // (blocks * block)), llvm_nvptx.TILE_ROUNDS)
        assert 1 <= rounds
        if threads:
            assert blocks * block <= threads
        elif extent < 2 * fill:
            assert rounds == 1 and blocks == -(-extent // block)
        else:
            assert blocks * block >= fill
        size = rounds * block
        starts = np.arange(blocks, dtype=np.int64) * size
        seen = 0
        while starts.size:   # every tile of every block, as the kernel walks them
            starts = starts[starts < extent]
            seen += int(np.minimum(starts + size, extent).sum() - starts.sum())
            starts = starts + blocks * size
        assert seen == extent   # (tiles are disjoint: starts differ by multiples of size)
