"""``qt.fft``: the Array API (2024.12) FFT extension, and NumPy's two-dimensional transforms
(``fft2``, ``ifft2``, ``rfft2``, ``irfft2``, with NumPy's signatures).

The transforms run as library tasks (pocketfft through NumPy on the CPU) and are
differentiable (JAX's convention for complex gradients; see
:mod:`qtrace.ad.fft_rules`); ``fftshift``/``ifftshift`` are lazy compositions of
``qt.roll`` and ``fftfreq``/``rfftfreq`` constants. Dtypes, ``norm`` and the ``n``/``s``
lengths are described in :mod:`qtrace.tracer.fft_ext`.

Example:
    >>> import qtrace as qt
    >>> x = qt.asarray([1.0, 2.0, 3.0, 4.0])
    >>> qt.fft.rfft(x).tolist()
    [(10+0j), (-2+2j), (-2+0j)]
    >>> qt.grad(lambda v: qt.sum(qt.abs(qt.fft.fft(v)) ** 2))(x).tolist()
    [8.0, 16.0, 24.0, 32.0]
"""

from .tracer.fft_ext import (
    fft,
    fft2,
    fftfreq,
    fftn,
    fftshift,
    hfft,
    ifft,
    ifft2,
    ifftn,
    ifftshift,
    ihfft,
    irfft,
    irfft2,
    irfftn,
    rfft,
    rfft2,
    rfftfreq,
    rfftn,
)

__all__ = [
    "fft",
    "ifft",
    "fftn",
    "ifftn",
    "rfft",
    "irfft",
    "rfftn",
    "irfftn",
    "hfft",
    "ihfft",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
    "fft2",
    "ifft2",
    "rfft2",
    "irfft2",
]
