"""B8: six real NumPy programs, run as written (not in BENCHMARKS.md).

Six small scientific programs, each written once in the idiom real NumPy code uses
(slices and slice assignment, writes through views, boolean masks, in-place ``+=``,
``@``, small arrays in Python loops) against a namespace ``xp``, each modelled on a
well-known public program (cited in its module, ``benchmarks/programs/``):

* cavity flow, Barba's "12 steps to Navier–Stokes" step 11: 41×41 and 101×101, 100 steps
  of 50 pressure sweeps (``--quick``: 41×41, 25 steps);
* N-body leapfrog, Mocz's "nbody-python": N = 500, 100 steps (``--quick``: 200, 50);
* Game of Life, Rougier's "From Python to NumPy": 512×512, 300 steps (``--quick``:
  128×128, 50);
* lattice Boltzmann D2Q9 past a cylinder, Mocz's "latticeboltzmann-python": 100×400, 100
  steps (``--quick``: 50×200, 50);
* Gray-Scott reaction–diffusion, Rougier's book: 128×128, 4000 steps (``--quick``: 64×64,
  500);
* 2-layer MLP on spirals, CS231n's case study: 3000 points, 100 hidden units, 400 steps
  (``--quick``: 300 points, 100 steps); gradient by hand (NumPy), ``qt.value_and_grad``,
  ``jax.value_and_grad``.

Systems: NumPy (eager); qtrace eager (the same source with ``xp = qtrace``, no added
evaluation: the final state's ``np.asarray`` ends the timed region); qtrace jit (the
one-time-step function under ``qt.jit``, the outer loop in Python); JAX jit (a
functional port, ``x.at[...].set``, ``jnp.where`` for masks, the step under
``jax.jit``, float64). One sample is the whole program, from building its initial state
to its final state as NumPy arrays; two untimed warm-up runs per system first (so
compilation is excluded; the qtrace and JAX rows' notes give the first, cold run's
time: in it qtrace's eager cut policy learns where to cut, so the second run's first
pending graph, cut at the learned place from the start, is built once more), then
``--repeats`` samples (3, ``--quick`` 2), interleaved across systems. qtrace
rows also give kernel launches per run from ``qt.stats()``.

Check: every system's final state vs the NumPy run in float64; tolerances (justified in
each module's docstring): 1e-9 (cavity, Gray-Scott, N-body), 1e-10
(lattice Boltzmann), exact (Game of Life: cells differing), 1e-6 (MLP: loss curve and
weights). A program that a system cannot run (a NumPy function it lacks, a write it does
not support) gets a FAILED note naming the error.

Run: ``python benchmarks/b8_programs.py [--quick] [--programs cavity,nbody]
[--systems numpy,jax] [--repeats R]``.
"""

from __future__ import annotations

import sys

try:
    from . import _harness as h
    from . import programs as suite
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _harness as h
    import programs as suite


def run(quick: bool = False, repeats: int | None = None, systems: str | None = None,
        programs: str | None = None, size: str | None = None) -> list[h.Row]:
    """Benchmark every program (or those ``programs`` names) on every system."""
    return suite.run(quick=quick, repeats=repeats, systems=systems, programs=programs,
                     size=size)


def main(argv=None) -> int:
    parser = h.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--programs", default=None,
                        help="comma-separated name prefixes of the programs to run: "
                             + ", ".join(suite.PROGRAMS) + " (default: all)")
    parser.add_argument("--size", choices=("tiny", "quick", "full"), default=None,
                        help="problem sizes (default: full, quick with --quick)")
    return h.main(run, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
