"""Library steps: work that a well-kept library does best (BLAS, LAPACK, sorting, FFT).

A library step of a plan computes one ``matmul`` node or the components of one ``lib``
node (``params = (name, static arguments, number of outputs, component)``) from the
buffers of its inputs. Its implementation is looked up here by name and device kind;
an implementation takes the static arguments and the input arrays and returns one
array per output component. The runtime makes each result C-contiguous and of the
node's dtype (what the plan's kernels read), so implementations may return NumPy's own
results as they come.

CPU implementations are NumPy's (LAPACK, pocketfft, its sorts); a device without an
implementation of a name raises ``NotImplementedError`` naming both.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

IMPLEMENTATIONS: dict = {}   # (name, device kind) -> fn(static, *inputs) -> list of arrays


def register(name: str, device: str = "cpu") -> Callable:
    """Decorator: ``fn(static, *inputs) -> [array, ...]`` computes library function ``name``."""
    def deco(fn):
        if (name, device) in IMPLEMENTATIONS:
            raise AssertionError(f"library function {name} registered twice for {device}")
        IMPLEMENTATIONS[(name, device)] = fn
        return fn
    return deco


class LibraryStep:
    """One library step of a plan: runs the implementation and returns each output's buffer."""

    def __init__(self, node, outputs: list, xp=np):
        self.node = node
        self.xp = xp   # the array module of the device's buffers
        self.device = node.device.kind
        if node.prim == "matmul":
            self.name, self.static, self.components = "matmul", (), [0]
        else:
            self.name, self.static = node.params[0], node.params[1]
            self.components = [n.params[-1] for n in outputs]
        self.metas = [(n.shape, n.dtype) for n in outputs]
        fn = IMPLEMENTATIONS.get((self.name, self.device))
        if fn is None:
            raise NotImplementedError(f"qtrace: library function {self.name!r} has no "
                                      f"implementation on device {node.device}")
        self.fn = fn

    def run(self, inputs: list) -> list:
        results = self.fn(self.static, *inputs)
        xp = self.xp
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


@register("matmul")
def _matmul(static, a, b):
    return [np.matmul(a, b)]
