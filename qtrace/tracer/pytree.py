"""Pytrees: nested containers of leaves (tuples, lists, dicts, namedtuples, ``None``, and
any container registered with the library below), flattened by a well-kept library.

When JAX has been imported in this process, by ``jax.tree_util``: containers a user
registered with JAX (``jax.tree_util.register_pytree_node``, ``@register_dataclass``, a
Flax or Equinox module) then flatten the same way in ``qt.jit``, ``qt.grad``, the loops
and ``qt.to_jax``. Otherwise by ``optree`` (register containers with
``optree.register_pytree_node(cls, flatten, unflatten, namespace="qtrace")``). Both treat ``None`` as an empty
container and sort dict keys; a tensor or any unregistered object is a leaf.

A structure (``treedef``) is ``(library, its treedef)``: hashable, equal only to the same
structure flattened by the same library, and unflattened by the library that made it.

Plain tuples of plain leaves (tensors, NumPy arrays and scalars, Python numbers), with an
empty dict beside them — what ``f(x, y)`` passes to ``qt.jit`` — are flattened here
without either library (``"plain"`` structures): every library reads them the same way, and
a process that only calls functions on arrays never imports one (importing optree is ~15 ms
of a cold start).
"""

from __future__ import annotations

import importlib.util
import sys

NAMESPACE = "qtrace"   # optree's namespace of containers registered for qtrace
_libs: dict = {}
_flat_tuples: dict = {}
_has_optree: bool | None = None   # found on the path (checked once)


def _jax_tree():
    import jax.tree_util as tu
    return tu.tree_flatten, tu.tree_unflatten


def _optree():
    try:
        import optree
    except ImportError:
        raise ImportError("qtrace needs optree for pytrees: pip install optree") from None

    def flatten(tree):
        return optree.tree_flatten(tree, none_is_leaf=False, namespace=NAMESPACE)
    return flatten, optree.tree_unflatten


def _library() -> str:
    """The library flattening now: JAX's once imported; else optree — or JAX's from the
    start where optree is missing (qtrace put on a path without its dependencies), so
    that importing JAX later does not change every structure (a retrace per function)."""
    if "jax" in sys.modules:
        return "jax"
    global _has_optree
    if _has_optree is None:
        _has_optree = importlib.util.find_spec("optree") is not None
    return "optree" if _has_optree else "jax"


def _functions(name: str) -> tuple:
    fns = _libs.get(name)
    if fns is None:
        fns = _libs[name] = _jax_tree() if name == "jax" else _optree()
    return fns


_LEAF = "*"            # a leaf's place in a plain structure
_plain_leaves: tuple = ()   # exact types read as leaves by every library (set at first use)


def _plain(tree, leaves: list):
    """The plain structure of ``tree`` (tuples of ``_LEAF``s and ``{}`` for empty dicts),
    its leaves appended to ``leaves``; None if it holds anything else."""
    kind = type(tree)
    if kind is tuple:
        parts = []
        for item in tree:
            part = _plain(item, leaves)
            if part is None:
                return None
            parts.append(part)
        return tuple(parts)
    if kind is dict:
        return "{}" if not tree else None
    if kind in _plain_leaves or isinstance(tree, _plain_leaves[-1]):
        leaves.append(tree)
        return _LEAF
    return None


def _rebuild(part, leaves):
    if part == _LEAF:
        return next(leaves)
    if part == "{}":
        return {}
    return tuple(_rebuild(p, leaves) for p in part)


def flatten(tree) -> tuple[list, tuple]:
    """Leaves in order and a hashable description of the structure.

    Example:
        >>> flatten({"b": 1, "a": (2, [3])})[0]
        [2, 3, 1]
    """
    global _plain_leaves
    if not _plain_leaves:
        import numpy as np

        from .tensor import Tensor
        _plain_leaves = (Tensor, np.ndarray, int, float, complex, bool, np.generic)
    leaves: list = []
    part = _plain(tree, leaves)
    if part is not None:
        return leaves, ("plain", part)
    name = _library()
    leaves, spec = _functions(name)[0](tree)
    return leaves, (name, spec)


def unflatten(treedef: tuple, leaves) -> object:
    """Inverse of :func:`flatten`.

    Example:
        >>> leaves, tree = flatten({"b": 1, "a": (2, [3])})
        >>> sorted(unflatten(tree, [x * 10 for x in leaves]).items())
        [('a', (20, [30])), ('b', 10)]
    """
    name, spec = treedef
    if name == "plain":
        return _rebuild(spec, iter(leaves))
    return _functions(name)[1](spec, list(leaves))


def is_flat_tuple(treedef: tuple, n: int) -> bool:
    """Whether ``treedef`` is a plain tuple of ``n`` leaves.

    Example:
        >>> is_flat_tuple(flatten((1, 2))[1], 2), is_flat_tuple(flatten([1, 2])[1], 2)
        (True, False)
    """
    if treedef[0] == "plain":
        return treedef[1] == (_LEAF,) * n
    key = (treedef[0], n)
    flat = _flat_tuples.get(key)
    if flat is None:
        flat = _flat_tuples[key] = (treedef[0], _functions(treedef[0])[0](tuple(range(n)))[1])
    return treedef == flat
