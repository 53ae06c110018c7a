"""``x[key] = value`` where the key's integer arrays name an element more than once: the
last value wins, as in NumPy (qtrace writes each element once; a scatter's repeated writes
race on a GPU and across CPU workers). ``.at[key].set`` keeps JAX's contract (which write
wins is unspecified) and is not tested for it.

Differential against NumPy, bit for bit: random shapes, keys of every layout (a single
array, arrays on adjacent and separated axes, with slices, integers, ``None`` and
``...``; negative indices naming the same element as positive ones), values given as a
tensor, a NumPy array, a broadcast row or a number.
"""

from __future__ import annotations

import numpy as np
import pytest

import qtrace as qt


def _repeats(rng, size: int, n: int) -> np.ndarray:
    """``n`` indices into an axis of ``size`` drawn from a few values, some negative."""
    pool = rng.choice(size, min(size, 3), replace=False)
    idx = rng.choice(pool, n)
    flip = rng.random(n) < 0.3
    return np.where(flip, idx - size, idx)


KEYS = {   # name -> (x's shape, key from (rng, idx maker), value shape)
    "one_array": ((12,), lambda r, a: (a(12, 9),), (9,)),
    "list": ((12,), lambda r, a: list(a(12, 9)), (9,)),
    "rows": ((12, 5), lambda r, a: (a(12, 9),), (9, 5)),
    "row_broadcast": ((12, 5), lambda r, a: (a(12, 9),), (5,)),
    "columns": ((5, 12), lambda r, a: (slice(None), a(12, 9)), (5, 9)),
    "ellipsis": ((3, 5, 12), lambda r, a: (Ellipsis, a(12, 9)), (3, 5, 9)),
    "pair": ((8, 8), lambda r, a: (a(8, 9), a(8, 9)), (9,)),
    "outer_pair": ((8, 8), lambda r, a: (a(8, 6)[:, None], a(8, 3)), (6, 3)),
    "separated": ((8, 3, 8), lambda r, a: (a(8, 7), slice(None), a(8, 7)), (7, 3)),
    "separated_by_int": ((8, 3, 8), lambda r, a: (a(8, 7), 1, a(8, 7)), (7,)),
    "int_and_array": ((3, 12), lambda r, a: (2, a(12, 9)), (9,)),
    "new_axis": ((3, 12, 2), lambda r, a: (None, 1, a(12, 9)), (1, 9, 2)),
    "stepped_slice": ((12, 6), lambda r, a: (a(12, 9), slice(None, None, 2)), (9, 3)),
    "empty_ellipsis_after": ((12,), lambda r, a: (a(12, 9), Ellipsis), (9,)),
    "empty_ellipsis_before": ((12,), lambda r, a: (Ellipsis, a(12, 9)), (9,)),
    "empty_ellipsis_between": ((3, 12), lambda r, a: (a(3, 9), Ellipsis, a(12, 9)), (9,)),
    "leading_unit_axes": ((12, 5), lambda r, a: (a(12, 9),), (1, 1, 9, 5)),
}


@pytest.mark.parametrize("layout", sorted(KEYS))
@pytest.mark.parametrize("given", ["tensor", "numpy", "number"])
def test_the_last_write_wins(layout, given, fusion, rng):
    shape, make_key, vshape = KEYS[layout]
    x = rng.standard_normal(shape)
    key = make_key(rng, lambda size, n: _repeats(rng, size, n))
    value = 2.5 if given == "number" else rng.standard_normal(vshape)
    want = x.copy()
    want[key] = value
    t = qt.asarray(x)
    t[key] = qt.asarray(value) if given == "tensor" else value
    np.testing.assert_array_equal(t.numpy(), want)


def test_many_repeats_of_a_few_elements(fusion, rng):
    """A large scatter (split across CPU workers, many GPU threads) onto few elements."""
    x = rng.standard_normal(1000)
    idx = rng.integers(0, 40, 300_000)
    value = rng.standard_normal(idx.size)
    want = x.copy()
    want[idx] = value
    t = qt.asarray(x)
    t[idx] = qt.asarray(value)
    np.testing.assert_array_equal(t.numpy(), want)


def test_inside_jit_and_its_gradient(fusion, rng):
    """Under ``qt.jit`` (the key a constant of the step) and under ``qt.grad``: the value
    rows that lost to a later write get no gradient."""
    idx = np.array([4, 1, 4, 0, 1, 4])
    x, v = rng.standard_normal(6), rng.standard_normal(6)

    def step(x, v):
        y = x * 1.0
        y[idx] = v * 2.0
        return y

    want = x.copy()
    want[idx] = v * 2.0
    np.testing.assert_array_equal(qt.jit(step)(qt.asarray(x), qt.asarray(v)).numpy(), want)
    w = rng.standard_normal(6)
    g = qt.grad(lambda v: qt.sum(step(qt.asarray(x), v) * w))(qt.asarray(v))
    # the last occurrences of 4, 1, 0 are positions 5, 4, 3
    np.testing.assert_allclose(g.numpy(), [0, 0, 0, 2 * w[0], 2 * w[1], 2 * w[4]], rtol=1e-15)


def test_leading_unit_axes_of_the_value_go_as_numpy(fusion, rng):
    """A value with more axes than the indexed shape, the extra ones of length 1, is
    written as NumPy writes it (with or without repeated indices)."""
    for idx in ([0, 3], [3, 0, 3]):
        x = rng.standard_normal((5, 4))
        value = rng.standard_normal((1, 1, len(idx), 4))
        want = x.copy()
        want[idx] = value
        t = qt.asarray(x)
        t[idx] = qt.asarray(value)
        np.testing.assert_array_equal(t.numpy(), want)
