"""Cellular automaton: Conway's Game of Life.

Modelled on the NumPy version in Nicolas Rougier's "From Python to NumPy" (chapter
"Code vectorization", uniform vectorization), written here from its description: an
integer grid ``Z`` whose border cells stay dead; the live neighbours of every interior
cell are the sum of eight shifted slices ``Z[:-2, :-2] + Z[:-2, 1:-1] + ...``; ``birth
= (N == 3) & (Z[1:-1, 1:-1] == 0)``, ``survive = ((N == 2) | (N == 3)) & (Z[1:-1, 1:-1]
== 1)``; then ``Z[...] = 0`` and ``Z[1:-1, 1:-1][birth | survive] = 1``, a boolean-mask
write through a view. The initial grid is random (seeded), about half alive.

Check: exact. The error is the number of cells that differ from the NumPy run's final
grid (tolerance 0); the row's note gives the live-cell count.
"""

from __future__ import annotations

import numpy as np

NAME = "life"
SIZES = {
    "tiny": [dict(n=16, steps=5)],
    "quick": [dict(n=128, steps=50)],
    "full": [dict(n=512, steps=300)],
}
TOL = 0.0
ERROR_KIND = "cells differing"


def title(prm) -> str:
    return (f"Game of Life (Rougier, From Python to NumPy): {prm['n']}×{prm['n']}, "
            f"{prm['steps']} steps, int64")


def initial(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, (n, n))


# --------------------------------------------------------------------------- NumPy style

def make_step(xp, prm):
    def iterate(Z):
        # Count neighbours
        N = (Z[0:-2, 0:-2] + Z[0:-2, 1:-1] + Z[0:-2, 2:] +
             Z[1:-1, 0:-2] + Z[1:-1, 2:] +
             Z[2:, 0:-2] + Z[2:, 1:-1] + Z[2:, 2:])
        # Apply rules
        birth = (N == 3) & (Z[1:-1, 1:-1] == 0)
        survive = ((N == 2) | (N == 3)) & (Z[1:-1, 1:-1] == 1)
        Z[...] = 0
        Z[1:-1, 1:-1][birth | survive] = 1
        return Z

    return iterate


def program(xp, prm, step=None):
    Z = xp.asarray(initial(prm["n"]))
    step = step or make_step(xp, prm)
    for _ in range(prm["steps"]):
        Z = step(Z)
    return (Z,)


# --------------------------------------------------------------------------- JAX port

def make_jax(jax, prm):
    jnp = jax.numpy

    @jax.jit
    def iterate(Z):
        N = (Z[0:-2, 0:-2] + Z[0:-2, 1:-1] + Z[0:-2, 2:] +
             Z[1:-1, 0:-2] + Z[1:-1, 2:] +
             Z[2:, 0:-2] + Z[2:, 1:-1] + Z[2:, 2:])
        birth = (N == 3) & (Z[1:-1, 1:-1] == 0)
        survive = ((N == 2) | (N == 3)) & (Z[1:-1, 1:-1] == 1)
        return jnp.zeros_like(Z).at[1:-1, 1:-1].set(jnp.where(birth | survive, 1, 0))

    def run():
        Z = jnp.asarray(initial(prm["n"]))
        for _ in range(prm["steps"]):
            Z = iterate(Z)
        return (Z,)

    return run


def error(got, ref) -> float:
    if len(got) != 1 or got[0].shape != ref[0].shape:
        return float("inf")
    return float(np.count_nonzero(got[0] != ref[0]))


def note(got) -> str:
    return f"{int(np.sum(got[0]))} live" if got else ""
