"""The ``qt.fft`` library functions: NumPy's pocketfft on the CPU, cuFFT through CuPy on a GPU.

Each takes the call's static arguments (transformed axes, output length, ``norm``) and
its input array (C contiguous, already cropped or zero-padded to the transform's
lengths by the recorded graph) and returns one array (see
:mod:`qtrace.devices.library`). NumPy 2 transforms float32/complex64 in single
precision; the runtime casts each result to the node's dtype.
"""

from __future__ import annotations

from .library import DEVICES, register


@register("fft.fftn", DEVICES)
def _fftn(xp, static, x):
    axes, norm = static
    return [xp.fft.fftn(x, axes=axes, norm=norm)]


@register("fft.ifftn", DEVICES)
def _ifftn(xp, static, x):
    axes, norm = static
    return [xp.fft.ifftn(x, axes=axes, norm=norm)]


@register("fft.rfftn", DEVICES)
def _rfftn(xp, static, x):
    axes, norm = static
    return [xp.fft.rfftn(x, axes=axes, norm=norm)]


@register("fft.irfftn", DEVICES)
def _irfftn(xp, static, x):
    axes, n, norm = static
    s = [x.shape[a] for a in axes[:-1]] + [n]
    return [xp.fft.irfftn(x, s=s, axes=axes, norm=norm)]


@register("fft.hfft", DEVICES)
def _hfft(xp, static, x):
    axis, n, norm = static
    return [xp.fft.hfft(x, n=n, axis=axis, norm=norm)]


@register("fft.ihfft", DEVICES)
def _ihfft(xp, static, x):
    axis, norm = static
    return [xp.fft.ihfft(x, axis=axis, norm=norm)]
