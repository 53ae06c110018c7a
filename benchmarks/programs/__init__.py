"""B8: six small scientific programs written the way NumPy code is written, run as written.

Each module holds one program written once against a NumPy-like namespace ``xp``
(slices and slice assignment, writes through views, boolean masks, in-place operators,
``@``, small arrays in Python loops), a one-time-step function for ``qt.jit``, a JAX port
in JAX's functional style, and the accuracy check against the NumPy run:

* ``cavity``: lid-driven cavity flow (Barba, "12 steps to Navier–Stokes", step 11);
* ``nbody``: N-body leapfrog with softening (Mocz, "nbody-python");
* ``life``: Conway's Game of Life (Rougier, "From Python to NumPy");
* ``lbm``: lattice-Boltzmann D2Q9 past a cylinder (Mocz, "latticeboltzmann-python");
* ``gray_scott``: Gray-Scott reaction–diffusion (Rougier, "From Python to NumPy");
* ``mlp``: a 2-layer MLP trained on spirals by gradient descent (CS231n case study).

:func:`run` times every program on every system (see ``_common.Problem``); the runner is
``benchmarks/b8_programs.py``.
"""

from __future__ import annotations

import importlib

from ._common import SYSTEMS, Problem, h

__all__ = ["PROGRAMS", "SYSTEMS", "Problem", "load", "run"]

# In table order.
PROGRAMS = ("cavity", "nbody", "life", "lbm", "gray_scott", "mlp")


def load(name: str):
    """The module of one program, by name (``"cavity"``, ...)."""
    return importlib.import_module(f"{__name__}.{name}")


def run(quick: bool = False, repeats: int | None = None, systems: str | None = None,
        programs: str | None = None, size: str | None = None) -> list[h.Row]:
    """Time the programs (all, or the comma-separated name prefixes in ``programs``).

    ``size``: ``"tiny"``, ``"quick"`` or ``"full"`` (default: ``"quick"`` with ``quick``,
    else ``"full"``). Samples per system: ``repeats`` (default 2 quick, 3 full), after one
    untimed warm-up run of the whole program.
    """
    size = size or ("quick" if quick else "full")
    repeats = repeats or (2 if quick else 3)
    wanted = [p.strip() for p in (programs or "").split(",") if p.strip()]
    rows: list[h.Row] = []
    for name in PROGRAMS:
        if wanted and not any(name.startswith(p) for p in wanted):
            continue
        module = load(name)
        for prm in module.SIZES[size]:
            rows += Problem(module, prm).run(repeats=repeats, systems=systems)
    return rows
