"""Differential fuzzing of fusion: random small programs run fused, unfused and in NumPy.

Hypothesis builds each program (a short list of steps over a few inputs) from a limited
vocabulary: elementwise math, comparisons feeding ``where``, shifted / strided /
reversed / transposed reads, outer broadcasts, index maps that realize ``i // 2``,
``i % 2`` and ``min(i, K)`` (through reshapes of broadcasts and through gathers),
gathers with random and repeated indices, scatter-adds, reductions (sum / max / mean
over every axis, with and without ``keepdims``), and returns 1-3 of its values, so
that stored members of fused tasks are exercised too. Each program runs on fresh
random inputs (drawn by NumPy from a seed that Hypothesis chooses)

* with ``qt.config.fusion = True`` and ``False`` (one task per op, the reference):
  bit-for-bit equal when the program has no reduction or scatter-add, else within
  a float tolerance;
* against NumPy in float64, within a bound from a running error analysis of the same
  program (each value carries an absolute error bound; comparisons whose operands are
  closer than their error bounds make the NumPy check inconclusive and skip it).

Compilation dominates the cost, so the vocabulary is small (one vector length, one
matrix shape, a handful of constants: programs share most of their kernels through the
kernel cache). ``QTRACE_FUZZ_EXAMPLES`` raises the number of programs (default 2000).
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qtrace as qt

EXAMPLES = int(os.environ.get("QTRACE_FUZZ_EXAMPLES") or 2000)
N = 8            # vector length
MAT = (4, 8)     # matrix shape (its transpose and the 8x8 outer product also appear)


# -- NumPy reference with running absolute error bounds ---------------------------------
class Ref:
    """A float64 value and a bound on the absolute error of the qtrace value it mirrors."""

    __slots__ = ("v", "e")

    def __init__(self, v, e):
        self.v = np.asarray(v, dtype=np.float64)
        self.e = np.broadcast_to(np.asarray(e, dtype=np.float64), self.v.shape).copy()

    @property
    def shape(self):
        return self.v.shape

    def __getitem__(self, key):
        return Ref(self.v[key], self.e[key])


class NumpyLib:
    """The program's operations in float64, tracking error bounds for the tested dtype."""

    def __init__(self, dtype):
        # unit roundoff of the tested dtype, with slack for the polynomial math library
        self.u = float(np.finfo(dtype).eps)
        self.ambiguous = False

    def _r(self, v, e):
        return Ref(v, e + self.u * np.abs(v))

    def const(self, c):
        return Ref(c, 0.0)

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

    def maximum(self, a, b):
        return Ref(np.maximum(a.v, b.v), np.maximum(a.e, b.e))

    def where_gt(self, a, b, x, y):
        d = a.v - b.v
        if np.any(np.abs(d) <= 2 * (a.e + b.e) + 1e-300):
            self.ambiguous = True  # the comparison may go either way in the tested dtype
        c = d > 0
        return Ref(np.where(c, x.v, y.v), np.where(c, x.e, y.e))

    def view(self, a, fn):
        return Ref(fn(a.v), fn(a.e))

    def gather(self, a, idx, axis0_only=True):
        return Ref(a.v[idx], a.e[idx])

    def scatter_add(self, a, idx, b):
        v, e = a.v.copy(), a.e.copy()
        np.add.at(v, idx, b.v)
        np.add.at(e, idx, b.e + self.u * np.abs(b.v))
        mag = np.abs(a.v).copy()
        np.add.at(mag, idx, np.abs(b.v))
        return Ref(v, e + 2 * self.u * mag)

    def concat(self, a, b):
        return Ref(np.concatenate([a.v, b.v]), np.concatenate([a.e, b.e]))

    def reduce(self, how, a, axis, keepdims):
        count = a.v.size if axis is None else a.v.shape[axis]
        if how == "max":
            return Ref(np.max(a.v, axis=axis, keepdims=keepdims),
                       np.max(a.e, axis=axis, keepdims=keepdims))
        total = np.sum(a.v, axis=axis, keepdims=keepdims)
        err = np.sum(a.e, axis=axis, keepdims=keepdims) + \
            (count + 2) * self.u * np.sum(np.abs(a.v), axis=axis, keepdims=keepdims)
        if how == "mean":
            return self._r(total / count, err / count)
        return Ref(total, err)

    # integer index maps, exact
    def arange(self, n):
        return np.arange(n)

    def index(self, arr):
        return np.asarray(arr)


class QtLib:
    """The same operations on qtrace tensors."""

    def __init__(self, dtype):
        self.dtype = dtype

    def const(self, c):
        return c  # a (weakly typed) Python scalar: keeps the tensors' dtype

    sin, tanh, exp = staticmethod(qt.sin), staticmethod(qt.tanh), staticmethod(qt.exp)
    maximum = staticmethod(qt.maximum)

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
    def where_gt(a, b, x, y):
        return qt.where(a > b, x, y)

    @staticmethod
    def view(a, fn):
        return fn(a)

    @staticmethod
    def gather(a, idx):
        return a[idx]

    @staticmethod
    def scatter_add(a, idx, b):
        return a.at[idx].add(b)

    @staticmethod
    def concat(a, b):
        return qt.concatenate([a, b])

    @staticmethod
    def reduce(how, a, axis, keepdims):
        return {"sum": qt.sum, "max": qt.max, "mean": qt.mean}[how](a, axis=axis, keepdims=keepdims)

    @staticmethod
    def arange(n):
        return qt.arange(n)

    @staticmethod
    def index(arr):
        return qt.asarray(np.asarray(arr))


# -- programs ---------------------------------------------------------------------------
UNARY = ["sin", "tanh", "exp", "neg", "square", "affine"]
BINARY = ["add", "sub", "mul", "maximum"]
CONSTS = [0.5, -0.25]
# steps and the values they apply to ("v": 1-D of length >= 2, "m": 2-D, "any")
STEPS = {
    "unary": "any", "binary": "any", "where": "any",
    "shift": "any", "stride": "any", "reverse": "any", "transpose": "m",
    "outer": "v", "div2_view": "v", "mod2_view": "v", "roll_view": "v",
    "div2_gather": "v", "mod2_gather": "v", "min_gather": "v", "rand_gather": "v",
    "rep_gather": "v", "row_gather": "m", "scatter_add": "v",
    "reduce": "any", "reshape": "any", "concat": "v",
}
# what a gather or scatter-add reads: the value itself or a view of it
SOURCES = ["value", "value", "reversed", "shifted"]


def _fits(shape, want):
    if any(d < 2 for d in shape) or len(shape) == 0:
        return False
    if want == "v":
        return len(shape) == 1
    if want == "m":
        return len(shape) == 2
    return True


def _compatible(s1, s2):
    try:
        np.broadcast_shapes(s1, s2)
    except ValueError:
        return False
    return len(s2) <= len(s1)  # keep the first operand's rank (small broadcasts only)


@st.composite
def programs(draw):
    """``(steps, outputs, dtype)``: steps are tuples naming operands by value number."""
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    shapes = [(N,), (N,), MAT]          # inputs: two vectors and one matrix
    bound = [1.0, 1.0, 1.0]             # magnitude bound of every value (keeps exp finite)
    has_reduction = False
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(sorted(STEPS)))
        cands = [i for i, s in enumerate(shapes) if _fits(s, STEPS[kind])]
        if not cands:
            kind, cands = "unary", list(range(len(shapes)))
        a = cands[draw(st.integers(0, len(cands) - 1))]
        sa, ba = shapes[a], bound[a]
        others = [i for i, s in enumerate(shapes) if _compatible(sa, s)]
        b = others[draw(st.integers(0, len(others) - 1))]
        bb = bound[b]
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            if op == "exp" and ba > 4:
                op = "tanh"
            step, shape = (kind, op, a), sa
            bnd = {"sin": 1.0, "tanh": 1.0, "exp": float(np.exp(ba)), "neg": ba,
                   "square": ba * ba, "affine": ba * 0.5 + 0.25}[op]
        elif kind == "binary":
            op = draw(st.sampled_from(BINARY))
            step, shape = (kind, op, a, b), sa
            bnd = ba * bb if op == "mul" else (max(ba, bb) if op == "maximum" else ba + bb)
        elif kind == "where":
            against = draw(st.sampled_from(["value", "const"]))
            step, shape, bnd = (kind, against, a, b), sa, max(ba, bb)
        elif kind == "shift":
            axis = draw(st.integers(0, len(sa) - 1))
            op = draw(st.sampled_from(["add", "sub"]))
            shape = tuple(d - 1 if k == axis else d for k, d in enumerate(sa))
            step, bnd = (kind, op, axis, a), 2 * ba
        elif kind in ("stride", "reverse"):
            axis = draw(st.integers(0, len(sa) - 1))
            start = draw(st.integers(0, 1)) if kind == "stride" else None
            st_ = 2 if kind == "stride" else -1
            key = tuple(slice(start, None, st_) if k == axis else slice(None) for k in range(len(sa)))
            shape = np.empty(sa)[key].shape
            then = draw(st.sampled_from(UNARY[:2] + ["none"]))  # a view may also be an output
            step, bnd = (kind, key, then, a), ba
        elif kind == "transpose":
            then = draw(st.sampled_from(["sin", "none"]))
            step, shape, bnd = (kind, then, a), sa[::-1], ba
        elif kind == "outer":
            others = [i for i, s in enumerate(shapes) if len(s) == 1 and s[0] >= 2]
            b = others[draw(st.integers(0, len(others) - 1))]
            op = draw(st.sampled_from(["add", "mul"]))
            step, shape = (kind, op, a, b), (sa[0], shapes[b][0])
            bnd = ba * bound[b] if op == "mul" else ba + bound[b]
        elif kind == "roll_view":
            s = draw(st.integers(1, sa[0] - 1))
            step, shape, bnd = (kind, s, a), sa, ba
        elif kind in ("div2_view", "mod2_view", "div2_gather", "mod2_gather"):
            shape = sa if "div2" in kind else (sa[0] // 2 * 2,)
            step, bnd = (kind, a), ba
        elif kind == "min_gather":
            k = draw(st.integers(0, sa[0] - 1))
            step, shape, bnd = (kind, k, a), sa, ba
        elif kind in ("rand_gather", "rep_gather"):
            m = draw(st.sampled_from([N, 5]))
            src = draw(st.sampled_from(SOURCES))
            step, shape, bnd = (kind, m, src, a), (m,), ba
        elif kind == "row_gather":
            m = draw(st.sampled_from([N, 3]))
            src = draw(st.sampled_from(SOURCES + ["transposed"]))
            sv = _source_shape(sa, src)
            step, shape, bnd = (kind, m, src, a), (m,) + sv[1:], ba
        elif kind == "scatter_add":
            vals = [i for i, s in enumerate(shapes) if len(s) == 1]
            b = vals[draw(st.integers(0, len(vals) - 1))]
            src = draw(st.sampled_from(SOURCES))
            step, shape = (kind, src, a, b), sa
            bnd = ba + shapes[b][0] * bound[b]
            has_reduction = True
        elif kind == "reshape":
            size = int(np.prod(sa))
            new = draw(st.sampled_from([(size,), (2, size // 2), (size // 2, 2)] if size % 2 == 0 else [(size,)]))
            if len(sa) == 2:
                new = draw(st.sampled_from([new, (sa[1], sa[0])]))
            then = draw(st.sampled_from(["sin", "none"]))
            step, shape, bnd = (kind, new, then, a), new, ba
        elif kind == "concat":
            vals = [i for i, s in enumerate(shapes) if len(s) == 1 and s[0] >= 2]
            b = vals[draw(st.integers(0, len(vals) - 1))]
            step, shape, bnd = (kind, a, b), (sa[0] + shapes[b][0],), max(ba, bound[b])
        else:  # reduce
            how = draw(st.sampled_from(["sum", "max", "mean"]))
            axis = draw(st.sampled_from([None] + list(range(len(sa))) + [-1]))
            keepdims = draw(st.booleans())
            step = (kind, how, axis, keepdims, a)
            shape = np.sum(np.empty(sa), axis=axis, keepdims=keepdims).shape
            count = int(np.prod(sa)) if axis is None else sa[axis]
            bnd = ba * count if how == "sum" else ba
            has_reduction = True
        steps.append(step)
        shapes.append(tuple(int(d) for d in shape))
        bound.append(float(bnd))
    last = len(shapes) - 1
    extra = draw(st.lists(st.integers(3, last), max_size=2, unique=True))
    outputs = [last] + [i for i in extra if i != last]
    return steps, outputs, dtype, has_reduction


def run(lib, steps, outputs, inputs, idx_rng_seed):
    """Evaluate a program with ``lib`` (qtrace or the NumPy reference)."""
    vals = list(inputs)
    irng = np.random.default_rng(idx_rng_seed)  # index data: identical for every backend
    for step in steps:
        kind = step[0]
        if kind == "unary":
            _, op, a = step
            x = vals[a]
            if op == "neg":
                r = lib.sub(lib.const(0.0), x) if isinstance(lib, NumpyLib) else -x
            elif op == "square":
                r = lib.mul(x, x)
            elif op == "affine":
                r = lib.add(lib.mul(x, lib.const(0.5)), lib.const(0.25))
            else:
                r = getattr(lib, op)(x)
        elif kind == "binary":
            _, op, a, b = step
            r = getattr(lib, op)(vals[a], vals[b])
        elif kind == "where":
            _, against, a, b = step
            x, y = vals[a], vals[b]
            if against == "const":
                r = lib.where_gt(x, lib.const(0.25), x, lib.mul(x, lib.const(-0.5)))
            else:
                r = lib.where_gt(x, y, lib.sub(x, y), y)
        elif kind == "shift":
            _, op, axis, a = step
            x = vals[a]
            hi = tuple(slice(1, None) if k == axis else slice(None) for k in range(len(x.shape)))
            lo = tuple(slice(None, -1) if k == axis else slice(None) for k in range(len(x.shape)))
            r = getattr(lib, op)(x[hi], x[lo])
        elif kind in ("stride", "reverse"):
            _, key, then, a = step
            r = vals[a][key]
            if then != "none":
                r = getattr(lib, then)(r)
        elif kind == "transpose":
            _, then, a = step
            r = lib.view(vals[a], lambda t: t.T)
            if then != "none":
                r = getattr(lib, then)(r)
        elif kind == "outer":
            _, op, a, b = step
            r = getattr(lib, op)(vals[a][:, None], vals[b][None, :])
        elif kind == "div2_view":   # x[i // 2] through a reshape of a broadcast
            _, a = step
            x = vals[a]
            n = x.shape[0]
            r = lib.add(lib.view(x, lambda t, n=n: _bcast(t[:, None], (n, 2)).reshape(-1)[:n]), lib.const(0.5))
        elif kind == "mod2_view":   # x[i % 2]
            _, a = step
            x = vals[a]
            n = x.shape[0]
            r = lib.mul(lib.view(x, lambda t, n=n: _bcast(t[None, :2], (n // 2, 2)).reshape(-1)), lib.const(0.5))
        elif kind == "roll_view":   # x[(i + s) % n]
            _, s, a = step
            x = vals[a]
            n = x.shape[0]
            r = lib.sub(lib.view(x, lambda t, n=n, s=s: _bcast(t[None, :], (2, n)).reshape(-1)[s:s + n]),
                        lib.const(0.25))
        elif kind in ("div2_gather", "mod2_gather", "min_gather"):
            x = vals[step[-1]]
            n = x.shape[0]
            i = lib.arange(n if kind != "mod2_gather" else n // 2 * 2)
            i = i // 2 if kind == "div2_gather" else (i % 2 if kind == "mod2_gather" else
                                                      (np.minimum(i, step[1]) if isinstance(lib, NumpyLib)
                                                       else qt.minimum(i, step[1])))
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
        elif kind == "scatter_add":
            _, src, a, b = step
            x, y = vals[a], _source(lib, vals[b], src)
            r = lib.scatter_add(x, lib.index(irng.integers(0, x.shape[0], y.shape[0])), y)
        elif kind == "reshape":
            _, new, then, a = step
            r = lib.view(vals[a], lambda t, new=new: t.reshape(new))
            if then != "none":
                r = getattr(lib, then)(r)
        elif kind == "concat":
            _, a, b = step
            r = lib.concat(vals[a], vals[b])
        else:
            _, how, axis, keepdims, a = step
            r = lib.reduce(how, vals[a], axis, keepdims)
        vals.append(r)
    return [vals[i] for i in outputs]


def _source_shape(shape, src):
    if src == "shifted":
        return (shape[0] - 1,) + shape[1:]
    return shape[::-1] if src == "transposed" else shape


def _source(lib, x, src):
    """The view of ``x`` that a gather or scatter-add reads (``src`` in SOURCES)."""
    if src == "reversed":
        return x[::-1]
    if src == "shifted":
        return x[1:]
    if src == "transposed":
        return lib.view(x, lambda t: t.T)
    return x


def _bcast(t, shape):
    if isinstance(t, Ref):
        return Ref(np.broadcast_to(t.v, shape), np.broadcast_to(t.e, shape))
    if isinstance(t, np.ndarray):
        return np.broadcast_to(t, shape)
    return qt.broadcast_to(t, shape)


def _qt_run(steps, outputs, arrays, idx_seed, fusion):
    qt.config.fusion = fusion
    outs = run(QtLib(arrays[0].dtype), steps, outputs, [qt.asarray(a) for a in arrays], idx_seed)
    qt.eval(*[o for o in outs if isinstance(o, qt.Tensor)])
    return [np.asarray(o.numpy() if isinstance(o, qt.Tensor) else o) for o in outs]


def _same_bits(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _describe(steps, outputs, dtype):
    return f"dtype={np.dtype(dtype).name} steps={steps} outputs={outputs}"


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(prog=programs(), seed=st.integers(0, 2**32 - 1))
def test_fused_matches_unfused_and_numpy(prog, seed):
    steps, outputs, dtype, has_reduction = prog
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, (N,)).astype(dtype), rng.uniform(-1, 1, (N,)).astype(dtype),
              rng.uniform(-1, 1, MAT).astype(dtype)]
    what = _describe(steps, outputs, dtype)
    fused = _qt_run(steps, outputs, arrays, seed, True)
    unfused = _qt_run(steps, outputs, arrays, seed, False)
    ref_lib = NumpyLib(dtype)
    refs = run(ref_lib, steps, outputs, [Ref(a, 0.0) for a in arrays], seed)
    for k, (f, u, r) in enumerate(zip(fused, unfused, refs)):
        assert f.shape == u.shape == r.shape, f"output {k}: shapes {f.shape} {u.shape} {r.shape}; {what}"
        assert f.dtype == u.dtype == np.dtype(dtype), f"output {k}: dtypes {f.dtype} {u.dtype}; {what}"
        if has_reduction:
            np.testing.assert_allclose(f, u, rtol=1e-5 if dtype == np.float32 else 1e-12,
                                       atol=4 * float(np.max(r.e, initial=0.0)) + 1e-30,
                                       err_msg=f"fused vs unfused, output {k}; {what}")
        else:
            assert _same_bits(f, u), \
                f"fused vs unfused differ bitwise, output {k}:\n{f}\n{u}\n{what}"
        if not ref_lib.ambiguous:
            err = np.abs(f.astype(np.float64) - r.v)
            tol = 2 * r.e + 1e-300
            bad = ~(err <= tol)
            assert not bad.any(), (f"qtrace vs NumPy, output {k}: max excess "
                                   f"{np.max(err[bad] - tol[bad])}\n{f}\n{r.v}\n{what}")
