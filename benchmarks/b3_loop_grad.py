"""B3: reverse mode through a per-element loop with data-dependent trip counts (BENCHMARKS.md).

Per element ``i``: ``v = x[i]; repeat n[i] times: v = sin(v)*c[i] + 0.5*v; out[i] = v``,
and ``loss = sum(out)``; the gradient is taken w.r.t. ``x`` and ``c``. float32, N
elements (default 1e6; ``--quick``: 1e5 and fewer repeats); ``x`` uniform in [-1, 1),
``c`` uniform in [0.5, 1.5) (the map then settles on a stable fixed point, so the
gradient stays bounded), trip counts ``n`` uniform in [0, 64] (int32).

* qtrace: ``qt.fori_loop(0, n, body, x)`` with the per-element trip counts ``n`` (a
  tensor), no bound or hint; forward ``qt.jit(forward)``, forward+backward
  ``qt.jit(qt.value_and_grad(loss, argnums=(0, 1)))``, each followed by ``qt.eval`` +
  ``qt.sync``. Extra columns: ``kernel_launches``, ``adstack_bytes`` and
  ``max_reducer_dispatches`` per call from ``qt.stats()`` (an extra untimed call).
* JAX: ``lax.fori_loop`` to the largest trip count with a mask
  (``jnp.where(i < n, step(v), v)``), since ``while_loop`` cannot be reversed and a
  ``fori_loop`` with static bounds (a ``scan``) can; ``jax.jit(forward)`` and
  ``jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))``, ``block_until_ready``.
* Dr.Jit (LLVM backend): ``dr.while_loop`` (symbolic) over the state ``(i, v)`` with the
  condition ``i < n``, on ``drjit.llvm.ad`` arrays; forward ``dr.eval`` +
  ``dr.sync_thread``; forward+backward on fresh copies of ``x``, ``c`` with
  ``dr.enable_grad``, ``loss = dr.sum(out)``, ``dr.backward(loss)``, ``dr.grad``. Reverse
  mode through the loop needs ``max_iterations`` (Dr.Jit reserves storage for that many
  iterates); it is given the data's largest trip count, a hint the other systems do not
  get (the row's note says so).
* Quadrants (CPU): hand-written kernels in ``_quadrants_kernels.py``, a parallel loop
  over the elements with an inner ``for _ in range(n[i])``; the loss kernel accumulates
  ``loss[0] += v`` and is differentiated under ``qd.ad.Tape(loss=loss)`` (its ``.grad``
  kernel), which for a dynamic trip count needs the adstack
  (``qd.init(..., ad_stack_experimental_enabled=True)``); gradients zeroed before each
  call, ``qd.sync`` after.
* Warp (CPU): kernels in ``_warp_kernels.py``. Forward: a dynamic ``range(n[i])`` loop.
  Warp's adjoint of a dynamic loop does not store the iterates, so its gradient of this
  recurrence is wrong; the timed forward+backward therefore uses the loop unrolled to 64
  (``wp.static``, ``max_unroll=64``) with a ``k < n[i]`` mask (straight-line code), and
  ``loss`` by ``wp.atomic_add``, under ``wp.Tape``. The error of the dynamic loop's
  gradient is measured once, untimed, and printed in the row's note.

Each system runs in its own subprocess (this file with ``--worker SYSTEM``), so the
peak RSS reported is that system's alone: the worker's peak resident set size at its end
(interpreter, imports, inputs, compilation and every timed call included; Linux
``VmHWM``, since ``ru_maxrss`` of a spawned process starts at its parent's peak, see
:func:`own_peak_rss_mb`); column ``setup MB`` is the same figure taken after imports and
inputs, before any compilation. In a worker the forward and forward+backward samples are interleaved
(``_harness.measure_interleaved``); the workers run one after the other, ``--rounds``
times (the order rotated each round, default 2, ``--quick`` 1), and a system's samples
from all rounds are pooled into one median. Two tables: forward, and forward+backward.

Checks against float64 NumPy on the same float32 inputs (the forward loop, then the
adjoint recurrence ``gc += gv*sin(v_k); gv *= cos(v_k)*c + 0.5`` run backwards over the
stored iterates, vectorized over elements, masked per iteration): forward ``out`` and
the gradient (both ``x`` and ``c`` components, and the loss value), norm-wise relative
error ``max|got - ref| / max|ref|`` <= 1e-4 (PASS/FAIL). A system whose package is not
installed gets a skip note.

The subprocess machinery (:func:`run_workers`, :func:`serve`, :func:`worker_table`) is
shared with ``b6_autodiff.py``.

Run: ``python benchmarks/b3_loop_grad.py [--quick] [--n N] [--repeats R] [--rounds K]``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

try:
    from . import _harness as h
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _harness as h

TOL = 1e-4
MAX_TRIPS = 64
QT_KEYS = ("kernel_launches", "adstack_bytes", "max_reducer_dispatches", "compiles")

# --------------------------------------------------------------------------- one system per process

RESULT_TAG = "BENCH-WORKER-RESULT "
WORKER_TIMEOUT_S = 3600


@dataclass
class Work:
    """What a worker times for one system: one :class:`~_harness.Case` per table.

    Each case's ``system`` is the key of its table (e.g. ``"fwd"``). ``results()``
    returns the arrays the parent checks (called after timing); ``counters`` maps a
    table key to an untimed call returning qtrace counters per call; ``setup_rss_mb`` is
    the peak RSS (:func:`own_peak_rss_mb`) after imports and inputs, before any compilation;
    ``notes`` maps a table key to a note for the system's row (e.g. a hint it was given).
    """

    cases: list[h.Case]
    results: Callable[[], dict[str, np.ndarray]]
    counters: dict[str, Callable[[], dict[str, float]]] = field(default_factory=dict)
    setup_rss_mb: float | None = None
    notes: dict[str, str] = field(default_factory=dict)


def own_peak_rss_mb() -> float:
    """Peak RSS of this process's own address space, in MB (10^6 bytes).

    On Linux ``getrusage(RUSAGE_SELF).ru_maxrss`` of a freshly started worker is at least
    the peak RSS of the parent that spawned it (the kernel keeps the high-water mark of
    the address space replaced by ``exec``), so a worker reads ``VmHWM`` from
    ``/proc/self/status``, the high-water mark of its own address space; elsewhere it
    falls back to ``_harness.peak_rss_mb()``.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return h.peak_rss_mb()


def serve(prepare: dict[str, Callable[[dict], Work | str]], system: str, cfg: dict) -> int:
    """Worker side: prepare ``system``, time its cases, print one JSON report line.

    ``cfg`` holds ``repeats``, ``warmup`` and ``out`` (the ``.npz`` file for the arrays
    to check) plus the benchmark's own settings. The report has the samples per table
    (seconds per unit), exceptions as text, the peak RSS, counters, or ``skip``/``error``.
    """
    report: dict = {"system": system}
    try:
        work = prepare[system](cfg)
        if isinstance(work, str):
            report["skip"] = work
        else:
            timings = h.measure_interleaved(work.cases, repeats=cfg["repeats"],
                                            warmup=cfg["warmup"])
            report["peak_rss_mb"] = own_peak_rss_mb()
            report["setup_rss_mb"] = work.setup_rss_mb
            report["notes"] = work.notes
            report["samples"], report["errors"], report["counters"] = {}, {}, {}
            for key, timing in timings.items():
                if isinstance(timing, Exception):
                    h._report(timing)
                    report["errors"][key] = h._short(timing)
                else:
                    report["samples"][key] = timing.samples
                    if key in work.counters:
                        report["counters"][key] = work.counters[key]()
            if report["samples"]:
                np.savez(cfg["out"], **work.results())
    except Exception as exc:
        h._report(exc)
        report["error"] = h._short(exc)
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(report), flush=True)
    return 0


def _spawn(script: str, system: str, cfg: dict) -> dict:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    try:
        p = subprocess.run([sys.executable, script, "--worker", system, "--config",
                            json.dumps(cfg)], env=env, capture_output=True, text=True,
                           timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"worker timed out after {WORKER_TIMEOUT_S} s"}
    if os.environ.get("QTRACE_BENCH_TRACEBACK"):
        sys.stderr.write(p.stderr)
    line = next((x for x in p.stdout.splitlines() if x.startswith(RESULT_TAG)), None)
    if line is None:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"worker exited with status {p.returncode}: {tail[:160]}"}
    return json.loads(line[len(RESULT_TAG):])


def run_workers(script: str, systems: list[str], cfg: dict, rounds: int,
                tmpdir: str) -> dict[str, dict]:
    """Parent side: run each system's worker ``rounds`` times, one process at a time.

    The order is rotated every round (a noisy spell of the machine then hits the systems
    alike). Samples are pooled over rounds, peak RSS is the largest; a system that skips
    or fails is not run again. Returns the merged report per system, with ``out`` naming
    its last ``.npz`` of arrays.
    """
    merged: dict[str, dict] = {s: {} for s in systems}
    for r in range(rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)] if systems else []
        for system in order:
            done = merged[system]
            if "skip" in done or "error" in done:
                continue
            out = os.path.join(tmpdir, f"worker{systems.index(system)}-round{r}.npz")
            rep = _spawn(script, system, dict(cfg, out=out))
            if "skip" in rep or "error" in rep:
                done.clear()
                done.update(rep)
                continue
            for key, samples in rep["samples"].items():
                done.setdefault("samples", {}).setdefault(key, []).extend(samples)
            done.setdefault("errors", {}).update(rep["errors"])
            done["counters"] = rep["counters"]
            done["peak_rss_mb"] = max(done.get("peak_rss_mb", 0.0), rep["peak_rss_mb"])
            done["setup_rss_mb"] = rep["setup_rss_mb"]
            done["notes"] = rep.get("notes", {})
            if os.path.exists(out):
                done["out"] = out
    return merged


def worker_table(title: str, key: str, reports: dict[str, dict],
                 finish: Callable[[str, dict, h.Timing, dict], h.Row], reference: str,
                 notes: dict[str, str] | None = None, **row_defaults) -> list[h.Row]:
    """One table (rows in ``reports``' order, then skip rows from ``notes``).

    ``finish(system, arrays, timing, report)`` builds a system's row from its pooled
    samples for table ``key`` and the arrays its worker saved.
    """
    rows = []
    for system, rep in reports.items():
        if "skip" in rep:
            rows.append(h.skip(title, system, rep["skip"], **row_defaults))
        elif "error" in rep or key in rep.get("errors", {}) or key not in rep.get("samples", {}):
            why = rep.get("error") or rep.get("errors", {}).get(key) or "no samples"
            rows.append(h.Row(title, system, note="FAILED " + why, status="fail", **row_defaults))
        else:
            timing = h.Timing(rep["samples"][key])
            with np.load(rep["out"]) as npz:
                arrays = dict(npz)
            rows.append(h.guarded(title, system,
                                  lambda s=system, a=arrays, t=timing, r=rep: finish(s, a, t, r),
                                  **row_defaults))
    for system, note in (notes or {}).items():
        rows.append(h.skip(title, system, note, **row_defaults))
    return h.publish(h.set_ratios(rows, reference=reference))


def memory_extra(rep: dict) -> dict[str, str]:
    """Columns ``peak RSS MB`` (whole worker process) and ``setup MB`` (before compiling)."""
    extra = {"peak RSS MB": f"{rep['peak_rss_mb']:.0f}"}
    if rep.get("setup_rss_mb") is not None:
        extra["setup MB"] = f"{rep['setup_rss_mb']:.0f}"
    return extra


def qtrace_extra(counters: dict[str, float], per_label: str = "call") -> tuple[dict, str]:
    """Columns from qtrace counters per call (launches, adstack MB, max-reducer
    dispatches) and a note when kernels were compiled after warm-up."""
    extra = h.launches_note(counters, per_label)
    if "adstack_bytes" in counters:
        extra[f"adstack MB/{per_label}"] = f"{counters['adstack_bytes'] / 1e6:.3g}"
    if "max_reducer_dispatches" in counters:
        extra[f"max-reducer/{per_label}"] = f"{counters['max_reducer_dispatches']:.3g}"
    return extra, h.compiles_note(counters, 1)


def peer_notes(names: dict[str, str], systems: str | None, what: str) -> dict[str, str]:
    """Skip notes for peers without a version of this benchmark (``names``: system ->
    module): "not installed" or "no <what> version written yet"."""
    notes = {}
    for system, module in h.selected(names, systems).items():
        if importlib.util.find_spec(module) is None:
            pip = h.PEERS.get(module, (module, module))[1]
            notes[system] = f"{module} not installed (pip install {pip})"
        else:
            notes[system] = f"no {what} version for {module} written yet"
    return notes


def load_for_versions(reports: dict[str, dict]) -> None:
    """Import, in the parent, the systems that ran in workers, so that the version line
    printed by ``_harness.main`` names them (the parent's own RSS is not reported)."""
    if any(name.startswith("qtrace") for name in reports):
        h.load_qtrace()
    for prefix, peer in (("JAX", "jax"), ("Dr.Jit", "drjit"), ("Quadrants", "quadrants"),
                         ("Warp", "warp")):
        if any(name.startswith(prefix) and "skip" not in rep for name, rep in reports.items()):
            h.load_peer(peer)


def worker_argv(argv) -> tuple[str, dict] | None:
    """``(system, cfg)`` when ``argv`` is ``--worker SYSTEM --config JSON``, else None."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 4 and argv[0] == "--worker" and argv[2] == "--config":
        return argv[1], json.loads(argv[3])
    return None


# --------------------------------------------------------------------------- the benchmark


def step(m, v, c):
    """One iteration of the loop body, for any NumPy-like module ``m``."""
    return m.sin(v) * c + 0.5 * v


class _Problem:
    """Inputs (the same in the parent and every worker: drawn from ``seed``)."""

    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng(seed)
        self.n = n
        self.x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        self.c = rng.uniform(0.5, 1.5, n).astype(np.float32)
        self.trips = rng.integers(0, MAX_TRIPS + 1, n).astype(np.int32)
        self.max_trips = int(self.trips.max(initial=0))


def reference(x, c, trips, chunk: int = 1 << 16) -> tuple[np.ndarray, ...]:
    """float64 ``out``, ``d loss/dx``, ``d loss/dc`` by hand, in chunks of elements.

    Forward: iterate every element to the chunk's largest trip count, masked, keeping
    the iterates; backward: the adjoint recurrence over them in reverse.
    """
    out, gx, gc = (np.empty(len(x)) for _ in range(3))
    for s in range(0, len(x), chunk):
        sl = slice(s, s + chunk)
        v, cc, nn = x[sl].astype(np.float64), c[sl].astype(np.float64), trips[sl]
        iterates = []
        for k in range(int(nn.max(initial=0))):
            iterates.append(v)
            v = np.where(k < nn, step(np, v, cc), v)
        out[sl] = v
        gv, g = np.ones_like(v), np.zeros_like(v)
        for k in reversed(range(len(iterates))):
            live, vk = k < nn, iterates[k]
            g += np.where(live, gv * np.sin(vk), 0.0)
            gv = np.where(live, gv * (np.cos(vk) * cc + 0.5), gv)
        gx[sl], gc[sl] = gv, g
    return out, gx, gc


def prepare_jax(cfg: dict) -> Work | str:
    jax, reason = h.load_peer("jax")
    if jax is None:
        return reason
    import jax.numpy as jnp
    from jax import lax

    p = _Problem(cfg["n"], cfg["seed"])
    top = p.max_trips

    def forward(x, c, n):
        return lax.fori_loop(0, top, lambda i, v: jnp.where(i < n, step(jnp, v, c), v), x)

    def loss(x, c, n):
        return jnp.sum(forward(x, c, n))

    fwd = jax.jit(forward)
    fwd_bwd = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    x, c, n = (jax.device_put(a) for a in (p.x, p.c, p.trips))
    jax.block_until_ready((x, c, n))
    setup = own_peak_rss_mb()
    res = {}

    def run_fwd():
        res["out"] = fwd(x, c, n).block_until_ready()

    def run_grad():
        res["grad"] = jax.block_until_ready(fwd_bwd(x, c, n))

    def results():
        value, (gx, gc) = res["grad"]
        return {"out": np.asarray(res["out"]), "loss": np.asarray(value),
                "gx": np.asarray(gx), "gc": np.asarray(gc)}

    return Work([h.Case("fwd", run_fwd), h.Case("grad", run_grad)], results,
                setup_rss_mb=setup)


def prepare_qtrace(cfg: dict) -> Work | str:
    qt, reason = h.load_qtrace()
    if qt is None:
        return reason
    missing = [f for f in ("fori_loop", "value_and_grad") if not hasattr(qt, f)]
    if missing:
        return "qtrace incomplete: missing " + ", ".join(missing)
    p = _Problem(cfg["n"], cfg["seed"])

    def forward(x, c, n):
        return qt.fori_loop(0, n, lambda i, v: step(qt, v, c), x)

    def loss(x, c, n):
        return qt.sum(forward(x, c, n))

    fwd = qt.jit(forward)
    fwd_bwd = qt.jit(qt.value_and_grad(loss, argnums=(0, 1)))
    # copies, as jax.device_put makes: memory qtrace owns lets the adstack reuse its sizing
    # (a borrowed NumPy array may change behind qtrace's back and is re-reduced per call)
    x, c, n = (qt.asarray(a, copy=True) for a in (p.x, p.c, p.trips))
    qt.eval(x, c, n)
    qt.sync()
    setup = own_peak_rss_mb()
    res = {}

    def run_fwd():
        r = fwd(x, c, n)
        qt.eval(r)
        qt.sync()
        res["out"] = r

    def run_grad():
        value, (gx, gc) = fwd_bwd(x, c, n)
        qt.eval(value, gx, gc)
        qt.sync()
        res["grad"] = value, gx, gc

    def results():
        value, gx, gc = res["grad"]
        return {"out": res["out"].numpy(), "loss": value.numpy(), "gx": gx.numpy(),
                "gc": gc.numpy()}

    counters = {"fwd": lambda: h.qtrace_counters(qt, run_fwd, 1, QT_KEYS),
                "grad": lambda: h.qtrace_counters(qt, run_grad, 1, QT_KEYS)}
    return Work([h.Case("fwd", run_fwd), h.Case("grad", run_grad)], results, counters,
                setup_rss_mb=setup)


def prepare_drjit(cfg: dict) -> Work | str:
    dr, _, reason = h.load_drjit_llvm()
    if dr is None:
        return reason
    from drjit.llvm.ad import Float32, Int32

    p = _Problem(cfg["n"], cfg["seed"])
    hint = max(p.max_trips, 1)

    def forward(x, c, n, max_iterations=-1):
        _, v = dr.while_loop((Int32(0), x), lambda i, v: i < n,
                             lambda i, v: (i + 1, step(dr, v, c)),
                             mode="symbolic", max_iterations=max_iterations)
        return v

    x, c, n = Float32(p.x), Float32(p.c), Int32(p.trips)
    dr.eval(x, c, n)
    dr.sync_thread()
    setup = own_peak_rss_mb()
    res = {}

    def run_fwd():
        out = forward(x, c, n)
        dr.eval(out)
        dr.sync_thread()
        res["out"] = out

    def run_grad():
        xg, cg = Float32(x), Float32(c)  # fresh leaves: gradients do not accumulate
        dr.enable_grad(xg, cg)
        loss = dr.sum(forward(xg, cg, n, max_iterations=hint))
        dr.backward(loss)
        value, gx, gc = dr.detach(loss), dr.grad(xg), dr.grad(cg)
        dr.eval(value, gx, gc)
        dr.sync_thread()
        res["grad"] = value, gx, gc

    def results():
        value, gx, gc = res["grad"]
        return {"out": res["out"].numpy(), "loss": np.asarray(value.numpy()[0]),
                "gx": gx.numpy(), "gc": gc.numpy()}

    notes = {"fwd": "symbolic dr.while_loop, no hint",
             "grad": f"max_iterations={hint} hint (the data's largest trip count), "
                     "required for reverse mode"}
    return Work([h.Case("fwd", run_fwd), h.Case("grad", run_grad)], results,
                setup_rss_mb=setup, notes=notes)


def prepare_quadrants(cfg: dict) -> Work | str:
    qd, kernels, reason = h.load_kernel_peer("quadrants", ad_stack_experimental_enabled=True)
    if qd is None:
        return reason
    if not hasattr(qd, "ad") or not hasattr(qd.ad, "Tape"):
        return "this quadrants has no qd.ad.Tape"
    p = _Problem(cfg["n"], cfg["seed"])
    x, c = (qd.ndarray(qd.f32, shape=p.n, needs_grad=True) for _ in range(2))
    n = qd.ndarray(qd.i32, shape=p.n)
    out = qd.ndarray(qd.f32, shape=p.n)
    loss = qd.ndarray(qd.f32, shape=1, needs_grad=True)
    x.from_numpy(p.x)
    c.from_numpy(p.c)
    n.from_numpy(p.trips)
    qd.sync()
    setup = own_peak_rss_mb()

    def run_fwd():
        kernels.b3_forward(x, c, n, out)
        qd.sync()

    def run_grad():
        x.grad.fill(0.0)
        c.grad.fill(0.0)
        with qd.ad.Tape(loss=loss):  # zeroes loss, seeds loss.grad = 1, runs b3_loss.grad
            kernels.b3_loss(x, c, n, loss)
        qd.sync()

    try:  # untimed probe: an installed Quadrants that cannot reverse this loop is a skip
        with h._silenced():
            run_grad()
    except Exception as exc:
        return "quadrants cannot differentiate the dynamic-trip loop: " + h._short(exc)

    def results():
        return {"out": out.to_numpy(), "loss": np.asarray(loss.to_numpy()[0]),
                "gx": x.grad.to_numpy(), "gc": c.grad.to_numpy()}

    notes = {"fwd": "kernel, inner range(n[i]) loop",
             "grad": "qd.ad.Tape, adstack (ad_stack_experimental_enabled=True), no hint"}
    return Work([h.Case("fwd", run_fwd), h.Case("grad", run_grad)], results,
                setup_rss_mb=setup, notes=notes)


def prepare_warp(cfg: dict) -> Work | str:
    wp, kernels, reason = h.load_kernel_peer("warp")
    if wp is None:
        return reason
    p = _Problem(cfg["n"], cfg["seed"])
    top = kernels.B3_MAX_TRIPS
    if p.max_trips > top:
        return f"Warp's B3 kernel is unrolled to {top} steps; the data has {p.max_trips}"
    dev = "cpu"
    x, c = (wp.array(a, dtype=wp.float32, device=dev, requires_grad=True) for a in (p.x, p.c))
    n = wp.array(p.trips, dtype=wp.int32, device=dev)
    out = wp.empty(p.n, dtype=wp.float32, device=dev)
    loss = wp.zeros(1, dtype=wp.float32, device=dev, requires_grad=True)
    wp.synchronize_device(dev)
    setup = own_peak_rss_mb()

    def run_fwd():
        wp.launch(kernels.b3_forward, dim=p.n, inputs=[x, c, n, out], device=dev)
        wp.synchronize_device(dev)

    def grad(kernel):
        for a in (x.grad, c.grad, loss.grad, loss):
            a.zero_()
        tape = wp.Tape()
        with tape:
            wp.launch(kernel, dim=p.n, inputs=[x, c, n, loss], device=dev)
        tape.backward(loss=loss)  # seeds loss.grad = 1
        wp.synchronize_device(dev)

    def results():
        arrays = {"out": out.numpy(), "loss": np.asarray(loss.numpy()[0]),
                  "gx": x.grad.numpy().copy(), "gc": c.grad.numpy().copy()}
        grad(kernels.b3_loss_dynamic)  # untimed: the dynamic loop's (wrong) gradient
        arrays["gx_dynamic"], arrays["gc_dynamic"] = x.grad.numpy(), c.grad.numpy()
        return arrays

    notes = {"fwd": "kernel, range(n[i]) loop",
             "grad": f"loop unrolled to {top} + mask (wp.static), wp.Tape"}
    return Work([h.Case("fwd", run_fwd),
                 h.Case("grad", lambda: grad(kernels.b3_loss_unrolled))], results,
                setup_rss_mb=setup, notes=notes)


# Systems, each run in its own worker (system -> prepare function).
SYSTEMS = {"JAX fori_loop to max + mask": prepare_jax, "Dr.Jit while_loop": prepare_drjit,
           "Quadrants kernel": prepare_quadrants, "Warp kernel": prepare_warp,
           "qtrace fori_loop": prepare_qtrace}
REFERENCE = "qtrace fori_loop"


def run(quick: bool = False, n: int | None = None, repeats: int | None = None,
        rounds: int | None = None, seed: int = 0, systems: str | None = None) -> list[h.Row]:
    """Benchmark every system (or those ``systems`` names); rows of two tables."""
    n = int(n if n is not None else (100_000 if quick else 1_000_000))
    cfg = {"n": n, "seed": seed, "repeats": repeats or (3 if quick else 5), "warmup": 1}
    rounds = rounds or (1 if quick else 2)
    names = list(h.selected(SYSTEMS, systems))
    with tempfile.TemporaryDirectory(prefix="qtrace-b3-") as tmp:
        reports = run_workers(os.path.abspath(__file__), names, cfg, rounds, tmp)
        load_for_versions(reports)
        p = _Problem(n, seed)
        ref_out, ref_gx, ref_gc = reference(p.x, p.c, p.trips)
        ref_loss, loss_scale = float(ref_out.sum()), float(np.abs(ref_out).sum()) or 1.0
        kw = dict(unit="ms", per="call", error_kind="max rel err")
        trips = f"trips uniform in [0, {MAX_TRIPS}], mean {p.trips.mean():.1f}, max {p.max_trips}"
        fwd_title = f"B3 loop, forward only: N={n:,} float32, {trips}"
        grad_title = (f"B3 loop, forward+backward (value and grad w.r.t. x, c): N={n:,} float32, "
                      f"{trips}")

        def row_note(rep, key, *more):
            return "; ".join(x for x in (rep.get("notes", {}).get(key, ""), *more) if x)

        def finish_fwd(system, arrays, timing, rep):
            extra, note = qtrace_extra(rep["counters"].get("fwd", {}))
            return h.timed_row(fwd_title, system, timing, error=h.max_rel_err(arrays["out"], ref_out),
                               tol=TOL, extra=extra, note=row_note(rep, "fwd", note), **kw)

        def finish_grad(system, arrays, timing, rep):
            err_x = h.max_rel_err(arrays["gx"], ref_gx)
            err_c = h.max_rel_err(arrays["gc"], ref_gc)
            err_loss = abs(float(arrays["loss"]) - ref_loss) / loss_scale
            if not np.isfinite(err_loss):
                err_loss = float("inf")
            counters, note = qtrace_extra(rep["counters"].get("grad", {}))
            extra = {**memory_extra(rep), "err x": f"{err_x:.1e}", "err c": f"{err_c:.1e}",
                     **counters}
            dynamic = ""
            if "gx_dynamic" in arrays:  # Warp: the untimed gradient through its dynamic loop
                dx = h.max_rel_err(arrays["gx_dynamic"], ref_gx)
                dc = h.max_rel_err(arrays["gc_dynamic"], ref_gc)
                verdict = "right" if max(dx, dc) <= TOL else "WRONG"
                dynamic = f"range(n[i]) loop's gradient (untimed) {verdict}: err x {dx:.1e}, c {dc:.1e}"
            return h.timed_row(grad_title, system, timing, error=max(err_x, err_c, err_loss),
                               tol=TOL, extra=extra, note=row_note(rep, "grad", note, dynamic), **kw)

        rows = worker_table(fwd_title, "fwd", reports, finish_fwd, REFERENCE, **kw)
        rows += worker_table(grad_title, "grad", reports, finish_grad, REFERENCE, **kw)
    return rows


def main(argv=None) -> int:
    worker = worker_argv(argv)
    if worker is not None:
        return serve(SYSTEMS, *worker)
    parser = h.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=None,
                        help="elements (default 1e6, 1e5 with --quick)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="worker runs per system, samples pooled (default 2, 1 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    return h.main(run, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
