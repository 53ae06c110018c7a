"""B5: eager Python loop (BENCHMARKS.md).

``ITERS`` = 200 iterations of ``x = x*0.999 + sin(y)*0.01; y = y - tanh(x)*0.02 +
0.001*x*x`` on float32 vectors of N elements (default 1e6; ``--quick``: 1e5 and fewer
repeats), inputs uniform in [-1, 1), with no jit, every iteration's result materialised:

* NumPy: eager, one temporary per operation;
* JAX eager: ``jax.numpy`` op by op, ``block_until_ready((x, y))`` every iteration;
* Dr.Jit (optional, LLVM backend): traced lazily, ``dr.eval(x, y)`` every iteration,
  ``dr.sync_thread()`` at the end;
* qtrace: the operations recorded on ``qt.Tensor``s, ``qt.eval(x, y)`` every iteration,
  ``qt.sync()`` at the end of the timed loop;
* Dr.Jit and qtrace on one worker thread (``dr.set_thread_count(1)``,
  ``qt.config.num_threads = 1``), interleaved with the rest (which use every core).

One timed sample is the 200 iterations from the same initial state; the table reports
milliseconds per iteration. The same loop at N=16, where kernel time is negligible, gives
each system's per-iteration overhead outside kernels (column "µs/iter N=16"). The final
``x`` and ``y`` are checked against a float64 NumPy run: norm-wise relative error
``max|got - ref| / max|ref|`` within ``4 * ITERS * eps(float32)``. qtrace rows also
report kernel launches per iteration from ``qt.stats()``.

Run: ``python benchmarks/b5_eager_loop.py [--quick] [--n N] [--repeats R]``.
"""

from __future__ import annotations

import sys

import numpy as np

try:
    from . import _harness as h
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _harness as h

ITERS = 200
OVERHEAD_N = 16


def body(m, x, y):
    """One iteration, written once for any NumPy-like module ``m``."""
    x = x * 0.999 + m.sin(y) * 0.01
    y = y - m.tanh(x) * 0.02 + 0.001 * x * x
    return x, y


def reference(x0: np.ndarray, y0: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 NumPy run from the given (float32) initial state."""
    x, y = x0.astype(np.float64), y0.astype(np.float64)
    for _ in range(iters):
        x, y = body(np, x, y)
    return x, y


TOL = 4 * ITERS * float(np.finfo(np.float32).eps)


class _System:
    """How one system runs the loop: its array module, conversions and synchronisation.

    ``block_iter(x, y)`` materialises an iteration's result, ``block_end(x, y)`` waits for
    all work at the end of the timed loop; ``counters(fn)``, for qtrace, runs ``fn`` and
    returns its counters per iteration.
    """

    def __init__(self, name, module, to_array, to_numpy, block_iter=None, block_end=None,
                 counters=None, threads=None):
        self.name, self.module, self.to_array, self.to_numpy = name, module, to_array, to_numpy
        self.block_iter = block_iter or (lambda x, y: None)
        self.block_end = block_end or (lambda x, y: None)
        self.counters = counters
        self.threads = threads or (lambda: None)   # sets the worker threads (untimed)

    def case(self, x0, y0, finish=None) -> h.Case:
        """A case running ``ITERS`` iterations from ``(x0, y0)``.

        ``finish(timing, state, reset, loop)``, if given, builds the row: ``state`` holds
        the final ``x`` and ``y``; ``reset`` and ``loop`` rerun the case untimed.
        """
        m, block_iter, block_end = self.module, self.block_iter, self.block_end
        x0, y0 = self.to_array(x0), self.to_array(y0)
        state = {}
        threads = self.threads

        def reset():
            threads()
            state["x"], state["y"] = x0, y0

        def loop():
            x, y = state["x"], state["y"]
            for _ in range(ITERS):
                x, y = body(m, x, y)
                block_iter(x, y)
            block_end(x, y)
            state["x"], state["y"] = x, y

        row = None if finish is None else (lambda timing: finish(timing, state, reset, loop))
        return h.Case(self.name, loop, per=ITERS, setup=reset, finish=row)


class _Problem:
    """Inputs (full size and N=16), float64 reference and title shared by every system."""

    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed)
        self.x0, self.y0 = (rng.uniform(-1.0, 1.0, n).astype(np.float32) for _ in range(2))
        self.small = (self.x0[:OVERHEAD_N].copy(), self.y0[:OVERHEAD_N].copy())
        self.ref = reference(self.x0, self.y0, ITERS)
        self.title = f"B5 eager Python loop: N={n:,} float32, {ITERS} iterations, eval each"

    def overhead_case(self, system: _System) -> h.Case:
        return system.case(*self.small)

    def case(self, system: _System, overhead) -> h.Case:
        """The full-size case; ``overhead`` is the N=16 Timing (or the exception it hit)."""

        def finish(timing, state, reset, loop):
            x, y = system.to_numpy(state["x"]), system.to_numpy(state["y"])
            err = max(h.max_rel_err(x, self.ref[0]), h.max_rel_err(y, self.ref[1]))
            extra, note = {}, ""
            if isinstance(overhead, h.Timing):
                extra[f"µs/iter N={OVERHEAD_N}"] = f"{overhead.median * 1e6:.3g}"
            elif overhead is not None:
                note = f"N={OVERHEAD_N} run failed: {type(overhead).__name__}"
            if system.counters is not None:
                def counted():
                    reset()
                    loop()

                stats = system.counters(counted)
                extra.update(h.launches_note(stats, "iter"))
                note = " ".join(filter(None, [note, h.compiles_note(stats, ITERS)]))
            return h.timed_row(self.title, system.name, timing, unit="ms", per="iter",
                               error=err, tol=TOL, error_kind="max rel err", extra=extra,
                               note=note)

        return system.case(self.x0, self.y0, finish=finish)


def numpy_system():
    return _System("NumPy", np, np.array, np.asarray)


def jax_system():
    jax, reason = h.load_peer("jax")
    if jax is None:
        return reason
    import jax.numpy as jnp

    return _System("JAX eager", jnp, jax.device_put, np.asarray,
                   block_iter=lambda x, y: jax.block_until_ready((x, y)))


def drjit_system(one_thread: bool = False):
    dr, Float, reason = h.load_drjit_llvm()
    if dr is None:
        return reason
    return _System("Dr.Jit, 1 thread" if one_thread else "Dr.Jit", dr, Float, np.asarray,
                   block_iter=dr.eval, block_end=lambda x, y: dr.sync_thread(),
                   threads=h.worker_threads(dr=dr, one=one_thread))


def qtrace_system(one_thread: bool = False):
    qt, reason = h.load_qtrace()
    if qt is None:
        return reason
    return _System("qtrace, 1 thread" if one_thread else "qtrace", qt, qt.asarray,
                   lambda t: t.numpy(), block_iter=qt.eval, block_end=lambda x, y: qt.sync(),
                   counters=lambda fn: h.qtrace_counters(qt, fn, per=ITERS),
                   threads=h.worker_threads(qt=qt, one=one_thread))


SYSTEMS = {"NumPy": numpy_system, "JAX eager": jax_system, "Dr.Jit": drjit_system,
           "qtrace": qtrace_system, "Dr.Jit, 1 thread": lambda: drjit_system(one_thread=True),
           "qtrace, 1 thread": lambda: qtrace_system(one_thread=True)}


def run(quick: bool = False, n: int | None = None, repeats: int | None = None,
        seed: int = 0, systems: str | None = None) -> list[h.Row]:
    """Benchmark every system (or those ``systems`` names); one :class:`~_harness.Row` each."""
    p = _Problem(int(n if n is not None else (100_000 if quick else 1_000_000)), seed)
    repeats = repeats or (3 if quick else 5)
    specs: dict[str, _System | str | Exception] = {}
    for name, make in h.selected(SYSTEMS, systems).items():
        try:
            specs[name] = make()
        except Exception as exc:  # reported as the system's FAIL row below
            specs[name] = exc
    # Round 1: per-iteration overhead, N=16 (all systems interleaved).
    ready = [s for s in specs.values() if isinstance(s, _System)]
    overhead = h.measure_interleaved([p.overhead_case(s) for s in ready], repeats=repeats)

    # Round 2: the full-size loop, rows built from both rounds.
    def prepare(spec):
        if isinstance(spec, Exception):
            raise spec
        return spec if isinstance(spec, str) else p.case(spec, overhead.get(spec.name))

    return h.run_systems(p.title, {name: (lambda s=spec: prepare(s))
                                   for name, spec in specs.items()},
                         repeats=repeats, warmup=1, reference="qtrace", unit="ms",
                         per="iter", error_kind="max rel err")


def main(argv=None) -> int:
    parser = h.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=None,
                        help="elements (default 1e6, 1e5 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    return h.main(run, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
