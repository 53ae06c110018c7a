"""Reductions split over threads with a last-arriver combine (``qtrace.kernels.split_reduce``).

The CPU splits long rows of few-output reductions into contiguous chunks (its default
lowering); the GPU into interleaved segments. The mechanism is target-neutral, so both
layouts run here on the CPU (``interleaved`` under the GPU's lowering switch, flat
domains), with workers racing on the counters, compared with NumPy in float64.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import runtime
from qtrace.kernels import lowering
from qtrace.kernels.target import target_for


@pytest.fixture(params=["contiguous", "interleaved"])
def split_cpu(request):
    """The CPU target lowering reductions in the CPU's (default) or the GPU's layout."""
    target = target_for(qt.Device("cpu"))
    old = target.lowering
    target.lowering = dataclasses.replace(old, split_reductions=request.param,
                                          flat=old.flat or request.param == "interleaved")
    target.__dict__.pop("_key", None)
    runtime.clear_plan_cache()
    yield target
    target.lowering = old
    target.__dict__.pop("_key", None)
    runtime.clear_plan_cache()


def _segments(x: qt.Tensor, fn) -> int:
    from qtrace.graph.plan import build_plan
    spec = build_plan((fn(x)._node,), True)
    return max(lowering.reduce_segments(t, target_for(qt.Device("cpu")).lowering) for t in spec.tasks)


REDUCTIONS = {
    "sum": (lambda m, x, a: m.sum(x, axis=a), 1e-12),
    "sum_of_squares": (lambda m, x, a: m.sum(x * x, axis=a), 1e-12),
    "prod": (lambda m, x, a: m.prod(1.0 + x * 1e-5, axis=a), 1e-12),
    "max": (lambda m, x, a: m.max(x, axis=a), 0),
    "min": (lambda m, x, a: m.min(x, axis=a), 0),
    "mean": (lambda m, x, a: m.mean(x, axis=a), 1e-12),
    "argmax": (lambda m, x, a: m.argmax(x, axis=a), 0),
    "argmin": (lambda m, x, a: m.argmin(x, axis=a), 0),
    "any": (lambda m, x, a: m.any(x > 0.9999, axis=a), 0),
    "all": (lambda m, x, a: m.all(x > 1e-6, axis=a), 0),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("shape, axis", [((100_003,), None), ((3, 40_001), -1), ((2, 3, 20_000), None),
                                         ((262_145,), None), ((2, 131_071), 1)])
def test_split_reductions_match_numpy(split_cpu, name, shape, axis, fusion, rng):
    fn, tol = REDUCTIONS[name]
    x = rng.random(shape)
    t = qt.asarray(x)
    row = x.size if axis is None else x.shape[axis]
    if split_cpu.lowering.split_reductions == "interleaved" or row >= 2 * lowering.CHUNK:
        assert _segments(t, lambda v: fn(qt, v, axis)) > 1
    got = fn(qt, t, axis).numpy()
    want = fn(np, x, axis)
    np.testing.assert_allclose(got, want, rtol=tol, atol=0)


@pytest.mark.parametrize("where", [0, 1, 777, 65_535, 65_536, 199_999, -1])
def test_split_argmax_first_nan_and_first_tie(split_cpu, where, rng):
    """Ties across segments keep the smallest index; the first NaN wins (NumPy)."""
    x = rng.random(200_000)
    x[[13, 5000, 70_000, 140_000]] = 2.0             # a tie across segments
    np.testing.assert_array_equal(qt.argmax(qt.asarray(x)).numpy(), np.argmax(x))
    x[where] = np.nan
    x[-2] = np.nan
    t = qt.asarray(x)
    np.testing.assert_array_equal(qt.argmax(t).numpy(), np.argmax(x))
    np.testing.assert_array_equal(qt.argmin(t).numpy(), np.argmin(x))
    assert np.isnan(qt.max(t).numpy()) and np.isnan(qt.min(t).numpy())


def test_split_sum_is_deterministic_across_runs_and_threads(split_cpu, rng):
    """Partials are combined in segment order by whichever thread arrives last."""
    x = qt.asarray(rng.standard_normal(600_001).astype(np.float32))
    results = set()
    for threads in (1, 2, 1, 2):
        qt.config.num_threads = threads
        results.add(qt.sum(x).numpy().tobytes())
    assert len(results) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("n", [262_147, 1_000_003])
def test_interleaved_segments_give_the_same_bits_for_any_chunks_in_flight(dtype, n, rng):
    """An interleaved segment folds its elements in index order however many chunks a trip
    reads (``split_reduce.chunks_in_flight``: 1 to 4 here for float32 and int32, 1 or 2 for
    float64, with the remainders that leaves):
    the same bits each time, and NumPy's sum in float64 to rounding."""
    target = target_for(qt.Device("cpu"))
    old = target.lowering
    x = (rng.standard_normal(n) * 100).astype(dtype)
    t = qt.asarray(x)
    got = {}
    try:
        for registers in (4, 8, 12, 16):
            target.lowering = dataclasses.replace(old, split_reductions="interleaved", flat=True,
                                                  split_registers=registers)
            target.__dict__.pop("_key", None)   # (the lowering is part of every kernel's key)
            runtime.clear_plan_cache()
            got[registers] = qt.sum(t).numpy()
    finally:
        target.lowering = old
        target.__dict__.pop("_key", None)
        runtime.clear_plan_cache()
    assert len({v.tobytes() for v in got.values()}) == 1
    np.testing.assert_allclose(got[16], x.astype(np.float64).sum(),
                               rtol=1e-12 if dtype != np.float32 else 1e-6)


@pytest.mark.parametrize("name", ["sum", "argmax", "max"])
@pytest.mark.parametrize("shape, axis", [((262_145,), None), ((3, 200_000), 1), ((64, 40_000), 1)])
def test_split_reductions_leave_their_counters_zero(split_cpu, name, shape, axis, monkeypatch, rng):
    """The last arriver of each group sets its counter back to zero, and a kernel writes
    nothing else below its layout's ``zeroed`` bytes (``lowering.SplitLayout``): the GPU
    zeroes its kept scratch once, not before every launch. Checked on the scratch blocks
    the CPU runtime hands the kernels (workers racing), for few and many counters (64
    rows of 40,000 in the interleaved layout: more than ``COUNTERS`` bytes of them)."""
    from qtrace.devices import cpu_runtime
    from qtrace.graph.plan import build_plan
    blocks = []

    class Numpy:   # numpy, remembering the scratch blocks the runtime zeroes
        def __getattr__(self, attr):
            return getattr(np, attr)

        def zeros(self, *args, **kwargs):
            blocks.append(np.zeros(*args, **kwargs))
            return blocks[-1]
    monkeypatch.setattr(cpu_runtime, "np", Numpy())
    fn, tol = REDUCTIONS[name]
    x = rng.random(shape)
    t = qt.asarray(x)
    low = split_cpu.lowering
    (task,) = build_plan((fn(qt, t, axis)._node,), True).tasks
    nbytes, zeroed = lowering.split_scratch(task, lowering.task_segments(task, low), low)
    if low.split_reductions == "contiguous" and shape == (64, 40_000):
        assert nbytes == 0   # (rows shorter than two chunks: not split on the CPU)
    else:
        assert zeroed >= lowering.COUNTERS and nbytes > zeroed
    np.testing.assert_allclose(fn(qt, t, axis).numpy(), fn(np, x, axis), rtol=tol, atol=0)
    assert len(blocks) == (nbytes > 0)
    for block in blocks:
        assert block.nbytes == nbytes and not block[:zeroed].any() and block[zeroed:].any()


def test_short_rows_and_many_outputs_are_not_split(split_cpu, rng):
    assert _segments(qt.asarray(rng.random((100_000, 8))), lambda v: qt.sum(v, axis=1)) == 1
    assert _segments(qt.asarray(rng.random(40)), qt.sum) == 1


@pytest.mark.parametrize("extra", [-1, 0, 1, 12_345])
def test_cpu_default_splits_long_rows_at_chunk_boundaries(extra, rng):
    """The CPU's own lowering: rows of 2 chunks +- 1 element and more, sum/max/argmin."""
    n = 2 * lowering.CHUNK + extra
    x = rng.standard_normal(n)
    t = qt.asarray(x)
    assert _segments(t, qt.sum) == (2 if n >= 2 * lowering.CHUNK else 1)
    # (relative to the sum of magnitudes: the sum itself may cancel to near zero)
    np.testing.assert_allclose(qt.sum(t).numpy(), x.sum(), rtol=0, atol=1e-15 * np.abs(x).sum())
    assert qt.max(t).numpy() == x.max() and qt.argmin(t).numpy() == x.argmin()


def test_cpu_full_sum_runs_on_every_worker(rng):
    """A full sum of a long array is one launch over chunks that the workers share."""
    qt.config.num_threads = 2
    x = qt.asarray(rng.random(4 * lowering.CHUNK))
    qt.sum(x).numpy()
    qt.reset_stats()
    np.testing.assert_allclose(qt.sum(x).numpy(), x.numpy().sum(), rtol=1e-12)
    assert qt.stats()["kernel_launches"] == 1
    assert _segments(x, qt.sum) == 4


def test_split_reduction_gradient(split_cpu, rng):
    x = rng.random(50_000)
    g = qt.grad(lambda v: qt.sum(qt.sin(v)) + qt.max(v))(qt.asarray(x)).numpy()
    want = np.cos(x)
    want[np.argmax(x)] += 1.0
    np.testing.assert_allclose(g, want, rtol=1e-14)


@pytest.mark.cpu_only("the library forced here is NumPy's sequential cumsum (its bounds assume "
                      "that order); the GPU's, CUB's parallel scan, is tested in tests/gpu")
@pytest.mark.parametrize("n", [1 << 17, (1 << 17) + 1, 1_000_003])
def test_library_scan_matches_numpy(n, monkeypatch, fusion, rng):
    """The library scan GPUs use for a few long rows (forced on the CPU here, where the
    library is NumPy's): values, integers exactly, the gradient (its VJP rule), and a
    scan fed by fused elementwise work and feeding more."""
    from qtrace.tracer import reductions
    monkeypatch.setattr(reductions, "_library_scan",
                        lambda t, ax: t.shape[ax] >= reductions.SCAN_SPLIT)
    qt.reset_stats()
    assert qt.cumsum(qt.asarray(rng.random(n))).numpy().shape == (n,)
    assert qt.stats()["tasks_run"] == 0   # a library step, no scan task
    x = rng.random(n)
    got = qt.cumsum(qt.asarray(x)).numpy()
    want = np.cumsum(x)
    assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want))
    xi = rng.integers(-9, 9, (2, n))
    np.testing.assert_array_equal(qt.cumsum(qt.asarray(xi), axis=1).numpy(), np.cumsum(xi, axis=1))
    w = rng.random(n)
    g = qt.grad(lambda v: qt.sum(qt.cumsum(v) * qt.asarray(w)))(qt.asarray(x)).numpy()
    np.testing.assert_allclose(g, np.cumsum(w[::-1])[::-1], rtol=1e-10)
    g2 = qt.grad(lambda v: qt.sum(qt.sin(qt.cumsum(v * 2.0)) * qt.asarray(w)))(qt.asarray(x)).numpy()
    want2 = 2.0 * np.cumsum((np.cos(np.cumsum(2.0 * x)) * w)[::-1])[::-1]
    np.testing.assert_allclose(g2, want2, rtol=1e-8, atol=1e-10 * np.max(np.abs(want2)))


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_gpu_split_reductions_stream_their_loads_past_l1(fused, rng):
    """In the PTX built here (no GPU needed): a split reduction's segment loop reads its
    vector loads with ``.L1::no_allocate`` (each byte is read once), nothing else of its
    kernel does, an elementwise kernel keeps plain loads, and GPUs before sm_70 (no such
    qualifier) or PTX files declaring an ISA before 7.4 (which a driver would refuse with
    it) would get plain loads."""
    from ptx_probe import ptx as task_ptx

    from qtrace.graph.plan import build_plan
    from qtrace.kernels import llvm_nvptx

    x = qt.asarray(rng.standard_normal(1 << 16).astype(np.float32))

    def ptx(program, kind):
        return task_ptx(next(t for t in build_plan((program._node,), fused).tasks if t.kind == kind))

    text = ptx(qt.sum(x * 2.0), "reduce")
    head = ".func k" + llvm_nvptx.SEGMENTS_SUFFIX + "("
    segments, entry = text[text.index(head):], text[text.index(".visible .entry k("):text.index(head)]
    assert segments.count("ld.global.L1::no_allocate.v4.b32") >= 1
    assert "ld.global.v4" not in segments and "no_allocate" not in entry
    plain = text.replace(".L1::no_allocate", "")
    assert llvm_nvptx.streaming_loads(plain, "sm_61") == plain
    assert llvm_nvptx.streaming_loads(plain, "sm_90") == text
    older = re.sub(r"^\.version \d+\.\d+", ".version 7.0", plain, flags=re.M)   # (sm_80's default ISA)
    assert older != plain and llvm_nvptx.streaming_loads(older, "sm_80") == older
    elementwise = ptx(x * 2.0 + 1.0, "map")
    assert "ld.global.v4.b32" in elementwise and "no_allocate" not in elementwise


@pytest.mark.parametrize("arch", ["sm_52", "sm_61", "sm_70", "sm_80", "sm_90"])
def test_gpu_split_reductions_compile_for_every_architecture(arch, rng):
    """A split reduction's warp shuffles (``shfl.sync``) compile for GPUs before sm_70 too:
    their PTX declares ISA 6.3 at least (LLVM's default for them, 5.0 or 6.0, has no
    ``shfl.sync`` before sm_70, and selecting it there aborted the process); no GPU needed."""
    from ptx_probe import ptx as task_ptx

    from qtrace.graph.plan import build_plan

    x = qt.asarray(rng.standard_normal(1 << 16).astype(np.float32))
    task = next(t for t in build_plan((qt.sum(x)._node,), True).tasks if t.kind == "reduce")
    ptx = task_ptx(task, arch)
    version = re.search(r"^\.version (\d+)\.(\d+)", ptx, re.M)
    assert (int(version[1]), int(version[2])) >= (6, 3) and "shfl.sync.down" in ptx
    assert f".target {arch}" in ptx
