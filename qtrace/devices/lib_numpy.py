"""CPU implementations of library functions, by NumPy (its sorts, LAPACK, pocketfft).

Each takes the call's static arguments and its input arrays and returns one array per
output (see :mod:`qtrace.devices.library`).
"""

from __future__ import annotations

import numpy as np

from .library import register


@register("sort")
def _sort(static, x):
    axis, descending = static
    if descending:  # stable among equal keys, like the standard asks: reverse a stable sort of -x
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = x.shape[axis] - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    return [np.take_along_axis(x, order, axis), order]


@register("searchsorted")
def _searchsorted(static, a, v):
    (side,) = static
    return [np.searchsorted(a, v, side=side)]


@register("isin")
def _isin(static, a, b):
    (invert,) = static
    return [np.isin(a, b, invert=invert)]


@register("nextafter")
def _nextafter(static, a, b):
    return [np.nextafter(a, b)]
