"""``qt.fft``: the Array API (2024.12) FFT extension.

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
    fftfreq,
    fftn,
    fftshift,
    hfft,
    ifft,
    ifftn,
    ifftshift,
    ihfft,
    irfft,
    irfftn,
    rfft,
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
]
