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


I32_1D = qd.types.ndarray(dtype=qd.i32, ndim=1)


@qd.kernel
def b3_forward(x: F32_1D, c: F32_1D, trips: I32_1D, out: F32_1D):
    """B3 forward: per element, ``trips[i]`` steps of ``v = sin(v)*c + 0.5*v``."""
    for i in x:
        v = x[i]
        ci = c[i]
        for _ in range(trips[i]):
            v = qd.sin(v) * ci + 0.5 * v
        out[i] = v


@qd.kernel
def b3_loss(x: F32_1D, c: F32_1D, trips: I32_1D, loss: F32_1D):
    """B3 loss: the same loop, ``loss[0] += out[i]``; differentiated with ``b3_loss.grad``.

    The loop's trip count is data-dependent, so reverse mode needs the adstack
    (``qd.init(..., ad_stack_experimental_enabled=True)``), which stores the iterates.
    """
    for i in x:
        v = x[i]
        ci = c[i]
        for _ in range(trips[i]):
            v = qd.sin(v) * ci + 0.5 * v
        loss[0] += v
