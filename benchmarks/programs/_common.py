"""What the six B8 programs share: systems, timing cases, reference, conversions.

Every program module (``cavity``, ``nbody``, ``life``, ``lbm``, ``gray_scott``, ``mlp``)
provides:

* ``NAME``: the program's short name, and ``SIZES``: ``{"tiny" | "quick" | "full": [prm,
  ...]}``, parameter dicts (each with a ``"steps"`` entry, the outer time steps);
* ``title(prm)``: the table title (program, after whom, size);
* ``program(xp, prm, step=None)``: the whole program, written once against a NumPy-like
  module ``xp`` (``numpy`` or ``qtrace``), returning its final state (a tuple of arrays);
  ``step`` replaces the plain one-time-step function, e.g. by its ``qt.jit`` version;
* ``make_step(xp, prm)``: that one-time-step function (arrays in, new arrays out);
* ``make_jax(jax, prm)``: a zero-argument callable running the JAX port (functional
  style, step under ``jax.jit``, created once so later calls reuse the compiled step);
* ``error(got, ref)``: the deviation of a final state (NumPy arrays) from NumPy's, with
  ``TOL`` and ``ERROR_KIND`` (what the number is, for the table header).
"""

from __future__ import annotations

import contextlib
import time
from types import ModuleType

import numpy as np

try:
    from .. import _harness as h
except ImportError:  # run as a script: benchmarks/ is on sys.path and programs/ is top level
    import _harness as h

NUMPY, QT_EAGER, QT_JIT, JAX = "NumPy", "qtrace eager", "qtrace jit", "JAX jit"
SYSTEMS = (NUMPY, QT_EAGER, QT_JIT, JAX)
UNIT, PER = "ms", "run"


def to_numpy(state) -> list[np.ndarray]:
    """The final state as NumPy arrays (``np.asarray`` of each; this is where a lazy
    system computes, so it stays inside the timed region)."""
    return [np.asarray(a) for a in state]


def x64(jax: ModuleType):
    """A context manager turning on JAX's float64 (the programs compare in float64)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # older JAX

    return enable_x64()


def norm_rel_err(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    """The worst norm-wise relative error ``max|g - r| / max|r|`` over the state's arrays."""
    if len(got) != len(ref):
        return float("inf")
    return max(h.max_rel_err(g, r) for g, r in zip(got, ref))


class Problem:
    """One program at one size: its title, reference state and one timing case per system."""

    def __init__(self, module: ModuleType, prm: dict):
        self.module, self.prm = module, prm
        self.title = "B8 " + module.title(prm)
        self._ref: list[np.ndarray] | None = None

    @property
    def ref(self) -> list[np.ndarray]:
        """NumPy's final state (float64), computed once, untimed."""
        if self._ref is None:
            self._ref = to_numpy(self.module.program(np, self.prm))
        return self._ref

    def case(self, system: str, run, *, qt: ModuleType | None = None, cold: bool = False,
             wrap=None) -> h.Case:
        """The case timing ``run()`` (the whole program) plus the final ``np.asarray``.

        ``qt``: count qtrace's kernel launches and compiles per run (reset before each
        run, read right after it). ``cold``: put the first (warm-up) run's time, which
        includes compilation, in the row's note. ``wrap``: a context manager factory
        entered around every run (JAX's float64 mode).
        """
        state: dict = {"out": None, "cold": None, "stats": None}
        wrap = wrap or contextlib.nullcontext

        def fn():
            t0 = time.perf_counter()
            with wrap():
                out = to_numpy(run())
            if state["cold"] is None:
                state["cold"] = time.perf_counter() - t0
            state["out"] = out
            if qt is not None:
                state["stats"] = qt.stats()

        def finish(timing: h.Timing) -> h.Row:
            m = self.module
            err = m.error(state["out"], self.ref)
            notes, extra = [], {}
            if cold and state["cold"] is not None:
                notes.append(f"cold {state['cold'] * 1e3:.0f} ms")
            stats = state["stats"] or {}
            if "kernel_launches" in stats:
                extra["launches/run"] = f"{stats['kernel_launches']:.0f}"
            if stats.get("compiles"):
                notes.append(f"{stats['compiles']} compiles in the last run")
            if hasattr(m, "note"):
                notes.append(m.note(state["out"]))
            return h.timed_row(self.title, system, timing, unit=UNIT, per=PER, error=err,
                               tol=m.TOL, error_kind=m.ERROR_KIND, extra=extra,
                               note="; ".join(n for n in notes if n))

        return h.Case(system, fn, setup=qt.reset_stats if qt is not None else None,
                      finish=finish)

    # ------------------------------------------------------------------ the systems

    def prepare_numpy(self):
        return self.case(NUMPY, lambda: self.module.program(np, self.prm))

    def prepare_qtrace_eager(self):
        qt, reason = h.load_qtrace()
        if qt is None:
            return reason
        return self.case(QT_EAGER, lambda: self.module.program(qt, self.prm), qt=qt, cold=True)

    def prepare_qtrace_jit(self):
        qt, reason = h.load_qtrace()
        if qt is None:
            return reason
        step = qt.jit(self.module.make_step(qt, self.prm))  # traced on the warm-up run
        return self.case(QT_JIT, lambda: self.module.program(qt, self.prm, step=step), qt=qt,
                         cold=True)

    def prepare_jax(self):
        jax, reason = h.load_peer("jax")
        if jax is None:
            return reason
        with x64(jax):
            run = self.module.make_jax(jax, self.prm)
        return self.case(JAX, run, cold=True, wrap=lambda: x64(jax))

    def run(self, *, repeats: int, systems: str | None = None) -> list[h.Row]:
        prepare = {NUMPY: self.prepare_numpy, QT_EAGER: self.prepare_qtrace_eager,
                   QT_JIT: self.prepare_qtrace_jit, JAX: self.prepare_jax}
        return h.run_systems(self.title, prepare, systems=systems, repeats=repeats, warmup=2,
                             reference=QT_JIT, unit=UNIT, per=PER,
                             error_kind=self.module.ERROR_KIND)
