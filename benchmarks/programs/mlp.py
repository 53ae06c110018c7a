"""A small model trained with gradients: 2-layer MLP on the spiral data set.

Modelled on CS231n's "Putting it together: minimal neural network case study" (Stanford
CS231n course notes), written here from its description: ``K = 3`` interleaved spirals
of ``m`` points each in 2-D (seeded noise), a hidden layer of ``h`` units (``tanh`` here,
so the gradient is smooth everywhere), softmax cross-entropy with L2 regularisation
(``reg = 1e-3``), full-batch gradient descent with step size 0.5 (at 1, the case study's,
training on 3000 points turns unstable near step 300) and in-place updates
(``W1 += -lr * dW1``). The softmax is written the NumPy way: ``scores - max(axis=1,
keepdims=True)``, ``exp``, ``sum(axis=1, keepdims=True)``, ``log`` of ``probs[arange(n),
y]``. The loss of every step is kept (``losses.append(loss)``, stacked at the end).

The one difference between systems is where the gradient comes from: NumPy computes the
backward pass by hand (as in the case study: ``dscores[arange(n), y] -= 1``, ...); qtrace
takes ``qt.value_and_grad`` of the same ``loss`` function; JAX takes
``jax.value_and_grad`` of it.

Check: the relative error of the loss curve (every step's loss) and the norm-wise relative
error of the final weights, the larger of the two, vs the NumPy run, ≤ 1e-6. A
hand-written and an automatic backward pass round differently (~1e-16 relative per step);
gradient descent with this step size is stable (measured: a 1e-13 relative perturbation of
the initial weights changes the loss curve by at most ~2e-14 over 400 steps; JAX's automatic
gradient ends within ~4e-14 of the hand-written one's run at the full and quick sizes),
while a wrong gradient (a sign, a missing term) changes the curve by far more than 1e-6
and a missing step changes its length (error inf).
"""

from __future__ import annotations

import numpy as np

from ._common import norm_rel_err

NAME = "mlp"
K, D, REG, LR = 3, 2, 1e-3, 0.5
SIZES = {
    "tiny": [dict(m=20, hidden=8, steps=5)],
    "quick": [dict(m=100, hidden=100, steps=100)],
    "full": [dict(m=1000, hidden=100, steps=400)],
}
TOL = 1e-6
ERROR_KIND = "max rel err"


def title(prm) -> str:
    return (f"2-layer MLP on spirals (CS231n case study): {K * prm['m']} points, "
            f"{prm['hidden']} hidden tanh units, {prm['steps']} gradient steps, float64")


def spiral(m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.zeros((m * K, D))
    y = np.zeros(m * K, dtype=np.int64)
    for j in range(K):
        ix = slice(m * j, m * (j + 1))
        r = np.linspace(0.0, 1, m)
        t = np.linspace(j * 4, (j + 1) * 4, m) + rng.standard_normal(m) * 0.2
        X[ix] = np.c_[r * np.sin(t), r * np.cos(t)]
        y[ix] = j
    return X, y


def initial_weights(hidden: int, seed: int = 1) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (0.01 * rng.standard_normal((D, hidden)), np.zeros((1, hidden)),
            0.01 * rng.standard_normal((hidden, K)), np.zeros((1, K)))


def loss_fn(xp, W1, b1, W2, b2, X, y):
    """Mean softmax cross-entropy plus L2 regularisation."""
    hidden = xp.tanh(X @ W1 + b1)
    scores = hidden @ W2 + b2
    scores = scores - xp.max(scores, axis=1, keepdims=True)
    exp_scores = xp.exp(scores)
    probs = exp_scores / xp.sum(exp_scores, axis=1, keepdims=True)
    n = X.shape[0]
    data_loss = -xp.sum(xp.log(probs[xp.arange(n), y])) / n
    reg_loss = 0.5 * REG * xp.sum(W1 * W1) + 0.5 * REG * xp.sum(W2 * W2)
    return data_loss + reg_loss


def backprop(W1, b1, W2, b2, X, y):
    """NumPy: the loss and its gradient by hand (the case study's backward pass)."""
    n = X.shape[0]
    hidden = np.tanh(X @ W1 + b1)
    scores = hidden @ W2 + b2
    scores -= np.max(scores, axis=1, keepdims=True)
    exp_scores = np.exp(scores)
    probs = exp_scores / np.sum(exp_scores, axis=1, keepdims=True)
    data_loss = -np.sum(np.log(probs[np.arange(n), y])) / n
    loss = data_loss + 0.5 * REG * np.sum(W1 * W1) + 0.5 * REG * np.sum(W2 * W2)
    dscores = probs
    dscores[np.arange(n), y] -= 1
    dscores /= n
    dW2 = hidden.T @ dscores + REG * W2
    db2 = np.sum(dscores, axis=0, keepdims=True)
    dhidden = dscores @ W2.T
    dhidden *= 1 - hidden ** 2
    dW1 = X.T @ dhidden + REG * W1
    db1 = np.sum(dhidden, axis=0, keepdims=True)
    return loss, (dW1, db1, dW2, db2)


def value_and_grad(xp):
    """``(loss, (dW1, db1, dW2, db2))`` of the weights: by hand for NumPy, else the
    system's own ``value_and_grad`` of :func:`loss_fn`."""
    if xp is np:
        return backprop
    return xp.value_and_grad(lambda *args: loss_fn(xp, *args), argnums=(0, 1, 2, 3))


# --------------------------------------------------------------------------- NumPy style

def make_step(xp, prm):
    loss_and_grads = value_and_grad(xp)

    def step(W1, b1, W2, b2, X, y):
        loss, (dW1, db1, dW2, db2) = loss_and_grads(W1, b1, W2, b2, X, y)
        W1 += -LR * dW1
        b1 += -LR * db1
        W2 += -LR * dW2
        b2 += -LR * db2
        return W1, b1, W2, b2, loss

    return step


def program(xp, prm, step=None):
    X, y = (xp.asarray(a) for a in spiral(prm["m"]))
    W1, b1, W2, b2 = (xp.asarray(a) for a in initial_weights(prm["hidden"]))
    step = step or make_step(xp, prm)
    losses = []
    for _ in range(prm["steps"]):
        W1, b1, W2, b2, loss = step(W1, b1, W2, b2, X, y)
        losses.append(loss)
    return W1, b1, W2, b2, xp.stack(losses)


# --------------------------------------------------------------------------- JAX port

def make_jax(jax, prm):
    jnp = jax.numpy
    loss_and_grads = jax.value_and_grad(lambda *args: loss_fn(jnp, *args), argnums=(0, 1, 2, 3))

    @jax.jit
    def step(params, X, y):
        loss, grads = loss_and_grads(*params, X, y)
        return tuple(p - LR * g for p, g in zip(params, grads)), loss

    def run():
        X, y = (jnp.asarray(a) for a in spiral(prm["m"]))
        params = tuple(jnp.asarray(a) for a in initial_weights(prm["hidden"]))
        losses = []
        for _ in range(prm["steps"]):
            params, loss = step(params, X, y)
            losses.append(loss)
        return (*params, jnp.stack(losses))

    return run


def error(got, ref) -> float:
    """The larger of the loss curve's max relative error and the weights' norm-wise one."""
    if len(got) != len(ref) or got[-1].shape != ref[-1].shape:
        return float("inf")
    curve = np.abs(got[-1] - ref[-1]) / np.abs(ref[-1])
    curve = float(curve.max()) if np.all(np.isfinite(curve)) else float("inf")
    return max(curve, norm_rel_err(got[:-1], ref[:-1]))


def note(got) -> str:
    return f"loss {float(got[-1][0]):.4f} -> {float(got[-1][-1]):.4f}" if got else ""
