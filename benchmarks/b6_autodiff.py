"""B6: reverse-mode autodiff — a fused gradient and a 100-step differentiable simulation.

(a) The gradient of the B1 chain, ``sum(sin(x)*cos(y) + exp(-x*x)*0.5 + sqrt(abs(y)) -
tanh(x*y))``, w.r.t. ``x`` and ``y``: float32, N elements (default 1e7; ``--quick``:
1e6), inputs uniform in [-1, 1). One timed sample is one gradient, materialised:

* NumPy: the analytic gradient written by hand (float32), one temporary per operation;
* JAX: ``jax.jit(jax.grad(f, argnums=(0, 1)))``, ``block_until_ready``;
* qtrace grad: ``qt.grad(f, argnums=(0, 1))`` with no jit (recorded eagerly), then
  ``qt.eval`` + ``qt.sync``;
* qtrace jit: ``qt.jit(qt.grad(f, argnums=(0, 1)))``, then ``qt.eval`` + ``qt.sync``.

Check: ``max |g - g_ref| / (1 + |g_ref|)`` over both components vs the analytic gradient
in float64 (``d/dy sqrt|y| = sign(y) / (2 sqrt|y|)`` is large near ``y = 0``, hence
the relative part) <= 1e-5.

(b) A differentiable simulation: ``STEPS`` = 100 steps of damped nonlinear springs
``a = -k*sin(x) - 0.1*v; v = v + dt*a; x = x + dt*v`` (dt = 0.05), float32, N elements
(default 1e5; ``--quick``: 1e4), ``x0``, ``v0`` uniform in [-1, 1), stiffness ``k``
uniform in [0.5, 2) (an input, not differentiated), ``loss = sum(x*x + 0.5*v*v)`` of the
final state; one timed sample is the gradient of the loss w.r.t. ``(x0, v0)``:

* NumPy: forward keeping the 100 states, then the adjoint recurrence by hand (float32);
* JAX grad of loop: ``jax.grad`` (not jitted) of a Python loop calling a ``jax.jit`` step
  100 times;
* JAX jit(grad) scan: ``jax.jit(jax.grad(loss))`` with the 100 steps in a ``lax.scan``;
* qtrace grad of loop: ``qt.grad`` (not jitted) of a Python loop calling a ``qt.jit``
  step 100 times (each jitted call is one call node in the derivative, with cached
  forward and backward plans);
* qtrace jit(grad) of loop: ``qt.jit(qt.grad(loss))`` of the same loop (traced once,
  the 100 steps unrolled into one graph).

Check: norm-wise relative error ``max|g - g_ref| / max|g_ref|`` of each component vs the
same forward and adjoint in float64, <= 4 * STEPS * eps(float32).

As in ``b3_loop_grad.py`` (whose subprocess machinery this file uses), each system runs
in its own subprocess (this file with ``--worker SYSTEM``), so its peak RSS is its own
(column ``peak RSS MB``; ``setup MB``: after imports and inputs, before compiling); the
workers run one after another, ``--rounds`` times with the order rotated (default 2,
``--quick`` 1), samples pooled into one median. qtrace rows report ``kernel_launches``
per gradient from ``qt.stats()`` (an extra untimed call).

Run: ``python benchmarks/b6_autodiff.py [--quick] [--n N] [--n-sim N] [--repeats R]
[--rounds K]``.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

try:
    from . import _harness as h
    from . import b3_loop_grad as b3
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _harness as h
    import b3_loop_grad as b3

TOL_CHAIN = 1e-5
STEPS = 100
DT = 0.05
DAMPING = 0.1
TOL_SIM = 4 * STEPS * float(np.finfo(np.float32).eps)
QT_KEYS = ("kernel_launches", "compiles")

# --------------------------------------------------------------------------- (a) the B1 chain


def chain_loss(m, x, y):
    """The B1 expression summed, for any NumPy-like module ``m``."""
    return m.sum(m.sin(x) * m.cos(y) + m.exp(-x * x) * 0.5 + m.sqrt(m.abs(y)) - m.tanh(x * y))


def chain_grad(x, y):
    """The analytic gradient of :func:`chain_loss` (in the dtype of ``x`` and ``y``)."""
    sech2 = 1 - np.tanh(x * y) ** 2
    gx = np.cos(x) * np.cos(y) - x * np.exp(-x * x) - y * sech2
    gy = -np.sin(x) * np.sin(y) + np.sign(y) * 0.5 / np.sqrt(np.abs(y)) - x * sech2
    return gx, gy


def chain_error(got: np.ndarray, ref: np.ndarray) -> float:
    """``max |got - ref| / (1 + |ref|)`` (inf when not finite or shapes differ)."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        return float("inf")
    err = np.abs(got - ref) / (1 + np.abs(ref))
    return float(err.max()) if np.all(np.isfinite(err)) else float("inf")


class _Chain:
    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed)
        self.x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        self.y = rng.uniform(-1.0, 1.0, n).astype(np.float32)


def chain_numpy(cfg):
    p = _Chain(cfg["n"], cfg["seed"])
    setup = b3.own_peak_rss_mb()
    res = {}

    def grad():
        res["g"] = chain_grad(p.x, p.y)

    return b3.Work([h.Case("grad", grad)], lambda: dict(zip(("gx", "gy"), res["g"])),
                   setup_rss_mb=setup)


def chain_jax(cfg):
    jax, reason = h.load_peer("jax")
    if jax is None:
        return reason
    import jax.numpy as jnp

    p = _Chain(cfg["n"], cfg["seed"])
    g = jax.jit(jax.grad(lambda a, b: chain_loss(jnp, a, b), argnums=(0, 1)))
    x, y = jax.device_put(p.x), jax.device_put(p.y)
    jax.block_until_ready((x, y))
    setup = b3.own_peak_rss_mb()
    res = {}

    def grad():
        res["g"] = jax.block_until_ready(g(x, y))

    return b3.Work([h.Case("grad", grad)],
                   lambda: {"gx": np.asarray(res["g"][0]), "gy": np.asarray(res["g"][1])},
                   setup_rss_mb=setup)


def _chain_qtrace(cfg, use_jit: bool):
    qt, reason = h.load_qtrace()
    if qt is None:
        return reason
    if not hasattr(qt, "grad"):
        return "qtrace incomplete: missing grad"
    p = _Chain(cfg["n"], cfg["seed"])
    g = qt.grad(lambda a, b: chain_loss(qt, a, b), argnums=(0, 1))
    if use_jit:
        g = qt.jit(g)
    x, y = qt.asarray(p.x), qt.asarray(p.y)
    qt.eval(x, y)
    qt.sync()
    setup = b3.own_peak_rss_mb()
    res = {}

    def grad():
        gx, gy = g(x, y)
        qt.eval(gx, gy)
        qt.sync()
        res["g"] = gx, gy

    return b3.Work([h.Case("grad", grad)],
                   lambda: {"gx": res["g"][0].numpy(), "gy": res["g"][1].numpy()},
                   {"grad": lambda: h.qtrace_counters(qt, grad, 1, QT_KEYS)}, setup_rss_mb=setup)


CHAIN = {
    "NumPy hand-written gradient": chain_numpy,
    "JAX jit(grad)": chain_jax,
    "qtrace grad (no jit)": lambda cfg: _chain_qtrace(cfg, use_jit=False),
    "qtrace jit(grad)": lambda cfg: _chain_qtrace(cfg, use_jit=True),
}
CHAIN_REFERENCE = "qtrace jit(grad)"

# --------------------------------------------------------------------------- (b) the simulation


def sim_step(m, x, v, k):
    """One step of the damped nonlinear springs, for any NumPy-like module ``m``."""
    a = -k * m.sin(x) - DAMPING * v
    v = v + DT * a
    x = x + DT * v
    return x, v


def sim_final_loss(m, x, v):
    return m.sum(x * x + 0.5 * v * v)


def sim_grad_numpy(x0, v0, k):
    """The gradient of the loss w.r.t. ``(x0, v0)`` by hand, in the inputs' dtype:
    forward keeping every state's ``x``, then the adjoint of each step in reverse."""
    x, v, xs = x0, v0, []
    for _ in range(STEPS):
        xs.append(x)
        x, v = sim_step(np, x, v, k)
    gx, gv = 2 * x, v
    for x_prev in reversed(xs):
        gv_new = gv + DT * gx          # adjoint of v' (x' = x + dt*v')
        ga = DT * gv_new               # v' = v + dt*a
        gx = gx - k * np.cos(x_prev) * ga
        gv = gv_new - DAMPING * ga
    return gx, gv


class _Sim:
    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed + 1)
        self.x0 = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        self.v0 = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        self.k = rng.uniform(0.5, 2.0, n).astype(np.float32)


def sim_numpy(cfg):
    p = _Sim(cfg["n"], cfg["seed"])
    setup = b3.own_peak_rss_mb()
    res = {}

    def grad():
        res["g"] = sim_grad_numpy(p.x0, p.v0, p.k)

    return b3.Work([h.Case("grad", grad)], lambda: dict(zip(("gx", "gv"), res["g"])),
                   setup_rss_mb=setup)


def _sim_jax(cfg, scan: bool):
    jax, reason = h.load_peer("jax")
    if jax is None:
        return reason
    import jax.numpy as jnp
    from jax import lax

    p = _Sim(cfg["n"], cfg["seed"])
    if scan:
        def loss(x, v, k):
            (x, v), _ = lax.scan(lambda s, _: (sim_step(jnp, *s, k), None), (x, v), None,
                                 length=STEPS)
            return sim_final_loss(jnp, x, v)

        g = jax.jit(jax.grad(loss, argnums=(0, 1)))
    else:
        step = jax.jit(lambda x, v, k: sim_step(jnp, x, v, k))

        def loss(x, v, k):
            for _ in range(STEPS):
                x, v = step(x, v, k)
            return sim_final_loss(jnp, x, v)

        g = jax.grad(loss, argnums=(0, 1))
    x0, v0, k = (jax.device_put(a) for a in (p.x0, p.v0, p.k))
    jax.block_until_ready((x0, v0, k))
    setup = b3.own_peak_rss_mb()
    res = {}

    def grad():
        res["g"] = jax.block_until_ready(g(x0, v0, k))

    return b3.Work([h.Case("grad", grad)],
                   lambda: {"gx": np.asarray(res["g"][0]), "gv": np.asarray(res["g"][1])},
                   setup_rss_mb=setup)


def _sim_qtrace(cfg, use_jit: bool):
    qt, reason = h.load_qtrace()
    if qt is None:
        return reason
    if not hasattr(qt, "grad"):
        return "qtrace incomplete: missing grad"
    p = _Sim(cfg["n"], cfg["seed"])
    step = qt.jit(lambda x, v, k: sim_step(qt, x, v, k))

    def loss(x, v, k):
        for _ in range(STEPS):
            x, v = step(x, v, k)
        return sim_final_loss(qt, x, v)

    g = qt.grad(loss, argnums=(0, 1))
    if use_jit:
        g = qt.jit(g)
    x0, v0, k = (qt.asarray(a) for a in (p.x0, p.v0, p.k))
    qt.eval(x0, v0, k)
    qt.sync()
    setup = b3.own_peak_rss_mb()
    res = {}

    def grad():
        gx, gv = g(x0, v0, k)
        qt.eval(gx, gv)
        qt.sync()
        res["g"] = gx, gv

    return b3.Work([h.Case("grad", grad)],
                   lambda: {"gx": res["g"][0].numpy(), "gv": res["g"][1].numpy()},
                   {"grad": lambda: h.qtrace_counters(qt, grad, 1, QT_KEYS)}, setup_rss_mb=setup)


SIM = {
    "NumPy hand-written adjoint": sim_numpy,
    "JAX grad of loop of jit step": lambda cfg: _sim_jax(cfg, scan=False),
    "JAX jit(grad) with lax.scan": lambda cfg: _sim_jax(cfg, scan=True),
    "qtrace grad of loop of jit step": lambda cfg: _sim_qtrace(cfg, use_jit=False),
    "qtrace jit(grad) of loop": lambda cfg: _sim_qtrace(cfg, use_jit=True),
}
SIM_REFERENCE = "qtrace grad of loop of jit step"

# Worker names: "<part>|<system>".
WORKERS = {**{f"a|{name}": make for name, make in CHAIN.items()},
           **{f"b|{name}": make for name, make in SIM.items()}}


def _qtrace_extra(rep: dict) -> tuple[dict[str, str], str]:
    counters = rep["counters"].get("grad", {})
    return h.launches_note(counters, "grad"), h.compiles_note(counters, 1)


def run(quick: bool = False, n: int | None = None, n_sim: int | None = None,
        repeats: int | None = None, rounds: int | None = None, seed: int = 0,
        systems: str | None = None) -> list[h.Row]:
    """Benchmark every system (or those ``systems`` names); rows of two tables."""
    n = int(n if n is not None else (1_000_000 if quick else 10_000_000))
    n_sim = int(n_sim if n_sim is not None else (10_000 if quick else 100_000))
    reps = repeats or (3 if quick else 5)
    rounds = rounds or (1 if quick else 2)
    script = os.path.abspath(__file__)
    kw = dict(unit="ms", per="grad")
    rows: list[h.Row] = []
    with tempfile.TemporaryDirectory(prefix="qtrace-b6-") as tmp:
        # (a) gradient of the B1 chain
        names = [f"a|{name}" for name in h.selected(CHAIN, systems)]
        reports = b3.run_workers(script, names, {"n": n, "seed": seed, "repeats": reps,
                                                 "warmup": 1}, rounds, tmp)
        reports = {name.split("|", 1)[1]: rep for name, rep in reports.items()}
        b3.load_for_versions(reports)
        p = _Chain(n, seed)
        ref = chain_grad(p.x.astype(np.float64), p.y.astype(np.float64))
        title = f"B6a gradient of the B1 chain w.r.t. x and y: N={n:,} float32"

        def finish_chain(system, arrays, timing, rep):
            err = max(chain_error(arrays["gx"], ref[0]), chain_error(arrays["gy"], ref[1]))
            extra, note = _qtrace_extra(rep)
            return h.timed_row(title, system, timing, error=err, tol=TOL_CHAIN,
                               error_kind="max err/(1+|ref|)",
                               extra={**b3.memory_extra(rep), **extra}, note=note, **kw)

        rows += b3.worker_table(title, "grad", reports, finish_chain, CHAIN_REFERENCE,
                                error_kind="max err/(1+|ref|)", **kw)
        del p, ref

        # (b) the 100-step simulation
        names = [f"b|{name}" for name in h.selected(SIM, systems)]
        reports = b3.run_workers(script, names, {"n": n_sim, "seed": seed, "repeats": reps,
                                                 "warmup": 1}, rounds, tmp)
        reports = {name.split("|", 1)[1]: rep for name, rep in reports.items()}
        b3.load_for_versions(reports)
        s = _Sim(n_sim, seed)
        ref = sim_grad_numpy(*(a.astype(np.float64) for a in (s.x0, s.v0, s.k)))
        title = (f"B6b {STEPS}-step differentiable simulation, grad of final loss w.r.t. "
                 f"(x0, v0): N={n_sim:,} float32")

        def finish_sim(system, arrays, timing, rep):
            err = max(h.max_rel_err(arrays["gx"], ref[0]), h.max_rel_err(arrays["gv"], ref[1]))
            extra, note = _qtrace_extra(rep)
            extra = {"µs/step": f"{timing.median / STEPS * 1e6:.3g}", **b3.memory_extra(rep),
                     **extra}
            return h.timed_row(title, system, timing, error=err, tol=TOL_SIM,
                               error_kind="max rel err", extra=extra, note=note, **kw)

        rows += b3.worker_table(title, "grad", reports, finish_sim, SIM_REFERENCE,
                                error_kind="max rel err", **kw)
    return rows


def main(argv=None) -> int:
    worker = b3.worker_argv(argv)
    if worker is not None:
        return b3.serve(WORKERS, *worker)
    parser = h.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=None,
                        help="(a) elements (default 1e7, 1e6 with --quick)")
    parser.add_argument("--n-sim", type=float, default=None,
                        help="(b) elements (default 1e5, 1e4 with --quick)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="worker runs per system, samples pooled (default 2, 1 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    return h.main(run, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
