"""Shared fixtures: fusion on/off (every fusion-sensitive test runs both ways), fresh RNG."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile
import zlib

# the disk kernel cache of a test session lives in a private temporary directory (set
# before qtrace is imported: the setting is read at import), never in the user's cache; each
# pytest-xdist worker (``-n auto``) gets its own, so that tests counting compiles and disk
# writes see only their own process's (a worker inherits the controller's environment)
_private = os.environ.get("QTRACE_TEST_PRIVATE_CACHE")
if "QTRACE_CACHE_DIR" not in os.environ or (
    os.environ.get("PYTEST_XDIST_WORKER") and os.environ["QTRACE_CACHE_DIR"] == _private
):
    _cache_dir = tempfile.mkdtemp(prefix="qtrace-test-cache-")
    os.environ["QTRACE_CACHE_DIR"] = os.environ["QTRACE_TEST_PRIVATE_CACHE"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)

# kernels compiled optimised before their first run (tiering off): the suite tests the code
# users run from the second call on, and sees compiles and disk writes as they happen;
# tests/system/test_tiering.py turns it on (QTRACE_TIERED=1 runs the whole suite tiered)
os.environ.setdefault("QTRACE_TIERED", "0")

# JAX (the gradient and interop references) compiles each test's functions anew; without
# LLVM's optimisation of XLA's CPU code they compute the same values and compile in about
# a quarter less time (the suite's JAX share: a fifth of its time in the operator tests)
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import qtrace as qt  # noqa: E402
from qtrace.graph import evaluate as graph_evaluate  # noqa: E402

TEST_DEVICES = [d for d in os.environ.get("QTRACE_TEST_DEVICES", "cpu,cuda").split(",") if d]


@pytest.fixture(params=TEST_DEVICES)
def device(request):
    """Run the test on each device (``QTRACE_TEST_DEVICES``, default ``cpu,cuda``): tensors
    are created there (``qt.config.device``). Without a GPU, CuPy or a driver the CUDA
    cases skip, saying which is missing."""
    dev = qt.Device(request.param)
    if dev.kind != "cpu":
        only = request.node.get_closest_marker("cpu_only")
        if only is not None:
            pytest.skip(f"CPU-specific: {only.args[0]}")
        why = graph_evaluate.unavailable(dev)
        if why is not None:
            pytest.skip(f"no {dev}: {why}")
    old = qt.config.device
    qt.config.device = str(dev)
    yield dev
    qt.config.device = old


@pytest.fixture(params=[True, False], ids=["fused", "unfused"])
def fusion(request, device):
    """Run the test with fusion on and with ``QTRACE_FUSION=0`` semantics (one task per op),
    on every test device."""
    old = qt.config.fusion
    qt.config.fusion = request.param
    yield request.param
    qt.config.fusion = old


SEED = int(os.environ.get("QTRACE_TEST_SEED") or np.random.SeedSequence().entropy % (2**32))
# the test processes pytest-xdist starts inherit it: one seed for the whole run, the one the
# header names (each process would otherwise draw its own)
os.environ.setdefault("QTRACE_TEST_SEED", str(SEED))


def pytest_report_header(config):
    return f"qtrace test seed: QTRACE_TEST_SEED={SEED}"


def pytest_collection_finish(session):
    """The collected test items (some 40,000, with their keywords, marks and fixtures: about
    700,000 objects the cycle collector tracks) live until the session ends: move them to
    the collector's permanent generation, so that each full collection (``gc.collect()``
    in a test, or the interpreter's own) does not walk them again (0.3-0.6 s each)."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def rng(request):
    """Fresh random inputs each session (seed in the header; QTRACE_TEST_SEED reproduces a run)."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture
def python_calls():
    """``calls(fn)``: the Python functions that ``fn()`` calls (a profiler watching), as
    ``(file path, function name)`` pairs in call order (the compiled paths call none)."""
    def calls(fn) -> list:
        seen = []

        def prof(frame, event, arg):
            if event == "call":
                seen.append((frame.f_code.co_filename, frame.f_code.co_name))
        sys.setprofile(prof)
        try:
            fn()
        finally:
            sys.setprofile(None)
        return seen
    return calls


@pytest.fixture(autouse=True)
def _restore_config():
    saved = dict(vars(qt.config))
    yield
    for name, value in saved.items():   # (by assignment: watchers of a setting are told)
        if getattr(qt.config, name) is not value:
            setattr(qt.config, name, value)
