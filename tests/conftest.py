"""Shared fixtures: fusion on/off (every fusion-sensitive test runs both ways), fresh RNG."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import qtrace as qt


@pytest.fixture(params=[True, False], ids=["fused", "unfused"])
def fusion(request):
    """Run the test with fusion on and with ``QTRACE_FUSION=0`` semantics (one task per op)."""
    old = qt.config.fusion
    qt.config.fusion = request.param
    yield request.param
    qt.config.fusion = old


SEED = int(os.environ.get("QTRACE_TEST_SEED") or np.random.SeedSequence().entropy % (2**32))


def pytest_report_header(config):
    return f"qtrace test seed: QTRACE_TEST_SEED={SEED}"


@pytest.fixture
def rng(request):
    """Fresh random inputs each session (seed in the header; QTRACE_TEST_SEED reproduces a run)."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture(autouse=True)
def _restore_config():
    saved = dict(vars(qt.config))
    yield
    vars(qt.config).update(saved)
