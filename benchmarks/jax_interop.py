"""qtrace inside JAX (``qt.to_jax``) on JAX's default backend (CPU or GPU): what a custom
call costs, beside pure JAX and qtrace alone, in one run (``QTRACE_FFI_NATIVE=0``: through
the Python FFI handler instead of the native one).

(a) overhead: a jitted JAX program calling a tiny qtrace function (N = 64,
    ``sin(x) * 2 + 1``) vs the same function in pure ``jax.jit``, µs per call;
(b) B1 (``b1_elementwise.chain``, float32, N = 1e7, ``--quick`` 1e6) as a qtrace custom call
    inside ``jax.jit`` vs pure ``jax.jit`` vs ``qt.jit`` alone, ms per call;
(c) B3-like: the gradient of a per-element ``while_loop`` (``x <- 1.3 x + 0.1`` until a
    per-element limit, summing ``sin``) through ``jax.grad`` of a custom call, vs JAX's masked
    ``while_loop``, which JAX cannot differentiate (reported as such), and vs a masked
    ``fori_loop`` with the largest trip count as its bound.

Medians over repeats (each synchronised with ``block_until_ready``); results checked
against NumPy/JAX. Run: ``python benchmarks/jax_interop.py [--quick]``.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

try:
    from . import b1_elementwise
except ImportError:  # run as a script
    import b1_elementwise


def _median_us(fn, repeats: int, inner: int = 1) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples) * 1e6


def main(argv: list) -> int:
    import jax
    import jax.numpy as jnp

    import qtrace as qt
    jax.config.update("jax_enable_x64", True)
    gpu = jax.default_backend() == "gpu"
    if gpu:   # qtrace alone on the same GPU
        qt.config.device = "cuda"
    quick = "--quick" in argv
    n1 = 10**6 if quick else 10**7
    rows = []

    # (a) overhead
    tiny = qt.to_jax(lambda x: qt.sin(x) * 2.0 + 1.0)
    x64 = jnp.asarray(np.linspace(0, 1, 64))
    via_qt = jax.jit(lambda x: tiny(x) + 0.0)
    pure = jax.jit(lambda x: jnp.sin(x) * 2.0 + 1.0 + 0.0)
    a = _median_us(lambda: via_qt(x64).block_until_ready(), 9, 200)
    b = _median_us(lambda: pure(x64).block_until_ready(), 9, 200)
    assert np.allclose(np.asarray(via_qt(x64)), np.asarray(pure(x64)))
    rows += [("overhead N=64", "jax.jit + qtrace call", a, "us"), ("overhead N=64", "pure jax.jit", b, "us"),
             ("overhead N=64", "added by the call", a - b, "us")]

    # (b) B1
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, n1).astype(np.float32)
    y = rng.uniform(-1, 1, n1).astype(np.float32)
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    call = jax.jit(qt.to_jax(lambda u, v: b1_elementwise.chain(qt, u, v)))
    pure_b1 = jax.jit(lambda u, v: b1_elementwise.chain(jnp, u, v))
    alone = qt.jit(lambda u, v: b1_elementwise.chain(qt, u, v))
    xq, yq = qt.asarray(x), qt.asarray(y)
    ref = b1_elementwise.chain(np, x.astype(np.float64), y.astype(np.float64))
    for name, fn in (("qtrace call in jax.jit", lambda: call(xj, yj).block_until_ready()),
                     ("pure jax.jit", lambda: pure_b1(xj, yj).block_until_ready()),
                     ("qt.jit alone", (lambda: (alone(xq, yq), qt.sync())) if gpu
                      else (lambda: alone(xq, yq).numpy()))):
        rows.append(("B1", name, _median_us(fn, 5 if quick else 10) / 1e3, "ms"))
    assert np.max(np.abs(np.asarray(call(xj, yj)) - ref)) <= 1e-6

    # (c) gradient through a data-dependent while_loop
    m = 10**4 if quick else 10**5
    x0 = rng.uniform(0.5, 1.5, m)
    lim = rng.uniform(2.0, 40.0, m)

    def qt_loss(v, limit):
        def cond(s):
            return s[0] < limit

        def body(s):
            return (s[0] * 1.3 + 0.1, s[1] + qt.sin(s[0]))
        w, acc = qt.while_loop(cond, body, (v, qt.zeros_like(v)))
        return qt.sum(acc * w)
    grad_qt = jax.jit(jax.grad(qt.to_jax(qt_loss)))

    def masked_fori(v, limit, steps):
        def body(_, s):
            go = s[0] < limit
            return (jnp.where(go, s[0] * 1.3 + 0.1, s[0]), jnp.where(go, s[1] + jnp.sin(s[0]), s[1]))
        w, acc = jax.lax.fori_loop(0, steps, body, (v, jnp.zeros_like(v)))
        return jnp.sum(acc * w)
    steps = int(np.max(np.ceil(np.log((lim * 0.3 + 0.1) / (x0 * 0.3 + 0.1)) / np.log(1.3)))) + 2
    grad_fori = jax.jit(jax.grad(lambda v, limit: masked_fori(v, limit, steps)))
    g1 = np.asarray(grad_qt(x0, lim))
    g2 = np.asarray(grad_fori(x0, lim))
    assert np.allclose(g1, g2, rtol=1e-10, atol=1e-10), np.max(np.abs(g1 - g2))
    rows.append(("while grad", "jax.grad of qtrace call", _median_us(
        lambda: grad_qt(x0, lim).block_until_ready(), 5) / 1e3, "ms"))
    rows.append(("while grad", f"JAX masked fori_loop ({steps} steps)", _median_us(
        lambda: grad_fori(x0, lim).block_until_ready(), 5) / 1e3, "ms"))
    rows.append(("while grad", "JAX while_loop", None, "cannot differentiate"))

    handler = "native" if qt.config.ffi_native else "Python (QTRACE_FFI_NATIVE=0)"
    print(f"JAX backend {jax.default_backend()}; FFI handler {handler}; B1 N = {n1:.0e}, "
          f"while-loop N = {m:.0e}")
    print(f"{'bench':14} {'system':38} {'time':>10}")
    for bench, system, t, unit in rows:
        shown = f"{t:10.3f} {unit}" if t is not None else f"{'-':>10} {unit}"
        print(f"{bench:14} {system:38} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
