"""Random compositions of elementwise ops: fused and unfused agree bitwise, and match NumPy.

Each test draws a random program of 10-20 elementwise steps over 4 input arrays of one
shape (non-contiguous NumPy views, and qtrace-side views: a transpose, a flip). Every
step reads two values from the pool (inputs and earlier results) and appends its
result, so the graph is a DAG with fan-out, not just a chain. Two of the results (the
last one and one drawn from the middle) are outputs, evaluated together with ``qt.eval``.
Odd trials use a shape large enough for vectorized, parallel kernels.

The program is evaluated with ``qt.config.fusion = True`` and ``False``: the results must
be bitwise identical (fusion may not change rounding: no contraction to FMA, no
reassociation). Both must match NumPy: exactly for int32; for floats within a tolerance
that covers a few ulp per step (the float steps are chosen to keep values in [-2, 2]
and to have Lipschitz constants <= ~1.5, so errors do not blow up along the chain).
"""

from __future__ import annotations

import numpy as np
import pytest
from op_table import layout

import qtrace as qt

# name -> f(xp, a, b): values in [-2, 2] map into [-2, 2]
FLOAT_STEPS = {
    "add": lambda xp, a, b: (a + b) * 0.5,
    "sub": lambda xp, a, b: xp.subtract(a, b) * 0.5,
    "mul": lambda xp, a, b: a * b * 0.5,
    "max": lambda xp, a, b: xp.maximum(a, b),
    "min": lambda xp, a, b: xp.minimum(a, b),
    "where": lambda xp, a, b: xp.where(a < b, a, -b),
    "sin": lambda xp, a, b: xp.sin(a) * 1.5,
    "cos": lambda xp, a, b: xp.cos(a + b),
    "tanh": lambda xp, a, b: xp.tanh(a - b) * 2,
    "arctan": lambda xp, a, b: xp.arctan(a),
    "abs_neg": lambda xp, a, b: -xp.abs(a),
    "gauss": lambda xp, a, b: xp.exp(-(a * a)),
    "hypot": lambda xp, a, b: xp.hypot(a, b) * 0.5,
    "softplus": lambda xp, a, b: xp.log1p(xp.exp(a)) - 1,
    "sqrt1": lambda xp, a, b: xp.sqrt(a * a + 1) - 1,
    "clip": lambda xp, a, b: xp.clip(a * 2, -1.5, 1.5),
    "square": lambda xp, a, b: xp.square(a) * 0.5 - 1,
    "expm1": lambda xp, a, b: xp.expm1(a * 0.25),
    "div": lambda xp, a, b: a / (xp.abs(b) + 1),
    "pow": lambda xp, a, b: (xp.abs(a) * 0.5 + 0.5) ** 1.5,
}
INT_STEPS = {
    "add": lambda xp, a, b: a + b,
    "sub": lambda xp, a, b: a - b,
    "mul": lambda xp, a, b: a * b,
    "max": lambda xp, a, b: xp.maximum(a, b),
    "min": lambda xp, a, b: xp.minimum(a, b),
    "where": lambda xp, a, b: xp.where(a < b, a, b * 3),
    "and": lambda xp, a, b: a & b,
    "or": lambda xp, a, b: a | b,
    "xor": lambda xp, a, b: xp.bitwise_xor(a, b),
    "shl": lambda xp, a, b: a << 3,
    "shr": lambda xp, a, b: a >> 2,
    "floordiv": lambda xp, a, b: a // 7,
    "mod": lambda xp, a, b: xp.remainder(a, -5),
    "neg_abs": lambda xp, a, b: -xp.abs(a),
    "invert": lambda xp, a, b: ~a,
    "square": lambda xp, a, b: xp.square(a),
    "sign": lambda xp, a, b: xp.sign(a) * b,
}
TOL = {"float64": (1e-12, 1e-12), "float32": (2e-5, 2e-5)}
SHAPES = [(6, 7), (131, 257)]  # small; large enough for vectorized, parallel kernels
LAYOUTS = ("c", "T", "neg", "step")


def random_program(rng, steps: dict, n_inputs: int = 4):
    names = list(steps)
    prog = []
    for k in range(int(rng.integers(10, 21))):
        pool = n_inputs + k
        # prefer recent values so the program is deep, not just wide
        a = int(max(0, pool - 1 - rng.geometric(0.4) + 1))
        b = int(rng.integers(0, pool))
        prog.append((names[int(rng.integers(len(names)))], a, b))
    mid = int(rng.integers(n_inputs, n_inputs + len(prog)))
    return prog, (mid, n_inputs + len(prog) - 1)


def run_program(xp, steps, prog, outputs, inputs):
    pool = list(inputs)
    with np.errstate(all="ignore"):
        for name, a, b in prog:
            pool.append(steps[name](xp, pool[a], pool[b]))
    return [pool[i] for i in outputs]


def _inputs(rng, dtype, shape):
    out = []
    for i in range(4):
        if dtype == "int32":
            a = rng.integers(-100, 100, shape).astype(np.int32)
        else:
            a = rng.uniform(-2, 2, shape).astype(dtype)
        out.append(layout(a, LAYOUTS[i]))
    return out


def _evaluate(mode: bool, steps, prog, outputs, arrays):
    qt.config.fusion = mode
    xs = [qt.asarray(arrays[0]), qt.asarray(arrays[1]),
          # the same values through qtrace views: a transpose and a negative-step slice
          qt.asarray(np.ascontiguousarray(arrays[2].T)).T,
          qt.flip(qt.asarray(np.ascontiguousarray(np.flip(arrays[3]))))]
    outs = run_program(qt, steps, prog, outputs, xs)
    qt.reset_stats()
    qt.eval(*outs)
    if mode:  # the comparison is only meaningful if fusion happened
        assert qt.stats()["tasks_fused"] > 0, "fusion on, but no task was fused"
    return [o.numpy() for o in outs]


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32"])
@pytest.mark.parametrize("trial", range(4))
def test_random_chain_fused_equals_unfused_equals_numpy(dtype, trial, fusion, rng):
    steps = INT_STEPS if dtype == "int32" else FLOAT_STEPS
    prog, outputs = random_program(rng, steps)
    arrays = _inputs(rng, dtype, SHAPES[trial % 2])
    listing = "\n".join(f"  v{4 + k} = {name}(v{a}, v{b})" for k, (name, a, b) in enumerate(prog))
    ctx = f"program (v0..v3 inputs, outputs v{outputs[0]}, v{outputs[1]}):\n{listing}"

    # the fixture's mode first, then the other one
    first = _evaluate(fusion, steps, prog, outputs, arrays)
    second = _evaluate(not fusion, steps, prog, outputs, arrays)
    want = run_program(np, steps, prog, outputs, arrays)
    for k, (g1, g2, w) in enumerate(zip(first, second, want)):
        w = np.asarray(w)
        assert g1.dtype == g2.dtype == w.dtype, f"output {k}: dtypes {g1.dtype} {g2.dtype} {w.dtype}\n{ctx}"
        assert g1.shape == g2.shape == w.shape, f"output {k}: shapes differ\n{ctx}"
        diff = g1.view(np.uint8).reshape(g1.shape + (-1,)) != g2.view(np.uint8).reshape(g2.shape + (-1,))
        bad = diff.any(axis=-1)
        assert not bad.any(), (
            f"output {k}: fused and unfused differ at {np.argwhere(bad)[:5].tolist()}: "
            f"fusion={fusion}: {g1[bad][:5]!r}, fusion={not fusion}: {g2[bad][:5]!r}\n{ctx}")
        if dtype == "int32":
            np.testing.assert_array_equal(g1, w, err_msg=ctx)
        else:
            rtol, atol = TOL[dtype]
            np.testing.assert_allclose(g1, w, rtol=rtol, atol=atol, err_msg=ctx)
