"""The command line's user-facing behaviour: the demo with and without its optional
progress bar, and where the disk cache lives (``platformdirs``, ``QTRACE_CACHE_DIR``).

The ``cache info|clear`` commands on broken directories are tested in
``test_disk_cache.py``; ``bench``'s tables in ``benchmarks/test_harness.py``.
"""

from __future__ import annotations

import subprocess
import sys

import platformdirs
import pytest

from qtrace.__main__ import main, progress
from qtrace.config import default_cache_dir


def _demo(capsys) -> tuple[str, str]:
    assert main(["demo", "--n", "200", "--iters", "3"]) == 0  # 0: the loss went down
    return capsys.readouterr()


def test_demo_runs_without_tqdm(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` raises ImportError
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # even on a terminal
    out, err = _demo(capsys)
    assert "step   1/3  loss" in out and "step   3/3  loss" in out
    assert "loss " in out.splitlines()[-1] and err == ""


def test_demo_draws_a_tqdm_bar_on_a_terminal(monkeypatch, capsys):
    pytest.importorskip("tqdm")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    out, err = _demo(capsys)
    assert "step   1/3" not in out
    assert "3/3" in err and "loss=" in err  # the bar, with the loss as its postfix


def test_progress_prints_plain_lines_off_a_terminal(capsys):
    step, close = progress(2)
    step(1.0)
    step(0.5)
    close()
    assert capsys.readouterr().out.splitlines() == ["  step   1/2  loss 1", "  step   2/2  loss 0.5"]


def test_cache_dir_comes_from_platformdirs_unless_overridden(tmp_path):
    assert default_cache_dir() == platformdirs.user_cache_dir("qtrace", appauthor=False)
    code = "import qtrace as qt; print(qt.config.cache_dir)"
    env = {"PATH": "", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    run = lambda **extra: subprocess.run([sys.executable, "-c", code], env={**env, **extra},
                                         capture_output=True, text=True, check=True).stdout.strip()
    if sys.platform.startswith("linux"):
        assert run() == str(tmp_path / "xdg" / "qtrace")
    assert run(QTRACE_CACHE_DIR=str(tmp_path / "mine")) == str(tmp_path / "mine")
