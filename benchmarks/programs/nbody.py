"""Particle simulation: gravitational N-body, leapfrog (kick–drift–kick), Plummer softening.

Modelled on Philip Mocz's "nbody-python" (pmocz/nbody-python), written here from its
description: ``N`` particles of equal mass (total 20, G = 1), positions and velocities
standard normal (seeded), the centre-of-mass velocity removed, softening length 0.1,
``dt = 0.01``. The accelerations are all-pairs, as in that program: column views
``x = pos[:, 0:1]``, separations ``dx = x.T - x`` (N × N by broadcasting), ``inv_r3 =
dx**2 + dy**2 + dz**2 + soft**2`` then ``inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0] **
(-1.5)`` (a boolean-mask read and write), ``ax = G * (dx * inv_r3) @ mass``, stacked with
``np.hstack``. The step updates in place: ``vel += acc * dt / 2.0``, ``pos += vel * dt``.

Check: norm-wise relative error of the final positions and velocities vs the NumPy run,
≤ 1e-9. The dynamics are chaotic, so rounding differences (the order of the ``@`` sums)
grow: measured at N = 500, a 1e-15 relative perturbation of the initial state reaches
~1e-14 after 100 steps (JAX, summing in another order, differs by ~2e-15); the bound
leaves 1e4 or more of margin, while one step fewer is off by ~3e-2.
"""

from __future__ import annotations

import numpy as np

from ._common import norm_rel_err

NAME = "nbody"
G, SOFTENING, DT, TOTAL_MASS = 1.0, 0.1, 0.01, 20.0
SIZES = {
    "tiny": [dict(n=16, steps=5)],
    "quick": [dict(n=200, steps=50)],
    "full": [dict(n=500, steps=100)],
}
TOL = 1e-9
ERROR_KIND = "max rel err"


def title(prm) -> str:
    return (f"N-body leapfrog (Mocz, nbody-python): N={prm['n']}, {prm['steps']} steps, "
            "float64")


def initial(n: int, seed: int = 17) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3)), rng.standard_normal((n, 3))


# --------------------------------------------------------------------------- NumPy style

def get_acc(xp, pos, mass, G, softening):
    """All-pairs accelerations, ``(N, 3)``."""
    x = pos[:, 0:1]
    y = pos[:, 1:2]
    z = pos[:, 2:3]
    dx = x.T - x
    dy = y.T - y
    dz = z.T - z
    inv_r3 = dx ** 2 + dy ** 2 + dz ** 2 + softening ** 2
    inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0] ** (-1.5)
    ax = G * (dx * inv_r3) @ mass
    ay = G * (dy * inv_r3) @ mass
    az = G * (dz * inv_r3) @ mass
    return xp.hstack((ax, ay, az))


def make_step(xp, prm):
    def step(pos, vel, acc, mass):
        vel += acc * DT / 2.0
        pos += vel * DT
        acc = get_acc(xp, pos, mass, G, SOFTENING)
        vel += acc * DT / 2.0
        return pos, vel, acc

    return step


def program(xp, prm, step=None):
    n = prm["n"]
    pos0, vel0 = initial(n)
    mass = TOTAL_MASS * xp.ones((n, 1)) / n
    pos = xp.asarray(pos0)
    vel = xp.asarray(vel0)
    vel -= xp.mean(mass * vel, 0) / xp.mean(mass)  # centre-of-mass frame
    acc = get_acc(xp, pos, mass, G, SOFTENING)
    step = step or make_step(xp, prm)
    for _ in range(prm["steps"]):
        pos, vel, acc = step(pos, vel, acc, mass)
    return pos, vel


# --------------------------------------------------------------------------- JAX port

def make_jax(jax, prm):
    jnp = jax.numpy
    n = prm["n"]

    def acc_of(pos, mass):
        x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
        dx, dy, dz = x.T - x, y.T - y, z.T - z
        r2 = dx ** 2 + dy ** 2 + dz ** 2 + SOFTENING ** 2
        inv_r3 = jnp.where(r2 > 0, r2 ** (-1.5), r2)
        return jnp.hstack((G * (dx * inv_r3) @ mass, G * (dy * inv_r3) @ mass,
                           G * (dz * inv_r3) @ mass))

    @jax.jit
    def step(pos, vel, acc, mass):
        vel = vel + acc * DT / 2.0
        pos = pos + vel * DT
        acc = acc_of(pos, mass)
        return pos, vel + acc * DT / 2.0, acc

    start = jax.jit(lambda pos, vel, mass: (
        vel - jnp.mean(mass * vel, 0) / jnp.mean(mass), acc_of(pos, mass)))

    def run():
        pos0, vel0 = initial(n)
        mass = TOTAL_MASS * jnp.ones((n, 1)) / n
        pos = jnp.asarray(pos0)
        vel, acc = start(pos, jnp.asarray(vel0), mass)
        for _ in range(prm["steps"]):
            pos, vel, acc = step(pos, vel, acc, mass)
        return pos, vel

    return run


def error(got, ref) -> float:
    return norm_rel_err(got, ref)
