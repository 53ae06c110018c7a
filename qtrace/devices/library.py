"""Library steps: work that a well-kept library does best (BLAS, LAPACK, sorting, FFT).

A library step of a plan computes one ``matmul`` node or the components of one ``lib``
node (``params = (name, static arguments, number of outputs, component)``) from the
buffers of its inputs. Its implementation is looked up here by name and device kind;
an implementation takes the static arguments and the input arrays and returns one
array per output component. The runtime makes each result C-contiguous and of the
node's dtype (what the plan's kernels read), so implementations may return NumPy's own
results as they come.

An implementation receives the array module of the device's buffers first (``numpy``
on the CPU, ``cupy`` on a CUDA GPU), so one definition serves every device whose array
library mirrors NumPy's API (``register(name, DEVICES)``). On the CPU that is NumPy
(LAPACK, pocketfft, its sorts); on a GPU CuPy (cuBLAS, cuSOLVER, cuFFT, its sorts). A
function registered for the CPU only runs on a GPU by a round trip through host memory
(counted in ``qt.stats()["library_host_round_trips"]``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..stats import bump

IMPLEMENTATIONS: dict = {}   # (name, device kind) -> fn(xp, static, *inputs) -> list of arrays
WRITES_OUT: set = set()      # the names whose implementations also take ``out=[array, ...]``
DEVICES = ("cpu", "cuda")    # the device kinds whose array library mirrors NumPy


def register(name: str, devices: tuple = ("cpu",), writes_out: bool = False) -> Callable:
    """Decorator: ``fn(xp, static, *inputs) -> [array, ...]`` computes library function
    ``name`` on each device kind of ``devices`` (``xp``: that device's array module).

    ``writes_out``: ``fn`` also takes ``out=[array, ...]``, buffers of the outputs' shapes
    and dtypes from the device runtime, and writes into them (returning them). The runtime
    reuses its large buffers; a library's own allocation of a large result is fresh memory
    on every call (a 2.4 MB matmul result cost ~0.8 ms of page faults, 15x the product)."""
    def deco(fn):
        for device in devices:
            if (name, device) in IMPLEMENTATIONS:
                raise AssertionError(f"library function {name} registered twice for {device}")
            IMPLEMENTATIONS[(name, device)] = fn
        if writes_out:
            WRITES_OUT.add(name)
        return fn
    return deco


def _lib_call(node, outputs: list) -> tuple:
    """A ``lib`` node: ``params = (name, static arguments, number of outputs, component)``."""
    return node.params[0], node.params[1], [n.params[-1] for n in outputs]


# graph primitives run as library calls other than ``lib`` nodes: prim -> fn(node, outputs)
# giving (implementation name, static arguments, output components)
CALLS = {"matmul": lambda node, outputs: ("matmul", (), [0])}


class LibraryStep:
    """One library step of a plan: runs the implementation and returns each output's buffer."""

    def __init__(self, node, outputs: list, rt):
        self.prim = node.prim   # (not the node: a cached plan keeps no graph)
        self.rt = rt   # the device runtime holding the buffers
        self.device = node.device.kind
        self.name, self.static, self.components = CALLS.get(node.prim, _lib_call)(node, outputs)
        self.metas = [(n.shape, n.dtype) for n in outputs]
        fn = IMPLEMENTATIONS.get((self.name, self.device))
        self.host = fn is None and self.device != "cpu"   # run on the host, copy back
        if self.host:
            fn = IMPLEMENTATIONS.get((self.name, "cpu"))
        if fn is None:
            raise NotImplementedError(f"qtrace: library function {self.name!r} has no "
                                      f"implementation on device {node.device}")
        self.fn = fn

    def run(self, inputs: list) -> list:
        if self.host:
            bump("library_host_round_trips")
            outs = self._run(np, [self.rt.to_host(i) for i in inputs])
            return [self.rt.from_host(o) for o in outs]
        return self._run(self.rt.xp, inputs)

    def _run(self, xp, inputs: list) -> list:
        if self.name in WRITES_OUT and not self.host and self._writes_into(inputs):
            out = [self.rt.empty(shape, dtype) for shape, dtype in self.metas]
            results = self.fn(xp, self.static, *inputs, out=out)
        else:
            results = self.fn(xp, self.static, *inputs)
        out = []
        for k, (shape, dtype) in zip(self.components, self.metas):
            r = xp.asarray(results[k])
            if r.dtype != dtype:
                r = r.astype(dtype)
            if r.shape != shape:
                raise AssertionError(f"qtrace: library function {self.name} gave shape {r.shape} "
                                     f"for component {k}, expected {shape}")
            out.append(xp.ascontiguousarray(r).reshape(shape))  # (ascontiguousarray makes 0-d 1-d)
        return out


    def _writes_into(self, inputs: list) -> bool:
        """Whether the results come out in the outputs' own dtypes (then they can be
        written into buffers of those dtypes with no cast); components in order."""
        if self.components != list(range(len(self.metas))):
            return False
        dtype = np.result_type(*[i.dtype for i in inputs])
        return all(d == dtype for _, d in self.metas)


@register("matmul", ("cuda",), writes_out=True)   # (the CPU's: qtrace.devices.cpu_matmul)
def _matmul(xp, static, a, b, out=None):
    return [xp.matmul(a, b, out=None if out is None else out[0])]

