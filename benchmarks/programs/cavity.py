"""CFD stencil: lid-driven cavity flow (2-D incompressible Navier–Stokes).

Modelled on step 11, "Cavity flow with Navier–Stokes", of Lorena Barba's "12 steps to
Navier–Stokes" (CFD Python, barbagroup/CFDPython), written here from its equations:
velocity ``(u, v)`` and pressure ``p`` on an ``n × n`` grid over ``[0, 2]²``, the lid
(top row) moving at ``u = 1``. Each time step copies the velocities (``un = u.copy()``),
fills the pressure equation's source term ``b`` by slice assignment, relaxes the pressure
Poisson equation with ``nit`` Jacobi sweeps (``pn = p.copy()``, ``p[1:-1, 1:-1] = ...``,
Neumann walls ``p[:, -1] = p[:, -2]`` ..., ``p[-1, :] = 0``), then updates the interior
velocities by slice assignment and re-imposes the wall and lid conditions.

``rho = 1``, ``nu = 0.1``, ``dt = 0.001`` (``0.0005`` on the 101 grid, keeping the
explicit diffusion number ``nu·dt·(1/dx² + 1/dy²)`` at or below 0.25).

Check: norm-wise relative error ``max|x - x_ref| / max|x_ref|`` over ``u, v, p`` vs the
NumPy run, ≤ 1e-9. The scheme is stable here (Jacobi sweeps are contractive, the explicit
steps are below their stability limits), so rounding differences (a reordered sum, a
fused multiply-add: ~1e-16 relative each) are not amplified: 100 steps × 50 sweeps stay
around 1e-13 (measured vs JAX, whose sums are fused differently: < 1e-15). One time step
fewer changes the state by ~7e-3 relative, far above.
"""

from __future__ import annotations

from functools import partial

from ._common import norm_rel_err

NAME = "cavity"
RHO, NU = 1.0, 0.1
SIZES = {
    "tiny": [dict(n=11, steps=5, nit=5)],
    "quick": [dict(n=41, steps=25, nit=50)],
    "full": [dict(n=41, steps=100, nit=50), dict(n=101, steps=100, nit=50)],
}
TOL = 1e-9
ERROR_KIND = "max rel err"


def title(prm) -> str:
    return (f"cavity flow (Barba, 12 steps to Navier–Stokes, step 11): {prm['n']}×{prm['n']}, "
            f"nt={prm['steps']}, nit={prm['nit']}, float64")


def spacing(n: int) -> tuple[float, float, float]:
    dx = dy = 2.0 / (n - 1)
    dt = min(0.001, 0.125 * dx * dx / NU)
    return dx, dy, dt


# The right-hand sides, pure expressions of slices (shared by the NumPy-style program and
# the JAX port, so both round alike).

def source_term(u, v, dx, dy, dt):
    """The pressure equation's source at the interior points."""
    dudx = (u[1:-1, 2:] - u[1:-1, 0:-2]) / (2 * dx)
    dvdy = (v[2:, 1:-1] - v[0:-2, 1:-1]) / (2 * dy)
    dudy = (u[2:, 1:-1] - u[0:-2, 1:-1]) / (2 * dy)
    dvdx = (v[1:-1, 2:] - v[1:-1, 0:-2]) / (2 * dx)
    return RHO * ((dudx + dvdy) / dt - dudx ** 2 - 2 * dudy * dvdx - dvdy ** 2)


def jacobi_sweep(pn, b, dx, dy):
    """One Jacobi update of the interior pressure from ``pn``."""
    return (((pn[1:-1, 2:] + pn[1:-1, 0:-2]) * dy ** 2 + (pn[2:, 1:-1] + pn[0:-2, 1:-1]) * dx ** 2)
            / (2 * (dx ** 2 + dy ** 2))
            - dx ** 2 * dy ** 2 / (2 * (dx ** 2 + dy ** 2)) * b[1:-1, 1:-1])


def momentum(un, vn, p, dx, dy, dt):
    """The interior ``u`` and ``v`` after one explicit step from ``un``, ``vn``."""
    uc, vc = un[1:-1, 1:-1], vn[1:-1, 1:-1]
    u = (uc
         - uc * dt / dx * (uc - un[1:-1, 0:-2])
         - vc * dt / dy * (uc - un[0:-2, 1:-1])
         - dt / (2 * RHO * dx) * (p[1:-1, 2:] - p[1:-1, 0:-2])
         + NU * (dt / dx ** 2 * (un[1:-1, 2:] - 2 * uc + un[1:-1, 0:-2])
                 + dt / dy ** 2 * (un[2:, 1:-1] - 2 * uc + un[0:-2, 1:-1])))
    v = (vc
         - uc * dt / dx * (vc - vn[1:-1, 0:-2])
         - vc * dt / dy * (vc - vn[0:-2, 1:-1])
         - dt / (2 * RHO * dy) * (p[2:, 1:-1] - p[0:-2, 1:-1])
         + NU * (dt / dx ** 2 * (vn[1:-1, 2:] - 2 * vc + vn[1:-1, 0:-2])
                 + dt / dy ** 2 * (vn[2:, 1:-1] - 2 * vc + vn[0:-2, 1:-1])))
    return u, v


# --------------------------------------------------------------------------- NumPy style

def build_up_b(b, u, v, dx, dy, dt):
    b[1:-1, 1:-1] = source_term(u, v, dx, dy, dt)
    return b


def pressure_poisson(p, b, dx, dy, nit):
    for _ in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = jacobi_sweep(pn, b, dx, dy)
        p[:, -1] = p[:, -2]  # dp/dx = 0 at x = 2
        p[0, :] = p[1, :]    # dp/dy = 0 at y = 0
        p[:, 0] = p[:, 1]    # dp/dx = 0 at x = 0
        p[-1, :] = 0         # p = 0 at y = 2
    return p


def make_step(xp, prm):
    """One time step, updating ``u, v, p, b`` in place and returning them."""
    dx, dy, dt = spacing(prm["n"])
    nit = prm["nit"]

    def step(u, v, p, b):
        un = u.copy()
        vn = v.copy()
        b = build_up_b(b, u, v, dx, dy, dt)
        p = pressure_poisson(p, b, dx, dy, nit)
        u[1:-1, 1:-1], v[1:-1, 1:-1] = momentum(un, vn, p, dx, dy, dt)
        u[0, :] = 0
        u[:, 0] = 0
        u[:, -1] = 0
        u[-1, :] = 1  # the lid
        v[0, :] = 0
        v[-1, :] = 0
        v[:, 0] = 0
        v[:, -1] = 0
        return u, v, p, b

    return step


def program(xp, prm, step=None):
    n = prm["n"]
    u = xp.zeros((n, n))
    v = xp.zeros((n, n))
    p = xp.zeros((n, n))
    b = xp.zeros((n, n))
    step = step or make_step(xp, prm)
    for _ in range(prm["steps"]):
        u, v, p, b = step(u, v, p, b)
    return u, v, p


# --------------------------------------------------------------------------- JAX port

def make_jax(jax, prm):
    jnp = jax.numpy
    n, nit = prm["n"], prm["nit"]
    dx, dy, dt = spacing(n)

    def sweep(_, p, b):
        p = p.at[1:-1, 1:-1].set(jacobi_sweep(p, b, dx, dy))
        p = p.at[:, -1].set(p[:, -2])
        p = p.at[0, :].set(p[1, :])
        p = p.at[:, 0].set(p[:, 1])
        return p.at[-1, :].set(0.0)

    @jax.jit
    def step(u, v, p):
        b = jnp.zeros_like(u).at[1:-1, 1:-1].set(source_term(u, v, dx, dy, dt))
        p = jax.lax.fori_loop(0, nit, partial(sweep, b=b), p)
        ui, vi = momentum(u, v, p, dx, dy, dt)
        u = jnp.zeros_like(u).at[1:-1, 1:-1].set(ui).at[-1, :].set(1.0)
        v = jnp.zeros_like(v).at[1:-1, 1:-1].set(vi)
        return u, v, p

    def run():
        u = v = p = jnp.zeros((n, n))
        for _ in range(prm["steps"]):
            u, v, p = step(u, v, p)
        return u, v, p

    return run


def error(got, ref) -> float:
    return norm_rel_err(got, ref)
