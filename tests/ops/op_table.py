"""The operator table driving ``tests/ops``: one record per operation of SPEC §2.

Every record names a qtrace callable and its NumPy reference (NumPy is the oracle for
values, dtypes and shapes), its arity, the input domain of each argument, the dtypes it
is tested with, and its float tolerance per dtype. Integer and bool results are always
compared exactly; so are float results of the correctly rounded IEEE operations
(``+ - * / sqrt`` ...) and of the pure data-movement operations (shapes, indexing).

Kinds of records:

``elementwise``
    Elementwise functions (``qt.sin``), the operators (``a + b``, ``-a``, ``a < b``, ...)
    and the few elementwise helpers with extra arguments (``clip``, ``where``,
    ``round(x, decimals)``). Inputs come from ``make_input`` by domain; shape cases are
    the common ``ELEMENTWISE_CASES`` of the record's arity.
``reduction`` / ``shape`` / ``linalg`` / ``index`` / ``update``
    Records carry their own input shape cases (``cases``: case id -> input shapes).
    Their callables are written once as ``f(xp, *arrays)`` and bound to ``qt`` and
    ``np`` (``x.T``, ``x.reshape``, ``x[key]`` are spelled the same for both).

Tolerances (``Tol(rtol, atol)``, checked as ``|got - want| <= atol + rtol * |want|``):

* ``EXACT``: correctly rounded operations and everything integer/bool.
* ``TRANSCENDENTAL``: float32 4 ulp relative (``4 * 2**-23``), float64 16 ulp
  (``16 * 2**-52``; tighter than 1e-12 on purpose). NumPy's own float32 SIMD
  ``exp/log/sin/cos`` are ~2 ulp off the true value, and a correctly rounded qtrace
  result can sit on the other side.
* ``round(x, decimals)`` with ``decimals != 0``: 4 ulp (scaling rounds twice).
* Reductions, ``cumsum`` and ``matmul`` use error bounds scaled by the magnitudes
  involved (see ``accumulation_tolerance``); the summation order is qtrace's choice.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

import qtrace as qt

DTYPES = ("float32", "float64", "int32", "int64", "uint32", "bool")
FLOATS = ("float32", "float64")
INTS = ("int32", "int64", "uint32")


# --- tolerances ----------------------------------------------------------------------
@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


EPS32 = float(np.finfo(np.float32).eps)  # 2**-23
EPS64 = float(np.finfo(np.float64).eps)
EXACT = {"float32": Tol(0.0, 0.0), "float64": Tol(0.0, 0.0)}
# Transcendental functions: NumPy's float32 SIMD exp/log/sin/cos/... are within ~2 ulp of
# the true value (observed: the two libraries differ by <= 1.9 ulp), float64 (libm/SVML)
# within ~1 ulp (observed: <= 4 ulp apart). Relative tolerance 4 ulp (float32) and 16
# ulp (float64, far below the 1e-12 that would hide a sloppy argument reduction);
# the tiny atol only admits results that underflow differently to 0 / the smallest
# subnormal.
TRANSCENDENTAL = {"float32": Tol(4 * EPS32, 1e-44), "float64": Tol(16 * EPS64, 1e-320)}
TRANSCENDENTAL_SIMD = TRANSCENDENTAL  # (kept as a name: one tolerance serves all)
# power: the same (inputs are exact, so a correctly rounded pow is within 0.5 ulp).
POWER = TRANSCENDENTAL


def accumulation_tolerance(dtype: str, n: int) -> float:
    """Relative bound (to the sum of magnitudes) of two different summation orders of n terms."""
    eps = EPS32 if dtype == "float32" else EPS64
    return 2.0 * max(n, 1) * eps


# --- input domains -------------------------------------------------------------------
# name -> (float sampler, (int low, int high) for signed ints, (low, high) for uint32)
def _uniform(lo, hi):
    return lambda rng, shape: rng.uniform(lo, hi, shape)


def _nonzero(rng, shape):
    x = rng.uniform(0.25, 5.0, shape)
    return np.where(rng.random(shape) < 0.5, -x, x)


DOMAINS = {
    "real": (_uniform(-5.0, 5.0), (-50, 50), (0, 100)),
    "positive": (_uniform(0.05, 10.0), (1, 100), (1, 100)),
    "nonneg": (_uniform(0.0, 10.0), (0, 100), (0, 100)),
    "nonzero": (_nonzero, (-50, 50), (1, 100)),
    "unit": (_uniform(-1.0, 1.0), (-1, 1), (0, 1)),
    "open_unit": (_uniform(-0.99, 0.99), (0, 0), (0, 0)),
    "ge1": (_uniform(1.0, 10.0), (1, 100), (1, 100)),
    "gt_m1": (_uniform(-0.95, 10.0), (0, 100), (0, 100)),
    "halfpi": (_uniform(-1.5, 1.5), (-50, 50), (0, 100)),
    "base": (_uniform(0.1, 4.0), (-20, 20), (0, 40)),       # power base
    "exponent": (_uniform(-3.0, 3.0), (0, 5), (0, 5)),       # power exponent (ints: >= 0)
    "shift": (_uniform(0.0, 1.0), (0, None), (0, None)),     # ints: 0 .. bits-1
    "bool": (None, None, None),                               # always a bool mask
}


def make_input(rng: np.random.Generator, domain: str, dtype: str, shape: tuple) -> np.ndarray:
    """Random array of ``dtype`` and ``shape`` drawn from ``domain``."""
    if domain == "bool" or dtype == "bool":
        if domain in ("nonzero", "positive", "ge1"):
            return np.ones(shape, dtype=bool)
        return rng.random(shape) < 0.5
    sample, signed, unsigned = DOMAINS[domain]
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.asarray(sample(rng, shape)).astype(dt)
    lo, hi = signed if dt.kind == "i" else unsigned
    if hi is None:
        hi = dt.itemsize * 8 - 1
    out = rng.integers(lo, hi, shape, endpoint=True)
    if domain == "nonzero":
        out[out == 0] = 1
    return out.astype(dt)


def wide_values(rng: np.random.Generator, domain: str, dtype: str, n: int) -> np.ndarray:
    """``n`` floats over the whole range of ``dtype``: a third from the domain, the rest
    log-uniform magnitudes (subnormal to near overflow, either sign) and special values
    (NaN, infinities, signed zeros) scattered among them, so that they land in the middle
    of vectorized blocks and parallel chunks."""
    dt = np.dtype(dtype)
    fi = np.finfo(dt)
    x = make_input(rng, domain, dtype, (n,)).astype(np.float64)
    lo, hi = np.log10(float(fi.smallest_subnormal)), np.log10(float(fi.max)) - 0.01
    mag = 10.0 ** rng.uniform(lo, hi, n)
    mag = np.where(rng.random(n) < 0.5, -mag, mag)
    pick = rng.random(n)
    x = np.where((pick > 1 / 3) & (pick < 0.95), mag, x)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0])
    x = np.where(pick >= 0.95, specials[rng.integers(0, len(specials), n)], x)
    return x.astype(dt)


def special_values(domain: str, dtype: str) -> np.ndarray:
    """Edge values of ``dtype`` (NaN, infinities, signed zeros, extremes, subnormals).

    Floats get every special value whatever the domain (NumPy's NaN results are the
    reference); integers get extremes restricted to what NumPy defines for the domain.
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        fi = np.finfo(dt)
        vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 0.1, 3.0, 1e-7,
                float(fi.smallest_subnormal), float(fi.max), -float(fi.max), 1e10]
        return np.array(vals, dtype=dt)
    if dt.kind == "b":
        return np.array([False, True])
    ii = np.iinfo(dt)
    bits = dt.itemsize * 8
    if domain == "shift":
        return np.array([0, 1, 3, bits - 1, bits, bits + 8], dtype=dt)
    if domain == "exponent":
        return np.array([0, 1, 2, 3, 31, 63], dtype=dt)
    base = [0, 1, 2, 7, ii.max, ii.max - 1, ii.max // 2 + 1]
    if dt.kind == "i":
        base += [-1, -2, -7, ii.min, ii.min + 1]
    vals = np.array(base, dtype=dt)
    if domain in ("positive", "nonzero_strict"):
        vals = vals[vals != 0]
    return vals


# --- records -------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    name: str                      # test id
    qt: Callable                   # qtrace callable
    ref: Callable                  # NumPy reference callable
    arity: int
    domain: tuple                  # input domain per argument
    dtypes: tuple                  # dtypes tested (of every argument)
    tol: dict = field(default_factory=lambda: EXACT)   # float dtype -> Tol
    kind: str = "elementwise"
    cases: dict | None = None      # non-elementwise: case id -> input shapes
    arg_dtypes: tuple | None = None  # per-argument dtype override ("bool" for where's mask)
    special: bool = True           # elementwise: run the special-values case
    forward_cases: dict | None = None  # extra cases for the forward checks only (large
    #                                    inputs, NaN layouts): kept out of ``cases``
    note: str = ""


def _qt(name: str) -> Callable:
    """``qt.<name>`` looked up at call time (a missing function fails only its own tests)."""
    def fn(*args, **kwargs):
        return getattr(qt, name)(*args, **kwargs)
    fn.__name__ = name
    return fn


def numpy_dtypes(ref: Callable, arity: int, domain: tuple, candidates=DTYPES,
                 arg_dtypes=None) -> tuple:
    """The candidate dtypes NumPy accepts for ``ref`` with a result qtrace must support.

    A float16 result (NumPy's choice for e.g. ``np.sqrt(bool)``) is left out: SPEC §1
    makes float16 optional.
    """
    ok = []
    for dt in candidates:
        args = [np.ones(2, dtype=(arg_dtypes or {}).get(i, dt)) for i in range(arity)]
        try:
            with np.errstate(all="ignore"):
                out = ref(*args)
        except (TypeError, ValueError):
            continue
        if np.asarray(out).dtype != np.float16:
            ok.append(dt)
    return tuple(ok)


def numpy_rejects(ref: Callable, arity: int, candidates=DTYPES) -> tuple:
    """Candidate dtypes for which NumPy raises ``TypeError`` (qtrace must too)."""
    bad = []
    for dt in candidates:
        try:
            with np.errstate(all="ignore"):
                ref(*[np.ones(2, dtype=dt) for _ in range(arity)])
        except TypeError:
            bad.append(dt)
    return tuple(bad)


_EXACT_FLOAT = {
    "abs", "negative", "positive", "add", "subtract", "multiply", "divide", "floor_divide",
    "remainder", "sqrt", "square", "reciprocal", "floor", "ceil", "trunc", "round", "sign",
    "minimum", "maximum", "isnan", "isinf", "isfinite", "logical_and", "logical_or",
    "logical_not", "logical_xor", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift",
    "right_shift",
}
# NumPy float32 uses SIMD approximations for these (≤ ~4 ulp): tolerate 8 ulp.
_SIMD_F32 = {"exp", "log", "sin", "cos", "tan", "exp2", "log2", "log10", "expm1", "log1p",
             "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh",
             "arccosh", "arctanh", "hypot"}

# name -> argument domains
_UNARY = {
    "abs": "real", "negative": "real", "positive": "real", "sqrt": "nonneg", "square": "real",
    "reciprocal": "nonzero", "exp": "real", "exp2": "real", "expm1": "real", "log": "positive",
    "log2": "positive", "log10": "positive", "log1p": "gt_m1", "sin": "real", "cos": "real",
    "tan": "halfpi", "arcsin": "unit", "arccos": "unit", "arctan": "real", "sinh": "real",
    "cosh": "real", "tanh": "real", "arcsinh": "real", "arccosh": "ge1", "arctanh": "open_unit",
    "floor": "real", "ceil": "real", "trunc": "real", "sign": "real", "isnan": "real",
    "isinf": "real", "isfinite": "real", "logical_not": "real", "invert": "real",
}
_BINARY = {
    "add": ("real", "real"), "subtract": ("real", "real"), "multiply": ("real", "real"),
    "divide": ("real", "nonzero"), "floor_divide": ("real", "nonzero"),
    "remainder": ("real", "nonzero"), "power": ("base", "exponent"),
    "arctan2": ("real", "real"), "hypot": ("real", "real"), "minimum": ("real", "real"),
    "maximum": ("real", "real"), "logical_and": ("real", "real"),
    "logical_or": ("real", "real"), "logical_xor": ("real", "real"),
    "equal": ("unit", "unit"), "not_equal": ("unit", "unit"), "less": ("real", "real"),
    "less_equal": ("unit", "unit"), "greater": ("real", "real"),
    "greater_equal": ("unit", "unit"), "bitwise_and": ("real", "real"),
    "bitwise_or": ("real", "real"), "bitwise_xor": ("real", "real"),
    "left_shift": ("real", "shift"), "right_shift": ("real", "shift"),
}


def _tol_for(name: str) -> dict:
    if name in _EXACT_FLOAT:
        return EXACT
    if name == "power":
        return POWER
    return TRANSCENDENTAL_SIMD if name in _SIMD_F32 else TRANSCENDENTAL


def _elementwise(name: str, qt_fn, ref, domain: tuple, tol=None, note: str = "",
                 arg_dtypes=None, candidates=DTYPES, special=True) -> Op:
    arity = len(domain)
    dts = numpy_dtypes(ref, arity, domain, candidates, arg_dtypes)
    return Op(name, qt_fn, ref, arity, domain, dts, tol or _tol_for(name.split(":")[0]),
              arg_dtypes=tuple(sorted((arg_dtypes or {}).items())) or None, special=special,
              note=note)


def _floor_divide_ref(x, y):
    """NumPy's ``floor_divide``, except that an infinite float operand gives
    ``floor(x / y)`` as the Array API specifies (NumPy: NaN for ``inf // 2``, -1 for
    ``-1 // inf``); special values (``special=True``) exercise both."""
    q = np.floor_divide(x, y)
    if q.dtype.kind != "f":
        return q
    with np.errstate(all="ignore"):
        return np.where(np.isinf(x) | np.isinf(y), np.floor(np.true_divide(x, y)), q).astype(q.dtype)


_REFERENCE = {"floor_divide": _floor_divide_ref}
ELEMENTWISE: list[Op] = []
for _name, _dom in _UNARY.items():
    ELEMENTWISE.append(_elementwise(_name, _qt(_name), getattr(np, _name), (_dom,)))
for _name, _dom in _BINARY.items():
    ELEMENTWISE.append(_elementwise(_name, _qt(_name), _REFERENCE.get(_name, getattr(np, _name)), _dom))

# SPEC names with no ufunc of the same name, or with extra arguments.
ELEMENTWISE += [
    _elementwise("round", _qt("round"), np.round, ("real",)),
    _elementwise("round:decimals=2", lambda x: qt.round(x, 2), lambda x: np.round(x, 2),
                 ("real",), tol={"float32": Tol(4 * EPS32, 0.0), "float64": Tol(4 * EPS64, 0.0)},
                 note="rint(x*100)/100 rounds twice; where NumPy scales differently: few ulp"),
    _elementwise("round:decimals=-1", lambda x: qt.round(x, -1), lambda x: np.round(x, -1),
                 ("real",), tol={"float32": Tol(4 * EPS32, 0.0), "float64": Tol(4 * EPS64, 0.0)},
                 note="rint(x/10)*10 rounds twice: few ulp"),
    _elementwise("clip", _qt("clip"), np.clip, ("real", "unit", "unit")),
    _elementwise("clip:scalars", lambda x: qt.clip(x, 1, 3), lambda x: np.clip(x, 1, 3),
                 ("real",)),
    _elementwise("clip:min_only", lambda x: qt.clip(x, 0.5, None),
                 lambda x: np.clip(x, 0.5, None), ("real",)),
    _elementwise("where", _qt("where"), np.where, ("bool", "real", "real"),
                 arg_dtypes={0: "bool"}),
    _elementwise("where:scalars", lambda c, x: qt.where(c, x, 0),
                 lambda c, x: np.where(c, x, 0), ("bool", "real"), arg_dtypes={0: "bool"}),
]



# NumPy ufuncs added after SPEC §2 (new primitives): exact ones (fmod, ldexp, frexp, the
# integer functions) compare exactly.
def _ldexp(xp, x, n):
    """``ldexp`` with the exponent cast to int32: the gradient suite draws every argument
    as float64 (nothing reaches the exponent either way)."""
    return xp.ldexp(x, xp.astype(n, "int32"))


def _integer_ufunc(ufunc):
    """``ufunc`` raising a plain ``TypeError`` where NumPy raises its subclass for a missing
    loop (``gcd(int32, float32)``: ``_UFuncNoLoopError``); qtrace raises ``TypeError``."""
    def ref(*args):
        try:
            return ufunc(*args)
        except TypeError as err:
            raise TypeError(str(err)) from None
    ref.__name__ = ufunc.__name__
    return ref


def _frexp_mantissa(xp, x):
    return xp.frexp(x)[0]


def _frexp_exponent(xp, x):
    return xp.frexp(x)[1]


ELEMENTWISE += [
    _elementwise("cbrt", _qt("cbrt"), np.cbrt, ("real",)),
    _elementwise("fmod", _qt("fmod"), np.fmod, ("real", "nonzero"), tol=EXACT),
    _elementwise("gcd", _qt("gcd"), _integer_ufunc(np.gcd), ("real", "real")),
    _elementwise("lcm", _qt("lcm"), _integer_ufunc(np.lcm), ("real", "real")),
    _elementwise("bitwise_count", _qt("bitwise_count"), np.bitwise_count, ("real",)),
    _elementwise("ldexp", partial(_ldexp, qt), partial(_ldexp, np), ("real", "real"), tol=EXACT,
                 arg_dtypes={1: "int32"}),
    _elementwise("frexp:mantissa", partial(_frexp_mantissa, qt), partial(_frexp_mantissa, np),
                 ("real",), tol=EXACT),
    _elementwise("frexp:exponent", partial(_frexp_exponent, qt), partial(_frexp_exponent, np),
                 ("real",), tol=EXACT, candidates=DTYPES[:-1],
                 note="bool: NumPy's mantissa is float16, which qtrace leaves out (SPEC §1)"),
]

# Operators: the same Python expression runs on tensors and on arrays.
_OPS_BINARY = {
    "+": (operator.add, "add"), "-": (operator.sub, "subtract"), "*": (operator.mul, "multiply"),
    "/": (operator.truediv, "divide"), "//": (operator.floordiv, "floor_divide"),
    "%": (operator.mod, "remainder"), "**": (operator.pow, "power"),
    "&": (operator.and_, "bitwise_and"), "|": (operator.or_, "bitwise_or"),
    "^": (operator.xor, "bitwise_xor"), "<<": (operator.lshift, "left_shift"),
    ">>": (operator.rshift, "right_shift"), "==": (operator.eq, "equal"),
    "!=": (operator.ne, "not_equal"), "<": (operator.lt, "less"),
    "<=": (operator.le, "less_equal"), ">": (operator.gt, "greater"),
    ">=": (operator.ge, "greater_equal"),
}
_OPS_UNARY = {"neg": (operator.neg, "negative"), "pos": (operator.pos, "positive"),
              "abs": (abs, "abs"), "~": (operator.invert, "invert")}
OPERATORS: list[Op] = []
for _sym, (_fn, _name) in _OPS_BINARY.items():
    OPERATORS.append(_elementwise(f"op{_sym}", _fn, _fn, _BINARY[_name], tol=_tol_for(_name),
                                  special=False))
for _sym, (_fn, _name) in _OPS_UNARY.items():
    OPERATORS.append(_elementwise(f"op:{_sym}", _fn, _fn, (_UNARY[_name],), tol=_tol_for(_name),
                                  special=False))

BINARY_OPERATORS = {op.name: op for op in OPERATORS if op.arity == 2}
ELEMENTWISE_BY_NAME = {op.name: op for op in ELEMENTWISE + OPERATORS}

# Shape cases for elementwise records: case -> per-argument (shape, layout).
# Layouts: "c" contiguous, "T" a transposed NumPy view, "neg" a negative-stride NumPy view,
# "step" a strided NumPy slice; all are handed to qt.asarray as they are (zero-copy).
ELEMENTWISE_CASES = {
    1: {
        "0d": [((), "c")],
        "empty": [((0, 3), "c")],
        "1d": [((7,), "c")],
        "T": [((3, 4), "T")],
        "neg": [((3, 4), "neg")],
    },
    2: {
        "0d": [((), "c"), ((), "c")],
        "empty": [((0, 3), "c"), ((3,), "c")],
        "bcast": [((3, 1), "c"), ((4,), "c")],
        "views": [((3, 4), "T"), ((3, 4), "neg")],
        "scalar_bcast": [((), "c"), ((2, 3), "step")],
    },
    3: {
        "0d": [((), "c")] * 3,
        "empty": [((0, 3), "c"), ((3,), "c"), ((1, 3), "c")],
        "bcast": [((3, 1), "c"), ((4,), "c"), ((1, 4), "T")],
        "views": [((3, 4), "neg"), ((3, 4), "T"), ((3, 4), "step")],
    },
}


# Large cases (not in ELEMENTWISE_CASES, whose small shapes other suites iterate over):
# over ``PARALLEL_MIN_WORK`` elements, so kernels run vectorized and split across threads.
LARGE_CASES = {
    1: {"large": [((211, 193), "T")]},
    2: {"large": [((263, 1), "c"), ((129,), "neg")]},
    3: {"large": [((263, 1), "c"), ((129,), "neg"), ((1, 129), "T")]},
}
WIDE_SIZE = 40009  # "wide" case: 1-D contiguous floats from wide_values


def layout(a: np.ndarray, kind: str) -> np.ndarray:
    """``a``'s values in a NumPy array of the given memory layout (a view where asked)."""
    if kind in ("c", "nan") or a.ndim == 0:  # "nan": values already injected by the caller
        return np.ascontiguousarray(a)
    if kind == "T":
        return np.ascontiguousarray(a.T).T
    if kind == "neg":  # negative strides on every axis, every other element
        big = np.zeros(tuple(2 * d for d in a.shape), dtype=a.dtype)
        view = big[tuple(slice(None, None, -2) for _ in a.shape)]
        view[...] = a
        return view
    if kind == "step":  # positive steps, offset start
        big = np.zeros(tuple(3 * d + 1 for d in a.shape), dtype=a.dtype)
        view = big[tuple(slice(1, None, 3) for _ in a.shape)]
        view[...] = a
        return view
    raise ValueError(kind)


# --- reductions ----------------------------------------------------------------------
def _bind(f: Callable) -> tuple:
    return partial(f, qt), partial(f, np)


# layout "nan": float inputs get NaN/inf/-0.0 at random places (see record_inputs)
_RED_SHAPES = {"3d": [(2, 3, 4)], "3d_T": [((2, 3, 4), "T")]}
_RED_FORWARD = {  # variant id -> forward-only cases
    "all_axes": {"3d_nan": [((2, 3, 4), "nan")], "large": [((307, 137), "neg")]},
    "axis0": {"3d_nan": [((2, 3, 4), "nan")], "large": [(301, 137)]},
    "axis-1_keep": {"3d_nan": [((2, 3, 4), "nan")], "large": [((137, 301), "T")]},
    "axis(0,2)": {"3d_nan": [((2, 3, 4), "nan")]},
}
REDUCTION_VARIANTS = [
    # (id, kwargs, extra shape cases)
    ("all_axes", {}, {"0d": [()], "1d": [(7,)]}),
    ("axis0", {"axis": 0}, {}),
    ("axis-1_keep", {"axis": -1, "keepdims": True}, {}),
    ("axis(0,2)", {"axis": (0, 2)}, {}),
    ("axis(-1,0)_keep", {"axis": (-1, 0), "keepdims": True}, {}),
    ("none_keep", {"axis": None, "keepdims": True}, {}),
]
_EMPTY_OK = {"sum", "prod", "any", "all", "mean"}


def _reduction_records() -> list:
    recs = []
    for name in ("sum", "prod", "mean", "max", "min", "argmax", "argmin", "any", "all"):
        for vid, kw, extra in REDUCTION_VARIANTS:
            if name in ("argmax", "argmin") and isinstance(kw.get("axis"), tuple):
                continue
            cases = dict(_RED_SHAPES, **extra)
            if name in _EMPTY_OK and vid == "axis0":
                cases["empty"] = [(0, 3)]
                cases["empty_kept"] = [(3, 0)]
            for form in ("fn", "method"):
                if form == "method" and vid not in ("axis0", "axis(0,2)", "axis-1_keep"):
                    continue

                def f(xp, x, name=name, kw=kw, form=form):
                    return getattr(x, name)(**kw) if form == "method" else getattr(xp, name)(x, **kw)
                q, r = _bind(f)
                domain = "base" if name in ("prod", "mean") else "real"
                dts = DTYPES if form == "fn" else ("float32", "int64")
                recs.append(Op(f"{name}[{vid}]{'.method' if form == 'method' else ''}", q, r, 1,
                               (domain,), dts, kind="reduction", cases=cases,
                               forward_cases=_RED_FORWARD.get(vid) if form == "fn" else None))
    for vid, kw in (("axis=None", {}), ("axis=0", {"axis": 0}), ("axis=-1", {"axis": -1})):
        for form in ("fn", "method"):
            def f(xp, x, kw=kw, form=form):
                return x.cumsum(**kw) if form == "method" else xp.cumsum(x, **kw)
            q, r = _bind(f)
            recs.append(Op(f"cumsum[{vid}]{'.method' if form == 'method' else ''}", q, r, 1,
                           ("real",), DTYPES if form == "fn" else ("float32", "int32"),
                           kind="reduction",
                           cases={"2d": [(3, 5)], "2d_T": [((3, 5), "T")], "empty": [(0, 4)]},
                           forward_cases={"2d_nan": [((3, 5), "nan")],
                                          "large": [((211, 197), "T")]}))
    return recs


REDUCTIONS = _reduction_records()


# --- shape functions -----------------------------------------------------------------
def _shape(name, f, cases, dtypes=("float32", "bool"), then=False):
    q, r = _bind(f)
    recs = [Op(name, q, r, len(next(iter(cases.values()))), ("real",) * 3, dtypes, kind="shape",
               cases=cases)]
    if then:  # the view followed by arithmetic: views fused into an elementwise consumer
        def g(xp, *xs):
            return f(xp, *xs) * 2 + 1
        q2, r2 = _bind(g)
        recs.append(Op(name + "+arith", q2, r2, recs[0].arity, ("real",) * 3, ("float64", "int32"),
                       kind="shape", cases=cases))
    return recs


_X3 = {"c": [(2, 3, 4)], "T": [((2, 3, 4), "T")], "neg": [((2, 3, 4), "neg")]}
SHAPE_OPS = [
    *_shape("reshape(4,-1)", lambda xp, x: xp.reshape(x, (4, -1)), _X3, then=True),
    *_shape("x.reshape(-1,2,3)", lambda xp, x: x.reshape(-1, 2, 3), _X3),
    *_shape("x.reshape((6,4))", lambda xp, x: x.reshape((6, 4)), _X3),
    *_shape("reshape(-1)", lambda xp, x: xp.reshape(x, -1), {**_X3, "0d": [()], "empty": [(0, 3)]}),
    *_shape("reshape_0d->(1,1)", lambda xp, x: xp.reshape(x, (1, 1)), {"0d": [()]}),
    *_shape("transpose", lambda xp, x: xp.transpose(x), _X3, then=True),
    *_shape("transpose(1,2,0)", lambda xp, x: xp.transpose(x, (1, 2, 0)), _X3, then=True),
    *_shape("transpose(-1,0,1)", lambda xp, x: xp.transpose(x, (-1, 0, 1)), _X3),
    *_shape("x.transpose(2,0,1)", lambda xp, x: x.transpose(2, 0, 1), _X3),
    *_shape("x.T", lambda xp, x: x.T, {**_X3, "1d": [(5,)], "0d": [()]}, then=True),
    *_shape("x.T.T", lambda xp, x: x.T.T, _X3),
    *_shape("swapaxes(0,2)", lambda xp, x: xp.swapaxes(x, 0, 2), _X3),
    *_shape("x.swapaxes(-1,1)", lambda xp, x: x.swapaxes(-1, 1), _X3),
    *_shape("expand_dims(1)", lambda xp, x: xp.expand_dims(x, 1), _X3, then=True),
    *_shape("expand_dims(-1)", lambda xp, x: xp.expand_dims(x, -1), {**_X3, "0d": [()]}),
    *_shape("expand_dims((0,3))", lambda xp, x: xp.expand_dims(x, (0, 3)), _X3),
    *_shape("squeeze", lambda xp, x: xp.squeeze(x),
            {"c": [(1, 3, 1, 4)], "T": [((1, 3, 1, 4), "T")], "all1": [(1, 1)]}),
    *_shape("squeeze(axis=2)", lambda xp, x: xp.squeeze(x, axis=2), {"c": [(3, 4, 1)]}),
    *_shape("x.squeeze((0,-1))", lambda xp, x: x.squeeze((0, -1)), {"c": [(1, 4, 1)]}),
    *_shape("broadcast_to", lambda xp, x: xp.broadcast_to(x, (2, 3, 4)),
            {"row": [(4,)], "col": [(3, 1)], "0d": [()], "same": [(2, 3, 4)]}, then=True),
    *_shape("broadcast_to_empty", lambda xp, x: xp.broadcast_to(x, (0, 4)), {"row": [(4,)]}),
    *_shape("concatenate(axis=0)", lambda xp, a, b: xp.concatenate([a, b]),
            {"c": [(2, 3), (4, 3)], "views": [((2, 3), "T"), ((1, 3), "neg")],
             "empty": [(0, 3), (2, 3)]}, then=True),
    *_shape("concatenate(axis=-1)", lambda xp, a, b: xp.concatenate([a, b], axis=-1),
            {"c": [(2, 3), (2, 5)], "views": [((2, 3), "neg"), ((2, 1), "T")]}),
    *_shape("concatenate(axis=None)", lambda xp, a, b: xp.concatenate([a, b], axis=None),
            {"c": [(2, 3), (4,)]}),
    *_shape("concatenate3", lambda xp, a, b, c: xp.concatenate([a, b, c], axis=1),
            {"c": [(2, 1), (2, 3), (2, 2)]}),
    *_shape("stack(axis=0)", lambda xp, a, b: xp.stack([a, b]),
            {"c": [(2, 3), (2, 3)], "views": [((2, 3), "T"), ((2, 3), "neg")], "0d": [(), ()]},
            then=True),
    *_shape("stack(axis=-1)", lambda xp, a, b, c: xp.stack([a, b, c], axis=-1),
            {"c": [(4,), (4,), (4,)]}),
    *_shape("stack(axis=1)", lambda xp, a, b: xp.stack((a, b), axis=1), {"c": [(2, 3), (2, 3)]}),
    *_shape("flip", lambda xp, x: xp.flip(x), {**_X3, "empty": [(0, 2)]}, then=True),
    *_shape("flip(axis=1)", lambda xp, x: xp.flip(x, axis=1), _X3, then=True),
    *_shape("flip(axis=(0,-1))", lambda xp, x: xp.flip(x, axis=(0, -1)), _X3),
    *_shape("ravel", lambda xp, x: xp.ravel(x), {**_X3, "0d": [()]}, then=True),
    *_shape("x.ravel", lambda xp, x: x.ravel(), _X3),
    *_shape("transpose_then_reshape", lambda xp, x: xp.reshape(xp.transpose(x, (2, 0, 1)), (8, 3)),
            _X3),
    *_shape("flip_slice_reshape", lambda xp, x: xp.flip(x, 1)[:, ::2].reshape(-1, 4), _X3),
]


# --- linear algebra ------------------------------------------------------------------
def _mm(name, f, cases, dtypes=("float32", "float64", "int32", "int64", "uint32", "bool")):
    q, r = _bind(f)
    big = {"big": [((67, 129), "T"), (129, 65)]} if cases is _MM_CASES else None
    return Op(name, q, r, 2, ("unit", "unit"), dtypes, kind="linalg", cases=cases,
              forward_cases=big)


_MM_CASES = {
    "1d@1d": [(5,), (5,)], "2d@1d": [(3, 5), (5,)], "1d@2d": [(5,), (5, 4)],
    "2d@2d": [(3, 5), (5, 4)], "T@neg": [((3, 5), "T"), ((5, 4), "neg")],
    "empty_k": [(3, 0), (0, 4)], "empty_m": [(0, 5), (5, 4)],
}
LINALG = [
    _mm("@", lambda xp, a, b: a @ b, _MM_CASES),
    _mm("matmul", lambda xp, a, b: xp.matmul(a, b), _MM_CASES),
    _mm("dot", lambda xp, a, b: xp.dot(a, b), _MM_CASES),
    _mm("x.dot", lambda xp, a, b: a.dot(b), {"2d@2d": [(3, 5), (5, 4)], "1d@1d": [(5,), (5,)]}),
    _mm("@+arith", lambda xp, a, b: (a @ b) * 2, {"2d@2d": [(3, 5), (5, 4)]},
        dtypes=("float64", "int32")),
    _mm("dot(a.T,b)", lambda xp, a, b: xp.dot(a.T, b), {"2d@2d": [(5, 3), (5, 4)]},
        dtypes=("float64", "int64")),
]


# --- indexing ------------------------------------------------------------------------
def _key_to_qt(key):
    """The same key with NumPy integer arrays turned into qt tensors."""
    if isinstance(key, tuple):
        return tuple(_key_to_qt(k) for k in key)
    if isinstance(key, np.ndarray):
        return qt.asarray(key)
    return key


A = np.array
_IDX_X = {"c": [(5, 6, 7)], "T": [((5, 6, 7), "T")]}
INDEX_KEYS = {
    # basic
    "int": 2, "neg_int": -1, "ints2": (1, -2), "ints3_0d": (4, 0, -7),
    "slice": slice(1, 4), "step": slice(None, None, 2), "neg_step": slice(None, None, -1),
    "neg_step2": slice(4, 0, -2), "empty_slice": slice(3, 3),
    "2slices": (slice(None), slice(1, None, 3)), "slice_neg_bounds": (slice(-3, None), slice(-1, -5, -1)),
    "ellipsis_int": (Ellipsis, 1), "ellipsis": Ellipsis, "none": (None, 1),
    "none_mid": (1, None, Ellipsis, None), "slice_none_int": (slice(None), None, 2),
    "int_ellipsis_step": (0, Ellipsis, slice(None, None, -3)),
    # advanced (integer arrays)
    "arr": A([0, 2, 4]), "arr_neg_rep": A([-1, -1, 0, 3, -5]), "arr2d": A([[0, 1], [2, 3]]),
    "arr_arr": (A([0, 2, 4]), A([1, -1, 0])),
    "slice_arr_arr_adjacent": (slice(None), A([1, 2]), A([3, -4])),
    "arr_slice_arr_nonadjacent": (A([0, 2]), slice(None), A([1, 3])),
    "int_slice_arr_nonadjacent": (1, slice(1, 5, 2), A([[1, 3], [0, 6]])),
    "slice_int_arr_adjacent": (slice(None, None, -2), 1, A([1, 3, 3])),
    "ellipsis_arr": (Ellipsis, A([1, -1])), "none_arr": (None, A([1, 2])),
    "arr_bcast": (A([[0], [4]]), slice(2, 4), A([1, 2, 3])),
    # an Ellipsis or None between advanced indices separates them (NumPy then puts the
    # advanced dimensions first), even an Ellipsis that stands for no axis
    "arr_none_arr": (A([0, 2]), None, A([1, 3])),
    "slice_arr_emptyellipsis_arr": (slice(None), A([0, 2]), Ellipsis, A([1, 3])),
    "arr_empty": A([], dtype=np.int64), "arr_int32": A([3, 1], dtype=np.int32),
    "arr_uint32": (slice(None), A([5, 0], dtype=np.uint32)),
    "arr_0d": A(3),
}
# boolean masks (eager code only); a callable builds the mask from the data
MASK_KEYS = {
    "mask_axis0": lambda x: A([True, False, True, True, False]),
    "mask_full": lambda x: x > 0,
    "mask_2d_slice": lambda x: (A(np.arange(30).reshape(5, 6) % 3 == 0), slice(1, 3)),
    "int_mask": lambda x: (2, A([True, False] * 3)),
    "mask_none": lambda x: np.zeros(5, dtype=bool),
    "scalar_true": lambda x: True,               # NumPy: same as x[None]
    "scalar_false_int": lambda x: (False, 2),    # a new axis of length 0, then x[2]
}


def _getitem(key, to_qt: bool):
    def q(x):
        return x[_key_to_qt(key) if to_qt else key]

    def r(x):
        return x[key]
    return q, r


def _mask_getitem(mk, mask_as_tensor: bool):
    def q(x):
        if mask_as_tensor:  # "mask_full" then builds a lazy qt mask from the tensor itself
            return x[_key_to_qt(mk(x))]
        return x[mk(np.asarray(x))]

    def r(x):
        return x[mk(x)]
    return q, r


INDEXING = []
for _kid, _key in INDEX_KEYS.items():
    _q, _r = _getitem(_key, False)
    INDEXING.append(Op(f"x[{_kid}]", _q, _r, 1, ("real",), ("float64", "bool"),
                       kind="index", cases=_IDX_X))
    if any(isinstance(k, np.ndarray) for k in (_key if isinstance(_key, tuple) else (_key,))):
        _q, _r = _getitem(_key, True)
        INDEXING.append(Op(f"x[{_kid}]:qt_index", _q, _r, 1, ("real",), ("float32",),
                           kind="index", cases={"c": [(5, 6, 7)]}))
for _kid, _mk in MASK_KEYS.items():
    for _as_t in (False, True):
        _q, _r = _mask_getitem(_mk, _as_t)
        INDEXING.append(Op(f"x[{_kid}]{':qt_mask' if _as_t else ''}", _q, _r, 1, ("real",),
                           ("float64", "int64") if not _as_t else ("float32",), kind="index",
                           cases={"c": [(5, 6, 7)]}))
# 1-D and 0-d inputs
_BIG = np.random.default_rng(1234)
BIG_INDEX = _BIG.integers(-8, 8, 50021)       # parallel gathers, repeated and negative indices
HIST_INDEX = _BIG.integers(0, 100, 50021)     # parallel scatters into 100 bins
for _kid, _key in {"int": 3, "neg_step": slice(None, None, -3), "arr": A([0, 0, -1]),
                   "none_ellipsis": (None, Ellipsis)}.items():
    _q, _r = _getitem(_key, False)
    INDEXING.append(Op(f"v[{_kid}]", _q, _r, 1, ("real",), ("float32", "uint32"), kind="index",
                       cases={"1d": [(8,)]}))
# forward-only records with large index arrays (parallel gathers and scatters)
BIG_RECORDS = []
for _kid, _key in {"arr_big": BIG_INDEX, "arr_big_2d": BIG_INDEX[:40000].reshape(200, 200)}.items():
    _q, _r = _getitem(_key, False)
    BIG_RECORDS.append(Op(f"v[{_kid}]", _q, _r, 1, ("real",), ("float32", "int64"), kind="index",
                          cases={"1d": [(8,)], "1d_neg": [((8,), "neg")]}))
for _kid, _key in {"ellipsis": Ellipsis, "none": None, "empty_tuple": ()}.items():
    _q, _r = _getitem(_key, False)
    INDEXING.append(Op(f"s[{_kid}]", _q, _r, 1, ("real",), ("float64",), kind="index",
                       cases={"0d": [()]}))


# --- updates: x[idx] = v and x.at[idx].<mode>(v) -------------------------------------
_AT_REF = {"add": np.add.at, "multiply": np.multiply.at, "min": np.minimum.at,
           "max": np.maximum.at}
# key id -> (key, shape of the indexed region, whether the key repeats an element)
UPDATE_KEYS = {
    "int": (2, (6, 7), False),
    "ints": ((1, -2), (7,), False),
    "slice_step": ((slice(None, None, 2), slice(1, 5)), (3, 4, 7), False),
    "neg_step": ((Ellipsis, slice(None, None, -3)), (5, 6, 3), False),
    "arr": (A([0, 3, -1]), (3, 6, 7), False),
    "arr_rep": (A([1, 3, 1, 1, -4]), (5, 6, 7), True),
    "arr_arr_rep": ((A([0, 0, 4, 0]), A([2, 2, 5, 2])), (4, 7), True),
    "slice_arr_rep": ((slice(1, 4), A([0, 0, 5])), (3, 3, 7), True),
    "nonadjacent_rep": ((A([1, 1]), slice(None), A([6, 6])), (2, 6), True),
    "ellipsis_arr": ((Ellipsis, A([0, -1, 0])), (5, 6, 3), True),
    "emptyellipsis": ((slice(None), A([0, 2]), Ellipsis, A([1, 3])), (2, 5), False),
}


def _update_records() -> list:
    recs = []
    for kid, (key, region, rep) in UPDATE_KEYS.items():
        cases = {"array_v": [(5, 6, 7), region], "scalar_v": [(5, 6, 7), ()],
                 "bcast_v": [(5, 6, 7), region[-1:]]}
        for mode in ("setitem", "set", "add", "multiply", "min", "max"):
            if rep and mode in ("setitem", "set"):
                continue  # duplicates: which value wins is unspecified

            def q(x, v, key=key, mode=mode):
                if mode == "setitem":
                    x[key] = v
                    return x
                return getattr(x.at[key], mode)(v)

            def r(x, v, key=key, mode=mode):
                y = x.copy()
                if mode in ("setitem", "set"):
                    y[key] = v
                else:
                    _AT_REF[mode](y, key, v)
                return y
            dts = ("float64", "int32") if mode != "multiply" else ("float64", "int64")
            recs.append(Op(f"{mode}[{kid}]", q, r, 2, ("real", "unit"), dts, kind="update",
                           cases=cases))
    # boolean mask updates (eager)
    for mode in ("setitem", "set", "add"):
        def q(x, v, mode=mode):
            m = np.asarray(x) > 0
            if mode == "setitem":
                x[m] = v
                return x
            return getattr(x.at[m], mode)(v)

        def r(x, v, mode=mode):
            y = x.copy()
            m = x > 0
            if mode == "add":
                np.add.at(y, m, v)
            else:
                y[m] = v
            return y
        recs.append(Op(f"{mode}[mask]", q, r, 2, ("real", "unit"), ("float32", "int64"),
                       kind="update", cases={"scalar_v": [(5, 6, 7), ()]}))
    return recs


UPDATES = _update_records()

# parallel scatters with many collisions (a histogram): accumulation must be atomic
for _mode in ("add", "min", "max"):
    def _q(x, v, mode=_mode):
        return getattr(x.at[HIST_INDEX], mode)(v)

    def _r(x, v, mode=_mode):
        y = x.copy()
        _AT_REF[mode](y, HIST_INDEX, v)
        return y
    BIG_RECORDS.append(Op(f"{_mode}[hist]", _q, _r, 2, ("real", "unit"), ("int32", "float64"),
                          kind="update", cases={"scalar_v": [(100,), ()],
                                                "array_v": [(100,), HIST_INDEX.shape]}))

TABLE = ELEMENTWISE + OPERATORS + REDUCTIONS + SHAPE_OPS + LINALG + INDEXING + UPDATES + BIG_RECORDS

# Every name of SPEC §2, to check the table's coverage.
SPEC_ELEMENTWISE = (
    "abs negative add subtract multiply divide floor_divide remainder power sqrt square "
    "reciprocal exp exp2 expm1 log log2 log10 log1p sin cos tan arcsin arccos arctan arctan2 "
    "sinh cosh tanh arcsinh arccosh arctanh floor ceil trunc round sign minimum maximum clip "
    "where isnan isinf isfinite logical_and logical_or logical_not logical_xor equal not_equal "
    "less less_equal greater greater_equal bitwise_and bitwise_or bitwise_xor invert left_shift "
    "right_shift hypot").split()
SPEC_OTHER = ("sum prod mean max min argmax argmin any all cumsum reshape transpose swapaxes "
              "expand_dims squeeze broadcast_to concatenate stack flip ravel matmul dot").split()
