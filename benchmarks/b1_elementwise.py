"""B1: fused elementwise chain (BENCHMARKS.md).

``f(x, y) = sin(x)*cos(y) + exp(-x*x)*0.5 + sqrt(abs(y)) - tanh(x*y)`` on float32 vectors
of N elements (default 1e7; ``--quick``: 1e6 and fewer repeats), inputs uniform in
[-1, 1). One timed sample is one evaluation of ``f`` with its result materialised:

* NumPy: one temporary per operation;
* JAX jit: ``jax.jit(f)``, ``block_until_ready`` inside the timed region;
* Dr.Jit (optional, LLVM backend): traced lazily, ``dr.eval`` + ``dr.sync_thread``;
* Quadrants (optional, CPU): a hand-written kernel on ``qd.ndarray`` arrays, then ``qd.sync``;
* Warp (optional, CPU): a hand-written kernel, ``wp.launch`` + ``wp.synchronize_device``;
* qtrace eager: the operations recorded on ``qt.Tensor``s, then ``qt.eval`` + ``qt.sync``;
* qtrace jit: ``qt.jit(f)``, then ``qt.eval`` + ``qt.sync``;
* Dr.Jit and qtrace jit on one worker thread (``dr.set_thread_count(1)``,
  ``qt.config.num_threads = 1``), interleaved with the rest (which use every core).

Bandwidth is reported assuming the compulsory traffic, 12 bytes/element (2 reads, 1
write). Every system's result is checked against float64 NumPy on the same float32
inputs: max abs error <= 1e-6 (PASS/FAIL). qtrace rows also report kernel launches per
evaluation from ``qt.stats()``.

Run: ``python benchmarks/b1_elementwise.py [--quick] [--n N] [--repeats R]``.
"""

from __future__ import annotations

import sys

import numpy as np

try:
    from . import _harness as h
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _harness as h

TOL = 1e-6
BYTES_PER_ELEMENT = 12


def chain(m, x, y):
    """The B1 expression, written once for any NumPy-like module ``m``."""
    return m.sin(x) * m.cos(y) + m.exp(-x * x) * 0.5 + m.sqrt(m.abs(y)) - m.tanh(x * y)


def _extra(seconds: float, n: int) -> dict[str, str]:
    return {"GB/s": f"{BYTES_PER_ELEMENT * n / seconds / 1e9:.2f}"}


class _Problem:
    """Inputs, float64 reference and title shared by every system."""

    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed)
        self.n = n
        self.x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        self.y = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        self.ref = chain(np, self.x.astype(np.float64), self.y.astype(np.float64))
        self.title = f"B1 fused elementwise chain: N={n:,} float32"

    def case(self, system, evaluate, to_numpy, counters=None, setup=None) -> h.Case:
        """A case timing ``evaluate()`` (returns the materialised result); ``setup`` runs
        untimed before each call."""
        out = {}

        def fn():
            out["r"] = evaluate()

        def finish(timing):
            extra, note = _extra(timing.median, self.n), ""
            if counters is not None:
                stats = counters(fn)
                extra.update(h.launches_note(stats, "eval"))
                note = h.compiles_note(stats, 1)
            return h.timed_row(self.title, system, timing, unit="ms", per="eval",
                               error=h.max_abs_err(to_numpy(out["r"]), self.ref), tol=TOL,
                               extra=extra, note=note)

        return h.Case(system, fn, setup=setup, finish=finish)


def prepare_numpy(p: _Problem):
    return p.case("NumPy", lambda: chain(np, p.x, p.y), np.asarray)


def prepare_jax(p: _Problem):
    jax, reason = h.load_peer("jax")
    if jax is None:
        return reason
    import jax.numpy as jnp

    f = jax.jit(lambda a, b: chain(jnp, a, b))
    x, y = jax.device_put(p.x), jax.device_put(p.y)
    return p.case("JAX jit", lambda: f(x, y).block_until_ready(), np.asarray)


def prepare_drjit(p: _Problem, one_thread: bool = False):
    dr, Float, reason = h.load_drjit_llvm()
    if dr is None:
        return reason
    x, y = Float(p.x), Float(p.y)

    def evaluate():
        r = chain(dr, x, y)
        dr.eval(r)
        dr.sync_thread()
        return r

    return p.case("Dr.Jit, 1 thread" if one_thread else "Dr.Jit", evaluate, np.asarray,
                  setup=h.worker_threads(dr=dr, one=one_thread))


def prepare_warp(p: _Problem):
    wp, kernels, reason = h.load_kernel_peer("warp")
    if wp is None:
        return reason
    x, y = wp.array(p.x, device="cpu"), wp.array(p.y, device="cpu")
    out = wp.empty(p.n, dtype=wp.float32, device="cpu")

    def evaluate():
        wp.launch(kernels.b1_chain, dim=p.n, inputs=[x, y, out], device="cpu")
        wp.synchronize_device("cpu")
        return out

    return p.case("Warp", evaluate, lambda a: a.numpy())


def prepare_quadrants(p: _Problem):
    qd, kernels, reason = h.load_kernel_peer("quadrants")
    if qd is None:
        return reason
    x, y, out = (qd.ndarray(qd.f32, shape=p.n) for _ in range(3))
    x.from_numpy(p.x)
    y.from_numpy(p.y)

    def evaluate():
        kernels.b1_chain(x, y, out)
        qd.sync()
        return out

    return p.case("Quadrants", evaluate, lambda a: a.to_numpy())


def _prepare_qtrace(p: _Problem, system: str, use_jit: bool, one_thread: bool = False):
    qt, reason = h.load_qtrace()
    if qt is None:
        return reason
    def f(a, b):
        return chain(qt, a, b)

    if use_jit:
        f = qt.jit(f)
    x, y = qt.asarray(p.x), qt.asarray(p.y)

    def evaluate():
        r = f(x, y)
        qt.eval(r)
        qt.sync()
        return r

    return p.case(system, evaluate, lambda t: t.numpy(),
                  counters=lambda fn: h.qtrace_counters(qt, fn, per=1),
                  setup=h.worker_threads(qt=qt, one=one_thread))


def prepare_qtrace_eager(p: _Problem):
    return _prepare_qtrace(p, "qtrace eager", use_jit=False)


def prepare_qtrace_jit(p: _Problem):
    return _prepare_qtrace(p, "qtrace jit", use_jit=True)


def prepare_qtrace_jit_one(p: _Problem):
    return _prepare_qtrace(p, "qtrace jit, 1 thread", use_jit=True, one_thread=True)


def prepare_drjit_one(p: _Problem):
    return prepare_drjit(p, one_thread=True)


SYSTEMS = {
    "NumPy": prepare_numpy,
    "JAX jit": prepare_jax,
    "Dr.Jit": prepare_drjit,
    "Quadrants": prepare_quadrants,
    "Warp": prepare_warp,
    "qtrace eager": prepare_qtrace_eager,
    "qtrace jit": prepare_qtrace_jit,
    "Dr.Jit, 1 thread": prepare_drjit_one,
    "qtrace jit, 1 thread": prepare_qtrace_jit_one,
}


def run(quick: bool = False, n: int | None = None, repeats: int | None = None,
        seed: int = 0, systems: str | None = None) -> list[h.Row]:
    """Benchmark every system (or those ``systems`` names); one :class:`~_harness.Row` each."""
    n = int(n if n is not None else (1_000_000 if quick else 10_000_000))
    p = _Problem(n, seed)
    prepare = {name: (lambda make=make: make(p)) for name, make in SYSTEMS.items()}
    return h.run_systems(p.title, prepare, systems=systems,
                         repeats=repeats or (5 if quick else 10), warmup=1 if quick else 2,
                         reference="qtrace jit", unit="ms", per="eval")


def main(argv=None) -> int:
    parser = h.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=None,
                        help="elements (default 1e7, 1e6 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    return h.main(run, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
