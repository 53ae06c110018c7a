"""GPU rows of B1, B5 and a full reduction, beside CuPy and JAX on the same GPU, in one run.

* copy: a device-to-device copy of N float32 (bytes read + written), the bandwidth ceiling;
* B1 (``b1_elementwise.chain``), float32, N = 1e8: qtrace eager (one fused kernel),
  qtrace ``jit``, CuPy (a temporary per operation), CuPy hand-fused (``ElementwiseKernel``),
  Dr.Jit's CUDA backend where installed, JAX ``jit``; GB/s at the compulsory 12
  bytes/element and % of the copy bandwidth;
* B5 (``b5_eager_loop.body``), float32, N = 1e7, ms per iteration, eager: qtrace (one
  evaluation per iteration), CuPy, Dr.Jit's CUDA backend (``dr.eval`` per iteration) where
  installed;
* sum: a full ``sum`` of N = 1e8 float32: qtrace, ``cupy.sum``;
* cumsum: a ``cumsum`` of the same row: qtrace, ``cupy.cumsum``;
* B2 (``b2_dispatch``): a jitted 3-op step at N = 64, µs per call: qtrace ``jit`` with and
  without ``cuda_graph``, a CuPy ``ElementwiseKernel``, JAX ``jit``, Dr.Jit's CUDA backend
  (eager and ``dr.freeze``) where installed;
* B6b (``b6_autodiff``), float32, N = 1e5: the gradient of a 100-step simulation's final
  loss w.r.t. its initial state, ms per gradient: qtrace ``jit(grad(...))`` of the Python
  loop of a jitted step, launch by launch and with ``cuda_graph=True``; JAX
  ``jit(grad(...))`` of ``lax.scan``; relative error vs the float64 hand-written adjoint;
* B3 (``b3_loop_grad``), float32, N = 1e7: forward and forward+backward through the
  per-element loop with data-dependent trip counts (0..64): qtrace ``jit`` (no hint),
  JAX ``jit`` (``fori_loop`` to the largest count with a mask); peak GPU memory (qtrace:
  the high-water mark of CuPy's pool in use during B3 above what was in use before it,
  inputs included, one call's result alive at a time, and that less the inputs' bytes:
  what qtrace allocated; JAX: its process's
  ``peak_bytes_in_use``, B1's arrays included); relative error of the gradient vs float64
  (≤ 1e-4); then qtrace's forward+backward where 0%, 0.1%, 5% or 50% of the elements loop (the
  other counts 0): time and memory against the active fraction.

Every timing is a median over repeats, each synchronised (``qt.sync``,
``cupy.cuda.Device().synchronize``, ``block_until_ready``) after warm-up; results are
checked against float64 NumPy. Run: ``python benchmarks/gpu.py [--quick]``; without a GPU it
says so and exits 0.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

import numpy as np

try:
    from . import b1_elementwise, b2_dispatch, b3_loop_grad, b5_eager_loop, b6_autodiff
except ImportError:  # run as a script
    import b1_elementwise
    import b2_dispatch
    import b3_loop_grad
    import b5_eager_loop
    import b6_autodiff


def _median_ms(fn, sync, repeats: int) -> float:
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def main(argv: list) -> int:
    import qtrace as qt
    gpus = [d for d in qt.devices() if d.kind == "cuda"]
    if not gpus:
        print("no CUDA device: nothing to measure")
        return 0
    import cupy as cp
    quick = "--quick" in argv
    n1, n5, iters = (10**7, 10**6, 20) if quick else (10**8, 10**7, 50)
    reps = 5 if quick else 10
    sync = cp.cuda.Device().synchronize
    rows = []
    rng = np.random.default_rng(0)
    x_np = rng.uniform(-1, 1, n1).astype(np.float32)
    y_np = rng.uniform(-1, 1, n1).astype(np.float32)
    xc, yc = cp.asarray(x_np), cp.asarray(y_np)
    out = cp.empty_like(xc)
    copy_ms = _median_ms(lambda: cp.copyto(out, xc), sync, reps)
    copy_gbs = 8 * n1 / copy_ms / 1e6
    rows.append(("copy", "CuPy copyto", copy_ms, f"{copy_gbs:.0f} GB/s", ""))
    ref = b1_elementwise.chain(np, x_np.astype(np.float64), y_np.astype(np.float64))

    def b1_row(system, fn, result):
        ms = _median_ms(fn, sync, reps)
        err = float(np.max(np.abs(result() - ref)))
        gbs = 12 * n1 / ms / 1e6
        rows.append(("B1", system, ms, f"{gbs:.0f} GB/s ({gbs / copy_gbs:.0%})",
                     "PASS" if err <= 1e-6 else f"FAIL {err:.1e}"))

    xq, yq = qt.asarray(xc), qt.asarray(yc)
    box = {}

    def qt_eager():
        box["q"] = b1_elementwise.chain(qt, xq, yq)
        qt.eval(box["q"])
    b1_row("qtrace eager", qt_eager, lambda: box["q"].numpy())
    jf = qt.jit(lambda a, b: b1_elementwise.chain(qt, a, b))

    def qt_jit():
        box["j"] = jf(xq, yq)
    b1_row("qtrace jit", qt_jit, lambda: box["j"].numpy())

    def cupy_plain():
        box["c"] = b1_elementwise.chain(cp, xc, yc)
    b1_row("CuPy", cupy_plain, lambda: cp.asnumpy(box["c"]))
    fused = cp.ElementwiseKernel(
        "float32 x, float32 y", "float32 z",
        "z = sinf(x) * cosf(y) + expf(-x * x) * 0.5f + sqrtf(fabsf(y)) - tanhf(x * y)", "b1")

    def cupy_fused():
        box["f"] = fused(xc, yc)
    b1_row("CuPy hand-fused", cupy_fused, lambda: cp.asnumpy(box["f"]))
    try:
        import drjit as dr
        from drjit.cuda import Float
        xd, yd = Float(x_np), Float(y_np)

        def drjit_b1():   # (dr.sync_thread: its work may be on its own stream)
            box["d"] = b1_elementwise.chain(dr, xd, yd)
            dr.eval(box["d"])
            dr.sync_thread()
        b1_row("Dr.Jit (CUDA)", drjit_b1, lambda: box["d"].numpy())
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is a row saying why
        rows.append(("B1", "Dr.Jit (CUDA)", None, f"not run: {str(exc)[:60]}", ""))
    try:
        import jax
        import jax.numpy as jnp
        xj, yj = jax.device_put(x_np), jax.device_put(y_np)
        jj = jax.jit(lambda a, b: b1_elementwise.chain(jnp, a, b))

        def jax_b1():
            box["x"] = jj(xj, yj).block_until_ready()
        b1_row("JAX jit", jax_b1, lambda: np.asarray(box["x"]))
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is a row saying why
        rows.append(("B1", "JAX jit", None, f"not run: {str(exc)[:60]}", ""))

    # B5: eager iterations
    x5 = rng.uniform(-1, 1, n5).astype(np.float32)
    y5 = rng.uniform(-1, 1, n5).astype(np.float32)
    want = b5_eager_loop.reference(x5, y5, iters)

    def b5_row(system, run):
        start, loop = run()
        loop(start())   # warm-up: kernels compiled and loaded, every system alike
        state = start()
        t0 = time.perf_counter()
        state = loop(state)
        ms = (time.perf_counter() - t0) * 1e3 / iters
        got = [np.asarray(v.numpy() if hasattr(v, "numpy") else cp.asnumpy(v)) for v in state]
        err = max(np.linalg.norm(g - w) / np.linalg.norm(w) for g, w in zip(got, want))
        rows.append(("B5", system, ms, "per iteration", "PASS" if err <= 4 * iters * 1.2e-7 else
                     f"FAIL {err:.1e}"))

    def eager(m, to_device, evaluate, wait):
        """B5 eager in module ``m`` (a ``run`` for ``b5_row``): inputs placed by
        ``to_device``, each iteration's values given to ``evaluate`` (None: nothing), then
        the timed loop, ``wait``-ed for at its end."""
        def start():   # (the uploads finished before the clock starts: some are asynchronous)
            state = to_device(x5), to_device(y5)
            wait()
            return state

        def loop(state):
            a, b = state
            for _ in range(iters):
                a, b = b5_eager_loop.body(m, a, b)
                if evaluate is not None:
                    evaluate(a, b)
            wait()
            return a, b
        return lambda: (start, loop)
    b5_row("qtrace eager", eager(qt, lambda v: qt.asarray(v, device="cuda"), qt.eval, qt.sync))
    b5_row("CuPy", eager(cp, cp.asarray, None, sync))
    try:   # Dr.Jit's CUDA backend: traced lazily, dr.eval every iteration
        import drjit as dr
        from drjit.cuda import Float
        b5_row("Dr.Jit (CUDA)", eager(dr, Float, dr.eval, dr.sync_thread))
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is a row saying why
        rows.append(("B5", "Dr.Jit (CUDA)", None, f"not run: {str(exc)[:60]}", ""))

    # a full sum
    s_np = x_np.astype(np.float64).sum()
    for system, fn in (("qtrace", lambda: qt.sum(xq).numpy()), ("CuPy", lambda: cp.sum(xc).get())):
        ms = _median_ms(fn, sync, reps)
        val = float(fn())
        rows.append(("sum", system, ms, f"{4 * n1 / ms / 1e6:.0f} GB/s",
                     "PASS" if abs(val - s_np) <= 1e-4 * max(1.0, abs(s_np)) * 10 else f"FAIL {val}"))
    # a cumsum of one long row (the library's parallel scan on the GPU)
    c_np = np.cumsum(x_np.astype(np.float64))
    for system, fn, host in (("qtrace", lambda: qt.eval(box.update(c=qt.cumsum(xq)) or box["c"]),
                              lambda: box["c"].numpy()),
                             ("CuPy", lambda: box.update(c=cp.cumsum(xc)), lambda: box["c"].get())):
        ms = _median_ms(fn, sync, 5)
        err = float(np.max(np.abs(host() - c_np)) / c_np[-1])
        check = "PASS" if err <= 1e-5 else f"FAIL {err:.1e}"
        rows.append(("cumsum", system, ms, f"{8 * n1 / ms / 1e6:.0f} GB/s", check))
    rows += _b3_rows(qt, cp, sync, reps, 10**6 if quick else 10**7)
    rows += _b2_rows(qt, cp, 2000 if quick else 10000)
    rows += _b6b_rows(qt, sync, reps, 10**4 if quick else 10**5)
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"GPU: {name}; N(B1, sum) = {n1:.0e}, N(B5) = {n5:.0e} x {iters} iterations")
    print(f"{'bench':6} {'system':18} {'ms':>9}  {'rate':24} check")
    for bench, system, ms, rate, check in rows:
        ms_s = f"{ms:9.3f}" if ms is not None else f"{'-':>9}"
        print(f"{bench:6} {system:18} {ms_s}  {rate:24} {check}")
    return 0


def _b2_rows(qt, cp, steps: int) -> list:
    """B2 on the GPU: a jitted 3-op step at N=64 called ``steps`` times in a Python loop,
    its results fed back, the final state synchronised and checked (µs per call, median
    of 5 samples): qtrace ``jit`` launch by launch and with ``cuda_graph=True``, CuPy (an
    ``ElementwiseKernel`` updating in place), JAX ``jit``, Dr.Jit's CUDA backend (eager,
    ``dr.eval`` per call, and ``dr.freeze``), where installed."""
    p = b2_dispatch._Problem(steps, 0)
    tol = b2_dispatch._tolerance(steps)

    def row(system, start, call, finish):
        samples = []
        for _ in range(6):   # (the first: compilation and capture)
            state = start()
            t0 = time.perf_counter()
            for _ in range(steps):
                state = call(*state)
            got = finish(state)
            samples.append((time.perf_counter() - t0) / steps * 1e6)
        err = max(np.abs(g - r).max() / np.abs(r).max() for g, r in zip(got, p.ref))
        us = statistics.median(samples[1:])
        return ("B2", system, us / 1e3, f"{us:.2f} us per call", ("PASS" if err <= tol else "FAIL")
                + f" {err:.1e}")

    rows = []
    for graphs in (False, True):
        f = qt.jit(b2_dispatch.step, cuda_graph=graphs)
        rows.append(row("qtrace jit" + (", graph" if graphs else ""),
                        lambda: (qt.asarray(p.x0, device="cuda"), qt.asarray(p.v0, device="cuda")), f,
                        lambda s: (qt.sync(), s[0].numpy(), s[1].numpy())[1:]))
    kern = cp.ElementwiseKernel("float32 dt", "float32 x, float32 v",
                                "float a = -4.0f * x; v = v + dt * a; x = x + dt * v;", "b2_step")

    def cp_call(x, v):
        kern(np.float32(b2_dispatch.DT), x, v)
        return x, v
    rows.append(row("CuPy kernel", lambda: (cp.asarray(p.x0), cp.asarray(p.v0)), cp_call,
                    lambda s: (s[0].get(), s[1].get())))
    try:
        import jax
        jf = jax.jit(b2_dispatch.step)
        rows.append(row("JAX jit", lambda: (jax.device_put(p.x0), jax.device_put(p.v0)), jf,
                        lambda s: tuple(np.asarray(a) for a in jax.block_until_ready(s))))
    except Exception as exc:  # noqa: BLE001 - a row saying why
        rows.append(("B2", "JAX jit", None, f"not run: {str(exc)[:60]}", ""))
    try:
        import drjit as dr
        from drjit.cuda import Float
        for name, fn in (("Dr.Jit eager", b2_dispatch.step), ("Dr.Jit frozen", dr.freeze(b2_dispatch.step))):
            def dr_call(x, v, fn=fn):
                x, v = fn(x, v)
                dr.eval(x, v)
                return x, v
            rows.append(row(name, lambda: (Float(p.x0), Float(p.v0)), dr_call,
                            lambda s: (dr.sync_thread(), np.asarray(s[0]), np.asarray(s[1]))[1:]))
    except Exception as exc:  # noqa: BLE001 - a row saying why
        rows.append(("B2", "Dr.Jit (CUDA)", None, f"not run: {str(exc)[:60]}", ""))
    return rows


def _b6b_rows(qt, sync, reps: int, n: int) -> list:
    """B6b on the GPU: qtrace ``jit(grad)`` launch by launch and with CUDA graphs, JAX
    ``jit(grad)`` of ``lax.scan``; ms per gradient, error vs the float64 adjoint."""
    b6 = b6_autodiff
    p = b6._Sim(n, 0)
    want = b6.sim_grad_numpy(*(a.astype(np.float64) for a in (p.x0, p.v0, p.k)))

    def check(gx, gv) -> str:
        err = max(float(np.max(np.abs(g - w)) / np.max(np.abs(w))) for g, w in zip((gx, gv), want))
        return ("PASS" if err <= b6.TOL_SIM else "FAIL") + f" {err:.1e}"
    rows = []
    step = qt.jit(lambda x, v, k: b6.sim_step(qt, x, v, k))

    def loss(x, v, k):
        for _ in range(b6.STEPS):
            x, v = step(x, v, k)
        return b6.sim_final_loss(qt, x, v)
    args = [qt.asarray(a, device="cuda") for a in (p.x0, p.v0, p.k)]
    for graphs in (False, True):
        g = qt.jit(qt.grad(loss, argnums=(0, 1)), cuda_graph=graphs)
        box = {}

        def run(g=g, box=box):
            box["g"] = g(*args)
            qt.eval(*box["g"])
        ms = _median_ms(run, qt.sync, reps)
        paths = g.graph_paths()
        note = (", graph" if graphs else "") + ("" if not graphs or paths == [None] else f" (off: {paths})")
        rows.append(("B6b", "qtrace jit(grad)" + note, ms, f"{ms / b6.STEPS * 1e3:.1f} us/step",
                     check(*(t.numpy() for t in box["g"]))))
    try:
        import jax
        from jax import lax
        jnp = jax.numpy

        def jloss(x, v, k):
            (x, v), _ = lax.scan(lambda s, _: (b6.sim_step(jnp, *s, k), None), (x, v), None,
                                 length=b6.STEPS)
            return b6.sim_final_loss(jnp, x, v)
        jg = jax.jit(jax.grad(jloss, argnums=(0, 1)))
        jargs = [jax.device_put(a) for a in (p.x0, p.v0, p.k)]
        box = {}
        ms = _median_ms(lambda: box.update(g=jax.block_until_ready(jg(*jargs))), sync, reps)
        rows.append(("B6b", "JAX jit(grad(scan))", ms, f"{ms / b6.STEPS * 1e3:.1f} us/step",
                     check(*(np.asarray(a) for a in box["g"]))))
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is a row saying why
        rows.append(("B6b", "JAX jit(grad(scan))", None, f"not run: {str(exc)[:60]}", ""))
    return rows


def _b3_rows(qt, cp, sync, reps: int, n: int) -> list:
    """B3 forward and forward+backward on the GPU: qtrace (launch by launch, and replayed
    from CUDA graphs) and JAX, time, memory, error; then qtrace's forward+backward where only
    a fraction of the elements loop (the others' counts 0): time and memory against the
    active fraction."""
    p = b3_loop_grad._Problem(n, 0)
    rows = _b3_qtrace(qt, cp, reps, p, _b3_check(p))
    rows += _b3_qtrace(qt, cp, reps, p, _b3_check(p), ", cuda_graph", graphs=True)
    try:
        rows += _b3_jax(sync, reps, p, _b3_check(p))
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is a row saying why
        rows.append(("B3", "JAX jit", None, f"not run: {str(exc)[:60]}", ""))
    gate = np.random.default_rng(1).random(n)
    full = p.trips
    for fraction in (0.0, 0.001, 0.05, 0.5):
        p.trips = np.where(gate < fraction, full, 0).astype(full.dtype)
        p.max_trips = int(p.trips.max(initial=0))
        rows += _b3_qtrace(qt, cp, reps, p, _b3_check(p), f", {fraction:.1%} active")[1:]
    return rows


def _b3_check(p):
    """The gradient's relative error against float64, as a table cell."""
    _, want_gx, want_gc = b3_loop_grad.reference(p.x, p.c, p.trips)
    scale = max(np.abs(want_gx).max(), np.abs(want_gc).max())

    def check(gx, gc) -> str:
        err = max(np.abs(gx - want_gx).max(), np.abs(gc - want_gc).max()) / scale
        return ("PASS" if err <= 1e-4 else "FAIL") + f" {err:.1e}"
    return check


def _b3_qtrace(qt, cp, reps: int, p, check, label: str = "", graphs: bool = False) -> list:
    pool = cp.get_default_memory_pool()
    gc.collect()   # (an earlier row's memory still held by garbage would count as the base)
    base, peak = pool.used_bytes(), [0]

    def malloc(size):   # CuPy's pool, watched: the high-water mark of what is in use
        mem = pool.malloc(size)
        peak[0] = max(peak[0], pool.used_bytes())
        return mem
    cp.cuda.set_allocator(malloc)
    try:
        return _b3_qtrace_rows(qt, reps, p, check, lambda: (peak[0] - base) / 2**20, label, graphs)
    finally:
        cp.cuda.set_allocator(pool.malloc)


def _b3_qtrace_rows(qt, reps: int, p, check, peak_mb, label: str, graphs: bool) -> list:
    def forward(x, c, k):
        return qt.fori_loop(0, k, lambda i, v: b3_loop_grad.step(qt, v, c), x)
    fwd = qt.jit(forward, cuda_graph=graphs)
    grad = qt.jit(qt.value_and_grad(lambda x, c, k: qt.sum(forward(x, c, k)), argnums=(0, 1)),
                  cuda_graph=graphs)
    x, c, k = (qt.asarray(a, device="cuda") for a in (p.x, p.c, p.trips))
    box = {}

    def run_grad():
        box.pop("g", None)   # (the last call's result freed first: the peak of one call)
        box["g"] = grad(x, c, k)
        qt.eval(*box["g"][1])
    fwd_ms = _median_ms(lambda: qt.eval(fwd(x, c, k)), qt.sync, reps)
    grad_ms = _median_ms(run_grad, qt.sync, reps)
    _, (gx, gc) = box["g"]
    mb = peak_mb()
    above = mb - sum(a.nbytes for a in (p.x, p.c, p.trips)) / 2**20   # (what qtrace allocated)
    return [("B3", "qtrace jit fwd" + label, fwd_ms, f"{mb:.0f} MB peak, no hint", ""),
            ("B3", "qtrace jit fwd+bwd" + label, grad_ms, f"{mb:.0f} MB peak ({above:.0f} above inputs)",
             check(gx.numpy(), gc.numpy()))]


def _b3_jax(sync, reps: int, p, check) -> list:
    import jax
    import jax.numpy as jnp
    top = p.max_trips

    def forward(x, c, k):
        return jax.lax.fori_loop(0, top, lambda i, v: jnp.where(i < k, b3_loop_grad.step(jnp, v, c), v), x)
    fwd = jax.jit(forward)
    grad = jax.jit(jax.value_and_grad(lambda x, c, k: jnp.sum(forward(x, c, k)), argnums=(0, 1)))
    x, c, k = (jax.device_put(a) for a in (p.x, p.c, p.trips))
    box = {}
    fwd_ms = _median_ms(lambda: fwd(x, c, k).block_until_ready(), sync, reps)
    def run_grad():
        box.pop("g", None)   # (as qtrace's)
        box["g"] = jax.block_until_ready(grad(x, c, k))
    grad_ms = _median_ms(run_grad, sync, reps)
    mb = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use", 0) / 2**20
    _, (gx, gc) = box["g"]
    return [("B3", "JAX jit fwd", fwd_ms, f"masked to {top} steps", ""),
            ("B3", "JAX jit fwd+bwd", grad_ms, f"{mb:.0f} MB process peak",
             check(np.asarray(gx), np.asarray(gc)))]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
