"""``qt.vjp``, ``qt.grad`` and ``qt.value_and_grad``: reverse mode on recorded graphs."""

from __future__ import annotations

import functools

from ..tracer import pending, pytree
from ..tracer.context import ad_scope, record
from ..tracer.convert import wrap
from ..tracer.creation import asarray, ones_like, zeros_like
from ..tracer.elementwise import stop_gradient  # noqa: F401 - part of the AD API
from ..tracer.tensor import Tensor
from .loops import ADJOINTS, reuse_replays
from .reverse import backward


def _mark(x, level: int, index: int, op: str) -> Tensor:
    t = x if isinstance(x, Tensor) else asarray(x)
    if t.dtype.kind not in "fc":
        raise TypeError(f"{op}: can only differentiate with respect to floating-point (or complex) inputs; "
                        f"argument {index} has dtype {t.dtype}")
    n = t._node
    return wrap(record("wrt", (n,), (level, index), n.shape, n.dtype, weak=n.weak))


def _share_replays(out: Tensor, grads: tuple):
    """The value and gradients, with loop results read from their adjoints' replays."""
    leaves, tree = pytree.flatten(grads)
    nodes = (out._node,) + tuple(g._node for g in leaves)
    new = reuse_replays(nodes)
    if all(a is b for a, b in zip(new, nodes)):
        return out, grads
    return wrap(new[0]), pytree.unflatten(tree, [wrap(n) for n in new[1:]])


def _as_tensor_out(x, op: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return asarray(x)


def vjp(fn, *primals, has_aux: bool = False):
    """``(fn(*primals), vjp_fn)``; ``vjp_fn(cotangent)`` returns one cotangent per primal.

    ``vjp_fn`` may be called many times (each call builds the backward graph again; its
    compiled plan is cached by content hash, so only the first call compiles).

    Example:
        >>> import qtrace as qt
        >>> y, f_vjp = qt.vjp(lambda x: qt.sin(x) * 2.0, qt.asarray([0.0, 1.0]))
        >>> [round(v, 4) for v in f_vjp(qt.ones(2))[0].tolist()]
        [2.0, 1.0806]
    """
    leaves, tree = pytree.flatten(primals)
    with ad_scope() as level:
        marked = [_mark(x, level, i, "qt.vjp") for i, x in enumerate(leaves)]
        # taken now: `x[i] = v` inside fn rebinds the tensor object to a new node
        wrt = [m._node for m in marked]
        result = fn(*pytree.unflatten(tree, marked))
    if has_aux:
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError("qt.vjp(has_aux=True): the function must return a pair (output, aux)")
        result, aux = result
    out_leaves, out_tree = pytree.flatten(result)
    out_leaves = [_as_tensor_out(o, "qt.vjp") for o in out_leaves]
    pending.note_results(out_leaves)
    if has_aux:
        pending.note_results([a for a in pytree.flatten(aux)[0] if isinstance(a, Tensor)])
    out = pytree.unflatten(out_tree, out_leaves)
    out_nodes = [o._node for o in out_leaves]  # evaluating `out` later must not cut the graph

    def vjp_fn(cotangent):
        ct_leaves, ct_tree = pytree.flatten(cotangent)
        if ct_tree != out_tree:
            raise ValueError("qt.vjp: the cotangent's structure differs from the output's")
        cts = []
        for o, c in zip(out_leaves, ct_leaves):
            c = asarray(c) if not isinstance(c, Tensor) else c
            if c.shape != o.shape:
                raise ValueError(f"qt.vjp: cotangent shape {c.shape} differs from output shape {o.shape}")
            cts.append(c)
        grads = backward(out_nodes, cts, wrt)
        grads = [g if g is not None else zeros_like(wrap(w)) for g, w in zip(grads, wrt)]
        return tuple(pytree.unflatten(tree, grads))

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def value_and_grad(fn, argnums=0, has_aux: bool = False):
    """A function returning ``(fn(*args), gradient of fn w.r.t. args[argnums])``.

    ``fn`` must return a scalar (0-d floating tensor); with ``has_aux=True`` it returns
    ``(scalar, aux)`` and the result is ``((value, aux), grad)``.

    Example:
        >>> import qtrace as qt
        >>> f = qt.value_and_grad(lambda x: qt.sum(x * x))
        >>> v, g = f(qt.asarray([1.0, 2.0]))
        >>> float(v), g.tolist()
        (5.0, [2.0, 4.0])
    """
    multiple = isinstance(argnums, (tuple, list))
    nums = tuple(argnums) if multiple else (argnums,)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        for i in nums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"qt.grad: argnums {argnums} out of range for {len(args)} arguments")
        chosen = [args[i] for i in nums]

        def partial(*diff):
            full = list(args)
            for i, d in zip(nums, diff):
                full[i] = d
            return fn(*full, **kwargs)

        res = vjp(partial, *chosen, has_aux=has_aux)
        out, vjp_fn = res[0], res[1]
        if not isinstance(out, Tensor) or out.shape != ():
            shape = out.shape if isinstance(out, Tensor) else type(out).__name__
            raise TypeError(f"qt.grad: the function must return a scalar (shape ()), got {shape}; "
                            "use qt.vjp for non-scalar outputs")
        if out.dtype.kind != "f":
            raise TypeError(f"qt.grad: the function must return a floating-point scalar, got {out.dtype}")
        adjoints = ADJOINTS[0]
        grads = vjp_fn(ones_like(out))
        if ADJOINTS[0] != adjoints:  # (a walk over the whole pending graph otherwise wasted)
            out, grads = _share_replays(out, grads)
        g = grads if multiple else grads[0]
        value = (out, res[2]) if has_aux else out
        return value, g

    return wrapped


def grad(fn, argnums=0, has_aux: bool = False):
    """The gradient of scalar-valued ``fn`` w.r.t. argument(s) ``argnums`` (reverse mode).

    Works on eager code and under ``qt.jit`` in both orders; arguments may be pytrees.

    Example:
        >>> import qtrace as qt
        >>> df = qt.grad(lambda x: qt.sum(qt.sin(x)))
        >>> [round(v, 4) for v in df(qt.asarray([0.0, 1.0])).tolist()]
        [1.0, 0.5403]
    """
    vg = value_and_grad(fn, argnums, has_aux)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapped
