"""Shared fixtures: fusion on/off (every fusion-sensitive test runs both ways), fresh RNG."""

from __future__ import annotations

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


@pytest.fixture
def rng(request):
    """A NumPy generator seeded from the test's name, so failures reproduce but inputs vary by test."""
    seed = abs(hash(request.node.nodeid)) % (2**32)
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def _restore_config():
    saved = dict(vars(qt.config))
    yield
    vars(qt.config).update(saved)
