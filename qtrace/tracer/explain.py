"""``qt.explain``: how qtrace would compile a function, and why."""

from __future__ import annotations

from ..config import config
from ..graph.explain import Explanation, explain_nodes
from . import pending
from .jit import Jitted
from .tensor import Tensor


def explain(fn=None, *args, **kwargs) -> Explanation:
    """A report of the plan ``fn(*args, **kwargs)`` compiles to.

    Without arguments: the eager work pending on this thread — what the next evaluation
    would compute, as a plan, and the automatic-evaluation policy's state (operations
    pending, the loop anchor it cuts at; see the README's "Eager evaluation").

    Lists every range task (launch bounds, the operations fused into it, buffers read
    and written, estimated bytes moved, kernel cache key) and every fusion decision
    with the rule that accepted or rejected it. Prints as text; renders as a diagram in
    Jupyter. ``fn`` may be a ``qt.jit`` function (its static arguments are honoured).

    Example:
        >>> import qtrace as qt
        >>> report = qt.explain(lambda x: qt.sin(x) * 2 + 1, qt.ones(8))
        >>> report.n_kernels
        1
    """
    if fn is None:
        return explain_nodes(pending.pending_nodes(), config.fusion, pending.describe())
    jitted = fn if isinstance(fn, Jitted) else Jitted(fn)
    static, tree, descs = jitted.signature(args, kwargs)
    out_leaves, _, _, _ = jitted._trace_graph(static, tree, descs)
    nodes = tuple(leaf._node for leaf in out_leaves if isinstance(leaf, Tensor))
    return explain_nodes(nodes, config.fusion)
