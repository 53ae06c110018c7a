"""Views and writes are NumPy's: random programs and example tests checked against NumPy.

The contract (SPEC.md, "Views and writes are NumPy's"): basic indexing, ``x[...]``,
``.T``/``transpose``, ``swapaxes``, ``moveaxis`` and ``reshape``/``ravel`` where NumPy
returns a view give views; ``x[i] = v``, ``x[mask] = v``, ``x[idx] = v`` and in-place
operators on a view change the base and every other view of it; ``.copy()`` and
``qt.array`` copy; ``.at[...]`` stays functional; in-place operators keep ``x``'s dtype
and shape and refuse the casts NumPy refuses; inside ``qt.jit`` writes into argument
tensors are visible to the caller; a program written for NumPy gives NumPy's values
without added ``qt.eval`` calls.

Structure of this file

* **Random programs** (``test_random_program``). ``_Generator`` builds, from a seed, a
  straight-line program over 2-4 named base arrays (float64 and int64, shapes up to
  3-D with dims up to 6). Ops: views (basic slices with negative steps, steps > 1 and
  empty slices, integers, ``None``, ``...``, ``.T``, ``transpose``, ``swapaxes``,
  ``moveaxis``, ``x[...]``, ``reshape``/``ravel`` — annotated ``# view`` or
  ``# copy`` by ``np.shares_memory``), views of views, writes (basic keys, boolean
  masks of the view's shape or a prefix of it, unique integer-array keys, in-place
  ``+= -= *= /=`` on names and on ``name[key]``), copies (``.copy()``, ``xp.array``,
  ``.at[key].set/add`` — on NumPy the equivalent copy-then-assign), elementwise
  expressions with broadcasting, gathers and boolean-mask reads. The generator runs
  every op on NumPy as it goes (the "shadow"), so it knows shapes, dtypes and what
  NumPy makes a view. A program is kept as source text, one line per op, in a qtrace
  spelling and a NumPy spelling that differ only for ``.at`` and evaluation points;
  both are executed with ``exec``, and every name the program holds at the end (bases,
  views, copies, new arrays) is compared: shape, dtype, values (ints exactly, floats to
  1e-9). A failure prints the seeds and the whole program as a runnable script.

  A program is a function of its seed alone (the test's index; the test ids are
  stable), its data are fresh every session (drawn from the ``rng`` fixture, so
  ``QTRACE_TEST_SEED`` reproduces them). Writes whose NumPy result depends on the order
  in which NumPy copies overlapping memory (``x[::2] = x[0:3]``) are not generated (see
  ``_Generator._write``): every NumPy value checked here is also the value of the same
  program with each right-hand side copied first.

  Modes (each with fusion on and off, ``QTRACE_VIEW_SEEDS`` programs each, default 120):

  - ``eager``: the program as written, no evaluation until the final comparison (one
    ``qt.eval`` of every name);
  - ``eval``: the same kinds of programs with ``qt.eval(name)`` / ``np.asarray(name)``
    sprinkled between ops (evaluation must not change results); the final values are
    read one name at a time;
  - ``jit``: the program is the body of ``def prog(<bases>)`` returning every name,
    called through ``qt.jit`` on qtrace tensors, twice (the second call replays the
    cached plan on new data); the returned values and the caller's base tensors
    (updated in place, as NumPy's arrays are) are checked. No boolean-mask reads and no
    mask writes whose values depend on the number of selected elements.

* **Generator self-check** (``test_generator_self_check``, NumPy only, so it runs once,
  not per fusion setting), on every fifth program of each mode: the program does not
  depend on the data; the scripts, executed twice on NumPy from the same data, agree
  bit for bit with the shadow and with the program whose right-hand sides are copied
  first; the ``# view``/``# copy`` annotations are what ``np.shares_memory`` says; the
  jit-form function run on NumPy arrays updates the caller's arrays exactly as the
  eager form updates its bases; ``.copy()``/``xp.array`` and the NumPy spelling of
  ``.at`` leave their source alone and share no memory with it; every op kind occurs.

* **Hypothesis variant** (``test_random_program_hypothesis``): the same generator
  driven by Hypothesis draws, so that a failure shrinks to a short program.

* **Example tests**, one per rule, named for the rule (Game of Life, Gray-Scott,
  views of views, transposes, reshapes, ravel view vs copy, read-only broadcasts,
  copies, ``.at``, in-place casting and shape errors, 0-d masks, wrong-length masks,
  jit writes into arguments, a long eager loop).

Reproducing a failure: the message holds the script (``xp = qt``; replace with
``xp = np`` for the reference) and ``python tests/system/test_view_semantics.py MODE
PROGRAM_SEED [DATA_SEED] [--unfused] [--shrink]`` runs it on both and prints the report;
``--shrink`` first deletes ops (and unused bases) while qtrace still differs.

Cost: qtrace compiles each new kernel through LLVM (tens of milliseconds; kernels are
specialised on shapes and offsets, so random programs rarely share them), which makes
a random program cost about 0.1-0.4 s: with 300 programs per configuration the file
takes about 5 minutes on the 2-core machine, with the default 120 about 2 minutes;
``QTRACE_VIEW_HYPOTHESIS`` sets the Hypothesis examples (default 20) and
``QTRACE_VIEW_HYPOTHESIS_SHRINK=1`` lets Hypothesis shrink a failure (slow: every
candidate program compiles its kernels).
"""

from __future__ import annotations

import itertools
import linecache
import os
import random
import re
import sys
import traceback
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import qtrace as qt

N_SEEDS = int(os.environ.get("QTRACE_VIEW_SEEDS") or 120)
MODES = ("eager", "eval", "jit")
RTOL = ATOL = 1e-9


# --------------------------------------------------------------------------------------
# choosers: the generator's source of decisions (seeded ``random`` or Hypothesis draws)
# --------------------------------------------------------------------------------------
class _Seeded:
    def __init__(self, seed: int):
        self._r = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self._r.randint(lo, hi)

    def choice(self, seq):
        seq = list(seq)
        return seq[self._r.randrange(len(seq))]

    def chance(self, p: float) -> bool:
        return self._r.random() < p

    def weighted(self, table: dict):
        keys = list(table)
        return self._r.choices(keys, weights=[table[k] for k in keys])[0]

    def sample(self, seq, k: int) -> list:
        return self._r.sample(list(seq), k)


class _Drawn:
    """The same interface over Hypothesis draws (each decision shrinks towards the first
    option, ``chance`` towards False)."""

    def __init__(self, data):
        self._d = data

    def int(self, lo: int, hi: int) -> int:
        return self._d.draw(st.integers(lo, hi))

    def choice(self, seq):
        return self._d.draw(st.sampled_from(list(seq)))

    def chance(self, p: float) -> bool:
        return self._d.draw(st.integers(0, 999)) >= 1000 - int(p * 1000)

    def weighted(self, table: dict):
        keys = list(table)
        total = sum(table.values())
        x = self._d.draw(st.integers(0, total - 1))
        for k in keys:
            if x < table[k]:
                return k
            x -= table[k]
        return keys[-1]  # pragma: no cover

    def sample(self, seq, k: int) -> list:
        if k == 0:   # (as random.sample: nothing to draw, from any sequence, even an empty one)
            return []
        return self._d.draw(st.lists(st.sampled_from(list(seq)), min_size=k, max_size=k, unique=True))


# --------------------------------------------------------------------------------------
# programs
# --------------------------------------------------------------------------------------
HELPERS = '''
def _mask(bits, shape):
    """A boolean array of `shape` holding the bits of the integer `bits` (C order)."""
    n = int(np.prod(shape, dtype=np.int64))
    return xp.asarray(np.array([bits >> i & 1 for i in range(n)], dtype=bool).reshape(shape))


def _vals(k, shape, kind):
    """Deterministic values of `shape`: halves for kind 'f', int64 for 'i'."""
    n = int(np.prod(shape, dtype=np.int64))
    v = (np.arange(n, dtype=np.int64) * k % 11 - 5).reshape(shape)
    return xp.asarray(v * 0.5 if kind == "f" else v)
'''


@dataclass
class Op:
    kind: str
    qt: str                 # the op in qtrace's spelling (one line; ';' may join statements)
    np: str                 # the op in NumPy's spelling
    name: str | None = None  # the name the op defines, if any
    note: str = ""          # '# view' / '# copy' annotation of view-taking ops
    src: str | None = None  # the name a view, copy or .at op reads
    exact_count: bool = False  # a mask write whose values are one per selected element
    copied: str | None = None  # a write with its right-hand side copied first (self-check)

    def line(self, lib: str) -> str:
        text = self.qt if lib == "qt" else self.np
        return f"{text}  {self.note}" if self.note else text


@dataclass
class Program:
    mode: str
    seed: int
    data_seed: int
    bases: list                          # (name, shape, 'f' | 'i')
    ops: list = field(default_factory=list)
    names: list = field(default_factory=list)  # every name at the end, bases first

    def data_lines(self, seed: int, suffix: str = "") -> list:
        lines = [f"rng = np.random.default_rng({seed})"]
        for name, shape, kind in self.bases:
            gen = (f"rng.standard_normal({shape!r}).round(3)" if kind == "f"
                   else f"rng.integers(-9, 10, size={shape!r})")
            lines.append(f"{name}{suffix} = xp.array({gen})")
        return lines

    def preamble(self, lib: str) -> list:
        return ["import numpy as np", "import qtrace as qt", "",
                f"xp = {'qt' if lib == 'qt' else 'np'}  # the library under test", HELPERS.rstrip(), "",
                f"# program seed {self.seed}, mode {self.mode!r}, data seed {self.data_seed}"]

    def script(self, lib: str, ops=None) -> str:
        """The whole program as a runnable script with ``xp`` bound to qtrace or NumPy."""
        ops = self.ops if ops is None else ops
        out = self.preamble(lib)
        body = [op.line(lib) for op in ops]
        names = self.names if ops is self.ops else _defined(self, ops)
        if self.mode != "jit":
            return "\n".join(out + self.data_lines(self.data_seed) + body) + "\n"
        args = ", ".join(n for n, _, _ in self.bases)
        call = "qt.jit(prog)" if lib == "qt" else "prog"
        out += [f"def prog({args}):"] + [f"    {line}" for line in body]
        out += [f"    return ({', '.join(names)},)", "", f"f = {call}"]
        out += self.data_lines(self.data_seed)
        out += [f"out = f({args})"]
        out += self.data_lines(self.data_seed + 1, suffix="2")
        out += [f"out2 = f({', '.join(n + '2' for n, _, _ in self.bases)})"]
        return "\n".join(out) + "\n"


def _defined(prog: Program, ops) -> list:
    return [n for n, _, _ in prog.bases] + [op.name for op in ops if op.name]


_counter = itertools.count()


def _exec(src: str, label: str) -> dict:
    """Run a script; its lines show in tracebacks (registered with linecache)."""
    filename = f"<view-program {label} #{next(_counter)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns: dict = {"__name__": "__view_program__"}
    exec(compile(src, filename, "exec"), ns)
    return ns


# --------------------------------------------------------------------------------------
# the generator
# --------------------------------------------------------------------------------------
F_SCALARS = ["1.5", "-2.0", "0.25", "3.0", "-0.5", "7.0", "0.0"]
I_SCALARS = ["1", "-2", "3", "7", "0", "-1"]
DIV_SCALARS = ["2.0", "-4.0", "0.5", "1.25"]

WEIGHTS = {
    "view": 10, "set_basic": 5, "set_mask": 4, "set_int": 3, "iop": 5, "iop_key": 4,
    "copy": 2, "at": 2, "expr": 4, "gather": 1, "mask_read": 1,
}


class _Generator:
    def __init__(self, ch, mode: str, seed: int = 0, data_seed: int = 0):
        self.ch, self.mode = ch, mode
        self.jit = mode == "jit"
        self.prog = Program(mode, seed, data_seed, [])
        self.ns: dict = {}
        self.kind: dict = {}   # name -> 'base' | 'view' | 'copy' | 'new' | 'dynamic'
        self.next = {"v": 0, "c": 0, "t": 0}

    # -- bookkeeping ----------------------------------------------------------------
    def run(self, n_ops: int | None = None) -> Program:
        ch = self.ch
        self._bases()
        n_ops = ch.int(5, 25) if n_ops is None else n_ops
        weights = dict(WEIGHTS)
        if self.jit:
            del weights["mask_read"]
        produced = tries = 0
        while produced < n_ops and tries < 20 * n_ops:
            tries += 1
            op = getattr(self, "_" + ch.weighted(weights))()
            if op is None:
                continue
            self._emit(op)
            produced += 1
            if self.mode == "eval" and ch.chance(0.35):
                self._emit(self._eval())
        self.prog.names = _defined(self.prog, self.prog.ops)
        return self.prog

    def _emit(self, op: Op) -> None:
        exec(op.np, self.ns)
        self.prog.ops.append(op)

    def _write(self, kind: str, target: str, lhs: str, sym: str, rhs: str):
        """The op ``lhs sym rhs`` writing into the name ``target``; None when NumPy's result
        would depend on the order in which it copies overlapping memory.

        NumPy makes ufuncs (in-place operators) and fancy-index assignments behave as if
        the right-hand side were copied first, but not every assignment between
        overlapping views: ``x[::2] = x[0:3]`` reads elements it has already written.
        A lazy library cannot (and should not) reproduce that, so such writes are not
        generated. Detection: with the target's memory filled with distinct values, the
        op must give the same result as with its right-hand side copied first.
        """
        text = f"{lhs} {sym} {rhs}"
        op = Op(kind, text, text, copied=f"{lhs} {sym} np.array({rhs})")
        x, value = self.ns[target], eval(rhs, self.ns)
        if not (isinstance(value, np.ndarray) and np.shares_memory(x, value)):
            return op
        root = x
        while isinstance(root.base, np.ndarray):
            root = root.base
        saved = root.copy()
        results = []
        for variant in (text, op.copied):
            root[...] = np.arange(root.size).reshape(root.shape)
            exec(variant, dict(self.ns))
            results.append(root.copy())
        root[...] = saved
        return op if np.array_equal(results[0], results[1]) else None

    def _new(self, prefix: str) -> str:
        self.next[prefix] += 1
        return f"{prefix}{self.next[prefix]}"

    def _names(self, pred=None) -> list:
        names = [n for n, _, _ in self.prog.bases] + [op.name for op in self.prog.ops if op.name]
        # a name holding a NumPy scalar (an ufunc of 0-d arrays) is compared but never reused:
        # a scalar is not an array, so views and writes of it have no NumPy meaning to match
        return [n for n in names if isinstance(self.ns[n], np.ndarray) and self.kind[n] != "dynamic"
                and (pred is None or pred(self.ns[n]))]

    def _pick(self, pred=None, view_weight: int = 3):
        names = self._names(pred)
        if not names:
            return None
        table = {n: {"view": view_weight, "base": 2}.get(self.kind[n], 1) for n in names}
        return self.ch.weighted(table)

    @staticmethod
    def _k(x) -> str:
        return "f" if x.dtype.kind == "f" else "i"

    def _shape_of(self, expr: str) -> tuple:
        return np.shape(eval(expr, self.ns))

    # -- bases --------------------------------------------------------------------------
    def _bases(self) -> None:
        ch = self.ch
        nd = ch.int(1, 3)
        main = tuple(ch.int(2, 6) for _ in range(nd))
        bases = []
        for i, name in enumerate("abcd"[:ch.int(2, 4)]):
            if i == 0:
                shape = main
            else:
                form = ch.choice(["same", "suffix", "ones", "free"])
                if form == "same":
                    shape = main
                elif form == "suffix":
                    shape = main[ch.int(0, len(main)):] or (ch.int(1, 6),)
                elif form == "ones":
                    shape = tuple(1 if ch.chance(0.4) else d for d in main)
                else:
                    shape = tuple(ch.int(1, 6) for _ in range(ch.int(1, 3)))
            kind = "i" if i > 0 and ch.chance(0.3) else "f"
            bases.append((name, shape, kind))
        self.prog.bases = bases
        self.ns = _exec("\n".join(self.prog.preamble("np") + self.prog.data_lines(self.prog.data_seed)),
                        "shadow")
        self.ns.pop("__builtins__", None)
        for name, _, _ in bases:
            self.kind[name] = "base"

    # -- keys ---------------------------------------------------------------------------
    def _slice(self, n: int) -> str:
        ch = self.ch
        form = ch.weighted({"all": 3, "rev": 2, "step": 2, "range": 5, "any": 2})
        if form == "all":
            return ":"
        if form == "rev":
            return "::-1"
        if form == "step":
            return f"::{ch.choice([2, 3, -2])}"
        if form == "range" and n > 0:
            start = ch.int(0, n - 1)
            stop = ch.int(start + 1, n)
            step = ch.choice([1, 1, 2, -1, -2])
            neg = lambda i: str(i - n) if ch.chance(0.3) and 0 <= i < n else str(i)
            if step > 0:
                s = f"{neg(start) if start else ''}:{neg(stop) if stop < n else ''}"
                return s + (f":{step}" if step != 1 else "")
            lo = neg(start - 1) if start > 0 else ""
            return f"{neg(stop - 1)}:{lo}:{step}"
        rnd = lambda: ch.choice(["", str(ch.int(-n - 2, n + 2))])
        step = ch.choice(["", "1", "2", "3", "-1", "-2", "-3"])
        return f"{rnd()}:{rnd()}" + (f":{step}" if step else "")

    def _basic_key(self, shape: tuple, allow_none: bool = True, allow_int: bool = True) -> str:
        ch = self.ch
        entries = []
        for n in shape:
            if allow_int and n > 0 and ch.chance(0.2):
                entries.append(str(ch.int(-n, n - 1)))
            else:
                entries.append(self._slice(n))
        if entries and ch.chance(0.2):  # a run of entries replaced by '...' (full slices)
            i = ch.int(0, len(entries))
            j = ch.int(i, len(entries))
            entries[i:j] = ["..."]
        elif ch.chance(0.1):
            entries.insert(ch.int(0, len(entries)), "...")
        if allow_none:
            for _ in range(ch.int(0, 2) if ch.chance(0.25) else 0):
                entries.insert(ch.int(0, len(entries)), "None")
        while len(entries) > 1 and entries[-1] == ":" and "..." not in entries and ch.chance(0.7):
            entries.pop()
        if not entries:
            return "..."
        return ", ".join(entries)

    def _idx_literal(self, values) -> str:
        text = repr(values)
        return f"xp.asarray({text})" if self.ch.chance(0.6) else f"np.array({text})"

    def _int_key(self, shape: tuple, unique: bool = True):
        """An integer-array key into an array of ``shape`` (unique elements if asked)."""
        ch = self.ch
        forms = []
        if len(shape) >= 1 and shape[0] > 0:
            forms += ["axis0", "axis0"]
        if len(shape) >= 2 and shape[1] > 0:
            forms.append("axis1")
        if len(shape) >= 2 and shape[0] > 0 and shape[1] > 0:
            forms.append("pair")
        if not forms:
            return None

        def pick(n, k):
            idx = ch.sample(range(n), k) if unique else [ch.int(0, n - 1) for _ in range(k)]
            return [i - n if ch.chance(0.3) else i for i in idx]

        form = ch.choice(forms)
        if form == "pair":
            n0, n1 = shape[0], shape[1]
            k = ch.int(1, min(4, n0 * n1))
            flat = ch.sample(range(n0 * n1), k) if unique else [ch.int(0, n0 * n1 - 1) for _ in range(k)]
            return (f"{self._idx_literal([f // n1 for f in flat])}, "
                    f"{self._idx_literal([f % n1 for f in flat])}")
        n = shape[0] if form == "axis0" else shape[1]
        k = ch.int(1, min(4, n))
        idx = pick(n, k)
        if k % 2 == 0 and k > 2 and ch.chance(0.4):
            idx = [idx[: k // 2], idx[k // 2:]]   # a 2-D index array
        lit = self._idx_literal(idx)
        return lit if form == "axis0" else f":, {lit}"

    # -- values -------------------------------------------------------------------------
    def _fit(self, target: tuple, kind: str, exact: bool = False):
        """An expression over an existing name whose shape broadcasts to ``target``
        (equals it with ``exact``), or None."""
        ch = self.ch
        ok = (lambda x: True) if kind == "f" else (lambda x: x.dtype.kind in "ib")
        names = self._names(ok)
        if not names:
            return None
        for _ in range(4):
            y = ch.choice(names)
            sy = self.ns[y].shape
            if not exact and len(sy) <= len(target) and ch.chance(0.3):
                try:
                    if np.broadcast_shapes(sy, target) == target:
                        return y
                except ValueError:
                    pass
            key = self._fit_key(sy, target, exact)
            if key is None:
                continue
            expr = f"{y}[{key}]"
            shape = self._shape_of(expr)
            if exact and shape == target:
                return expr
            if not exact and len(shape) <= len(target) and np.broadcast_shapes(shape, target) == target:
                return expr
        return None

    def _fit_key(self, sy: tuple, target: tuple, exact: bool = False):
        ch = self.ch
        r = ch.int(0, min(len(sy), len(target)))
        if exact or (len(sy) - r > 0 and ch.chance(0.5)):
            r = min(len(sy), len(target))
        lead = len(sy) - r
        entries = []
        for n in sy[:lead]:
            if n == 0:
                return None
            entries.append(str(ch.int(-n, n - 1)))
        for m, t in zip(sy[lead:], target[len(target) - r:]):
            if t == 1 or m < t:
                if m == 1 and ch.chance(0.5):
                    entries.append(":")
                elif m >= 1:
                    s = ch.int(0, m - 1)
                    entries.append(f"{s}:{s + 1}")
                else:
                    return None
            elif t == 0:
                entries.append(":" if m == 0 else ch.choice(["1:1", "0:1"]))
            else:
                s = ch.int(0, m - t)
                forms = ["fwd", "rev"] + (["full", "flip"] if m == t else []) + (
                    ["step2"] if m >= 2 * t - 1 else [])
                form = ch.choice(forms)
                if form == "full":
                    entries.append(":")
                elif form == "flip":
                    entries.append("::-1")
                elif form == "fwd":
                    entries.append(f"{s}:{s + t}")
                elif form == "rev":
                    entries.append(f"{s + t - 1}:{s - 1 if s > 0 else ''}:-1")
                else:
                    s = ch.int(0, m - (2 * t - 1))
                    entries.append(f"{s}:{s + 2 * t - 1}:2")
        return ", ".join(entries) if entries else "..."

    def _scalar(self, kind: str) -> str:
        return self.ch.choice(F_SCALARS if kind == "f" else I_SCALARS)

    def _value(self, target: tuple, kind: str) -> str:
        """A scalar or an array expression broadcastable to ``target`` of a compatible kind."""
        ch = self.ch
        form = ch.weighted({"scalar": 4, "vals": 3, "name": 4})
        if form == "vals":
            r = ch.int(0, len(target))
            shape = tuple(1 if ch.chance(0.3) else d for d in target[len(target) - r:])
            return f"_vals({ch.int(1, 9)}, {shape!r}, {kind!r})"
        if form == "name":
            expr = self._fit(target, kind)
            if expr is not None:
                if kind == "f" and ch.chance(0.3):
                    return f"2 * {expr} - 1"
                return expr
        return self._scalar(kind)

    def _mask(self, shape: tuple):
        """A boolean mask of ``shape`` (literal bits or computed from data), or None."""
        ch = self.ch
        n = int(np.prod(shape, dtype=np.int64))
        if ch.chance(0.5):
            form = ch.weighted({"random": 6, "none": 1, "all": 1})
            bits = {"random": ch.int(0, 2 ** n - 1) if n else 0, "none": 0, "all": 2 ** n - 1}[form]
            return f"_mask({bits:#x}, {shape!r})", True
        expr = self._fit(shape, "f", exact=True)
        if expr is None:
            return None
        x = eval(expr, self.ns)
        if x.dtype.kind == "f":
            return ch.choice([f"{expr} > 0", f"xp.abs({expr}) < 0.7",
                              f"({expr} < -0.5) | ({expr} > 1)"]), False
        return ch.choice([f"{expr} % 2 == 0", f"{expr} > 2"]), False

    # -- ops ------------------------------------------------------------------------------
    def _view(self):
        ch = self.ch
        src = self._pick()
        x = self.ns[src]
        nd = x.ndim
        form = ch.weighted({"basic": 10, "T": 2, "transpose": 2, "swapaxes": 2, "moveaxis": 2,
                            "ellipsis": 1, "reshape": 4, "ravel": 2})
        if form == "basic":
            key = self._basic_key(x.shape)
            expr = f"{src}[{key}]"
            if not isinstance(eval(expr, self.ns), np.ndarray):  # an element: NumPy gives a scalar
                expr = f"{src}[{key}, ...]"                       # ... a 0-d view instead
        elif form == "T":
            expr = f"{src}.T"
        elif form == "transpose":
            perm = ch.sample(range(nd), nd)
            expr = ch.choice([f"{src}.transpose({tuple(perm)!r})", f"xp.transpose({src}, {tuple(perm)!r})"])
        elif form in ("swapaxes", "moveaxis"):
            if nd == 0:
                return None
            i, j = ch.int(-nd, nd - 1), ch.int(-nd, nd - 1)
            expr = (ch.choice([f"{src}.swapaxes({i}, {j})", f"xp.swapaxes({src}, {i}, {j})"])
                    if form == "swapaxes" else f"xp.moveaxis({src}, {i}, {j})")
        elif form == "ellipsis":
            expr = f"{src}[...]"
        elif form == "ravel":
            expr = ch.choice([f"{src}.ravel()", f"xp.ravel({src})"])
        else:
            shape = self._reshape_target(x.shape)
            if ch.chance(0.3) and shape and 0 not in shape:
                shape = list(shape)
                shape[ch.int(0, len(shape) - 1)] = -1
                shape = tuple(shape)
            expr = ch.choice([f"{src}.reshape({shape!r})", f"xp.reshape({src}, {shape!r})"]
                             + ([f"{src}.reshape({', '.join(map(str, shape))})"] if len(shape) > 1 else []))
        name = self._new("v")
        res = eval(expr, self.ns)
        view = _is_view_of(res, x)
        self.kind[name] = "view" if view else "copy"
        note = ("# view" if view else "# copy (NumPy copies)") if form in ("reshape", "ravel") else ""
        return Op("view", f"{name} = {expr}", f"{name} = {expr}", name, note, src)

    def _reshape_target(self, shape: tuple) -> tuple:
        ch = self.ch
        n = int(np.prod(shape, dtype=np.int64))
        form = ch.choice(["factor", "merge", "split", "ones"])
        if n == 0 or (form == "merge" and len(shape) < 2):
            return (n,) if n else tuple(shape[::-1])
        if form == "merge":
            i = ch.int(0, len(shape) - 2)
            return shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
        if form == "split":
            for i in ch.sample(range(len(shape)), len(shape)):
                divs = [d for d in range(2, shape[i]) if shape[i] % d == 0]
                if divs:
                    d = ch.choice(divs)
                    return shape[:i] + (d, shape[i] // d) + shape[i + 1:]
        if form == "ones":
            out = list(shape)
            out.insert(ch.int(0, len(out)), 1)
            return tuple(out)
        factors = []
        m = n
        for _ in range(ch.int(0, 2)):
            divs = [d for d in range(2, m + 1) if m % d == 0]
            if not divs:
                break
            d = ch.choice(divs)
            factors.append(d)
            m //= d
        return tuple(factors + [m])

    def _target(self):
        return self._pick(view_weight=4)

    def _set_basic(self):
        t = self._target()
        x = self.ns[t]
        key = self._basic_key(x.shape)
        shape = self._shape_of(f"{t}[{key}]")
        return self._write("set_basic", t, f"{t}[{key}]", "=", self._value(shape, self._k(x)))

    def _set_mask(self):
        ch = self.ch
        t = self._target()
        x = self.ns[t]
        k = ch.int(1, x.ndim) if x.ndim else 0
        if x.ndim == 0:
            mask, literal = f"xp.asarray({ch.choice(['True', 'False'])})", True
        else:
            got = self._mask(x.shape[:k])
            if got is None:
                return None
            mask, literal = got
        rest = x.shape[k:]
        kind = self._k(x)
        exact = literal and not self.jit and ch.chance(0.3)
        if exact:   # values for exactly the selected elements
            count = int(np.count_nonzero(eval(mask, self.ns)))
            value = f"_vals({ch.int(1, 9)}, {(count,) + rest!r}, {kind!r})"
        else:
            value = self._value(rest, kind)
        op = self._write("set_mask", t, f"{t}[{mask}]", "=", value)
        if op is not None:
            op.exact_count = exact
        return op

    def _set_int(self):
        t = self._target()
        x = self.ns[t]
        key = self._int_key(x.shape)
        if key is None:
            return None
        shape = self._shape_of(f"{t}[{key}]")
        return self._write("set_int", t, f"{t}[{key}]", "=", self._value(shape, self._k(x)))

    def _rhs(self, target: tuple, kind: str, op: str) -> str:
        if op == "/":
            if self.ch.chance(0.5):
                return self.ch.choice(DIV_SCALARS)
            expr = self._fit(target, "f")
            return f"(2.0 + xp.abs({expr}))" if expr else self.ch.choice(DIV_SCALARS)
        if op == "*" and self.ch.chance(0.6):  # keep magnitudes small
            return self.ch.choice(["2", "-1", "3"] if kind == "i" else ["0.5", "-1.5", "2.0"])
        return self._value(target, kind)

    def _iop(self):
        t = self._target()
        x = self.ns[t]
        kind = self._k(x)
        op = self.ch.choice(["+", "-", "*"] + (["/"] if kind == "f" else []))
        return self._write("iop", t, t, f"{op}=", self._rhs(x.shape, kind, op))

    def _iop_key(self):
        ch = self.ch
        t = self._target()
        x = self.ns[t]
        kind = self._k(x)
        form = ch.weighted({"basic": 3, "int": 2, "mask": 0 if self.jit else 1})
        if form == "basic":
            key = self._basic_key(x.shape)
        elif form == "int":
            key = self._int_key(x.shape)
        else:
            k = ch.int(1, x.ndim) if x.ndim else 0
            got = self._mask(x.shape[:k]) if x.ndim else None
            key = got[0] if got else None
        if key is None:
            return None
        # through a mask the values broadcast against the trailing axes (the number of
        # selected elements may depend on the data)
        shape = x.shape[k:] if form == "mask" else self._shape_of(f"{t}[{key}]")
        op = ch.choice(["+", "-", "*"] + (["/"] if kind == "f" else []))
        return self._write("iop_key", t, f"{t}[{key}]", f"{op}=", self._rhs(shape, kind, op))

    def _copy(self):
        src = self._pick()
        name = self._new("c")
        self.kind[name] = "copy"
        text = self.ch.choice([f"{name} = {src}.copy()", f"{name} = xp.array({src})"])
        return Op("copy", text, text, name, src=src)

    def _at(self):
        ch = self.ch
        src = self._pick()
        x = self.ns[src]
        key = (self._int_key(x.shape) if ch.chance(0.5) else None) or self._basic_key(
            x.shape, allow_none=False)
        shape = self._shape_of(f"{src}[{key}]")
        value = self._value(shape, self._k(x))
        mode = ch.choice(["set", "set", "add"])
        name = self._new("c")
        self.kind[name] = "copy"
        qt_text = f"{name} = {src}.at[{key}].{mode}({value})"
        np_text = f"{name} = {src}.copy(); {name}[{key}] {'=' if mode == 'set' else '+='} {value}"
        return Op("at", qt_text, np_text, name, src=src)

    def _expr(self):
        ch = self.ch
        x = self._pick()
        sx = self.ns[x].shape
        if ch.chance(0.5):
            y = self._fit(sx, "f")
        else:   # plain broadcasting between two names
            ys = [n for n in self._names() if _broadcastable(self.ns[n].shape, sx, limit=720)]
            y = ch.choice(ys) if ys else None
        if y is None:
            y = self._scalar("f")
        templates = [f"{x} + 2 * {y}", f"{x} * {y} - 1.5", f"xp.sin({x}) + {y}", f"xp.maximum({x}, {y})",
                     f"xp.where({x} > 0, {x}, {y})", f"-{x} + 0.5 * {y}", f"{x} - {y}", f"xp.cos({x})",
                     f"{x} * 3"]
        scal = [n for n in self._names(lambda a: a.ndim >= 1 and 0 not in a.shape)]
        if scal and ch.chance(0.2):   # an element read: NumPy gives a scalar (a copy)
            s = ch.choice(scal)
            idx = ", ".join(str(ch.int(-d, d - 1)) for d in self.ns[s].shape)
            templates = [f"{x} * {s}[{idx}]", f"{x} + {s}[{idx}]"]
        name = self._new("t")
        self.kind[name] = "new"
        text = f"{name} = {ch.choice(templates)}"
        return Op("expr", text, text, name)

    def _gather(self):
        x = self._pick()
        key = self._int_key(self.ns[x].shape, unique=False)
        if key is None:
            return None
        name = self._new("t")
        self.kind[name] = "new"
        text = f"{name} = {x}[{key}]"
        return Op("gather", text, text, name)

    def _mask_read(self):
        x = self._pick()
        a = self.ns[x]
        if a.ndim == 0:
            return None
        got = self._mask(a.shape[:self.ch.int(1, a.ndim)])
        if got is None:
            return None
        name = self._new("t")
        # the shape of a read through a mask computed from data depends on the data: such a
        # name is compared but never reused (the program must not depend on the data)
        self.kind[name] = "new" if got[1] else "dynamic"
        text = f"{name} = {x}[{got[0]}]"
        return Op("mask_read", text, text, name)

    def _eval(self) -> Op:
        names = self._names()
        chosen = self.ch.sample(names, self.ch.int(1, min(3, len(names))))
        if self.ch.chance(0.5):
            return Op("eval", f"qt.eval({', '.join(chosen)})", f"pass  # qt.eval({', '.join(chosen)})")
        text = f"np.asarray({chosen[0]})"
        return Op("eval", text, text)


def _broadcastable(a: tuple, b: tuple, limit: int) -> bool:
    try:
        shape = np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return int(np.prod(shape, dtype=np.int64)) <= limit


def _is_view_of(res, x) -> bool:
    if res.size == 0:   # shares_memory is False for empty arrays
        return res.base is not None
    return bool(np.shares_memory(res, x))


def program_seed(mode: str, index: int) -> int:
    return 100_000 * MODES.index(mode) + index


def generate(mode: str, seed: int, data_seed: int | None = None) -> Program:
    """The random program of ``seed`` in ``mode`` ('eager', 'eval' or 'jit')."""
    data_seed = seed % 2**31 if data_seed is None else data_seed
    return _Generator(_Seeded(seed), mode, seed, data_seed).run()


# --------------------------------------------------------------------------------------
# running and comparing
# --------------------------------------------------------------------------------------
def _results(prog: Program, lib: str) -> dict:
    """Run the program's script; the values it holds at the end, by name (``name`` for the
    final values, ``@2:name`` for the second jit call, ``arg:`` / ``arg2:`` for the
    caller's arguments after the calls)."""
    ns = _exec(prog.script(lib), f"{prog.mode} seed={prog.seed} {lib}")
    out = {}
    if prog.mode != "jit":
        values = [ns[n] for n in prog.names]
        if lib == "qt" and prog.mode == "eager":  # in 'eval' mode each is read on its own
            qt.eval(*[v for v in values if isinstance(v, qt.Tensor)])
        for n, v in zip(prog.names, values):
            out[n] = v
        return out
    for n, v in zip(prog.names, ns["out"]):
        out[n] = v
    for n, v in zip(prog.names, ns["out2"]):
        out["@2:" + n] = v
    for n, _, _ in prog.bases:
        out["arg:" + n] = ns[n]
        out["arg2:" + n] = ns[n + "2"]
    return out


def _diff(ref: dict, got: dict) -> list:
    """The names whose values differ, with what differs."""
    bad = []
    for name, r in ref.items():
        g = got.get(name)
        r = np.asarray(r)
        try:
            g = np.asarray(g)
        except Exception as e:  # noqa: BLE001 - an evaluation error is a finding too
            bad.append(f"{name}: evaluation raised {type(e).__name__}: {e}")
            continue
        if g.shape != r.shape or g.dtype != r.dtype:
            bad.append(f"{name}: shape/dtype {g.shape} {g.dtype}, NumPy {r.shape} {r.dtype}")
        elif r.dtype.kind == "f":
            if not np.allclose(g, r, rtol=RTOL, atol=ATOL, equal_nan=True):
                bad.append(f"{name}: values differ\n    qtrace {_short(g)}\n    NumPy  {_short(r)}")
        elif not np.array_equal(g, r):
            bad.append(f"{name}: values differ\n    qtrace {_short(g)}\n    NumPy  {_short(r)}")
    return bad


def _describe_error(e: BaseException) -> str:
    """The exception, the program line that raised it and the innermost frames."""
    frames = traceback.extract_tb(e.__traceback__)
    where = [f for f in frames if f.filename.startswith("<view-program")]
    line = f"raised at program line {where[-1].lineno}: {where[-1].line}\n  " if where else ""
    inner = "".join(traceback.format_list(frames[-3:])).rstrip().replace("\n", "\n  ")
    return f"{line}{type(e).__name__}: {e}\n  {inner}"


def _short(a) -> str:
    return np.array2string(np.asarray(a), threshold=40, precision=4, separator=", ").replace("\n", " ")


def _check(prog: Program) -> str | None:
    """None when qtrace gives NumPy's values, else a report."""
    ref = _results(prog, "np")
    try:
        got = _results(prog, "qt")
        bad = _diff(ref, got)
        if not bad:
            return None
        what = "\n  ".join(bad[:8]) + (f"\n  ... and {len(bad) - 8} more" if len(bad) > 8 else "")
    except Exception as e:  # noqa: BLE001 - reported with the program
        what = _describe_error(e)
    return (f"qtrace differs from NumPy (program seed {prog.seed}, data seed {prog.data_seed}, mode "
            f"{prog.mode!r}, fusion {qt.config.fusion}):\n  {what}\n"
            f"--- the program (python tests/system/test_view_semantics.py {prog.mode} {prog.seed} "
            f"{prog.data_seed} prints it) ---\n{prog.script('qt')}")


# --------------------------------------------------------------------------------------
# the random-program tests
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("index", range(N_SEEDS))
@pytest.mark.parametrize("mode", MODES)
def test_random_program(mode, index, fusion, rng):
    # the program is fixed by its index (stable test ids; kernels found in a persistent
    # QTRACE_CACHE_DIR on a re-run); its data is fresh every session (QTRACE_TEST_SEED)
    prog = generate(mode, program_seed(mode, index), data_seed=int(rng.integers(2**31)))
    report = _check(prog)
    if report:
        pytest.fail(report, pytrace=False)


# shrinking recompiles every candidate program (minutes for one failure): only on request
_PHASES = tuple(Phase) if os.environ.get("QTRACE_VIEW_HYPOTHESIS_SHRINK") else (
    Phase.explicit, Phase.reuse, Phase.generate)


@settings(max_examples=int(os.environ.get("QTRACE_VIEW_HYPOTHESIS") or 20), deadline=None,
          phases=_PHASES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                 HealthCheck.data_too_large])
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_random_program_hypothesis(data, mode, fusion):
    data_seed = data.draw(st.integers(0, 2**31 - 1))
    prog = _Generator(_Drawn(data), mode, -1, data_seed).run(n_ops=data.draw(st.integers(1, 15)))
    report = _check(prog)
    assert report is None, report


def test_generator_self_check(rng):
    """The generator and runner are sound on NumPy alone (no qtrace involved), checked on
    every fifth program that ``test_random_program`` runs."""
    seen = {k: 0 for k in WEIGHTS} | {"eval": 0}
    views = copies = 0
    for mode in MODES:
        for index in range(0, N_SEEDS, 5):
            seed, d1, d2 = program_seed(mode, index), int(rng.integers(2**31)), int(rng.integers(2**31))
            gen = _Generator(_Seeded(seed), mode, seed, d1)
            prog = gen.run()
            # the program is a function of its seed alone (the data only fills it in)
            again = generate(mode, seed, data_seed=d2)
            assert [op.qt for op in again.ops] == [op.qt for op in prog.ops] and again.bases == prog.bases
            first, second = _results(prog, "np"), _results(prog, "np")
            # NumPy twice on the same data: bit for bit; and equal to the generator's shadow
            for name in prog.names:
                np.testing.assert_array_equal(first[name], second[name], err_msg=prog.script("np"))
                np.testing.assert_array_equal(first[name], gen.ns[name], err_msg=prog.script("np"))
            for op in prog.ops:
                seen[op.kind] += 1
                assert op.qt == op.np or op.kind in ("at", "eval"), op
                if mode == "jit":
                    assert op.kind not in ("mask_read", "eval") and not op.exact_count, op
            # NumPy's values are those of "right-hand sides copied first" (what qtrace gives)
            copied = [Op(op.kind, op.copied, op.copied) if op.copied else op for op in prog.ops]
            ref = _results(Program(mode, seed, d1, prog.bases, copied, prog.names), "np")
            for name in prog.names:
                np.testing.assert_array_equal(first[name], ref[name], err_msg=prog.script("np"))
            if mode == "jit":
                _self_check_jit(prog, first)
            else:
                v, c = _self_check_annotations(prog)
                views, copies = views + v, copies + c
    assert all(n > 0 for n in seen.values()), seen
    assert views > 0 and copies > 0, (views, copies)


def _self_check_jit(prog: Program, first: dict) -> None:
    """The jit form on NumPy arrays: the eager program's values, and the caller's arrays
    updated in place (NumPy's function-call semantics, which qt.jit must reproduce)."""
    eager = Program("eager", prog.seed, prog.data_seed, prog.bases, prog.ops, prog.names)
    ref = _results(eager, "np")
    for name in prog.names:
        np.testing.assert_array_equal(first[name], ref[name])
    for name, _, _ in prog.bases:
        np.testing.assert_array_equal(first["arg:" + name], ref[name])


def _self_check_annotations(prog: Program):
    """Re-run the NumPy script op by op: '# view' / '# copy' notes match shares_memory,
    and the NumPy spelling of ``.at`` leaves its source alone."""
    ns = _exec(prog.script("np", ops=[]), "annotations")
    views = copies = 0
    for op in prog.ops:
        before = ns[op.src].copy() if op.kind in ("at", "copy") else None
        exec(op.np, ns)
        if before is not None:
            np.testing.assert_array_equal(ns[op.src], before)
            assert not np.shares_memory(ns[op.name], ns[op.src]), op
        if op.note and ns[op.name].size:
            assert np.shares_memory(ns[op.name], ns[op.src]) == (op.note == "# view"), op
            views, copies = views + (op.note == "# view"), copies + (op.note != "# view")
    return views, copies


# --------------------------------------------------------------------------------------
# example tests: one per rule
# --------------------------------------------------------------------------------------
def _t(a):
    """A qtrace tensor holding a copy of the NumPy array ``a``."""
    return qt.array(np.array(a))


def _eq(t, ref, **kw):
    got = np.asarray(t)
    assert got.shape == np.shape(ref) and got.dtype == np.asarray(ref).dtype, (got.shape, got.dtype)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12, **kw)


def _life_step(Z, xp):
    N = (Z[0:-2, 0:-2] + Z[0:-2, 1:-1] + Z[0:-2, 2:] + Z[1:-1, 0:-2]
         + Z[1:-1, 2:] + Z[2:, 0:-2] + Z[2:, 1:-1] + Z[2:, 2:])
    birth = (N == 3) & (Z[1:-1, 1:-1] == 0)
    survive = ((N == 2) | (N == 3)) & (Z[1:-1, 1:-1] == 1)
    Z[...] = 0
    Z[1:-1, 1:-1][birth | survive] = 1
    return Z


def test_game_of_life_mask_write_into_interior_view_updates_the_board(fusion, rng):
    ref = rng.integers(0, 2, size=(12, 12))
    Z = _t(ref)
    for _ in range(6):
        _life_step(ref, np)
        _life_step(Z, qt)
    _eq(Z, ref)


def test_gray_scott_inplace_add_on_interior_views_updates_the_fields(fusion, rng):
    def step(U, V, xp):
        u, v = U[1:-1, 1:-1], V[1:-1, 1:-1]
        Lu = U[0:-2, 1:-1] + U[1:-1, 0:-2] - 4 * u + U[1:-1, 2:] + U[2:, 1:-1]
        Lv = V[0:-2, 1:-1] + V[1:-1, 0:-2] - 4 * v + V[1:-1, 2:] + V[2:, 1:-1]
        uvv = u * v * v
        u += 0.16 * Lu - uvv + 0.06 * (1 - u)
        v += 0.08 * Lv + uvv - (0.06 + 0.062) * v

    U0, V0 = 1 - 0.1 * rng.random((10, 10)), 0.25 * rng.random((10, 10))
    U, V = _t(U0), _t(V0)
    u = U[1:-1, 1:-1]
    u += 1
    U0[1:-1, 1:-1] += 1
    _eq(U, U0)
    for _ in range(5):
        step(U0, V0, np)
        step(U, V, qt)
    _eq(U, U0)
    _eq(V, V0)


def test_write_to_the_base_shows_in_a_view_taken_before(fusion):
    x = qt.arange(10.0)
    v = x[2:8:2]
    x[4] = 100.0
    x[:3] += 1.0
    _eq(v, [3.0, 100.0, 6.0])


def test_view_evaluated_before_a_write_sees_the_write(fusion):
    x = qt.arange(6.0)
    v = x[::-1]
    np.asarray(v)
    x[0] = 50.0
    _eq(v, [5.0, 4.0, 3.0, 2.0, 1.0, 50.0])


def test_write_through_a_view_of_a_view_reaches_the_base_and_sibling_views(fusion):
    ref = np.arange(24.0).reshape(4, 6)
    x = _t(ref)
    w, other = x[1:, ::-1][::2, 1:4], x[:, 2]
    w[...] = -1.0
    ref[1:, ::-1][::2, 1:4] = -1.0
    _eq(x, ref)
    _eq(other, ref[:, 2])
    w *= 3.0
    ref[1:, ::-1][::2, 1:4] *= 3.0
    _eq(x, ref)
    _eq(other, ref[:, 2])


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_inplace_operators_on_a_view_write_the_base(op, fusion):
    ref = np.arange(1.0, 13.0).reshape(3, 4)
    x = _t(ref)
    rhs = np.array([1.0, 2.0, 4.0])
    v, vr = x[:, 1::2], ref[:, 1::2]
    exec(f"v {op} 2.0; v {op} rhs[:2]", {"v": v, "rhs": _t(rhs)})
    exec(f"v {op} 2.0; v {op} rhs[:2]", {"v": vr, "rhs": rhs})
    _eq(x, ref)
    _eq(v, vr)


def test_write_through_transpose_swapaxes_and_moveaxis_updates_the_base(fusion):
    ref = np.arange(24.0).reshape(2, 3, 4)
    x = _t(ref)
    x.T[0] = 7.0
    ref.T[0] = 7.0
    x.transpose(1, 0, 2)[2, 1] += 1.0
    ref.transpose(1, 0, 2)[2, 1] += 1.0
    qt.swapaxes(x, 0, 2)[1:3] = -2.0
    np.swapaxes(ref, 0, 2)[1:3] = -2.0
    m = qt.moveaxis(x, 0, -1)
    m[..., 1] *= 10.0
    np.moveaxis(ref, 0, -1)[..., 1] *= 10.0
    _eq(x, ref)


def test_write_through_reshape_view_updates_the_base(fusion):
    ref = np.arange(12.0)
    x = _t(ref)
    r = x.reshape(3, 4)
    r[1] = 0.0
    r[:, -1] += 100.0
    rr = ref.reshape(3, 4)
    rr[1] = 0.0
    rr[:, -1] += 100.0
    _eq(x, ref)
    y = x.reshape(2, 2, 3)[1]   # a reshape of a view is a view too
    y[0, ::2] = -5.0
    ref.reshape(2, 2, 3)[1][0, ::2] = -5.0
    _eq(x, ref)


def test_reshape_that_numpy_copies_does_not_write_the_base(fusion):
    ref = np.arange(12.0).reshape(3, 4)
    x = _t(ref)
    rv = ref.T.reshape(12)
    assert not np.shares_memory(rv, ref)
    r = x.T.reshape(12)
    r[:] = 0.0
    rv[:] = 0.0
    _eq(x, ref)
    _eq(r, rv)


def test_ravel_of_a_contiguous_array_is_a_view(fusion):
    ref = np.arange(6.0).reshape(2, 3)
    x = _t(ref)
    r = x.ravel()
    r[1] = 50.0
    ref.ravel()[1] = 50.0
    _eq(x, ref)
    qt.ravel(x)[-1] += 1.0
    np.ravel(ref)[-1] += 1.0
    _eq(x, ref)


def test_ravel_of_a_transposed_array_is_a_copy(fusion):
    ref = np.arange(6.0).reshape(2, 3)
    x = _t(ref)
    rv = ref.T.ravel()
    assert not np.shares_memory(rv, ref)
    r = x.T.ravel()
    r[1] = 50.0
    rv[1] = 50.0
    _eq(x, ref)
    _eq(r, rv)


def test_ellipsis_assignment_writes_in_place_and_x_ellipsis_is_a_view(fusion):
    x = qt.zeros((2, 3))
    alias = x[:, 1]
    x[...] = 5
    _eq(alias, [5.0, 5.0])
    y = x[...]
    y[0, 0] = 1.0
    _eq(x, [[1.0, 5.0, 5.0], [5.0, 5.0, 5.0]])
    s = qt.asarray(2.0)
    s[...] = 3.0
    _eq(s, np.asarray(3.0))


def test_element_read_is_a_copy_and_ellipsis_element_is_a_view(fusion):
    """NumPy: ``x[1, 2]`` is a scalar (a copy); ``x[1, 2, ...]`` is a 0-d view."""
    ref = np.arange(12.0).reshape(3, 4)
    x = _t(ref)
    s, sr = x[1, 2], ref[1, 2]
    s += 1.0
    sr += 1.0
    _eq(x, ref)
    _eq(s, np.asarray(sr))
    v = x[1, 2, ...]
    v[...] = -1.0
    ref[1, 2, ...] = -1.0
    _eq(x, ref)
    v += 2.0
    ref[1, 2, ...] += 2.0
    _eq(x, ref)


def test_broadcast_to_result_is_read_only(fusion):
    b = qt.broadcast_to(qt.arange(4.0), (3, 4))
    with pytest.raises(ValueError, match="read-only"):
        b[0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        b[0, 1] = 1.0
    with pytest.raises(ValueError):
        b += 1.0
    _eq(b, np.broadcast_to(np.arange(4.0), (3, 4)))


def test_copy_and_array_do_not_alias(fusion):
    ref = np.arange(6.0).reshape(2, 3)
    x = _t(ref)
    c, a, v = x.copy(), qt.array(x), x[1]
    c2, a2 = v.copy(), qt.array(v)
    c[0, 0] = 100.0
    a[0, 1] = 200.0
    c2[0] = -1.0
    a2 += 10.0
    _eq(x, ref)
    x[1, 2] = 9.0
    ref[1, 2] = 9.0
    _eq(c, [[100.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    _eq(a, [[0.0, 200.0, 2.0], [3.0, 4.0, 5.0]])
    _eq(c2, [-1.0, 4.0, 5.0])
    _eq(a2, [13.0, 14.0, 15.0])
    _eq(x, ref)
    _eq(qt.copy(v), ref[1])


def test_at_set_is_functional(fusion):
    ref = np.arange(6.0)
    x = _t(ref)
    v = x[1:]
    y = x.at[2].set(50.0)
    z = v.at[qt.asarray([0, 2])].add(1.0)
    w = x[::2].at[1:].set(-1.0)
    _eq(x, ref)
    _eq(v, ref[1:])
    _eq(y, [0.0, 1.0, 50.0, 3.0, 4.0, 5.0])
    _eq(z, [2.0, 2.0, 4.0, 4.0, 5.0])
    _eq(w, [0.0, -1.0, -1.0])
    y[0] = 7.0      # the result is a new array: writing it leaves x alone
    _eq(x, ref)


def test_inplace_int32_plus_float_raises_like_numpy(fusion):
    x = qt.zeros(3, dtype=qt.int32)
    with pytest.raises(TypeError):
        np.zeros(3, dtype=np.int32).__iadd__(1.5)   # NumPy's UFuncTypeError is a TypeError
    with pytest.raises(TypeError):
        x += 1.5
    with pytest.raises(TypeError):
        x[1:] += 1.5
    _eq(x, np.zeros(3, dtype=np.int32))


def test_inplace_result_keeps_dtype_and_shape(fusion):
    x = qt.ones((2, 3), dtype=qt.float32)
    x += qt.arange(3.0)          # float64 operand, result stays float32
    x *= 2
    ref = np.ones((2, 3), dtype=np.float32)
    ref += np.arange(3.0)
    ref *= 2
    assert x.dtype == np.float32 and x.shape == (2, 3)
    _eq(x, ref)
    i = qt.arange(4)
    i += qt.asarray(True)
    i *= 3
    _eq(i, (np.arange(4) + 1) * 3)


def test_inplace_that_would_grow_the_shape_raises_value_error(fusion):
    x = qt.zeros(1)
    with pytest.raises(ValueError):
        np.zeros(1).__iadd__(np.zeros(3))
    with pytest.raises(ValueError):
        x += qt.zeros(3)
    _eq(x, np.zeros(1))
    y = qt.zeros((3, 1))
    with pytest.raises(ValueError):
        y *= qt.ones(4)


def test_zero_d_mask_write_keeps_shape(fusion):
    x = qt.asarray(1.0)
    x[qt.asarray(True)] = 5.0
    assert x.shape == ()
    _eq(x, np.asarray(5.0))
    x[qt.asarray(False)] = 7.0
    _eq(x, np.asarray(5.0))


def test_mask_of_wrong_length_raises_index_error(fusion):
    x = qt.zeros(3)
    with pytest.raises(IndexError):
        np.zeros(3)[np.array([True, False])]
    with pytest.raises(IndexError):
        x[qt.asarray([True, False])]
    with pytest.raises(IndexError):
        x[np.array([True, False, True, True])] = 1.0
    y = qt.zeros((2, 3))
    with pytest.raises(IndexError):
        y[:, np.array([True, False])] = 1.0
    _eq(x, np.zeros(3))


def test_mask_and_index_writes_through_views_update_the_base(fusion):
    ref = np.arange(20.0).reshape(4, 5)
    x = _t(ref)
    v, vr = x[1:, ::-1], ref[1:, ::-1]
    v[v > 10.0] = 0.0
    vr[vr > 10.0] = 0.0
    v[qt.asarray([2, 0])] = qt.asarray([-1.0, -2.0, -3.0, -4.0, -5.0])
    vr[np.array([2, 0])] = np.array([-1.0, -2.0, -3.0, -4.0, -5.0])
    v[:, [1, 3]] += 100.0
    vr[:, [1, 3]] += 100.0
    _eq(x, ref)


def test_mask_and_gather_reads_are_copies(fusion):
    ref = np.arange(6.0)
    x = _t(ref)
    m = x[x > 2.0]
    g = x[qt.asarray([0, 0, 5])]
    m[:] = -1.0
    g += 10.0
    _eq(x, ref)
    _eq(m, [-1.0, -1.0, -1.0])
    _eq(g, [10.0, 10.0, 15.0])


KEYS_AFTER_A_SLICE = [
    (slice(None), [3, 4, 3, 3]),                    # x[:, idx]: NumPy lays idx's axis out first
    (slice(None), slice(None), [1, 0]),             # at the end
    (slice(None), [[1, 2], [0, 4]], [0, 1]),        # two adjacent arrays after a slice
    (slice(None), 0, [1, 2]),                       # an integer joins the block
    ([1, 0],),                                      # leading: C order
    (0, slice(None), [1, 2]),                       # separated by a slice: C order
]


@pytest.mark.parametrize("key", KEYS_AFTER_A_SLICE, ids=range(len(KEYS_AFTER_A_SLICE)))
def test_gather_results_have_numpys_memory_order(key, fusion, rng):
    """A gather's result is laid out as NumPy lays it out, so a reshape of it is a view
    exactly where NumPy's is (then a write to the result shows through the reshape), and a
    copy where NumPy's is not C-contiguous (a found case: ``t = b[:, idx]; v = t.reshape(...);
    t += ...`` changed ``v`` in qtrace, not in NumPy)."""
    ref = rng.integers(-9, 10, size=(2, 5, 4))
    k = tuple(np.array(p) if isinstance(p, list) else p for p in key)
    x = _t(ref.copy())
    r, t = ref[k], x[k]
    _eq(t, r)
    rv, tv = r.reshape(-1), qt.reshape(t, (-1,))
    r += 100
    t += 100
    _eq(t, r)
    _eq(tv, rv)
    _eq(x, ref)


def test_overlapping_assignment_reads_before_writing_like_numpy(fusion):
    ref = np.arange(8.0)
    x = _t(ref)
    x[1:] = x[:-1]
    ref[1:] = ref[:-1].copy()
    _eq(x, ref)
    x[::-1] += x
    ref[::-1] += ref.copy()
    _eq(x, ref)
    y, yr = _t(np.arange(9.0).reshape(3, 3)), np.arange(9.0).reshape(3, 3)
    y += y.T
    yr += yr.T.copy()
    _eq(y, yr)


def _diffuse(u, xp):
    u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])


def test_jit_writes_into_argument_slices_are_visible_to_the_caller(fusion, rng):
    step = qt.jit(lambda u: _diffuse(u, qt))
    ref = rng.random((6, 7))
    t = _t(ref)
    arr = ref.copy()
    _diffuse(ref, np)
    step(t)
    _eq(t, ref)
    step(arr)                  # a NumPy argument is updated in place too (as a NumPy call would)
    np.testing.assert_allclose(arr, ref, rtol=1e-12)


def test_jit_function_that_writes_into_an_argument_and_returns_it(fusion, rng):
    def f(u, v, xp):
        u[0] = v.sum()
        u[1:] *= 2.0
        return u, u[1:]

    g = qt.jit(lambda u, v: f(u, v, qt))
    a, b = rng.random(5), rng.random(3)
    t = _t(a)
    r, tail = g(t, _t(b))
    ra, rtail = f(a, b, np)
    _eq(r, ra)
    _eq(tail, rtail)
    _eq(t, a)


def test_jitted_step_in_a_loop_follows_the_numpy_trajectory(fusion, rng):
    def step(U, V, xp):
        u = U[1:-1]
        u += 0.1 * (U[2:] - 2 * u + U[:-2]) - u * V[1:-1]
        V[1:-1] = 0.5 * V[1:-1] + 0.1 * u

    jstep = qt.jit(lambda U, V: step(U, V, qt))
    U0, V0 = rng.random(16), rng.random(16)
    U, V = _t(U0), _t(V0)
    for _ in range(2):
        step(U0, V0, np)
        jstep(U, V)
    _eq(U, U0)
    _eq(V, V0)
    for _ in range(8):
        step(U0, V0, np)
        jstep(U, V)
    _eq(U, U0)
    _eq(V, V0)


def test_mask_writes_inside_jit(fusion, rng):
    def f(x, y, xp):
        x[x > 0.5] = 0.0
        y[1:][y[1:] < 0.3] = y[0]
        return x * 2

    g = qt.jit(lambda x, y: f(x, y, qt))
    a, b = rng.random((4, 3)), rng.random(7)
    ta, tb = _t(a), _t(b)
    out = g(ta, tb)
    ref = f(a, b, np)
    _eq(out, ref)
    _eq(ta, a)
    _eq(tb, b)


def test_mask_reads_inside_jit_raise_tracer_error(fusion):
    with pytest.raises(qt.TracerError):
        qt.jit(lambda x: x[x > 0])(qt.arange(4.0))


def test_long_eager_loop_without_evaluation_matches_numpy(fusion, rng):
    ref = rng.random(32)
    p = _t(ref)
    for _ in range(3000):
        ref[1:-1] = 0.5 * (ref[2:] + ref[:-2])
        ref[0] = ref[1]
        ref[-1] = 0
        p[1:-1] = 0.5 * (p[2:] + p[:-2])
        p[0] = p[1]
        p[-1] = 0
    _eq(p, ref)


# --------------------------------------------------------------------------------------
# command line: print, run and shrink one program
# --------------------------------------------------------------------------------------
def _kind_of(report: str | None) -> str | None:
    """What kind of difference a report describes (names and numbers left out)."""
    if report is None:
        return None
    detail = report.split("\n")[1].strip()
    if detail.startswith("raised at program line"):
        detail = report.split("\n")[2].strip()
    detail = re.sub(r"^[\w@:]+: ", "", detail)
    return re.sub(r"\d+", "N", detail)


def _shrink(prog: Program) -> Program:
    """Delete ops (and the bases no op uses) while qtrace still differs from NumPy in the
    same way (same exception, or same kind of difference)."""
    kind = _kind_of(_check(prog))

    def same(ops, bases):
        cand = Program(prog.mode, prog.seed, prog.data_seed, bases, ops, [])
        cand.names = _defined(cand, ops)
        try:
            _results(cand, "np")
        except Exception:  # noqa: BLE001 - an op that a later one needs
            return None
        return cand if _kind_of(_check(cand)) == kind else None

    ops, changed = list(prog.ops), True
    while changed:
        changed = False
        for i in range(len(ops) - 1, -1, -1):
            if same(ops[:i] + ops[i + 1:], prog.bases):
                ops, changed = ops[:i] + ops[i + 1:], True
    bases = [b for b in prog.bases if any(re.search(rf"\b{b[0]}\b", op.qt) for op in ops)]
    return same(ops, bases or prog.bases[:1]) or same(ops, prog.bases) or prog


def main(argv: list) -> None:
    shrink = "--shrink" in argv
    argv = [a for a in argv if a != "--shrink"]
    unfused = "--unfused" in argv
    argv = [a for a in argv if a != "--unfused"]
    mode, seed = argv[0], int(argv[1])
    prog = generate(mode, seed, int(argv[2]) if len(argv) > 2 else None)
    qt.config.fusion = not unfused
    if shrink:
        prog = _shrink(prog)
    print(_check(prog) or prog.script("qt") + "\nqtrace matches NumPy")


if __name__ == "__main__":
    main(sys.argv[1:])
