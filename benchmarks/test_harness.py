"""Tests of the benchmark harness's logic (run with ``pytest benchmarks``).

No assertion here depends on how fast anything runs: timing is judged by the benchmark
tables, never by tests.
"""

from __future__ import annotations

import math

import pytest

from benchmarks import _harness as h
from benchmarks import b1_elementwise, b2_dispatch, b5_eager_loop, b7_small_updates


def test_measure_counts_samples_and_runs_setup_before_each_call():
    calls = []
    timing = h.measure(lambda: calls.append("fn"), repeats=3, warmup=2, per=4,
                       setup=lambda: calls.append("setup"))
    assert len(timing.samples) == 3
    assert calls == ["setup", "fn"] * 5
    assert timing.min <= timing.median <= timing.max


def test_measure_interleaves_and_isolates_failures():
    calls = []

    def broken():
        calls.append("b")
        if calls.count("b") == 3:  # warm-up and first sample pass, the second raises
            raise RuntimeError("boom")

    cases = [h.Case("a", lambda: calls.append("a")), h.Case("b", broken)]
    result = h.measure_interleaved(cases, repeats=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "a", "b", "a"]
    assert len(result["a"].samples) == 3
    assert isinstance(result["b"], RuntimeError)


def test_measure_rejects_zero_repeats():
    with pytest.raises(ValueError):
        h.measure(lambda: None, repeats=0)


def test_row_check():
    row = h.Row("B", "s", error=1e-7, tol=1e-6)
    assert row.passed is True and row.check == "PASS"
    assert h.Row("B", "s", error=1e-5, tol=1e-6).check == "FAIL"
    assert h.Row("B", "s", error=math.nan, tol=1e-6).check == "FAIL"
    assert h.Row("B", "s").passed is None
    assert h.Row("B", "s", status="fail").passed is False


def test_set_ratios_prefers_the_named_qtrace_row_and_falls_back():
    rows = [h.Row("B", "NumPy", median=4.0), h.Row("B", "qtrace eager", median=1.0),
            h.Row("B", "qtrace jit", median=2.0), h.skip("B", "JAX", "not installed")]
    h.set_ratios(rows, reference="qtrace jit")
    assert [r.ratio for r in rows] == [2.0, 0.5, 1.0, None]
    rows[2] = h.skip("B", "qtrace jit", "broken")
    h.set_ratios(rows, reference="qtrace jit")
    assert rows[0].ratio == 4.0
    rows = h.set_ratios([h.Row("B", "NumPy", median=4.0)])
    assert rows[0].ratio is None


def test_run_systems_turns_every_outcome_into_a_row():
    def finish_ok(timing):
        return h.timed_row("B", "ok", timing, unit="µs", per="call", error=0.0, tol=1.0)

    def finish_raises(timing):
        raise ValueError("bad finish")

    def prepare_raises():
        raise ImportError("half-written")

    prepare = {
        "ok": lambda: h.Case("ok", lambda: None, finish=finish_ok),
        "skipped": lambda: "not installed",
        "prepare raises": prepare_raises,
        "run raises": lambda: h.Case("run raises", lambda: 1 / 0),
        "finish raises": lambda: h.Case("finish raises", lambda: None, finish=finish_raises),
    }
    rows = h.run_systems("B", prepare, repeats=2, reference="ok", unit="µs", per="call")
    assert [r.system for r in rows] == list(prepare)
    assert [r.status for r in rows] == ["ok", "skip", "fail", "fail", "fail"]
    assert rows[0].check == "PASS" and rows[0].ratio == 1.0
    assert "not installed" in rows[1].note
    assert "ImportError" in rows[2].note
    assert "ZeroDivisionError" in rows[3].note
    assert "bad finish" in rows[4].note
    table = h.format_table(rows)
    assert "median µs/call" in table and "PASS" in table and "FAIL" in table


def test_selected_filters_by_case_insensitive_prefix():
    prepare = {"NumPy": 1, "JAX jit": 2, "qtrace eager": 3, "qtrace jit": 4}
    assert list(h.selected(prepare, "numpy, QTRACE")) == ["NumPy", "qtrace eager",
                                                          "qtrace jit"]
    assert h.selected(prepare, None) == prepare


def test_errors():
    import numpy as np

    ref = np.array([1.0, -2.0])
    assert h.max_abs_err(np.array([1.0, -2.5], np.float32), ref) == 0.5
    assert h.max_rel_err(np.array([1.0, -2.5]), ref) == 0.25
    assert h.max_abs_err(np.array([1.0]), ref) == math.inf
    assert h.max_abs_err(np.array([1.0, np.nan]), ref) == math.inf


def test_optional_imports_never_raise():
    module, reason = h.load_peer("surely_not_a_module_qtrace_bench")
    assert module is None and "not installed" in reason
    qt, reason = h.load_qtrace()
    assert (qt is None) == bool(reason)
    assert h.peak_rss_mb() > 0


@pytest.mark.parametrize("run", [
    lambda: b1_elementwise.run(n=1000, repeats=1, systems="numpy"),
    lambda: b2_dispatch.run(steps=20, repeats=1, systems="numpy"),
    lambda: b5_eager_loop.run(n=100, repeats=1, systems="numpy"),
    lambda: b7_small_updates.run(n=100, steps=5, repeats=1, systems="numpy"),
])
def test_benchmarks_run_and_check_numpy(run):
    rows = run()
    assert len(rows) == 1 and rows[0].system.startswith("NumPy")
    assert rows[0].check == "PASS", rows[0]


def test_b7_check_fails_a_wrong_answer():
    """B7's tolerance passes float32 rounding but not a missed step or swapped arrays."""
    import numpy as np

    steps = 20
    problem = b7_small_updates._Problem(1000, steps, seed=0)
    a0, ref = problem.a0, problem.ref
    tol = b7_small_updates.tolerance(steps)
    step = b7_small_updates.make_step(np)

    def run32(n):
        arrays = [a.copy() for a in a0]
        for _ in range(n):
            arrays = step(arrays)
        return arrays

    assert b7_small_updates.max_rel_err(run32(steps), ref) <= tol
    assert b7_small_updates.max_rel_err(run32(steps - 1), ref) > 10 * tol
    swapped = run32(steps)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    assert b7_small_updates.max_rel_err(swapped, ref) > 10 * tol
