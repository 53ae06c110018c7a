"""Reverse-mode automatic differentiation: VJP rules and the reverse pass over graphs."""

from . import linalg_rules  # noqa: F401 - registers the qt.linalg VJP rules
from .api import grad, value_and_grad, vjp

__all__ = ["grad", "value_and_grad", "vjp"]
