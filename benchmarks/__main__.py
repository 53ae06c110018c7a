"""Run all benchmarks: ``python -m benchmarks [--quick] [--systems S] [b1 b2 ...]``.

Prints each row as it finishes, in tables at most 100 columns wide (``--wide``: every
column); exits 1 if any system's result fails its float64 check.
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
    _harness.add_wide_flag(parser)
    parser.add_argument("only", nargs="*", help="benchmark name prefixes, e.g. b1 b5")
    args = parser.parse_args(argv)
    return _harness.run_and_print(
        lambda: run_all(quick=args.quick, only=tuple(args.only), systems=args.systems),
        wide=args.wide)


if __name__ == "__main__":
    sys.exit(main())
