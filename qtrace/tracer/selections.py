"""``x[mask]`` inside ``qt.jit``: a selection whose length depends on the data.

NumPy's ``x[mask]`` has one row per ``True`` element of ``mask``: a shape only the data
decides, which a compiled trace cannot have. Real programs use such selections in a few
ways — compute on them elementwise and write them back under the same mask
(``r[r > 0] = r[r > 0] ** -1.5``), pick trailing components (``F[wall, :][:, OPPOSITE]``),
reduce them — and every one of those has a fixed-shape equivalent: compute on all of
``x`` and keep the values where ``mask`` holds. A :class:`Selection` is that: the whole
array ``full`` (``x``'s shape, every element computed) and the ``mask`` over its leading
axes; only the elements under the mask are ever observed. The write
``y[mask] = selection`` becomes ``where(mask, full, y)`` — no gather, no per-element
rank, one compiled program for every number of ``True`` elements. Anything that would
need the number of rows (``.shape``, ``len``, reshaping, mixing two different masks)
raises a :class:`~qtrace.errors.TracerError` saying what to write instead.

Outside ``qt.jit`` ``x[mask]`` is an ordinary (gathered) tensor, as in NumPy.

Example:
    >>> import numpy as np, qtrace as qt
    >>> @qt.jit
    ... def clip_negative_powers(r):
    ...     r = r.copy()
    ...     r[r > 0] = r[r > 0] ** -0.5
    ...     return r
    >>> clip_negative_powers(qt.asarray(np.array([4.0, 0.0, -1.0, 16.0]))).tolist()
    [0.5, 0.0, -1.0, 0.25]
"""

from __future__ import annotations

from ..errors import TracerError
from ..graph.node import Node
from .tensor import Tensor

USES = ("elementwise arithmetic and functions, trailing indices (s[:, k]), sum/mean/max/min, "
        "and assignment under the same mask (y[mask] = s)")


def refuse(what: str) -> TracerError:
    return TracerError(
        f"{what}: x[mask] inside qt.jit has one row per True element of the mask, a number "
        f"that depends on the data; a selection supports {USES}. Otherwise compute on the "
        "whole array and use qt.where(mask, values, other), or call the function outside qt.jit")


class Selection:
    """``x[mask]`` while ``qt.jit`` traces (see the module docstring)."""

    __slots__ = ("full", "mask")
    __array_priority__ = 1001   # above qt.Tensor's: a mixed operation comes here

    def __init__(self, full: Tensor, mask: Node):
        self.full = full   # the computation on every element of x (x's shape)
        self.mask = mask   # bool over full's leading axes

    # -- what is known and what is not ------------------------------------------------
    @property
    def dtype(self):
        return self.full.dtype

    @property
    def ndim(self) -> int:
        return self.full.ndim - self.mask.ndim + 1

    @property
    def shape(self):
        raise refuse("qt.Tensor.shape")

    def __len__(self):
        raise refuse("len()")

    def __iter__(self):
        raise refuse("iteration")

    def __bool__(self):
        raise refuse("bool()")

    def __repr__(self) -> str:
        return f"Selection(x[mask] of {self.full.shape} {self.dtype}, mask over {self.mask.shape})"

    def __getattr__(self, name):
        if name.startswith("__"):  # protocol probes (hasattr(x, "__dlpack__")...): absent
            raise AttributeError(name)
        raise refuse(f"qt.Tensor.{name}")

    # -- elementwise ----------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from ..graph.primitives import ELEMENTWISE_UFUNCS
        if method != "__call__" or kwargs or ufunc.__name__ not in ELEMENTWISE_UFUNCS:
            raise refuse(f"numpy.{ufunc.__name__}")
        return elementwise(ufunc.__name__, inputs)

    # -- trailing components ----------------------------------------------------------------
    def __getitem__(self, key):
        """``s[:, k...]``: the same selection of ``x[..., k...]``."""
        from .indexing import getitem
        parts = key if type(key) is tuple else (key,)
        if not parts or not (isinstance(parts[0], slice) and parts[0] == slice(None)):
            raise refuse("qt.Tensor.__getitem__ (an index into the selected rows)")
        rest = parts[1:]
        if any(k is Ellipsis or k is None for k in rest):
            raise refuse("qt.Tensor.__getitem__ (an ellipsis or new axis after the rows)")
        return Selection(getitem(self.full, (slice(None),) * self.mask.ndim + rest), self.mask)

    # -- reductions (qt.sum(s) and s.sum() alike) ----------------------------------------
    def sum(self, axis=None, dtype=None, keepdims: bool = False):
        """Sum of the selected elements (``axis=None``) or of the selected rows (``axis=0``)."""
        return reduce("reduce_sum", "sum", self, axis, keepdims, dtype)

    def prod(self, axis=None, dtype=None, keepdims: bool = False):
        return reduce("reduce_prod", "prod", self, axis, keepdims, dtype)

    def max(self, axis=None, keepdims: bool = False):
        return reduce("reduce_max", "max", self, axis, keepdims)

    def min(self, axis=None, keepdims: bool = False):
        return reduce("reduce_min", "min", self, axis, keepdims)

    def any(self, axis=None, keepdims: bool = False):
        return reduce("reduce_any", "any", self, axis, keepdims)

    def all(self, axis=None, keepdims: bool = False):
        return reduce("reduce_all", "all", self, axis, keepdims)

    def mean(self, axis=None, dtype=None, keepdims: bool = False):
        """Mean of the selected elements or rows (NaN when nothing is selected, as NumPy)."""
        from .convert import wrap
        from .elementwise import apply
        from .reductions import sum as total
        if dtype is None and self.dtype.kind not in "fc":
            dtype = "float64"
        rows = total(wrap(self.mask))
        per_row = 1
        if axis is None:
            for d in self.full.shape[self.mask.ndim:]:
                per_row *= d
        return apply("divide", self.sum(axis, dtype, keepdims), apply("multiply", rows, per_row))


_FILL = {"reduce_sum": 0, "reduce_prod": 1, "reduce_any": False, "reduce_all": True}


def reduce(prim: str, name: str, s: Selection, axis, keepdims: bool, dtype=None):
    """Reduction ``prim`` over the selected elements (``axis=None``) or rows (``axis=0``):
    the whole array with the unselected elements set to the reduction's identity."""
    import numpy as np

    from . import reductions
    from .elementwise import where
    if axis not in (None, 0, (0,)) or keepdims:
        raise refuse(f"qt.{name}(axis={axis}, keepdims={keepdims})")
    if prim in _FILL:
        fill = _FILL[prim]
    elif s.dtype.kind == "f":
        fill = -np.inf if prim == "reduce_max" else np.inf
    elif s.dtype.kind == "b":
        fill = prim != "reduce_max"
    else:
        info = np.iinfo(s.dtype)
        fill = info.min if prim == "reduce_max" else info.max
    kept = where(_mask_over(s, s.full.ndim), s.full, fill)
    axes = None if axis is None else tuple(range(s.mask.ndim))
    return reductions.reduce_as(prim, name, kept, axes, dtype)


def _mask_over(s: Selection, ndim: int) -> Tensor:
    """The mask broadcast over ``s.full``'s trailing axes."""
    from . import views
    m = s.mask
    node = views.reshape_node(m, m.shape + (1,) * (ndim - m.ndim))
    return Tensor(views.broadcast_node(node, s.full.shape))


def same_mask(a: Node, b: Node) -> bool:
    """Whether two mask nodes are the same computation (recorded once, or equal structure
    over the same inputs)."""
    if a is b:
        return True
    return a.struct == b.struct and len(a.inputs) == len(b.inputs) and \
        all(same_mask(x, y) for x, y in zip(a.inputs, b.inputs))


def elementwise(name: str, args) -> Selection:
    """Elementwise ``name`` of selections (one mask) and operands that broadcast against
    one selected row (Python scalars, tensors of the trailing shape)."""
    from .context import ad_level
    from .elementwise import apply
    sels = [a for a in args if type(a) is Selection]
    mask = sels[0].mask
    trail = sels[0].full.shape[mask.ndim:]
    full = []
    for a in args:
        if type(a) is Selection:
            if not same_mask(a.mask, mask):
                raise refuse(f"qt.{name} of selections by two different masks")
            full.append(a.full)
        else:
            nd = getattr(a, "ndim", 0)
            if nd > len(trail):
                raise refuse(f"qt.{name} of a selection and an array of shape {a.shape} "
                             f"(only arrays broadcasting against one row, {trail}, combine)")
            full.append(a)
    if ad_level():
        full = [_gated(a, sels[0]) if isinstance(a, Tensor) else a for a in full]
    return Selection(apply(name, *full), mask)


def _gated(x: Tensor, s: Selection) -> Tensor:
    """``x`` (broadcast to the selection's whole shape) whose gradient flows only where the
    mask holds: ``where(mask, x, stop_gradient(x))``.

    The unselected elements are computed but never observed; an operation may give them
    inf or NaN (``r ** -1.5`` of a negative ``r``), and its derivative there too. Their
    cotangent is zero, but zero times NaN is NaN: gating each operand after the local
    derivative keeps them out of the gradient, as NumPy code that never computed them.
    """
    from . import views
    from .elementwise import stop_gradient, where
    b = Tensor(views.broadcast_node(x._node, s.full.shape)) if x.shape != s.full.shape else x
    return where(_mask_over(s, s.full.ndim), b, stop_gradient(b))


def written_under(mask: Tensor, s: Selection, shape: tuple, op: str) -> Node:
    """The values ``y[mask] = s`` writes, as a node of ``y``'s ``shape`` (used where
    ``mask`` holds)."""
    from . import views
    if not same_mask(mask._node, s.mask):
        raise refuse(f"{op}: a selection assigned under another mask")
    full = s.full._node
    if full.shape[:s.mask.ndim] != shape[:s.mask.ndim]:
        raise ValueError(f"{op}: a selection of an array of shape {full.shape} cannot be assigned "
                         f"to an array of shape {shape}")
    return views.broadcast_node(full, shape)


def _binary(name: str, reflected: bool = False):
    if reflected:
        return lambda self, other: elementwise(name, (other, self))
    return lambda self, other: elementwise(name, (self, other))


for _dunder, _prim in {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
                       "floordiv": "floor_divide", "mod": "remainder", "pow": "power",
                       "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor"}.items():
    setattr(Selection, f"__{_dunder}__", _binary(_prim))
    setattr(Selection, f"__r{_dunder}__", _binary(_prim, reflected=True))
for _dunder, _prim in {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
                       "eq": "equal", "ne": "not_equal"}.items():
    setattr(Selection, f"__{_dunder}__", _binary(_prim))
for _dunder, _prim in {"neg": "negative", "pos": "positive", "abs": "absolute",
                       "invert": "invert"}.items():
    setattr(Selection, f"__{_dunder}__", lambda self, _p=_prim: elementwise(_p, (self,)))
Selection.__hash__ = None
