"""Matrix products on the CPU: the BLAS held to one thread, the work split over qtrace's workers.

NumPy's BLAS (OpenBLAS in NumPy's wheels, MKL in some distributions) keeps its own pool
of threads, which spin for a while after every multi-threaded call (OpenBLAS: ~2^28
cycles, about 0.1 s). In a qtrace program a product is followed at once by qtrace's own
parallel kernels (an MLP layer: ``tanh(x @ w + b)``), which then share the cores with
those spinning threads: measured on a 2-core host, the ``tanh`` kernel after a
3000x2 @ 2x100 product took 600 us instead of 360, and the MLP benchmark's step was
dominated by it. So a product large enough for the BLAS to use threads runs here
instead: the BLAS is limited to one thread (``threadpoolctl``, the usual controller of
native thread pools: it finds OpenBLAS, MKL or BLIS whatever their symbol names) while
qtrace's workers each compute one block of rows of the result (or of columns, when the
result has too few rows) with their own single-threaded BLAS call; the BLAS's own
threads, never given work, go to sleep (and with qtrace's compiled workers, which spin
between launches, two spinning pools would otherwise share the cores: the MLP's step
took 2.7 ms instead of 1.5).

With OpenBLAS (NumPy's wheels) and float32/float64 matrices the BLAS can take (strided
rows or columns), each block is one ``cblas_?gemm`` call made by the compiled workers
(``_workers.c``'s ``gemm_block``), without Python or the GIL. Other products (batched,
complex, integer, another BLAS) are blocks of ``np.matmul`` run as Python callables
(NumPy releases the GIL inside), which costs a hand-over of the GIL per block, so only
larger products are split that way. Results are the BLAS's own for each block (a block
of rows of ``A @ B`` is ``A[rows] @ B``), so they do not depend on the number of workers
beyond the BLAS's own kernel choice for the block's shape.

Example:
    >>> import numpy as np
    >>> from qtrace.devices.cpu_matmul import matmul
    >>> a, b = np.ones((300, 40)), np.ones((40, 50))
    >>> out = np.empty((300, 50))
    >>> float(matmul(a, b, out)[0, 0])
    40.0
"""

from __future__ import annotations

import ctypes
import math
import struct
import threading

import numpy as np

from ..config import config
from . import cpu
from .library import register

# OpenBLAS runs a product on the calling thread alone below these multiply-adds (its
# interface/gemv.c and gemm.c: 2304 and 65536 times GEMM_MULTITHREAD_THRESHOLD, 4)
OPENBLAS_GEMV_THREADS_FROM = 9216
OPENBLAS_GEMM_THREADS_FROM = 262144
PART_WORK = 1 << 15           # multiply-adds: a block of a split product has at least this many
SPLIT_PYTHON_FROM = 1 << 20   # ... and a product of Python-callable blocks (a GIL hand-over each)

# struct gemm of _workers.c: fn, ilp64, single, trans_a, trans_b, split_rows, m, n, k,
# a, lda, b, ldb, c, ldc
_GEMM = struct.Struct("Q8qQqQqQq")

_found: dict = {}
_found_lock = threading.Lock()


def _blas():
    """threadpoolctl's controller of the process's BLAS libraries (found once, on first use)."""
    with _found_lock:
        if "blas" not in _found:
            import threadpoolctl
            _found["blas"] = threadpoolctl.ThreadpoolController().select(user_api="blas")
        return _found["blas"]


def _cblas():
    """``{dtype: (gemm address, ilp64)}`` from the process's OpenBLAS for the compiled
    workers' ``gemm_block`` (empty without OpenBLAS or without the compiled workers)."""
    with _found_lock:
        found = _found.get("cblas")
    if found is None:
        found = {}
        if cpu._native_workers() is not None:
            for lib in _blas().lib_controllers:
                if lib.internal_api == "openblas":
                    found = _openblas_gemms(ctypes.CDLL(lib.filepath))
                    if found:
                        break
        with _found_lock:
            _found["cblas"] = found
    return found


def _openblas_gemms(dll) -> dict:
    """``{dtype: (address, ilp64)}`` of an OpenBLAS's ``cblas_dgemm``/``cblas_sgemm``,
    whatever the affixes of its build (NumPy's wheels: ``scipy_cblas_dgemm64_``); {} if
    it lacks them."""
    found = _openblas_symbols(dll, ["cblas_dgemm", "cblas_sgemm"])
    if found is None:
        return {}
    names, ilp64 = found
    return {np.dtype(t): (ctypes.cast(getattr(dll, n), ctypes.c_void_p).value, ilp64)
            for t, n in zip((np.float64, np.float32), names)}


def _openblas_symbols(dll, names: list):
    """``(the symbols of names as this OpenBLAS build spells them, whether it is ILP64)``,
    whatever its affixes (NumPy's wheels: ``scipy_`` and ``64_``), or None if it lacks one."""
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            found = [f"{prefix}{n}{suffix}" for n in names]
            if not all(hasattr(dll, n) for n in found):
                continue
            ilp64 = bool(suffix)
            if not ilp64:   # an unsuffixed OpenBLAS says in its configuration whether it is ILP64
                get_config = getattr(dll, f"{prefix}openblas_get_config", None)
                if get_config is None:
                    continue
                get_config.restype = ctypes.c_char_p
                ilp64 = b"USE64BITINT" in (get_config() or b"")
            return found, ilp64
    return None


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b, out=out)``, with the BLAS on one thread and, given ``out``, blocks
    of the result computed by qtrace's workers when the product is large (module doc)."""
    m = a.shape[-2] if a.ndim >= 2 else 1
    n = b.shape[-1] if b.ndim >= 2 else 1
    batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    work = batch * m * n * a.shape[-1]
    parts = 1 if out is None else max(1, min(config.num_threads, work // PART_WORK))
    if _one_thread_anyway(work // parts, m == 1 or n == 1):
        return _split(a, b, out, m, n, work, parts)
    with _ONE_BLAS_THREAD:
        return _split(a, b, out, m, n, work, parts)


class _OneBlasThread:
    """While entered (by any number of threads at once), every BLAS of the process is set
    to one thread; the first entry saves their counts and the last exit restores them.
    (threadpoolctl's ``limit`` context costs ~6 us per entry, lets two threads restore each
    other's limit early, and for OpenBLAS silently ignores every Python thread but the
    first that set a limit: OpenBLAS's own setter is called here instead.)"""

    def __init__(self):
        self._lock = threading.Lock()
        self._inside = 0
        self._saved: list = []

    def __enter__(self):
        with self._lock:
            if not self._inside:
                self._saved = [(set_, get()) for get, set_ in _thread_controls()]
                for set_, count in self._saved:
                    if count != 1:
                        set_(1)
            self._inside += 1

    def __exit__(self, *exc):
        with self._lock:
            self._inside -= 1
            if not self._inside:
                for set_, count in self._saved:
                    if count != 1:
                        set_(count)


def _thread_controls() -> list:
    """``(get, set)`` of the thread count of every BLAS of the process (found once):
    OpenBLAS's own functions, else threadpoolctl's controller methods."""
    with _found_lock:
        found = _found.get("threads")
    if found is None:
        found = []
        for lib in _blas().lib_controllers:
            own = None
            if lib.internal_api == "openblas":
                dll = ctypes.CDLL(lib.filepath)
                own = _openblas_symbols(dll, ["openblas_get_num_threads", "openblas_set_num_threads"])
            if own is not None:
                get, set_ = (getattr(dll, n) for n in own[0])
                set_.argtypes = [ctypes.c_int]
                found.append((get, set_))
            else:
                found.append((lib.get_num_threads, lib.set_num_threads))
        with _found_lock:
            _found["threads"] = found
    return found


_ONE_BLAS_THREAD = _OneBlasThread()


def _one_thread_anyway(work: int, vector: bool) -> bool:
    """Whether every BLAS of the process computes a product of ``work`` multiply-adds on
    the calling thread alone (known for OpenBLAS; others are limited explicitly)."""
    limit = OPENBLAS_GEMV_THREADS_FROM if vector else OPENBLAS_GEMM_THREADS_FROM
    if work >= limit:
        return False
    only = _found.get("only_openblas")
    if only is None:
        only = _found["only_openblas"] = all(lib.internal_api == "openblas"
                                             for lib in _blas().lib_controllers)
    return only


def _split(a, b, out, m: int, n: int, work: int, parts: int) -> np.ndarray:
    if parts <= 1:
        return np.matmul(a, b, out=out)
    rows = m >= 2 * parts or (m >= parts and m >= n)
    if not rows and n < parts:
        return np.matmul(a, b, out=out)
    call = _gemm_call(a, b, out, m, n, rows)
    if call is not None:
        cpu.pool().run(*call, parts=parts)
    elif work < SPLIT_PYTHON_FROM:
        np.matmul(a, b, out=out)
    elif rows:
        def block(start, end, *_):   # rows start..end of the result
            part = slice(start, end)
            if b.ndim == 1:
                np.matmul(a[..., part, :], b, out=out[..., part])
            else:
                np.matmul(a[..., part, :], b, out=out[..., part, :])
        cpu.pool().run(block, m, None, None, parts=parts)
    else:
        def block(start, end, *_):   # columns start..end of the result
            part = slice(start, end)
            np.matmul(a, b[..., :, part], out=out[..., part])
        cpu.pool().run(block, n, None, None, parts=parts)
    return out


def _gemm_call(a, b, out, m: int, n: int, rows: bool):
    """The compiled workers' launch of ``gemm_block`` over rows (or columns) of ``out``:
    ``(kernel address, extent, argument block, None)``; None where the product is not a
    CBLAS gemm (more than two dimensions, another dtype, strides the BLAS cannot take)."""
    dt = out.dtype
    if a.ndim > 2 or b.ndim > 2 or a.dtype != dt or b.dtype != dt or not out.flags.c_contiguous:
        return None
    gemm = _cblas().get(dt)
    if gemm is None:
        return None
    k = a.shape[-1]
    la = _layout(a.reshape(m, k) if a.ndim == 1 else a, dt.itemsize)
    lb = _layout(b.reshape(k, n) if b.ndim == 1 else b, dt.itemsize)
    if la is None or lb is None:
        return None
    fn, ilp64 = gemm
    block = _GEMM.pack(fn, ilp64, dt.itemsize == 4, la[0], lb[0], rows, m, n, k,
                       cpu.pointer(a), la[1], cpu.pointer(b), lb[1], cpu.pointer(out), n)
    return cpu._native_workers().gemm_block(), m if rows else n, block, None


def _layout(x: np.ndarray, size: int):
    """``(transposed, leading dimension)`` of a 2-D array as a row-major BLAS operand, or
    None (strides the BLAS cannot take: negative, broadcast, not multiples of the item)."""
    r, c = x.shape
    s0, s1 = x.strides
    if (c == 1 or s1 == size) and s0 % size == 0 and (r == 1 or s0 >= c * size):
        return False, max(c, s0 // size if r > 1 else c, 1)
    if (r == 1 or s0 == size) and s1 % size == 0 and (c == 1 or s1 >= r * size):
        return True, max(r, s1 // size if c > 1 else r, 1)
    return None


@register("matmul", ("cpu",), writes_out=True)
def _matmul_library(xp, static, a, b, out=None):
    """The CPU's library step for ``matmul`` nodes: :func:`matmul` into the runtime's buffer."""
    return [matmul(a, b, None if out is None else out[0])]
