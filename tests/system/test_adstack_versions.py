"""The adstack's max-reducer cache and buffer versions (``qtrace.graph.buffers``).

A reverse-mode loop's stack depth is the largest trip count; for counts in tensor data
it is reduced once and cached against the identity and version of the buffers the
counts come from. These tests change the counts in every way qtrace can and cannot see —
NumPy memory shared by ``qt.asarray``, a NumPy argument of a jitted function modified in
place, a DLPack export written by NumPy, qtrace's own writes — and require the right
gradient (hand-derived float64 adjoint of B3, or JAX) with exactly one new reducer
dispatch, and zero dispatches (cache hits) on unchanged data. Counters:
``adstack_reducer_dispatches``, ``adstack_reducer_hits``, ``adstack_host_sized``,
``adstack_recorded``. Everything runs with fusion on and off (``fusion`` fixture).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_loops import assert_close, b3_jax, b3_numpy, b3_qt, grads, jax_fori, newton_qt

import qtrace as qt

SIZE = 40
COUNTERS = ("adstack_reducer_dispatches", "adstack_reducer_hits", "adstack_host_sized", "adstack_recorded")


def counted(fn, *args):
    """``fn(*args)`` and the adstack counters it moved."""
    qt.reset_stats()
    out = fn(*args)
    s = qt.stats()
    return out, {k: s[k] for k in COUNTERS}


def sized(dispatches=0, hits=0, host=0, recorded=0) -> dict:
    return dict(zip(COUNTERS, (dispatches, hits, host, recorded)))


def b3_inputs(rng):
    """Fresh B3 inputs: state, coefficients, trip counts in [0, 8]."""
    return rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE), rng.integers(0, 9, SIZE)


def deeper(rng, n: np.ndarray) -> np.ndarray:
    """New random counts whose maximum exceeds ``n``'s: a stale depth would overflow."""
    new = rng.integers(0, 9, n.shape)
    new[rng.integers(n.size)] = n.max() + rng.integers(3, 10)
    return new


def check_b3(got, x, c, n, what):
    _, hx, hc = b3_numpy(x, c, n)
    assert_close(got[0], hx, what=f"d/dx {what}")
    assert_close(got[1], hc, what=f"d/dc {what}")


def b3_grads(x, c, qn):
    return grads(b3_qt(qn), (qt.asarray(x), qt.asarray(c)), (0, 1))


# NumPy memory shared zero-copy with a CPU tensor, written behind qtrace's back (a GPU
# tensor made from a NumPy array is a copy: tests/gpu/test_cuda.py has the GPU's cases)
HOST_SHARED = pytest.mark.cpu_only("host memory shared zero-copy with a tensor: on a GPU it is copied")


# --- unchanged data --------------------------------------------------------------------
def test_unchanged_owned_counts_hit_the_cache(fusion, rng):
    """Counts in memory qtrace owns: one dispatch, then hits only."""
    x, c, n = b3_inputs(rng)
    qn = qt.asarray(n, copy=True)
    got, s = counted(b3_grads, x, c, qn)
    check_b3(got, x, c, n, "first")
    assert s == sized(dispatches=1), s
    for _ in range(5):
        got, s = counted(b3_grads, x, c, qn)
        assert s == sized(hits=1), s
    check_b3(got, x, c, n, "cached")


@HOST_SHARED
def test_borrowed_counts_are_reduced_on_every_launch(fusion, rng):
    """``qt.asarray`` shares the NumPy array, whose owner may write it at any time: the
    documented choice is to trust no cached depth for it (never a copy on entry)."""
    x, c, n = b3_inputs(rng)
    qn = qt.asarray(n)
    assert np.shares_memory(qn.numpy(), n)
    for _ in range(3):
        got, s = counted(b3_grads, x, c, qn)
        assert s == sized(dispatches=1), s
    check_b3(got, x, c, n, "borrowed")


# --- writes qtrace does not see --------------------------------------------------------
@HOST_SHARED
def test_numpy_array_shared_by_asarray_written_in_place(fusion, rng):
    x, c, n = b3_inputs(rng)
    qn = qt.asarray(n)
    check_b3(b3_grads(x, c, qn), x, c, n, "before the write")
    n[...] = deeper(rng, n)
    got, s = counted(b3_grads, x, c, qn)
    assert s == sized(dispatches=1), s
    check_b3(got, x, c, n, "after the write")


@HOST_SHARED
@pytest.mark.parametrize("arg", ["numpy", "tensor"])
def test_jit_argument_modified_in_place(arg, fusion, rng):
    """A jitted gradient called on a NumPy array (or a tensor sharing one), which the
    caller then modifies in place between calls."""
    x, c, n = b3_inputs(rng)

    def loss(x, c, n):
        return qt.sum(qt.fori_loop(0, n, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
    step = qt.jit(qt.grad(loss, argnums=(0, 1)))
    counts = n if arg == "numpy" else qt.asarray(n)

    def run():
        return [g.numpy() for g in step(x, c, counts)]
    check_b3(run(), x, c, n, "first call")
    for _ in range(2):
        n[...] = deeper(rng, n)
        got, s = counted(run)
        assert s == sized(dispatches=1), s
        check_b3(got, x, c, n, "after the write")


@HOST_SHARED
def test_dlpack_export_written_by_numpy(fusion, rng):
    """``np.from_dlpack(t)`` is a writable view of ``t``'s memory: volatile while it lives,
    a new version once it is gone (so the depth cached before it is not used again)."""
    x, c, n = b3_inputs(rng)
    qn = qt.asarray(n, copy=True)
    b3_grads(x, c, qn)
    assert counted(b3_grads, x, c, qn)[1] == sized(hits=1)
    exported = np.from_dlpack(qn)
    assert exported.flags.writeable and np.shares_memory(exported, qn.numpy())
    new = deeper(rng, n)
    exported[...] = new
    got, s = counted(b3_grads, x, c, qn)
    assert s == sized(dispatches=1), s
    check_b3(got, x, c, new, "written through the export")
    newer = deeper(rng, new)
    exported[...] = newer  # still exported: still volatile
    got, s = counted(b3_grads, x, c, qn)
    assert s == sized(dispatches=1), s
    check_b3(got, x, c, newer, "written again")
    view = exported[1:]
    del exported
    assert counted(b3_grads, x, c, qn)[1] == sized(dispatches=1)  # a view keeps it exported
    del view
    got, s = counted(b3_grads, x, c, qn)  # the export ended: a new version, reduced once
    assert s == sized(dispatches=1), s
    got, s = counted(b3_grads, x, c, qn)
    assert s == sized(hits=1), s
    check_b3(got, x, c, newer, "after the export")


@HOST_SHARED
@pytest.mark.parametrize("read", ["numpy", "__array__"])
def test_numpy_views_cannot_be_written(read, fusion, rng):
    """``t.numpy()`` / ``np.asarray(t)`` view the tensor's memory read-only, and the flag
    cannot be turned back on: no write behind qtrace's back, so the cache stays valid."""
    x, c, n = b3_inputs(rng)
    qn = qt.asarray(n, copy=True)
    b3_grads(x, c, qn)
    arr = qn.numpy() if read == "numpy" else np.asarray(qn)
    assert np.shares_memory(arr, qn.numpy()) and not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 30
    with pytest.raises(ValueError):
        arr.flags.writeable = True
    got, s = counted(b3_grads, x, c, qn)
    assert s == sized(hits=1), s
    check_b3(got, x, c, n, "after reading")


# --- qtrace's own writes ---------------------------------------------------------------
# each takes the counts tensor and new values, and returns the tensor holding them
def _setitem(qn, new):
    qn[...] = qt.asarray(new, copy=True)  # a NumPy right-hand side would be borrowed memory
    return qn


def _iadd(qn, new):
    qn += qt.asarray(new - qn.numpy(), copy=True)
    return qn


def _at_set(qn, new):
    return qn.at[qt.arange(new.size)].set(qt.asarray(new, copy=True))


def _jit_writes(qn, new):
    @qt.jit
    def write(counts, values):
        counts[:] = values
    write(qn, qt.asarray(new, copy=True))
    return qn


def _numpy_out(qn, new):
    np.add(qn, qt.asarray(new - qn.numpy(), copy=True), out=qn)
    return qn


@pytest.mark.parametrize("write", [_setitem, _iadd, _at_set, _jit_writes, _numpy_out],
                         ids=["setitem", "iadd", "at_set", "jit_argument", "numpy_out"])
def test_qtraces_own_writes(write, fusion, rng):
    """In-place operators, slice assignment, ``.at[]``, writes into ``qt.jit`` arguments and
    ``out=`` give the counts a new buffer (a new identity): reduced once, then cached."""
    x, c, n = b3_inputs(rng)
    qn = qt.asarray(n, copy=True)
    b3_grads(x, c, qn)
    new = deeper(rng, n)
    qn = write(qn, new)
    qt.eval(qn)
    got, s = counted(b3_grads, x, c, qn)
    assert s == sized(dispatches=1), s
    check_b3(got, x, c, new, "after the write")
    assert counted(b3_grads, x, c, qn)[1] == sized(hits=1)


@HOST_SHARED
def test_jit_writing_a_numpy_argument_bumps_its_version(fusion, rng):
    """qtrace writing into memory it does not own (a NumPy argument of ``qt.jit``, updated
    in place) records a new version; that array is borrowed anyway, and stays correct."""
    x, c, n = b3_inputs(rng)
    qn = qt.asarray(n)
    b3_grads(x, c, qn)
    new = deeper(rng, n)

    @qt.jit
    def write(counts, values):
        counts[:] = values
    write(n, qt.asarray(new, copy=True))
    np.testing.assert_array_equal(n, new)
    got, s = counted(b3_grads, x, c, qn)
    assert s == sized(dispatches=1), s
    check_b3(got, x, c, new, "after the jitted write")


# --- scalars, derived and recorded counts ----------------------------------------------
def test_weak_scalar_in_the_trip_count_hits_the_cache(fusion, rng):
    """``fori_loop(0, n + k, ...)`` with ``k`` a Python int of a jitted call: the depth is
    ``max(n) + k``, ``max(n)`` cached against ``n``'s version and ``k`` read on the host,
    so neither a repeated nor a new ``k`` dispatches the reducer."""
    x, c, n = b3_inputs(rng)

    def loss(x, c, n, k):
        return qt.sum(qt.fori_loop(0, n + k, lambda i, v: qt.sin(v) * c + 0.5 * v, x))
    step = qt.jit(qt.grad(loss, argnums=(0, 1)))
    qn = qt.asarray(n, copy=True)

    def run(k):
        return [g.numpy() for g in step(x, c, qn, k)]
    for k, want in ((2, sized(dispatches=1)), (2, sized(hits=1)), (2, sized(hits=1)),
                    (5, sized(hits=1)), (5, sized(hits=1)), (2, sized(hits=1)), (-9, sized(hits=1))):
        got, s = counted(run, k)
        assert s == want, (k, s)
        check_b3(got, x, c, np.maximum(n + k, 0), f"k={k}")


@HOST_SHARED
@pytest.mark.parametrize("kind", ["where", "difference"])
def test_derived_counts(kind, fusion, rng):
    """Counts computed from data inside the differentiated function (``where(mask, K, 0)``,
    ``hi - lo``) are cached against the leaves they come from; a write into one of them
    (NumPy memory shared by ``qt.asarray``) is seen."""
    x, c = rng.uniform(-2, 2, SIZE), rng.uniform(0.5, 1.5, SIZE)
    k, lo, mask = rng.integers(0, 9, SIZE), rng.integers(0, 5, SIZE), rng.random(SIZE) < 0.5

    def bounds(xp, k, lo, mask):
        return (0, xp.where(mask, k, 0)) if kind == "where" else (lo, lo + k)

    def loss(xp, leaves, steps=None):
        def f(x, c):
            def body(i, s):
                return (xp.sin(s[0]) * c + 0.5 * s[0],)
            if xp is qt:
                (v,) = qt.fori_loop(*bounds(qt, *leaves), body, (x,))
            else:
                (v,) = jax_fori(*bounds(jnp, *leaves), body, (x,), steps)
            return xp.sum(v)
        return f

    def check(got, what):
        want = jax.grad(loss(jnp, (k, lo, mask), int(k.max())), argnums=(0, 1))(x, c)
        assert_close(got[0], np.asarray(want[0]), what=f"d/dx vs JAX, {what}")
        assert_close(got[1], np.asarray(want[1]), what=f"d/dc vs JAX, {what}")

    owned = tuple(qt.asarray(a, copy=True) for a in (k, lo, mask))

    def run(leaves):
        return grads(loss(qt, leaves), (qt.asarray(x), qt.asarray(c)), (0, 1))
    got, s = counted(run, owned)
    assert s == sized(dispatches=1), s
    for _ in range(3):
        got, s = counted(run, owned)
        assert s == sized(hits=1), s
    check(got, "owned")
    shared = (qt.asarray(k), lo, mask)
    run(shared)
    k[...] = deeper(rng, k)
    got, s = counted(run, shared)
    assert s == sized(dispatches=1), s
    check(got, "after a write into the shared counts")


def test_recorded_counts_are_counted_apart(fusion, rng):
    """``while_loop``: the reverse is sized from the counts its forward recorded."""
    a = rng.uniform(0.5, 50.0, SIZE)
    for _ in range(2):
        (g,), s = counted(grads, lambda a: qt.sum(newton_qt(a)), (qt.asarray(a),), (0,))
        assert s["adstack_recorded"] >= 1 and s["adstack_reducer_dispatches"] == 0, s
        assert s["adstack_reducer_hits"] == 0, s
        assert_close(g, 0.5 / np.sqrt(a), rtol=1e-8, what="d sqrt(a)/da")


@HOST_SHARED
def test_jax_reference_after_a_write(fusion, rng):
    """The same write-then-gradient through ``qt.asarray``'s shared memory, against JAX."""
    x, c, n = b3_inputs(rng)
    qn = qt.asarray(n)
    b3_grads(x, c, qn)
    n[...] = deeper(rng, n)
    got, s = counted(b3_grads, x, c, qn)
    assert s == sized(dispatches=1), s
    for g, w, name in zip(got, b3_jax(x, c, n), ("x", "c")):
        assert_close(g, w, rtol=1e-9, what=f"d/d{name} vs JAX")
