"""qtrace benchmarks (BENCHMARKS.md): one module per benchmark, each with ``run(quick)``.

Each module is also runnable alone (``python benchmarks/b1_elementwise.py [--quick]``);
``python -m benchmarks [--quick]`` from the repository root runs them all, and
``run_all`` is the entry point for ``python -m qtrace bench``.
"""

from __future__ import annotations

import importlib

from ._harness import Row, print_table, publish, run_and_print

__all__ = ["MODULES", "Row", "print_table", "run_all", "run_and_print"]

# In table order.
MODULES = ("b1_elementwise", "b2_dispatch", "b3_loop_grad", "b4_compile_cache", "b5_eager_loop",
           "b6_autodiff", "b7_small_updates", "b8_programs", "b9_recording")


def run_all(quick: bool = False, only: tuple[str, ...] = (),
            systems: str | None = None) -> list[Row]:
    """Run every benchmark module (or those whose name starts with one of ``only``).

    ``systems``: comma-separated prefixes of the systems to run (default: all). Rows are
    :func:`~benchmarks._harness.publish`-ed as they finish (inside a module's ``run``
    or, at the latest, when it returns), so a :func:`~benchmarks._harness.streaming`
    printer shows them while the rest still runs.
    """
    rows: list[Row] = []
    for name in MODULES:
        if only and not any(name.startswith(prefix) for prefix in only):
            continue
        module = importlib.import_module(f"{__name__}.{name}")
        rows += publish(module.run(quick=quick, systems=systems))
    return rows
