"""``qt.cuda``: CUDA streams for qtrace's GPU work.

qtrace queues its kernels, copies and library calls on the *current stream* of the GPU,
which is CuPy's: ``with qt.cuda.Stream():`` makes a new stream current on this thread
(so does a ``cupy.cuda.Stream`` — qtrace code run inside CuPy code under a stream uses
it). Work on one stream runs in order; work on different streams may overlap.

Reading a value (``.numpy()``, ``print``, ``float``) waits for the work that computed it
on whichever stream it ran, so a value computed under a stream reads correctly outside
it, from a non-blocking stream too; ``qt.sync()`` waits for the work of every stream;
``Stream.synchronize()`` for one. Index and adstack checks of the work are reported at
those points (``qt.sync()``, a read, ``Stream.synchronize()``).

Example:
    >>> import qtrace as qt
    >>> callable(qt.cuda.Stream) and callable(qt.cuda.current_stream)
    True
"""

from __future__ import annotations

from .graph.device import Device
from .tracer.convert import usable_device

__all__ = ["Stream", "current_stream"]


class Stream:
    """A CUDA stream of one GPU (a ``cupy.cuda.Stream``); a context manager making it the
    current stream of this thread.

    ``device``: the GPU (default ``cuda:0``, or the one ``qt.config.device`` names);
    ``non_blocking``: the stream does not wait for the legacy default stream (qtrace's
    reads still wait for it).

    Example (on a machine with a GPU)::

        s = qt.cuda.Stream()
        with s:
            y = step(x)          # queued on s
        s.synchronize()          # waits for it; y.numpy() alone would wait too
    """

    def __init__(self, device: Device | str | None = None, non_blocking: bool = False,
                 _cupy_stream=None):
        from .devices import cuda
        if _cupy_stream is not None:
            self.device, self.cupy = Device(device), _cupy_stream
            return
        dev = Device(device if device is not None else _default_gpu())
        if dev.kind != "cuda":
            raise ValueError(f"qt.cuda.Stream: {dev} is not a CUDA device")
        usable_device(dev, "cuda.Stream")
        cupy = cuda._cupy()
        with cupy.cuda.Device(dev.index):
            self.cupy = cupy.cuda.Stream(non_blocking=non_blocking)
        self.device = dev

    @property
    def ptr(self) -> int:
        """The ``cudaStream_t`` handle (0: the legacy default stream)."""
        return self.cupy.ptr

    @property
    def done(self) -> bool:
        """Whether every piece of work queued on this stream has finished."""
        return self.cupy.done

    def synchronize(self) -> None:
        """Wait for this stream's work, then report any failed check of qtrace's work."""
        from .devices import cuda
        self.cupy.synchronize()
        with cuda._cupy().cuda.Device(self.device.index):
            cuda.forget_stream(self.cupy)
        cuda.check_deferred()

    def __enter__(self) -> Stream:
        from .devices import cuda
        self._device_ctx = cuda._cupy().cuda.Device(self.device.index)
        self._device_ctx.__enter__()
        self.cupy.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.cupy.__exit__(*exc)
        finally:
            self._device_ctx.__exit__(*exc)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.device == self.device and other.ptr == self.ptr

    __hash__ = None

    def __repr__(self) -> str:
        return f"qt.cuda.Stream(device='{self.device}', ptr={self.ptr:#x})"


def current_stream(device: Device | str | None = None) -> Stream:
    """The stream qtrace queues work on now for ``device`` (default: as :class:`Stream`).

    Example (on a machine with a GPU)::

        with qt.cuda.Stream() as s:
            assert qt.cuda.current_stream() == s
    """
    from .devices import cuda
    dev = Device(device if device is not None else _default_gpu())
    usable_device(dev, "cuda.current_stream")
    cupy = cuda._cupy()
    with cupy.cuda.Device(dev.index):
        return Stream(dev, _cupy_stream=cupy.cuda.get_current_stream())


def _default_gpu() -> str:
    from .config import config
    return config.device if Device(config.device).kind == "cuda" else "cuda:0"
