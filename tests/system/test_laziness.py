"""Eager operations are recorded, not run; evaluation launches fused kernels on demand."""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt
from qtrace.tracer import creation


def _launches() -> int:
    return qt.stats()["kernel_launches"]


def _tasks() -> int:
    return qt.stats()["tasks_run"]


def test_recording_a_thousand_ops_launches_nothing(rng, fusion):
    qt.config.max_pending_nodes = 10_000  # below the automatic cut
    x = rng.standard_normal(64)
    t = qt.asarray(x)
    qt.reset_stats()
    y = t
    for i in range(1000):  # cheap ops: a 1000-op fused kernel must also compile quickly
        y = y * 0.999 + 0.001 if i % 2 else abs(y) - 0.0001
    assert _launches() == 0
    assert qt.stats()["compiles"] == 0
    assert isinstance(y, qt.Tensor) and y.shape == (64,) and y.dtype == np.float64
    # metadata of a pending tensor needs no evaluation
    assert y.ndim == 1 and y.size == 64 and y.device == t.device
    assert _launches() == 0
    ref = x.copy()
    for i in range(1000):
        ref = ref * 0.999 + 0.001 if i % 2 else abs(ref) - 0.0001
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-10, atol=1e-12)


def test_small_dag_with_reuse_is_not_evaluated_early(rng, fusion):
    """A graph whose values are read several times is measured by its nodes (48 here), not
    by its paths (3**12): it stays far below ``max_pending_nodes`` and launches nothing."""
    x = rng.uniform(0.5, 1.0, 64)
    t = qt.asarray(x)
    qt.reset_stats()
    y = t
    for _ in range(12):                  # 4 ops per step, each step reads y three times
        y = qt.sqrt(y * y + 1.0) - y
    assert _launches() == 0
    ref = x.copy()
    for _ in range(12):
        ref = np.sqrt(ref * ref + 1.0) - ref
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-9)


@pytest.mark.cpu_only("small tasks share one launch through the CPU's sequence runner")
def test_elementwise_chain_is_one_kernel_when_fused(rng, fusion):
    x = rng.standard_normal(1000)
    t = qt.asarray(x)
    y, ref = t, x.copy()
    ops = [lambda v: v * 1.5, lambda v: v + 2.0, np.sin, np.cos, lambda v: v - 0.5,
           np.exp, lambda v: v / 3.0, np.tanh, lambda v: v * v, np.abs]
    for op in ops:
        y, ref = op(y), op(ref)
    assert isinstance(y, qt.Tensor)
    qt.reset_stats()
    out = y.numpy()
    assert _tasks() == (1 if fusion else 10)
    assert _launches() == 1  # small tasks run in one sequence launch
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    # evaluating again launches nothing: the tensor holds its value now
    qt.reset_stats()
    np.testing.assert_array_equal(y.numpy(), out)
    assert _launches() == 0


def test_eval_two_outputs_sharing_inputs(rng, fusion):
    x, z = rng.standard_normal(500), rng.standard_normal(500)
    a, c = qt.asarray(x), qt.asarray(z)
    u = qt.sin(a) * c
    v = qt.cos(a) + c
    qt.reset_stats()
    qt.eval(u, v)
    launches = _launches()
    assert 1 <= launches <= (2 if fusion else 4)
    qt.reset_stats()
    np.testing.assert_allclose(u.numpy(), np.sin(x) * z, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(v.numpy(), np.cos(x) + z, rtol=1e-12, atol=1e-15)  # cos + z cancels
    assert _launches() == 0  # both were computed by qt.eval


def test_eval_sibling_outputs_are_one_kernel():
    """qt.eval's own example: two same-shape outputs of one input fuse horizontally."""
    x = qt.asarray(np.arange(3.0))
    y = x * 2
    z = x + 1
    qt.reset_stats()
    qt.eval(y, z)
    assert _launches() == 1
    assert y.tolist() == [0.0, 2.0, 4.0] and z.tolist() == [1.0, 2.0, 3.0]


def test_eval_shares_an_intermediate(rng, fusion):
    x = rng.standard_normal((30, 40))
    a = qt.asarray(x)
    m = qt.exp(a) * 2.0
    s = m.sum(axis=1)
    d = m - 1.0
    qt.eval(s, d, m)
    np.testing.assert_allclose(s.numpy(), (np.exp(x) * 2).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(d.numpy(), np.exp(x) * 2 - 1, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(m.numpy(), np.exp(x) * 2, rtol=1e-12)


def test_eval_accepts_computed_and_repeated_tensors(rng):
    x = rng.standard_normal(10)
    a = qt.asarray(x)
    b = a + 1.0
    qt.eval(b, b, a)
    qt.reset_stats()
    qt.eval(b, a)
    assert _launches() == 0
    np.testing.assert_allclose(b.numpy(), x + 1.0)


def test_eval_rejects_non_tensors():
    try:
        qt.eval(np.ones(3))
    except TypeError as err:
        assert "qt.eval" in str(err)
    else:
        raise AssertionError("qt.eval(ndarray) did not raise TypeError")


def test_other_references_keep_their_value_after_evaluation(rng):
    x = rng.standard_normal(20)
    a = qt.asarray(x)
    b = a * 3.0
    c = b + 1.0          # c references b's pending node
    b.numpy()            # b becomes a computed leaf
    np.testing.assert_allclose(c.numpy(), x * 3.0 + 1.0)


def test_pending_graph_size_limit_forces_evaluation(rng):
    """A program that never reads a value is evaluated automatically, at the same place of
    its loop every time, so the graphs between cuts are bounded and one plan serves them."""
    qt.config.max_pending_nodes = 50
    x = rng.standard_normal(16)
    t = qt.asarray(x)
    qt.reset_stats()
    y = t
    for i in range(800):
        y = y * 1.001 + 0.5
        if i == 399:
            s = qt.stats()
    assert s["kernel_launches"] > 0, "the pending graph grew past max_pending_nodes without evaluating"
    assert s["auto_evaluations"] >= 2
    # it stays bounded: no tensor keeps more pending work than the policy allows
    assert y._node.count <= 2 * 4 * 50 + 2
    # cuts after the first land at the learned anchor (this loop's line): every chunk is
    # the same graph, so the automatic evaluations of the second half compile nothing new
    assert qt.stats()["compiles"] == s["compiles"]
    assert qt.stats()["auto_evaluations"] > s["auto_evaluations"]
    ref = x.copy()
    for _ in range(800):
        ref = ref * 1.001 + 0.5
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-12)


def test_no_evaluation_below_the_size_limit(rng):
    qt.config.max_pending_nodes = 10_000
    t = qt.asarray(rng.standard_normal(16))
    qt.reset_stats()
    y = t
    for _ in range(200):
        y = y * 1.001 + 0.5
    assert _launches() == 0


def test_eager_loop_compiles_once(rng):
    x = rng.standard_normal(300)
    v = np.zeros(300)
    t, tv = qt.asarray(x), qt.asarray(v)
    compiles = []
    for _ in range(100):
        tv = tv - 0.1 * t
        t = t + 0.1 * tv
        qt.eval(t, tv)
        compiles.append(qt.stats()["compiles"])
    assert len(set(compiles[1:])) == 1, "a repeated eager step compiled again"
    for _ in range(100):
        v = v - 0.1 * x
        x = x + 0.1 * v
    np.testing.assert_allclose(t.numpy(), x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tv.numpy(), v, rtol=1e-10, atol=1e-12)


def test_eager_loop_hits_the_plan_cache(rng):
    x = rng.standard_normal(50)
    t = qt.asarray(x)
    t = (t * 0.5 + 1.0)
    t.numpy()
    qt.reset_stats()
    for _ in range(20):
        t = t * 0.5 + 1.0
        t.numpy()
    s = qt.stats()
    assert s["compiles"] == 0
    assert s["cache_hits_memory"] >= 20
    assert s["traces"] == 0


def test_explain_without_arguments_reports_pending_work(rng):
    x = qt.asarray(rng.standard_normal(8))
    y = qt.sin(x) * 2.0
    report = qt.explain()
    text = str(report)
    assert "pending on this thread" in text and "loop anchor" in text
    assert report.n_kernels == 1
    qt.eval(y)
    assert "nothing to evaluate" in str(qt.explain())


ARANGE_CASES = [(10,), (0, 10, 3), (5, -7, -2), (0.0, 1.0, 0.1), (1.5, -3.2, -0.37), (-0.0, 4.0, 1.0),
                (-3, 20, 0.25), (2**31 - 5, 2**31 + 5, 1), (0, 2**25, 1, "float32"),
                (0.1, 1000.0, 0.7, "float32"), (0, 100, 3, "uint16"), (0, 3), (1, 2), (3, 1)]


@pytest.mark.parametrize("case", ARANGE_CASES, ids=str)
def test_arange_generator_is_bit_exact(case, fusion, monkeypatch):
    """``arange`` as an index generator (forced here for every size) gives NumPy's values
    bit for bit: element 0 ``start``, 1 ``start + step``, then ``start + i * delta``."""
    monkeypatch.setattr(creation, "LAZY_ARANGE_MIN", 0)
    args, dtype = (case[:-1], case[-1]) if isinstance(case[-1], str) else (case, None)
    want = np.arange(*args, dtype=dtype)
    got = qt.arange(*args, dtype=dtype).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_large_arange_fuses_into_its_consumer(fusion):
    """A large ``arange`` is no input buffer: fused, ``arange(n) % 7 == 0`` reads nothing of
    n elements (unfused, the generator's values are stored by its own task)."""
    n = 1 << 20
    report = qt.explain(lambda: qt.arange(n) % 7 == 0)
    assert not report.spec.leaves, str(report)
    big_reads = [r for t in report.tasks for r in t.reads if f"[{n}]" in r]
    assert fusion is False or not big_reads, str(report)
    assert int(qt.sum(qt.arange(n) % 7 == 0)) == len(range(0, n, 7))


LINSPACE_CASES = [(0.0, 1.0, 5, True, None), (2.5, -7.25, 77, True, None), (0, 10, 40, False, None),
                  (-3.0, -3.0, 9, True, None), (1e-3, 1e3, 101, True, "float32"), (0, 1, 2, True, None),
                  (0.1, 0.7, 1, True, None), (5, 1e30, 33, False, "float32"), (1, 2, 0, True, None)]


@pytest.mark.parametrize("case", LINSPACE_CASES, ids=str)
def test_linspace_generator_is_bit_exact(case, fusion, monkeypatch):
    """``linspace`` as an index generator (forced here for every size) gives NumPy's values
    bit for bit (``i * step + start`` in float64, ``stop`` last, then the cast)."""
    monkeypatch.setattr(creation, "LAZY_ARANGE_MIN", 0)
    start, stop, num, endpoint, dtype = case
    want = np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)
    got = qt.linspace(start, stop, num, endpoint=endpoint, dtype=dtype).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_large_linspace_is_no_buffer(fusion):
    n = 1 << 20
    report = qt.explain(lambda: qt.sum(qt.sin(qt.linspace(0.0, 10.0, n))))
    assert not report.spec.leaves, str(report)
    want = np.sum(np.sin(np.linspace(0.0, 10.0, n)))
    np.testing.assert_allclose(float(qt.sum(qt.sin(qt.linspace(0.0, 10.0, n)))), want, rtol=1e-12)


def _train_keeping_losses(rng, steps: int):
    """An eager training loop as NumPy users write it: ``value_and_grad`` each step, weights
    updated in place, every loss kept in a list; the losses stacked at the end. (Step 0.02:
    gradient descent here contracts rounding differences; at 0.05 some draws are chaotic.)"""
    x = qt.asarray(rng.standard_normal((40, 3)))
    w = qt.asarray(rng.standard_normal((3, 5)) * 0.1)
    step = qt.value_and_grad(lambda w: qt.sum(qt.tanh(x @ w) ** 2))
    losses = []
    for _ in range(steps):
        loss, g = step(w)
        w -= 0.02 * g
        losses.append(loss)
    qt.eval(w)   # evaluates every pending value: the losses are stored with it
    before = qt.stats()["tasks_run"]
    curve = qt.stack(losses).numpy()
    work = qt.stats()["tasks_run"] - before
    stored = [qt.asarray(v) for v in curve]   # what stacking stored values costs
    before = qt.stats()["tasks_run"]
    qt.stack(stored).numpy()
    return curve, work - (qt.stats()["tasks_run"] - before), w.numpy()


def test_kept_losses_are_stored_not_recomputed(rng, fusion):
    """A loss returned by ``qt.value_and_grad`` is a pending value like any other: stored by
    the evaluations (automatic cuts, ``qt.eval``), so stacking 10 or 40 kept losses at the
    end computes no step again (before: each loss's graph reached back through every
    step's weights, and the stack recomputed them all)."""
    qt.config.max_pending_nodes = 60
    seed = int(rng.integers(2**31))
    short, work_short, _ = _train_keeping_losses(np.random.default_rng(seed), 10)
    long, work_long, w = _train_keeping_losses(np.random.default_rng(seed), 40)
    assert work_short == work_long == 0, (work_short, work_long)   # tasks beyond the stack's
    np.testing.assert_allclose(long[:10], short, rtol=1e-12)
    r = np.random.default_rng(seed)   # the NumPy reference, gradient by hand
    xn, wn = r.standard_normal((40, 3)), r.standard_normal((3, 5)) * 0.1
    want = []
    for _ in range(40):
        h = np.tanh(xn @ wn)
        want.append(np.sum(h ** 2))
        wn = wn - 0.02 * (xn.T @ (2 * h * (1 - h ** 2)))
    np.testing.assert_allclose(long, want, rtol=1e-10)
    np.testing.assert_allclose(w, wn, rtol=1e-10)


GATE_PROGRAM = r'''
import json, sys
import numpy as np
import qtrace as qt
from qtrace.graph import native
from qtrace.tracer import pending
from qtrace.tracer.context import state


class Counting(pending.CutPolicy):
    """The cut policy, counting how often it is consulted (each consultation reads its phase)."""
    __slots__ = ("_phase", "reads")

    def __init__(self):
        self.reads = 0
        super().__init__()

    @property
    def phase(self):
        self.reads += 1
        return self._phase

    @phase.setter
    def phase(self, value):
        self._phase = value


qt.config.max_pending_nodes = 60
pending.reset()
state().cut = policy = Counting()
rng = np.random.default_rng(int(sys.argv[1]))
y0, z0 = rng.standard_normal(16), rng.standard_normal(3)
y, z = qt.asarray(y0), qt.asarray(z0)
qt.reset_stats()
reads = []
for i in range(60):
    for _ in range(40):
        y = y * 0.999        # 40 multiplications of shape (16,) an iteration
    z = z + 1.0             # the anchor: the rarest operation of the loop
    reads.append((policy.reads, qt.stats()["auto_evaluations"]))
w = qt.asarray(rng.standard_normal(7))
for i in range(300):    # another loop: the anchor is never recorded; it must cut, learn again
    w = w * 0.5 + 0.25
ref_y, ref_z, ref_w = y0 * 0.999 ** 2400, z0 + 60.0, np.asarray(w.numpy())
(r0, c0), (r1, c1) = reads[20], reads[-1]
print(json.dumps({"native": native.active(), "reads_per_cut": (r1 - r0) / max(1, c1 - c0),
                  "cuts": c1 - c0, "anchor": [policy.anchor[0], list(policy.anchor[1])],
                  "w_count": w._node.count, "err": float(max(np.max(np.abs(y.numpy() - ref_y)),
                                                             np.max(np.abs(z.numpy() - ref_z))))}))
'''


@pytest.mark.parametrize("recorder", ["compiled", "python"])
def test_an_anchored_cut_policy_is_consulted_only_by_its_anchors_operations(recorder):
    """Past the pending limit the learned policy is asked only by operations of its anchor's
    primitive and shape (``ThreadState.gate``): a loop of 40 other operations between two
    anchors consults it about once per cut, not at every operation; the cuts still land on
    the anchor; and a loop that never records the anchor is cut at four times the limit and
    learns a new one (its graph stays bounded). Both recorders (the compiled one's ``note``
    and the Python one's) ask the same."""
    import json
    import os
    import subprocess
    import sys

    from qtrace.graph import native
    if recorder == "compiled" and not native.active():
        pytest.skip("the compiled recorder is not built here")
    env = dict(os.environ, QTRACE_NATIVE="1" if recorder == "compiled" else "0")
    seed = int(np.random.default_rng().integers(1 << 30))
    out = subprocess.run([sys.executable, "-c", GATE_PROGRAM, str(seed)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["native"] == (recorder == "compiled")
    assert got["cuts"] >= 10
    assert got["reads_per_cut"] <= 2, got        # (without the gate: ~40 per cut)
    assert got["anchor"] != ["add", [3]]         # the second loop learned its own anchor
    assert got["w_count"] <= 4 * 60 + 4
    assert got["err"] <= 1e-9
