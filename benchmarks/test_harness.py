"""Tests of the benchmark harness's logic (run with ``pytest benchmarks``).

No assertion here depends on how fast anything runs: timing is judged by the benchmark
tables, never by tests.
"""

from __future__ import annotations

import io
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


def _long_rows():
    """Rows as the benchmarks make them, with every field at its longest."""
    rows = [h.timed_row("B1 fused elementwise chain: N=1,000,000 float32, a title long enough to "
                        "wrap over a hundred columns", "qtrace eager", h.Timing([4e-3, 3e-3, 9e-3]),
                        unit="ms", per="eval", error=3e-7, tol=1e-6,
                        extra={"GB/s": "2.77", "launches/eval": "1", "peak RSS MB": "144"},
                        note="compiles 1, disk hits 0; goal <= 50 ms above imports: met"),
            h.skip("B1 fused elementwise chain: N=1,000,000 float32, a title long enough to "
                   "wrap over a hundred columns", "Quadrants", "quadrants not installed (pip "
                   "install quadrants)", unit="ms", per="eval"),
            h.Row("B9 recording", "4 boundary assignments + evaluation, a system name longer "
                  "than its column", median=6.7e-5, unit="µs",
                  note="NumPy runs it in 0.18 µs; qtrace records it in 3.34 µs (18.2x NumPy) "
                       "with nothing pending, 3.20 µs with 800 operations pending " * 2),
            h.failed("B9 recording", "JAX cold (persistent cache on)",
                     RuntimeError("x" * 150))]
    return h.set_ratios(rows)


def test_compact_tables_fit_100_columns_and_keep_every_note():
    rows = _long_rows()
    text = h.format_compact(rows)
    assert max(len(line) for line in text.splitlines()) <= h.WIDTH
    assert text.count("== B1") == 1 and text.count("== B9") == 1
    flat = "".join(text.split())
    for row in rows:  # nothing is cut: every name, extra column and note is there, wrapped
        assert "".join(row.system.split()) in flat
        assert "".join(row.note.split()) in flat
    assert "launches/eval1" in flat and "4 ms" in text and "PASS" in text and "FAIL" in text
    assert "3.00e-07" not in text  # errors are details: only --wide shows them
    assert "3.00e-07" in h.format_table(rows[:2])


def test_stream_prints_each_row_once_as_it_is_published():
    rows = _long_rows()
    out = io.StringIO()
    with h.streaming(h.TableStream(out)) as stream:
        h.publish(rows[:1])
        assert "qtrace eager" in out.getvalue() and "Quadrants" not in out.getvalue()
        h.publish(rows[:2])          # a row published twice prints once
        stream(rows)                 # rows a benchmark returns without publishing
    h.publish(rows)                  # after the block: not printed again
    text = out.getvalue()
    assert text.count("qtrace eager") == 1 and text.count("Quadrants") == 1
    assert stream.rows == rows
    assert max(len(line) for line in text.splitlines()) <= h.WIDTH


def test_wide_stream_prints_a_benchmark_when_its_last_row_is_in():
    rows = _long_rows()
    out = io.StringIO()
    with h.streaming(h.TableStream(out, wide=True)):
        h.publish(rows[:2])
        assert out.getvalue() == ""  # B1 may still get rows
        h.publish(rows[2:3])         # B9 starts: B1 is complete
        assert "min–max ms" in out.getvalue() and "B9" not in out.getvalue()
        h.publish(rows[3:])
    assert out.getvalue().count("== B9") == 1  # closing the stream prints the last table


def test_run_and_print_streams_and_reports_failure(capsys):
    def run():
        h.publish(_long_rows()[:1])
        assert "qtrace eager" in capsys.readouterr().out  # printed before run returns
        return _long_rows()[3:]

    assert h.run_and_print(run) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "peak RSS" in out
    assert max(len(line) for line in out.splitlines()) <= h.WIDTH


def test_qtrace_bench_command_streams_narrow_tables(capsys):
    from qtrace.__main__ import main

    assert main(["bench", "--quick", "--systems", "numpy", "b1"]) == 0
    out = capsys.readouterr().out
    assert "== B1" in out and "NumPy" in out and "PASS" in out
    assert max(len(line) for line in out.splitlines()) <= h.WIDTH
    assert main(["bench", "--quick", "--systems", "numpy", "--wide", "b1"]) == 0
    assert "min–max" in capsys.readouterr().out
