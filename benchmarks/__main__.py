"""Run all benchmarks: ``python -m benchmarks [--quick] [--systems S] [b1 b2 ...]``.

Prints one table per benchmark; exits 1 if any system's result fails its float64 check.
"""

from __future__ import annotations

import argparse
import sys

from . import _harness, run_all


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="smaller problems and fewer repeats (a smoke run)")
    parser.add_argument("--systems", default=None,
                        help="comma-separated name prefixes of the systems to run, "
                             "e.g. 'numpy,qtrace' (default: all)")
    parser.add_argument("only", nargs="*", help="benchmark name prefixes, e.g. b1 b5")
    args = parser.parse_args(argv)
    rows = run_all(quick=args.quick, only=tuple(args.only), systems=args.systems)
    print(_harness.versions())
    print(f"peak RSS of this process: {_harness.peak_rss_mb():.0f} MB")
    print()
    _harness.print_table(rows)
    return 1 if any(r.passed is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
