"""Recording an operation costs the same whatever is pending (work counted, not timed).

The work of one operation is the number of Python line and call events it executes
(``sys.settrace``): deterministic, independent of the machine's speed and load. Recording
must not walk the pending graph, so that count is the same with nothing pending and with
a thousand operations pending over the same arrays.
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import runtime


@pytest.fixture(autouse=True)
def _no_cache_trim(monkeypatch):
    """The plan cache by graph structure is emptied when it reaches its cap; after a long
    test session that can happen inside a measured call (more work, for a reason that has
    nothing to do with pending depth): start these tests with it empty and uncapped."""
    runtime._by_struct.clear()
    monkeypatch.setattr(runtime, "BY_STRUCT_CAP", 1 << 30)


def _work(fn) -> int:
    """Python trace events (calls, lines) of ``fn()``, run twice before untraced: what it
    records is then interned (the intern tables are emptied at a size cap, which earlier
    tests may leave a few structures away: a run reaching it re-interns what it made
    before; two runs, and the second has everything), and the cyclic collector is off
    meanwhile (a collection landing in the window runs unrelated weak-reference callbacks:
    other tests' garbage, not ``fn``'s work)."""
    fn()
    fn()
    events = 0

    def tracer(frame, event, arg):
        nonlocal events
        events += 1
        return tracer

    was = gc.isenabled()
    gc.collect()
    gc.disable()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
        if was:
            gc.enable()
    return events


def _arrays(rng, pending: int):
    p = qt.asarray(rng.standard_normal((41, 41)))
    q = qt.asarray(rng.standard_normal((41, 41)))
    for _ in range(pending):  # a long pending history over the same two arrays
        p = p * 0.999 + q * 0.001
        p[1:-1, 1:-1] = p[1:-1, 2:] * 0.5 + p[1:-1, :-2] * 0.5
    return p, q


OPERATIONS = {
    "slice": lambda p, q: p[1:-1, 2:],
    "slice + add": lambda p, q: p[1:-1, 2:] + p[1:-1, :-2],
    "elementwise": lambda p, q: p * q,
    "scalar": lambda p, q: p * 2.0,
    "slice assignment": lambda p, q: p.__setitem__((slice(1, -1), slice(1, -1)), q[1:-1, 2:]),
    "column assignment": lambda p, q: p.__setitem__((slice(None), -1), p[:, -2]),
    "row assignment of a scalar": lambda p, q: p.__setitem__((0, slice(None)), 1.0),
    "in-place operator": lambda p, q: p.__iadd__(q),
    "mask assignment": lambda p, q: p.__setitem__(q > 0, 0.0),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_recording_work_does_not_grow_with_pending_depth(name, rng):
    qt.config.max_pending_nodes = 1 << 30  # no automatic evaluation while measuring
    op = OPERATIONS[name]
    shallow = _arrays(rng, 2)  # two steps: already every leaf of the deep history (the two
    deep = _arrays(rng, 500)   # arrays and the step's scalars, which are 0-d inputs in eager code)
    assert deep[0]._node.count > 1000  # the history really is pending
    for args in (shallow, deep):  # warm the caches that a first call fills
        op(*args)
    # the smallest of three counts: a bounded cache emptied during one call (node structures,
    # constants) costs that call extra work that has nothing to do with the pending depth
    work = [min(_work(lambda args=args: op(*args)) for _ in range(3)) for args in (shallow, deep)]
    assert work[0] == work[1], f"{name}: {work[0]} events with 2 steps pending, {work[1]} with 500"


def test_mask_updates_do_not_recompile_for_a_new_number_of_true_elements(rng):
    """``x[mask] = v`` is a select: the plan does not depend on how many elements are True."""
    x = qt.zeros(256)
    compiles = None
    for k in range(6):
        m = rng.random(256) < (k + 1) / 8
        x[qt.asarray(m)] = 1.5
        qt.eval(x)
        if k == 1:
            compiles = qt.stats()["compiles"]
    assert qt.stats()["compiles"] == compiles


def test_mask_updates_match_numpy_for_every_count(rng):
    a = rng.standard_normal(300)
    x, ref = qt.asarray(a.copy()), a.copy()
    for k in range(8):
        m = rng.random(300) < k / 7
        x[qt.asarray(m)] = x[qt.asarray(m)] * 2.0 + k
        ref[m] = ref[m] * 2.0 + k
    np.testing.assert_allclose(np.asarray(x), ref)


def test_a_gradient_step_costs_the_same_after_a_long_pending_history(rng):
    """An eager training loop never evaluates its weights: each step's ``qt.grad`` starts
    from weights whose pending history grows. The reverse pass stops at the values it
    differentiates, so one step's work is the same after 3 steps as after 60."""
    qt.config.max_pending_nodes = 100_000  # no automatic cut: the history stays pending
    x = qt.asarray(rng.standard_normal((8, 4)))

    def loss(w):
        return qt.sum(qt.tanh(x @ w) ** 2)

    def step(w):
        return w - 0.01 * qt.grad(loss)(w)

    work = {}
    for history in (3, 60):
        w = qt.asarray(rng.standard_normal((4, 3)))
        for _ in range(history):
            w = step(w)
        work[history] = _work(lambda w=w: step(w))
    assert work[60] == work[3], work


def test_reading_views_in_a_loop_keeps_the_view_list_bounded(rng):
    """A loop reading rows of a written (so shared, viewed) base: the storage keeps weak
    references to live views only — amortised pruning, not one entry per read ever made —
    and a write still reaches every live view."""
    base = rng.standard_normal((100, 8))
    y = qt.asarray(base) * 2
    y[0] = 1.0
    kept = [y[k] for k in range(1, 40)]
    for k in range(20_000):
        y[k % 100]
    storage = y._view[0]
    assert len(storage.views) <= 2 * (1 + len(kept)) + 16
    y[5] = 3.0
    want = base * 2
    want[0], want[5] = 1.0, 3.0
    for k, view in enumerate(kept, start=1):
        np.testing.assert_array_equal(view.numpy(), want[k])
