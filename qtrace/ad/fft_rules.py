"""Reverse mode through the ``qt.fft`` library functions (``lib`` nodes ``fft.*``).

Every transform is linear, so its VJP is its transpose with the matching
normalization, in JAX's convention for complex cotangents (a complex-linear map
``y = A x`` sends ``ct`` to ``A^T ct``; a map that is only real-linear, such as the
ones reading a Hermitian half-spectrum, to ``conj(L^* conj(ct))`` with ``L^*`` its real
adjoint). With ``dual`` the norm that scales the opposite way (backward <-> forward,
ortho <-> ortho) and ``w`` the Hermitian weights along the last transformed axis of the
half-spectrum (2 for the terms that stand for a conjugate pair, 1 for the zero and,
at even lengths, the Nyquist frequency):

* ``fftn``/``ifftn``: the DFT matrix is symmetric: ``gx = fftn(ct)`` (``ifftn(ct)``),
  same axes and norm.
* ``rfftn`` (``y = crop(F x)``, ``x`` real): ``gx = real(F pad(ct))``, computed as
  ``irfftn(conj(ct) / w, norm=dual)`` (the imaginary parts that ``irfftn`` ignores are
  exactly those the real part drops).
* ``irfftn``: ``gX = w * conj(rfftn(ct, norm=dual))``.
* ``hfft`` (``irfft(conj(x), norm=dual)``): ``gx = w * rfft(ct, norm)``.
* ``ihfft`` (``conj(rfft(x, norm=dual))``): ``gx = irfft(ct / w, n, norm)``.

The rules are written with ``qt.fft`` calls, so the backward graph is an ordinary lazy
graph (differentiable again).
"""

from __future__ import annotations

import numpy as np

from ..tracer import elementwise as ew
from ..tracer import fft_ext as F
from ..tracer.array_api import conj
from ..tracer.creation import asarray
from .library import lib_rule


def _weights(n: int, axis: int, ndim: int, dtype):
    """The Hermitian weights of a half-spectrum of a length-``n`` signal, shaped to
    broadcast along ``axis`` of an ``ndim``-d array (real ``dtype``)."""
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return asarray(w.reshape((-1,) + (1,) * (ndim - 1 - axis)).astype(F.real_dtype(dtype)))


@lib_rule("fft.fftn")
def _fftn(node, cts, xs, outs):
    axes, norm = node.params[1]
    return [F.fftn(cts[0], axes=axes, norm=norm)]


@lib_rule("fft.ifftn")
def _ifftn(node, cts, xs, outs):
    axes, norm = node.params[1]
    return [F.ifftn(cts[0], axes=axes, norm=norm)]


@lib_rule("fft.rfftn")
def _rfftn(node, cts, xs, outs):
    axes, norm = node.params[1]
    x = xs[0]
    w = _weights(x.shape[axes[-1]], axes[-1], x.ndim, x.dtype)
    s = [x.shape[a] for a in axes]
    return [F.irfftn(ew.divide(conj(cts[0]), w), s=s, axes=axes, norm=F.DUAL_NORM[norm])]


@lib_rule("fft.irfftn")
def _irfftn(node, cts, xs, outs):
    axes, n, norm = node.params[1]
    ct = cts[0]
    w = _weights(n, axes[-1], ct.ndim, ct.dtype)
    return [ew.multiply(w, conj(F.rfftn(ct, axes=axes, norm=F.DUAL_NORM[norm])))]


@lib_rule("fft.hfft")
def _hfft(node, cts, xs, outs):
    axis, n, norm = node.params[1]
    ct = cts[0]
    return [ew.multiply(_weights(n, axis, ct.ndim, ct.dtype), F.rfft(ct, axis=axis, norm=norm))]


@lib_rule("fft.ihfft")
def _ihfft(node, cts, xs, outs):
    axis, norm = node.params[1]
    x = xs[0]
    n = x.shape[axis]
    w = _weights(n, axis, x.ndim, x.dtype)
    return [F.irfft(ew.divide(cts[0], w), n=n, axis=axis, norm=norm)]
