"""B4: compile and cache — time to first result of a 50-operation jitted step (BENCHMARKS.md).

The step (float32, N = 1,000 so that the kernel's own run time is negligible; ``--n``),
written once for NumPy, JAX and qtrace arrays: seven rounds of ``x = x + c*sin(y)`` (cos
in odd rounds) and ``y = y*0.99 - tanh(x)*c``, then ``x*y`` — 50 operations. Every
sample runs in a fresh interpreter (``sys.executable -c``), so nothing is shared between
samples but the disk:

Python's bytecode cache (``__pycache__``) is on for the children, as in any installation
(``PYTHONDONTWRITEBYTECODE`` is removed; the untimed fill runs write it): modules qtrace
imports lazily at its first compile then load as they do for a user.

* cold: an empty cache directory (qtrace's ``QTRACE_CACHE_DIR``; JAX's persistent
  compilation cache, ``jax_compilation_cache_dir`` with
  ``jax_persistent_cache_min_compile_time_secs=0`` and
  ``jax_persistent_cache_min_entry_size_bytes=-1``): trace, compile, run. qtrace tiers
  this small step (``qtrace.kernels.tiering``): the first result comes from quickly
  compiled code, the optimised kernel is compiled on a background thread; the note says
  when it was installed (from the call), and the columns after the first result are
  measured once it is;
* warm disk cache: a new process whose cache directory a previous process filled;
* in-memory hit: in the same process, after the first result, a new ``qt.jit`` /
  ``jax.jit`` wrapper of the same function (qtrace traces again and hits its plan cache;
  JAX's own caches key on the function); column ``steady call ms``: the next call of
  that wrapper, the floor (dispatch and the kernel's own work);
* interpreter + imports alone: ``python`` with nothing, with ``import qtrace``, with
  ``import jax, jax.numpy``.

The reported time is "first result above imports": from the call of the freshly made
jit wrapper (imports done, inputs made) to the first result on the host (``.numpy()`` /
``np.asarray``), in ms; it includes every lazy initialisation (LLVM, XLA's CPU client).
Extra columns: launch to first result (interpreter start, imports and input creation
included, measured from the parent's spawn), launch to imports done, and what the
caches did (qtrace ``compiles`` and ``cache_hits_disk``; files in JAX's cache
directory). Samples of all systems are taken round-robin (a noisy spell hits all
alike); medians over ``--repeats`` rounds (default 7, ``--quick`` 3). Each result is
checked against a float64 NumPy run of the step (max abs error ≤ 1e-4).

Goals (BENCHMARKS.md): cold ≤ JAX's cold compile; new-process warm start ≤ 50 ms above
interpreter start and imports.

Run: ``python benchmarks/b4_compile_cache.py [--quick] [--repeats R] [--n N]``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

try:
    from . import _harness as h
except ImportError:  # run as a script: benchmarks/ is on sys.path
    import _harness as h

TOL = 1e-4
WARM_GOAL_MS = 50.0

# One sample: a fresh interpreter runs this with a JSON argument (system, n, cache dir).
CHILD = r"""
import time
T0 = time.time()
import json, os, sys
cfg = json.loads(sys.argv[1])
system = cfg["system"]
out = {}
if system in ("qtrace", "import-qtrace"):
    os.environ["QTRACE_CACHE_DIR"] = cfg.get("cache", "") or os.environ.get("QTRACE_CACHE_DIR", "")
    try:
        import qtrace as qt
    except ModuleNotFoundError as exc:
        if exc.name != "qtrace":
            raise
        sys.path.insert(0, cfg["repo"])
        import qtrace as qt
    import numpy as np
    m = qt
elif system in ("jax", "import-jax"):
    import jax
    import jax.numpy as jnp
    import numpy as np
    m = jnp
T_IMPORT = time.time()
out.update(t_start=T0, t_import=T_IMPORT)
if system in ("qtrace", "jax"):
    def step(m, x, y):
        for i in range(7):                       # 7 ops per round
            c = 0.1 + 0.01 * i
            x = x + c * (m.cos(y) if i % 2 else m.sin(y))
            y = y * 0.99 - m.tanh(x) * c
        return x * y                             # 50 ops in all

    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, cfg["n"]).astype(np.float32)
    y0 = rng.uniform(-1, 1, cfg["n"]).astype(np.float32)
    f = lambda x, y: step(m, x, y)
    if system == "qtrace":
        t = time.time()
        r = qt.jit(f)(x0, y0).numpy()
        t1 = time.time()
        from qtrace.kernels import tiering
        tiering.wait()          # a cold start's optimised code, compiled behind the first result
        out.update(installed=time.time() - t)
        stats = qt.stats()
        t2 = time.time()
        g = qt.jit(f)
        r2 = g(x0, y0).numpy()
        t3 = time.time()
        g(x0, y0).numpy()
        t4 = time.time()
        out.update(compiles=stats["compiles"], disk_hits=stats["cache_hits_disk"])
    else:
        jax.config.update("jax_compilation_cache_dir", cfg["cache"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        t = time.time()
        r = np.asarray(jax.jit(f)(x0, y0))
        t1 = time.time()
        t2 = time.time()
        g = jax.jit(f)
        r2 = np.asarray(g(x0, y0))
        t3 = time.time()
        np.asarray(g(x0, y0))
        t4 = time.time()
    ref = step(np, x0.astype(np.float64), y0.astype(np.float64))
    out.update(t_first=t1, first=t1 - t, memory=t3 - t2, steady=t4 - t3,
               err=max(float(np.abs(r - ref).max()), float(np.abs(r2 - ref).max())))
print("B4-RESULT " + json.dumps(out))
"""


def _sample(system: str, n: int, cache: str = "") -> dict:
    """Run one fresh interpreter; its report, with times relative to the spawn."""
    env = dict(os.environ)
    # Python's own bytecode cache is allowed, as in any installation (the untimed fill runs
    # write it): "cold" empties the systems' compilation caches, not Python's
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if system in ("jax", "import-jax"):
        env.setdefault("JAX_PLATFORMS", "cpu")
    if system == "qtrace":
        env["QTRACE_OFFLINE_CACHE"] = "1"
    arg = json.dumps({"system": system, "n": n, "cache": cache, "repo": str(h.REPO_ROOT)})
    spawn = time.time()
    p = subprocess.run([sys.executable, "-c", CHILD, arg], env=env, capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{system} sample failed: {p.stderr.strip().splitlines()[-1:]}")
    line = next(x for x in p.stdout.splitlines() if x.startswith("B4-RESULT "))
    out = json.loads(line[len("B4-RESULT "):])
    out["launch_to_import"] = out["t_import"] - spawn
    if "t_first" in out:
        out["launch_to_first"] = out["t_first"] - spawn
    return out


def _files(path: str) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def _med(samples: list, key: str) -> float:
    return statistics.median(s[key] for s in samples)


def _timing(samples: list, key: str) -> h.Timing:
    return h.Timing([s[key] for s in samples])


def run(quick: bool = False, repeats: int | None = None, n: int | None = None,
        systems: str | None = None) -> list[h.Row]:
    """Benchmark qtrace and JAX (or those ``systems`` names); rows of four small tables."""
    repeats = repeats or (3 if quick else 7)
    n = int(n or 1_000)
    have = {"qtrace": importlib.util.find_spec("qtrace") is not None or
            (h.REPO_ROOT / "qtrace" / "__init__.py").exists(),
            "jax": importlib.util.find_spec("jax") is not None}
    wanted = h.selected({"qtrace": None, "JAX": None, "python": None}, systems)
    run_q = have["qtrace"] and "qtrace" in wanted
    run_j = have["jax"] and "JAX" in wanted
    base = tempfile.mkdtemp(prefix="qtrace-b4-")
    samples: dict[str, list] = {k: [] for k in ("python", "import-qtrace", "import-jax", "qtrace cold",
                                                 "qtrace warm", "jax cold", "jax warm")}
    errors: dict[str, Exception] = {}
    jax_entries = {}

    def take(name, system, cache=""):
        if name in errors:
            return None
        try:
            s = _sample(system, n, cache)
        except Exception as exc:
            errors[name] = exc
            return None
        samples.setdefault(name, []).append(s)
        return s

    try:
        warm = {k: os.path.join(base, f"{k}-warm") for k in ("qtrace", "jax")}
        # fill the warm caches once (untimed), then every round: one sample of each kind
        if run_q:
            take("qtrace fill", "qtrace", warm["qtrace"])
        if run_j:
            take("jax fill", "jax", warm["jax"])
            jax_entries["warm"] = _files(warm["jax"])
        for r in range(repeats):
            take("python", "python")
            if run_q:
                take("import-qtrace", "import-qtrace")
                take("qtrace cold", "qtrace", os.path.join(base, f"qtrace-cold-{r}"))
                take("qtrace warm", "qtrace", warm["qtrace"])
            if run_j:
                take("import-jax", "import-jax")
                cold = os.path.join(base, f"jax-cold-{r}")
                take("jax cold", "jax", cold)
                jax_entries["cold"] = _files(cold)
                take("jax warm", "jax", warm["jax"])
    finally:
        shutil.rmtree(base, ignore_errors=True)

    kw = dict(unit="ms", per="first result", error_kind="max abs err")
    present = {"qtrace": run_q, "jax": run_j, "python": True}
    missing = {"qtrace": "qtrace not importable", "jax": 'jax not installed (pip install -e ".[bench]")'}
    rows: list[h.Row] = []

    def group_rows(title, entries, key="first", reference=None, details=True):
        """One table: per entry (row name, sample kind, note function)."""
        group = []
        for system, kind, note_fn in entries:
            who = kind.split()[0].replace("import-", "")
            if not present[who]:
                if not have.get(who, True):
                    group.append(h.skip(title, system, missing[who], **kw))
                continue
            ss = samples[kind]
            exc = errors.get(kind) or errors.get(f"{who} fill")
            if exc is not None or not ss:
                group.append(h.failed(title, system, exc or RuntimeError("no sample"), **kw))
                continue
            extra = {"steady call ms": f"{_med(ss, 'steady') * 1e3:.3g}"} if key == "memory" else {}
            if details:
                extra = {"launch→result ms": f"{_med(ss, 'launch_to_first') * 1e3:.0f}",
                         "imports ms": f"{_med(ss, 'launch_to_import') * 1e3:.0f}"}
            err = max(s["err"] for s in ss) if "err" in ss[0] else None
            group.append(h.timed_row(title, system, _timing(ss, key), error=err,
                                     tol=TOL if err is not None else None, extra=extra,
                                     note=note_fn(ss) if note_fn else "", **kw))
        rows.extend(h.publish(h.set_ratios(group, reference=reference or (group[0].system if group else ""))))

    def q_note(ss):
        note = f"compiles {ss[0]['compiles']}, disk hits {ss[0]['disk_hits']}"
        if ss[0]["compiles"]:
            note += f"; optimised code installed at {_med(ss, 'installed') * 1e3:.0f} ms"
        return note

    def q_warm_note(ss):
        goal = "met" if _med(ss, "first") * 1e3 <= WARM_GOAL_MS else "MISSED"
        return q_note(ss) + f"; goal <= {WARM_GOAL_MS:.0f} ms above imports: {goal}"

    group_rows(f"B4 cold start: empty disk cache, new process (N={n:,} float32, 50 ops)", [
        ("qtrace cold", "qtrace cold", q_note),
        ("JAX cold (persistent cache on)", "jax cold",
         lambda ss: f"{jax_entries.get('cold', 0)} cache files written"),
    ])
    group_rows("B4 warm disk cache, new process", [
        ("qtrace warm", "qtrace warm", q_warm_note),
        ("JAX warm (persistent cache)", "jax warm",
         lambda ss: f"{jax_entries.get('warm', 0)} cache files"),
    ])
    group_rows("B4 in-memory hit: a new jit wrapper of the same function, same process", [
        ("qtrace new qt.jit", "qtrace warm", None),
        ("JAX new jax.jit", "jax warm", None),
    ], key="memory", details=False)
    group_rows("B4 interpreter start + imports alone (launch to imports done, no work)", [
        ("python + import qtrace", "import-qtrace", None),
        ("python + import jax", "import-jax", None),
        ("python alone", "python", None),
    ], key="launch_to_import", details=False)
    return rows


def main(argv=None) -> int:
    parser = h.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=None,
                        help="elements per input (default 1000)")
    return h.main(run, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
