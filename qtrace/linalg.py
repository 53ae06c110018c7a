"""``qt.linalg``: the Array API (2024.12) linear-algebra extension, and NumPy's ``norm``,
``cond``, ``lstsq``, ``multi_dot``, ``tensorinv``, ``tensorsolve`` and ``LinAlgError``.

Factorizations and solvers run as library tasks (LAPACK through NumPy on the CPU);
the other functions are compositions of qtrace operations. All of them take stacks of
matrices, real and complex dtypes (the standard's result dtypes: norms, singular values
and ``eigh``'s eigenvalues are real), and are differentiable where the standard's math
is, complex inputs in JAX's convention (see :mod:`qtrace.ad.linalg_rules` for the
conventions of the factorizations' gradients).

Example:
    >>> import qtrace as qt
    >>> a = qt.asarray([[2.0, 1.0], [1.0, 3.0]])
    >>> round(qt.linalg.det(a).item(), 12)
    5.0
    >>> qt.grad(lambda m: qt.linalg.slogdet(m).logabsdet)(a).tolist()
    [[0.6, -0.2], [-0.2, 0.4]]
"""

from .tracer.linalg_ext import (
    EighResult,
    QRResult,
    SlogdetResult,
    SVDResult,
    cholesky,
    cross,
    det,
    diagonal,
    eigh,
    eigvalsh,
    inv,
    matmul,
    matrix_norm,
    matrix_power,
    matrix_rank,
    matrix_transpose,
    outer,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
    svdvals,
    tensordot,
    trace,
    vecdot,
    vector_norm,
)
from .tracer.linalg_numpy import (
    LinAlgError,
    cond,
    lstsq,
    multi_dot,
    norm,
    tensorinv,
    tensorsolve,
)

__all__ = [
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
    "EighResult",
    "QRResult",
    "SlogdetResult",
    "SVDResult",
    # NumPy's (numpy.linalg, not in the standard)
    "cond",
    "lstsq",
    "multi_dot",
    "norm",
    "tensorinv",
    "tensorsolve",
    "LinAlgError",
]
