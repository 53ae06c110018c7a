"""Reaction–diffusion: the Gray-Scott model.

Modelled on the Gray-Scott example of Nicolas Rougier's "From Python to NumPy" (chapter
"Code vectorization", spatial vectorization), written here from its description: two
``(n+2) × (n+2)`` fields ``U``, ``V`` whose one-cell border stays 0, interior views ``u
= U[1:-1, 1:-1]``, ``v = V[1:-1, 1:-1]``; start ``u[...] = 1``, a central square of
``U = 0.5``, ``V = 0.25``, plus 5% uniform noise (seeded) added through the views. Each
step takes the 5-point Laplacians ``Lu = U[0:-2, 1:-1] + U[1:-1, 0:-2] - 4*U[1:-1, 1:-1]
+ U[1:-1, 2:] + U[2:, 1:-1]`` and updates in place through the views: ``u += Du*Lu - uvv
+ F*(1 - u)``, ``v += Dv*Lv + uvv - (F + k)*v``. ``Du, Dv, F, k = 0.16, 0.08, 0.060,
0.062`` (the "coral" pattern), unit time step.

Check: norm-wise relative error of ``U`` and ``V`` vs the NumPy run, ≤ 1e-9. The pattern
forms by a Turing instability that amplifies perturbations slowly (measured: a 1e-15
relative perturbation of the initial state grows to ~1e-13 over the 4000 steps; JAX differs
by ~6e-14), while one step fewer changes the fields by ~5e-3 relative, so rounding passes
and a missed or dropped update (a write through a view that went nowhere) fails.
"""

from __future__ import annotations

import numpy as np

from ._common import norm_rel_err

NAME = "gray_scott"
DU, DV, FEED, KILL = 0.16, 0.08, 0.060, 0.062
SIZES = {
    "tiny": [dict(n=16, steps=10)],
    "quick": [dict(n=64, steps=500)],
    "full": [dict(n=128, steps=4000)],
}
TOL = 1e-9
ERROR_KIND = "max rel err"


def title(prm) -> str:
    return (f"Gray-Scott reaction–diffusion (Rougier, From Python to NumPy): "
            f"{prm['n']}×{prm['n']}, {prm['steps']} steps, float64")


def noise(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, n)), rng.random((n, n))


def laplacian(Z):
    return Z[0:-2, 1:-1] + Z[1:-1, 0:-2] - 4 * Z[1:-1, 1:-1] + Z[1:-1, 2:] + Z[2:, 1:-1]


# --------------------------------------------------------------------------- NumPy style

def make_step(xp, prm):
    def update(U, V):
        u, v = U[1:-1, 1:-1], V[1:-1, 1:-1]
        Lu = laplacian(U)
        Lv = laplacian(V)
        uvv = u * v * v
        u += DU * Lu - uvv + FEED * (1 - u)
        v += DV * Lv + uvv - (FEED + KILL) * v
        return U, V

    return update


def program(xp, prm, step=None):
    n = prm["n"]
    U = xp.zeros((n + 2, n + 2))
    V = xp.zeros((n + 2, n + 2))
    u, v = U[1:-1, 1:-1], V[1:-1, 1:-1]
    r, c = n // 6, n // 2 + 1
    u[...] = 1.0
    U[c - r:c + r, c - r:c + r] = 0.50
    V[c - r:c + r, c - r:c + r] = 0.25
    noise_u, noise_v = noise(n)
    u += 0.05 * xp.asarray(noise_u)
    v += 0.05 * xp.asarray(noise_v)
    step = step or make_step(xp, prm)
    for _ in range(prm["steps"]):
        U, V = step(U, V)
    return U, V


# --------------------------------------------------------------------------- JAX port

def make_jax(jax, prm):
    jnp = jax.numpy
    n = prm["n"]

    @jax.jit
    def start(noise_u, noise_v):
        r, c = n // 6, n // 2 + 1
        U = jnp.zeros((n + 2, n + 2)).at[1:-1, 1:-1].set(1.0)
        U = U.at[c - r:c + r, c - r:c + r].set(0.50)
        V = jnp.zeros((n + 2, n + 2)).at[c - r:c + r, c - r:c + r].set(0.25)
        U = U.at[1:-1, 1:-1].add(0.05 * noise_u)
        V = V.at[1:-1, 1:-1].add(0.05 * noise_v)
        return U, V

    @jax.jit
    def update(U, V):
        u, v = U[1:-1, 1:-1], V[1:-1, 1:-1]
        uvv = u * v * v
        U = U.at[1:-1, 1:-1].add(DU * laplacian(U) - uvv + FEED * (1 - u))
        V = V.at[1:-1, 1:-1].add(DV * laplacian(V) + uvv - (FEED + KILL) * v)
        return U, V

    def run():
        U, V = start(*map(jnp.asarray, noise(n)))
        for _ in range(prm["steps"]):
            U, V = update(U, V)
        return U, V

    return run


def error(got, ref) -> float:
    return norm_rel_err(got, ref)
