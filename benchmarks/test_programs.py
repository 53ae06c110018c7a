"""Tests of B8's plumbing (``benchmarks/programs/``) at tiny sizes (``pytest benchmarks``).

Nothing here is timed: each program runs on NumPy, its checks pass NumPy's own answer and
fail a wrong one, the JAX port agrees with NumPy (skipped without JAX), and the harness
turns the runs into table rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import b8_programs, programs
from benchmarks.programs import _common

MODULES = [programs.load(name) for name in programs.PROGRAMS]
IDS = list(programs.PROGRAMS)


@pytest.mark.parametrize("m", MODULES, ids=IDS)
def test_program_runs_on_numpy_and_checks_pass_itself(m):
    prm = m.SIZES["tiny"][0]
    state = _common.to_numpy(m.program(np, prm))
    assert state and all(np.all(np.isfinite(a)) for a in state)
    assert m.error(state, state) == 0.0 <= m.TOL
    # the program is deterministic (seeded inputs), so the reference is well defined
    assert m.error(_common.to_numpy(m.program(np, prm)), state) == 0.0


@pytest.mark.parametrize("m", MODULES, ids=IDS)
def test_check_fails_one_step_fewer(m):
    prm = m.SIZES["tiny"][0]
    ref = _common.to_numpy(m.program(np, prm))
    fewer = _common.to_numpy(m.program(np, dict(prm, steps=prm["steps"] - 1)))
    assert not m.error(fewer, ref) <= m.TOL


@pytest.mark.parametrize("m", MODULES, ids=IDS)
def test_step_function_returns_the_new_state(m):
    """The step (what ``qt.jit`` wraps) used functionally gives the program's answer."""
    prm = m.SIZES["tiny"][0]
    ref = _common.to_numpy(m.program(np, prm))
    plain = m.make_step(np, prm)

    def copying_step(*args):  # arguments copied: only the returned state counts
        return plain(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])

    assert m.error(_common.to_numpy(m.program(np, prm, step=copying_step)), ref) == 0.0


@pytest.mark.parametrize("m", MODULES, ids=IDS)
def test_jax_port_matches_numpy(m):
    jax = pytest.importorskip("jax")
    prm = m.SIZES["tiny"][0]
    ref = _common.to_numpy(m.program(np, prm))
    with _common.x64(jax):
        got = _common.to_numpy(m.make_jax(jax, prm)())
    assert m.error(got, ref) <= m.TOL


def test_harness_rows():
    rows = b8_programs.run(size="tiny", repeats=1, systems="numpy", programs="life,mlp")
    assert [r.system for r in rows] == ["NumPy", "NumPy"]
    assert all(r.check == "PASS" and r.unit == "ms" and r.per == "run" for r in rows)
    assert "live" in rows[0].note and rows[1].benchmark.startswith("B8 2-layer MLP")


def test_harness_reports_a_missing_function_as_failed(monkeypatch):
    """A system lacking a NumPy function the program calls gets a FAILED row, not a crash."""
    from benchmarks import _harness as h

    class Partial:  # NumPy without hstack
        def __getattr__(self, name):
            if name == "hstack":
                raise AttributeError("module 'partial' has no attribute 'hstack'")
            return getattr(np, name)

    m = programs.load("nbody")
    problem = _common.Problem(m, m.SIZES["tiny"][0])
    monkeypatch.setattr(problem, "prepare_qtrace_eager", lambda: problem.case(
        _common.QT_EAGER, lambda: m.program(Partial(), problem.prm)))
    monkeypatch.setattr(problem, "prepare_qtrace_jit", lambda: "not tested here")
    rows = problem.run(repeats=1, systems="numpy,qtrace")
    assert [r.status for r in rows] == ["ok", "fail", "skip"]
    assert "hstack" in rows[1].note and rows[1].passed is False
    assert "FAILED" in h.format_table(rows)
