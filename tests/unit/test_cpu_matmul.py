"""CPU matrix products (qtrace.devices.cpu_matmul): blocks of rows or columns computed by
qtrace's workers through the BLAS's gemm (compiled workers) or np.matmul blocks, with the
BLAS held to one thread. Every layout is compared with NumPy's own product, for 1, 2 and 3
threads, and the BLAS's thread count is back to what it was afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest
import threadpoolctl

import qtrace as qt
from qtrace.devices import cpu, cpu_matmul


def _operands(rng, case, dtype):
    """(a, b) for one layout case: row-major, transposed views, strided slices, vectors."""
    def mat(r, c):
        return rng.standard_normal((r, c)).astype(dtype)
    return {
        "tall_k2": (mat(3000, 2), mat(2, 100)),
        "tall_n3": (mat(3000, 100), mat(100, 3)),
        "at_b": (mat(3000, 100).T, mat(3000, 3)),          # (100, 3000) viewed transposed
        "a_bt": (mat(3000, 3), mat(100, 3).T),
        "few_rows": (mat(3000, 2).T, mat(3000, 100)),      # m = 2: split by columns
        "odd_sizes": (mat(257, 64), mat(64, 129)),
        "strided_rows": (mat(600, 80)[::2], mat(80, 70)),  # lda = 2 * 80
        "column_slice": (mat(400, 90), mat(90, 300)[:, 17:217]),
        "step_columns": (mat(400, 90), mat(90, 300)[:, ::2]),   # the BLAS cannot take it
        "matvec": (mat(5000, 40), rng.standard_normal(40).astype(dtype)),
        "vecmat": (rng.standard_normal(300).astype(dtype), mat(300, 500)),
        "batched": (rng.standard_normal((6, 200, 300)).astype(dtype), mat(300, 150)),
        "one_row": (mat(1, 5000), mat(5000, 64)),
    }[case]


CASES = ["tall_k2", "tall_n3", "at_b", "a_bt", "few_rows", "odd_sizes", "strided_rows",
         "column_slice", "step_columns", "matvec", "vecmat", "batched", "one_row"]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64])
@pytest.mark.parametrize("case", CASES)
def test_products_match_numpy(case, dtype, threads, rng):
    qt.config.num_threads = threads
    a, b = _operands(rng, case, dtype)
    if np.dtype(dtype).kind == "i":
        a, b = (np.rint(x * 10).astype(dtype) for x in (a, b))
    want = np.matmul(a, b)
    out = np.full(want.shape, np.nan if want.dtype.kind in "fc" else -1, want.dtype)
    got = cpu_matmul.matmul(a, b, out)
    assert got is out
    if want.dtype.kind == "i":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-5 if dtype == np.float32 else 1e-12
        scale = np.abs(a).max() * np.abs(b).max() * a.shape[-1]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def test_the_blas_thread_count_is_restored(rng):
    qt.config.num_threads = 2
    before = [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
              if lib["user_api"] == "blas"]
    a, b = rng.standard_normal((500, 300)), rng.standard_normal((300, 200))
    cpu_matmul.matmul(a, b, np.empty((500, 200)))
    cpu_matmul.matmul(a, b)
    after = [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
             if lib["user_api"] == "blas"]
    assert after == before


def test_threads_multiplying_at_once_keep_the_blas_on_one_thread(rng, monkeypatch):
    """Products from 4 threads at once: each sees one BLAS thread for its whole product
    (a thread leaving must not restore the count under another still inside), and the
    count is restored once all have left. Values as NumPy's."""
    import threading

    qt.config.num_threads = 2
    libs = cpu_matmul._blas().lib_controllers
    before = [lib.get_num_threads() for lib in libs]
    seen, split = [], cpu_matmul._split

    def spying(*args):
        seen.append([lib.get_num_threads() for lib in libs])
        out = split(*args)
        seen.append([lib.get_num_threads() for lib in libs])
        return out

    monkeypatch.setattr(cpu_matmul, "_split", spying)
    a, b = rng.standard_normal((700, 300)), rng.standard_normal((300, 400))
    want, errors = a @ b, []
    start = threading.Barrier(4)

    def work():
        try:
            start.wait()
            for _ in range(15):
                got = cpu_matmul.matmul(a, b, np.empty((700, 400)))
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(seen) == 4 * 15 * 2 and all(counts == [1] * len(libs) for counts in seen), seen
    assert [lib.get_num_threads() for lib in libs] == before


def test_float_products_go_through_the_compiled_gemm_blocks(rng):
    """With OpenBLAS and the compiled workers, a float64 product is one launch of the
    workers' gemm kernel (no Python per block)."""
    if cpu._native_workers() is None or not cpu_matmul._cblas():
        pytest.skip("needs the compiled workers and OpenBLAS")
    qt.config.num_threads = 2
    a, b = rng.standard_normal((3000, 100)), rng.standard_normal((100, 3))
    launches = cpu.pool().stats()["launches"]
    out = cpu_matmul.matmul(a, b, np.empty((3000, 3)))
    assert cpu.pool().stats()["launches"] == launches + 1
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_an_mlp_layer_and_its_gradient_through_qtrace(threads, fusion, rng):
    """tanh(x @ w + b) and the gradient of a loss through it (the products of the forward
    and backward passes: x @ w, g @ w.T, x.T @ g), eager and jitted, against NumPy."""
    qt.config.num_threads = threads
    x, w = rng.standard_normal((3000, 2)), rng.standard_normal((2, 100)) * 0.5
    b, v = rng.standard_normal((1, 100)), rng.standard_normal((100, 3))

    def loss(w_, b_, x_):
        return qt.sum((qt.tanh(x_ @ w_ + b_) @ v) ** 2)
    h = np.tanh(x @ w + b)
    g = 2 * (h @ v) @ v.T * (1 - h * h)
    want = (x.T @ g, g.sum(axis=0, keepdims=True))
    for fn in (qt.grad(loss, argnums=(0, 1)), qt.jit(qt.grad(loss, argnums=(0, 1)))):
        got = fn(qt.asarray(w), qt.asarray(b), qt.asarray(x))
        for o, e in zip(got, want):
            np.testing.assert_allclose(o.numpy(), e, rtol=1e-10, atol=1e-10 * np.abs(e).max())
