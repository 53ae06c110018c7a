"""Sorting, searching and set functions: NumPy's on the CPU, CuPy's on a GPU.

Each takes the call's static arguments and its input arrays and returns one array per
output (see :mod:`qtrace.devices.library`).
"""

from __future__ import annotations

import numpy as np

from .library import DEVICES, register


def _stable_argsort(xp, x, axis):
    if xp is np:
        return np.argsort(x, axis=axis, kind="stable")
    return xp.argsort(x, axis=axis)  # CuPy's sorts are stable (radix sort)


@register("sort", DEVICES)
def _sort(xp, static, x):
    axis, descending = static
    if descending:  # stable among equal keys, like the standard asks: reverse a stable sort of -x
        order = xp.flip(_stable_argsort(xp, xp.flip(x, axis), axis), axis)
        order = x.shape[axis] - 1 - order
    else:
        order = _stable_argsort(xp, x, axis)
    return [xp.take_along_axis(x, order, axis), order]


@register("searchsorted", DEVICES)
def _searchsorted(xp, static, a, v):
    (side,) = static
    return [xp.searchsorted(a, v, side=side)]


@register("isin", DEVICES)
def _isin(xp, static, a, b):
    (invert,) = static
    return [xp.isin(a, b, invert=invert)]


@register("nextafter", DEVICES)
def _nextafter(xp, static, a, b):
    return [xp.nextafter(a, b)]
