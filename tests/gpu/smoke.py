"""A quick end-to-end check of the CUDA device (run by tests/gpu/run.sh before the suite)."""

import sys
import time

import numpy as np

import qtrace as qt


def check(name, got, want, tol=1e-5):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    err = np.max(np.abs(got - want) / (np.abs(want) + 1e-30)) if want.size else 0.0
    print(f"{'ok  ' if err <= tol else 'FAIL'} {name}: rel err {err:.2e}")
    return err <= tol


def main() -> int:
    print("devices", qt.devices())
    rng = np.random.default_rng(0)
    ok = True
    x = rng.random(1000).astype(np.float32)
    t = qt.asarray(x, device="cuda")
    print("device", t.device)
    y = qt.sin(t) * 2 + qt.exp(-t * t)
    xd = x.astype(np.float64)
    ok &= check("sin*2+exp f32", y.numpy(), np.sin(xd) * 2 + np.exp(-xd * xd))
    a = rng.random((37, 53))
    ta = qt.asarray(a, device="cuda")
    ok &= check("sum axis 1", qt.sum(ta, axis=1).numpy(), a.sum(1), 1e-12)
    ok &= check("sum all", qt.sum(ta * ta).numpy(), (a * a).sum(), 1e-12)
    ok &= check("argmax", qt.argmax(ta, axis=0).numpy(), a.argmax(0), 0)
    ok &= check("cumsum", qt.cumsum(ta, axis=1).numpy(), a.cumsum(1), 1e-12)
    ok &= check("matmul", (ta @ ta.T).numpy(), a @ a.T, 1e-12)
    ok &= check("slice", (ta[1:-1, 2:] + ta[1:-1, :-2]).numpy(), a[1:-1, 2:] + a[1:-1, :-2], 1e-15)
    idx = rng.integers(0, 37, 100)
    z = qt.zeros(37, device="cuda").at[qt.asarray(idx, device="cuda")].add(1.0)
    ok &= check("scatter add", z.numpy(), np.bincount(idx, minlength=37), 0)
    g = qt.grad(lambda v: qt.sum(qt.sin(v) ** 2))(ta)
    ok &= check("grad", g.numpy(), 2 * np.sin(a) * np.cos(a), 1e-12)

    @qt.jit
    def step(u, dt):
        return u + dt * qt.tanh(u)
    u = ta
    for _ in range(3):
        u = step(u, 0.1)
    ref = a.copy()
    for _ in range(3):
        ref = ref + 0.1 * np.tanh(ref)
    ok &= check("jit step", u.numpy(), ref, 1e-12)

    def body(i, v):
        return v * 0.5 + 1.0
    n = qt.asarray(rng.integers(0, 6, 64), device="cuda")
    v0 = qt.asarray(rng.random(64), device="cuda")
    out = qt.grad(lambda v: qt.sum(qt.fori_loop(0, n, body, v)))(v0)
    ok &= check("fori_loop grad", out.numpy(), 0.5 ** n.numpy(), 1e-12)
    try:
        qt.ones(3) + qt.ones(3, device="cuda")
        print("FAIL mixing devices did not raise")
        ok = False
    except ValueError as exc:
        print("ok   mixing devices:", str(exc)[:100])
    big = qt.asarray(rng.random(10_000_000).astype(np.float32), device="cuda")
    qt.sum(big).numpy()   # compile and warm up
    t0 = time.perf_counter()
    for _ in range(5):
        s = qt.sum(big)
        s.numpy()
    print(f"sum 1e7 f32: {(time.perf_counter() - t0) / 5 * 1e3:.2f} ms/call")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
