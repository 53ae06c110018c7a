"""Shared helpers for the qtrace benchmarks (one definition of each, used by every bNN file).

What lives here:

* timing: :func:`measure_interleaved` / :func:`measure` (warm-up calls, then repeated
  samples timed with ``time.perf_counter``, garbage collection paused inside a sample)
  returning one :class:`Timing` (median, min, max) per system;
* memory: :func:`peak_rss_mb` (the process's peak resident set size);
* optional systems: :func:`load_qtrace` and :func:`load_peer` import qtrace and the peers
  (jax, drjit, quadrants, warp) behind guards, so a benchmark still runs, and prints a
  ``skip`` note, when one of them is missing or incomplete;
* running: :class:`Case` (one system's timed work) and :func:`run_systems`, which
  prepares every system, times them interleaved (:func:`measure_interleaved`) and
  turns each into a row, a skip note or a FAIL note;
* results: :class:`Row` (one system of one benchmark), :func:`timed_row`, :func:`skip`,
  :func:`failed`, :func:`guarded`, :func:`set_ratios`;
* output: :func:`publish` hands finished rows to the :func:`streaming` printer
  (:class:`TableStream`), which prints each as it completes, in a table that fits
  :data:`WIDTH` columns (:func:`format_compact`) or, with ``--wide``, every detail
  (:func:`format_table`); :func:`print_table` prints finished rows at once;
* qtrace counters: :func:`qtrace_counters` (``kernel_launches`` and ``compiles`` per call
  from ``qt.stats()``);
* the command line shared by every file: :func:`main`.

Ratios are ``system time / qtrace time``: above 1 means qtrace is faster.
Error checks compare each system against a float64 NumPy computation of the same work; a
row whose error exceeds its tolerance is marked FAIL, and a standalone run then exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import os
import platform
import resource
import statistics
import sys
import textwrap
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent

# The qtrace functions the benchmarks call (SPEC.md); a build lacking any of them is
# reported as "incomplete" instead of crashing a benchmark.
QTRACE_API = ("asarray", "eval", "sync", "jit", "stats", "reset_stats", "sin", "cos", "exp",
              "sqrt", "abs", "tanh")

# Peers: name -> (module to import, what to pip install). Each one is optional.
PEERS = {"jax": ("jax", "jax[cpu]"), "drjit": ("drjit", "drjit"),
         "quadrants": ("quadrants", "quadrants"), "warp": ("warp", "warp-lang")}

_UNIT_SCALE = {"s": 1.0, "ms": 1e3, "µs": 1e6, "ns": 1e9}


# --------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """Seconds per unit of work (per call or per iteration), one entry per sample."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)


@dataclass
class Case:
    """One system's timed work in one benchmark.

    ``fn`` is the timed region and must include its own synchronisation
    (``block_until_ready``, ``qt.sync()``) so that asynchronous work is inside it; it
    performs ``per`` units of work (calls, iterations), and each sample is divided by
    ``per``. ``setup``, if given, runs untimed before every call (warm-up ones included),
    e.g. to reset a loop's state. ``finish`` turns the :class:`Timing` into the
    system's :class:`Row` (error check, counters) once timing is over.
    """

    system: str
    fn: Callable[[], object]
    per: int = 1
    setup: Callable[[], object] | None = None
    finish: Callable[[Timing], Row] | None = None


def _sample(case: Case) -> float:
    if case.setup is not None:
        case.setup()
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        case.fn()
        t1 = time.perf_counter()
    finally:
        if enabled:
            gc.enable()
    return (t1 - t0) / case.per


def measure_interleaved(cases: Sequence[Case], *, repeats: int,
                        warmup: int = 1) -> dict[str, Timing | Exception]:
    """Time every case ``repeats`` times, round-robin, after ``warmup`` untimed calls each.

    Interleaving the systems' samples means a slow spell of a shared, noisy machine hits
    all of them alike, so their ratios stay meaningful. A case that raises is dropped
    from later rounds and its exception is returned in place of its :class:`Timing`.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    results: dict[str, Timing | Exception] = {}
    samples: dict[str, list[float]] = {}
    live = []
    for case in cases:
        try:
            for _ in range(warmup):
                if case.setup is not None:
                    case.setup()
                case.fn()
        except Exception as exc:
            results[case.system] = exc
        else:
            live.append(case)
            samples[case.system] = []
    _optimised()
    for _ in range(repeats):
        for case in list(live):
            try:
                samples[case.system].append(_sample(case))
            except Exception as exc:
                results[case.system] = exc
                live.remove(case)
    for case in live:
        results[case.system] = Timing(samples[case.system])
    return results


def _optimised() -> None:
    """Wait for qtrace's optimising compiles of the warm-up's plans (small plans first run
    quickly compiled code: ``qtrace.kernels.tiering``), so timed calls run the code a
    program runs from then on."""
    tiering = sys.modules.get("qtrace.kernels.tiering")
    if tiering is not None:
        tiering.wait()


def worker_threads(qt: ModuleType | None = None, dr: ModuleType | None = None,
                   one: bool = False) -> Callable[[], None]:
    """A setup step (untimed, before every sample) that gives qtrace (``qt``) and/or Dr.Jit
    (``dr``) one CPU worker thread (``one``) or the count each had when this was made (all
    cores unless ``QTRACE_NUM_THREADS`` says otherwise), so that 1-thread and all-thread
    cases of one benchmark can be interleaved. (NumPy's ufuncs run on one thread; JAX's CPU
    thread pool is fixed when it starts.)"""
    counts = (1 if one else qt.config.num_threads if qt is not None else 0,
              1 if one else dr.thread_count() if dr is not None else 0)

    def setup() -> None:
        if qt is not None:
            if qt.config.num_threads != counts[0]:
                qt.config.num_threads = counts[0]
            from qtrace.devices import cpu
            cpu.pool()        # (a new pool's threads start here, outside the timed region)
        if dr is not None and dr.thread_count() != counts[1]:
            dr.set_thread_count(counts[1])

    return setup


def measure(fn: Callable[[], object], *, repeats: int, warmup: int = 1, per: int = 1,
            setup: Callable[[], object] | None = None) -> Timing:
    """Time one callable (see :class:`Case` for the arguments); exceptions propagate."""
    result = measure_interleaved([Case("fn", fn, per, setup)], repeats=repeats,
                                 warmup=warmup)["fn"]
    if isinstance(result, Exception):
        raise result
    return result


# --------------------------------------------------------------------------- memory


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (10^6 bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6


# --------------------------------------------------------------------------- optional systems

_loaded: dict[str, tuple[ModuleType | None, str]] = {}


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first if len(first) <= 160 else first[:157] + "..."


@contextlib.contextmanager
def _silenced():
    """Send file descriptors 1 and 2 to /dev/null (peers print banners from C++ code)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:  # no such descriptors (embedded interpreter): leave output alone
        yield
        return
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def load_qtrace() -> tuple[ModuleType | None, str]:
    """Import qtrace; return ``(module, "")`` or ``(None, reason it can't be benchmarked)``.

    Falls back to the repository checkout (the parent of ``benchmarks/``) when qtrace is
    not installed. A namespace package (directories without ``__init__.py``) or a build
    lacking part of :data:`QTRACE_API` is reported as incomplete, not imported half-way.
    """
    if "qtrace" in _loaded:
        return _loaded["qtrace"]
    try:
        try:
            qt = importlib.import_module("qtrace")
        except ModuleNotFoundError as exc:
            if exc.name != "qtrace" or str(REPO_ROOT) in sys.path:
                raise
            sys.path.insert(0, str(REPO_ROOT))
            qt = importlib.import_module("qtrace")
        if getattr(qt, "__file__", None) is None:
            result = (None, "qtrace not importable yet (package has no __init__.py)")
        else:
            missing = [name for name in QTRACE_API if not hasattr(qt, name)]
            if missing:
                result = (None, "qtrace incomplete: missing " + ", ".join(missing))
            else:
                result = (qt, "")
    except Exception as exc:  # a package under construction may fail in any way
        result = (None, "qtrace import failed: " + _short(exc))
    _loaded["qtrace"] = result
    return result


def load_peer(name: str) -> tuple[ModuleType | None, str]:
    """Import an optional peer (``jax``, ``drjit``, ``quadrants``, ``warp``).

    Returns ``(module, "")`` or ``(None, note)``; the note says how to install it.
    """
    if name in _loaded:
        return _loaded[name]
    module_name, pip_name = PEERS.get(name, (name, name))
    try:
        with _silenced(), contextlib.redirect_stdout(sys.stderr):
            result = (importlib.import_module(module_name), "")
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
            result = (None, f"{name} not installed (pip install {pip_name})")
        else:
            result = (None, f"{name} import failed: " + _short(exc))
    except Exception as exc:
        result = (None, f"{name} import failed: " + _short(exc))
    _loaded[name] = result
    return result


def load_drjit_llvm() -> tuple[ModuleType | None, type | None, str]:
    """Dr.Jit with its LLVM (CPU) backend: ``(drjit, its float32 array type, "")``.

    ``(None, None, note)`` when drjit is not installed or has no usable LLVM backend.
    """
    dr, reason = load_peer("drjit")
    if dr is None:
        return None, None, reason
    try:
        if not dr.has_backend(dr.JitBackend.LLVM):
            return None, None, "drjit's LLVM backend is unavailable (libLLVM not found)"
        from drjit.llvm import Float32
    except Exception as exc:
        return None, None, "drjit LLVM backend failed: " + _short(exc)
    return dr, Float32, ""


def _init_warp(wp: ModuleType, **options) -> None:
    if hasattr(wp, "LOG_ERROR"):  # warp >= 1.10 replaced `quiet` by a log level
        wp.config.log_level = wp.LOG_ERROR
    else:
        wp.config.quiet = True
    for key, value in options.items():
        setattr(wp.config, key, value)
    wp.init()


def _init_quadrants(qd: ModuleType, **options) -> None:
    qd.init(arch=qd.cpu, log_level="error", **options)


# Peers whose benchmarks are hand-written kernels: how to initialise them for the CPU,
# and the module (next to this file) holding their kernels.
_KERNEL_PEERS = {"warp": (_init_warp, "_warp_kernels"),
                 "quadrants": (_init_quadrants, "_quadrants_kernels")}


def load_kernel_peer(name: str, **init_options) -> tuple[ModuleType | None, ModuleType | None, str]:
    """A kernel-language peer (``warp``, ``quadrants``), initialised once for the CPU,
    and the module with the benchmarks' kernels for it.

    ``init_options`` go to the peer's initialisation (Quadrants: keyword arguments of
    ``qd.init``, e.g. ``ad_stack_experimental_enabled=True``; Warp: ``wp.config``
    attributes); a call with other options than an earlier one initialises the peer
    again. Returns ``(peer module, kernels module, "")`` or ``(None, None, note)``.
    """
    key = name + " kernels" + (repr(sorted(init_options.items())) if init_options else "")
    if key not in _loaded:
        module, reason = load_peer(name)
        if module is None:
            _loaded[key] = (None, reason)
        else:
            init, kernels_name = _KERNEL_PEERS[name]
            try:
                with _silenced(), contextlib.redirect_stdout(sys.stderr):
                    init(module, **init_options)
                    kernels = importlib.import_module(
                        f"{__package__}.{kernels_name}" if __package__ else kernels_name)
                _loaded[key] = (kernels, "")
            except Exception as exc:
                _loaded[key] = (None, f"{name} failed to initialise: " + _short(exc))
    kernels, reason = _loaded[key]
    return (_loaded[name][0], kernels, "") if kernels is not None else (None, None, reason)


def versions() -> str:
    """One line naming the machine and the versions of every system that imported."""
    parts = [f"{platform.machine()} {os.cpu_count()} cpus", f"python {platform.python_version()}",
             f"numpy {np.__version__}"]
    for name in (*PEERS, "qtrace"):
        module = _loaded.get(name, (None, ""))[0]
        if module is not None:
            version = getattr(module, "__version__", "?")
            if isinstance(version, tuple):  # quadrants: (1, 3, 3)
                version = ".".join(map(str, version))
            parts.append(f"{name} {version}")
    return ", ".join(parts)


def qtrace_counters(qt: ModuleType, fn: Callable[[], object], per: int,
                    keys: Sequence[str] = ("kernel_launches", "compiles")) -> dict[str, float]:
    """Run ``fn`` once between ``qt.reset_stats()`` and ``qt.stats()`` (untimed).

    Returns each counter in ``keys`` divided by ``per`` (calls or iterations in ``fn``);
    a counter the build does not report is left out.
    """
    qt.reset_stats()
    fn()
    stats = qt.stats()
    return {key: stats[key] / per for key in keys if key in stats}


def launches_note(counters: dict[str, float], per_label: str) -> dict[str, str]:
    """Extra table columns from :func:`qtrace_counters`: launches per unit, compiles seen."""
    extra = {}
    if "kernel_launches" in counters:
        extra[f"launches/{per_label}"] = f"{counters['kernel_launches']:.3g}"
    return extra


def compiles_note(counters: dict[str, float], per: int) -> str:
    """A note when kernels were compiled after warm-up (a cache miss in the timed loop)."""
    compiles = counters.get("compiles", 0) * per
    return f"{compiles:.0f} compiles after warm-up" if compiles else ""


# --------------------------------------------------------------------------- rows and tables


@dataclass
class Row:
    """One system's result in one benchmark.

    Times are seconds per unit of work (``per``: "call", "iter", "eval"); ``unit`` is how
    they print. ``error`` is the deviation from the float64 NumPy reference, of the kind
    ``error_kind`` names, and passes when ``error <= tol``. ``ratio`` is this row's
    median over the qtrace row's (filled in by :func:`set_ratios`).
    """

    benchmark: str
    system: str
    median: float | None = None
    min: float | None = None
    max: float | None = None
    unit: str = "ms"
    per: str = "call"
    error: float | None = None
    tol: float | None = None
    error_kind: str = "max abs err"
    ratio: float | None = None
    extra: dict[str, str] = field(default_factory=dict)
    note: str = ""
    status: str = "ok"  # "ok", "skip" (system not available) or "fail" (raised)

    @property
    def passed(self) -> bool | None:
        """True/False once checked against the reference; None when not checked."""
        if self.status == "fail":
            return False
        if self.error is None or self.tol is None:
            return None
        return bool(np.isfinite(self.error) and self.error <= self.tol)

    @property
    def check(self) -> str:
        return {True: "PASS", False: "FAIL", None: "-"}[self.passed]


def timed_row(benchmark: str, system: str, timing: Timing, *, unit: str, per: str,
              error: float | None = None, tol: float | None = None,
              error_kind: str = "max abs err", extra: dict[str, str] | None = None,
              note: str = "") -> Row:
    """A :class:`Row` from a :class:`Timing`."""
    return Row(benchmark, system, timing.median, timing.min, timing.max, unit=unit, per=per,
               error=error, tol=tol, error_kind=error_kind, extra=dict(extra or {}), note=note)


def skip(benchmark: str, system: str, reason: str, **kwargs) -> Row:
    """A row for a system that is not available (not installed, not importable yet)."""
    return Row(benchmark, system, note="skip: " + reason, status="skip", **kwargs)


def failed(benchmark: str, system: str, exc: BaseException, **kwargs) -> Row:
    """A row for a system that raised while being benchmarked."""
    return Row(benchmark, system, note="FAILED " + _short(exc), status="fail", **kwargs)


def guarded(benchmark: str, system: str, fn: Callable[[], object], **kwargs):
    """Return ``fn()`` (one stage of one system's benchmark), or a FAIL row if it raises.

    Set ``QTRACE_BENCH_TRACEBACK=1`` to print the traceback to stderr as well.
    """
    try:
        return fn()
    except Exception as exc:
        _report(exc)
        return failed(benchmark, system, exc, **kwargs)


def _report(exc: BaseException) -> None:
    if os.environ.get("QTRACE_BENCH_TRACEBACK"):
        traceback.print_exception(exc)


def set_ratios(rows: Iterable[Row], reference: str = "qtrace") -> list[Row]:
    """Fill ``ratio`` (= median / reference median) for every timed row.

    ``reference`` names the qtrace row; when that row has no time, the first timed row
    whose system starts with "qtrace" is used; with none, ratios stay empty.
    """
    rows = list(rows)
    timed = [r for r in rows if r.median is not None and r.status == "ok"]
    ref = next((r for r in timed if r.system == reference), None)
    if ref is None:
        ref = next((r for r in timed if r.system.startswith("qtrace")), None)
    for row in rows:
        row.ratio = row.median / ref.median if ref is not None and row in timed else None
    return rows


def selected(prepare: dict[str, Callable], systems: str | None) -> dict[str, Callable]:
    """The entries of ``prepare`` whose name starts with one of the comma-separated,
    case-insensitive prefixes in ``systems`` (all of them when ``systems`` is empty)."""
    if not systems:
        return prepare
    prefixes = [p.strip().lower() for p in systems.split(",") if p.strip()]
    return {name: make for name, make in prepare.items()
            if any(name.lower().startswith(p) for p in prefixes)}


def run_systems(benchmark: str, prepare: dict[str, Callable[[], Case | str]], *,
                repeats: int, warmup: int = 1, reference: str = "qtrace",
                systems: str | None = None, **row_defaults) -> list[Row]:
    """Prepare, time (interleaved) and finish every system of one benchmark.

    ``prepare`` maps a system's name to a function returning its :class:`Case` (whose
    ``system`` must be that name), or a string: the reason it is skipped. A system that
    raises at any stage gets a FAIL row; the others go on. ``row_defaults`` (``unit``,
    ``per``, ``error_kind``) shape those skip and FAIL rows. Returns the rows in
    ``prepare``'s order with ratios to ``reference`` filled in. ``systems`` restricts
    the run to some systems (see :func:`selected`).
    """
    prepare = selected(prepare, systems)
    rows: dict[str, Row] = {}
    cases: list[Case] = []
    for name, make in prepare.items():
        case = guarded(benchmark, name, make, **row_defaults)
        if isinstance(case, Row):
            rows[name] = case
        elif isinstance(case, str):
            rows[name] = skip(benchmark, name, case, **row_defaults)
        else:
            cases.append(case)
    timings = measure_interleaved(cases, repeats=repeats, warmup=warmup)
    for case in cases:
        timing = timings[case.system]
        if isinstance(timing, Exception):
            _report(timing)
            rows[case.system] = failed(benchmark, case.system, timing, **row_defaults)
        elif case.finish is None:
            rows[case.system] = Row(benchmark, case.system, timing.median, timing.min,
                                    timing.max, **row_defaults)
        else:
            rows[case.system] = guarded(benchmark, case.system,
                                        lambda c=case, t=timing: c.finish(t), **row_defaults)
    return publish(set_ratios([rows[name] for name in prepare], reference=reference))


def _fmt_time(seconds: float | None, unit: str) -> str:
    if seconds is None:
        return "-"
    value = seconds * _UNIT_SCALE[unit]
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def format_table(rows: Sequence[Row]) -> str:
    """The rows of one benchmark as a text table (title line first)."""
    if not rows:
        return ""
    first = next((r for r in rows if r.median is not None), rows[0])
    unit, per = first.unit, first.per
    extra_cols: list[str] = []
    for row in rows:
        extra_cols += [k for k in row.extra if k not in extra_cols]
    header = ["system", f"median {unit}/{per}", f"min–max {unit}", "× qtrace",
              first.error_kind, "check", *extra_cols, "note"]
    body = []
    for r in rows:
        spread = (f"{_fmt_time(r.min, unit)}–{_fmt_time(r.max, unit)}"
                  if r.min is not None else "-")
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        err = f"{r.error:.2e}" if r.error is not None else "-"
        body.append([r.system, _fmt_time(r.median, unit), spread, ratio, err, r.check,
                     *[r.extra.get(k, "-") for k in extra_cols], r.note])
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    # Left-align text columns (system, check, note), right-align numbers.
    left = {0, 5, len(header) - 1}

    def fmt(line: list[str]) -> str:
        cells = [str(c).ljust(w) if i in left else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(line, widths, strict=True))]
        return "  ".join(cells).rstrip()

    tols = sorted({r.tol for r in rows if r.tol is not None})
    tol_text = f"; check: {first.error_kind} vs float64 NumPy <= " + ", ".join(
        f"{t:.1e}" for t in tols) if tols else ""
    lines = [f"== {rows[0].benchmark}", f"   (× qtrace = time / qtrace time{tol_text})",
             fmt(header), fmt(["-" * w for w in widths])]
    lines += [fmt(line) for line in body]
    return "\n".join(lines)


# Columns of the compact table (what fits WIDTH): system, median, ratio, check, notes.
WIDTH = 100
_SYSTEM_W, _MEDIAN_W, _RATIO_W, _CHECK_W = 28, 9, 8, 5
LEGEND = ("median time per unit of work; × qtrace = time / qtrace time (above 1: qtrace is "
          "faster); check: the result vs a float64 NumPy reference, within tolerance. "
          "--wide shows min–max, errors and tolerances.")


def _compact_row(row: Row, width: int) -> list[str]:
    """One row of the compact table: one line, or more when its notes wrap."""
    median = f"{_fmt_time(row.median, row.unit)} {row.unit}" if row.median is not None else "-"
    ratio = f"{row.ratio:.2f}" if row.ratio is not None else "-"
    cells = f"{median:>{_MEDIAN_W}}  {ratio:>{_RATIO_W}}  {row.check:<{_CHECK_W}}  "
    lines = []
    name = row.system
    if len(name) > _SYSTEM_W:  # a long name gets a line of its own
        lines += textwrap.wrap(name, width)
        name = ""
    prefix = f"{name:<{_SYSTEM_W}}  {cells}"
    notes = "; ".join([*(f"{k} {v}" for k, v in row.extra.items()), *([row.note] if row.note else [])])
    wrapped = textwrap.wrap(notes, max(width - len(prefix), 20)) or [""]
    lines.append((prefix + wrapped[0]).rstrip())
    lines += [" " * len(prefix) + more for more in wrapped[1:]]
    return lines


def _compact_header(first: Row, width: int) -> list[str]:
    header = (f"{'system':<{_SYSTEM_W}}  {'median':>{_MEDIAN_W}}  {'× qtrace':>{_RATIO_W}}  "
              f"{'check':<{_CHECK_W}}  notes")
    rule = "  ".join("-" * w for w in (_SYSTEM_W, _MEDIAN_W, _RATIO_W, _CHECK_W))
    rule += "  " + "-" * (width - len(rule) - 2)
    title = f"== {first.benchmark} (times per {first.per})"
    return [*textwrap.wrap(title, width, subsequent_indent="   "), header, rule]


def format_compact(rows: Sequence[Row], width: int = WIDTH) -> str:
    """The rows of one or more benchmarks as text tables no wider than ``width`` columns.

    Each benchmark gets a title, a header and one line per system (long notes wrap under
    the notes column); extra columns (launches, GB/s, memory) join the notes. The
    details this leaves out (min–max, the error and its tolerance) are in
    :func:`format_table`.

    Example:
        >>> print(format_compact([Row("B0 demo", "NumPy", median=2e-3, ratio=2.0)]))
        == B0 demo (times per call)
        system                           median  × qtrace  check  notes
        ----------------------------  ---------  --------  -----  ------------------------------------------
        NumPy                              2 ms      2.00  -
    """
    text = io.StringIO()
    print_table(rows, text, width=width, legend=False)
    return text.getvalue().rstrip("\n")


class TableStream:
    """Prints benchmark rows as they are :func:`publish`-ed, each row once.

    Compact (the default): a row is printed as soon as it arrives, under the header of
    its benchmark, in at most ``width`` columns (:func:`format_compact`), after a
    one-time legend. ``wide``: :func:`format_table`'s full table of a benchmark, printed
    once its last row is in (when the next benchmark's rows arrive, or at
    :meth:`close`). ``file`` defaults to standard output.
    """

    def __init__(self, file=None, *, wide: bool = False, width: int = WIDTH, legend: bool = True):
        self.file = file or sys.stdout
        self.wide, self.width, self._legend = wide, width, legend and not wide
        self.rows: list[Row] = []  # every row printed, in order
        self._seen: set[int] = set()
        self._group: list[Row] = []

    def _write(self, lines: list[str]) -> None:
        for line in lines:
            print(line, file=self.file)
        self.file.flush()

    def __call__(self, rows: Iterable[Row]) -> None:
        for row in rows:
            if id(row) in self._seen:
                continue
            self._seen.add(id(row))
            self.rows.append(row)
            if self._group and row.benchmark != self._group[0].benchmark:
                self._end_group()
            if self._legend:
                self._write([*textwrap.wrap(LEGEND, self.width), ""])
                self._legend = False
            starts = not self._group
            self._group.append(row)
            if not self.wide:
                self._write(([""] if starts and len(self.rows) > 1 else [])
                            + (_compact_header(row, self.width) if starts else [])
                            + _compact_row(row, self.width))

    def _end_group(self) -> None:
        if self._group and self.wide:
            self._write(([""] if len(self.rows) > len(self._group) else [])
                        + format_table(self._group).splitlines())
        self._group = []

    def close(self) -> None:
        """Print what a wide stream still holds (the last benchmark's table)."""
        self._end_group()


_streams: list[Callable[[list[Row]], None]] = []


def publish(rows: Sequence[Row]) -> Sequence[Row]:
    """Hand finished rows (ratios set) to the active :func:`streaming` printers; returns ``rows``.

    Every benchmark calls it as soon as rows are final, so that long runs show results
    as they come; a printer ignores rows it has already printed.
    """
    for stream in _streams:
        stream(list(rows))
    return rows


@contextlib.contextmanager
def streaming(stream: Callable[[list[Row]], None]):
    """Within the block, every :func:`publish`-ed row also goes to ``stream``."""
    _streams.append(stream)
    try:
        yield stream
    finally:
        _streams.remove(stream)
        if isinstance(stream, TableStream):
            stream.close()


def print_table(rows: Sequence[Row], file=None, *, wide: bool = False, width: int = WIDTH,
                legend: bool = True) -> None:
    """Print finished rows: the compact tables, or :func:`format_table`'s with ``wide``."""
    stream = TableStream(file, wide=wide, width=width, legend=legend)
    stream(rows)
    stream.close()


def run_and_print(run: Callable[[], Sequence[Row]], *, wide: bool = False, file=None) -> int:
    """Call ``run()``, printing every row as soon as it is :func:`publish`-ed (rows that
    ``run`` returns unpublished follow at its end), then the versions and peak memory.

    Returns the exit status of a benchmark command: 1 if any row FAILs its check, else 0.
    """
    stream = TableStream(file, wide=wide)
    with streaming(stream):
        stream(run())
    out = stream.file
    print(file=out)
    print(versions(), file=out)
    print(f"peak RSS of this process: {peak_rss_mb():.0f} MB", file=out)
    out.flush()
    return 1 if any(r.passed is False for r in stream.rows) else 0


# --------------------------------------------------------------------------- errors


def max_abs_err(got, ref: np.ndarray) -> float:
    """max |got - ref| in float64 (inf when shapes differ or values are not finite)."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        return float("inf")
    diff = np.abs(got - ref)
    return float(diff.max()) if np.all(np.isfinite(diff)) else float("inf")


def max_rel_err(got, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (a norm-wise relative error, robust near zero)."""
    scale = float(np.abs(ref).max()) or 1.0
    return max_abs_err(got, ref) / scale


# --------------------------------------------------------------------------- command line


def arg_parser(description: str) -> argparse.ArgumentParser:
    """The flags every benchmark file accepts (more can be added by the caller)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="smaller problem and fewer repeats (a smoke run)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed samples per system (default depends on --quick)")
    parser.add_argument("--systems", default=None,
                        help="comma-separated name prefixes of the systems to run, "
                             "e.g. 'numpy,qtrace' (default: all)")
    add_wide_flag(parser)
    return parser


def add_wide_flag(parser: argparse.ArgumentParser) -> None:
    """``--wide``: every column (min–max, errors, tolerances) instead of 100-column tables."""
    parser.add_argument("--wide", action="store_true",
                        help="full tables (min–max, errors, tolerances, extra columns); "
                             f"default: rows printed as they finish, at most {WIDTH} columns")


def main(run: Callable[..., list[Row]], parser: argparse.ArgumentParser,
         argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (flags of :func:`arg_parser`), call ``run(**args)`` printing rows as
    they finish (:func:`run_and_print`); 1 if any row FAILs."""
    args = vars(parser.parse_args(argv))
    wide = args.pop("wide", False)
    return run_and_print(lambda: run(**args), wide=wide)
