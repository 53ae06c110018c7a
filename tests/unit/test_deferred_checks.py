"""Deferred status checks of GPU work (``qtrace.devices.cuda.check_deferred``), with fake
statuses: no GPU needed. A status is read where the host waits anyway; a CUDA graph's
instance keeps writing its status on every replay and defers one read of it while
``armed`` (``qtrace.devices.cuda_graphs``)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from qtrace.devices import cuda


class _Status:
    """A status row a fake kernel wrote: ``failing`` makes the check raise; the first
    ``interrupted`` reads raise KeyboardInterrupt (Ctrl-C during the copy)."""

    def __init__(self, failing: bool, interrupted: int = 0):
        self.device = contextlib.nullcontext()
        self.nbytes = 16
        self.failing, self.interrupted, self.reads = failing, interrupted, 0

    def get(self):
        self.reads += 1
        if self.interrupted:
            self.interrupted -= 1
            raise KeyboardInterrupt
        return np.array([1 if self.failing else 0, 7])


def _check(host):
    if host[0]:
        raise IndexError("qtrace gather: index 7 is out of bounds")


@pytest.fixture(autouse=True)
def _empty_queue():
    cuda._deferred.clear()
    yield
    cuda._deferred.clear()


def test_an_interrupted_read_keeps_its_status_armed_and_queued_once():
    """Ctrl-C during the read of a replayed graph's status: the status stays queued, still
    armed, so the next replay does not queue it again — its failure is raised once, at the
    next check, and never after."""
    status, armed = _Status(failing=True, interrupted=1), [True]
    cuda.defer_check(status, _check, armed)
    with pytest.raises(KeyboardInterrupt):
        cuda.check_deferred()
    assert armed[0] and len(cuda._deferred) == 1
    if not armed[0]:   # (what a replay does: see cuda_graphs._Instance.launched)
        cuda.defer_check(status, _check, armed)
    with pytest.raises(IndexError):
        cuda.check_deferred()
    cuda.check_deferred()   # (nothing left: not raised twice)
    assert status.reads == 2 and not cuda._deferred


def test_statuses_after_a_failure_stay_deferred():
    """The first failure is raised; statuses queued after it are read at the next check."""
    first, second = _Status(failing=True), _Status(failing=True)
    cuda.defer_check(first, _check)
    cuda.defer_check(second, _check)
    with pytest.raises(IndexError):
        cuda.check_deferred()
    assert first.reads == 1 and second.reads == 0 and len(cuda._deferred) == 1
    with pytest.raises(IndexError):
        cuda.check_deferred()
    assert second.reads == 1 and not cuda._deferred
