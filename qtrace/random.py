"""``qtrace.random``: counter-based random numbers (see :mod:`qtrace.tracer.random`)."""

from .tracer.random import (
    Generator,
    bernoulli,
    bits,
    choice,
    default_rng,
    integers,
    key,
    normal,
    permutation,
    split,
    uniform,
)

__all__ = ["Generator", "bernoulli", "bits", "choice", "default_rng", "integers", "key", "normal",
           "permutation", "split", "uniform"]
