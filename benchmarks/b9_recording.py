"""B9 (issue 10): what one NumPy-style operation costs to record, against NumPy running it.

qtrace records operations instead of running them; eager code is only as fast as
NumPy if recording an operation costs about what NumPy takes to run it on a small array.
Each row times one operation on a 41×41 float64 array (the lid-driven cavity's grid),
per call, as the median of several samples of many calls:

* ``numpy``: NumPy running the operation;
* ``qtrace, shallow``: recording it with nothing else pending;
* ``qtrace, deep``: recording it with ``--depth`` operations already pending (the
  recording cost must not grow with the pending graph);
* the two evaluation rows time ``x[1:-1, 1:-1] = expr`` followed by an evaluation of a
  cached plan (what one step of a small stencil costs end to end), beside NumPy's
  assignment;
* the last row is an evaluation alone: ``qt.eval(x * 2.0)`` less recording ``x * 2.0``
  (the plan cached, its one kernel included).

The title names the recorder that ran: the compiled one where qtrace's C extension is
built, the Python one otherwise or with ``QTRACE_NATIVE=0`` (run both to compare).

No accuracy check applies (nothing is computed but the evaluation rows, whose values
are compared with NumPy's).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import _harness
else:
    from . import _harness

N = 41
TITLE = f"B9 recording, {N}x{N} float64"


def _time(fn, calls: int, repeats: int) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` samples of ``calls`` calls."""
    fn()
    _harness._optimised()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls)
    return statistics.median(samples)


def _operations(xp, p, q):
    def slice_():
        return p[1:-1, 2:]

    def slice_add():
        return p[1:-1, 2:] + p[1:-1, 0:-2]

    def elementwise():
        return p * q

    def scalar():
        return p * 2.0

    def assign_expr():
        p[1:-1, 1:-1] = q[1:-1, 2:]

    def assign_column():
        p[:, -1] = p[:, -2]

    def short_key():
        return p[1:-1]

    def assign_row():
        p[0] = q[1]

    return {"x[1:-1, 2:]": slice_, "x[1:-1, 2:] + x[1:-1, 0:-2]": slice_add, "x * y": elementwise,
            "x * 2.0": scalar, "x[1:-1, 1:-1] = y[1:-1, 2:]": assign_expr,
            "x[:, -1] = x[:, -2]": assign_column, "x[1:-1] (a short key)": short_key,
            "x[0] = y[1]": assign_row}


def run(quick: bool = False, systems: str | None = None, depth: int = 800) -> list:
    """The rows (``systems`` is accepted for the common runner; B9 times qtrace beside NumPy)."""
    qt, why = _harness.load_qtrace()
    calls, repeats = (300, 3) if quick else (3000, 7)
    rows = []
    rng = np.random.default_rng(0)
    a, b = rng.random((N, N)), rng.random((N, N))
    np_ops = _operations(np, a.copy(), b.copy())
    if qt is None:
        return [_harness.skip(TITLE, "qtrace", why)]
    from qtrace.graph import native
    title = f"{TITLE}, {'compiled' if native.active() else 'Python'} recorder"
    limit = qt.config.max_pending_nodes
    try:
        qt.config.max_pending_nodes = 1 << 30  # measure recording alone: no automatic cut
        for name, np_fn in np_ops.items():
            t_np = _time(np_fn, calls, repeats)
            found = {}
            for label, pending in (("shallow", 0), ("deep", depth)):
                p, q = qt.asarray(a.copy()), qt.asarray(b.copy())
                keep = [p]
                for _ in range(pending):
                    keep[0] = keep[0] * 1.0000001 + 1e-9  # a long pending chain
                qt_fn = _operations(qt, p, q)[name]
                found[label] = _time(qt_fn, calls, repeats)
                qt.eval(p, keep[0])
            rows.append(_harness.Row(
                benchmark=title, system=name, unit="µs",
                median=found["shallow"], note=(
                    f"NumPy runs it in {t_np * 1e6:.2f} µs; qtrace records it in "
                    f"{found['shallow'] * 1e6:.2f} µs ({found['shallow'] / t_np:.1f}x NumPy) "
                    f"with nothing pending, {found['deep'] * 1e6:.2f} µs with {depth} operations "
                    "pending")))
            _harness.publish(rows[-1:])
    finally:
        qt.config.max_pending_nodes = limit
    # a step end to end: the assignment and an evaluation of its (cached) plan
    for label, fn_np, fn_qt in _end_to_end(qt, a, b):
        t_np = _time(fn_np, calls, repeats)
        t_qt = _time(fn_qt, calls, repeats)
        rows.append(_harness.Row(
            benchmark=title, system=label, unit="µs", median=t_qt,
            note=f"NumPy {t_np * 1e6:.2f} µs; qtrace {t_qt / t_np:.1f}x NumPy"))
        _harness.publish(rows[-1:])
    # an evaluation alone: y = x * 2.0 recorded and evaluated, less y recorded (dropped)
    x = qt.asarray(a.copy())
    t_rec = _time(lambda: x * 2.0, calls, repeats)
    t_both = _time(lambda: qt.eval(x * 2.0), calls, repeats)
    rows.append(_harness.Row(
        benchmark=title, system="evaluation of a cached one-kernel plan", unit="µs",
        median=t_both - t_rec, note=(
            f"y = x * 2.0 and qt.eval(y): {t_both * 1e6:.2f} µs, less recording y alone "
            f"({t_rec * 1e6:.2f} µs); the kernel over {N * N} elements included")))
    _harness.publish(rows[-1:])
    return rows


def _end_to_end(qt, a, b):
    pn, qn = a.copy(), b.copy()
    p, q = qt.asarray(a.copy()), qt.asarray(b.copy())

    def np_step():
        pn[1:-1, 1:-1] = 0.25 * (qn[1:-1, 2:] + qn[1:-1, :-2] + qn[2:, 1:-1] + qn[:-2, 1:-1])

    def qt_step():
        p[1:-1, 1:-1] = 0.25 * (q[1:-1, 2:] + q[1:-1, :-2] + q[2:, 1:-1] + q[:-2, 1:-1])
        qt.eval(p)

    def np_bc():
        pn[:, -1] = pn[:, -2]
        pn[0, :] = pn[1, :]
        pn[:, 0] = pn[:, 1]
        pn[-1, :] = 0

    def qt_bc():
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
        qt.eval(p)

    return [("stencil assignment + evaluation", np_step, qt_step),
            ("4 boundary assignments + evaluation", np_bc, qt_bc)]


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--depth", type=int, default=800)
    _harness.add_wide_flag(parser)
    args = parser.parse_args(argv)
    return _harness.run_and_print(lambda: run(args.quick, depth=args.depth), wide=args.wide)


if __name__ == "__main__":
    sys.exit(main())
