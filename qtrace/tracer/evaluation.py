"""``qt.eval``, ``qt.sync``, ``qt.devices`` and moving tensors between devices."""

from __future__ import annotations

from ..graph import evaluate as graph_evaluate
from ..graph.device import CPU, Device
from ..graph.node import result_leaf
from .context import ad_level, concrete_error
from .tensor import Tensor


def eval(*tensors) -> None:  # noqa: A001 - the SPEC's name
    """Compute every pending tensor given, together (one graph, fused across them).

    Example:
        >>> import qtrace as qt
        >>> x = qt.ones(3); y = x * 2; z = x + 1
        >>> qt.reset_stats(); qt.eval(y, z); qt.stats()["kernel_launches"]
        1
    """
    pending, owners = [], {}
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"qt.eval: expected qt.Tensor arguments, got {type(t).__name__}")
        n = t._node
        if n.prim == "input":
            continue
        for leaf in n.leaves:  # is_abstract, inline
            if leaf.buffer is None:
                raise concrete_error("qt.eval")
        mine = owners.get(id(n))
        if mine is None:
            owners[id(n)] = [t]
            pending.append(n)
        else:
            mine.append(t)
    if not pending:
        return
    buffers = graph_evaluate.evaluate(tuple(pending))
    if ad_level():  # while differentiating, tensors stay connected to their graph
        return
    for n, buf in zip(pending, buffers):
        leaf = result_leaf(n, buf)
        for t in owners[id(n)]:
            t._node = leaf


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
