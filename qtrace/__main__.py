"""Command line: ``python -m qtrace demo | info | cache info | cache clear``."""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np


def progress(total: int, file=None):
    """Report the demo's steps: ``(step(loss), close())``.

    A tqdm bar on ``file`` (standard error) when it is a terminal and tqdm is installed
    (``pip install "qtrace[demo]"``); otherwise one plain line per step on standard output.

    Example:
        >>> step, close = progress(2)
        >>> step(0.5); step(0.25); close()
          step   1/2  loss 0.5
          step   2/2  loss 0.25
    """
    file = file or sys.stderr
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None and file.isatty():
        bar = tqdm(total=total, ncols=72, file=file)

        def step(loss: float) -> None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4g}")

        return step, bar.close
    done = [0]

    def step(loss: float) -> None:
        done[0] += 1
        print(f"  step {done[0]:3d}/{total}  loss {loss:.6g}", flush=True)

    return step, lambda: None


def demo(args) -> int:
    """A differentiable simulation with per-particle, data-dependent sub-stepping.

    Each particle is a damped projectile launched toward a target. Its integrator takes
    as many sub-steps as its own stiffness demands (a per-element ``qt.fori_loop`` with a
    tensor of trip counts). Gradient descent on the launch velocities, through every
    sub-step, with the reverse pass running on the adstack — no iteration bound given.
    """
    import qtrace as qt

    n, iters = args.n, args.iters
    rng = np.random.default_rng(0)
    stiffness = rng.uniform(0.5, 4.0, n)
    substeps = qt.asarray(np.ceil(8 * stiffness).astype(np.int64))  # 4..32 sub-steps each
    drag = qt.asarray(0.1 * stiffness)
    target = qt.asarray(rng.uniform(2.0, 6.0, n))
    t_end, g = 1.0, 9.81
    v0 = qt.asarray(np.stack([rng.uniform(1.0, 3.0, n), rng.uniform(3.0, 6.0, n)]))

    def flight(v0):
        dt = t_end / qt.astype(substeps, qt.float64)

        def substep(i, s):
            x, y, vx, vy = s
            vx = vx - drag * vx * dt
            vy = vy - (g + drag * vy) * dt
            return x + vx * dt, y + vy * dt, vx, vy

        zeros = qt.zeros(n)
        x, y, _, _ = qt.fori_loop(0, substeps, substep, (zeros, zeros, v0[0], v0[1]))
        return x, y

    def loss(v0):
        x, y = flight(v0)
        return qt.mean((x - target) ** 2 + y ** 2)

    step = qt.jit(qt.value_and_grad(loss))
    print(f"qtrace {qt.__version__} demo: {n:,} particles, 4-32 data-dependent sub-steps each, "
          f"{iters} gradient steps on {qt.devices()[0]}")
    qt.reset_stats()
    t0 = time.perf_counter()
    lr, losses = 0.4 * n, []  # the loss is a mean: scale the step to move each particle
    report, close = progress(iters)
    for _ in range(iters):
        value, grad = step(v0)
        losses.append(float(value))
        v0 = v0 - lr * grad
        report(losses[-1])
    close()
    elapsed = time.perf_counter() - t0
    s = qt.stats()
    print(f"loss {losses[0]:.4g} -> {losses[-1]:.4g} in {elapsed:.2f} s "
          f"({elapsed / iters * 1e3:.1f} ms/step); traces {s['traces']}, kernels compiled "
          f"{s['compiles']}, launches {s['kernel_launches']}, adstack {s['adstack_bytes'] / 1e3:.1f} kB "
          f"(device-sized {s['adstack_device_sized']}, reducer dispatches {s['max_reducer_dispatches']})")
    return 0 if losses[-1] < losses[0] else 1


def info(args) -> int:
    import llvmlite

    import qtrace as qt
    from qtrace.kernels import disk_cache, llvm_cpu

    print(f"qtrace     {qt.__version__}")
    print(f"python     {platform.python_version()}")
    print(f"numpy      {np.__version__}")
    print(f"llvmlite   {llvmlite.__version__}")
    print(f"devices    {', '.join(str(d) for d in qt.devices())}")
    print(f"target     {llvm_cpu.target_id().split('/')[0]} ({llvm_cpu.target_id().split('/')[1]})")
    print(f"threads    {qt.config.num_threads}")
    print(f"fusion     {'on' if qt.config.fusion else 'off'}")
    print("compile    " + ("tiered (small plans run quickly compiled code while the optimised "
                           "code is compiled)" if qt.config.tiered else
                           "optimised before the first run (QTRACE_TIERED=0)"))
    print(f"recorder   {_recorder()}")
    print(f"cache dir  {qt.config.cache_dir}")
    try:
        c = disk_cache.info()
    except disk_cache.CacheDirectoryError as exc:
        print(f"cache      {exc}")
    else:
        corrupt = f" ({c['corrupt']} corrupt)" if c["corrupt"] else ""
        print(f"cache      {c['entries']} entries{corrupt}, {_bytes(c['bytes'])}, {c['state']}")
    return 0


def _recorder() -> str:
    """Which recorder records operations (qtrace.graph.native), and why."""
    from qtrace.config import config
    from qtrace.graph import native

    if native.active():
        return "compiled (qtrace.graph._native)"
    if not config.native:
        return "Python (QTRACE_NATIVE=0)"
    return "Python (the C extension was not built: no C compiler at install?)"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def cache(args) -> int:
    """``cache info``: location, entries and size of the disk kernel cache; ``cache clear``.

    A directory that cannot be listed or emptied is reported in one line on stderr, with
    exit status 1; corrupt entries are counted (and removed by ``clear``).
    """
    from qtrace.kernels import disk_cache

    try:
        if args.action == "info":
            c = disk_cache.info()
            print(f"location   {c['location']}")
            print(f"state      {c['state']}")
            print(f"entries    {c['entries']}")
            if c["corrupt"]:
                print(f"corrupt    {c['corrupt']} unreadable entry(ies) (recompiled when met, "
                      "removed by `cache clear`)")
            print(f"size       {_bytes(c['bytes'])} ({c['bytes']} bytes) of {_bytes(c['cap_bytes'])} "
                  "(QTRACE_CACHE_MAX_MB; least recently used entries are trimmed)")
            if c["temporary_files"]:
                print(f"temporary  {c['temporary_files']} unfinished write(s) (removed by `cache clear`)")
            return 0
        removed, freed, skipped = disk_cache.clear()
    except disk_cache.CacheDirectoryError as exc:
        print(f"python -m qtrace cache {args.action}: {exc}", file=sys.stderr)
        return 1
    print(f"removed {removed} file(s), {_bytes(freed)}, from {disk_cache.kernel_dir()}")
    if skipped:
        print(f"skipped {skipped} name(s) that are not cache files (directories or links); "
              "remove them by hand")
    return 0


def bench(args) -> int:
    """Run ``benchmarks/`` (from a source checkout), printing each row as it finishes.

    ``only``: benchmark name prefixes (``b1 b3``); the word ``programs`` selects B8.
    Tables fit 100 columns; ``--wide`` prints every column once a benchmark is done.
    """
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "__init__.py").exists():
        print("python -m qtrace bench: the benchmarks/ folder of a qtrace source checkout is "
              f"needed (looked in {root})", file=sys.stderr)
        return 2
    sys.path.insert(0, str(root))
    benchmarks = importlib.import_module("benchmarks")
    # `programs` names B8, the suite of real NumPy programs
    only = tuple("b8" if name == "programs" else name for name in args.only)
    return benchmarks.run_and_print(
        lambda: benchmarks.run_all(quick=args.quick, only=only, systems=args.systems),
        wide=args.wide)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qtrace", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the demo: gradient descent through a simulation")
    p.add_argument("--n", type=int, default=100_000, help="particles")
    p.add_argument("--iters", type=int, default=20, help="gradient-descent steps")
    p.set_defaults(fn=demo)
    p = sub.add_parser("bench", help="run the benchmark table (qtrace beside NumPy, JAX, ...)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    p.add_argument("--wide", action="store_true",
                   help="full tables (min–max, errors, tolerances), printed per benchmark; "
                        "default: each row as it finishes, at most 100 columns")
    p.add_argument("--systems", default=None,
                   help="comma-separated name prefixes of the systems, e.g. 'numpy,qtrace'")
    p.add_argument("only", nargs="*", help="benchmark name prefixes, e.g. b1 b3")
    p.set_defaults(fn=bench)
    p = sub.add_parser("info", help="versions, devices, configuration")
    p.set_defaults(fn=info)
    p = sub.add_parser("cache", help="the disk kernel cache: info (location, entries, size) or clear")
    p.add_argument("action", choices=("info", "clear"))
    p.set_defaults(fn=cache)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
