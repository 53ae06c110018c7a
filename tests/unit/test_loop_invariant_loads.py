"""Per-element loops load what reads the same element on every trip once, before the loop
(``KernelEmitter.loads_before_loop``), checked in the PTX that LLVM emits here (no GPU
needed): B3's ``v = sin(v) * c + 0.5 * v`` reads ``c[i]`` in its element's loop, where
LLVM left it (libdevice's reduction of large arguments is inline assembly that may write
memory); the forward kernel and the adjoint's replay and reverse loops now read it
outside them. Values and gradients, with a table gathered at the trip counter too (a
load that stays in the loop), are compared with NumPy in float64 and central differences
on the CPU (zero-trip elements included: their hoisted load reads their own, in-bounds
element). Fusion on and off.
"""

from __future__ import annotations

import numpy as np
import pytest
from ptx_probe import loop_spans, ptx

import qtrace as qt
from qtrace.graph.plan import build_plan


def _loop_depths(text: str) -> list[int]:
    """For each ``ld.global`` of non-constant memory in PTX ``text``: how many loops
    enclose it."""
    spans = loop_spans(text)
    return [sum(a <= i <= b for a, b in spans) for i, line in enumerate(text.splitlines())
            if "ld.global" in line and "__cudart" not in line and ".nc" not in line]


def _ptx(nodes, fusion) -> list[str]:
    return [ptx(task) for task in build_plan(nodes, fusion).tasks]


def _b3(m, v, c):
    return m.sin(v) * c + 0.5 * v


def test_an_elements_own_inputs_are_loaded_outside_its_loop(fusion, rng):
    n = 1000
    x = qt.asarray(rng.uniform(-1, 1, n).astype(np.float32))
    c = qt.asarray(rng.uniform(0.5, 1.5, n).astype(np.float32))
    k = qt.asarray(rng.integers(0, 9, n))
    fwd = qt.fori_loop(0, k, lambda i, v: _b3(qt, v, c), x)
    (text,) = [t for t in _ptx((fwd._node,), fusion) if "sin" in t or "fma" in t]
    # (x, k, c read once per element: inside the grid-stride loop only)
    assert _loop_depths(text) and max(_loop_depths(text)) == 1, _loop_depths(text)
    gx, gc = qt.grad(lambda x, c: qt.sum(qt.fori_loop(0, k, lambda i, v: _b3(qt, v, c), x)),
                     argnums=(0, 1))(x, c)
    adjoint = [t for t in _ptx((gx._node, gc._node), fusion) if "st.global" in t and "fma" in t]
    assert adjoint
    for text in adjoint:
        # the loads in the reverse loop (2 deep) are the stack's pops of sin(v) and cos(v),
        # which the replay pushed: 2, or 4 where LLVM unrolled that small loop by two
        depths = _loop_depths(text)
        assert sum(d >= 2 for d in depths) in (2, 4), depths


@pytest.mark.parametrize("kind", ["fori", "while"])
def test_hoisted_loads_give_numpys_values_and_gradients(kind, fusion, rng):
    """Forward and gradient of a loop reading its element's ``c`` (and a table at the
    counter) vs NumPy in float64, with zero-trip elements."""
    n = 777
    x0, c0 = rng.uniform(-1, 1, n), rng.uniform(0.5, 1.5, n)
    k0, t0 = rng.integers(0, 7, n), rng.random(8)
    x, c, k, table = (qt.asarray(a) for a in (x0, c0, k0, t0))

    def run(m, x, c, k, table):
        if m is np:
            v = x.copy()
            for i in range(int(k.max())):
                v = np.where(i < k, _b3(np, v, c) + 0.01 * table[i], v)
            return v
        if kind == "fori":
            return qt.fori_loop(0, k, lambda i, v: _b3(qt, v, c) + 0.01 * table[i], x)
        state = qt.while_loop(lambda s: s[0] < k,
                              lambda s: (s[0] + 1, _b3(qt, s[1], c) + 0.01 * table[s[0]]),
                              (qt.zeros_like(k), x))
        return state[1]
    np.testing.assert_allclose(run(qt, x, c, k, table).numpy(), run(np, x0, c0, k0, t0), rtol=1e-12)
    gx, gc = qt.grad(lambda x, c: qt.sum(run(qt, x, c, k, table)), argnums=(0, 1))(x, c)
    eps = 1e-6
    for got, arg in ((gx, 0), (gc, 1)):
        pick = rng.integers(0, n, 5)
        for j in pick:
            args = [x0.copy(), c0.copy()]
            args[arg][j] += eps
            hi = run(np, args[0], args[1], k0, t0)[j]
            args[arg][j] -= 2 * eps
            lo = run(np, args[0], args[1], k0, t0)[j]
            np.testing.assert_allclose(got.numpy()[j], (hi - lo) / (2 * eps), rtol=1e-5, atol=1e-8)
