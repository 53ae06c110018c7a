"""``qt.eval``, ``qt.sync``, ``qt.devices`` and moving tensors between devices."""

from __future__ import annotations

from ..errors import TracerError
from ..graph import evaluate as graph_evaluate
from ..graph.device import CPU, Device
from . import pending
from .context import ad_level, concrete_error, is_abstract
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
    """Wait for all device work. CPU kernels run synchronously, so this returns at once."""


def devices() -> list:
    """The devices qtrace can run on: ``[Device('cpu')]`` (plus CUDA devices when present)."""
    return [CPU]


def to(self: Tensor, device) -> Tensor:
    """This tensor on ``device`` (the same tensor if it is already there)."""
    dev = Device(device)
    if dev == self.device:
        return self
    raise ValueError(f"qt.Tensor.to: device {dev} is not available (devices: "
                     f"{[str(d) for d in devices()]})")


Tensor.to = to
