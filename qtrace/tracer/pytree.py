"""Pytrees: nested tuples, lists and dicts (and ``None``) with array leaves."""

from __future__ import annotations


def flatten(tree) -> tuple[list, tuple]:
    """Leaves in order and a hashable description of the structure.

    Example:
        >>> flatten({"b": 1, "a": (2, [3])})[0]
        [2, 3, 1]
    """
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves: list) -> tuple:
    if tree is None:
        return ("none",)
    if isinstance(tree, tuple):
        kind = "namedtuple" if hasattr(tree, "_fields") else "tuple"
        return (kind, type(tree), tuple(_flatten(t, leaves) for t in tree))
    if isinstance(tree, list):
        return ("list", list, tuple(_flatten(t, leaves) for t in tree))
    if isinstance(tree, dict):
        keys = tuple(sorted(tree))
        return ("dict", keys, tuple(_flatten(tree[k], leaves) for k in keys))
    leaves.append(tree)
    return ("leaf",)


def unflatten(treedef: tuple, leaves) -> object:
    """Inverse of :func:`flatten`."""
    it = iter(leaves)
    return _unflatten(treedef, it)


def _unflatten(td: tuple, it):
    kind = td[0]
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    if kind == "dict":
        return {k: _unflatten(c, it) for k, c in zip(td[1], td[2])}
    children = [_unflatten(c, it) for c in td[2]]
    if kind == "namedtuple":
        return td[1](*children)
    return td[1](children)
