"""CPU implementations of the ``qt.linalg`` library functions: NumPy's LAPACK bindings.

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

from .library import register


def _linalg(name: str):
    """Register ``linalg.<name>``; LAPACK failures re-raised as ``qt.linalg.<name>: ...``."""
    def deco(fn):
        @functools.wraps(fn)
        def run(static, *arrays):
            try:
                return fn(static, *arrays)
            except np.linalg.LinAlgError as err:
                raise np.linalg.LinAlgError(f"qt.linalg.{name}: {err}") from None
        return register(f"linalg.{name}")(run)
    return deco


@_linalg("cholesky")
def _cholesky(static, x):
    (upper,) = static
    return [np.linalg.cholesky(x, upper=upper)]


@_linalg("det")
def _det(static, x):
    return [np.linalg.det(x)]


@_linalg("slogdet")
def _slogdet(static, x):
    sign, logabsdet = np.linalg.slogdet(x)
    return [sign, logabsdet]


@_linalg("eigh")
def _eigh(static, x):
    w, v = np.linalg.eigh(x)
    return [w, v]


@_linalg("eigvalsh")
def _eigvalsh(static, x):
    return [np.linalg.eigvalsh(x)]


@_linalg("inv")
def _inv(static, x):
    return [np.linalg.inv(x)]


@_linalg("pinv")
def _pinv(static, x, *rtol):
    tol = rtol[0] if rtol else static[0]
    if x.size == 0:
        return [np.zeros(x.shape[:-2] + (x.shape[-1], x.shape[-2]), x.dtype)]
    return [np.linalg.pinv(x, rtol=tol)]


@_linalg("qr")
def _qr(static, x):
    (mode,) = static
    q, r = np.linalg.qr(x, mode=mode)
    return [q, r]


@_linalg("solve")
def _solve(static, a, b):
    return [np.linalg.solve(a, b)]  # b is (..., M, K): NumPy 2 broadcasts the stacks


@_linalg("svd")
def _svd(static, x):
    (full_matrices,) = static
    u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    return [u, s, vh]


@_linalg("svdvals")
def _svdvals(static, x):
    return [np.linalg.svd(x, compute_uv=False)]
