"""Reverse mode through the ``qt.linalg`` library functions (``lib`` nodes ``linalg.*``).

Each rule returns the cotangent of the input matrices from the cotangents of the
components that reach the output, written with qtrace operations and ``qt.linalg``
calls (so the backward pass is an ordinary lazy graph, differentiable again). All
formulas are the real case; stacks of matrices are handled by batched matmuls, and
broadcast batch dimensions (``solve``) are summed back.

Conventions (those of JAX and PyTorch):

* ``cholesky``, ``eigh`` and ``eigvalsh`` read one triangle of a matrix assumed
  symmetric; their gradients are symmetric (the gradient with respect to the symmetric
  matrix, split evenly between ``a[i, j]`` and ``a[j, i]``).
* ``eigh``: ``gA = V (diag(gw) + F * (V^T gV)) V^T`` with ``F[i, j] = 1 / (w[j] - w[i])``
  off the diagonal: the eigenvector part needs distinct eigenvalues (repeated ones give
  infinities/NaNs, their eigenvectors not being a function of the matrix).
* ``svd``: the reduced-SVD formula (``F[i, j] = 1 / (s[j]^2 - s[i]^2)``): the singular
  vector part needs distinct singular values, and the projections of a non-square
  matrix divide by the singular values (zero ones are skipped, as in JAX). The
  gradient of ``S`` alone (``svdvals``, norms) is ``U diag(gS) V^T``, always defined.
  With ``full_matrices=True`` and ``M != N`` the extra singular vectors are not a
  function of the matrix: a cotangent of ``U`` or ``Vh`` raises ``NotImplementedError``.
* ``qr``: the reduced decomposition of square/tall matrices and (by splitting
  ``R = [R1 | R2]``) of wide ones; the complete mode of a tall matrix through ``R``
  only (a cotangent of ``Q`` raises ``NotImplementedError``).
* ``pinv``: Golub and Pereyra's derivative (constant rank).
* ``slogdet``: the sign carries no gradient.
"""

from __future__ import annotations

from ..tracer import elementwise as ew
from ..tracer import linalg_ext as la
from ..tracer.composites import eye, tril, triu
from ..tracer.creation import zeros_like
from ..tracer.linalg import matmul
from ..tracer.shape_ops import concatenate, expand_dims
from .library import lib_rule
from .rules import unbroadcast

mT = la.mT
mul, add, sub = ew.multiply, ew.add, ew.subtract


def _eye(n: int, like) -> object:
    return eye(n, dtype=like.dtype)


def _diag_embed(v):
    """Matrices with ``v`` (``(..., K)``) on their diagonals."""
    return mul(expand_dims(v, -2), _eye(v.shape[-1], v))


def _sym(a):
    return mul(add(a, mT(a)), 0.5)


def _right_solve(x, r):
    """``x @ inv(r).T`` (``r`` upper triangular, square) as ``solve(r, x.T).T``."""
    return mT(la.solve(r, mT(x)))


def _scale(ct, v):
    """``ct[..., None, None] * v``."""
    return mul(expand_dims(expand_dims(ct, -1), -1), v)


def _spacing(v, power: bool):
    """``F[..., i, j] = 1 / (v[j] - v[i])`` (of squares when ``power``), 0 on the diagonal."""
    if power:
        v = mul(v, v)
    d = sub(expand_dims(v, -2), expand_dims(v, -1))
    e = _eye(v.shape[-1], v)
    return sub(ew.divide(1.0, add(d, e)), e)


# --- inverses, determinants, solves ----------------------------------------------------
@lib_rule("linalg.inv")
def _inv(node, cts, xs, outs):
    """``X = A^-1``: ``gA = -X^T G X^T``."""
    xt = mT(outs[0])
    return [ew.negative(matmul(matmul(xt, cts[0]), xt))]


@lib_rule("linalg.det")
def _det(node, cts, xs, outs):
    """``gA = g det(A) A^-T``."""
    return [_scale(mul(cts[0], outs[0]), mT(la.inv(xs[0])))]


@lib_rule("linalg.slogdet")
def _slogdet(node, cts, xs, outs):
    """``gA = g_logabsdet A^-T`` (the sign is piecewise constant)."""
    g = cts.get(1)
    if g is None:
        return [None]
    return [_scale(g, mT(la.inv(xs[0])))]


@lib_rule("linalg.solve")
def _solve(node, cts, xs, outs):
    """``X = A^-1 B``: ``gB = A^-T G``, ``gA = -gB X^T`` (batch dims summed where broadcast)."""
    a, b = xs
    gb = la.solve(mT(a), cts[0])
    ga = ew.negative(matmul(gb, mT(outs[0])))
    return [unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)]


@lib_rule("linalg.pinv")
def _pinv(node, cts, xs, outs):
    """Golub-Pereyra: ``gA = -P^T G P^T + (I - A P) G^T P P^T + P^T P G^T (I - P A)``."""
    a, p, g = xs[0], outs[0], cts[0]
    pt, gt = mT(p), mT(g)
    m, n = a.shape[-2:]
    left = sub(_eye(m, a), matmul(a, p))        # (M, M)
    right = sub(_eye(n, a), matmul(p, a))       # (N, N)
    ga = ew.negative(matmul(matmul(pt, g), pt))
    ga = add(ga, matmul(matmul(left, gt), matmul(p, pt)))
    ga = add(ga, matmul(matmul(pt, p), matmul(gt, right)))
    return [ga] + [None] * (len(xs) - 1)


# --- symmetric factorizations ----------------------------------------------------------
@lib_rule("linalg.cholesky")
def _cholesky(node, cts, xs, outs):
    """``A = L L^T``: ``gA = L^-T Phi(L^T gL) L^-1``, ``Phi`` the symmetric matrix with the
    lower triangle of its argument (diagonal halved), mirrored."""
    upper = node.params[1][0]
    l_, gl = outs[0], cts[0]
    if upper:
        l_, gl = mT(l_), mT(gl)
    p = tril(matmul(mT(l_), gl))
    p = mul(add(p, mT(tril(p, -1))), 0.5)
    s = la.solve(mT(l_), p)            # L^-T Phi
    return [_sym(_right_solve(s, mT(l_)))]   # (L^-T Phi) L^-1


@lib_rule("linalg.eigh")
def _eigh(node, cts, xs, outs):
    """``A = V diag(w) V^T``: ``gA = sym(V (diag(gw) + F * (V^T gV)) V^T)``."""
    w, v = outs
    gw, gv = cts.get(0), cts.get(1)
    inner = None
    if gw is not None:
        inner = _diag_embed(gw)
    if gv is not None:
        part = mul(_spacing(w, False), matmul(mT(v), gv))
        inner = part if inner is None else add(inner, part)
    return [_sym(matmul(matmul(v, inner), mT(v)))]


@lib_rule("linalg.eigvalsh")
def _eigvalsh(node, cts, xs, outs):
    """``gA = V diag(gw) V^T`` (the eigenvectors from one ``eigh``)."""
    v = la.eigh(xs[0]).eigenvectors
    return [matmul(mul(v, expand_dims(cts[0], -2)), mT(v))]


# --- SVD and QR ------------------------------------------------------------------------
@lib_rule("linalg.svdvals")
def _svdvals(node, cts, xs, outs):
    """``gA = U diag(gS) V^T``."""
    u, _, vh = la.svd(xs[0], full_matrices=False)
    return [matmul(mul(u, expand_dims(cts[0], -2)), vh)]


@lib_rule("linalg.svd")
def _svd(node, cts, xs, outs):
    """The reduced-SVD formula (real case; see the module docstring)::

        gA = U [(F * (U^T gU - gU^T U)) S + diag(gS) + S (F * (V^T gV - gV^T V))] V^T
             + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T)
    """
    full = node.params[1][0]
    u, s, vh = outs
    gu, gs, gvh = cts.get(0), cts.get(1), cts.get(2)
    m, n = xs[0].shape[-2:]
    k = s.shape[-1]
    if full and m != n:
        if gu is not None or gvh is not None:
            raise NotImplementedError(
                "qt.linalg.svd: the gradient of U and Vh with full_matrices=True needs square matrices "
                f"(got shape {xs[0].shape}); use full_matrices=False")
        u, vh = u[..., :, :k], vh[..., :k, :]
    if gu is None and gvh is None:
        return [matmul(mul(u, expand_dims(gs, -2)), vh)]
    f = _spacing(s, True)
    row = expand_dims(s, -2)                       # (..., 1, K): scales columns
    inner = None if gs is None else _diag_embed(gs)

    def acc(x):
        nonlocal inner
        inner = x if inner is None else add(inner, x)

    zero = ew.equal(s, 0.0)
    s_inv = ew.where(zero, 0.0, ew.divide(1.0, ew.where(zero, 1.0, s)))
    extra = None
    if gu is not None:
        utgu = matmul(mT(u), gu)
        acc(mul(mul(f, sub(utgu, mT(utgu))), row))
        if m > k:  # (I - U U^T) gU S^-1 V^T
            extra = matmul(mul(sub(gu, matmul(u, utgu)), expand_dims(s_inv, -2)), vh)
    if gvh is not None:
        v, gv = mT(vh), mT(gvh)
        vtgv = matmul(vh, gv)
        acc(mul(expand_dims(s, -1), mul(f, sub(vtgv, mT(vtgv)))))
        if n > k:  # U S^-1 gV^T (I - V V^T)
            proj = sub(gvh, matmul(matmul(gvh, v), vh))
            part = matmul(mul(u, expand_dims(s_inv, -2)), proj)
            extra = part if extra is None else add(extra, part)
    ga = matmul(matmul(u, inner), vh)
    return [ga if extra is None else add(ga, extra)]


def _qr_square(q, r, gq, gr):
    """Reduced QR of a square or tall matrix (``R`` square, invertible):
    ``gA = (gQ + Q copyltu(M)) R^-T``, ``M = gR R^T - Q^T gQ``."""
    c = None
    if gr is not None:
        c = matmul(gr, mT(r))
    if gq is not None:
        qtgq = matmul(mT(q), gq)
        c = ew.negative(qtgq) if c is None else sub(c, qtgq)
    up = triu(c)
    b = matmul(q, add(up, mT(triu(c, 1))))
    if gq is not None:
        b = add(b, gq)
    return _right_solve(b, r)


@lib_rule("linalg.qr")
def _qr(node, cts, xs, outs):
    """QR (real): the square/tall rule, and for a wide matrix ``A = [A1 | A2] = Q [R1 | R2]``:
    ``R2 = Q^T A2`` gives ``gA2 = Q gR2`` and adds ``A2 gR2^T`` to ``gQ`` for ``A1 = Q R1``."""
    mode = node.params[1][0]
    a = xs[0]
    q, r = outs
    gq, gr = cts.get(0), cts.get(1)
    m, n = a.shape[-2:]
    if m > n and mode == "complete":
        if gq is not None:
            raise NotImplementedError(
                "qt.linalg.qr: the gradient of Q with mode='complete' needs a square or wide matrix "
                f"(got shape {a.shape}); use mode='reduced'")
        q, r = q[..., :, :n], r[..., :n, :]
        gr = gr[..., :n, :]
    if m >= n:
        return [_qr_square(q, r, gq, gr)]
    r1 = r[..., :, :m]
    gr1 = None if gr is None else gr[..., :, :m]
    if gr is not None:
        gr2 = gr[..., :, m:]
        a2 = a[..., :, m:]
        extra = matmul(a2, mT(gr2))
        gq = extra if gq is None else add(gq, extra)
    ga1 = _qr_square(q, r1, gq, gr1)
    ga2 = matmul(q, gr2) if gr is not None else zeros_like(a[..., :, m:])
    return [concatenate([ga1, ga2], axis=-1)]

