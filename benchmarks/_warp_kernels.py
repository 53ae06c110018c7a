"""Warp kernels for the benchmarks (imported only when warp is installed).

Warp compiles kernels from Python source at module scope, so they live here rather than
in the benchmark files, which must import without warp.
"""

import warp as wp


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
