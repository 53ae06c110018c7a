"""Canonical index expressions over a task's loop variables.

An :class:`Ix` is ``const + sum(coef * atom)``. Atoms are loop variables
``("v", k)``, floor divisions ``("div", Ix, c)`` and remainders ``("mod", Ix, c)`` by
positive constants, clamps ``("clip", Ix, lo, hi)`` (``min(max(Ix, lo), hi)``: where a
region update reads its source, valid inside the region and harmless outside it) and
data-dependent values ``("s", ssa)`` (a gathered index).
Construction simplifies with the variables' ranges, so the view chains of common
programs (slices, broadcasts, transposes, reshapes that split or merge axes) stay
affine: ``(i0*N + i1) // N`` with ``0 <= i1 < N`` is ``i0``. The same canonical form
is what fusion decisions inspect (which variables an access depends on and how).
"""

from __future__ import annotations

INF = float("inf")


class Ix:
    """An index expression (immutable, hashable, canonical for equal affine forms)."""

    __slots__ = ("const", "terms", "_hash")

    def __init__(self, const: int = 0, terms: tuple = ()):
        self.const = const
        self.terms = terms  # tuple of (atom, coef), coef != 0, atoms in canonical order (_order)
        self._hash = hash((const, terms))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, Ix) and self.const == other.const and self.terms == other.terms

    def __repr__(self) -> str:
        parts = [f"{c}*{_atom_repr(a)}" if c != 1 else _atom_repr(a) for a, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coef(self, atom) -> int:
        for a, c in self.terms:
            if a == atom:
                return c
        return 0


def _atom_repr(a) -> str:
    if a[0] == "v":
        return f"i{a[1]}"
    if a[0] == "s":
        return f"%{a[1]}"
    if a[0] == "clip":
        return f"clip({a[1]!r}, {a[2]}, {a[3]})"
    return f"(({a[1]!r}) {'//' if a[0] == 'div' else '%'} {a[2]})"


def _rest(x: Ix, c: int) -> Ix:
    """The part of ``x`` that survives ``% c`` (terms whose coefficient c does not divide)."""
    return Ix(x.const % c, tuple((a, k) for a, k in x.terms if k % c))


def _make(const: int, acc: dict) -> Ix:
    # recombine c*k*(X // c) + k*(X % c) into k*X, so delinearize-then-linearize is identity
    # (only where both a floor division and a remainder are among the terms)
    changed = any(a[0] == "div" for a in acc) and any(a[0] == "mod" for a in acc)
    while changed:
        changed = False
        for a, k in list(acc.items()):
            if a[0] != "div" or not k or k % a[2] or a not in acc:
                continue
            x, c = a[1], a[2]
            m = ("mod", _rest(x, c), c)
            if acc.get(m) == k // c:
                del acc[a], acc[m]
                const += x.const * (k // c)
                for b, d in x.terms:
                    acc[b] = acc.get(b, 0) + d * (k // c)
                changed = True
    terms = [(a, c) for a, c in acc.items() if c]
    if len(terms) > 1:
        terms.sort(key=_order)
    return Ix(const, tuple(terms))


def _order(term) -> tuple:
    """Canonical order of terms: loop variables by number, then other atoms by repr."""
    a = term[0]
    if a[0] == "v":
        return (0, a[1], "")
    key = _atom_keys.get(a)
    if key is None:
        if len(_atom_keys) >= ATOM_KEYS_CAP:
            _atom_keys.clear()
        key = _atom_keys[a] = (1, 0, repr(a))
    return key


_atom_keys: dict = {}   # atom -> its _order key (a repr of nested forms is costly to remake)
ATOM_KEYS_CAP = 1 << 14


def const(c: int) -> Ix:
    return Ix(int(c), ())


def var(k: int) -> Ix:
    return Ix(0, ((("v", k), 1),))


def ssa(i: int) -> Ix:
    return Ix(0, ((("s", i), 1),))


ZERO = const(0)


def add(*xs: Ix) -> Ix:
    total, acc = 0, {}
    for x in xs:
        total += x.const
        for a, c in x.terms:
            acc[a] = acc.get(a, 0) + c
    return _make(total, acc)


def scale(x: Ix, k: int) -> Ix:
    if k == 0:
        return ZERO
    return Ix(x.const * k, tuple((a, c * k) for a, c in x.terms))


def bounds(x: Ix, ext: dict) -> tuple:
    """Inclusive ``(lo, hi)`` of ``x`` given variable extents ``ext[k]`` (``±inf`` if unknown)."""
    lo = hi = x.const
    for a, c in x.terms:
        alo, ahi = _atom_bounds(a, ext)
        if c > 0:
            lo, hi = lo + c * alo, hi + c * ahi
        else:
            lo, hi = lo + c * ahi, hi + c * alo
    return lo, hi


def _atom_bounds(a, ext: dict) -> tuple:
    if a[0] == "v":
        return 0, ext[a[1]] - 1
    if a[0] == "s":
        return -INF, INF
    lo, hi = bounds(a[1], ext)
    if a[0] == "clip":
        return max(lo, a[2]), min(hi, a[3])
    c = a[2]
    if a[0] == "div":
        return (lo // c if lo != -INF else -INF), (hi // c if hi != INF else INF)
    if lo >= 0:
        return 0, min(c - 1, hi)
    return -(c - 1), c - 1


def floordiv(x: Ix, c: int, ext: dict) -> Ix:
    """``x // c`` (c > 0), simplified: divisible terms divide out when the rest is in [0, c)."""
    if c == 1:
        return x
    if x.is_const:
        return const(x.const // c)
    whole = {a: k // c for a, k in x.terms if k % c == 0}
    rest = _rest(x, c)
    lo, hi = bounds(rest, ext)
    if lo >= 0 and hi < c:
        return _make(x.const // c, whole)
    return Ix(0, ((("div", x, c), 1),))


def mod(x: Ix, c: int, ext: dict) -> Ix:
    """``x % c`` (c > 0, x >= 0 in range), simplified like :func:`floordiv`."""
    if c == 1:
        return ZERO
    if x.is_const:
        return const(x.const % c)
    rest = _rest(x, c)
    lo, hi = bounds(rest, ext)
    if lo >= 0 and hi < c:
        return rest
    return Ix(0, ((("mod", rest, c), 1),))


def clip(x: Ix, lo: int, hi: int, ext: dict) -> Ix:
    """``min(max(x, lo), hi)`` (``lo <= hi``), simplified: no clamp where ``x`` stays inside."""
    xlo, xhi = bounds(x, ext)
    if lo <= xlo and xhi <= hi:
        return x
    if lo == hi or xhi <= lo:
        return const(lo)
    if xlo >= hi:
        return const(hi)
    return Ix(0, ((("clip", x, lo, hi), 1),))


NESTED = ("div", "mod", "clip")  # atoms holding an Ix of their own


def variables(x: Ix) -> set:
    """Loop variables ``x`` depends on (also inside div/mod/clip atoms)."""
    out = set()
    for a, _ in x.terms:
        if a[0] == "v":
            out.add(a[1])
        elif a[0] in NESTED:
            out |= variables(a[1])
    return out


def affine_forms(x: Ix):
    """``x`` and every Ix nested inside its div/mod/clip atoms."""
    yield x
    for a, _ in x.terms:
        if a[0] in NESTED:
            yield from affine_forms(a[1])


def substitute(x: Ix, fn) -> Ix:
    """Rewrite variables: ``fn(k)`` gives the Ix that replaces variable ``k``."""
    total, acc = x.const, {}
    for a, c in x.terms:
        if a[0] == "v":
            r = fn(a[1])
            total += r.const * c
            for b, d in r.terms:
                acc[b] = acc.get(b, 0) + d * c
        elif a[0] in NESTED:
            b = (a[0], substitute(a[1], fn)) + a[2:]
            acc[b] = acc.get(b, 0) + c
        else:
            acc[a] = acc.get(a, 0) + c
    return _make(total, acc)


def clamp_identity_range(atom: tuple, k: int):
    """Inclusive ``(lo, hi)`` of loop variable ``k`` where the clamp ``atom`` (``("clip",
    x, lo, hi)``) leaves ``x`` unchanged, when ``x`` is ``c*i_k + const``; else None.

    Example: the clamp of ``i1 - 1`` into ``[0, 509]`` is the identity for ``1 <= i1 <= 510``.
        >>> clamp_identity_range(("clip", add(var(1), const(-1)), 0, 509), 1)
        (1, 510)
    """
    x, lo, hi = atom[1], atom[2], atom[3]
    if len(x.terms) != 1 or x.terms[0][0] != ("v", k):
        return None
    c = x.terms[0][1]
    ends = sorted(((lo - x.const) / c, (hi - x.const) / c))
    first, last = -(-ends[0] // 1), ends[1] // 1
    return int(first), int(last)
