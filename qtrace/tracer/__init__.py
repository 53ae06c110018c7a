"""The user-facing layer: proxy tensors, NumPy-like operations, tracing and ``jit``."""

from . import methods, pending, protocols  # noqa: F401 - attach operators and protocols to Tensor
from .tensor import Tensor

__all__ = ["Tensor"]
