"""Quadrants kernels for the benchmarks (imported only when quadrants is installed).

Quadrants (a Taichi descendant) compiles kernels from Python source at module scope, so
they live here rather than in the benchmark files, which must import without it.
"""

import quadrants as qd

F32_1D = qd.types.ndarray(dtype=qd.f32, ndim=1)


@qd.kernel
def b1_chain(x: F32_1D, y: F32_1D, out: F32_1D):
    """B1: the fused elementwise chain, a parallel loop over the elements."""
    for i in x:
        a = x[i]
        b = y[i]
        out[i] = (qd.sin(a) * qd.cos(b) + qd.exp(-a * a) * 0.5 + qd.sqrt(qd.abs(b))
                  - qd.tanh(a * b))


@qd.kernel
def b2_step(x: F32_1D, v: F32_1D, dt: qd.f32):
    """B2: one step of ``a = -4*x; v = v + dt*a; x = x + dt*v``, in place."""
    for i in x:
        a = -4.0 * x[i]
        vi = v[i] + dt * a
        v[i] = vi
        x[i] = x[i] + dt * vi
