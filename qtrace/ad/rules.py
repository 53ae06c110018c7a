"""VJP rules: one block per primitive, written with public qtrace operations.

A rule takes ``(node, ct, xs, out)`` — the graph node, the cotangent of its output,
its inputs and its output as tensors — and returns one cotangent (or ``None``: no
gradient flows) per input. Because the rules use ordinary operations, the backward
graph is an ordinary graph: partitioned, fused, compiled and cached like any other.
Ties follow JAX: ``maximum``/``minimum`` split the gradient equally between equal
operands, ``max``/``min`` reductions share it among all maximal elements.
"""

from __future__ import annotations

import math

from ..graph.primitives import in_range
from ..tracer import elementwise as ew
from ..tracer import indexing, linalg, reductions, shape_ops, views
from ..tracer.array_api import imag, real
from ..tracer.convert import astype, wrap
from ..tracer.creation import ones_like, zeros, zeros_like
from ..tracer.tensor import Tensor

VJP: dict = {}
NONDIFFERENTIABLE = frozenset({
    "signbit", "stop_gradient",
    "floor", "ceil", "trunc", "rint", "sign", "floor_divide", "isnan", "isinf", "isfinite",
    "logical_and", "logical_or", "logical_not", "logical_xor", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "bitwise_and", "bitwise_or", "bitwise_xor",
    "invert", "left_shift", "right_shift", "argmax", "argmin", "reduce_any", "reduce_all",
    "gcd", "lcm", "bitwise_count", "frexp_exponent",
})


def vjp_rule(*names):
    def deco(fn):
        for n in names:
            VJP[n] = fn
        return fn
    return deco


def rule_for(prim: str):
    if prim in NONDIFFERENTIABLE:
        return None
    try:
        return VJP[prim]
    except KeyError:
        raise NotImplementedError(f"qtrace: primitive {prim!r} has no VJP rule (reverse mode)") from None


def _reshaped(t: Tensor, shape: tuple) -> Tensor:
    """``t`` reshaped as a new value, not a view: cotangents are never written through, so
    the NumPy view machinery (a storage, a registered view) would be pure cost here."""
    return t if t.shape == shape else wrap(views.reshape_node(t._node, shape))


def _broadcast_value(t: Tensor, shape: tuple) -> Tensor:
    """``t`` broadcast to ``shape`` as a new value (see :func:`_reshaped`)."""
    return t if t.shape == shape else wrap(views.broadcast_node(t._node, shape))


def unbroadcast(ct: Tensor, shape: tuple) -> Tensor:
    """Sum ``ct`` over the axes that broadcasting added or stretched to reach its shape."""
    if ct.shape == shape:
        return ct
    lead = ct.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and ct.shape[lead + i] != 1)
    summed = reductions.sum(ct, axis=axes) if axes else ct
    return _reshaped(summed, shape)


def _ew(fn):
    """An elementwise rule whose per-input results are unbroadcast to the input shapes."""
    def rule(node, ct, xs, out):
        return [None if g is None else unbroadcast(g, x.shape) for g, x in zip(fn(ct, xs, out), xs)]
    return rule


mul, add, sub, div, neg = ew.multiply, ew.add, ew.subtract, ew.divide, ew.negative


@vjp_rule("add")
@_ew
def _add(ct, xs, out):
    return [ct, ct]


@vjp_rule("subtract")
@_ew
def _subtract(ct, xs, out):
    return [ct, neg(ct)]


@vjp_rule("multiply")
@_ew
def _multiply(ct, xs, out):
    x, y = xs
    return [mul(ct, y), mul(ct, x)]


@vjp_rule("divide")
@_ew
def _divide(ct, xs, out):
    x, y = xs
    return [div(ct, y), neg(div(mul(ct, out), y))]


@vjp_rule("power")
@_ew
def _power(ct, xs, out):
    x, y = xs
    # d/dx = y * x**(y-1) (0 where y == 0); d/dy = log(x) * x**y with log(0) replaced by 0
    dx = ew.where(ew.equal(y, 0), 0.0, mul(y, ew.power(x, sub(y, 1))))
    dy = mul(ew.log(ew.where(ew.equal(x, 0), 1.0, x)), out)
    return [mul(ct, dx), mul(ct, dy)]


@vjp_rule("negative")
@_ew
def _negative(ct, xs, out):
    return [neg(ct)]


@vjp_rule("positive", "wrt")
@_ew
def _positive(ct, xs, out):
    return [ct]


@vjp_rule("abs")
@_ew
def _abs(ct, xs, out):
    if xs[0].dtype.kind == "c":  # JAX's convention: ct * conj(z) / |z| (0 at z = 0),
        # written with differentiable operations (sign is not), so it has a second derivative
        return [mul(ct, ew.conj(div(xs[0], ew.where(ew.equal(out, 0), 1.0, out))))]
    return [mul(ct, ew.sign(xs[0]))]


@vjp_rule("copysign")
@_ew
def _copysign(ct, xs, out):
    x, y = xs  # |x| with y's sign: d/dx = sign(x) * sign(out), nothing flows to y
    return [mul(ct, mul(ew.copysign(1.0, x), ew.copysign(1.0, out))), None]


@vjp_rule("conj")
@_ew
def _conj(ct, xs, out):
    return [ew.conj(ct)]


@vjp_rule("real")
def _real(node, ct, xs, out):
    return [astype(ct, xs[0].dtype)]


@vjp_rule("imag")
def _imag(node, ct, xs, out):
    return [mul(astype(ct, xs[0].dtype), -1j)]


@vjp_rule("complex")
def _complex(node, ct, xs, out):
    # JAX's convention (complex_p's transpose): x gets real(ct), y gets -imag(ct)
    return [real(ct), neg(imag(ct))]


@vjp_rule("angle")
def _angle(node, ct, xs, out):
    z = xs[0]  # d angle = -(1j * conj(z)) / |z|**2, times the real cotangent
    r2 = mul(z, ew.conj(z))
    return [mul(ct, div(mul(ew.conj(z), -1j), r2))]


@vjp_rule("sqrt")
@_ew
def _sqrt(ct, xs, out):
    return [div(mul(ct, 0.5), out)]


@vjp_rule("square")
@_ew
def _square(ct, xs, out):
    return [mul(ct, mul(xs[0], 2.0))]


@vjp_rule("reciprocal")
@_ew
def _reciprocal(ct, xs, out):
    return [neg(mul(ct, mul(out, out)))]


@vjp_rule("exp")
@_ew
def _exp(ct, xs, out):
    return [mul(ct, out)]


@vjp_rule("exp2")
@_ew
def _exp2(ct, xs, out):
    return [mul(ct, mul(out, math.log(2.0)))]


@vjp_rule("expm1")
@_ew
def _expm1(ct, xs, out):
    return [mul(ct, add(out, 1.0))]


@vjp_rule("log")
@_ew
def _log(ct, xs, out):
    return [div(ct, xs[0])]


@vjp_rule("log2")
@_ew
def _log2(ct, xs, out):
    return [div(ct, mul(xs[0], math.log(2.0)))]


@vjp_rule("log10")
@_ew
def _log10(ct, xs, out):
    return [div(ct, mul(xs[0], math.log(10.0)))]


@vjp_rule("log1p")
@_ew
def _log1p(ct, xs, out):
    return [div(ct, add(xs[0], 1.0))]


@vjp_rule("sin")
@_ew
def _sin(ct, xs, out):
    return [mul(ct, ew.cos(xs[0]))]


@vjp_rule("cos")
@_ew
def _cos(ct, xs, out):
    return [neg(mul(ct, ew.sin(xs[0])))]


@vjp_rule("tan")
@_ew
def _tan(ct, xs, out):
    return [mul(ct, add(mul(out, out), 1.0))]


@vjp_rule("arcsin")
@_ew
def _arcsin(ct, xs, out):
    x = xs[0]
    return [div(ct, ew.sqrt(sub(1.0, mul(x, x))))]


@vjp_rule("arccos")
@_ew
def _arccos(ct, xs, out):
    x = xs[0]
    return [neg(div(ct, ew.sqrt(sub(1.0, mul(x, x)))))]


@vjp_rule("arctan")
@_ew
def _arctan(ct, xs, out):
    x = xs[0]
    return [div(ct, add(mul(x, x), 1.0))]


@vjp_rule("arctan2")
@_ew
def _arctan2(ct, xs, out):
    y, x = xs
    r2 = add(mul(x, x), mul(y, y))
    return [div(mul(ct, x), r2), neg(div(mul(ct, y), r2))]


@vjp_rule("sinh")
@_ew
def _sinh(ct, xs, out):
    return [mul(ct, ew.cosh(xs[0]))]


@vjp_rule("cosh")
@_ew
def _cosh(ct, xs, out):
    return [mul(ct, ew.sinh(xs[0]))]


@vjp_rule("tanh")
@_ew
def _tanh(ct, xs, out):
    return [mul(ct, sub(1.0, mul(out, out)))]


@vjp_rule("arcsinh")
@_ew
def _arcsinh(ct, xs, out):
    x = xs[0]
    return [div(ct, ew.sqrt(add(mul(x, x), 1.0)))]


@vjp_rule("arccosh")
@_ew
def _arccosh(ct, xs, out):
    x = xs[0]
    return [div(ct, mul(ew.sqrt(sub(x, 1.0)), ew.sqrt(add(x, 1.0))))]


@vjp_rule("arctanh")
@_ew
def _arctanh(ct, xs, out):
    x = xs[0]
    return [div(ct, sub(1.0, mul(x, x)))]


@vjp_rule("hypot")
@_ew
def _hypot(ct, xs, out):
    # x / hypot(x, y); at the origin 0 (JAX's value there), not 0/0
    x, y = xs
    zero = ew.equal(out, 0.0)
    safe = ew.where(zero, 1.0, out)
    return [ew.where(zero, 0.0, div(mul(ct, x), safe)), ew.where(zero, 0.0, div(mul(ct, y), safe))]


@vjp_rule("minimum", "maximum")
def _minmax(node, ct, xs, out):
    x, y = xs
    better = ew.less if node.prim == "minimum" else ew.greater
    half = mul(ct, 0.5)
    gx = ew.where(better(x, y), ct, ew.where(ew.equal(x, y), half, 0.0))
    gy = ew.where(better(y, x), ct, ew.where(ew.equal(x, y), half, 0.0))
    return [unbroadcast(gx, x.shape), unbroadcast(gy, y.shape)]


@vjp_rule("remainder")
@_ew
def _remainder(ct, xs, out):
    x, y = xs
    return [ct, neg(mul(ct, ew.floor_divide(x, y)))]


@vjp_rule("fmod")
@_ew
def _fmod(ct, xs, out):
    x, y = xs  # x - trunc(x / y) * y (JAX's rem)
    return [ct, neg(mul(ct, ew.trunc(div(x, y))))]


@vjp_rule("cbrt")
@_ew
def _cbrt(ct, xs, out):
    return [div(ct, mul(mul(out, out), 3.0))]   # inf at 0, as JAX


@vjp_rule("ldexp")
@_ew
def _ldexp(ct, xs, out):
    return [ew.ldexp(ct, xs[1]), None]          # x * 2**n: exact scaling of ct


@vjp_rule("frexp")
@_ew
def _frexp(ct, xs, out):
    # the mantissa is x * 2**-e: 1 at zeros, infinities and NaN (e == 0), as JAX
    return [ew.ldexp(ct, neg(ew.frexp_exponent(xs[0])))]


@vjp_rule("select")
def _select(node, ct, xs, out):
    c, x, y = xs
    return [None, unbroadcast(ew.where(c, ct, 0.0), x.shape), unbroadcast(ew.where(c, 0.0, ct), y.shape)]


@vjp_rule("convert")
def _convert(node, ct, xs, out):
    (x,) = xs
    if x.dtype.kind not in "fc" or out.dtype.kind not in "fc":
        return [None]
    return [astype(ct, x.dtype)]  # complex -> real keeps the real part, as JAX


# --- reductions -----------------------------------------------------------------------
def _expand_back(ct: Tensor, node) -> Tensor:
    """``ct`` of a reduction broadcast back over the reduced axes of the input."""
    src = node.inputs[0]
    axes = node.params[0]
    kept = _reshaped(ct, tuple(1 if a in axes else d for a, d in enumerate(src.shape)))
    return _broadcast_value(kept, src.shape)


@vjp_rule("reduce_sum")
def _reduce_sum(node, ct, xs, out):
    return [_expand_back(ct, node)]


@vjp_rule("reduce_prod")
def _reduce_prod(node, ct, xs, out):
    # the product of the other elements, exact with zeros (like JAX): prod/x where no zero
    # is reduced, the product of the non-zeros at the single zero, 0 elsewhere
    x = xs[0]
    axes = node.params[0]
    is_zero = ew.equal(x, 0)
    n_zeros = _expand_back(reductions.sum(astype(is_zero, x.dtype), axis=axes), node)
    nonzero = ew.where(is_zero, 1.0, x)
    p_nonzero = _expand_back(reductions.prod(nonzero, axis=axes), node)
    others = ew.where(ew.equal(n_zeros, 0), div(p_nonzero, nonzero),
                      ew.where(ew.logical_and(ew.equal(n_zeros, 1), is_zero), p_nonzero, 0.0))
    return [mul(_expand_back(ct, node), others)]


@vjp_rule("reduce_max", "reduce_min")
def _reduce_extremum(node, ct, xs, out):
    x = xs[0]
    hit = astype(ew.equal(x, _expand_back(out, node)), x.dtype)
    count = _expand_back(reductions.sum(hit, axis=node.params[0]), node)
    return [div(mul(_expand_back(ct, node), hit), count)]


@vjp_rule("cumsum")
def _cumsum(node, ct, xs, out):
    axis = node.params[0]
    return [shape_ops.flip(reductions.cumsum(shape_ops.flip(ct, axis), axis), axis)]


# --- views ------------------------------------------------------------------------------
@vjp_rule("reshape")
def _reshape(node, ct, xs, out):
    return [_reshaped(ct, xs[0].shape)]


@vjp_rule("transpose")
def _transpose(node, ct, xs, out):
    perm = node.params[0]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [shape_ops.transpose(ct, inverse)]


@vjp_rule("broadcast")
def _broadcast(node, ct, xs, out):
    return [unbroadcast(ct, xs[0].shape)]


@vjp_rule("slice")
def _slice(node, ct, xs, out):
    starts, steps = node.params
    return [_place_back(ct, xs[0].shape, starts, steps)]


def _place_back(ct: Tensor, shape: tuple, starts: tuple, steps: tuple) -> Tensor:
    """``ct`` of a slice put back in place with zeros around and between (no index arrays).

    Per axis: a negative step is a flip; a step ``s > 1`` interleaves ``s - 1`` zeros after
    each element (stack with zeros on a new axis, then merge the two axes); what is left is
    a unit-step slice, padded with zeros before and after. Everything is gathers and
    concatenations, so the gradient fuses into its consumers (no scatter, no atomics).
    """
    g = ct
    for axis, (start, step, size) in enumerate(zip(starts, steps, shape)):
        n = g.shape[axis]
        if n == 0:
            return zeros(shape, ct.dtype, ct.device)
        if step < 0:
            g = shape_ops.flip(g, axis)
            start, step = start + step * (n - 1), -step
        if step > 1:
            lead, trail = g.shape[:axis], g.shape[axis + 1:]
            gaps = zeros(lead + (n, step - 1) + trail, g.dtype, g.device)
            g = shape_ops.concatenate([shape_ops.expand_dims(g, axis + 1), gaps], axis=axis + 1)
            g = shape_ops.reshape(g, lead + (n * step,) + trail)
            key = [slice(None)] * g.ndim
            key[axis] = slice(0, (n - 1) * step + 1)
            g = g[tuple(key)]
            n = g.shape[axis]
        before, after = start, size - start - n
        if before or after:
            parts = []
            for width in (before, after):
                zshape = list(g.shape)
                zshape[axis] = width
                parts.append(zeros(tuple(zshape), g.dtype, g.device))
            g = shape_ops.concatenate([parts[0], g, parts[1]], axis=axis)
    return g


@vjp_rule("slice_update")
def _slice_update(node, ct, xs, out):
    starts, steps = node.params
    region = xs[1].shape
    kept = wrap(views.update_node(ct._node, zeros(region, ct.dtype, ct.device)._node, starts, steps))
    return [kept, wrap(views.slice_node(ct._node, starts, steps, region))]


@vjp_rule("concatenate")
def _concatenate(node, ct, xs, out):
    axis = node.params[0]
    grads, offset = [], 0
    for x in xs:
        key = [slice(None)] * ct.ndim
        key[axis] = slice(offset, offset + x.shape[axis])
        grads.append(ct[tuple(key)])
        offset += x.shape[axis]
    return grads


# --- indexing ---------------------------------------------------------------------------
@vjp_rule("gather")
def _gather(node, ct, xs, out):
    x, coords = xs[0], xs[1:]
    known = in_range(node)
    return [indexing.scatter_at(zeros_like(x), ct, coords, "add", known)] + [None] * len(coords)


@vjp_rule("scatter")
def _scatter(node, ct, xs, out):
    x, v, coords = xs[0], xs[1], xs[2:]
    mode, known = node.params[0], in_range(node)
    none = [None] * len(coords)
    picked = indexing.gather_at(ct, coords, known)
    if mode == "add":
        return [ct, picked] + none
    if mode == "set":
        return [indexing.scatter_at(ct, 0.0, coords, "set", known), picked] + none
    if mode == "multiply":
        # the product of the updates that reached each element (exact, also where x == 0)
        factor = indexing.scatter_at(ones_like(x), v, coords, "multiply", known)
        return [mul(ct, factor), div(indexing.gather_at(mul(ct, out), coords, known), v)] + none
    # min / max, like JAX: the cotangent of an element is shared equally by the operands
    # that produced it — the k updates equal to the result, and x itself where x equals it
    # (1/(k+1) each); elements no update reached pass it to x unchanged
    won = astype(ew.equal(v, indexing.gather_at(out, coords, known)), ct.dtype)
    k = indexing.scatter_at(zeros_like(out, dtype=ct.dtype), won, coords, "add", known)
    reached = indexing.scatter_at(zeros_like(out, dtype=ct.dtype), 1.0, coords, "set", known)
    kept = astype(ew.equal(x, out), ct.dtype)
    share = div(1.0, ew.maximum(ew.add(k, kept), 1.0))
    gx = mul(ct, ew.where(ew.equal(reached, 0), 1.0, mul(kept, share)))
    gv = mul(mul(picked, won), indexing.gather_at(share, coords, known))
    return [gx, gv] + none


@vjp_rule("matmul")
def _matmul(node, ct, xs, out):
    """Operands are >= 2-D (a vector is reshaped before the node); batch dims broadcast."""
    a, b = xs
    if a.ndim == 2 and b.ndim == 2:   # (the transposes as values: see _reshaped)
        at, bt = (wrap(views.transpose_node(t._node, (1, 0))) for t in (a, b))
        return [linalg.matmul(ct, bt), linalg.matmul(at, ct)]
    mt = lambda t: shape_ops.swapaxes(t, -1, -2)
    (m, k), n = a.shape[-2:], b.shape[-1]
    if b.ndim == 2:  # a stack times one matrix: fold the batch into the rows of one product
        ga = linalg.matmul(ct, shape_ops.transpose(b))
        rows = shape_ops.reshape(shape_ops.broadcast_to(a, ct.shape[:-2] + (m, k)), (-1, k))
        gb = linalg.matmul(shape_ops.transpose(rows), shape_ops.reshape(ct, (-1, n)))
        return [unbroadcast(ga, a.shape), gb]
    return [unbroadcast(linalg.matmul(ct, mt(b)), a.shape), unbroadcast(linalg.matmul(mt(a), ct), b.shape)]
