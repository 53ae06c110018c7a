"""CPU implementations of the ``qt.fft`` library functions: NumPy's pocketfft.

Each takes the call's static arguments (transformed axes, output length, ``norm``) and
its input array (C contiguous, already cropped or zero-padded to the transform's
lengths by the recorded graph) and returns one array (see
:mod:`qtrace.devices.library`). NumPy 2 transforms float32/complex64 in single
precision; the runtime casts each result to the node's dtype.
"""

from __future__ import annotations

import numpy as np

from .library import register


@register("fft.fftn")
def _fftn(static, x):
    axes, norm = static
    return [np.fft.fftn(x, axes=axes, norm=norm)]


@register("fft.ifftn")
def _ifftn(static, x):
    axes, norm = static
    return [np.fft.ifftn(x, axes=axes, norm=norm)]


@register("fft.rfftn")
def _rfftn(static, x):
    axes, norm = static
    return [np.fft.rfftn(x, axes=axes, norm=norm)]


@register("fft.irfftn")
def _irfftn(static, x):
    axes, n, norm = static
    s = [x.shape[a] for a in axes[:-1]] + [n]
    return [np.fft.irfftn(x, s=s, axes=axes, norm=norm)]


@register("fft.hfft")
def _hfft(static, x):
    axis, n, norm = static
    return [np.fft.hfft(x, n=n, axis=axis, norm=norm)]


@register("fft.ihfft")
def _ihfft(static, x):
    axis, norm = static
    return [np.fft.ihfft(x, axis=axis, norm=norm)]
