"""Where in the user's program an operation was recorded, for errors found at evaluation.

An out-of-range index is found when the kernel runs, often much later than the line
that recorded the bad ``x[idx]`` (an evaluation may be an automatic cut in another
part of the program). Operations whose kernels check data (gathers, scatters) note the
user's source line when they are recorded; an error raised at evaluation names them.
"""

from __future__ import annotations

import linecache
import sys
import weakref

from .node import Node, toposort

_where: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def user_frame(skip: int = 1):
    """The innermost frame outside qtrace (the user's code), or None."""
    f = sys._getframe(skip + 1)
    while f is not None and f.f_globals.get("__name__", "").startswith("qtrace"):
        f = f.f_back
    return f


def remember(node: Node) -> Node:
    """Note the user's source line recording ``node``; returns ``node``."""
    f = user_frame(1)
    if f is not None:
        _where[node] = (f.f_code.co_filename, f.f_lineno)
    return node


def recorded_at(nodes: tuple, prims: tuple) -> list[str]:
    """``"file:line: source"`` of every node of ``prims`` in the graph of ``nodes`` whose
    recording was noted (first recorded first)."""
    out = []
    for n in toposort(nodes):
        if n.prim in prims and n in _where:
            filename, line = _where[n]
            text = linecache.getline(filename, line).strip()
            entry = f"{filename}:{line}" + (f": {text}" if text else "")
            if entry not in out:
                out.append(entry)
    return out
