"""The instructions of a task body, as named records, and the one visitor over them.

A task (:mod:`qtrace.graph.tasks`) is a list of SSA instructions; loops carry nested
programs (:class:`Prog`). Every instruction is a ``NamedTuple`` whose first field is its
``kind`` — records read by field, still tuples (hashable, comparable, part of content
keys). :func:`walk` visits every instruction, nested programs included; :func:`rewrite`
maps every instruction, rebuilding the programs that contain them: the passes over task
bodies (index rewriting, argument renumbering, loop inspection) are written with these two.

Example:
    >>> from qtrace.graph.instrs import Const, Op, walk
    >>> body = [Const("const", "<f8", 2.0), Op("op", "<f8", "add", (0, 0))]
    >>> [i.kind for i in walk(body)]
    ['const', 'op']
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Load(NamedTuple):
    kind: str       # "load"
    dt: str
    arg: int        # task argument
    ix: Any         # canonical index expression (qtrace.graph.index)


class Const(NamedTuple):
    kind: str       # "const"
    dt: str
    value: Any


class Op(NamedTuple):
    kind: str       # "op"
    dt: str
    prim: str
    args: tuple     # SSA values


class Bound(NamedTuple):
    kind: str       # "bound": index value wrapped and clamped to [0, size), reported by check
    dt: str
    value: int
    size: int
    check: int


class Ix(NamedTuple):
    kind: str       # "ix": the value of an index expression
    dt: str
    ix: Any


class Atomic(NamedTuple):
    kind: str       # "atomic": *arg[ix] += value
    dt: str
    arg: int
    ix: Any
    value: int


class Placeholder(NamedTuple):
    kind: str       # "state" | "ct" | "inv": a loop body's input k
    dt: str
    index: int


class Counter(NamedTuple):
    kind: str       # "counter": a loop body's iteration index
    dt: str


class Get(NamedTuple):
    kind: str       # "get": output ``index`` of loop instruction ``loop``
    dt: str
    loop: int
    index: int


class Prog(NamedTuple):
    kind: str       # "prog": a loop body program
    instrs: tuple
    outputs: tuple


class Loop(NamedTuple):
    kind: str       # "loop"
    dts: tuple      # state dtypes
    layout: str     # "fori" | "while"
    n_state: int
    cond: Prog | None
    body: Prog
    per_element: tuple


class LoopVjp(NamedTuple):
    kind: str       # "loop_vjp": the replay and reverse of a loop (adstack)
    dts: tuple
    layout: str
    n_state: int
    cond: Prog | None
    body: Prog
    reverse: Prog
    per_element: tuple
    pushed: tuple   # state indices pushed to the stack
    check: int      # the overflow check


LOOPS = ("loop", "loop_vjp")


def uses_f32_trig(instr) -> bool:
    """A float32 ``sin``, ``cos`` or ``tan`` (which targets may lower with a fast path)."""
    return instr.kind == "op" and instr.prim in ("sin", "cos", "tan") and instr.dt == "<f4"


def nesting(prog: Prog) -> int:
    """How deep per-element loops nest in a loop body's program (0: none; 1: loops with
    no loop in their bodies; ...). Conditions are not counted: only bodies are reversed."""
    return max((1 + nesting(i.body) for i in prog.instrs if i.kind == "loop"), default=0)


def programs(instr) -> list:
    """The nested programs of an instruction (a loop's condition, body, reverse)."""
    if instr.kind == "loop":
        return [p for p in (instr.cond, instr.body) if p is not None]
    if instr.kind == "loop_vjp":
        return [p for p in (instr.cond, instr.body, instr.reverse) if p is not None]
    return []


def walk(instrs):
    """Every instruction of ``instrs`` and of the programs nested in them, outer first."""
    for instr in instrs:
        yield instr
        for prog in programs(instr):
            yield from walk(prog.instrs)


def rewrite(instrs, fn) -> list:
    """``instrs`` with ``fn`` applied to every instruction, nested programs included
    (``fn`` sees each loop after its programs were rewritten)."""
    out = []
    for instr in instrs:
        if instr.kind in LOOPS:
            instr = instr._replace(**{
                field: Prog("prog", tuple(rewrite(p.instrs, fn)), p.outputs)
                for field in ("cond", "body", "reverse") if field in instr._fields
                and (p := getattr(instr, field)) is not None})
        out.append(fn(instr))
    return out
