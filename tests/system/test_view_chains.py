"""Chains of views (transpose, reshape, slices with negative steps, flips, broadcasts) read
the right elements, whatever their composition: random chains checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qtrace as qt


def _factorizations(n: int) -> list:
    out = [(n,)]
    for a in range(2, n):
        if n % a == 0:
            out.append((a, n // a))
            for b in range(2, n // a):
                if (n // a) % b == 0:
                    out.append((a, b, n // a // b))
    return out


@st.composite
def view_chains(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    steps = []
    cur = shape
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["transpose", "reshape", "slice", "flip", "broadcast"]))
        if kind == "transpose":
            perm = tuple(draw(st.permutations(range(len(cur)))))
            steps.append(("transpose", perm))
            cur = tuple(cur[p] for p in perm)
        elif kind == "reshape":
            size = int(np.prod(cur))
            new = draw(st.sampled_from(_factorizations(size)))
            steps.append(("reshape", new))
            cur = new
        elif kind == "slice":
            key = []
            for d in cur:
                step = draw(st.sampled_from([1, 2, -1, -2, 3]))
                start = draw(st.integers(0, d - 1))
                key.append(slice(start, None, step) if step > 0 else slice(start, None, step))
            steps.append(("slice", tuple(key)))
            cur = np.empty(cur)[tuple(key)].shape
        elif kind == "flip":
            axis = draw(st.integers(0, len(cur) - 1))
            steps.append(("flip", axis))
        else:
            lead = draw(st.integers(1, 3))
            steps.append(("broadcast", (lead,) + cur))
            cur = (lead,) + cur
        if 0 in cur:
            break
    return shape, steps


def _apply(x, steps, lib):
    for kind, arg in steps:
        if kind == "transpose":
            x = lib.transpose(x, arg)
        elif kind == "reshape":
            x = lib.reshape(x, arg)
        elif kind == "slice":
            x = x[arg]
        elif kind == "flip":
            x = lib.flip(x, arg)
        else:
            x = lib.broadcast_to(x, arg)
    return x


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=view_chains(), layout=st.sampled_from(["contiguous", "transposed", "strided"]))
def test_random_view_chains_match_numpy(chain, layout):
    shape, steps = chain
    rng = np.random.default_rng(0)
    size = int(np.prod(shape))
    # distinct values so that any wrong element shows; the leaf may itself be a strided view
    if layout == "contiguous":
        x = rng.permutation(size).astype(np.float64).reshape(shape)
    elif layout == "transposed":
        x = rng.permutation(size).astype(np.float64).reshape(shape[::-1]).T
    else:
        big = rng.permutation(size * 2).astype(np.float64).reshape((2,) + shape)
        x = big[1]
    ref = _apply(x, steps, np)
    t = _apply(qt.asarray(x), steps, qt)
    assert t.shape == ref.shape
    np.testing.assert_array_equal((t + 0.0).numpy(), ref)  # read through the views in a kernel
    np.testing.assert_array_equal(t.numpy(), ref)          # the view itself as an output


@pytest.mark.parametrize("case", ["T-reshape-reverse", "T-ravel-flip", "T-reshape-step2"])
def test_reversed_reshape_of_a_transpose(case, fusion):
    """Minimal cases where a flat index is reversed after a reshape of a transposed buffer."""
    a = np.arange(8.0).reshape(4, 2)
    t = qt.asarray(a).T
    if case == "T-reshape-reverse":
        got, ref = t.reshape(8)[::-1], a.T.reshape(8)[::-1]
    elif case == "T-ravel-flip":
        got, ref = qt.flip(t.ravel(), 0), np.flip(a.T.ravel(), 0)
    else:
        got, ref = t.reshape(8)[::-2], a.T.reshape(8)[::-2]
    np.testing.assert_array_equal((got * 1.0).numpy(), ref)


def test_reversed_reshape_of_a_transposed_numpy_buffer(fusion):
    a = np.arange(12.0).reshape(4, 3)
    t = qt.asarray(a.T)                  # zero-copy, non-contiguous leaf
    np.testing.assert_array_equal((t.reshape(12)[::-1] + 0).numpy(), a.T.reshape(12)[::-1])
    np.testing.assert_array_equal((t.reshape(2, 6)[:, ::-1] + 0).numpy(),
                                  a.T.reshape(2, 6)[:, ::-1])
