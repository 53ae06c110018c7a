"""Reverse-mode automatic differentiation: VJP rules and the reverse pass over graphs."""

from .api import grad, value_and_grad, vjp

__all__ = ["grad", "value_and_grad", "vjp"]
