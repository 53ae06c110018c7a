"""Transcendentals outlined once per module (``qtrace.kernels.outline``).

Chains of calls (B4's step) become calls of one internal function per math function and
type, which the loop vectorizer replaces by its vector variant; independent calls (B1's
chain) stay inline. Outlined and inline kernels give the same bits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re

import numpy as np
import pytest

import qtrace as qt
from qtrace.devices import runtime
from qtrace.graph.plan import build_plan
from qtrace.kernels import codegen, llvm_cpu, outline
from qtrace.kernels.target import target_for


def _step(m, x, y, rounds=4):
    """B4's step: each call feeds the next (sin, cos: 2 calls each, tanh: 4)."""
    for i in range(rounds):
        c = 0.1 + 0.01 * i
        x = x + c * (m.cos(y) if i % 2 else m.sin(y))
        y = y * 0.99 - m.tanh(x) * c
    return x * y


def _misc(m, x, y):
    """A chain through unary and binary functions, each called twice."""
    a = m.exp(m.tanh(x) * 0.5)
    b = m.arctan2(a, y)
    c = m.power(m.abs(b) + 0.5, a)
    d = m.arctan2(m.exp(c * 0.01), m.tanh(b + y))
    return m.power(m.abs(d) + 1.0, b * 0.01)


def _b1(m, x, y):
    return m.sin(x) * m.cos(y) + m.exp(-x * x) * 0.5 + m.sqrt(m.abs(y)) - m.tanh(x * y)


def _module(out: qt.Tensor):
    (task,) = build_plan((out._node,), True).tasks
    module = llvm_cpu.new_module("qtrace_test")
    codegen.lower_task(task, module, task.symbol, True)
    return module, task


def _defines(text: str, name: str) -> int:
    return len(re.findall(rf'^define internal [^@]+ @"?{name}"?\(', text, re.M))


def test_chained_calls_define_each_function_once_and_call_it():
    x = qt.asarray(np.linspace(-1, 1, 4096, dtype=np.float32))
    module, task = _module(_step(qt, x, x * 0.5))
    assert outline.chained(task)
    text = str(module)
    # the fast pass calls each at every site; tanh again in the exact re-run
    for name, calls in (("sin_fast", 2), ("cos_fast", 2), ("tanh", 8)):
        fn = f"qt_math_{name}_f32"
        assert _defines(text, fn) == 1, fn
        assert len(re.findall(rf'call float @"?{fn}"?\(', text)) == calls, fn
    # the exact large-argument fallback: the C library, once per site, in the re-run only
    assert len(re.findall(r"call float @\"?sinf\"?\(", text)) == 2
    assert "fpext" not in text        # no double-precision (Payne-Hanek) reduction inline

    opt = str(llvm_cpu.optimize(module))
    lanes = llvm_cpu.vector_bits() // 32
    for name in ("sin_fast", "cos_fast", "tanh"):
        fn = f"qt_math_{name}_f32"
        assert _defines(opt, fn) == 1 and _defines(opt, f"{fn}_v{lanes}") == 1, fn
        assert re.search(rf"call <{lanes} x float> @{fn}_v{lanes}\(", opt), f"{fn} not vectorized"
    # the fallback is never vectorized or copied per vector lane
    assert not re.search(r"<\d+ x float> @sinf", opt)
    assert len(re.findall(r"call float @sinf\(", opt)) == 2


def test_independent_calls_stay_inline():
    x = qt.asarray(np.linspace(-1, 1, 4096, dtype=np.float32))
    module, task = _module(_b1(qt, x, x * 0.5))
    assert not outline.chained(task)
    assert outline.PREFIX not in str(module)


def test_functions_called_once_are_inlined():
    """A chain with one call of each function compiles to the inline code of before."""
    x = qt.asarray(np.linspace(-1, 1, 4096))
    module, task = _module(qt.tanh(qt.exp(x) * 0.5))
    assert outline.chained(task)
    opt = str(llvm_cpu.optimize(module))
    assert outline.PREFIX not in opt


@contextlib.contextmanager
def _outline_math(on: bool):
    """The CPU target with outlining on (its default) or off (inline math everywhere)."""
    target = target_for(qt.Device("cpu"))
    old = target.lowering
    target.lowering = dataclasses.replace(old, outline_math=on)
    target.__dict__.pop("_key", None)   # a new target key: kernels of their own
    runtime.clear_plan_cache()
    try:
        yield
    finally:
        target.lowering = old
        target.__dict__.pop("_key", None)
        runtime.clear_plan_cache()


def _inputs(rng, dtype, n=3001):
    """Random values with large arguments (beyond the fast trigonometry's 2**19), NaN,
    infinities, signed zeros and denormals; ``n`` not a multiple of any vector width."""
    x = rng.uniform(-4, 4, n)
    x[::7] = rng.uniform(-1e7, 1e7, x[::7].size)
    x[::11] *= rng.choice([-1.0, 1.0], x[::11].size) * 2.0 ** 19
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, np.finfo(dtype).tiny / 4]
    return x.astype(dtype)


@pytest.mark.cpu_only("outlining is a CPU lowering")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", [_step, _misc])
def test_outlined_and_inline_kernels_agree_bit_for_bit(fusion, rng, dtype, fn):
    x, y = _inputs(rng, dtype), _inputs(rng, dtype)[::-1].copy()
    results = {}
    with np.errstate(all="ignore"):
        for on in (False, True):
            with _outline_math(on):
                results[on] = qt.jit(lambda a, b: fn(qt, a, b))(qt.asarray(x), qt.asarray(y)).numpy()
        want = fn(np, x.astype(np.float64), y.astype(np.float64))
    bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
    np.testing.assert_array_equal(results[True].view(bits), results[False].view(bits))
    # and both are right where the chain is well conditioned (moderate arguments)
    moderate = (np.abs(x) < 8) & (np.abs(y) < 8)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(results[True][moderate], want[moderate], rtol=tol, atol=tol)
