"""Command line: ``python -m qtrace demo | info | cache info | cache clear``."""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np


def demo(args) -> int:
    """A small eager + jit tour: a damped spring system stepped both ways, checked vs NumPy."""
    import qtrace as qt

    n, steps, dt = args.n, args.steps, 0.01
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(n).astype(np.float32)
    v0 = np.zeros(n, np.float32)
    print(f"qtrace {qt.__version__} demo: {n:,} damped springs, {steps} steps, device {qt.devices()[0]}")

    def step(x, v, k=4.0, c=0.1):
        a = -k * x - c * v
        v = v + dt * a
        return x + dt * v, v

    qt.reset_stats()
    t0 = time.perf_counter()
    x, v = qt.asarray(x0), qt.asarray(v0)
    for _ in range(steps):  # eager: each step recorded, evaluated once at the end of a step
        x, v = step(x, v)
        qt.eval(x, v)
    eager_s = time.perf_counter() - t0
    eager_stats = qt.stats()

    qt.reset_stats()
    jstep = qt.jit(step)
    t0 = time.perf_counter()
    xj, vj = qt.asarray(x0), qt.asarray(v0)
    for _ in range(steps):
        xj, vj = jstep(xj, vj)
    jit_s = time.perf_counter() - t0
    jit_stats = qt.stats()

    t0 = time.perf_counter()
    xn, vn = x0.copy(), v0.copy()
    for _ in range(steps):
        xn, vn = step(xn, vn)
    numpy_s = time.perf_counter() - t0

    energy = float(qt.sum(0.5 * vj * vj + 2.0 * xj * xj))
    err = max(float(np.abs(x.numpy() - xn).max()), float(np.abs(xj.numpy() - xn).max()))
    print(f"  final energy {energy:.6f}   max |qtrace - NumPy| = {err:.2e}")
    print(f"  eager: {eager_s * 1e3:8.1f} ms  ({eager_stats['compiles']} kernel compiled, "
          f"{eager_stats['kernel_launches']} launches, {eager_stats['cache_hits_memory']} cache hits)")
    print(f"  jit:   {jit_s * 1e3:8.1f} ms  ({jit_stats['traces']} trace, "
          f"{jit_stats['kernel_launches']} launches)")
    print(f"  NumPy: {numpy_s * 1e3:8.1f} ms")
    return 0 if err < 1e-4 else 1


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
    print(f"cache dir  {qt.config.cache_dir}")
    c = disk_cache.info()
    print(f"cache      {c['entries']} entries, {_bytes(c['bytes'])}, {c['state']}")
    return 0


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def cache(args) -> int:
    """``cache info``: location, entries and size of the disk kernel cache; ``cache clear``."""
    from qtrace.kernels import disk_cache

    if args.action == "info":
        c = disk_cache.info()
        print(f"location   {c['location']}")
        print(f"state      {c['state']}")
        print(f"entries    {c['entries']}")
        print(f"size       {_bytes(c['bytes'])} ({c['bytes']} bytes)")
        if c["temporary_files"]:
            print(f"temporary  {c['temporary_files']} unfinished write(s) (removed by `cache clear`)")
        return 0
    removed, freed = disk_cache.clear()
    print(f"removed {removed} file(s), {_bytes(freed)}, from {disk_cache.kernel_dir()}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qtrace", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the demo")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=100)
    p.set_defaults(fn=demo)
    p = sub.add_parser("info", help="versions, devices, configuration")
    p.set_defaults(fn=info)
    p = sub.add_parser("cache", help="the disk kernel cache: info (location, entries, size) or clear")
    p.add_argument("action", choices=("info", "clear"))
    p.set_defaults(fn=cache)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
