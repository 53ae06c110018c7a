"""B7: many small independent updates in one step (horizontal fusion; issue 3).

A step takes ``K`` = 10 float32 arrays of N elements (default 1e5; ``--quick``: 1e4 and
fewer steps and repeats), inputs uniform in [-1, 1), and returns the 10 updated arrays,
each update reading only its own array:

    a_k = a_k*c_k + sin(a_k)*s_k - t_k*a_k*a_k,   k = 0..9,
    c_k = 0.99 - 0.001k,  s_k = 0.005 + 0.0005k,  t_k = 0.001 + 0.0001k

(Python floats closed over by the step; the coefficients differ per ``k`` so no two
updates are the same expression). It is called in a Python loop with its outputs fed back
as its inputs; one timed sample is ``--steps`` calls (default 100; ``--quick``: 20) from
the same initial state, with the final synchronisation inside the timed region:

* NumPy: the 70 operations eagerly (no jit exists);
* JAX jit: ``jax.jit(step)``, ``block_until_ready`` on the final arrays;
* qtrace eager: the step on ``qt.Tensor``s without jit, ``qt.eval`` of the 10 arrays after
  every step and ``qt.sync()`` at the end;
* qtrace jit: ``qt.jit(step)``, ``qt.eval`` + ``qt.sync`` on the final arrays.

The 10 updates have identical launch bounds and touch disjoint buffers, so qtrace can
merge them into one task (horizontal fusion): qtrace rows report kernel launches per step
from ``qt.stats()``, which should be 1 (at most 2), not 10.

Check: the final 10 arrays vs a float64 NumPy run of the same steps from the same float32
initial state, norm-wise relative error ``max|got - ref| / max|ref|`` (the worst of the
10) within ``4 * steps * eps(float32)``. Why that bound: on [-1, 1] each update's
derivative ``c + s*cos(a) - 2*t*a`` lies in [0.98, 0.996], so the values stay in [-1, 1],
errors made earlier are never amplified, and each step adds a relative error of a few
roundings (``a*c``, ``c`` itself, the add and the subtract; the ``sin`` and ``a*a`` terms
are <= 1.1% of the value): about 2 eps per step, linear growth. A missed or repeated step
changes the values by about 1% (1 - derivative), far above the bound, so it FAILs.

Run: ``python benchmarks/b7_small_updates.py [--quick] [--n N] [--steps S] [--repeats R]``.
"""

from __future__ import annotations

import sys

import numpy as np

try:
    from . import _harness as h
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _harness as h

K = 10
COEFFS = tuple((0.99 - 0.001 * k, 0.005 + 0.0005 * k, 0.001 + 0.0001 * k) for k in range(K))
OPS_PER_UPDATE = 7  # a*c, sin, *s, t*a, *a, +, -


def make_step(m):
    """The B7 step for a NumPy-like module ``m`` (``np``, ``jax.numpy`` or ``qtrace``)."""

    def step(arrays):
        return [a * c + m.sin(a) * s - t * a * a
                for a, (c, s, t) in zip(arrays, COEFFS, strict=True)]

    return step


def reference(a0: list[np.ndarray], steps: int) -> list[np.ndarray]:
    """float64 NumPy run of ``steps`` steps from the given (float32) initial arrays."""
    step = make_step(np)
    arrays = [a.astype(np.float64) for a in a0]
    for _ in range(steps):
        arrays = step(arrays)
    return arrays


def tolerance(steps: int) -> float:
    return 4 * steps * float(np.finfo(np.float32).eps)


def max_rel_err(got: list, ref: list[np.ndarray]) -> float:
    """The worst norm-wise relative error of the arrays (inf if the count differs)."""
    if len(got) != len(ref):
        return float("inf")
    return max(h.max_rel_err(g, r) for g, r in zip(got, ref, strict=True))


class _Problem:
    """Initial arrays, float64 reference and title shared by every system."""

    def __init__(self, n: int, steps: int, seed: int):
        rng = np.random.default_rng(seed)
        self.steps = steps
        self.a0 = [rng.uniform(-1.0, 1.0, n).astype(np.float32) for _ in range(K)]
        self.ref = reference(self.a0, steps)
        self.title = (f"B7 {K} small independent updates per step: N={n:,} float32 each, "
                      f"{steps:,} steps per sample")

    def case(self, system, fn, to_array, block, to_numpy, block_step=None,
             counters=None) -> h.Case:
        """A case running ``steps`` calls of ``fn`` from the initial arrays, then ``block``.

        ``block_step(arrays)``, if given, materialises every step's result (eager qtrace).
        """
        steps, state = self.steps, {}

        def reset():  # fresh arrays: a system may update its state in place
            state["arrays"] = [to_array(a) for a in self.a0]

        def loop():
            arrays = state["arrays"]
            for _ in range(steps):
                arrays = fn(arrays)
                if block_step is not None:
                    block_step(arrays)
            block(arrays)
            state["arrays"] = arrays

        def finish(timing):
            err = max_rel_err([to_numpy(a) for a in state["arrays"]], self.ref)
            extra, note = {}, ""
            if counters is not None:
                def counted():
                    reset()
                    loop()

                stats = counters(counted)
                extra = h.launches_note(stats, "step")
                note = h.compiles_note(stats, steps)
            return h.timed_row(self.title, system, timing, unit="ms", per="step", error=err,
                               tol=tolerance(steps), error_kind="max rel err", extra=extra,
                               note=note)

        return h.Case(system, loop, per=steps, setup=reset, finish=finish)


NUMPY = f"NumPy eager ({K * OPS_PER_UPDATE} ops)"


def prepare_numpy(p: _Problem):
    return p.case(NUMPY, make_step(np), np.array, lambda arrays: None, np.asarray)


def prepare_jax(p: _Problem):
    jax, reason = h.load_peer("jax")
    if jax is None:
        return reason
    import jax.numpy as jnp

    return p.case("JAX jit", jax.jit(make_step(jnp)), jax.device_put,
                  jax.block_until_ready, np.asarray)


def _prepare_qtrace(p: _Problem, system: str, jit: bool):
    qt, reason = h.load_qtrace()
    if qt is None:
        return reason
    step = make_step(qt)

    def block(arrays):
        qt.eval(*arrays)
        qt.sync()

    return p.case(system, qt.jit(step) if jit else step, qt.asarray, block,
                  lambda t: t.numpy(), block_step=None if jit else (lambda a: qt.eval(*a)),
                  counters=lambda fn: h.qtrace_counters(qt, fn, per=p.steps))


def prepare_qtrace_eager(p: _Problem):
    return _prepare_qtrace(p, "qtrace eager", jit=False)


def prepare_qtrace_jit(p: _Problem):
    return _prepare_qtrace(p, "qtrace jit", jit=True)


SYSTEMS = {
    NUMPY: prepare_numpy,
    "JAX jit": prepare_jax,
    "qtrace eager": prepare_qtrace_eager,
    "qtrace jit": prepare_qtrace_jit,
}


def run(quick: bool = False, n: int | None = None, steps: int | None = None,
        repeats: int | None = None, seed: int = 0, systems: str | None = None) -> list[h.Row]:
    """Benchmark every system (or those ``systems`` names); one :class:`~_harness.Row` each."""
    p = _Problem(int(n if n is not None else (10_000 if quick else 100_000)),
                 int(steps if steps is not None else (20 if quick else 100)), seed)
    prepare = {name: (lambda make=make: make(p)) for name, make in SYSTEMS.items()}
    return h.run_systems(p.title, prepare, systems=systems,
                         repeats=repeats or (3 if quick else 9), warmup=1,
                         reference="qtrace jit", unit="ms", per="step",
                         error_kind="max rel err")


def main(argv=None) -> int:
    parser = h.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=None,
                        help="elements per array (default 1e5, 1e4 with --quick)")
    parser.add_argument("--steps", type=int, default=None,
                        help="calls per timed sample (default 100, 20 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    return h.main(run, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
