"""Warp kernels for the benchmarks (imported only when warp is installed).

Warp compiles kernels from Python source at module scope, so they live here rather than
in the benchmark files, which must import without warp.
"""

import warp as wp

# B3's masked loop is unrolled to B3_MAX_TRIPS iterations (``wp.static``), above Warp's
# default unrolling limit.
B3_MAX_TRIPS = 64
wp.set_module_options({"max_unroll": B3_MAX_TRIPS})


@wp.kernel
def b1_chain(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32),
             out: wp.array(dtype=wp.float32)):
    """B1: the fused elementwise chain, one thread per element."""
    i = wp.tid()
    a = x[i]
    b = y[i]
    out[i] = (wp.sin(a) * wp.cos(b) + wp.exp(-a * a) * 0.5 + wp.sqrt(wp.abs(b))
              - wp.tanh(a * b))


@wp.kernel
def b2_step(x: wp.array(dtype=wp.float32), v: wp.array(dtype=wp.float32), dt: float):
    """B2: one step of ``a = -4*x; v = v + dt*a; x = x + dt*v``, in place."""
    i = wp.tid()
    a = -4.0 * x[i]
    vi = v[i] + dt * a
    v[i] = vi
    x[i] = x[i] + dt * vi


@wp.kernel
def b3_forward(x: wp.array(dtype=wp.float32), c: wp.array(dtype=wp.float32),
               trips: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.float32)):
    """B3 forward: ``trips[i]`` steps of ``v = sin(v)*c + 0.5*v`` (a dynamic loop)."""
    i = wp.tid()
    v = x[i]
    ci = c[i]
    for _ in range(trips[i]):
        v = wp.sin(v) * ci + 0.5 * v
    out[i] = v


@wp.kernel
def b3_loss_dynamic(x: wp.array(dtype=wp.float32), c: wp.array(dtype=wp.float32),
                    trips: wp.array(dtype=wp.int32), loss: wp.array(dtype=wp.float32)):
    """B3 loss through the dynamic loop. Warp's adjoint of a dynamic loop does not store
    the iterates, so its gradient of this non-linear recurrence is wrong (kept to say so)."""
    i = wp.tid()
    v = x[i]
    ci = c[i]
    for _ in range(trips[i]):
        v = wp.sin(v) * ci + 0.5 * v
    wp.atomic_add(loss, 0, v)


@wp.kernel
def b3_loss_unrolled(x: wp.array(dtype=wp.float32), c: wp.array(dtype=wp.float32),
                     trips: wp.array(dtype=wp.int32), loss: wp.array(dtype=wp.float32)):
    """B3 loss with the loop unrolled to B3_MAX_TRIPS steps, each masked by ``k < trips[i]``
    (straight-line code, whose adjoint Warp gets right)."""
    i = wp.tid()
    v = x[i]
    ci = c[i]
    n = trips[i]
    for k in range(wp.static(B3_MAX_TRIPS)):
        if k < n:
            v = wp.sin(v) * ci + 0.5 * v
    wp.atomic_add(loss, 0, v)
