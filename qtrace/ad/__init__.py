"""Reverse-mode automatic differentiation (VJP rules, adstack loop reversal)."""
