"""A sharded simulation step with a qtrace custom call per shard, on any number of devices.

The domain is a 1-D periodic rod split over a mesh of all devices (``jax.shard_map``). One
step: halo exchange with the neighbours (``jax.lax.ppermute``), a diffusion update in JAX,
and per element a reaction computed by a **per-element while_loop** (from ``z = 1 + u^2/2``,
``z <- 1.3 z + 0.1`` until ``z >= 1 + 20 |u|``, summing ``sin z``) — a qtrace function inside the shard
(``qt.to_jax``), whose gradient JAX alone cannot take. ``jax.grad`` of the loss after
``STEPS`` steps differentiates through the halo exchange (JAX) and the loop (qtrace's
adstack). The pure-JAX comparison replaces the loop by a masked ``fori_loop`` bounded by the
largest trip count.

Checks: the all-device result and gradient equal the one-device run to round-off. Weak
scaling: per-device size fixed; time per step and per gradient step on 1 device and on all
(medians, the configurations sampled in turn), throughput ratio (target 1.8x on 2 GPUs).
Runs on CPU simulated devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``,
4096 elements per device) and on GPUs (16M per GPU).

Run: ``python benchmarks/sharded_step.py [--n-local N] [--steps K] [--check-only]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

STEPS = 4
DT = 0.1


def reaction_qt(qt):
    """The per-element while_loop, written with qtrace (one custom call per shard)."""
    def reaction(u):
        limit = 1.0 + 20.0 * qt.abs(u)

        def cond(s):
            return s[0] < limit

        def body(s):
            return (s[0] * 1.3 + 0.1, s[1] + qt.sin(s[0]))
        _, acc = qt.while_loop(cond, body, (1.0 + 0.5 * u * u, qt.zeros_like(u)))
        return acc
    return qt.to_jax(reaction)


def reaction_jax(jnp, jax, max_trips: int):
    """The same loop in JAX as a masked fori_loop (JAX cannot reverse a while_loop)."""
    def reaction(u):
        limit = 1.0 + 20.0 * jnp.abs(u)

        def body(_, s):
            go = s[0] < limit
            return (jnp.where(go, s[0] * 1.3 + 0.1, s[0]), jnp.where(go, s[1] + jnp.sin(s[0]), s[1]))
        _, acc = jax.lax.fori_loop(0, max_trips, body, (1.0 + 0.5 * u * u, jnp.zeros_like(u)))
        return acc
    return reaction


def make_step(jax, jnp, mesh, reaction, n_dev: int):
    from jax.sharding import PartitionSpec as P
    right = [(i, (i + 1) % n_dev) for i in range(n_dev)]
    left = [(i, (i - 1) % n_dev) for i in range(n_dev)]

    def local_step(u):
        from_left = jax.lax.ppermute(u[-1:], "x", right)    # my left neighbour's last cell
        from_right = jax.lax.ppermute(u[:1], "x", left)     # my right neighbour's first cell
        padded = jnp.concatenate([from_left, u, from_right])
        lap = padded[:-2] - 2.0 * u + padded[2:]
        return u + DT * (lap + 0.01 * reaction(u))

    step = jax.shard_map(local_step, mesh=mesh, in_specs=P("x"), out_specs=P("x"))

    def run(u):
        for _ in range(STEPS):
            u = step(u)
        return u

    def loss(u):
        return jnp.sum(run(u) ** 2)
    return jax.jit(run), jax.jit(jax.grad(loss))


def _interleaved_ms(fns: dict, repeats: int) -> dict:
    """Median ms per call of each function, sampled in turn (one call of each per round), so
    a drift of the machine (clocks, other work) weighs on every configuration alike."""
    for fn in fns.values():
        fn()
    samples: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}


def main(argv: list) -> int:
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh

    import qtrace as qt
    p = argparse.ArgumentParser()
    p.add_argument("--n-local", type=int, default=None)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--check-only", action="store_true")
    args = p.parse_args(argv)
    devices = jax.devices()
    n_dev = len(devices)
    # on GPUs, 16M elements per device: enough work that a step is not bound by launch and
    # collective latency (at 1M a step is ~0.2 ms, most of it ppermute and launches)
    n_local = args.n_local or (1 << 24 if devices[0].platform == "gpu" else 1 << 12)
    rng = np.random.default_rng(0)
    u_all = (rng.standard_normal(n_local * n_dev) * 0.2).astype(np.float32)
    max_trips = int(np.ceil(np.log((0.3 * (1 + 20 * 2.0) + 0.1) / 0.4) / np.log(1.3))) + 1

    rows, results, timed = [], {}, {}
    for label, devs in (("1 device", devices[:1]), (f"{n_dev} devices", devices)):
        mesh = Mesh(np.array(devs), ("x",))
        u = u_all[: n_local * len(devs)]
        for system, reaction in (("qtrace call", reaction_qt(qt)),
                                 ("JAX masked fori", reaction_jax(jnp, jax, max_trips))):
            fwd, grad = make_step(jax, jnp, mesh, reaction, len(devs))
            out = np.asarray(fwd(u))
            g = np.asarray(grad(u))
            results[(label, system)] = (out, g, len(devs))
            timed[(label, system, len(devs), "step")] = lambda f=fwd, v=u: f(v).block_until_ready()
            timed[(label, system, len(devs), "grad")] = lambda f=grad, v=u: f(v).block_until_ready()
    if not args.check_only:
        ms = _interleaved_ms(timed, args.repeats)
        for label, system, nd, what in timed:
            if what == "step":
                rows.append((label, system, nd, ms[(label, system, nd, "step")] / STEPS,
                             ms[(label, system, nd, "grad")] / STEPS))

    # correctness: all devices vs one device (on the common first block), qtrace vs JAX
    one_out, one_g, _ = results[("1 device", "qtrace call")]
    all_out, all_g, _ = results[(f"{n_dev} devices", "qtrace call")]
    ok = True
    if n_dev > 1:
        # the one-device rod is the first block closed on itself: compare a single-device run
        # of the whole rod instead (same problem, same size)
        mesh1 = Mesh(np.array(devices[:1]), ("x",))
        fwd1, grad1 = make_step(jax, jnp, mesh1, reaction_qt(qt), 1)
        one_out, one_g = np.asarray(fwd1(u_all)), np.asarray(grad1(u_all))
    err_out = float(np.max(np.abs(all_out - one_out)) / np.max(np.abs(one_out)))
    err_g = float(np.max(np.abs(all_g - one_g)) / np.max(np.abs(one_g)))
    jx_out, jx_g, _ = results[(f"{n_dev} devices", "JAX masked fori")]
    err_jax = float(np.max(np.abs(all_g - jx_g)) / np.max(np.abs(jx_g)))
    ok = err_out <= 1e-5 and err_g <= 1e-4 and err_jax <= 1e-3
    cpu_line = ""
    if devices[0].platform != "cpu":   # the same program on the host's CPU (one device)
        cpu = jax.devices("cpu")[:1]
        fwd_c, grad_c = make_step(jax, jnp, Mesh(np.array(cpu), ("x",)), reaction_qt(qt), 1)
        u_c = jax.device_put(u_all, cpu[0])
        err_c = float(np.max(np.abs(np.asarray(fwd_c(u_c)) - all_out)) / np.max(np.abs(all_out)))
        err_cg = float(np.max(np.abs(np.asarray(grad_c(u_c)) - all_g)) / np.max(np.abs(all_g)))
        ok = ok and err_c <= 1e-5 and err_cg <= 1e-4
        cpu_line = f"; {n_dev} devices vs the CPU: result {err_c:.1e}, gradient {err_cg:.1e}"
    print(f"devices: {n_dev} x {devices[0].platform} ({devices[0].device_kind}); n per device "
          f"{n_local}; {STEPS} steps")
    print(f"check: {n_dev} vs 1 device: result {err_out:.1e}, gradient {err_g:.1e}; qtrace vs JAX "
          f"gradient {err_jax:.1e}{cpu_line}: {'PASS' if ok else 'FAIL'}")
    if rows:
        print(f"{'mesh':12} {'system':18} {'ms/step':>9} {'ms/grad step':>13} {'throughput x':>13}")
        base = {r[1]: r for r in rows if r[2] == 1}
        for label, system, nd, t_f, t_g in rows:
            b = base[system]
            scale_f = nd * b[3] / t_f
            scale_g = nd * b[4] / t_g
            print(f"{label:12} {system:18} {t_f:9.3f} {t_g:13.3f} {scale_f:6.2f} / {scale_g:4.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
