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
    pushed: tuple   # state indices pushed to the stack (m, m + 1, ...: residuals)
    check: int      # the overflow check
    residuals: tuple = ()   # dtypes of the values the replay pushes beside the states: its
                            # body program's outputs after the states (``graph.loops.residuals``)

    @property
    def row_dts(self) -> tuple:
        """Dtypes of the values a row may hold: the states, then the residuals."""
        return self.dts + self.residuals


LOOPS = ("loop", "loop_vjp")
STACK_WORD = 4     # bytes: every pushed value takes whole words of the adstack
STACK_HEADER = 64  # bytes of a stack's header: [level-0 depth, float bytes, int bytes, heap
                   # rows, heap row held + 1, (thread 0's) heap rows claimed], padded
HEAP_ROWS, HEAP_HELD, HEAP_COUNTER = 24, 32, 40   # byte offsets of those last three


def stack_rows(dts: tuple, pushed: tuple, reverse: Prog) -> tuple[dict, int, int]:
    """The adstack row of a ``loop_vjp`` pushing values ``pushed`` (indices into ``dts``,
    dtype strings: the states, then the residuals — ``LoopVjp.row_dts``) whose reverse body
    is ``reverse``: ``({value: ("f" | "i", byte offset)}, float row bytes, int row
    bytes)``. Floats go to the float stack, integers and bools to the int stack, each
    value padded to whole :data:`STACK_WORD` words (a bool takes one) — so a GPU can
    interleave its threads' stacks word by word, every push and
    pop coalesced across a warp (``qtrace.kernels.codegen``), and the task's sizing and
    every lowering agree on the rows. Every value is aligned (a GPU faults on a misaligned
    8-byte access): wider values come first, a row is a multiple of its widest value, and a
    loop whose reverse body holds loop adjoints (they push above its rows) keeps its rows
    a multiple of 8 bytes."""
    offsets, rows = {}, {"f": 0, "i": 0}
    align = 8 if any(i.kind == "loop_vjp" for i in walk(reverse.instrs)) else STACK_WORD
    widest = {"f": align, "i": align}
    size = {k: -(-int(dts[k][2:]) // STACK_WORD) * STACK_WORD for k in pushed}
    for k in sorted(pushed, key=lambda k: -size[k]):
        where = "f" if dts[k][1] == "f" else "i"
        offsets[k] = (where, rows[where])
        rows[where] += size[k]
        widest[where] = max(widest[where], size[k])
    fb, ib = (-(-rows[w] // widest[w]) * widest[w] for w in ("f", "i"))
    return offsets, fb, ib


def word_stacks(instrs) -> bool:
    """Whether every value the loop adjoints in ``instrs`` push is one :data:`STACK_WORD`
    (float32, int32, a bool, a small integer): a GPU then interleaves its threads' stacks
    word by word (``qtrace.kernels.codegen``). A task pushing wider values keeps a block per
    thread: split into words and interleaved, a float64 state beside an integer one gave
    gradients off in the last ~20 bits on an H100 although the pushed words read back
    exact — a cause not found, so that layout is not used."""
    return all(int(i.row_dts[k][2:]) <= STACK_WORD for i in walk(instrs) if i.kind == "loop_vjp"
               for k in i.pushed)


def uses_fast_trig(instr) -> bool:
    """A float32 or float64 ``sin``, ``cos`` or ``tan`` (which targets may lower with a
    fast path)."""
    return instr.kind == "op" and instr.prim in ("sin", "cos", "tan") and instr.dt in ("<f4", "<f8")


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
