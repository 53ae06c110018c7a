"""Sorting, searching, set functions and long scans: NumPy's on the CPU, CuPy's on a GPU.

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


@register("cumsum", DEVICES)
def _cumsum(xp, static, x):
    """Running sums along an axis (the input arrives in the result's dtype: int64, a float or
    complex type, summed in it as a scan task does); on a GPU CuPy's parallel scan (CUB),
    used for a few long rows (``qtrace.tracer.reductions``). CuPy takes its CUB path only
    for a flat scan (no ``axis``, no ``dtype``): each row is scanned flat."""
    (axis,) = static
    if xp is np:
        return [np.cumsum(x, axis=axis)]
    rows = xp.ascontiguousarray(xp.moveaxis(x, axis, -1))
    flat = rows.reshape(-1, rows.shape[-1])
    out = xp.empty_like(flat)
    for r in range(flat.shape[0]):
        xp.cumsum(flat[r], out=out[r])
    return [xp.moveaxis(out.reshape(rows.shape), -1, axis)]
