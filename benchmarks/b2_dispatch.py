"""B2: dispatch overhead of a jitted step (BENCHMARKS.md).

A step on N=64 float32 vectors, ``a = -4*x; v = v + dt*a; x = x + dt*v``, returning
``(x, v)`` (dt = 0.01, a Python float closed over by the step), called in a Python loop
with its outputs fed back as its inputs. Reported in microseconds per call: one timed
sample is ``--steps`` calls (default 10,000; ``--quick``: 2,000) from the same initial
state, with the final synchronisation inside the timed region so asynchronous dispatch
cannot hide work:

* NumPy: the three operations eagerly (no jit exists);
* JAX jit: ``jax.jit(step)``, ``block_until_ready`` on the final state;
* Dr.Jit eager / frozen (optional, LLVM backend): the step traced lazily, or through
  ``dr.freeze``, with ``dr.eval(x, v)`` after each call and ``dr.sync_thread`` at the end;
* Quadrants kernel (optional, CPU): a kernel updating ``x`` and ``v`` in place on
  ``qd.ndarray`` arrays, ``qd.sync`` at the end;
* Warp launch (optional, CPU): a kernel updating ``x`` and ``v`` in place, one
  ``wp.launch`` per call, ``wp.synchronize_device`` at the end;
* qtrace jit: ``qt.jit(step)``, ``qt.eval`` + ``qt.sync`` on the final state.

The final state of each system is checked against a float64 NumPy run of the same number
of steps from the same (float32) initial state: norm-wise relative error
``max|got - ref| / max|ref|`` within ``4 * steps * eps(float32)`` (worst-case linear growth
of rounding errors, a few roundings per step). qtrace rows also report kernel launches per
call from ``qt.stats()``.

Run: ``python benchmarks/b2_dispatch.py [--quick] [--steps S] [--repeats R]``.
"""

from __future__ import annotations

import sys

import numpy as np

try:
    from . import _harness as h
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _harness as h

N = 64
DT = 0.01


def step(x, v):
    """The B2 step; the same code runs on NumPy, JAX and qtrace arrays."""
    a = -4 * x
    v = v + DT * a
    x = x + DT * v
    return x, v


def reference(x0: np.ndarray, v0: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 NumPy run of ``steps`` steps from the given initial state."""
    x, v = x0.astype(np.float64), v0.astype(np.float64)
    for _ in range(steps):
        x, v = step(x, v)
    return x, v


def _tolerance(steps: int) -> float:
    return 4 * steps * float(np.finfo(np.float32).eps)


class _Problem:
    """Initial state, float64 reference and title shared by every system."""

    def __init__(self, steps: int, seed: int):
        rng = np.random.default_rng(seed)
        self.steps = steps
        self.x0 = rng.uniform(-1.0, 1.0, N).astype(np.float32)
        self.v0 = rng.uniform(-1.0, 1.0, N).astype(np.float32)
        self.ref = reference(self.x0, self.v0, steps)
        self.title = f"B2 dispatch of a jitted step: N={N} float32, {steps:,} calls per sample"

    def case(self, system, fn, to_array, block, to_numpy, counters=None) -> h.Case:
        """A case running ``steps`` calls of ``fn`` from the initial state, then ``block``."""
        steps, state = self.steps, {}

        def reset():  # fresh arrays: a system may update its state in place
            state["x"], state["v"] = to_array(self.x0), to_array(self.v0)

        def loop():
            x, v = state["x"], state["v"]
            for _ in range(steps):
                x, v = fn(x, v)
            block(x, v)
            state["x"], state["v"] = x, v

        def finish(timing):
            x, v = to_numpy(state["x"]), to_numpy(state["v"])
            err = max(h.max_rel_err(x, self.ref[0]), h.max_rel_err(v, self.ref[1]))
            extra, note = {}, ""
            if counters is not None:
                def counted():
                    reset()
                    loop()

                stats = counters(counted)
                extra = h.launches_note(stats, "call")
                note = h.compiles_note(stats, steps)
            return h.timed_row(self.title, system, timing, unit="µs", per="call", error=err,
                               tol=_tolerance(steps), error_kind="max rel err", extra=extra,
                               note=note)

        return h.Case(system, loop, per=steps, setup=reset, finish=finish)


def prepare_numpy(p: _Problem):
    return p.case("NumPy eager (3 ops)", step, np.array, lambda x, v: None, np.asarray)


def prepare_jax(p: _Problem):
    jax, reason = h.load_peer("jax")
    if jax is None:
        return reason
    return p.case("JAX jit", jax.jit(step), jax.device_put,
                  lambda x, v: jax.block_until_ready((x, v)), np.asarray)


def _prepare_drjit(p: _Problem, system: str, frozen: bool):
    dr, Float, reason = h.load_drjit_llvm()
    if dr is None:
        return reason
    fn = dr.freeze(step) if frozen else step

    def call(x, v):
        x, v = fn(x, v)
        dr.eval(x, v)  # one kernel per call, as a jitted step would launch
        return x, v

    return p.case(system, call, Float, lambda x, v: dr.sync_thread(), np.asarray)


def prepare_drjit_eager(p: _Problem):
    return _prepare_drjit(p, "Dr.Jit eager", frozen=False)


def prepare_drjit_frozen(p: _Problem):
    return _prepare_drjit(p, "Dr.Jit frozen", frozen=True)


def prepare_quadrants(p: _Problem):
    qd, kernels, reason = h.load_kernel_peer("quadrants")
    if qd is None:
        return reason

    def to_array(a):
        out = qd.ndarray(qd.f32, shape=a.shape)
        out.from_numpy(a)
        return out

    def call(x, v):
        kernels.b2_step(x, v, DT)
        return x, v

    return p.case("Quadrants kernel", call, to_array, lambda x, v: qd.sync(),
                  lambda a: a.to_numpy())


def prepare_warp(p: _Problem):
    wp, kernels, reason = h.load_kernel_peer("warp")
    if wp is None:
        return reason

    def call(x, v):
        wp.launch(kernels.b2_step, dim=N, inputs=[x, v, DT], device="cpu")
        return x, v

    return p.case("Warp launch", call, lambda a: wp.array(a, device="cpu"),
                  lambda x, v: wp.synchronize_device("cpu"), lambda a: a.numpy())


def prepare_qtrace(p: _Problem):
    qt, reason = h.load_qtrace()
    if qt is None:
        return reason

    def block(x, v):
        qt.eval(x, v)
        qt.sync()

    return p.case("qtrace jit", qt.jit(step), qt.asarray, block, lambda t: t.numpy(),
                  counters=lambda fn: h.qtrace_counters(qt, fn, per=p.steps))


SYSTEMS = {
    "NumPy eager (3 ops)": prepare_numpy,
    "JAX jit": prepare_jax,
    "Dr.Jit eager": prepare_drjit_eager,
    "Dr.Jit frozen": prepare_drjit_frozen,
    "Quadrants kernel": prepare_quadrants,
    "Warp launch": prepare_warp,
    "qtrace jit": prepare_qtrace,
}


def run(quick: bool = False, steps: int | None = None, repeats: int | None = None,
        seed: int = 0, systems: str | None = None) -> list[h.Row]:
    """Benchmark every system (or those ``systems`` names); one :class:`~_harness.Row` each."""
    p = _Problem(int(steps if steps is not None else (2_000 if quick else 10_000)), seed)
    prepare = {name: (lambda make=make: make(p)) for name, make in SYSTEMS.items()}
    return h.run_systems(p.title, prepare, systems=systems,
                         repeats=repeats or (5 if quick else 9), warmup=1,
                         reference="qtrace jit", unit="µs", per="call",
                         error_kind="max rel err")


def main(argv=None) -> int:
    parser = h.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None,
                        help="calls per timed sample (default 10000, 2000 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    return h.main(run, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
