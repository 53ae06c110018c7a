"""Per-element loops: ``qt.fori_loop`` and ``qt.while_loop`` (JAX signatures).

The loop state is a pytree whose leaves broadcast to one shape ``S``. Each element of
``S`` iterates independently — as many times as its own trip count says (``upper`` may
be a tensor) or until its own condition is false (``cond_fun`` may return a boolean
tensor). The body is traced once on placeholders and becomes a loop *inside* one range
task, not an unrolled graph nor a host loop. A body may read other tensors (broadcast,
or gathered at data-dependent indices) but must not mix elements of the loop state.

Both loops are reverse-mode differentiable without a bound from the user: the adjoint
kernel replays each element's loop onto a per-worker stack and runs it backwards.
"""

from __future__ import annotations

import numpy as np

from ..errors import TracerError
from ..graph.loops import layout
from ..graph.node import make_input, toposort
from ..graph.primitives import PRIMITIVES, broadcast_shapes
from ..graph.subgraph import Subgraph, cut
from . import dtypes, pytree
from .context import record, trace_scope
from .convert import cast, operand, place, wrap
from .shape_ops import as_tensor, broadcast_to
from .tensor import Tensor


def _state_leaves(init_val, op: str):
    leaves, tree = pytree.flatten(init_val)
    if not leaves:
        raise TypeError(f"{op}: the loop state must contain at least one array")
    tensors = [x if isinstance(x, Tensor) else as_tensor(x, op) for x in leaves]
    return tensors, tree


class _ComplexState:
    """A loop state with complex leaves, carried as real ones: each complex leaf as its real
    and imaginary parts (a kernel's loop state is real numbers), the user's functions given
    the complex values (rebuilt exactly from the parts: ``complex_from_parts``) and their
    results split again. Differentiable as any other loop: the parts are real state, the
    complex arithmetic is the body's."""

    def __init__(self, op: str, init: list, tree):
        self.op, self.tree = op, tree
        self.dtypes = [t.dtype for t in init]
        self.parts = tuple(self.split(init))

    def split(self, leaves) -> list:
        """The real leaves of ``leaves`` (one per real leaf, two per complex one)."""
        from .array_api import imag, real
        out = []
        for x, dt in zip(leaves, self.dtypes):
            x = x if isinstance(x, Tensor) else as_tensor(x, self.op)
            if dt.kind == "c":
                if x.dtype != dt:   # (a real value for a complex leaf: imaginary part 0)
                    x = x.astype(dt)
                out += [real(x), imag(x)]
            else:
                out.append(x)
        return out

    def join(self, parts):
        """The user's state (its tree) from real leaves ``parts``."""
        from .array_api import complex_from_parts
        it = iter(parts)
        return pytree.unflatten(self.tree, [complex_from_parts(next(it), next(it)) if dt.kind == "c"
                                            else next(it) for dt in self.dtypes])

    def returned(self, value) -> tuple:
        """A body's result (the user's tree) as real leaves."""
        leaves, tree = pytree.flatten(value)
        if tree != self.tree:
            raise TypeError(f"{self.op}: the body must return the loop state's structure {self.tree}, "
                            f"got {tree}")
        leaves = [x if isinstance(x, Tensor) else as_tensor(x, self.op) for x in leaves]
        for k, (x, dt) in enumerate(zip(leaves, self.dtypes)):   # (numbered as the user's leaves)
            if dt.kind != "c" and x.dtype.kind == "c":
                raise TypeError(f"{self.op}: the body changes the dtype of state leaf {k} from {dt} "
                                f"to {x.dtype}")
        return tuple(self.split(leaves))


def _check_body(op: str, outputs, placeholders: dict, shape: tuple) -> None:
    """Reject bodies that mix elements of the loop state (or change its shape)."""
    dependent = set(placeholders)
    for n in toposort(outputs):
        if not any(id(i) in dependent for i in n.inputs):
            continue
        dependent.add(id(n))
        kind = PRIMITIVES[n.prim].kind
        if kind == "gather" and id(n.inputs[0]) in dependent:
            raise TracerError(f"{op}: the loop body gathers from a value computed from the loop state "
                              f"(gather of shape {n.inputs[0].shape}); a per-element loop may only "
                              "combine each element with itself and with other tensors")
        if kind == "loop":
            _check_inner_gathers(op, n, dependent)
        if kind in ("elementwise", "gather", "loop"):
            if n.shape != shape:
                raise TracerError(f"{op}: the loop body's {n.prim} produces shape {n.shape} from the "
                                  f"loop state of shape {shape}; per-element loops keep every value "
                                  "at the state's shape")
            continue
        raise TracerError(f"{op}: the loop body mixes elements of the loop state in {n.prim} "
                          f"(shape {n.inputs[0].shape} -> {n.shape}); per-element loops may only "
                          "combine each element with itself and with other tensors (gathers included)")


def _check_inner_gathers(op: str, loop, dependent: set) -> None:
    """A nested loop may not gather from a value of the enclosing body (only per element)."""
    sub = loop.params[2]
    first = layout(loop).captured.start
    inner = {id(leaf) for role, leaf in sub.placeholders.values()
             if role[0] == "captured" and id(loop.inputs[first + role[1]]) in dependent}
    for n in toposort(sub.outputs):
        if PRIMITIVES[n.prim].kind == "view" and id(n.inputs[0]) in inner:
            inner.add(id(n))
        elif PRIMITIVES[n.prim].kind == "gather" and id(n.inputs[0]) in inner:
            raise TracerError(f"{op}: an inner loop body gathers from a value computed from the "
                              f"enclosing loop's state (gather of shape {n.inputs[0].shape}); nested "
                              "loops may gather only from tensors computed outside every loop")


def _trace(op: str, fn_inputs, init, shape, dtypes_, tree, extra_out=None):
    """Trace a body; returns (Subgraph, captured nodes) for outputs new-state [+ extra]."""
    placeholders = {}
    states = []
    for k, (t, dt) in enumerate(zip(init, dtypes_)):
        leaf = make_input(shape, dt, t.device, buffer=None, weak=False)
        placeholders[id(leaf)] = ("state", k)
        states.append(Tensor(leaf))
    counter = None
    if fn_inputs == "counter":
        leaf = make_input(shape, dtypes.int64, init[0].device, buffer=None)
        placeholders[id(leaf)] = ("counter",)
        counter = Tensor(leaf)
    return states, counter, placeholders


def _finish(op: str, new_leaves, tree, new_tree, shape, dts, placeholders, prefix=()):
    if new_tree != tree:
        raise TypeError(f"{op}: the body must return the loop state's structure {tree}, got {new_tree}")
    outs = list(prefix)
    for k, (v, dt) in enumerate(zip(new_leaves, dts)):
        o = operand(v, op)
        (node,) = place([o], [o.dtype], op) if o.node is None else (o.node,)
        if node.dtype != dt:
            if np.can_cast(node.dtype, dt, "same_kind") or o.weak:
                node = cast(node, dt, weak=False)
            else:
                raise TypeError(f"{op}: the body changes the dtype of state leaf {k} from {dt} to "
                                f"{node.dtype}")
        if node.shape != shape:
            node = broadcast_to(wrap(node), shape)._node
        outs.append(node)
    _check_body(op, tuple(outs), placeholders, shape)
    new_outs, roles, captured = cut(tuple(outs), placeholders)
    return Subgraph(new_outs, roles), captured


def fori_loop(lower, upper, body_fun, init_val):
    """Run ``val = body_fun(i, val)`` for ``i`` in ``[lower, upper)``, per element.

    ``lower``/``upper`` may be integer tensors (per-element trip counts) broadcasting
    with the state; with Python ints every element iterates the same number of times.
    Differentiable in reverse mode with no bound from the user. The state may hold
    complex arrays (carried as their real and imaginary parts; the body sees complex
    values).

    Example:
        >>> import qtrace as qt
        >>> n = qt.asarray([0, 1, 3])
        >>> qt.fori_loop(0, n, lambda i, x: x * 2.0, qt.ones(3)).tolist()
        [1.0, 2.0, 8.0]
    """
    op = "qt.fori_loop"
    init, tree = _state_leaves(init_val, op)
    if any(t.dtype.kind == "c" for t in init):
        cs = _ComplexState(op, init, tree)
        return cs.join(fori_loop(lower, upper, lambda i, parts: cs.returned(body_fun(i, cs.join(parts))),
                                 cs.parts))
    lo, hi = operand(lower, op), operand(upper, op)
    for o, name in ((lo, "lower"), (hi, "upper")):
        if o.dtype.kind not in "iu":
            raise TypeError(f"{op}: {name} must be an integer (or integer tensor), got {o.dtype}")
    lo_node, hi_node = place([lo, hi], [dtypes.int64, dtypes.int64], op, init[0].device)
    shape = broadcast_shapes(op, *(t.shape for t in init), lo_node.shape, hi_node.shape)
    dts = [t.dtype for t in init]
    states, counter, placeholders = _trace(op, "counter", init, shape, dts, tree)
    with trace_scope():
        new = body_fun(counter, pytree.unflatten(tree, states))
    new_leaves, new_tree = pytree.flatten(new)
    sub, captured = _finish(op, new_leaves, tree, new_tree, shape, dts, placeholders)
    init_nodes = [broadcast_to(t, shape)._node for t in init]
    bounds = [broadcast_to(wrap(n), shape)._node for n in (lo_node, hi_node)]
    inputs = tuple(init_nodes + bounds + captured)
    m = len(init)
    out = [wrap(record("loop", inputs, ("fori", m, sub, k), shape, dts[k])) for k in range(m)]
    return pytree.unflatten(tree, out)


def while_loop(cond_fun, body_fun, init_val):
    """Run ``val = body_fun(val)`` while ``cond_fun(val)``, per element.

    ``cond_fun`` may return a boolean tensor: each element stops when its own condition
    becomes false. Differentiable in reverse mode with no bound from the user (the
    forward pass records each element's trip count). The state may hold complex arrays,
    as in :func:`fori_loop`.

    Example:
        >>> import qtrace as qt
        >>> x = qt.asarray([1.0, 5.0, 40.0])
        >>> qt.while_loop(lambda v: v < 10.0, lambda v: v * 2.0, x).tolist()
        [16.0, 10.0, 40.0]
    """
    op = "qt.while_loop"
    init, tree = _state_leaves(init_val, op)
    if any(t.dtype.kind == "c" for t in init):
        cs = _ComplexState(op, init, tree)
        return cs.join(while_loop(lambda parts: cond_fun(cs.join(parts)),
                                  lambda parts: cs.returned(body_fun(cs.join(parts))), cs.parts))
    shape = broadcast_shapes(op, *(t.shape for t in init))
    dts = [t.dtype for t in init]
    states, _, placeholders = _trace(op, None, init, shape, dts, tree)
    with trace_scope():
        c = cond_fun(pytree.unflatten(tree, states))
        new = body_fun(pytree.unflatten(tree, states))
    c = c if isinstance(c, Tensor) else as_tensor(c, op)
    if c.dtype != np.bool_:
        raise TypeError(f"{op}: cond_fun must return a boolean value, got dtype {c.dtype}")
    if broadcast_shapes(op, c.shape, shape) != shape:
        raise TracerError(f"{op}: cond_fun returns shape {c.shape}, which does not broadcast to the "
                          f"loop state's shape {shape}")
    cnode = broadcast_to(c, shape)._node if c.shape != shape else c._node
    new_leaves, new_tree = pytree.flatten(new)
    sub, captured = _finish(op, new_leaves, tree, new_tree, shape, dts, placeholders, prefix=(cnode,))
    init_nodes = [broadcast_to(t, shape)._node for t in init]
    inputs = tuple(init_nodes + captured)
    m = len(init)
    out = [wrap(record("loop", inputs, ("while", m, sub, k), shape, dts[k])) for k in range(m)]
    return pytree.unflatten(tree, out)


def trip_counts(t: Tensor) -> Tensor:
    """The per-element trip counts of the ``while_loop`` that produced ``t`` (int64)."""
    n = t._node
    if n.prim != "loop" or n.params[0] != "while":
        raise ValueError("qt.trip_counts: the tensor is not a while_loop output")
    kind, m, sub, _ = n.params
    return wrap(record("loop", n.inputs, (kind, m, sub, m), n.shape, dtypes.int64))
