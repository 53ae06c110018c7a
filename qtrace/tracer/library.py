"""Recording calls of library functions (sorting, linear algebra, FFT) as ``lib`` nodes.

A library function is computed by the device runtime with a well-kept library (see
``qtrace.devices.library``): its inputs are materialized, its outputs are fusion
boundaries, and its gradient is a rule of ``qtrace.ad.library``. The node of component
``k`` has params ``(name, static arguments, output specs, k)``; the specs
(``(shape, dtype string)`` of every output) let any component rebuild its siblings.
"""

from __future__ import annotations

import numpy as np

from ..graph.node import Node
from .context import buffered, record, same_device
from .convert import wrap
from .tensor import Tensor


def call(name: str, inputs: list, static: tuple, outputs: list) -> list:
    """Record library function ``name`` on ``inputs`` (tensors or nodes); ``outputs`` lists
    the ``(shape, dtype)`` of each result. Returns one tensor per result."""
    nodes = tuple(buffered(t._node if isinstance(t, Tensor) else t) for t in inputs)
    device = same_device(name, nodes)
    specs = tuple((tuple(int(d) for d in shape), np.dtype(dtype).str) for shape, dtype in outputs)
    return [wrap(component(nodes, name, static, specs, k, device)) for k in range(len(specs))]


def component(nodes: tuple, name: str, static: tuple, specs: tuple, k: int, device=None) -> Node:
    """The node of result ``k`` of library function ``name`` on ``nodes``."""
    shape, dtype = specs[k]
    return record("lib", nodes, (name, static, specs, k), shape, np.dtype(dtype), device=device)
