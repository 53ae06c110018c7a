"""Canonical index expressions (qtrace.graph.index): simplification and numeric meaning."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qtrace.graph import index as ix


def evaluate(x: ix.Ix, env: dict) -> int:
    """Value of ``x`` (Python floor semantics for ``div``/``mod`` atoms, which is what an
    ``Ix`` means and what ``qtrace.kernels.codegen`` emits) with variables bound by ``env``."""
    total = x.const
    for atom, coef in x.terms:
        if atom[0] == "v":
            v = env[atom[1]]
        elif atom[0] == "div":
            v = evaluate(atom[1], env) // atom[2]
        elif atom[0] == "mod":
            v = evaluate(atom[1], env) % atom[2]
        else:
            raise AssertionError(atom)
        total += coef * v
    return total


def envs(ext: dict):
    keys = sorted(ext)
    for values in itertools.product(*(range(ext[k]) for k in keys)):
        yield dict(zip(keys, values))


# --- hand-written cases ------------------------------------------------------------

def test_floordiv_and_mod_of_merged_axes_simplify():
    ext = {0: 3, 1: 5}
    i0, i1 = ix.var(0), ix.var(1)
    linear = ix.add(ix.scale(i0, 5), i1)                  # i0*5 + i1, 0 <= i1 < 5
    assert ix.floordiv(linear, 5, ext) == i0
    assert ix.mod(linear, 5, ext) == i1
    # with an offset that stays inside one block
    shifted = ix.add(ix.scale(i0, 8), i1, ix.const(2))    # 2 + i1 in [2, 7) < 8
    assert ix.floordiv(shifted, 8, ext) == i0
    assert ix.mod(shifted, 8, ext) == ix.add(i1, ix.const(2))


def test_floordiv_and_mod_that_cannot_simplify_keep_atoms():
    ext = {0: 10}
    i = ix.var(0)
    d, m = ix.floordiv(i, 4, ext), ix.mod(i, 4, ext)
    assert not d.is_const and d.terms[0][0][0] == "div"
    assert m.terms[0][0][0] == "mod"
    assert ix.variables(d) == ix.variables(m) == {0}


def test_small_ranges_make_div_and_mod_trivial():
    ext = {0: 4}
    i = ix.var(0)
    assert ix.floordiv(i, 4, ext) == ix.ZERO
    assert ix.floordiv(i, 100, ext) == ix.ZERO
    assert ix.mod(i, 4, ext) == i
    assert ix.floordiv(i, 1, ext) == i
    assert ix.mod(i, 1, ext) == ix.ZERO
    assert ix.floordiv(ix.const(-7), 2, ext) == ix.const(-4)
    assert ix.mod(ix.const(-7), 2, ext) == ix.const(1)


@pytest.mark.parametrize("c", [2, 3, 4, 7, 16])
@pytest.mark.parametrize("n", [5, 16, 33])
def test_delinearize_then_linearize_is_identity(c, n):
    """``(i // c) * c + i % c == i``, structurally (so fusion sees the plain index)."""
    ext = {0: n}
    i = ix.var(0)
    q, r = ix.floordiv(i, c, ext), ix.mod(i, c, ext)
    assert ix.add(ix.scale(q, c), r) == i
    assert ix.add(r, ix.scale(q, c)) == i
    # scaled by k: k*c*(i//c) + k*(i%c) == k*i
    assert ix.add(ix.scale(q, 3 * c), ix.scale(r, 3)) == ix.scale(i, 3)


def test_recombination_of_an_affine_argument():
    ext = {0: 6, 1: 7}
    x = ix.add(ix.scale(ix.var(0), 7), ix.var(1), ix.const(3))  # 7*i0 + i1 + 3
    for c in (2, 5, 9):
        q, r = ix.floordiv(x, c, ext), ix.mod(x, c, ext)
        assert ix.add(ix.scale(q, c), r) == x
        for env in envs(ext):
            assert evaluate(q, env) == evaluate(x, env) // c
            assert evaluate(r, env) == evaluate(x, env) % c


def test_reshape_split_and_merge_round_trip():
    """(4, 6) -> (24,) -> (4, 6): the index chain collapses back to (i0, i1)."""
    ext = {0: 4, 1: 6}
    i0, i1 = ix.var(0), ix.var(1)
    linear = ix.add(ix.scale(i0, 6), i1)
    lin_ext = {0: 24}
    # split a flat index into (4, 6), then substitute the flat index by 6*i0 + i1
    j = ix.var(0)
    a0, a1 = ix.floordiv(j, 6, lin_ext), ix.mod(j, 6, lin_ext)
    back0 = ix.substitute(a0, lambda k: linear)
    back1 = ix.substitute(a1, lambda k: linear)
    for env in envs(ext):
        assert evaluate(back0, env) == env[0]
        assert evaluate(back1, env) == env[1]


def test_ix_equality_and_hash_are_canonical():
    a = ix.add(ix.var(0), ix.scale(ix.var(1), 3), ix.const(2))
    b = ix.add(ix.const(2), ix.scale(ix.var(1), 3), ix.var(0))
    assert a == b and hash(a) == hash(b)
    assert ix.add(ix.var(0), ix.scale(ix.var(0), -1)) == ix.ZERO
    assert ix.scale(a, 0) == ix.ZERO
    assert {a: 1}[b] == 1


def test_bounds():
    ext = {0: 5, 1: 3}
    x = ix.add(ix.scale(ix.var(0), 2), ix.scale(ix.var(1), -1), ix.const(1))
    assert ix.bounds(x, ext) == (1 - 2, 1 + 8)
    values = [evaluate(x, e) for e in envs(ext)]
    assert min(values) == -1 and max(values) == 9


# --- property tests ----------------------------------------------------------------

N_VARS = 3


@st.composite
def trees(draw, depth=3):
    """Random expression trees: ("v", k) ("c", n) ("+", a, b) ("*", a, k) ("//", a, c) ("%", a, c)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            return ("v", draw(st.integers(0, N_VARS - 1)))
        return ("c", draw(st.integers(-20, 20)))
    kind = draw(st.sampled_from(["+", "*", "//", "%"]))
    if kind == "+":
        return ("+", draw(trees(depth - 1)), draw(trees(depth - 1)))
    if kind == "*":
        return ("*", draw(trees(depth - 1)), draw(st.integers(-6, 6)))
    return (kind, draw(trees(depth - 1)), draw(st.integers(1, 9)))


def build(tree, ext) -> ix.Ix:
    kind = tree[0]
    if kind == "v":
        return ix.var(tree[1])
    if kind == "c":
        return ix.const(tree[1])
    if kind == "+":
        return ix.add(build(tree[1], ext), build(tree[2], ext))
    if kind == "*":
        return ix.scale(build(tree[1], ext), tree[2])
    if kind == "//":
        return ix.floordiv(build(tree[1], ext), tree[2], ext)
    return ix.mod(build(tree[1], ext), tree[2], ext)


def python(tree, env) -> int:
    kind = tree[0]
    if kind == "v":
        return env[tree[1]]
    if kind == "c":
        return tree[1]
    if kind == "+":
        return python(tree[1], env) + python(tree[2], env)
    if kind == "*":
        return python(tree[1], env) * tree[2]
    if kind == "//":
        return python(tree[1], env) // tree[2]
    return python(tree[1], env) % tree[2]


def div_mod_args_nonnegative(tree, env) -> bool:
    kind = tree[0]
    if kind in ("v", "c"):
        return True
    if kind == "+":
        return div_mod_args_nonnegative(tree[1], env) and div_mod_args_nonnegative(tree[2], env)
    ok = div_mod_args_nonnegative(tree[1], env)
    if kind in ("//", "%"):
        ok = ok and python(tree[1], env) >= 0
    return ok


extents = st.fixed_dictionaries({k: st.integers(1, 9) for k in range(N_VARS)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), ext=extents)
def test_simplified_expressions_keep_python_semantics(tree, ext):
    x = build(tree, ext)
    for env in envs(ext):
        assert evaluate(x, env) == python(tree, env), (tree, x, env)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), ext=extents)
def test_bounds_contain_every_value(tree, ext):
    x = build(tree, ext)
    lo, hi = ix.bounds(x, ext)
    for env in envs(ext):
        assert lo <= evaluate(x, env) <= hi, (tree, x, env, (lo, hi))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), ext=extents)
def test_recombination_holds_for_any_argument(tree, ext):
    x = build(tree, ext)
    for c in (2, 3, 8):
        q, r = ix.floordiv(x, c, ext), ix.mod(x, c, ext)
        for env in envs(ext):
            v = evaluate(x, env)
            assert evaluate(q, env) == v // c and evaluate(r, env) == v % c
        assert ix.add(ix.scale(q, c), r) == x


@st.composite
def index_chains(draw, depth=3):
    """Expressions like view chains build: flips, positive-stride linearizations, and
    div/mod of those -- every div/mod argument is non-negative by construction."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        k = draw(st.integers(0, N_VARS - 1))
        return ("flip", k) if draw(st.booleans()) else ("v", k)
    kind = draw(st.sampled_from(["lin", "//", "%"]))
    if kind == "lin":
        n = draw(st.integers(1, 3))
        parts = [("*", draw(index_chains(depth - 1)), draw(st.integers(1, 12))) for _ in range(n)]
        out = ("c", draw(st.integers(0, 5)))
        for p in parts:
            out = ("+", out, p)
        return out
    return (kind, draw(index_chains(depth - 1)), draw(st.integers(2, 9)))


def resolve_flips(tree, ext):
    """Replace ("flip", k) by ext[k] - 1 - i_k."""
    if tree[0] == "flip":
        return ("+", ("c", ext[tree[1]] - 1), ("*", ("v", tree[1]), -1))
    if tree[0] in ("v", "c"):
        return tree
    if tree[0] == "+":
        return ("+", resolve_flips(tree[1], ext), resolve_flips(tree[2], ext))
    return (tree[0], resolve_flips(tree[1], ext), tree[2])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=index_chains(), ext=extents)
def test_view_like_index_chains_keep_their_meaning(chain, ext):
    """Chains like views build (flips, linearizations, delinearizations): every simplified
    div/mod atom still means the original value. A simplified atom may have a negative
    argument even where the original is not (``(7 - i) % 4`` becomes ``(3 - i) % 4``), so
    the lowering must use floor semantics (it once used C's truncating srem: out-of-bounds
    reads in ``x.T.reshape(-1)[::-1]``)."""
    tree = resolve_flips(chain, ext)
    assert all(div_mod_args_nonnegative(tree, env) for env in envs(ext))
    x = build(tree, ext)
    lo, hi = ix.bounds(x, ext)
    for env in envs(ext):
        value = evaluate(x, env)
        assert value == python(tree, env), (tree, x, env)
        assert lo <= value <= hi


def test_mod_of_a_reversed_index():
    """The index a reversed reshape reads: ``(7 - i) % 4`` over i in [0, 8)."""
    ext = {0: 8}
    rev = ix.add(ix.const(7), ix.scale(ix.var(0), -1))
    m, d = ix.mod(rev, 4, ext), ix.floordiv(rev, 4, ext)
    for env in envs(ext):
        assert evaluate(m, env) == (7 - env[0]) % 4
        assert evaluate(d, env) == (7 - env[0]) // 4
    assert ix.add(ix.scale(d, 4), m) == rev


@settings(max_examples=80, deadline=None)
@given(tree=trees(), ext=extents, flips=st.lists(st.booleans(), min_size=N_VARS, max_size=N_VARS))
def test_substitute_matches_python(tree, ext, flips):
    """Substituting range-preserving maps (here i -> n-1-i per variable) keeps the meaning."""
    x = build(tree, ext)

    def new(j):
        if flips[j]:
            return ix.add(ix.const(ext[j] - 1), ix.scale(ix.var(j), -1))
        return ix.var(j)
    y = ix.substitute(x, new)
    for env in envs(ext):
        mapped = {j: (ext[j] - 1 - v if flips[j] else v) for j, v in env.items()}
        assert evaluate(y, env) == python(tree, mapped)


def test_variables_and_affine_forms():
    ext = {0: 10, 1: 10}
    x = ix.add(ix.floordiv(ix.add(ix.var(0), ix.var(1)), 3, ext), ix.var(1))
    assert ix.variables(x) == {0, 1}
    forms = list(ix.affine_forms(x))
    assert forms[0] == x and len(forms) == 2
    assert math.isinf(ix.bounds(ix.ssa(0), ext)[1])
