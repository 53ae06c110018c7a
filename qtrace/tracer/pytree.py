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


def flatten(tree) -> tuple[list, tuple]:
    """Leaves in order and a hashable description of the structure.

    Example:
        >>> flatten({"b": 1, "a": (2, [3])})[0]
        [2, 3, 1]
    """
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
    return _functions(name)[1](spec, list(leaves))


def is_flat_tuple(treedef: tuple, n: int) -> bool:
    """Whether ``treedef`` is a plain tuple of ``n`` leaves.

    Example:
        >>> is_flat_tuple(flatten((1, 2))[1], 2), is_flat_tuple(flatten([1, 2])[1], 2)
        (True, False)
    """
    key = (treedef[0], n)
    flat = _flat_tuples.get(key)
    if flat is None:
        flat = _flat_tuples[key] = (treedef[0], _functions(treedef[0])[0](tuple(range(n)))[1])
    return treedef == flat
