"""``qtrace.random``: counter-based random numbers (see :mod:`qtrace.tracer.random`)."""

from .tracer.random import (
    Generator,
    bernoulli,
    bits,
    choice,
    default_rng,
    exponential,
    integers,
    key,
    normal,
    permutation,
    rand,
    randint,
    randn,
    random,
    random_sample,
    ranf,
    sample,
    seed,
    shuffle,
    split,
    standard_normal,
    uniform,
)

__all__ = ["Generator", "bernoulli", "bits", "choice", "default_rng", "exponential", "integers",
           "key", "normal", "permutation", "rand", "randint", "randn", "random", "random_sample",
           "ranf", "sample", "seed", "shuffle", "split", "standard_normal", "uniform"]
