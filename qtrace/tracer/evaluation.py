"""``qt.eval``, ``qt.sync``, ``qt.devices`` and moving tensors between devices."""

from __future__ import annotations

import numpy as np

from ..errors import TracerError
from ..graph import evaluate as graph_evaluate
from ..graph.device import CPU, Device
from . import pending
from .context import ad_level, concrete_error, is_abstract
from .convert import input_node, wrap
from .tensor import Tensor


def eval(*tensors) -> None:  # noqa: A001 - the SPEC's name
    """Compute the tensors given, with every other pending value this thread still holds
    (one graph, fused across them).

    Example:
        >>> import qtrace as qt
        >>> x = qt.ones(3); y = x * 2; z = x + 1
        >>> qt.reset_stats(); qt.eval(y, z); qt.stats()["kernel_launches"]
        1
    """
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"qt.eval: expected qt.Tensor arguments, got {type(t).__name__}")
    if ad_level():  # while differentiating, tensors stay connected to their graph
        nodes = tuple(dict.fromkeys(t._node for t in tensors if t._node.prim != "input"))
        for n in nodes:
            if is_abstract(n):
                raise concrete_error("qt.eval")
        if nodes:
            graph_evaluate.evaluate(nodes)
        return
    try:
        pending.flush(tensors)
    except TracerError:
        raise concrete_error("qt.eval") from None


def sync() -> None:
    """Wait for all device work (GPU launches are asynchronous; CPU kernels are not)."""
    graph_evaluate.sync()


def devices() -> list:
    """The devices qtrace can run on: ``[Device('cpu')]`` plus the CUDA GPUs present.

    Example:
        >>> import qtrace as qt
        >>> qt.devices()[0]
        Device('cpu')
    """
    return [CPU, *graph_evaluate.available_devices()]


def to(self: Tensor, device) -> Tensor:
    """This tensor on ``device`` (the same tensor if it is already there): a copy of its
    value in the other device's memory.

    Example:
        >>> import qtrace as qt
        >>> qt.ones(2).to("cpu").device
        Device('cpu')
    """
    dev = Device(device)
    if dev == self.device:
        return self
    why = graph_evaluate.unavailable(dev)
    if why is not None:
        raise ValueError(f"qt.Tensor.to: device {dev} is not available: {why} (devices: "
                         f"{[str(d) for d in devices()]})")
    host = np.array(graph_evaluate.to_host(self._materialize()))
    return wrap(input_node(host, "to", device=dev, owned=True))


Tensor.to = to
