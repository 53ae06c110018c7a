"""The Array API (2024.12) FFT extension: the functions of ``qt.fft``.

The transforms (``fft``, ``ifft``, ``fftn``, ``ifftn``, ``rfft``, ``irfft``, ``rfftn``,
``irfftn``, ``hfft``, ``ihfft``) are library calls (:mod:`qtrace.tracer.library`):
pocketfft through NumPy on the CPU (:mod:`qtrace.devices.lib_fft`), fusion boundaries,
with reverse-mode rules in :mod:`qtrace.ad.fft_rules`. Zero-padding and cropping to the
requested lengths (``n``, ``s``) are ordinary qtrace operations (slices and
concatenations, fused and differentiated as such); every library call transforms its
input at its own lengths. ``fftshift``/``ifftshift`` are compositions of ``qt.roll``
(lazy, fusable, differentiable) and ``fftfreq``/``rfftfreq`` are constants.

Dtypes (the standard's, with NumPy's promotions for the inputs it leaves undefined):

* ``fft``, ``ifft``, ``fftn``, ``ifftn``: complex64 in, complex64 out; complex128 in,
  complex128 out. Real inputs are promoted: float32 to complex64, float64 (and integer
  or boolean arrays, as NumPy converts them) to complex128.
* ``rfft``, ``rfftn``, ``ihfft``: a real input (float32 gives complex64, float64 and
  integers complex128); complex inputs raise ``TypeError``.
* ``irfft``, ``irfftn``, ``hfft``: complex64 gives float32, complex128 (and promoted
  real inputs) float64.

``norm`` is one of ``"backward"`` (the default; ``None`` means it too, as in NumPy),
``"ortho"`` and ``"forward"``. ``s[i] == -1`` means the default length of that axis
(for ``irfftn``'s last axis: ``2 * (M - 1)``). ``s`` without ``axes`` transforms the
last ``len(s)`` axes (NumPy's behavior; the standard requires ``axes``). Repeated
axes are refused (the standard leaves them implementation-defined). Errors name the
function: ``qt.fft.<name>: ...``.

Gradients follow JAX's convention (the transforms are linear: a VJP is the transposed
transform with the matching normalization, see :mod:`qtrace.ad.fft_rules`).

Example:
    >>> import qtrace as qt
    >>> qt.fft.fft(qt.asarray([1.0, 2.0, 3.0, 4.0])).tolist()
    [(10+0j), (-2+2j), (-2+0j), (-2-2j)]
"""

from __future__ import annotations

import operator

import numpy as np

from . import dtypes, library
from . import elementwise as _ew
from .composites import _no_out, roll
from .convert import astype
from .creation import asarray, zeros
from .creation import copy as _copy
from .shape_ops import as_tensor, concatenate, normalize_axis
from .tensor import Tensor

__all__ = [
    "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
    "fftfreq", "rfftfreq", "fftshift", "ifftshift", "fft2", "ifft2", "rfft2", "irfft2",
]

NORMS = ("backward", "ortho", "forward")
DUAL_NORM = {"backward": "forward", "ortho": "ortho", "forward": "backward"}

_COMPLEX_OF = {np.dtype("float32"): dtypes.complex64, np.dtype("complex64"): dtypes.complex64}
_REAL_OF = {np.dtype("complex64"): dtypes.float32, np.dtype("float32"): dtypes.float32}


# --- argument checks -------------------------------------------------------------------
def _tensor(x, name: str) -> Tensor:
    return as_tensor(x, f"fft.{name}")


def _complex(x, name: str) -> Tensor:
    """``x`` as a complex tensor (complex64 for float32/complex64, else complex128)."""
    t = _tensor(x, name)
    if t.dtype.kind not in "fciub":
        raise TypeError(f"qt.fft.{name}: expected a numeric array, got dtype {t.dtype}")
    dt = _COMPLEX_OF.get(t.dtype, dtypes.complex128)
    if t.dtype != dt or t._node.weak:
        t = astype(t, dt)
    return t


def _real(x, name: str) -> Tensor:
    """``x`` as a real floating tensor (float32 stays, others become float64)."""
    t = _tensor(x, name)
    if t.dtype.kind == "c":
        raise TypeError(f"qt.fft.{name}: expected a real-valued array, got dtype {t.dtype}")
    if t.dtype.kind not in "fiub":
        raise TypeError(f"qt.fft.{name}: expected a real-valued numeric array, got dtype {t.dtype}")
    dt = dtypes.float32 if t.dtype == dtypes.float32 else dtypes.float64
    if t.dtype != dt or t._node.weak:
        t = astype(t, dt)
    return t


def complex_dtype(dt) -> np.dtype:
    """The complex dtype of the precision of ``dt``."""
    return _COMPLEX_OF.get(np.dtype(dt), dtypes.complex128)


def real_dtype(dt) -> np.dtype:
    """The real floating dtype of the precision of ``dt``."""
    return _REAL_OF.get(np.dtype(dt), dtypes.float64)


def _norm(norm, name: str) -> str:
    if norm is None:
        return "backward"
    if not isinstance(norm, str) or norm not in NORMS:
        raise ValueError(f'qt.fft.{name}: norm must be "backward", "ortho" or "forward", got {norm!r}')
    return norm


def _length(n, name: str, what: str = "n") -> int:
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"qt.fft.{name}: {what} must be an integer, got {n!r}") from None
    if n < 1:
        raise ValueError(f"qt.fft.{name}: invalid number of data points ({n}); {what} must be at least 1")
    return n


def _sizes_1d(n, name: str) -> tuple | None:
    """``n`` of a one-dimensional transform as the ``s`` of its n-dimensional form."""
    return None if n is None else (_length(n, name),)


def _axis(axis, t: Tensor, name: str) -> int:
    if t.ndim == 0:
        raise ValueError(f"qt.fft.{name}: expected an array of at least one dimension, got a 0-d array")
    return normalize_axis(axis, t.ndim, f"fft.{name}")


def _axes_and_sizes(t: Tensor, s, axes, name: str) -> tuple:
    """The transformed axes (non-negative, in the given order) and the requested size of
    each (``None`` where ``s`` leaves the default)."""
    if s is not None:
        if isinstance(s, (str, bytes)) or not hasattr(s, "__len__"):
            raise TypeError(f"qt.fft.{name}: s must be a sequence of integers, got {s!r}")
        s = list(s)
    if axes is None:
        if s is None:
            axes = tuple(range(t.ndim))
        else:
            if len(s) > t.ndim:
                raise ValueError(f"qt.fft.{name}: s {tuple(s)} has more entries than the array has "
                                 f"dimensions ({t.ndim})")
            axes = tuple(range(t.ndim - len(s), t.ndim))
    else:
        if isinstance(axes, (str, bytes)) or not hasattr(axes, "__len__"):
            raise TypeError(f"qt.fft.{name}: axes must be a sequence of integers, got {axes!r}")
        axes = tuple(normalize_axis(a, t.ndim, f"fft.{name}") for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError(f"qt.fft.{name}: repeated axis in axes {axes}")
    if s is None:
        sizes = [None] * len(axes)
    else:
        if len(s) != len(axes):
            raise ValueError(f"qt.fft.{name}: s and axes must have the same length, got s {tuple(s)} "
                             f"and axes {axes}")
        sizes = []
        for v in s:
            try:
                v = operator.index(v)
            except TypeError:
                raise TypeError(f"qt.fft.{name}: s must hold integers, got {s!r}") from None
            sizes.append(None if v == -1 else _length(v, name, "each entry of s"))
    return axes, sizes


def _resize(t: Tensor, axis: int, size: int) -> Tensor:
    """``t`` cropped or zero-padded (at the end) to ``size`` along ``axis``."""
    m = t.shape[axis]
    if size == m:
        return t
    if size < m:
        return t[(slice(None),) * axis + (slice(0, size),)]
    pad_shape = t.shape[:axis] + (size - m,) + t.shape[axis + 1:]
    return concatenate([t, zeros(pad_shape, dtype=t.dtype, device=t.device)], axis)


def _call(name: str, t: Tensor, static: tuple, shape: tuple, dtype) -> Tensor:
    return library.call(f"fft.{name}", [t], static, [(shape, dtype)])[0]


# --- complex transforms ----------------------------------------------------------------
def _c2c(x, s, axes, norm, name: str, inverse: bool) -> Tensor:
    norm = _norm(norm, name)
    t = _complex(x, name)
    axes, sizes = _axes_and_sizes(t, s, axes, name)
    for ax, n in zip(axes, sizes):
        t = _resize(t, ax, _length(t.shape[ax] if n is None else n, name))
    if not axes:
        return _copy(t)
    return _call("ifftn" if inverse else "fftn", t, (tuple(sorted(axes)), norm), t.shape, t.dtype)


def fft(x, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The one-dimensional discrete Fourier transform along ``axis`` (zero-padded or
    cropped to ``n`` elements first).

    ``norm="backward"`` does not scale, ``"ortho"`` scales by ``1/sqrt(n)``, ``"forward"``
    by ``1/n``. The result is complex (complex64 for float32/complex64 inputs, else
    complex128).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.fft(qt.asarray([1.0, 0.0, 0.0, 0.0]), norm="forward").tolist()
        [(0.25+0j), (0.25+0j), (0.25+0j), (0.25+0j)]
    """
    t = _tensor(x, "fft")
    return _c2c(t, _sizes_1d(n, "fft"), (_axis(axis, t, "fft"),), norm, "fft", False)


def ifft(x, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The one-dimensional inverse discrete Fourier transform along ``axis`` (zero-padded
    or cropped to ``n`` elements first); ``norm="backward"`` scales by ``1/n``.

    Example:
        >>> import qtrace as qt
        >>> qt.real(qt.fft.ifft(qt.fft.fft(qt.asarray([1.0, 2.0, 3.0])))).tolist()
        [1.0, 2.0, 3.0]
    """
    t = _tensor(x, "ifft")
    return _c2c(t, _sizes_1d(n, "ifft"), (_axis(axis, t, "ifft"),), norm, "ifft", True)


def fftn(x, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    """The n-dimensional discrete Fourier transform over ``axes`` (all axes by default),
    each zero-padded or cropped to ``s[i]`` elements first; ``norm`` scales by
    ``prod(s)`` as in ``fft``.

    Example:
        >>> import qtrace as qt
        >>> qt.fft.fftn(qt.ones((2, 3))).tolist()
        [[(6+0j), 0j, 0j], [0j, 0j, 0j]]
    """
    return _c2c(x, s, axes, norm, "fftn", False)


def ifftn(x, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    """The n-dimensional inverse discrete Fourier transform over ``axes`` (all axes by
    default); ``norm="backward"`` scales by ``1/prod(s)``.

    Example:
        >>> import qtrace as qt
        >>> qt.fft.ifftn(qt.asarray([[4.0, 0.0], [0.0, 0.0]])).tolist()
        [[(1+0j), (1+0j)], [(1+0j), (1+0j)]]
    """
    return _c2c(x, s, axes, norm, "ifftn", True)


# --- real transforms -------------------------------------------------------------------
def _r2c(x, s, axes, norm, name: str) -> Tensor:
    norm = _norm(norm, name)
    t = _real(x, name)
    axes, sizes = _axes_and_sizes(t, s, axes, name)
    if not axes:
        raise ValueError(f"qt.fft.{name}: needs at least one axis to transform")
    for ax, n in zip(axes, sizes):
        t = _resize(t, ax, _length(t.shape[ax] if n is None else n, name))
    last = axes[-1]
    shape = t.shape[:last] + (t.shape[last] // 2 + 1,) + t.shape[last + 1:]
    return _call("rfftn", t, (axes, norm), shape, complex_dtype(t.dtype))


def _c2r(x, s, axes, norm, name: str) -> Tensor:
    norm = _norm(norm, name)
    t = _complex(x, name)
    axes, sizes = _axes_and_sizes(t, s, axes, name)
    if not axes:
        raise ValueError(f"qt.fft.{name}: needs at least one axis to transform")
    for ax, n in zip(axes[:-1], sizes[:-1]):
        t = _resize(t, ax, _length(t.shape[ax] if n is None else n, name))
    last = axes[-1]
    n = sizes[-1]
    if n is None:
        n = 2 * (t.shape[last] - 1)
        if n < 1:
            raise ValueError(f"qt.fft.{name}: invalid number of data points ({n}) from an input of length "
                             f"{t.shape[last]} along axis {last}; pass the output length")
    t = _resize(t, last, n // 2 + 1)
    shape = t.shape[:last] + (n,) + t.shape[last + 1:]
    return _call("irfftn", t, (axes, n, norm), shape, real_dtype(t.dtype))


def rfft(x, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The one-dimensional discrete Fourier transform of a real-valued input: the
    ``n // 2 + 1`` non-negative frequency terms (the others are their conjugates).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.rfft(qt.asarray([1.0, 2.0, 3.0, 4.0])).tolist()
        [(10+0j), (-2+2j), (-2+0j)]
    """
    t = _tensor(x, "rfft")
    return _r2c(t, _sizes_1d(n, "rfft"), (_axis(axis, t, "rfft"),), norm, "rfft")


def irfft(x, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of ``rfft``: ``n`` real values (default ``2 * (M - 1)``) from the
    non-negative frequency terms (the input cropped or zero-padded to ``n // 2 + 1``).
    The imaginary parts of the zero (and, for even ``n``, the Nyquist) frequency terms
    are ignored.

    Example:
        >>> import qtrace as qt
        >>> qt.fft.irfft(qt.fft.rfft(qt.asarray([1.0, 2.0, 3.0])), n=3).tolist()
        [1.0, 2.0, 3.0]
    """
    t = _tensor(x, "irfft")
    return _c2r(t, _sizes_1d(n, "irfft"), (_axis(axis, t, "irfft"),), norm, "irfft")


def rfftn(x, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    """The n-dimensional discrete Fourier transform of a real-valued input over ``axes``
    (all by default): the last transformed axis keeps its ``s[-1] // 2 + 1``
    non-negative frequencies.

    Example:
        >>> import qtrace as qt
        >>> qt.fft.rfftn(qt.ones((2, 4))).tolist()
        [[(8+0j), 0j, 0j], [0j, 0j, 0j]]
    """
    return _r2c(x, s, axes, norm, "rfftn")


def irfftn(x, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    """The inverse of ``rfftn``: ``s`` gives the output lengths (default: the input's,
    except ``2 * (M - 1)`` along the last transformed axis).

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        >>> bool(qt.allclose(qt.fft.irfftn(qt.fft.rfftn(x), s=x.shape, axes=(0, 1)), x))
        True
    """
    return _c2r(x, s, axes, norm, "irfftn")


def hfft(x, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The discrete Fourier transform of a signal with Hermitian symmetry given by its
    first half (``n // 2 + 1`` terms): ``n`` real values (default ``2 * (M - 1)``).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.hfft(qt.asarray([1.0, 2.0, 3.0])).tolist()
        [8.0, -2.0, 0.0, -2.0]
    """
    norm = _norm(norm, "hfft")
    t = _complex(x, "hfft")
    axis = _axis(axis, t, "hfft")
    if n is None:
        n = 2 * (t.shape[axis] - 1)
        if n < 1:
            raise ValueError(f"qt.fft.hfft: invalid number of data points ({n}) from an input of length "
                             f"{t.shape[axis]}; pass the output length n")
    n = _length(n, "hfft")
    t = _resize(t, axis, n // 2 + 1)
    shape = t.shape[:axis] + (n,) + t.shape[axis + 1:]
    return _call("hfft", t, (axis, n, norm), shape, real_dtype(t.dtype))


def ihfft(x, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of ``hfft``: the first ``n // 2 + 1`` terms of the Hermitian spectrum
    of a real signal (``norm="backward"`` scales by ``1/n``).

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([1.0, 2.0, 3.0, 4.0])
        >>> qt.fft.ihfft(x).tolist()
        [(2.5-0j), (-0.5-0.5j), (-0.5-0j)]
        >>> qt.fft.hfft(qt.fft.ihfft(x)).tolist()
        [1.0, 2.0, 3.0, 4.0]
    """
    norm = _norm(norm, "ihfft")
    t = _real(x, "ihfft")
    axis = _axis(axis, t, "ihfft")
    t = _resize(t, axis, _length(t.shape[axis] if n is None else n, "ihfft"))
    shape = t.shape[:axis] + (t.shape[axis] // 2 + 1,) + t.shape[axis + 1:]
    return _call("ihfft", t, (axis, norm), shape, complex_dtype(t.dtype))


# --- frequencies and shifts ------------------------------------------------------------
def _freq_dtype(dtype, name: str) -> np.dtype:
    if dtype is None:
        return dtypes.float64
    dt = dtypes.canonical(dtype, f"qt.fft.{name}")
    if dt.kind != "f":
        raise TypeError(f"qt.fft.{name}: dtype must be a real floating-point dtype, got {dt}")
    return dt


def _freqs(ints: np.ndarray, n: int, d, dtype, device, name: str) -> Tensor:
    dt = _freq_dtype(dtype, name)
    if isinstance(d, Tensor):  # a traced spacing: the scale is computed with it
        ks = asarray(ints.astype(np.float64), device=device)
        return astype(_ew.divide(ks, _ew.multiply(d, float(n))), dt)
    try:
        d = float(d)
    except TypeError:
        raise TypeError(f"qt.fft.{name}: d must be a number, got {d!r}") from None
    return asarray((ints * (1.0 / (n * d))).astype(dt), device=device)


def fftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> Tensor:
    """The sample frequencies of a length-``n`` transform with sample spacing ``d``:
    ``[0, 1, ..., n/2-1, -n/2, ..., -1] / (d*n)`` (float64 unless ``dtype`` says otherwise).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.fftfreq(4, d=0.5).tolist()
        [0.0, 0.5, -1.0, -0.5]
    """
    n = _length(n, "fftfreq")
    k = np.arange(n)
    ints = np.where(k < (n - 1) // 2 + 1, k, k - n)
    return _freqs(ints, n, d, dtype, device, "fftfreq")


def rfftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> Tensor:
    """The sample frequencies of ``rfft`` (length ``n``, spacing ``d``):
    ``[0, 1, ..., n//2] / (d*n)`` (float64 unless ``dtype`` says otherwise).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.rfftfreq(5).tolist()
        [0.0, 0.2, 0.4]
    """
    n = _length(n, "rfftfreq")
    return _freqs(np.arange(n // 2 + 1), n, d, dtype, device, "rfftfreq")


def _shift(x, axes, name: str, sign: int) -> Tensor:
    t = _tensor(x, name)
    if axes is None:
        axes = tuple(range(t.ndim))
    elif isinstance(axes, (tuple, list)):
        axes = tuple(normalize_axis(a, t.ndim, f"fft.{name}") for a in axes)
    else:
        axes = (normalize_axis(axes, t.ndim, f"fft.{name}"),)
    shifts = tuple(sign * (t.shape[a] // 2) for a in axes)
    out = roll(t, shifts, axes) if axes else t
    return _copy(out) if out is t else out


def fftshift(x, /, *, axes=None) -> Tensor:
    """The zero-frequency term moved to the center: each of ``axes`` (all by default)
    rolled by half its length. Lazy and differentiable (a ``qt.roll``).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.fftshift(qt.fft.fftfreq(5)).tolist()
        [-0.4, -0.2, 0.0, 0.2, 0.4]
    """
    return _shift(x, axes, "fftshift", 1)


def ifftshift(x, /, *, axes=None) -> Tensor:
    """The inverse of ``fftshift`` (they differ for odd lengths).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.ifftshift(qt.fft.fftshift(qt.arange(5))).tolist()
        [0, 1, 2, 3, 4]
    """
    return _shift(x, axes, "ifftshift", -1)


# --- NumPy's signatures (``np.fft.fft(t, n, axis, norm)`` on tensors) ------------------
def _numpy1(fn):
    def run(a, n=None, axis=-1, norm=None, out=None):
        _no_out(out, f"fft.{fn.__name__}")
        return fn(a, n=n, axis=axis, norm=norm)
    run.__name__ = run.__qualname__ = f"numpy_{fn.__name__}"
    run.__doc__ = f"``numpy.fft.{fn.__name__}(a, n, axis, norm)`` on tensors (see ``{fn.__name__}``)."
    return run


def _numpyn(fn):
    def run(a, s=None, axes=None, norm=None, out=None):
        _no_out(out, f"fft.{fn.__name__}")
        return fn(a, s=s, axes=axes, norm=norm)
    run.__name__ = run.__qualname__ = f"numpy_{fn.__name__}"
    run.__doc__ = f"``numpy.fft.{fn.__name__}(a, s, axes, norm)`` on tensors (see ``{fn.__name__}``)."
    return run


# NumPy's two-dimensional transforms (not in the Array API standard): NumPy's signatures
def fft2(a, s=None, axes=(-2, -1), norm=None, out=None) -> Tensor:
    """``numpy.fft.fft2``: the two-dimensional discrete Fourier transform, ``fftn`` over
    ``axes`` (the last two by default); ``norm=None`` is ``"backward"``.

    Example:
        >>> import qtrace as qt
        >>> qt.fft.fft2(qt.ones((2, 2))).tolist()
        [[(4+0j), 0j], [0j, 0j]]
    """
    _no_out(out, "fft.fft2")
    return _c2c(a, s, axes, norm, "fft2", False)


def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None) -> Tensor:
    """``numpy.fft.ifft2``: the two-dimensional inverse discrete Fourier transform,
    ``ifftn`` over ``axes`` (the last two by default).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.ifft2(qt.asarray([[4.0, 0.0], [0.0, 0.0]])).tolist()
        [[(1+0j), (1+0j)], [(1+0j), (1+0j)]]
    """
    _no_out(out, "fft.ifft2")
    return _c2c(a, s, axes, norm, "ifft2", True)


def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None) -> Tensor:
    """``numpy.fft.rfft2``: the two-dimensional transform of a real input, ``rfftn`` over
    ``axes`` (the last two by default).

    Example:
        >>> import qtrace as qt
        >>> qt.fft.rfft2(qt.ones((2, 4))).tolist()
        [[(8+0j), 0j, 0j], [0j, 0j, 0j]]
    """
    _no_out(out, "fft.rfft2")
    return _r2c(a, s, axes, norm, "rfft2")


def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None) -> Tensor:
    """``numpy.fft.irfft2``: the inverse of ``rfft2``, ``irfftn`` over ``axes`` (the last
    two by default).

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
        >>> bool(qt.allclose(qt.fft.irfft2(qt.fft.rfft2(x)), x))
        True
    """
    _no_out(out, "fft.irfft2")
    return _c2r(a, s, axes, norm, "irfft2")


def _numpy_shift(fn):
    def run(x, axes=None):
        return fn(x, axes=axes)
    run.__name__ = run.__qualname__ = f"numpy_{fn.__name__}"
    return run


NUMPY_FUNCTIONS = {
    np.fft.fft: _numpy1(fft), np.fft.ifft: _numpy1(ifft), np.fft.rfft: _numpy1(rfft),
    np.fft.irfft: _numpy1(irfft), np.fft.hfft: _numpy1(hfft), np.fft.ihfft: _numpy1(ihfft),
    np.fft.fftn: _numpyn(fftn), np.fft.ifftn: _numpyn(ifftn), np.fft.rfftn: _numpyn(rfftn),
    np.fft.irfftn: _numpyn(irfftn), np.fft.fft2: fft2, np.fft.ifft2: ifft2,
    np.fft.rfft2: rfft2, np.fft.irfft2: irfft2,
    np.fft.fftshift: _numpy_shift(fftshift), np.fft.ifftshift: _numpy_shift(ifftshift),
}
