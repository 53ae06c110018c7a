"""XLA FFI handlers whose body is Python: the C ABI of ``xla/ffi/api/c_api.h`` in ctypes.

The fallback of ``qt.to_jax`` for plans its native handler
(:mod:`qtrace.devices.xla_native`) does not cover; each call takes the GIL.

XLA calls a registered handler as ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)``. The
handler made here (:func:`handler`):

* answers XLA's metadata query (a call frame whose extension chain holds an
  ``XLA_FFI_Extension_Metadata``: it writes the API version the frame's API reports and
  no traits) without running anything;
* does nothing at the instantiate/prepare/initialize stages;
* at the execute stage, views every argument and result buffer as a NumPy array over
  XLA's own memory (zero-copy: ``dtype``, ``dims`` and ``data`` read from the
  ``XLA_FFI_Buffer``), and calls ``run(args, results)``, which must fill ``results``;
* turns any Python exception of ``run`` into an ``XLA_FFI_Error`` (via the frame's
  ``XLA_FFI_Error_Create``) carrying the exception's type and message, which JAX raises
  as an ``XlaRuntimeError``: never a crash, never silent garbage.

Layouts are the header's. A GPU handler (``platform="cuda"``) views XLA's device buffers as
CuPy arrays and runs with XLA's stream (``XLA_FFI_Stream_Get``) as CuPy's current stream,
so qtrace's launches are ordered with XLA's work on that stream.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..stats import bump
from . import host_pages

EXTENSION_METADATA = 1
STAGE_EXECUTE = 3
BUFFER = 1
ERROR_INVALID_ARGUMENT, ERROR_INTERNAL = 3, 13

DTYPES = {1: np.bool_, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.uint8,
          7: np.uint16, 8: np.uint32, 9: np.uint64, 10: np.float16, 11: np.float32,
          12: np.float64, 15: np.complex64, 18: np.complex128}

P = ctypes.c_void_p


class ExtensionBase(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", P)]


class ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", P),
                ("major_version", ctypes.c_int), ("minor_version", ctypes.c_int)]


class Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", ApiVersion),
                ("traits", ctypes.c_uint32), ("state_type_id", ctypes.c_int64)]


class MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", ExtensionBase), ("metadata", ctypes.POINTER(Metadata))]


class Span(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets have one layout
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", P), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("items", ctypes.POINTER(P))]


class Attrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", P), ("size", ctypes.c_int64),
                ("types", P), ("names", P), ("attrs", P)]


class CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("api", P), ("ctx", P), ("stage", ctypes.c_int), ("args", Span), ("rets", Span),
                ("attrs", Attrs), ("future", P)]


class Buffer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", P), ("dtype", ctypes.c_int),
                ("data", P), ("rank", ctypes.c_int64), ("dims", ctypes.POINTER(ctypes.c_int64))]


class ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", P), ("message", ctypes.c_char_p),
                ("errc", ctypes.c_int)]


class StreamGetArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", P), ("ctx", P), ("stream", P)]


class Api(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", P), ("api_version", ApiVersion),
                ("internal_api", P), ("error_create", P), ("error_get_message", P),
                ("error_destroy", P), ("handler_register", P), ("stream_get", P)]


HANDLER = ctypes.CFUNCTYPE(P, ctypes.POINTER(CallFrame))
ERROR_CREATE = ctypes.CFUNCTYPE(P, ctypes.POINTER(ErrorCreateArgs))
STREAM_GET = ctypes.CFUNCTYPE(P, ctypes.POINTER(StreamGetArgs))


class FfiCallError(RuntimeError):
    """A qtrace function failed inside an XLA custom call (raised by JAX as its own error,
    whose message carries this one's)."""


def _host_array(data: int, shape: tuple, dt: np.dtype, n: int) -> np.ndarray:
    """A NumPy view of host memory (XLA's, no copy)."""
    if n == 0:
        return np.empty(shape, dt)
    raw = (ctypes.c_char * (n * dt.itemsize)).from_address(data)
    return np.frombuffer(raw, dt, n).reshape(shape)


def _host_result(data: int, shape: tuple, dt: np.dtype, n: int) -> np.ndarray:
    """:func:`_host_array` of a result buffer: a large one (a fresh mapping for each call)
    advised for huge pages before it is written (:mod:`qtrace.devices.host_pages`)."""
    host_pages.advise(data, n * dt.itemsize)
    return _host_array(data, shape, dt, n)


def _gpu_array(data: int, shape: tuple, dt: np.dtype, n: int):
    """A CuPy view of GPU memory (XLA's, no copy, not owned), on the GPU that holds it."""
    import cupy
    device = cupy.cuda.runtime.pointerGetAttributes(data).device if data else 0
    with cupy.cuda.Device(device):
        memory = cupy.cuda.UnownedMemory(data, max(n, 1) * dt.itemsize, None, device)
        return cupy.ndarray(shape, dt, cupy.cuda.MemoryPointer(memory, 0))


def _array(buf_ptr: int, view) -> object:
    """A view of one ``XLA_FFI_Buffer`` by ``view(data, shape, dtype, size)``."""
    buf = ctypes.cast(buf_ptr, ctypes.POINTER(Buffer)).contents
    dtype = DTYPES.get(buf.dtype)
    if dtype is None:
        raise TypeError(f"XLA buffer dtype code {buf.dtype} is not supported by qtrace")
    shape = tuple(buf.dims[i] for i in range(buf.rank))
    return view(buf.data, shape, np.dtype(dtype), int(np.prod(shape, dtype=np.int64)) if shape else 1)


def _buffers(span: Span, what: str, view) -> list:
    out = []
    for i in range(span.size):
        if span.types[i] != BUFFER:
            raise TypeError(f"XLA {what} {i} is not a buffer (type {span.types[i]})")
        out.append(_array(span.items[i], view))
    return out


def _stream(frame: CallFrame) -> int:
    """The CUDA stream XLA runs this call on (``XLA_FFI_Stream_Get``)."""
    api = ctypes.cast(frame.api, ctypes.POINTER(Api)).contents
    args = StreamGetArgs(ctypes.sizeof(StreamGetArgs), None, frame.ctx, None)
    err = STREAM_GET(api.stream_get)(ctypes.byref(args))
    if err:
        raise RuntimeError("XLA_FFI_Stream_Get failed")
    return args.stream or 0


class _StreamHandle:
    """A raw ``cudaStream_t`` under the CUDA stream protocol (``__cuda_stream__``)."""

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple:
        return (0, self.ptr)


def _cupy_stream(cupy, ptr: int):
    """XLA's stream ``ptr`` as a CuPy stream: ``Stream.from_external`` through the CUDA
    stream protocol (CuPy 14 deprecates ``ExternalStream``, which older CuPy needs)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamHandle(ptr))
    return cupy.cuda.ExternalStream(ptr)


def _metadata_query(frame: CallFrame) -> bool:
    """If XLA asks for the handler's metadata, answer it; returns whether it asked."""
    ext = frame.extension_start
    while ext:
        base = ext.contents
        if base.type == EXTENSION_METADATA:
            meta = ctypes.cast(ext, ctypes.POINTER(MetadataExtension)).contents.metadata.contents
            api = ctypes.cast(frame.api, ctypes.POINTER(Api)).contents
            meta.api_version.major_version = api.api_version.major_version
            meta.api_version.minor_version = api.api_version.minor_version
            meta.traits = 0
            return True
        ext = ctypes.cast(base.next, ctypes.POINTER(ExtensionBase))
    return False


def _error(frame: CallFrame, exc: BaseException) -> int:
    api = ctypes.cast(frame.api, ctypes.POINTER(Api)).contents
    message = f"qtrace: {type(exc).__name__}: {exc}".encode("utf-8", "replace")
    args = ErrorCreateArgs(ctypes.sizeof(ErrorCreateArgs), None, message,
                           ERROR_INVALID_ARGUMENT if isinstance(exc, (ValueError, TypeError, IndexError))
                           else ERROR_INTERNAL)
    return ERROR_CREATE(api.error_create)(ctypes.byref(args))


def handler(run, platform: str = "cpu"):
    """A ctypes XLA FFI handler calling ``run(args, results)`` at the execute stage: lists of
    NumPy arrays over XLA's host buffers (``platform="cpu"``) or of CuPy arrays over its GPU
    buffers (``"cuda"``, with XLA's stream made CuPy's current stream for the call). Keep
    the returned object alive as long as XLA may call it (``jax.ffi.pycapsule`` of it is
    what ``register_ffi_target`` takes)."""
    gpu = platform.lower() == "cuda"
    view = _gpu_array if gpu else _host_array

    def call(frame_ptr):
        frame = frame_ptr.contents
        try:
            if _metadata_query(frame) or frame.stage != STAGE_EXECUTE:
                return None
            bump("ffi_python_calls")
            args = _buffers(frame.args, "argument", view)
            rets = _buffers(frame.rets, "result", _gpu_array if gpu else _host_result)
            if gpu:   # on the GPU of the call's buffers, on XLA's stream
                import cupy
                device = (args + rets)[0].device.id if args or rets else 0
                with cupy.cuda.Device(device), _cupy_stream(cupy, _stream(frame)):
                    run(args, rets)
                    from .cuda import check_deferred
                    check_deferred()   # (waits for the stream: a failed check is this call's error)
            else:
                run(args, rets)
            return None
        except BaseException as exc:  # noqa: BLE001 - every failure becomes XLA's error
            return _error(frame, exc)
    return HANDLER(call)
