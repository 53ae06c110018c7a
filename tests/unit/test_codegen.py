"""Generated CPU code: tasks lower to LLVM IR that the O3 pipeline vectorizes."""

from __future__ import annotations

import glob
import os
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import qtrace as qt
from qtrace.graph.plan import build_plan
from qtrace.kernels import codegen, column_reduce, llvm_cpu
from qtrace.kernels.lowering import CPU

HOST_FEATURES = llvm.get_host_cpu_features().flatten()
HAS_AVX = "+avx," in HOST_FEATURES + "," or "+avx2" in HOST_FEATURES


def _module_for(out: qt.Tensor, check_bounds: bool = True):
    spec = build_plan((out._node,), True)
    (task,) = spec.tasks
    module = llvm_cpu.new_module("qtrace_test")
    codegen.lower_task(task, module, task.symbol, check_bounds)
    return module, task


def _vector_widths(ir_text: str, elem: str) -> set:
    return {int(n) for n in re.findall(rf"<(\d+) x {elem}>", ir_text)}


def _add_f32(n=4096):
    a = qt.asarray(np.ones(n, np.float32))
    b = qt.asarray(np.ones(n, np.float32))
    return a + b


def test_unoptimized_ir_is_a_scalar_loop():
    module, task = _module_for(_add_f32())
    text = str(module)
    assert f"define void @\"{task.symbol}\"" in text or f"define void @{task.symbol}" in text
    assert "fadd float" in text
    assert not _vector_widths(text, "float")


def test_float32_add_kernel_is_vectorized_in_ir():
    module, _ = _module_for(_add_f32())
    opt = str(llvm_cpu.optimize(module))
    widths = _vector_widths(opt, "float")
    assert widths, "no <N x float> vector type in the optimized IR"
    assert max(widths) >= (8 if HAS_AVX else 4), widths
    assert re.search(r"fadd(?: \w+)* <\d+ x float>", opt), "the add itself is not vectorized"


def test_float32_add_kernel_uses_vector_registers_in_asm():
    module, _ = _module_for(_add_f32())
    asm = llvm_cpu.assembly(module)
    if llvm.get_process_triple().startswith(("x86_64", "i686")):
        if HAS_AVX:
            assert re.search(r"%[yz]mm\d+", asm), "no ymm/zmm register in the kernel"
            assert re.search(r"vaddps", asm)
        else:
            assert re.search(r"addps", asm)
    else:  # pragma: no cover - other hosts: some SIMD add
        assert re.search(r"fadd\s+v\d+\.4s|vadd", asm)


def test_float64_and_int32_kernels_are_vectorized():
    a = qt.asarray(np.ones(4096))
    module, _ = _module_for(a * 3.0 + 1.0)
    assert _vector_widths(str(llvm_cpu.optimize(module)), "double")
    i = qt.asarray(np.ones(4096, np.int32))
    module, _ = _module_for(i * 3 + 1)
    assert _vector_widths(str(llvm_cpu.optimize(module)), "i32")


@pytest.mark.parametrize("fn", ["sin", "exp", "log", "tanh"])
def test_math_library_kernels_are_vectorized(fn):
    """The math library is IR (branch-free polynomials) so its loops vectorize too."""
    a = qt.asarray(np.ones(4096, np.float32))
    module, _ = _module_for(getattr(qt, fn)(a))
    opt = str(llvm_cpu.optimize(module))
    assert _vector_widths(opt, "float"), f"{fn} kernel is scalar"


def test_float32_sum_reduction_is_vectorized():
    a = qt.asarray(np.ones((64, 4096), np.float32))
    module, task = _module_for(a.sum(axis=1))
    assert task.kind == "reduce"
    opt = str(llvm_cpu.optimize(module))
    assert _vector_widths(opt, "float") or _vector_widths(opt, "double")


def test_dump_ir_writes_each_kernel(tmp_path, rng):
    qt.config.dump_ir = str(tmp_path)
    c = float(rng.uniform(1, 2))  # a fresh constant: a kernel no other test compiled
    x = rng.standard_normal(5000).astype(np.float32)
    out = (qt.asarray(x) + c).numpy()
    np.testing.assert_allclose(out, x + np.float32(c), rtol=1e-6)
    raw = glob.glob(os.path.join(tmp_path, "*.ll"))
    opt = glob.glob(os.path.join(tmp_path, "*.opt.ll"))
    assert opt and len(raw) == 2 * len(opt)
    text = open(opt[0]).read()
    assert _vector_widths(text, "float")


def _stencil_update(z: np.ndarray):
    """Game of Life's write: the interior of a zeroed copy set from neighbour sums."""
    t = qt.asarray(z)
    n = t[:-2, 1:-1] + t[2:, 1:-1] + t[1:-1, :-2] + t[1:-1, 2:]
    out = qt.zeros_like(t)
    out[1:-1, 1:-1] = n
    return out


def test_region_update_reads_its_source_with_contiguous_vector_loads():
    """The update's source index is clamped (harmless outside the region); the innermost
    loop is split so that inside the region the clamp is gone and the loads are affine."""
    module, task = _module_for(_stencil_update(np.ones((64, 64))))
    split = codegen.clamp_free_range(task, 1, 64)
    assert split is not None and split[:2] == (1, 63)
    opt = str(llvm_cpu.optimize(module))
    assert "masked.gather" not in opt and "llvm.x86.avx512.gather" not in opt
    assert re.search(r"fadd(?: \w+)* <\d+ x double>", opt), "the sums are not vectorized"


@pytest.mark.parametrize("n", [3, 17, 18, 19, 40, 130])
@pytest.mark.parametrize("step", [1, -1, 2])
def test_split_region_updates_match_numpy(fusion, rng, n, step):
    """Region updates around the split's minimum length, reversed and strided regions,
    1-D (split inside a worker's range) and 2-D, against NumPy."""
    for shape in ((n,), (5, n)):
        x = rng.standard_normal(shape)
        src = rng.standard_normal(shape)
        region = (Ellipsis, slice(1, -1, step) if step > 0 else slice(-2, 0, step))
        want = x.copy()
        k = want[region].shape[-1]
        strided = (Ellipsis, slice(None, None, step))
        want[region] = src[region] * 2 + src[strided][..., :k]
        t, s = qt.asarray(x), qt.asarray(src)
        t[region] = s[region] * 2 + s[strided][..., :k]
        np.testing.assert_array_equal(t.numpy(), want)


def test_float32_reductions_vectorize_at_the_float32_width():
    """A float32 sum accumulates in float64, which would make LLVM vectorize at the float64
    width; the loop's hint (``qtrace.kernels.loop_hints``) asks for the float32 one, for the
    split (whole-array) and the per-row reduction alike."""
    from qtrace.kernels import loop_hints
    lanes = llvm_cpu.vector_bits() // 32
    x = qt.asarray(np.ones(1 << 20, np.float32))
    for out in (qt.sum(qt.exp(x)), qt.sum(qt.exp(x).reshape(64, -1), axis=1)):
        spec = build_plan((out._node,), True)
        (task,) = [t for t in spec.tasks if t.kind == "reduce"]
        assert loop_hints.narrow_accumulation(task)
        module = llvm_cpu.new_module("qtrace_test")
        codegen.lower_task(task, module, task.symbol, True)
        assert loop_hints.HINT in str(module)
        opt = str(llvm_cpu.optimize(module))
        assert f"<{lanes} x float>" in opt and loop_hints.HINT not in opt


def test_loop_hints_become_distinct_self_referencing_loop_ids():
    from qtrace.kernels import loop_hints
    text = ('br i1 %c, label %a, label %b, !llvm.loop !3\n'
            '!3 = !{ !"qtrace.vectorize.float32", i32 0 }\n!4 = !{!"x"}\n'
            '!7 = !{!"qtrace.vectorize.float32", i32 5}\n')
    out = loop_hints.resolve(text, 16)
    assert "!3 = distinct !{!3, !8}" in out and "!7 = distinct !{!7, !8}" in out
    assert '!8 = !{!"llvm.loop.vectorize.width", i32 16}' in out
    assert loop_hints.resolve("no hints", 16) == "no hints"


def _masked_power(rng, tensor_index: bool):
    r = rng.uniform(0.1, 2.0, (64, 64))
    x = qt.asarray(r)
    if tensor_index:  # a computed index: its values are only known at evaluation
        return x.reshape(-1)[qt.asarray(np.flatnonzero(r > 0.5)) * 1] ** -1.5, r
    return x[x > 0.5] ** -1.5, r


def test_host_index_gather_has_no_checks_and_vectorizes(rng):
    """A mask's coordinates (and host index arrays, checked when recorded) are known to be
    in range: the kernel reads without checks, so its math vectorizes; a tensor index keeps
    its check (a conditional status store the vectorizer cannot take)."""
    out, r = _masked_power(rng, tensor_index=False)
    module, task = _module_for(out)
    assert not task.checks
    opt = str(llvm_cpu.optimize(module))
    assert _vector_widths(opt, "double"), "the gathered power is scalar"
    np.testing.assert_allclose(out.numpy(), r[r > 0.5] ** -1.5, rtol=1e-14)
    checked, _ = _masked_power(rng, tensor_index=True)
    spec = build_plan((checked._node,), True)
    assert any(t.checks for t in spec.tasks)


def test_leading_axis_sum_is_interchanged_and_vectorized():
    """``x.sum(axis=0)``: outputs in blocks, rows outer, the block's accumulators inner —
    contiguous vector loads (the plain loop order gives a scalar strided chain)."""
    out = qt.sum(qt.asarray(np.ones((3000, 100))) * 2.0, axis=0)
    module, task = _module_for(out)
    assert task.kind == "reduce" and task.domain == (100,) and task.inner == (3000,)
    assert column_reduce.interchanged(task, CPU)
    opt = str(llvm_cpu.optimize(module))
    assert "gather" not in opt, "strided loads (the plain loop order vectorizes with gathers)"
    assert re.search(r"load <\d+ x double>", opt) and re.search(r"fadd(?: \w+)* <\d+ x double>", opt)
    row_sums = qt.sum(qt.asarray(np.ones((100, 3000))) * 2.0, axis=1)
    _, task = _module_for(row_sums)
    assert not column_reduce.interchanged(task, CPU)   # contiguous already: plain loops


def test_a_scalar_input_is_loaded_once_in_the_entry_block(rng):
    """An eager Python float becomes a 0-d input; every element reads the same value, so the
    kernel loads it once, in its entry block, not once per element (a GPU kernel reloaded it
    for every element: nothing lets LLVM move the load ahead of the loop's guard) — and the
    values are NumPy's, for a scalar read at two places and a broadcast row element."""
    x = rng.standard_normal(1000)
    s = 0.37125   # (not a small integer: an input, not a constant of the graph)
    t = qt.asarray(x)
    out = t * s + qt.exp(t) * s
    module, task = _module_for(out)
    entry = str(module.get_global(task.symbol).entry_basic_block)
    zero_d = [i for i, n in enumerate(task.arg_nodes) if n.shape == ()]
    assert zero_d, "the scalar is not an input of the task"
    loads = re.findall(r"load double, ptr", str(module))
    assert len(re.findall(r"load double, ptr", entry)) == 1 and len(loads) == 2, str(module)
    np.testing.assert_allclose(out.numpy(), x * s + np.exp(x) * s, rtol=1e-14, atol=1e-15)
    a, b = rng.standard_normal((3, 5)), rng.standard_normal((4, 3, 5))
    got = (qt.asarray(a)[1:2, 2:3] * qt.asarray(b) + qt.asarray(a)[2, 4]).numpy()
    np.testing.assert_allclose(got, a[1:2, 2:3] * b + a[2, 4], rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loops_of_one_or_two_math_functions_are_interleaved(dtype, rng):
    """A loop whose work is one long dependency chain (one or two math functions) asks the
    vectorizer for codegen.INTERLEAVE vectors per iteration, and gets them; a loop of four
    independent calls (B1's chain) does not; results are NumPy's either way."""
    x = rng.uniform(-2, 2, 4096).astype(dtype)
    a = qt.asarray(x)
    for make, want, hinted in [
            (lambda: qt.tanh(a) * 2.0, np.tanh(x) * 2, True),
            (lambda: qt.exp(-a * a) + qt.log(a * a + 1.0), np.exp(-x * x) + np.log(x * x + 1), True),
            (lambda: qt.sin(a) * qt.cos(a) + qt.exp(a) + qt.tanh(a),
             np.sin(x) * np.cos(x) + np.exp(x) + np.tanh(x), False)]:
        out = make()
        module, _ = _module_for(out)
        text = str(module)
        assert ('"llvm.loop.interleave.count", i32 4' in codegen_text(text)) == hinted
        opt = str(llvm_cpu.optimize(module))
        if hinted:   # four vector copies of the math function's rounding step in the loop
            rounds = re.findall(r"llvm\.(?:roundeven|nearbyint)\.v\d+f\d+\(", opt)
            assert len(rounds) >= 4, len(rounds)
        tol = 2e-6 if dtype == np.float32 else 1e-14
        np.testing.assert_allclose(out.numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["tanh_rows_100", "tanh_rows_128", "tanh_flat", "add_rows_100",
                                  "exp_rows_200"])
def test_rows_of_math_with_a_remainder_get_vector_epilogues(case, fusion, rng):
    """A 2-D map computing a math function over rows that leave a remainder after whole
    vector blocks (100, 200 columns) asks for vectorized loop remainders, and its optimised
    IR has them (LLVM's ``vec.epilog`` blocks); rows of a multiple of the block (128), a flat
    loop and cheap arithmetic do not ask. The option is off again after the module
    (process-wide). Values are NumPy's either way, fused and unfused."""
    from qtrace.kernels import loop_hints
    rows, cols, fn, npfn = {"tanh_rows_100": (300, 100, qt.tanh, np.tanh),
                            "tanh_rows_128": (300, 128, qt.tanh, np.tanh),
                            "tanh_flat": (1, 30_000, qt.tanh, np.tanh),
                            "add_rows_100": (300, 100, lambda v: v * 3.0, lambda v: v * 3.0),
                            "exp_rows_200": (200, 200, qt.exp, np.exp)}[case]
    x, b = rng.uniform(-3, 3, (rows, cols)), rng.uniform(-1, 1, cols)
    out = fn(qt.asarray(x) + qt.asarray(b))
    wanted = case in ("tanh_rows_100", "exp_rows_200")
    if fusion:
        module, task = _module_for(out)
        assert loop_hints.wants_epilogues(module) == wanted, task.domain
        opt = str(llvm_cpu.optimize(module))
        assert ("vec.epilog" in opt) == wanted
        plain, _ = _module_for(qt.tanh(qt.asarray(np.ones(5000))))   # (1-D: never asks)
        assert "vec.epilog" not in str(llvm_cpu.optimize(plain))
    np.testing.assert_allclose(out.numpy(), npfn(x + b), rtol=1e-14, atol=1e-15)


def codegen_text(text: str) -> str:
    """Module text with the loop-property placeholders resolved (as the back end does)."""
    from qtrace.kernels.loop_hints import resolve
    return resolve(text, 16)


@pytest.mark.parametrize("cols", [30, 100, 1000])
def test_short_rows_of_math_fold_their_tail_into_masked_vectors(cols, fusion, rng):
    """A [rows, cols] map of a math function: rows whose last partial block would leave
    more than a tenth of each row to the scalar remainder (30 columns) are predicated;
    longer ones (100, 1000) are not. Values are NumPy's either way, fused and unfused."""
    x = rng.uniform(-3, 3, (600, cols))
    b = rng.uniform(-1, 1, cols)
    out = qt.tanh(qt.asarray(x) + qt.asarray(b)) * 0.5
    if fusion:
        module, _ = _module_for(out)
        folded = '"llvm.loop.vectorize.predicate.enable", i32 1' in codegen_text(str(module))
        assert folded == (cols == 30)
    np.testing.assert_allclose(out.numpy(), np.tanh(x + b) * 0.5, rtol=1e-14, atol=1e-15)


def test_in_place_region_tasks_carry_no_alias_scopes():
    """A region slice assignment in place writes the buffer it reads (through another
    argument): its loads and stores must not be declared independent (scoped no-alias
    metadata), while a plain task's are; the flag is part of the kernel's identity."""
    x = qt.asarray(np.random.default_rng(0).standard_normal((16, 40)))
    y = x * 2.0
    y[:, -1] = y[:, -1] * 3.0 + y[:, -2]   # a same-index and a disjoint read: in place
    spec = build_plan((y._node,), True)
    plain, region = spec.tasks
    assert region.in_place and not plain.in_place and region.domain == (16,)
    for task, tagged in ((plain, True), (region, False)):
        module = llvm_cpu.new_module("qtrace_test")
        codegen.lower_task(task, module, task.symbol, True)
        text = str(module)
        assert ("!alias.scope" in text and "!noalias" in text) == tagged, text
