"""Reverse-mode automatic differentiation: VJP rules and the reverse pass over graphs."""

from . import fft_rules, linalg_rules  # noqa: F401 - register the qt.fft and qt.linalg VJP rules
from .api import grad, stop_gradient, value_and_grad, vjp

__all__ = ["grad", "stop_gradient", "value_and_grad", "vjp"]
