"""The ``qt.linalg`` library functions: NumPy's LAPACK bindings on the CPU, CuPy's
cuSOLVER/cuBLAS bindings on a GPU.

Each takes the call's static arguments and its input arrays (stacks of matrices, C
contiguous; float32, float64, complex64 or complex128) and returns one array per output
(see :mod:`qtrace.devices.library`), of the dtypes NumPy gives, which are the ones
:mod:`qtrace.tracer.linalg_ext` records (complex inputs: real singular values,
eigenvalues and ``logabsdet`` of the same precision).
NumPy's ``LinAlgError`` (a singular matrix, one that is not positive definite) is
raised again naming the qtrace function.
"""

from __future__ import annotations

import functools

import numpy as np

from .library import DEVICES, register


def _linalg(name: str):
    """Register ``linalg.<name>``; LAPACK failures re-raised as ``qt.linalg.<name>: ...``."""
    def deco(fn):
        @functools.wraps(fn)
        def run(xp, static, *arrays):
            try:
                return fn(xp, static, *arrays)
            except np.linalg.LinAlgError as err:
                raise np.linalg.LinAlgError(f"qt.linalg.{name}: {err}") from None
        return register(f"linalg.{name}", DEVICES)(run)
    return deco


@_linalg("cholesky")
def _cholesky(xp, static, x):
    return [xp.linalg.cholesky(x)]   # (the lower factor: qt.linalg.cholesky makes the upper one)


@_linalg("det")
def _det(xp, static, x):
    return [xp.linalg.det(x)]


@_linalg("slogdet")
def _slogdet(xp, static, x):
    sign, logabsdet = xp.linalg.slogdet(x)
    return [sign, logabsdet]


@_linalg("eigh")
def _eigh(xp, static, x):
    w, v = xp.linalg.eigh(x)
    return [w, v]


@_linalg("eigvalsh")
def _eigvalsh(xp, static, x):
    return [xp.linalg.eigvalsh(x)]


@_linalg("inv")
def _inv(xp, static, x):
    return [xp.linalg.inv(x)]


@_linalg("pinv")
def _pinv(xp, static, x, *rtol):
    tol = rtol[0] if rtol else static[0]
    if x.size == 0:
        return [xp.zeros(x.shape[:-2] + (x.shape[-1], x.shape[-2]), x.dtype)]
    if xp is np:
        return [np.linalg.pinv(x, rtol=tol)]
    return [xp.linalg.pinv(x, rcond=tol)]  # CuPy's name for the relative cutoff


@_linalg("qr")
def _qr(xp, static, x):
    (mode,) = static
    q, r = xp.linalg.qr(x, mode=mode)
    return [q, r]


@_linalg("solve")
def _solve(xp, static, a, b):
    # b is (..., M, K): NumPy 2 broadcasts the stacks; CuPy wants them of one shape
    if xp is not np and a.shape[:-2] != b.shape[:-2]:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = xp.ascontiguousarray(xp.broadcast_to(a, batch + a.shape[-2:]))
        b = xp.ascontiguousarray(xp.broadcast_to(b, batch + b.shape[-2:]))
    return [xp.linalg.solve(a, b)]


@_linalg("svd")
def _svd(xp, static, x):
    (full_matrices,) = static
    u, s, vh = xp.linalg.svd(x, full_matrices=full_matrices)
    return [u, s, vh]


@_linalg("svdvals")
def _svdvals(xp, static, x):
    return [xp.linalg.svd(x, compute_uv=False)]
