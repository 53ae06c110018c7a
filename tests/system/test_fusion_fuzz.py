"""Differential fuzzing of fusion: random small programs run fused, unfused and in NumPy.

Hypothesis builds each program — 1 to 5 steps over three inputs (two vectors, one
matrix; C-contiguous, transposed or strided buffers) — from a limited vocabulary:

* elementwise math (add, sub, mul, maximum, sin, tanh, exp of bounded arguments, ...),
  comparisons (bool values, also returned) feeding ``where``;
* reads at other indices: shifted (``x[1:] + x[:-1]``), strided, reversed, transposed,
  reshaped, outer broadcasts (``v[:, None] + w[None, :]``), and index maps that realize
  ``i // 2``, ``i % 2``, ``(i + s) % n`` through reshapes of broadcasts, or ``i // 2``,
  ``i % 2``, ``min(i, K)`` through gathers (``x[qt.arange(n) // 2]``, ...);
* empty slices (``x[3:3]``), read and returned;
* gathers with random and with repeated indices (also from views of computed values),
  row gathers of matrices, scatter-adds and scatter-maxes with repeated indices,
  concatenations, reductions (sum / max / mean over every axis, with and without
  ``keepdims``) and cumulative sums;

and returns its last value plus up to two intermediate ones, so that members of fused
tasks that are stored (outputs read inside their task) are exercised too. Every program
runs on fresh random inputs (NumPy, seeded by a Hypothesis-drawn seed)

* with ``qt.config.fusion = True`` and ``False`` (one task per op, the reference):
  bit-for-bit equal when the program has no reduction, scan or scatter; otherwise
  within the error bound below;
* against NumPy in float64: each reference value carries a bound on the absolute error
  of the tested dtype's value (a running forward error analysis of the same program);
  both qtrace results must lie within it. Where a comparison's operands are closer
  than their error bounds, the comparison may legitimately go either way in float32,
  so the NumPy check of that example is skipped (rare).

A second test reads computed values through random chains of views (exact float64
arithmetic: fused, unfused and NumPy agree bit for bit).

Cost: compilation dominates (each new kernel is an LLVM compile), so programs share
structure: one vector length, one matrix shape, a few fixed constants and a small
vocabulary, so that most programs find most of their kernels in the kernel cache (a
few hundred compiles serve 2000 programs). 2000 programs (the default;
``QTRACE_FUZZ_EXAMPLES`` sets the number, ``QTRACE_FUZZ_STEPS`` the longest program)
plus 250 view chains take about 65 s of CPU time with a cold kernel cache: 1.5 minutes
of wall time on the shared 2-core machine.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qtrace as qt

EXAMPLES = int(os.environ.get("QTRACE_FUZZ_EXAMPLES") or 2000)
MAX_STEPS = int(os.environ.get("QTRACE_FUZZ_STEPS") or 5)
N = 8            # vector length
MAT = (4, 8)     # matrix shape (its transpose and the 8x8 outer product also appear)


# -- NumPy reference with running absolute error bounds ---------------------------------
class Ref:
    """A float64 value and a bound on the absolute error of the qtrace value it mirrors."""

    __slots__ = ("v", "e", "is_bool")

    def __init__(self, v, e, is_bool=False):
        self.v = np.asarray(v, dtype=np.float64)
        self.e = np.broadcast_to(np.asarray(e, dtype=np.float64), self.v.shape).copy()
        self.is_bool = is_bool

    @property
    def shape(self):
        return self.v.shape

    def __getitem__(self, key):
        return Ref(self.v[key], self.e[key], self.is_bool)


class NumpyLib:
    """The program's operations in float64, tracking error bounds for the tested dtype."""

    def __init__(self, dtype):
        self.u = float(np.finfo(dtype).eps)  # one ulp of 1 in the tested dtype
        self.ambiguous = False               # a comparison could go either way

    def _r(self, v, e):  # a correctly rounded result of inexact operands
        return Ref(v, e + self.u * np.abs(v))

    def const(self, c):
        return Ref(c, 0.0)

    # math functions: a few ulps (polynomial approximations) besides the propagated error
    def sin(self, a):
        return Ref(np.sin(a.v), a.e + 4 * self.u * (1 + np.abs(a.v)))

    def tanh(self, a):
        return Ref(np.tanh(a.v), a.e + 4 * self.u)

    def exp(self, a):
        r = np.exp(a.v)
        return Ref(r, r * (np.expm1(np.minimum(a.e, 1.0)) + 4 * self.u))

    def add(self, a, b):
        return self._r(a.v + b.v, a.e + b.e)

    def sub(self, a, b):
        return self._r(a.v - b.v, a.e + b.e)

    def mul(self, a, b):
        return self._r(a.v * b.v, np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e)

    def neg(self, a):
        return Ref(-a.v, a.e)

    def maximum(self, a, b):
        return Ref(np.maximum(a.v, b.v), np.maximum(a.e, b.e))

    def greater(self, a, b):
        d = a.v - b.v
        if np.any(np.abs(d) <= 2 * (a.e + b.e) + 1e-300):
            self.ambiguous = True
        return Ref(d > 0, 0.0, is_bool=True)

    def where(self, c, x, y):
        c = c.v.astype(bool)
        return Ref(np.where(c, x.v, y.v), np.where(c, x.e, y.e))

    def view(self, a, fn):
        return Ref(fn(a.v), fn(a.e), a.is_bool)

    def broadcast_to(self, a, shape):
        return Ref(np.broadcast_to(a.v, shape), np.broadcast_to(a.e, shape), a.is_bool)

    def gather(self, a, idx):
        return Ref(a.v[idx], a.e[idx], a.is_bool)

    def scatter(self, mode, a, idx, b):
        v, e = a.v.copy(), a.e.copy()
        if mode == "max":
            np.maximum.at(v, idx, b.v)
            np.maximum.at(e, idx, b.e)
            return Ref(v, e)
        np.add.at(v, idx, b.v)
        np.add.at(e, idx, b.e)
        mag = np.abs(a.v).copy()
        np.add.at(mag, idx, np.abs(b.v))
        return Ref(v, e + (len(idx) + 2) * self.u * mag)

    def concat(self, a, b):
        return Ref(np.concatenate([a.v, b.v]), np.concatenate([a.e, b.e]))

    def reduce(self, how, a, axis, keepdims):
        count = a.v.size if axis is None else a.v.shape[axis]
        if how == "max":
            return Ref(np.max(a.v, axis=axis, keepdims=keepdims), np.max(a.e, axis=axis, keepdims=keepdims))
        total = np.sum(a.v, axis=axis, keepdims=keepdims)
        err = np.sum(a.e, axis=axis, keepdims=keepdims) + \
            (count + 2) * self.u * np.sum(np.abs(a.v), axis=axis, keepdims=keepdims)
        if how == "mean":
            return self._r(total / count, err / count)
        return Ref(total, err)

    def cumsum(self, a, axis):
        count = a.v.shape[axis]
        return Ref(np.cumsum(a.v, axis=axis),
                   np.cumsum(a.e, axis=axis) + (count + 2) * self.u * np.cumsum(np.abs(a.v), axis=axis))

    # integer index maps: exact, plain NumPy
    def arange(self, n):
        return np.arange(n)

    def minimum(self, i, k):
        return np.minimum(i, k)

    def index(self, arr):
        return np.asarray(arr)


class QtLib:
    """The same operations on qtrace tensors."""

    @staticmethod
    def const(c):
        return c  # a weakly typed Python scalar: keeps the tensors' dtype

    sin, tanh, exp = staticmethod(qt.sin), staticmethod(qt.tanh), staticmethod(qt.exp)
    maximum, where = staticmethod(qt.maximum), staticmethod(qt.where)
    broadcast_to = staticmethod(qt.broadcast_to)
    arange, minimum = staticmethod(qt.arange), staticmethod(qt.minimum)

    @staticmethod
    def add(a, b):
        return a + b

    @staticmethod
    def sub(a, b):
        return a - b

    @staticmethod
    def mul(a, b):
        return a * b

    @staticmethod
    def neg(a):
        return -a

    @staticmethod
    def greater(a, b):
        return a > b

    @staticmethod
    def view(a, fn):
        return fn(a)

    @staticmethod
    def gather(a, idx):
        return a[idx]

    @staticmethod
    def scatter(mode, a, idx, b):
        return getattr(a.at[idx], mode)(b)

    @staticmethod
    def concat(a, b):
        return qt.concatenate([a, b])

    @staticmethod
    def reduce(how, a, axis, keepdims):
        return {"sum": qt.sum, "max": qt.max, "mean": qt.mean}[how](a, axis=axis, keepdims=keepdims)

    @staticmethod
    def cumsum(a, axis):
        return qt.cumsum(a, axis=axis)

    @staticmethod
    def index(arr):
        return qt.asarray(np.asarray(arr))


# -- programs ---------------------------------------------------------------------------
UNARY = ["sin", "tanh", "exp", "neg", "square", "affine"]
BINARY = ["add", "sub", "mul", "maximum"]
# step kinds and the float values they apply to: "v" 1-D, "m" 2-D, "any" (dims >= 2)
STEPS = {
    "unary": "any", "binary": "any", "compare": "any", "where": "any", "where_mask": "any",
    "shift": "any", "stride": "any", "reverse": "any", "transpose": "m", "reshape": "any",
    "outer": "v", "div2_view": "v", "mod2_view": "v", "roll_view": "v",
    "div2_gather": "v", "mod2_gather": "v", "min_gather": "v", "rand_gather": "v",
    "rep_gather": "v", "row_gather": "m", "scatter": "v", "concat": "v",
    "reduce": "any", "cumsum": "any", "empty": "any",
}
# what a gather or scatter reads: the value itself or a view of it
SOURCES = ["value", "value", "reversed", "shifted"]
LAYOUTS = ["contiguous", "contiguous", "transposed", "strided"]


def _fits(shape, want):
    if len(shape) == 0 or any(d < 2 for d in shape):
        return False
    return {"v": len(shape) == 1, "m": len(shape) == 2, "any": True}[want]


def _broadcasts_into(s1, s2):
    """``s2`` broadcasts against ``s1`` without raising its rank."""
    try:
        np.broadcast_shapes(s1, s2)
    except ValueError:
        return False
    return len(s2) <= len(s1)


def _source_shape(shape, src):
    if src == "shifted":
        return (shape[0] - 1,) + shape[1:]
    return shape[::-1] if src == "transposed" else shape


@st.composite
def programs(draw):
    """``(steps, outputs, dtype, layouts, inexact)``; steps name operands by value number.

    ``inexact``: the program has a reduction, scan or scatter (fused and unfused
    results then agree within float tolerance instead of bitwise).
    """
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    layouts = (draw(st.sampled_from(LAYOUTS[:2] + ["strided"])), draw(st.sampled_from(LAYOUTS)))
    shapes = [(N,), (N,), MAT]          # inputs: two vectors and one matrix
    bound = [1.0, 1.0, 1.0]             # magnitude bound of every value (keeps exp finite)
    is_bool = [False, False, False]
    inexact = False
    steps = []

    def pick(cands):
        return cands[draw(st.integers(0, len(cands) - 1))]

    for _ in range(draw(st.integers(1, MAX_STEPS))):
        kind = draw(st.sampled_from(sorted(STEPS)))
        floats = [i for i, s in enumerate(shapes) if not is_bool[i]]
        cands = [i for i in floats if _fits(shapes[i], STEPS[kind])]
        if kind == "where_mask":
            cands = [i for i in cands if any(is_bool[c] and _broadcasts_into(shapes[i], shapes[c])
                                             for c in range(len(shapes)))]
        if not cands:
            kind, cands = "unary", floats
        a = pick(cands)
        sa, ba = shapes[a], bound[a]
        b = pick([i for i in floats if _broadcasts_into(sa, shapes[i])])
        bb = bound[b]
        vectors = [i for i in floats if len(shapes[i]) == 1 and shapes[i][0] >= 2]
        shape, flag = sa, False
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            if op == "exp" and ba > 4:
                op = "tanh"
            step = (kind, op, a)
            bnd = {"sin": 1.0, "tanh": 1.0, "exp": float(np.exp(ba)), "neg": ba,
                   "square": ba * ba, "affine": ba * 0.5 + 0.25}[op]
        elif kind == "binary":
            op = draw(st.sampled_from(BINARY))
            step = (kind, op, a, b)
            bnd = ba * bb if op == "mul" else (max(ba, bb) if op == "maximum" else ba + bb)
        elif kind == "compare":
            step, bnd, flag = (kind, draw(st.sampled_from(["value", "const"])), a, b), 1.0, True
        elif kind == "where":
            step, bnd = (kind, draw(st.sampled_from(["value", "const"])), a, b), ba + bb
        elif kind == "where_mask":
            c = pick([i for i, s in enumerate(shapes) if is_bool[i] and _broadcasts_into(sa, s)])
            step, bnd = (kind, c, a, b), max(ba, bb)
        elif kind == "shift":
            axis = draw(st.integers(0, len(sa) - 1))
            shape = tuple(d - 1 if k == axis else d for k, d in enumerate(sa))
            step, bnd = (kind, draw(st.sampled_from(["add", "sub"])), axis, a), 2 * ba
        elif kind in ("stride", "reverse"):
            axis = draw(st.integers(0, len(sa) - 1))
            start = draw(st.integers(0, 1)) if kind == "stride" else None
            key = tuple(slice(start, None, 2 if kind == "stride" else -1) if k == axis else slice(None)
                        for k in range(len(sa)))
            shape = np.empty(sa)[key].shape
            then = draw(st.sampled_from(["sin", "tanh", "none"]))  # a bare view may be an output
            step, bnd = (kind, key, then, a), ba
        elif kind == "transpose":
            step, shape, bnd = (kind, draw(st.sampled_from(["sin", "none"])), a), sa[::-1], ba
        elif kind == "empty":  # an empty slice (kernels over nothing; outputs still allocated)
            axis = draw(st.integers(0, len(sa) - 1))
            start = draw(st.integers(0, sa[axis]))
            key = tuple(slice(start, start) if k == axis else slice(None) for k in range(len(sa)))
            shape = np.empty(sa)[key].shape
            step, bnd = (kind, key, draw(st.sampled_from(["sin", "none"])), a), ba
        elif kind == "reshape":
            size = int(np.prod(sa))
            options = [(size,), (2, size // 2), (size // 2, 2)] if size % 2 == 0 else [(size,)]
            shape = draw(st.sampled_from(options + ([sa[::-1]] if len(sa) == 2 else [])))
            step, bnd = (kind, shape, draw(st.sampled_from(["sin", "none"])), a), ba
        elif kind == "outer":
            b = pick(vectors)
            op = draw(st.sampled_from(["add", "mul"]))
            step, shape = (kind, op, a, b), (sa[0], shapes[b][0])
            bnd = ba * bound[b] if op == "mul" else ba + bound[b]
        elif kind == "roll_view":
            step, bnd = (kind, draw(st.integers(1, sa[0] - 1)), a), ba
        elif kind in ("div2_view", "mod2_view", "div2_gather", "mod2_gather"):
            shape = sa if "div2" in kind else (sa[0] // 2 * 2,)
            step, bnd = (kind, a), ba
        elif kind == "min_gather":
            step, bnd = (kind, draw(st.integers(0, sa[0] - 1)), a), ba
        elif kind in ("rand_gather", "rep_gather"):
            m = draw(st.sampled_from([N, 5]))
            step, shape, bnd = (kind, m, draw(st.sampled_from(SOURCES)), a), (m,), ba
        elif kind == "row_gather":
            m = draw(st.sampled_from([N, 3]))
            src = draw(st.sampled_from(SOURCES + ["transposed"]))
            step, shape, bnd = (kind, m, src, a), (m,) + _source_shape(sa, src)[1:], ba
        elif kind == "scatter":
            b = pick(vectors)
            mode = draw(st.sampled_from(["add", "add", "max"]))
            step = (kind, mode, draw(st.sampled_from(SOURCES)), a, b)
            bnd = ba + shapes[b][0] * bound[b] if mode == "add" else max(ba, bound[b])
            inexact = True
        elif kind == "concat":
            b = pick(vectors)
            step, shape, bnd = (kind, a, b), (sa[0] + shapes[b][0],), max(ba, bound[b])
        elif kind == "reduce":
            how = draw(st.sampled_from(["sum", "max", "mean"]))
            axis = draw(st.sampled_from([None] + list(range(len(sa))) + [-1]))
            keepdims = draw(st.booleans())
            step = (kind, how, axis, keepdims, a)
            shape = np.sum(np.empty(sa), axis=axis, keepdims=keepdims).shape
            bnd = ba * (int(np.prod(sa)) if axis is None else sa[axis]) if how == "sum" else ba
            inexact = True
        else:  # cumsum
            axis = draw(st.integers(0, len(sa) - 1))
            step, bnd, inexact = (kind, axis, a), ba * sa[axis], True
        steps.append(step)
        shapes.append(tuple(int(d) for d in shape))
        bound.append(float(bnd))
        is_bool.append(flag)
    last = len(shapes) - 1
    extra = draw(st.lists(st.integers(3, last), max_size=2, unique=True))
    outputs = [last] + [i for i in extra if i != last]
    return steps, outputs, dtype, layouts, inexact


def run(lib, steps, outputs, inputs, idx_seed):
    """Evaluate a program with ``lib`` (``QtLib`` or the ``NumpyLib`` reference)."""
    vals = list(inputs)
    irng = np.random.default_rng(idx_seed)  # index data: the same for every backend
    for step in steps:
        kind = step[0]
        if kind == "unary":
            _, op, a = step
            x = vals[a]
            if op == "square":
                r = lib.mul(x, x)
            elif op == "affine":
                r = lib.add(lib.mul(x, lib.const(0.5)), lib.const(0.25))
            else:
                r = getattr(lib, op)(x)
        elif kind == "binary":
            _, op, a, b = step
            r = getattr(lib, op)(vals[a], vals[b])
        elif kind == "compare":
            _, against, a, b = step
            r = lib.greater(vals[a], vals[b] if against == "value" else lib.const(0.25))
        elif kind == "where":
            _, against, a, b = step
            x, y = vals[a], vals[b]
            if against == "const":
                r = lib.where(lib.greater(x, lib.const(0.25)), x, lib.mul(x, lib.const(-0.5)))
            else:
                r = lib.where(lib.greater(x, y), lib.sub(x, y), y)
        elif kind == "where_mask":
            _, c, a, b = step
            r = lib.where(vals[c], vals[a], vals[b])
        elif kind == "shift":
            _, op, axis, a = step
            x = vals[a]
            hi = tuple(slice(1, None) if k == axis else slice(None) for k in range(len(x.shape)))
            lo = tuple(slice(None, -1) if k == axis else slice(None) for k in range(len(x.shape)))
            r = getattr(lib, op)(x[hi], x[lo])
        elif kind in ("stride", "reverse", "transpose", "reshape", "empty"):
            x = vals[step[-1]]
            if kind == "transpose":
                r = lib.view(x, lambda t: t.T)
            elif kind == "reshape":
                r = lib.view(x, lambda t, shape=step[1]: t.reshape(shape))
            else:
                r = x[step[1]]
            if step[-2] != "none":
                r = getattr(lib, step[-2])(r)
        elif kind == "outer":
            _, op, a, b = step
            r = getattr(lib, op)(vals[a][:, None], vals[b][None, :])
        elif kind == "div2_view":   # x[i // 2] through a reshape of a broadcast
            x = vals[step[1]]
            n = x.shape[0]
            r = lib.add(lib.broadcast_to(x[:, None], (n, 2)).reshape(-1)[:n], lib.const(0.5)) \
                if isinstance(lib, QtLib) else \
                lib.add(lib.view(x, lambda t, n=n: np.broadcast_to(t[:, None], (n, 2)).reshape(-1)[:n]),
                        lib.const(0.5))
        elif kind in ("mod2_view", "roll_view"):   # x[i % 2], x[(i + s) % n]
            x = vals[step[-1]]
            n = x.shape[0]
            if kind == "mod2_view":
                shape, key = (n // 2, 2), slice(None)
            else:
                shape, key = (2, n), slice(step[1], step[1] + n)
            if isinstance(lib, QtLib):
                t = (x[None, :2] if kind == "mod2_view" else x[None, :])
                r = qt.broadcast_to(t, shape).reshape(-1)[key]
            else:
                r = lib.view(x, lambda t, shape=shape, key=key, k=kind:
                             np.broadcast_to(t[None, :2] if k == "mod2_view" else t[None, :], shape)
                             .reshape(-1)[key])
            r = lib.mul(r, lib.const(0.5))
        elif kind in ("div2_gather", "mod2_gather", "min_gather"):
            x = vals[step[-1]]
            n = x.shape[0]
            if kind == "div2_gather":
                i = lib.arange(n) // 2
            elif kind == "mod2_gather":
                i = lib.arange(n // 2 * 2) % 2
            else:
                i = lib.minimum(lib.arange(n), step[1])
            r = lib.add(lib.gather(x, i), lib.const(0.25))
        elif kind in ("rand_gather", "rep_gather"):
            _, m, src, a = step
            x = _source(lib, vals[a], src)
            hi = x.shape[0] if kind == "rand_gather" else min(2, x.shape[0])
            r = lib.mul(lib.gather(x, lib.index(irng.integers(0, hi, m))), lib.const(0.5))
        elif kind == "row_gather":
            _, m, src, a = step
            x = _source(lib, vals[a], src)
            r = lib.gather(x, lib.index(irng.integers(0, x.shape[0], m)))
        elif kind == "scatter":
            _, mode, src, a, b = step
            x, y = vals[a], _source(lib, vals[b], src)
            r = lib.scatter(mode, x, lib.index(irng.integers(0, x.shape[0], y.shape[0])), y)
        elif kind == "concat":
            r = lib.concat(vals[step[1]], vals[step[2]])
        elif kind == "reduce":
            _, how, axis, keepdims, a = step
            r = lib.reduce(how, vals[a], axis, keepdims)
        else:
            _, axis, a = step
            r = lib.cumsum(vals[a], axis)
        vals.append(r)
    return [vals[i] for i in outputs]


def _source(lib, x, src):
    """The view of ``x`` that a gather or scatter reads (``src`` in SOURCES)."""
    if src == "reversed":
        return x[::-1]
    if src == "shifted":
        return x[1:]
    if src == "transposed":
        return lib.view(x, lambda t: t.T)
    return x


def _inputs(rng, dtype, layouts):
    """Two vectors and a matrix; ``layouts``: (vectors', matrix's) buffer layout."""
    def make(shape, layout):
        if layout == "transposed":
            return rng.uniform(-1, 1, shape[::-1]).astype(dtype).T
        if layout == "strided":
            return rng.uniform(-1, 1, shape[:-1] + (2 * shape[-1],)).astype(dtype)[..., ::2]
        return rng.uniform(-1, 1, shape).astype(dtype)
    return [make((N,), layouts[0]), make((N,), layouts[0]), make(MAT, layouts[1])]


def _qt_run(steps, outputs, arrays, idx_seed, fusion):
    qt.config.fusion = fusion
    outs = run(QtLib(), steps, outputs, [qt.asarray(a) for a in arrays], idx_seed)
    qt.eval(*outs)
    return [np.array(o.numpy(), order="C") for o in outs]  # (ascontiguousarray makes 0-d 1-d)


def _same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(prog=programs(), seed=st.integers(0, 2**32 - 1))
def test_fused_matches_unfused_and_numpy(prog, seed):
    steps, outputs, dtype, layouts, inexact = prog
    arrays = _inputs(np.random.default_rng(seed), dtype, layouts)
    what = f"dtype={np.dtype(dtype).name} layouts={layouts} steps={steps} outputs={outputs} seed={seed}"
    fused = _qt_run(steps, outputs, arrays, seed, True)
    unfused = _qt_run(steps, outputs, arrays, seed, False)
    ref_lib = NumpyLib(dtype)
    refs = run(ref_lib, steps, outputs, [Ref(a, 0.0) for a in arrays], seed)
    for k, (f, u, r) in enumerate(zip(fused, unfused, refs)):
        expected_dtype = np.dtype(bool) if r.is_bool else np.dtype(dtype)
        assert f.shape == u.shape == r.shape, f"output {k}: shapes {f.shape} {u.shape} {r.shape}; {what}"
        assert f.dtype == u.dtype == expected_dtype, f"output {k}: dtypes {f.dtype} {u.dtype}; {what}"
        if not inexact:
            assert _same_bits(f, u), f"fused vs unfused differ bitwise, output {k}:\n{f}\n{u}\n{what}"
        elif not ref_lib.ambiguous and not r.is_bool:
            excess = np.abs(f.astype(np.float64) - u) - 4 * r.e
            assert not (excess > 0).any(), \
                f"fused vs unfused, output {k}: differ by {np.max(excess)} over the bound\n{f}\n{u}\n{what}"
        if ref_lib.ambiguous:
            continue
        for name, got in (("fused", f), ("unfused", u)):
            err = np.abs(got.astype(np.float64) - r.v)
            bad = ~(err <= 2 * r.e)  # NaN counts as bad
            assert not bad.any(), (f"{name} vs NumPy, output {k}: off by {err[bad]} > {2 * r.e[bad]} at "
                                   f"{np.argwhere(bad)[:4].tolist()}\n{got}\n{r.v}\n{what}")


# -- view chains over computed values -----------------------------------------------------
# Index maps are where fusion proofs live: a producer computed in registers is read
# through a chain of views (transposes, reshapes that split and merge axes, slices with
# negative and non-unit steps, flips, broadcasts) at the index the chain composes. The
# arithmetic here is exact in IEEE float64 (add, multiply by 2, maximum), so fused,
# unfused and NumPy results must all agree bit for bit.
VIEW_EXAMPLES = max(1, EXAMPLES // 8)
BASES = [(8,), (4, 6), (2, 3, 4)]


def _factorizations(n: int) -> list:
    out = [(n,)]
    for a in range(2, n):
        if n % a == 0:
            out.append((a, n // a))
            out.extend((a, b, n // a // b) for b in range(2, n // a) if (n // a) % b == 0)
    return out


@st.composite
def view_chains(draw):
    shape = draw(st.sampled_from(BASES))
    cur, chain = shape, []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["transpose", "reshape", "slice", "flip", "broadcast"]))
        if kind == "transpose":
            arg = tuple(draw(st.permutations(range(len(cur)))))
            cur = tuple(cur[p] for p in arg)
        elif kind == "reshape":
            arg = draw(st.sampled_from(_factorizations(int(np.prod(cur)))))
            cur = arg
        elif kind == "slice":
            arg = tuple(slice(draw(st.integers(0, d - 1)), None, draw(st.sampled_from([1, 2, -1, -2])))
                        for d in cur)
            cur = np.empty(cur)[arg].shape
        elif kind == "flip":
            arg = draw(st.integers(0, len(cur) - 1))
        else:
            arg = (2,) + cur
            cur = arg
        chain.append((kind, arg))
    outputs = draw(st.sampled_from(["consumer", "consumer+view", "consumer+producer", "all"]))
    return shape, chain, draw(st.sampled_from(["mul2", "add", "max"])), outputs


def _apply_chain(x, chain, lib):
    for kind, arg in chain:
        if kind == "transpose":
            x = lib.transpose(x, arg)
        elif kind == "reshape":
            x = lib.reshape(x, arg)
        elif kind == "slice":
            x = x[arg]
        elif kind == "flip":
            x = lib.flip(x, arg)
        else:
            x = lib.broadcast_to(x, arg)
    return x


def _chain_program(shape, chain, producer, outputs, lib):
    def program(x, y):
        p = {"mul2": lambda: x * 2.0 - y, "add": lambda: x + y,
             "max": lambda: lib.maximum(x, y) * 2.0}[producer]()
        v = _apply_chain(p, chain, lib)
        c = v + 1.0
        return {"consumer": (c,), "consumer+view": (c, v), "consumer+producer": (c, p),
                "all": (c, v, p)}[outputs]
    return program


@settings(max_examples=VIEW_EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(prog=view_chains(), seed=st.integers(0, 2**32 - 1))
def test_view_chains_of_computed_values(prog, seed):
    shape, chain, producer, outputs = prog
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape)
    ref = _chain_program(shape, chain, producer, outputs, np)(x, y)
    program = _chain_program(shape, chain, producer, outputs, qt)
    what = f"shape={shape} chain={chain} producer={producer} outputs={outputs}"
    for fusion in (True, False):
        qt.config.fusion = fusion
        outs = program(qt.asarray(x), qt.asarray(y))
        qt.eval(*outs)
        for k, (o, r) in enumerate(zip(outs, ref)):
            got = o.numpy()
            assert got.shape == r.shape, f"fusion={fusion} output {k}: {got.shape} vs {r.shape}; {what}"
            np.testing.assert_array_equal(got, r, err_msg=f"fusion={fusion} output {k}; {what}")
