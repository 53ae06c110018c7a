"""The native XLA FFI handler of ``qt.to_jax`` (compiled by qtrace, no Python per call),
differentially: each function runs as a native custom call and through the Python handler
(``qt.config.ffi_native = False``), both against NumPy in float64 (or finite differences),
fusion on and off. Also: which plans keep the Python handler and why, failures inside a
native call surfacing as JAX errors with qtrace's message, and calls from several threads.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import qtrace as qt

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.cpu_only("the GPU's native handler is tested in tests/gpu")


def _call(fn, native: bool, *args):
    """``fn`` as a custom call (native or Python handler) under ``jax.jit``: its results and
    the handler paths it got."""
    qt.config.ffi_native = native
    f = qt.to_jax(fn)
    qt.reset_stats()
    out = jax.block_until_ready(jax.jit(f)(*args))
    st = qt.stats()
    return jax.tree_util.tree_map(np.asarray, out), f.handler_paths(), (st["ffi_python_calls"],
                                                                          st["ffi_native_calls"])


def _while_acc(x, limit):
    def cond(s):
        return s[0] < limit

    def body(s):
        return (s[0] * 1.3 + 0.1, s[1] + qt.sin(s[0]))
    return qt.while_loop(cond, body, (x, qt.zeros_like(x)))


def _while_np(x, limit):
    v, acc = x.copy(), np.zeros_like(x)
    go = v < limit
    while go.any():
        acc = np.where(go, acc + np.sin(v), acc)
        v = np.where(go, v * 1.3 + 0.1, v)
        go = v < limit
    return v, acc


CONST = np.linspace(-1.0, 2.0, 7)

CASES = {
    # name: (function, NumPy reference, argument makers)
    "elementwise": (lambda x, y: qt.sin(x) * 2.0 + y * y, lambda x, y: np.sin(x) * 2 + y * y,
                    lambda r, n: (r.standard_normal(n), r.standard_normal(n))),
    "two outputs and a sum": (lambda x, y: (x * y, qt.sum(x - y), qt.max(x)),
                              lambda x, y: (x * y, np.sum(x - y), np.max(x)),
                              lambda r, n: (r.standard_normal(n), r.standard_normal(n))),
    "long sum (split reduction)": (lambda x: qt.sum(qt.exp(-x * x)), lambda x: np.sum(np.exp(-x * x)),
                                   lambda r, n: (r.standard_normal(400_000),)),
    "long cumsum (phased scan)": (lambda x: qt.cumsum(x * 0.5), lambda x: np.cumsum(x * 0.5),
                                  lambda r, n: (r.standard_normal(300_000),)),
    "output is an input, twice": (lambda x, y: (x, y * 3.0, x), lambda x, y: (x, y * 3.0, x),
                                  lambda r, n: (r.standard_normal(n), r.standard_normal(n))),
    "same result twice": (lambda x: (qt.tanh(x),) * 2, lambda x: (np.tanh(x),) * 2,
                          lambda r, n: (r.standard_normal(n),)),
    "constant result": (lambda x: (x + 1.0, qt.zeros((3,)), qt.full((2, 2), 7.0)),
                        lambda x: (x + 1.0, np.zeros(3), np.full((2, 2), 7.0)),
                        lambda r, n: (r.standard_normal(n),)),
    "captured constant": (lambda x: x[:7] * qt.asarray(CONST) + 1.0, lambda x: x[:7] * CONST + 1.0,
                          lambda r, n: (r.standard_normal(max(n, 7)),)),
    "integer and boolean results": (lambda x, k: (x > 0.0, k * 3 + 1, qt.argmax(x)),
                                    lambda x, k: (x > 0, k * 3 + 1, np.argmax(x)),
                                    lambda r, n: (r.standard_normal(n), r.integers(-50, 50, n))),
    "2-d with a transpose": (lambda a: (a.T * 2.0 + 1.0, qt.sum(a, axis=0)),
                             lambda a: (a.T * 2.0 + 1.0, np.sum(a, axis=0)),
                             lambda r, n: (r.standard_normal((37, 53)),)),
    "per-element while_loop": (_while_acc, _while_np,
                               lambda r, n: (r.uniform(0.5, 1.5, n), r.uniform(2.0, 40.0, n))),
}


@pytest.mark.parametrize("n", [5, 70_000])
@pytest.mark.parametrize("case", list(CASES))
def test_native_and_python_handlers_agree_with_numpy(case, n, fusion, rng):
    fn, ref, make = CASES[case]
    args = make(rng, n)
    native, paths, calls = _call(fn, True, *args)
    assert paths == [{"forward": {"cpu": "native"}}]
    assert calls == (0, 1)     # no Python ran for the call
    python, py_paths, py_calls = _call(fn, False, *args)
    assert py_paths[0]["forward"]["cpu"].startswith("python") and py_calls == (1, 0)
    want = ref(*args)
    flat_n, flat_p = jax.tree_util.tree_leaves(native), jax.tree_util.tree_leaves(python)
    flat_w = jax.tree_util.tree_leaves(tuple(want) if isinstance(want, tuple) else (want,))
    assert len(flat_n) == len(flat_p) == len(flat_w)
    for a, b, w in zip(flat_n, flat_p, flat_w):
        w = np.asarray(w)
        assert a.shape == w.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)   # the same kernels: bit for bit
        if w.dtype.kind == "f":
            np.testing.assert_allclose(a, w, rtol=1e-10, atol=1e-10 * max(1.0, float(np.abs(w).max())))
        else:
            np.testing.assert_array_equal(a, w)


def _thp_mode() -> str:
    """The system's transparent huge page mode (``always``, ``madvise``, ``never``), or ``""``."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return ""


def _huge_kib(address: int) -> int:
    """KiB of transparent huge pages backing the mapping that holds ``address``."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0


def test_large_results_and_temporaries_are_backed_by_huge_pages(fusion, rng):
    """A result (or the temporaries' arena) of 4 MiB or more is a fresh mapping at every
    call, XLA's or the handler's: both handlers advise it for transparent huge pages before
    writing it (on a 2-core machine, 40 MB of B1's result took ~13 ms of page faults
    without, ~3 ms with), and the values are unchanged (unfused, the steps' temporaries of
    40 MB go through the arena, advised the same way)."""
    n = 5_000_000   # 40 MB: above glibc's largest mmap threshold, a fresh mapping per call
    x, y = rng.standard_normal(n), rng.standard_normal(n)

    def fn(x, y):
        return qt.sin(x) * 2.0 + y * y, qt.cumsum(qt.exp(-x * x) * y)
    want = (np.sin(x) * 2.0 + y * y, np.cumsum(np.exp(-x * x) * y))
    for native in (True, False):
        qt.config.ffi_native = native
        out = jax.block_until_ready(jax.jit(qt.to_jax(fn))(x, y))
        for got, w in zip(out, want):
            np.testing.assert_allclose(np.asarray(got), w, rtol=1e-12, atol=1e-9)
        if _thp_mode() in ("always", "madvise"):
            # (XLA's result buffer itself, NumPy would advise a copy of its own; its middle:
            # the advice splits the mapping at the first and last whole huge page)
            middle = out[0].unsafe_buffer_pointer() + out[0].nbytes // 2
            assert _huge_kib(middle) > 0, native


@pytest.mark.parametrize("n", [40, 100_000])
def test_while_loop_gradient_through_the_native_backward(n, fusion, rng):
    """The backward custom call sizes the adstack from the counts the forward loop recorded
    (a native max over them), splits the loop over XLA's threads (a stack per part) and
    gives the gradient JAX cannot take; checked against the Python handler and finite
    differences."""
    def loss(x, limit):
        v, acc = _while_acc(x, limit)
        return qt.sum(acc * v)
    x0, lim = rng.uniform(0.5, 1.5, n), rng.uniform(2.0, 40.0, n)
    grads = {}
    for native in (True, False):
        qt.config.ffi_native = native
        f = qt.to_jax(loss)
        qt.reset_stats()
        grads[native] = np.asarray(jax.jit(jax.grad(f))(x0, lim))
        paths = f.handler_paths()[0]
        assert (paths["backward"]["cpu"] == "native") == native
        st = qt.stats()
        # one call: XLA drops the forward call, whose results the gradient does not use
        assert (st["ffi_python_calls"], st["ffi_native_calls"]) == ((0, 1) if native else (1, 0))
        assert st["adstack_recorded"] == 1 and st["adstack_reducer_dispatches"] == 0   # both paths
    np.testing.assert_array_equal(grads[True], grads[False])
    h = 1e-6
    for i in rng.choice(n, 4, replace=False):   # the loss is a sum over elements: element i's term
        v1, a1 = _while_np(x0[i:i + 1] + h, lim[i:i + 1])
        v0, a0 = _while_np(x0[i:i + 1] - h, lim[i:i + 1])
        fd = float((a1 * v1 - a0 * v0)[0]) / (2 * h)
        assert abs(grads[True][i] - fd) <= 1e-5 * max(1.0, abs(fd)), (i, grads[True][i], fd)


def test_library_steps_keep_the_python_handler_and_say_why(rng):
    a, b = rng.standard_normal((6, 5)), rng.standard_normal((5, 4))
    out, paths, calls = _call(lambda a, b: qt.sin(a @ b), True, a, b)
    assert paths[0]["forward"]["cpu"] == "python: the plan has a matmul step"
    assert calls == (1, 0)
    np.testing.assert_allclose(out, np.sin(a @ b), rtol=1e-12)


def test_an_index_error_in_a_native_call_names_the_op_and_line(rng):
    qt.config.ffi_native = True
    bad = qt.to_jax(lambda x, i: x[i])
    with pytest.raises(Exception, match=r"qtrace.*gather.*index 10 is out of bounds") as info:
        jax.block_until_ready(jax.jit(bad)(jnp.ones(3), jnp.array([0, 10])))
    assert "test_ffi_native.py" in str(info.value)
    assert bad.handler_paths()[0]["forward"]["cpu"] == "native"
    np.testing.assert_array_equal(np.asarray(jax.jit(bad)(jnp.arange(3.0), jnp.array([2, 0]))), [2.0, 0.0])


def test_an_adstack_overflow_in_a_native_call_is_reported(rng):
    qt.config.ffi_native = True
    qt.config.adstack_max_depth = 2   # the debug cap: the loop needs more

    def loss(x, limit):
        return qt.sum(_while_acc(x, limit)[1])
    f = qt.to_jax(loss)
    with pytest.raises(Exception, match="adstack overflow"):
        jax.block_until_ready(jax.grad(f)(rng.uniform(0.5, 1.5, 50), np.full(50, 30.0)))
    assert f.handler_paths()[0]["backward"]["cpu"] == "native"


def test_native_calls_from_several_threads_each_match_their_reference(rng):
    """One compiled handler, called at once from 6 threads with different data: nothing is
    shared between calls (each has its own arena), so each result is its own."""
    qt.config.ffi_native = True
    f = jax.jit(qt.to_jax(lambda x, y: qt.cumsum(qt.sin(x) * y) + qt.sum(y)))
    inputs = [(rng.standard_normal(50_000), rng.standard_normal(50_000)) for _ in range(6)]
    f(*inputs[0])
    results: dict = {}

    def work(k):
        for _ in range(5):
            results[k] = np.asarray(f(*inputs[k]))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, (x, y) in enumerate(inputs):
        np.testing.assert_allclose(results[k], np.cumsum(np.sin(x) * y) + np.sum(y), rtol=1e-9, atol=1e-9)


def test_a_gpu_handler_and_its_helper_kernels_compile_without_a_gpu():
    """The CUDA handler's IR (stream and device lookup, XLA's allocator, cuLaunchKernel, a
    stack sized by the max kernel, a status read) verifies and compiles for the host, and
    the helper kernels to PTX, on a machine without a GPU (addresses are placeholders: the
    handler is never called here)."""
    from qtrace.kernels import ffi_entry as fe
    from qtrace.stats import native_address
    ptx = fe.gpu_helpers("sm_80").decode()
    assert f".entry {fe.MAX_KERNEL}" in ptx and f".entry {fe.HEADER_KERNEL}" in ptx and "atom" in ptx
    natives = {name: 4096 + i for i, name in enumerate(
        ["cuLaunchKernel", "cuMemsetD8Async", "cuMemcpyDtoDAsync", "cuMemcpyDtoHAsync", "cuStreamSynchronize",
         "cuCtxGetDevice", "error"])}
    natives.update(max_kernel=2, header_kernel=3)
    loop = fe.Launch(0, 1000, (0, 1, 2), 0, -1, 0, (fe.Level(-1, 1, 1000, 8, 8, 0),), 256, 4, 1024,
                     False, 1, False)
    split = fe.Launch(1, 1000, (2, 3), -1, 512, 64, (), -1, 4, 0, False, 1, False)
    program = fe.Program("cuda", 2, 2, (("arg", 0), ("arg", 1), ("temp", 0), ("ret", 0), ("ret", 1)), 1024,
                         768, 1, (loop, split, fe.Copy(4, 0, 4000)), -1, 1,
                         {n: native_address(n) for n in ("ffi_native_calls", "kernel_launches", "tasks_run")},
                         ((11, 12, 13, 14), (21, 22, 23, 24)), natives)
    assert fe.compile_handler(program, "qt_ffi_test_gpu_handler") != 0


def test_import_qtrace_loads_no_llvm():
    """``import qtrace`` stays light: LLVM (and the native FFI handler built on it) loads
    when something is first compiled, not at import."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys, qtrace; print('llvmlite' in sys.modules)"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
