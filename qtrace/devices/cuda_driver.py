"""CUDA graphs through the driver API (``libcuda``): capture, instantiate, launch, patch.

CuPy's ``Stream.end_capture`` instantiates the captured graph and destroys it at once, so
the graph's nodes are gone; patching a kernel's arguments in an instantiated graph
(``cuGraphExecKernelNodeSetParams``) needs the node of the graph it was instantiated from.
:class:`Graph` keeps both, and :meth:`Graph.patch` rewrites the arguments of every kernel
that reads memory which moved: a jitted step called with new input arrays replays its
graph with their addresses instead of being captured again (qtrace.devices.cuda_graphs).
A scalar a kernel takes by value (``qtrace.kernels.lowering.by_value_args``) is captured
as a distinct mark (:func:`mark`), found among the kernels' parameters, and patched with
each call's value the same way: no copy in the graph, no wait for an earlier replay.

Handles are the runtime's (CuPy's streams, events and kernels): the runtime API is built
on the driver's, whose handles they are. A driver without these functions (older than
CUDA 12) leaves :func:`driver` None, and graphs are captured again instead of patched.

Example (on a GPU):
    >>> from qtrace.devices import cuda_driver
    >>> d = cuda_driver.driver()   # doctest: +SKIP
    >>> d is None or callable(d.cuGraphLaunch)   # doctest: +SKIP
    True
"""

from __future__ import annotations

import ctypes
import threading
from typing import NamedTuple

KERNEL_NODE, COPY_NODE = 0, 1   # CU_GRAPH_NODE_TYPE_KERNEL, _MEMCPY
# nodes that read no input memory: memset (split reductions' scratch), empty, event wait
# and record; any other kind (a child graph, a host function...) keeps a graph unpatched
INERT_NODES = {2, 5, 6, 7}
CAPTURE_RELAXED = 2        # CU_STREAM_CAPTURE_MODE_RELAXED
_PARAMS_OK = 0

_lock = threading.Lock()
_loaded: list = []


class _KernelParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (its first seven fields are the v1 structure)."""

    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.POINTER(ctypes.c_void_p)), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


class CudaDriverError(RuntimeError):
    """A driver call failed (its name and the CUDA error)."""


class _Driver:
    """The libcuda functions graphs use, each checked: a failure raises CudaDriverError."""

    NAMES = ("cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
             "cuGraphLaunch", "cuGraphDestroy", "cuGraphExecDestroy", "cuGraphGetNodes",
             "cuGraphNodeGetType", "cuGraphKernelNodeGetParams_v2",
             "cuGraphExecKernelNodeSetParams_v2", "cuGetErrorName")

    def __init__(self, lib):
        for name in self.NAMES:
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            setattr(self, name.removesuffix("_v2"), fn)

    def check(self, name: str, rc: int) -> None:
        if rc != 0:
            text = ctypes.c_char_p()
            self.cuGetErrorName(rc, ctypes.byref(text))
            raise CudaDriverError(f"qtrace: {name} failed: {(text.value or b'?').decode()} "
                                  f"(CUDA error {rc})")

    def call(self, name: str, *args) -> None:
        self.check(name, getattr(self, name)(*args))


def driver() -> _Driver | None:
    """The driver's graph functions (None: no libcuda, or one without them)."""
    with _lock:
        if not _loaded:
            try:
                _loaded.append(_Driver(ctypes.CDLL("libcuda.so.1")))
            except (OSError, AttributeError):
                _loaded.append(None)
        return _loaded[0]


def begin_capture(stream_ptr: int) -> None:
    """Start capturing ``stream_ptr``'s work (relaxed mode: allocations may happen)."""
    driver().call("cuStreamBeginCapture", ctypes.c_void_p(stream_ptr), CAPTURE_RELAXED)


MARK_BASE = 0xA5C3_0000_0000_0000   # far above any device address (48-bit) or extent


def mark(i: int) -> int:
    """The parameter value a capture gives by-value input ``i`` (found again by :class:`Graph`)."""
    return MARK_BASE | i


class _Kernel:
    """One kernel node: its parameters' values, where each came from (``(input, offset)``
    or None for a value no input contains), and the structure to set them with: its
    parameters in an array of their own, which :meth:`set` rewrites (the driver copies
    them at each call)."""

    __slots__ = ("node", "values", "sources", "params", "block", "addresses")

    def __init__(self, node, values: list, sources: list, params: _KernelParams):
        self.node, self.values, self.sources = node, values, sources
        self.block = (ctypes.c_uint64 * len(values))(*values)
        base = ctypes.addressof(self.block)
        self.addresses = (ctypes.c_void_p * len(values))(*[base + 8 * i for i in range(len(values))])
        self.params = _KernelParams.from_buffer_copy(params)
        self.params.kernelParams = ctypes.cast(self.addresses, ctypes.POINTER(ctypes.c_void_p))

    def set(self, d, graph_exec, new: list) -> None:
        """Make later replays of ``graph_exec`` launch this kernel with parameters ``new``."""
        self.block[:] = new
        d.call("cuGraphExecKernelNodeSetParams", graph_exec, self.node, ctypes.byref(self.params))
        self.values = new


class _Overlap(NamedTuple):
    """A kernel argument inside the ranges of several inputs at a capture (their indices)."""
    inputs: tuple


class Graph:
    """A captured graph, its instantiation, and its kernel nodes' arguments (see the
    module docstring). ``graphExec``: the instantiated graph's handle (as CuPy's Graph)."""

    def __init__(self, stream_ptr: int, spans: list, copies: int = 0, marked: tuple = ()):
        """The graph captured on ``stream_ptr`` since :func:`begin_capture` (ends it), whose
        inputs were the byte ranges ``spans`` (``(address, bytes)``, None for one that
        :meth:`patch` never moves), and whose only copies are ``copies`` uploads of staged
        host arguments (a copy beyond those might read an input: never patched); the inputs
        ``marked`` were passed by value, as their :func:`mark`."""
        d = self._d = driver()
        graph, exec_ = ctypes.c_void_p(), ctypes.c_void_p()
        d.call("cuStreamEndCapture", ctypes.c_void_p(stream_ptr), ctypes.byref(graph))
        self._graph = graph
        try:
            d.call("cuGraphInstantiateWithFlags", ctypes.byref(exec_), graph, ctypes.c_ulonglong(0))
        except CudaDriverError:
            d.cuGraphDestroy(graph)
            self._graph = None
            raise
        self._exec = exec_
        self.graphExec = exec_.value
        self._spans, self._copies = spans, copies
        self._marks = {mark(i): i for i in marked}
        self._kernels = None   # (read at the first patch)

    def kernel_count(self) -> int:
        """How many kernels a replay launches (those of jitted calls inside included)."""
        return sum(1 for node in self._nodes() if self._kind(node) == KERNEL_NODE)

    def _nodes(self):
        d = self._d
        n = ctypes.c_size_t(0)
        d.call("cuGraphGetNodes", self._graph, None, ctypes.byref(n))
        nodes = (ctypes.c_void_p * n.value)()
        d.call("cuGraphGetNodes", self._graph, nodes, ctypes.byref(n))
        return list(nodes)

    def _kind(self, node) -> int:
        kind = ctypes.c_int()
        self._d.call("cuGraphNodeGetType", ctypes.c_void_p(node), ctypes.byref(kind))
        return kind.value

    def launch(self, stream) -> None:
        """Queue a replay on CuPy stream ``stream``."""
        self._d.call("cuGraphLaunch", self._exec, ctypes.c_void_p(stream.ptr))

    def _source(self, v: int):
        """``(input, offset)`` of an argument ``v`` inside one input's range at the capture
        (``(input, -1)``: the value of a marked input); None inside none; an
        :class:`_Overlap` of the inputs inside several (the same memory passed twice: which
        one an argument stands for cannot be told, so it is kept while none of them moves)."""
        if v in self._marks:
            return self._marks[v], -1
        found = [(i, v - a) for i, span in enumerate(self._spans) if span is not None
                 for a, n in (span,) if a <= v < a + n]
        if len(found) > 1:
            return _Overlap(tuple(i for i, _ in found))
        return found[0] if found else None

    def _read_kernels(self) -> list | None:
        """The kernel nodes with their parameter values and sources (None: a kernel whose
        parameter count is unknown, or a node that may read an input otherwise than through
        a kernel's arguments: never patched)."""
        from ..kernels.llvm_nvptx import PARAM_COUNTS  # (every kernel's: 8-byte parameters)
        d = self._d
        kernels, copies = [], 0
        for node in self._nodes():
            kind = self._kind(node)
            if kind == COPY_NODE:
                copies += 1
                if copies > self._copies:
                    return None
            if kind != KERNEL_NODE:
                if kind != COPY_NODE and kind not in INERT_NODES:
                    return None
                continue
            params = _KernelParams()
            d.call("cuGraphKernelNodeGetParams", ctypes.c_void_p(node), ctypes.byref(params))
            count = PARAM_COUNTS.get(params.func)
            if count is None or not params.kernelParams or params.extra:
                return None
            values = [ctypes.c_uint64.from_address(params.kernelParams[i]).value for i in range(count)]
            sources = [self._source(v) for v in values]
            kernels.append(_Kernel(ctypes.c_void_p(node), values, sources, params))
        return kernels

    def patch(self, addresses: list, values: dict | None = None) -> int | None:
        """Make later replays read input ``i`` at ``addresses[i]`` (None: where they read it
        now): every kernel argument that pointed into input ``i``'s range at the capture,
        ``address + k``, becomes ``addresses[i] + k``; and a marked input ``i`` in
        ``values`` becomes that value (its bytes as an integer). Replays already queued are
        not affected (the driver's rule). The number of kernels rewritten; None where this
        graph cannot be patched (nothing changed then), or where an input to move overlapped
        another at the capture (an argument into both cannot be told to follow either;
        by-value scalars are still patched while no input moves)."""
        if self._kernels is None:
            self._kernels = self._read_kernels() or False
        if self._kernels is False:
            return None
        if any(type(src) is _Overlap and any(addresses[i] is not None for i in src.inputs)
               for k in self._kernels for src in k.sources):
            return None
        values = values or {}
        changed = []
        for k in self._kernels:
            new = [v if src is None or type(src) is _Overlap else values.get(src[0], v) if src[1] < 0 else
                   v if addresses[src[0]] is None else addresses[src[0]] + src[1]
                   for v, src in zip(k.values, k.sources)]
            if new != k.values:
                changed.append((k, new))
        for k, new in changed:
            k.set(self._d, self._exec, new)
        return len(changed)

    def __del__(self):
        d = getattr(self, "_d", None)
        if d is None:
            return
        if getattr(self, "_exec", None) is not None:
            d.cuGraphExecDestroy(self._exec)
        if getattr(self, "_graph", None) is not None:
            d.cuGraphDestroy(self._graph)
