"""Bad input: errors name the operation and are raised where the user wrote it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import qtrace as qt
from qtrace.graph.node import make_input

THIS_FILE = os.path.abspath(__file__)


def _user_frame(err: BaseException, test_name: str) -> traceback.FrameSummary:
    """The frame of ``test_name`` in this file where ``err`` passed; also checks that nothing
    below it evaluated a graph (the error was raised while recording)."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == THIS_FILE and f.name == test_name]
    below = frames[frames.index(mine[-1]) + 1:]
    evaluating = [f"{f.filename}:{f.name}" for f in below
                  if f.name in ("evaluate", "_materialize", "numpy", "run", "compile_plan")
                  or f"{os.sep}devices{os.sep}" in f.filename]
    assert not evaluating, evaluating
    return mine[-1]


# --- shape mismatches: ValueError at record time, with both shapes ---------------------

BROADCAST_CASES = [
    ("add", lambda a, b: a + b, (3, 4), (5,)),
    ("multiply", lambda a, b: qt.multiply(a, b), (2, 3), (3, 2)),
    ("where", lambda a, b: qt.where(a > 0, a, b), (4,), (5,)),
    ("less", lambda a, b: a < b, (2, 1, 3), (4, 2)),
    ("subtract", lambda a, b: b - a, (7,), (6,)),
]


@pytest.mark.parametrize("name, op, s1, s2", BROADCAST_CASES, ids=[c[0] for c in BROADCAST_CASES])
def test_shape_mismatch_raises_at_the_recording_line(rng, name, op, s1, s2):
    a, b = qt.asarray(rng.standard_normal(s1)), qt.asarray(rng.standard_normal(s2))
    pending_a = a * 1.0
    qt.reset_stats()
    with pytest.raises(ValueError) as info:
        c = op(pending_a, b)  # noqa: F841 - the line the error must point at
    msg = str(info.value)
    assert str(s1) in msg and str(s2) in msg, msg
    assert name in msg, msg
    # raised while recording, before anything ran
    assert qt.stats()["kernel_launches"] == 0
    frame = _user_frame(info.value, "test_shape_mismatch_raises_at_the_recording_line")
    assert frame.line.startswith("c = op(pending_a, b)"), frame.line


def test_shape_mismatch_traceback_points_at_user_code(rng):
    a, b = qt.asarray(rng.standard_normal((3, 4))), qt.asarray(rng.standard_normal(5))
    y = qt.sin(a)
    try:
        z = y * 2.0 + b  # noqa: F841
    except ValueError as err:
        frame = _user_frame(err, "test_shape_mismatch_traceback_points_at_user_code")
        assert frame.line == "z = y * 2.0 + b  # noqa: F841"
        assert os.path.abspath(traceback.extract_tb(err.__traceback__)[0].filename) == THIS_FILE
        assert "(3, 4)" in str(err) and "(5,)" in str(err)
    else:
        raise AssertionError("no ValueError")


def test_shape_errors_of_other_ops(rng):
    a = qt.asarray(rng.standard_normal((3, 4)))
    with pytest.raises(ValueError, match=r"reshape"):
        a.reshape(5, 3)
    with pytest.raises(ValueError, match=r"\(3, 4\)|\(4, 3\)|shape"):
        qt.concatenate([a, a.T])
    with pytest.raises(ValueError):
        a @ a
    with pytest.raises(ValueError):
        qt.broadcast_to(a, (4, 4))
    with pytest.raises(np.exceptions.AxisError):
        a.sum(axis=2)


def test_shape_mismatch_inside_jit_raises_while_tracing(rng):
    f = qt.jit(lambda x, y: x + y)
    with pytest.raises(ValueError) as info:
        f(qt.ones((2, 3)), qt.ones((4,)))
    assert "(2, 3)" in str(info.value) and "(4,)" in str(info.value)


# --- unsupported dtypes: TypeError naming op and dtype (record time) ------------------

def test_unsupported_dtype_raises_at_the_recording_line():
    a = qt.ones(3) * 2
    qt.reset_stats()
    with pytest.raises(TypeError) as info:
        b = a + np.ones(3, np.float16)  # noqa: F841
    assert "add" in str(info.value) and "float16" in str(info.value)
    name = "test_unsupported_dtype_raises_at_the_recording_line"
    assert _user_frame(info.value, name).line.startswith("b = a + np.ones(3, np.float16)")
    assert qt.stats()["kernel_launches"] == 0


def test_unsupported_operand_dtype_raises_at_the_recording_line():
    a = qt.ones(3) * 2
    qt.reset_stats()
    with pytest.raises(TypeError) as info:
        b = ~a  # noqa: F841
    assert "invert" in str(info.value) and "float64" in str(info.value)
    name = "test_unsupported_operand_dtype_raises_at_the_recording_line"
    assert _user_frame(info.value, name).line.startswith("b = ~a")
    assert qt.stats()["kernel_launches"] == 0


# --- out-of-range gather / scatter indices ---------------------------------------------

def _guarded(rng, n=100, pad=64, poison=1e30):
    """A tensor viewing the middle of a NumPy buffer whose margins hold ``poison``."""
    base = np.full(n + 2 * pad, poison)
    base[pad:pad + n] = rng.uniform(0, 1, n)
    view = base[pad:pad + n]
    return base, view, qt.asarray(view)


@pytest.mark.parametrize("bad", [100, 101, -101, 10**6, -10**6, 2**40])
def test_out_of_range_host_index_raises_at_the_indexing_line(rng, fusion, bad):
    """Host index data is checked where it indexes, as in NumPy; nothing is recorded."""
    _, view, x = _guarded(rng)
    idx = np.array([0, 5, bad, 99])
    with pytest.raises(IndexError,
                       match=rf"__getitem__: index {bad} is out of bounds for axis 0 with size 100"):
        x[idx]
    with pytest.raises(IndexError, match=rf"__setitem__: index {bad} is out of bounds"):
        x[idx] = 1.0
    with pytest.raises(IndexError, match=rf"at\[\.\.\.\]\.add: index {bad} is out of bounds"):
        x.at[[bad, 1]].add(1.0)
    np.testing.assert_array_equal(x.numpy(), view)
    # in range: negative indices wrap; the copy qtrace checked is the one it reads
    idx = np.array([-1, 3, -100])
    y = x[idx]
    idx[:] = 10**6                 # the caller's array changes after recording
    np.testing.assert_array_equal(y.numpy(), view[[-1, 3, -100]])


@pytest.mark.parametrize("bad", [100, 101, -101, 10**6, -10**6, 2**40])
def test_out_of_range_gather_raises_index_error_at_evaluation(rng, fusion, bad):
    base, view, x = _guarded(rng)
    saved = base.copy()
    idx = qt.asarray(np.array([0, 5, bad, 99]))
    y = x[idx] * 2.0               # recording does not check a tensor index's data
    with pytest.raises(IndexError) as info:
        y.numpy()
    msg = str(info.value)
    assert "gather" in msg or "x[idx]" in msg, msg
    assert str(bad) in msg and "100" in msg, msg
    np.testing.assert_array_equal(base, saved)
    # the next evaluation works
    ok = x[np.array([0, 5, 99])] * 2.0
    np.testing.assert_allclose(ok.numpy(), view[[0, 5, 99]] * 2.0)


def test_out_of_range_tensor_index_raises(rng, fusion):
    _, view, x = _guarded(rng)
    idx = qt.asarray(np.array([3, 1]))
    bad_idx = idx * 100        # computed index tensor, out of range
    y = qt.sin(x[bad_idx])
    with pytest.raises(IndexError, match="gather"):
        y.numpy()
    np.testing.assert_allclose(qt.sin(x[idx]).numpy(), np.sin(view[[3, 1]]))


@pytest.mark.parametrize("mode", ["set", "add", "multiply", "min", "max"])
@pytest.mark.parametrize("bad", [100, -101, 2**40])
def test_out_of_range_scatter_raises_index_error(rng, fusion, mode, bad):
    base, view, x = _guarded(rng)
    saved = base.copy()
    neighbours = [np.full(100, 7.0) for _ in range(4)]
    y = getattr(x.at[qt.asarray(np.array([1, bad, 3]))], mode)(5.0)
    with pytest.raises(IndexError) as info:
        y.numpy()
    msg = str(info.value)
    assert "scatter" in msg and mode in msg, msg
    np.testing.assert_array_equal(base, saved)       # the source is never written
    for nb in neighbours:
        np.testing.assert_array_equal(nb, 7.0)
    z = x.at[np.array([1, 3])].add(1.0)
    expected = view.copy()
    expected[[1, 3]] += 1.0
    np.testing.assert_allclose(z.numpy(), expected)


def test_index_error_is_raised_again_and_does_not_poison_the_cache(rng):
    _, view, x = _guarded(rng)
    y = x[qt.asarray(np.array([0, 1000]))]
    for _ in range(2):
        with pytest.raises(IndexError):
            y.numpy()
    # the same graph with valid data runs from the cache
    good = x[np.array([0, 10])]
    np.testing.assert_array_equal(good.numpy(), view[[0, 10]])


def test_check_bounds_off_never_reads_outside(rng, fusion):
    qt.config.check_bounds = False
    base, view, x = _guarded(rng)
    idx = np.array([-10**6, -101, -100, -1, 0, 50, 99, 100, 101, 10**6, 2**40])
    out = x[idx].numpy()               # no raise
    assert out.shape == idx.shape
    assert np.all(out < 1.0), "read the poison around the buffer"
    valid = (idx >= -100) & (idx < 100)
    np.testing.assert_array_equal(out[valid], view[idx[valid]])


def _clamped(index: np.ndarray, n: int) -> np.ndarray:
    """JAX's default gather mode: negative indices wrapped once, then clamped to [0, n)."""
    index = index.astype(np.int64)
    return np.clip(np.where(index < 0, index + n, index), 0, n - 1)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8])
def test_check_bounds_off_clamps_out_of_range_reads(rng, fusion, dtype):
    """As the README says: without checks, reads clamp to the nearest element (JAX's gather)."""
    qt.config.check_bounds = False
    base, view, x = _guarded(rng)
    idx = np.array([-128, -101, -100, -1, 0, 50, 99, 100, 101, 127], dtype=dtype)
    want = view[_clamped(idx, 100)]
    np.testing.assert_array_equal(x[idx].numpy(), want)
    np.testing.assert_array_equal((x[qt.asarray(idx)] * 2.0 + 1.0).numpy(), want * 2.0 + 1.0)
    np.testing.assert_array_equal(qt.take(x, qt.asarray(idx)).numpy(), want)
    step = qt.jit(lambda x, i: qt.sum(x[i]))
    np.testing.assert_allclose(float(step(x, qt.asarray(idx))), want.sum(), rtol=1e-12)


def test_check_bounds_off_clamps_every_axis_and_huge_indices(rng, fusion):
    qt.config.check_bounds = False
    a = rng.uniform(0, 1, (4, 5))
    x = qt.asarray(a)
    rows = np.array([-9, 0, 3, 4, 2**40, -2**40])
    cols = np.array([7, -6, 1, -1, 2**62, 5])
    np.testing.assert_array_equal(x[rows, cols].numpy(), a[_clamped(rows, 4), _clamped(cols, 5)])
    np.testing.assert_array_equal(x[rows].numpy(), a[_clamped(rows, 4)])
    big = np.array([2**63 + 5, 1, 2**64 - 1], dtype=np.uint64)  # beyond int64: too high
    np.testing.assert_array_equal(x[0][big].numpy(), a[0][[4, 1, 4]])


@pytest.mark.parametrize("mode", ["set", "add", "max"])
def test_check_bounds_off_never_writes_outside(rng, fusion, mode):
    qt.config.check_bounds = False
    base, view, x = _guarded(rng)
    saved = base.copy()
    neighbours = [np.full(100, 7.0) for _ in range(4)]
    idx = np.array([2, 100, -101, 10**6, 2**40, 4])
    y = getattr(x.at[idx], mode)(9.0).numpy()
    np.testing.assert_array_equal(base, saved)
    for nb in neighbours:
        np.testing.assert_array_equal(nb, 7.0)
    # in-range updates applied, out-of-range ones dropped (JAX's scatter semantics)
    expected = view.copy()
    for i in (2, 4):
        expected[i] = {"set": 9.0, "add": view[i] + 9.0, "max": max(view[i], 9.0)}[mode]
    np.testing.assert_allclose(y, expected)


def test_huge_indices_in_a_fresh_process():
    """Far out-of-range indices (would fault if used) in both bounds modes: no crash."""
    code = textwrap.dedent("""
        import numpy as np
        import qtrace as qt
        x = qt.asarray(np.arange(10.0))
        for check in (True, False):
            qt.config.check_bounds = check
            for bad in (2**40, -2**40, 2**62, -2**62):
                for make in (lambda: x[np.array([1, bad])] + 0,
                             lambda: x.at[np.array([bad, 2])].set(1.0),
                             lambda: x.at[np.array([bad, 2])].add(1.0)):
                    try:
                        make().numpy()
                    except IndexError:
                        assert check
                    else:
                        assert not check
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.strip() == "ok"


def test_static_out_of_range_integer_index_raises_immediately():
    x = qt.ones((3, 4))
    with pytest.raises(IndexError, match="out of bounds"):
        x[3]
    with pytest.raises(IndexError):
        x[0, -5]
    with pytest.raises(IndexError):
        x[0, 0, 0]


# --- tracing errors ----------------------------------------------------------------------

def test_boolean_mask_in_jit_suggests_where(rng):
    @qt.jit
    def f(x):
        return x[x > 0]

    with pytest.raises(qt.TracerError) as info:
        f(qt.asarray(rng.standard_normal(5)))
    assert "qt.where" in str(info.value)
    # the same mask works in eager code
    x = rng.standard_normal(5)
    np.testing.assert_array_equal(qt.asarray(x)[qt.asarray(x) > 0].numpy(), x[x > 0])


def test_boolean_mask_read_in_jit_suggests_where(rng):
    @qt.jit
    def f(x):
        return x[x > 0]

    with pytest.raises(qt.TracerError, match="qt.where"):
        f(qt.asarray(rng.standard_normal(5)))


def test_boolean_mask_assignment_works_in_jit_and_writes_the_argument(rng):
    """``x[mask] = v`` has a data-independent shape: it is a select, allowed under jit, and
    the write reaches the caller's array as it would in NumPy."""
    @qt.jit
    def f(x):
        x[x > 0] = 0.0
        return x

    a = rng.standard_normal(5)
    t = qt.asarray(a)
    out = f(t)
    want = np.where(a > 0, 0.0, a)
    np.testing.assert_array_equal(np.asarray(out), want)
    np.testing.assert_array_equal(np.asarray(t), want)
    assert out is t


@pytest.mark.parametrize("how", ["float", "int", "bool", "if", "item", "numpy", "tolist",
                                 "np.asarray", "while"])
def test_concretizing_a_traced_value_raises_tracer_error(rng, how):
    def f(x):
        s = x.sum()
        if how == "float":
            float(s)
        elif how == "int":
            int(s)
        elif how == "bool":
            bool(s > 0)
        elif how == "if":
            if s > 0:
                return x
        elif how == "item":
            s.item()
        elif how == "numpy":
            x.numpy()
        elif how == "tolist":
            x.tolist()
        elif how == "np.asarray":
            np.asarray(x)
        elif how == "while":
            while s > 0:
                s = s - 1
        return x

    with pytest.raises(qt.TracerError) as info:
        qt.jit(f)(qt.asarray(rng.standard_normal(4)))
    assert "qt.jit" in str(info.value)


def test_tracer_error_is_an_exception_class():
    assert issubclass(qt.TracerError, Exception)


def test_jit_recovers_after_a_tracing_error(rng):
    calls = []

    def f(x, fail):
        calls.append(fail)
        if fail:
            float(x.sum())
        return x * 2

    g = qt.jit(f, static_argnums=1)
    t = qt.asarray(rng.standard_normal(3))
    with pytest.raises(qt.TracerError):
        g(t, True)
    np.testing.assert_allclose(g(t, False).numpy(), t.numpy() * 2)


# --- devices -----------------------------------------------------------------------------

@pytest.mark.parametrize("spec, exc", [("gpu", ValueError), ("cpu:1", ValueError),
                                       ("tpu:0", ValueError), (3, TypeError),
                                       (None, TypeError), ("", ValueError)])
def test_device_validation(spec, exc):
    with pytest.raises(exc) as info:
        qt.Device(spec)
    assert "qt.Device" in str(info.value)


def test_cuda_device_parses():
    d = qt.Device("cuda:1")
    assert str(d) == "cuda:1" and d.kind == "cuda" and d.index == 1
    assert str(qt.Device("cuda")) == "cuda:0"
    assert qt.Device("cuda") != qt.Device("cpu")


def _has_cuda() -> bool:
    return any(d.kind == "cuda" for d in qt.devices())


@pytest.mark.skipif(_has_cuda(), reason="checks the error without a GPU")
def test_to_unavailable_device_is_a_clear_error():
    t = qt.ones(3)
    assert t.to("cpu") is t
    with pytest.raises(ValueError) as info:
        t.to("cuda")
    assert "cuda" in str(info.value) and "cpu" in str(info.value)
    with pytest.raises((ValueError, NotImplementedError)) as info:
        qt.zeros(3, device="cuda")
    assert "cuda" in str(info.value)
    with pytest.raises((ValueError, NotImplementedError)) as info:
        qt.asarray(np.ones(3), device="cuda:0")
    assert "cuda" in str(info.value)


def test_mixing_devices_raises_value_error_naming_both():
    """Operands on different devices are rejected at record time (no GPU needed: the check
    runs before anything touches device memory)."""
    cpu = qt.ones(3)
    on_gpu = qt.Tensor(make_input((3,), np.dtype(np.float64), qt.Device("cuda:0"), buffer=None))
    for op in (lambda a, b: a + b, lambda a, b: qt.where(a > 0, a, b),
               lambda a, b: qt.maximum(b, a)):
        with pytest.raises(ValueError) as info:
            op(cpu, on_gpu)
        msg = str(info.value)
        assert "cpu" in msg and "cuda:0" in msg, msg


def _gather_at(x, idx):
    return x[idx]   # the first recording of this structure


def test_index_error_names_the_line_of_the_graph_that_ran():
    """Plans are shared by every graph of one structure: an index error must name the line
    that recorded the failing graph, not the one whose graph first built the plan."""
    x = qt.asarray(np.arange(3.0))
    _gather_at(x, qt.asarray(np.array([0, 1]))).numpy()            # builds the plan
    bad = x[qt.asarray(np.array([0, 10]))]   # the failing recording
    with pytest.raises(IndexError, match="index 10 is out of bounds") as info:
        bad.numpy()
    assert "the failing recording" in str(info.value) and "first recording" not in str(info.value)

    step = qt.jit(lambda x, i: x[i] * 2.0)
    step(x, qt.asarray(np.array([1, 2]))).numpy()
    with pytest.raises(IndexError, match="index 7") as info:
        qt.jit(lambda x, i: x[i] * 2.0)(x, qt.asarray(np.array([7, 0]))).numpy()   # second trace
    assert "second trace" in str(info.value)
