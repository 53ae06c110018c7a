"""Recording and dispatch fast paths: they must agree with the general paths exactly."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import cpu
from qtrace.graph.node import graph_key, graph_struct, make_input
from qtrace.tracer import elementwise as ew


def test_input_leaves_die_without_the_cycle_collector():
    """A leaf must not keep itself alive (its buffer is often megabytes)."""
    was = gc.isenabled()
    gc.disable()
    try:
        t = qt.asarray(np.ones(4))
        ref = weakref.ref(t._node)
        buf = weakref.ref(t._node.buffer)
        del t
        assert ref() is None and buf() is None
        x = qt.asarray(np.ones(4)) + 1.0
        qt.eval(x)
        leaf = weakref.ref(x._node)
        del x
        assert leaf() is None
    finally:
        if was:
            gc.enable()


def test_buffer_pool_trims_several_idle_blocks():
    pool = cpu.BufferPool(idle_cap=0)
    blocks = [pool.take(1 << 20) for _ in range(3)]
    del blocks
    assert pool.idle_bytes() == 3 << 20
    kept = pool.take(2 << 20)  # a new block: trims the idle ones (identity, never ==)
    assert pool.idle_bytes() == 0
    assert kept.nbytes > 2 << 20


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "power", "maximum",
                                  "less", "equal", "arctan2", "floor_divide", "bitwise_and",
                                  "left_shift"])
@pytest.mark.parametrize("a, b", [
    (np.int8, 3), (np.int8, 300), (np.uint8, -1), (np.int32, 2.5), (np.float32, 2),
    (np.float32, np.float64), (np.int64, np.uint64), (np.bool_, True), (np.uint16, np.int8),
    (np.float32, -0.0), (np.int16, np.float32),
])
def test_fast_path_agrees_with_the_general_path(name, a, b):
    """Same dtype, value and error (type and message) as the general path, both orders."""
    x = qt.asarray(np.arange(1, 4).astype(a))
    y = qt.asarray(np.arange(1, 4).astype(b)) if isinstance(b, type) else b
    for args in ((x, y), (y, x)):
        try:
            want = ew._apply(name, args)
        except Exception as err:  # noqa: BLE001 - compared below
            with pytest.raises(type(err)) as got:
                ew.apply2(name, *args)
            assert str(got.value) == str(err)
            continue
        got = ew.apply2(name, *args)
        assert got.dtype == want.dtype and got.weak_type == want.weak_type
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_fast_path_broadcasting_error_names_op_and_shapes():
    with pytest.raises(ValueError, match=r"qt.add.*\(3,\).*\(4,\)"):
        qt.ones(3) + qt.ones(4)


def test_eager_plans_are_found_by_structure_and_constants_still_count():
    x = qt.asarray(np.arange(5.0))
    (x * 2.0 + 1.0).numpy()
    qt.reset_stats()
    for _ in range(3):
        out = (x * 2.0 + 1.0).numpy()
    s = qt.stats()
    assert s["compiles"] == 0 and s["cache_hits_memory"] >= 3
    np.testing.assert_array_equal(out, np.arange(5.0) * 2 + 1)
    # another constant: another structure, another result
    np.testing.assert_array_equal((x * 3.0 + 1.0).numpy(), np.arange(5.0) * 3 + 1)
    np.testing.assert_array_equal((x * -0.0).numpy(), np.arange(5.0) * -0.0)
    assert np.signbit((qt.asarray(np.ones(2)) * -0.0).numpy()).all()


def test_graph_struct_equality_matches_graph_key_equality(rng):
    a, b = (qt.asarray(rng.standard_normal(3)) for _ in range(2))
    c, d = (qt.asarray(rng.standard_normal(3)) for _ in range(2))
    graphs = [((a + b)._node,), ((c + d)._node,), ((a + a)._node,), ((a * b)._node, (a + b)._node),
              ((c * d)._node, (c + d)._node), ((a * b)._node, (c + d)._node),
              ((a + b)._node, (a * b)._node)]
    for g1 in graphs:
        for g2 in graphs:
            same_struct = graph_struct(g1)[0] == graph_struct(g2)[0]
            assert same_struct == (graph_key(g1)[0] == graph_key(g2)[0]), (g1, g2)


def test_stats_count_every_thread_and_reset():
    qt.reset_stats()
    x = qt.asarray(np.ones(3))
    f = qt.jit(lambda t: t + 1.0)
    f(x)

    def work():
        for _ in range(50):
            f(x)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = qt.stats()
    assert s["kernel_launches"] == 201 and s["cache_hits_memory"] >= 200
    qt.reset_stats()
    assert qt.stats()["kernel_launches"] == 0
    f(x)
    assert qt.stats()["kernel_launches"] == 1


@pytest.mark.parametrize("view", [
    lambda p: p[1:-1, 2:], lambda p: p[:, -2], lambda p: p[3], lambda p: p.T[1:, ::2],
    lambda p: p.reshape(-1)[5:40:3], lambda p: p[::-1, 1:4].T,
], ids=["slice", "column", "row", "transpose-slice", "reshape-slice", "reversed-transpose"])
@pytest.mark.cpu_only("leaf views over NumPy views of host buffers")
def test_views_of_each_new_base_follow_the_first(view, fusion, rng):
    """A view of an evaluated array is a leaf over NumPy's view of its buffer; its
    signature is worked out for the first base of a structure and copied for the next
    (every evaluation makes a new base): same signature, the new base's memory, NumPy's
    values; a base whose buffer is not aligned for its dtype gives no leaf view."""
    from qtrace.tracer import views

    p = qt.asarray(rng.standard_normal((8, 9)))
    first = None
    for k in range(4):
        p = p * 1.5 + k     # a new base with the same structure, each time
        qt.eval(p)
        v = view(p)
        ref = view(p.numpy())
        np.testing.assert_array_equal(v.numpy(), ref)
        np.testing.assert_array_equal((v + 0.0).numpy(), ref)   # read by a kernel
        leaf = views._leaf_view(p._node, v._view[1])
        assert leaf is not None and leaf.prim == "input" and np.shares_memory(leaf.buffer, p.numpy())
        if first is None:
            first = leaf
        assert leaf.struct is first.struct and leaf.params == first.params
    raw = np.zeros(8 * 9 * 8 + 1, np.uint8)[1:].view(np.float64).reshape(8, 9)  # misaligned
    raw[...] = rng.standard_normal((8, 9))
    assert raw.ctypes.data % 8
    base = make_input(raw.shape, raw.dtype, qt.Device("cpu"), buffer=raw)  # same structure
    assert base.struct is p._node.struct
    assert views._leaf_view(base, v._view[1]) is None


def test_buffer_pool_reuses_free_blocks_without_walking_live_ones():
    """A freed block is handed out again; with many live blocks of one size a request
    looks at a bounded number of them (the search resumes where the last stopped), and a
    block freed anywhere among them is found again within a few requests."""
    pool = cpu.BufferPool()
    size = cpu.BufferPool.MIN_BYTES
    a = pool.take(size)
    ident = id(a)
    del a
    assert id(pool.take(size)) == ident          # (the caller dropped it: reused)
    live = [pool.take(size) for _ in range(300)]
    assert len({id(b) for b in live}) == 300     # none handed out twice while alive
    freed = id(live[137])
    del live[137]
    found = [pool.take(size) for _ in range(300 // cpu.BufferPool.SCAN + 2)]
    assert freed in {id(b) for b in found}
    assert len({id(b) for b in live + found}) == len(live) + len(found)


WRITES = [   # (key written, values' shape): a column, a row, a block, a strided block, a corner
    ((slice(None), -1), (9,)), ((0, slice(None)), (7,)), ((slice(2, 5), slice(1, 4)), (3, 3)),
    ((slice(1, None, 3), slice(None, None, -2)), (3, 4)), ((-1, -1), ()),
]
VIEWS = [(slice(None), -2), (1, slice(None)), (slice(1, -1), slice(1, -1)), (slice(None), 0),
         (slice(None, None, -1), slice(None, None, 2)), (slice(5, 8), slice(0, 2))]


def _apart(shape, view, write) -> bool:
    """Whether along some axis the index ranges (lowest to highest) of two basic keys
    do not meet (what a write's region is told apart by: intervals, not exact sets)."""
    def ranges(key):
        key = key if isinstance(key, tuple) else (key,)
        return [np.arange(n)[k].reshape(-1) for n, k in zip(shape, key)]
    return any(a.max() < b.min() or b.max() < a.min() for a, b in zip(ranges(view), ranges(write)))


def _overlaps(shape, view, write) -> bool:
    seen = np.zeros(shape, bool)
    seen[view] = True
    return bool(seen[write].any())


@pytest.mark.parametrize("write, vshape", WRITES, ids=["column", "row", "block", "strided", "corner"])
def test_a_write_derives_again_only_the_views_it_overlaps(write, vshape, fusion, rng):
    """Views of a pending base that lie outside a slice assignment's region (apart along
    some axis) keep their nodes (their elements did not change; ``p[:, -1] = p[:, -2]``
    does not derive its right-hand side again); the others are derived from the new base;
    every
    view then reads what NumPy's views read. (On both recorders: the Python one runs
    this file too.)"""
    shape = (9, 7)
    x = rng.standard_normal(shape)
    ref = x.copy()
    p = qt.asarray(x) * 1.0       # a pending base
    views = [p[k] for k in VIEWS]
    before = [v._node for v in views]
    value = rng.standard_normal(vshape)
    p[write] = value
    ref[write] = value
    kept = [v._node is node for v, node in zip(views, before)]   # (before evaluating)
    assert kept == [_apart(shape, k, write) for k in VIEWS]
    assert not any(k and _overlaps(shape, key, write) for k, key in zip(kept, VIEWS))
    # the views' own nodes, read before any evaluation (which derives every view again)
    read = [v + 0.0 for v in views]
    for k, v, r in zip(VIEWS, views, read):
        np.testing.assert_array_equal(r.numpy(), ref[k])
        np.testing.assert_array_equal(v.numpy(), ref[k])


def test_a_smaller_write_of_the_same_start_derives_the_views_it_uncovers(fusion):
    """A write of the region another write began at, but smaller, replaces that write
    (both from the same older value): the elements only the first covered go back to the
    older value, and a view of them must be derived again (found by review)."""
    x = np.arange(36.0).reshape(6, 6)
    p, ref = qt.asarray(x) * 1.0, x.copy()
    q, qref = p.copy(), ref.copy()    # shares p's value until written
    p[0:4, 0:4] = 1.0
    ref[0:4, 0:4] = 1.0
    v = p[2:4, 2:4]
    q[0:2, 0:2] = 2.0
    qref[0:2, 0:2] = 2.0
    p[...] = q
    ref[...] = qref
    np.testing.assert_array_equal((v + 0.0).numpy(), ref[2:4, 2:4])
    np.testing.assert_array_equal(p.numpy(), ref)
    np.testing.assert_array_equal(p.numpy(), ref)


def _walls(t):
    g = t[:, -2]
    t[:, -1] = g
    g = t[1, :]
    t[0, :] = g
    g = t[:, 1]
    t[:, 0] = g
    t[-1, :] = 0
    t[1:-1, 1:-1] = g[1:-1, None] * 0.5 + t[1:-1, 2:]
    return g


def test_boundary_copies_read_the_columns_before_each_write(fusion, rng):
    """The Neumann walls of a Jacobi sweep, whose right-hand sides stay alive across the
    next writes (``g``): each copy reads the values after the writes before it."""
    x = rng.standard_normal((6, 5))
    p, ref = qt.asarray(x) + 0.0, x.copy()
    for _ in range(3):
        g, gref = _walls(p), _walls(ref)
    np.testing.assert_array_equal(g.numpy(), gref)
    np.testing.assert_array_equal(p.numpy(), ref)


def test_the_same_key_objects_index_arrays_of_other_shapes_right(fusion, rng):
    """Basic keys are parsed once per shape and key objects (the compiled recorder keeps
    the answers by identity): the very same key — small ints, large ints beyond Python's
    shared ones, negative bounds, integers — reused on arrays of other shapes, read and
    written, gives NumPy's result for each shape."""
    big = int(rng.integers(300, 400))
    keys = [(slice(1, -1), -1), (slice(None, None, -2), slice(2, big)), (big - 301, slice(-3, None)),
            (slice(-big, big, 3), 0)]
    shapes = [(5, 6), (7, 4), (big, 3), (4, big)]
    for _ in range(2):   # a second pass finds every answer remembered
        for key in keys:
            for shape in shapes:
                x = rng.standard_normal(shape)
                ref = x.copy()
                t = qt.asarray(x) * 1.0
                try:
                    want = ref[key]
                except IndexError:
                    with pytest.raises(IndexError):
                        t[key]
                    continue
                np.testing.assert_array_equal(t[key].numpy(), want)
                ref[key] = -want
                t[key] = -t[key]
                np.testing.assert_array_equal(t.numpy(), ref)
