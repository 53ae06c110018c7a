"""Reverse mode through the ``qt.linalg`` library functions (``lib`` nodes ``linalg.*``).

Each rule returns the cotangent of the input matrices from the cotangents of the
components that reach the output, written with qtrace operations and ``qt.linalg``
calls (so the backward pass is an ordinary lazy graph, differentiable again). Stacks of
matrices are handled by batched matmuls, and broadcast batch dimensions (``solve``) are
summed back.

Complex inputs follow JAX's convention (that of all qtrace rules): the cotangent ``g``
of an output ``w`` pairs with its tangent bilinearly, ``dL = Re(sum(g * dw))``, so the
gradient of a real loss is ``dL/dRe(z) - 1j * dL/dIm(z)`` and a holomorphic function's
rule is its real formula with plain transposes (``inv``, ``det``, ``solve``; also
``slogdet``'s ``logabsdet``). The others (``cholesky``, ``eigh``, ``eigvalsh``, ``pinv``,
``qr``, ``svd``, ``svdvals``) are written, as in the literature and PyTorch, for
cotangents that pair sesquilinearly (``dL = Re(sum(conj(g) * dw))``) with conjugate
transposes ``^H``; :func:`_conjugate_linear` converts: JAX's rule is
``conj(rule(conj(g)))``. For real inputs both are the real formulas.

Conventions (those of JAX and PyTorch):

* ``cholesky``, ``eigh`` and ``eigvalsh`` read one triangle of a matrix assumed
  symmetric (Hermitian); their gradients are symmetric (Hermitian: the gradient with
  respect to the Hermitian matrix, split evenly between ``a[i, j]`` and ``a[j, i]``).
* ``eigh``: ``gA = V (diag(gw) + F * (V^H gV)) V^H`` with ``F[i, j] = 1 / (w[j] - w[i])``
  off the diagonal: the eigenvector part needs distinct eigenvalues (repeated ones give
  infinities/NaNs, their eigenvectors not being a function of the matrix). Complex
  eigenvectors are unique up to a phase each: the loss must not depend on the phases
  (the phase part of ``diag(V^H gV)`` is dropped).
* ``svd``: the reduced-SVD formula (``F[i, j] = 1 / (s[j]^2 - s[i]^2)``): the singular
  vector part needs distinct singular values, and the projections of a non-square
  matrix divide by the singular values (zero ones are skipped, as in JAX). The
  gradient of ``S`` alone (``svdvals``, norms) is ``U diag(gS) V^H``, always defined.
  With ``full_matrices=True`` and ``M != N`` the extra singular vectors are not a
  function of the matrix: a cotangent of ``U`` or ``Vh`` raises ``NotImplementedError``.
  Complex singular vectors are unique up to a phase shared by a column of ``U`` and a
  row of ``Vh``: the loss must not depend on it (then ``Im(diag(U^H gU))`` and
  ``-Im(diag(V^H gV))`` agree, and the term ``i Im(diag(U^H gU)) / S`` accounts for it).
* ``qr``: the reduced decomposition of square/tall matrices and (by splitting
  ``R = [R1 | R2]``) of wide ones; the complete mode of a tall matrix through ``R``
  only (a cotangent of ``Q`` raises ``NotImplementedError``). Complex ``R`` has a real
  diagonal (LAPACK's Householder QR), which fixes the decomposition up to signs.
* ``pinv``: Golub and Pereyra's derivative (constant rank).
* ``slogdet``: the sign of a real matrix carries no gradient; the complex sign
  ``det / |det|`` does (``d sign = 1j * Im(tr(A^-1 dA)) * sign``).
"""

from __future__ import annotations

import functools

from ..tracer import elementwise as ew
from ..tracer import linalg_ext as la
from ..tracer.array_api import imag
from ..tracer.composites import eye, tril, triu
from ..tracer.creation import zeros_like
from ..tracer.linalg import matmul
from ..tracer.shape_ops import concatenate, expand_dims
from .library import lib_rule
from .rules import unbroadcast

mT, mH = la.mT, la.mH
mul, add, sub = ew.multiply, ew.add, ew.subtract


def _eye(n: int, like) -> object:
    return eye(n, dtype=like.dtype)


def _diag_embed(v):
    """Matrices with ``v`` (``(..., K)``) on their diagonals."""
    return mul(expand_dims(v, -2), _eye(v.shape[-1], v))


def _sym(a):
    """The symmetric (complex: Hermitian) part ``(a + a^H) / 2``."""
    return mul(add(a, mH(a)), 0.5)


def _right_solve(x, r):
    """``x @ inv(r)^H`` (``r`` square, invertible) as ``solve(r, x^H)^H``."""
    return mH(la.solve(r, mH(x)))


def _conjugate_linear(rule):
    """A rule written for sesquilinear cotangents (with ``^H``) as a rule of JAX's
    convention: ``conj(rule(conj(cts)))`` for complex inputs, ``rule`` for real ones."""
    def flip(t):
        return t if t is None or t.dtype.kind != "c" else ew.conj(t)

    @functools.wraps(rule)
    def run(node, cts, xs, outs):
        if xs[0].dtype.kind != "c":
            return rule(node, cts, xs, outs)
        return [flip(g) for g in rule(node, {k: flip(c) for k, c in cts.items()}, xs, outs)]
    return run


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
    """``gA = g_logabsdet A^-T`` (a real sign is piecewise constant); a complex sign adds
    ``1j * Im(g_sign * sign)`` to ``g_logabsdet``."""
    g, g_sign = cts.get(1), cts.get(0)
    if xs[0].dtype.kind == "c" and g_sign is not None:
        phase = mul(imag(mul(g_sign, outs[0])), 1j)
        g = phase if g is None else add(g, phase)
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
@_conjugate_linear
def _pinv(node, cts, xs, outs):
    """Golub-Pereyra: ``gA = -P^H G P^H + (I - A P) G^H P P^H + P^H P G^H (I - P A)``."""
    a, p, g = xs[0], outs[0], cts[0]
    pt, gt = mH(p), mH(g)
    m, n = a.shape[-2:]
    left = sub(_eye(m, a), matmul(a, p))        # (M, M)
    right = sub(_eye(n, a), matmul(p, a))       # (N, N)
    ga = ew.negative(matmul(matmul(pt, g), pt))
    ga = add(ga, matmul(matmul(left, gt), matmul(p, pt)))
    ga = add(ga, matmul(matmul(pt, p), matmul(gt, right)))
    return [ga] + [None] * (len(xs) - 1)


# --- symmetric factorizations ----------------------------------------------------------
@lib_rule("linalg.cholesky")
@_conjugate_linear
def _cholesky(node, cts, xs, outs):
    """``A = L L^H``: ``gA = sym(L^-H Phi(L^H gL) L^-1)``, ``Phi`` the matrix with the lower
    triangle of its argument (diagonal halved), mirrored (conjugated)."""
    l_, gl = outs[0], cts[0]
    p = tril(matmul(mH(l_), gl))
    p = mul(add(p, mH(tril(p, -1))), 0.5)
    s = la.solve(mH(l_), p)            # L^-H Phi
    return [_sym(_right_solve(s, mH(l_)))]   # (L^-H Phi) L^-1


@lib_rule("linalg.eigh")
@_conjugate_linear
def _eigh(node, cts, xs, outs):
    """``A = V diag(w) V^H``: ``gA = sym(V (diag(gw) + F * (V^H gV)) V^H)``."""
    w, v = outs
    gw, gv = cts.get(0), cts.get(1)
    inner = None
    if gw is not None:
        inner = _diag_embed(gw)
    if gv is not None:
        part = mul(_spacing(w, False), matmul(mH(v), gv))
        inner = part if inner is None else add(inner, part)
    return [_sym(matmul(matmul(v, inner), mH(v)))]


@lib_rule("linalg.eigvalsh")
@_conjugate_linear
def _eigvalsh(node, cts, xs, outs):
    """``gA = V diag(gw) V^H`` (the eigenvectors from one ``eigh``)."""
    v = la.eigh(xs[0]).eigenvectors
    return [matmul(mul(v, expand_dims(cts[0], -2)), mH(v))]


# --- SVD and QR ------------------------------------------------------------------------
@lib_rule("linalg.svdvals")
@_conjugate_linear
def _svdvals(node, cts, xs, outs):
    """``gA = U diag(gS) V^H``."""
    u, _, vh = la.svd(xs[0], full_matrices=False)
    return [matmul(mul(u, expand_dims(cts[0], -2)), vh)]


@lib_rule("linalg.svd")
@_conjugate_linear
def _svd(node, cts, xs, outs):
    """The reduced-SVD formula (see the module docstring), with ``K = U^H gU - gU^H U``::

        gA = U [(F * K) S + diag(gS) + diag(K) S^-1 / 2 + S (F * (V^H gV - gV^H V))] V^H
             + (I - U U^H) gU S^-1 V^H + U S^-1 gV^H (I - V V^H)

    (``diag(K)`` is ``2i Im(diag(U^H gU))``, zero for real matrices.)
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
        utgu = matmul(mH(u), gu)
        skew = sub(utgu, mH(utgu))
        acc(mul(mul(f, skew), row))
        if u.dtype.kind == "c":  # the phase term (F's diagonal is zero)
            acc(mul(skew, _diag_embed(mul(s_inv, 0.5))))
        if m > k:  # (I - U U^H) gU S^-1 V^H
            extra = matmul(mul(sub(gu, matmul(u, utgu)), expand_dims(s_inv, -2)), vh)
    if gvh is not None:
        v, gv = mH(vh), mH(gvh)
        vtgv = matmul(vh, gv)
        acc(mul(expand_dims(s, -1), mul(f, sub(vtgv, mH(vtgv)))))
        if n > k:  # U S^-1 gV^H (I - V V^H)
            proj = sub(gvh, matmul(matmul(gvh, v), vh))
            part = matmul(mul(u, expand_dims(s_inv, -2)), proj)
            extra = part if extra is None else add(extra, part)
    ga = matmul(matmul(u, inner), vh)
    return [ga if extra is None else add(ga, extra)]


def _qr_square(q, r, gq, gr):
    """Reduced QR of a square or tall matrix (``R`` square, invertible):
    ``gA = (gQ + Q copyutl(M)) R^-H``, ``M = gR R^H - Q^H gQ``, ``copyutl`` the Hermitian
    matrix with the upper triangle of ``M`` (the real part of its diagonal: ``R``'s
    diagonal is real)."""
    c = None
    if gr is not None:
        c = matmul(gr, mH(r))
    if gq is not None:
        qtgq = matmul(mH(q), gq)
        c = ew.negative(qtgq) if c is None else sub(c, qtgq)
    upper = triu(sub(c, mul(_diag_embed(la.diagonal(c)), 0.5)))   # diagonal halved
    b = matmul(q, add(upper, mH(upper)))                           # its diagonal: Re(M_ii)
    if gq is not None:
        b = add(b, gq)
    return _right_solve(b, r)


@lib_rule("linalg.qr")
@_conjugate_linear
def _qr(node, cts, xs, outs):
    """QR: the square/tall rule, and for a wide matrix ``A = [A1 | A2] = Q [R1 | R2]``:
    ``R2 = Q^H A2`` gives ``gA2 = Q gR2`` and adds ``A2 gR2^H`` to ``gQ`` for ``A1 = Q R1``."""
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
        extra = matmul(a2, mH(gr2))
        gq = extra if gq is None else add(gq, extra)
    ga1 = _qr_square(q, r1, gq, gr1)
    ga2 = matmul(q, gr2) if gr is not None else zeros_like(a[..., :, m:])
    return [concatenate([ga1, ga2], axis=-1)]

