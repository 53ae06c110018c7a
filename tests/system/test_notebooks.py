"""The notebooks in ``notebooks/`` execute from top to bottom without an error.

Each notebook runs in a fresh Jupyter kernel started from *this* interpreter (a private
``python3`` kernelspec is written to a temporary ``JUPYTER_PATH``, so a system-wide
kernelspec can never pick another Python), with ``MPLBACKEND=Agg`` and a private qtrace
disk cache. Any cell that raises fails the test with the cell's traceback.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook tests need the `test` extra (nbformat)")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need the `test` extra (nbclient)")
pytest.importorskip("ipykernel", reason="notebook tests need the `test` extra (ipykernel)")
pytest.importorskip("matplotlib", reason="notebook tests need the `test` extra (matplotlib)")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["01_quickstart.ipynb", "02_jit_step_functions.ipynb", "03_gradients_through_loops.ipynb"]
TIMEOUT_S = 300  # per cell


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A ``python3`` kernelspec running ``sys.executable``, found first on ``JUPYTER_PATH``."""
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (qtrace tests)",
        "language": "python",
        "env": {"MPLBACKEND": "Agg"},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return {
        "JUPYTER_PATH": str(root),
        "MPLBACKEND": "Agg",
        "QTRACE_CACHE_DIR": str(root / "qtrace-cache"),
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }


def test_notebooks_are_committed_executed():
    """Committed with their outputs, run top to bottom once, so a reader on GitHub sees the
    plots and diagrams (re-run with `jupyter nbconvert --to notebook --execute --inplace`)."""
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        counts = [c.execution_count for c in code]
        assert counts == list(range(1, len(code) + 1)), f"{name}: execute it top to bottom ({counts})"
        errors = [o for c in code for o in c.outputs if o.output_type == "error"]
        assert not errors, f"{name}: committed with an error output"
        if any("plt." in c.source for c in code):
            assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), name


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name, kernel_env, monkeypatch):
    for key, value in kernel_env.items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # A first cell (in memory only) that reports which interpreter runs the kernel.
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    client = nbclient.NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError (with the traceback) if any cell raises
    elapsed = time.perf_counter() - t0

    # The kernel really was this interpreter, and every code cell ran without an error.
    probe = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert probe.strip() == sys.executable, (probe, sys.executable)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    print(f"{name}: {len(code)} code cells in {elapsed:.1f} s")
