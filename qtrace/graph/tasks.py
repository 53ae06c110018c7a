"""Range tasks: the scalar program each group of a schedule runs per index of its domain.

A task is one parallel loop nest over ``domain`` (outer, split across workers) and,
for reductions and scans, ``inner`` (sequential per worker). Its body is a list of SSA
instructions — ``load``, ``const``, ``op``, ``bound`` — whose loads and stores address
buffers through canonical index expressions (:mod:`qtrace.graph.index`) over the loop
variables: variables ``0..len(domain)-1`` are the domain's, the next ones ``inner``'s.
Every target (LLVM CPU now, NVPTX next) lowers this same form.

Instructions are the named records of :mod:`qtrace.graph.instrs` (``load``, ``const``,
``op``, ``bound``, ``ix``; in loop bodies ``state``/``ct``/``inv``/``counter``/``get``/
``atomic``; ``loop``/``loop_vjp`` with nested programs); ``dt`` is a dtype string such
as ``'<f4'``. Stores: ``(arg, ix, ssa)``. Reductions: ``reduce = (prim, ssa)`` folded over
``inner`` and stored once per domain index; scans store each prefix; ``rmw = mode`` makes
the stores read-modify-write (atomic) updates, skipped for invalid indices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import TracerError
from . import index as ix_
from .access import broadcast_index, prim_cost, region_axes, update_index, view_index
from .instrs import (
    Atomic,
    Bound,
    Const,
    Counter,
    Get,
    Ix,
    Load,
    Loop,
    LoopVjp,
    Op,
    Placeholder,
    Prog,
    rewrite,
    stack_rows,
    walk,
)
from .loops import body_outputs, layout, residuals, siblings_key
from .node import Node, c_strides, content_hash
from .partition import FREE, Schedule, kind, region_index
from .primitives import in_range


@dataclass
class Task:
    kind: str                        # "map" | "reduce" | "scan" | "rmw"
    domain: tuple
    inner: tuple = ()
    instrs: list = field(default_factory=list)
    stores: list = field(default_factory=list)
    reduce: tuple | None = None      # (prim, value ssa, acc dtype str)
    rmw: str | None = None           # scatter mode
    args: list = field(default_factory=list)     # task arg -> id(node) of its buffer
    arg_nodes: list = field(default_factory=list)
    writes: set = field(default_factory=set)     # task args written
    checks: list = field(default_factory=list)   # check id -> (op, axis, size)
    nodes: list = field(default_factory=list)    # graph nodes computed here (for reports)
    has_loops: bool = False
    lanes: int = 0                               # >0: the loop runs in blocks of this many lanes
    stack: tuple | None = None                   # adstack levels: ((depth node, float bytes, int bytes), ...)
    # per nested loop_vjp (while building): its (float, int) row bytes, then those below it by depth
    nested_rows: list = field(default_factory=list)
    # a region slice assignment's task (never merged with another): (the assignment, the
    # base whose buffer it writes into in place: the assignment's result is that buffer)
    region: tuple | None = None
    key: str = ""

    def finalize(self) -> None:
        self.key = content_hash((self.kind, self.domain, self.inner, self.instrs, self.stores,
                                 self.reduce, self.rmw, tuple(sorted(self.writes)),
                                 [(n.dtype.str, n.shape == ()) for n in self.arg_nodes], self.checks,
                                 self.in_place))

    @property
    def in_place(self) -> bool:
        """Whether the task writes into the buffer of a value it reads (a region slice
        assignment): its loads and stores may alias."""
        return self.region is not None

    @property
    def cost(self) -> int:
        return instrs_cost(self.instrs)

    @property
    def symbol(self) -> str:
        return f"qt_{self.key[:24]}"


def instrs_cost(instrs: list) -> int:
    """Work per element of a task body, in the units of partitioning's task cost (each
    operation weighed by :func:`qtrace.graph.access.prim_cost`): bounding merged tasks by
    the same limit as fused ones keeps LLVM's time per kernel bounded."""
    return sum(prim_cost(i.prim) for i in instrs if i.kind == "op")


def buffer_strides(node: Node) -> tuple:
    return node.params[0] if node.is_leaf else c_strides(node.shape)


class TaskBuilder:
    """Builds the SSA body of one task by evaluating graph nodes at symbolic indices.

    A builder may also build a loop body's program: then ``env`` maps the body's
    placeholder leaves to their roles (carried state, counter, incoming cotangent) or,
    for captured values, to the outside node the loop reads.
    """

    def __init__(self, schedule: Schedule, group, task: Task, ext: dict, instrs=None, env=None,
                 args=None, table=None):
        self.s, self.group, self.t, self.ext = schedule, group, task, ext
        self.instrs = task.instrs if instrs is None else instrs
        self.env = env or {}
        # the gathered table whose gradient this task accumulates: (the table, the gradient
        # node), seen by the loop adjoints at every depth of nesting (see _scatter_cotangents)
        self.table = table
        self._ids: dict = {}
        self._memo: dict = {}
        self._args: dict = {} if args is None else args

    def emit(self, instr: tuple) -> int:
        # constants compare by repr: 0.0 == -0.0 and 1 == 1.0 == True must stay distinct
        key = _instr_key(instr)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.instrs)
            self.instrs.append(instr)
        return i

    def arg(self, node: Node, write: bool = False) -> int:
        a = self._args.get(id(node))
        if a is None:
            a = self._args[id(node)] = len(self.t.args)
            self.t.args.append(id(node))
            self.t.arg_nodes.append(node)
        if write:
            self.t.writes.add(a)
        return a

    def address(self, node: Node, ix: tuple, strides: tuple | None = None) -> ix_.Ix:
        strides = buffer_strides(node) if strides is None else strides
        return ix_.add(*(ix_.scale(i, s) for i, s, d in zip(ix, strides, node.shape) if d != 1))

    def load(self, node: Node, ix: tuple) -> int:
        return self.emit(Load("load", node.dtype.str, self.arg(node), self.address(node, ix)))

    def value(self, node: Node, ix: tuple) -> int:
        key = (id(node), ix)
        v = self._memo.get(key)
        if v is None:
            self._prefetch(node, ix)
            v = self._memo[key] = self._value(node, ix)
        return v

    def _prefetch(self, node: Node, ix: tuple) -> None:
        """Evaluate the elementwise inputs of a deep chain bottom-up, without recursion.

        A fused chain of thousands of elementwise operations would otherwise recurse
        once per operation; an explicit post-order walk computes them in order first.
        """
        stack = [(node, ix, False)]
        while stack:
            n, i, expanded = stack.pop()
            key = (id(n), i)
            if key in self._memo:
                continue
            inline = self._computes_elementwise(n)
            if not inline:
                continue
            if expanded:
                if n is not node:
                    self._memo[key] = self._value(n, i)
                continue
            stack.append((n, i, True))
            for inp in n.inputs:
                stack.append((inp, broadcast_index(i, inp.shape), False))

    def _computes_elementwise(self, n: Node) -> bool:
        if n.prim == "const" or n.is_leaf or id(n) in self.env or kind(n) != "elementwise":
            return False
        g = self.s.group_of.get(id(n))
        return g is None or g is self.group

    def _value(self, node: Node, ix: tuple) -> int:
        if node.prim == "const":
            return self.emit(Const("const", node.dtype.str, node.params[0]))
        role = self.env.get(id(node))
        if role is not None:
            if role[0] == "node":  # a captured value: read from outside, inside the body
                return self.value(role[1], ix)
            if role[0] == "counter":
                return self.emit(Counter("counter", "<i8"))
            if role[0] == "inv" and ix != role[2]:
                raise TracerError(
                    "qt.fori_loop/while_loop: an inner loop body gathers from a value of the "
                    f"enclosing loop's body ({node.dtype} {node.shape}); per-element loops may "
                    "gather only from tensors computed outside every loop")
            return self.emit(Placeholder(role[0], node.dtype.str, role[1]))
        g = self.s.group_of.get(id(node))
        if node.is_leaf or (g is not None and g is not self.group and g is not FREE):
            return self.load(node, ix)
        if g is not None and node not in self.t.nodes:
            self.t.nodes.append(node)
        k = kind(node)
        if k == "view":
            return self.value(node.inputs[0], view_index(node, ix, self.ext))
        if node.prim == "iota":
            return self.emit(Ix("ix", "<i8", self.address(node, ix, c_strides(node.shape))))
        if k == "elementwise":
            args = tuple(self.value(i, broadcast_index(ix, i.shape)) for i in node.inputs)
            return self.emit(Op("op", node.dtype.str, node.prim, args))
        if k == "update":
            parent, src = node.inputs
            old = self.value(parent, ix)
            new = self.value(src, update_index(node, ix, self.ext))
            return self.emit(Op("op", node.dtype.str, "select", (self.inside(node, ix), new, old)))
        if k == "gather":
            src = node.inputs[0]
            coords = [self.value(c, ix) for c in node.inputs[1:]]
            src_ix, ok = self.coordinates(src, coords, "gather (x[idx])", in_range(node))
            if not ok:
                return self.emit(Const("const", node.dtype.str, 0))
            return self.value(src, src_ix)
        if k == "loop":
            if node.params[-1] < 0:
                raise NotImplementedError(
                    "qtrace: the gradient of a tensor gathered inside a nested loop's body is not "
                    "supported yet")
            return self.emit(Get("get", node.dtype.str, self.loop(node, ix), node.params[-1]))
        raise AssertionError(f"qtrace: {node.prim} cannot be computed inside another task")

    def inside(self, node: Node, ix: tuple) -> int:
        """Whether ``ix`` lies in the region a ``slice_update`` replaces (a boolean SSA value)."""
        def op(prim, *args):
            return self.emit(Op("op", "|b1", prim, args))

        def const(v):
            return self.emit(Const("const", "<i8", v))
        ok = None
        for axis, lo, hi, start, step in region_axes(node):
            i = self.emit(Ix("ix", "<i8", ix[axis]))
            test = op("logical_and", op("greater_equal", i, const(lo)), op("less_equal", i, const(hi)))
            if abs(step) > 1:
                rem = self.emit(Op("op", "<i8", "remainder", (i, const(abs(step)))))
                test = op("logical_and", test, op("equal", rem, const(start % abs(step))))
            ok = test if ok is None else op("logical_and", ok, test)
        return ok if ok is not None else self.emit(Const("const", "|b1", True))

    def coordinates(self, src: Node, coords: list, op: str, known: bool = False):
        """Checked indices into ``src``; ``ok`` is False if an axis is empty (nothing to read).

        ``known``: the coordinates are int64 values known to lie in their axes (the node is
        :func:`~qtrace.graph.primitives.in_range`): used as they are, nothing to check."""
        if known:
            return tuple(ix_.ssa(c) for c in coords), all(size > 0 for size in src.shape)
        out, ok = [], True
        for axis, (c, size) in enumerate(zip(coords, src.shape)):
            check = len(self.t.checks)
            self.t.checks.append(("index", op, axis, size))
            out.append(ix_.ssa(self.emit(Bound("bound", "<i8", c, size, check))))
            ok = ok and size > 0
        return tuple(out), ok

    # -- loops ------------------------------------------------------------------------
    def program(self, outputs, env: dict, ix: tuple, finish=None) -> tuple:
        """A loop body's program (:class:`~qtrace.graph.instrs.Prog`).

        ``finish(child builder, output ssa ids)`` may emit more (the atomic adds of a
        reverse body) and returns the output ids the loop carries.
        """
        child = TaskBuilder(self.s, self.group, self.t, self.ext, instrs=[], env=env, args=self._args,
                            table=self.table)
        outs = tuple(child.value(o, broadcast_index(ix, o.shape)) for o in outputs)
        if finish is not None:
            outs = finish(child, outs)
        return Prog("prog", tuple(child.instrs), outs)

    def _scatter_cotangents(self, node: Node):
        """``finish`` for a reverse body: atomic adds of gathered reads' cotangents into the
        gradient of ``self.table`` (in the task building that gradient), the rest carried.

        A loop nested in another's body reads the table as a captured value of the
        enclosing body; it is the same table when the enclosing body's environment says
        it reads that node from outside."""
        lay = layout(node)
        carried = lay.n_state + lay.n_captured
        captured = node.inputs[lay.captured]
        target = None
        if self.table is not None:
            source, grad = self.table
            target = grad

        def reads_table(j: int) -> bool:
            c = captured[j]
            if self.env:
                role = self.env.get(id(c))
                return role is not None and role[0] == "node" and role[1] is source
            return c is source

        def finish(child, outs):
            pos = carried
            for j, n_coords in node.params[4]:
                coords, ct = outs[pos:pos + n_coords], outs[pos + n_coords]
                pos += n_coords + 1
                if target is None or not reads_table(j):
                    continue
                dst, ok = child.coordinates(target, list(coords), "gather (x[idx]) in a loop body")
                if ok:
                    child.emit(Atomic("atomic", target.dtype.str, child.arg(target, write=True),
                                       child.address(target, dst), ct))
            return outs[:carried]
        return finish

    def _stack_levels(self, node: Node, lay, fb: int, ib: int, inner: list) -> None:
        """Adstack sizing of a ``loop_vjp``: a top-level one owns the task's stack (level 0:
        its trip counts; level k above it: the loops nested k deep in its body, sized by the
        largest trip count at that depth, which its forward loop recorded). A nested one
        reports its rows: its own, then those of the loops nested in it, by depth.

        ``inner``: the rows reported by the loop_vjps nested in this one's reverse body."""
        below = [(max(r[k][0] for r in inner if len(r) > k), max(r[k][1] for r in inner if len(r) > k))
                 for k in range(max(map(len, inner), default=0))]
        if self.env:
            self.t.nested_rows.append(((fb, ib), *below))
            return
        depths = node.inputs[lay.depth:]
        if len(depths) <= len(below):
            raise AssertionError(f"qtrace: a loop adjoint sized for {len(depths) - 1} nested "
                                 f"levels holds loops nested {len(below)} deep")
        self.t.stack = ((depths[0], fb, ib),) + tuple((d, f, i) for d, (f, i) in zip(depths[1:], below))

    def loop(self, node: Node, ix: tuple) -> int:
        """The loop instruction of ``node`` and its siblings at ``ix``."""
        key = ("loop",) + siblings_key(node) + (ix,)
        ssa = self._memo.get(key)
        if ssa is not None:
            return ssa
        lay = layout(node)
        self.t.has_loops = True
        per_element = [self.value(node.inputs[p], broadcast_index(ix, node.inputs[p].shape))
                       for p in range(len(node.inputs)) if lay.per_element(p)]
        captured = node.inputs[lay.captured]
        sub = node.params[2]
        invariants: dict[int, tuple] = {}

        def outside(c: Node) -> tuple:
            """How the body reads captured value ``c``: from outside, or (in a nested loop)
            as a value of the enclosing body computed once per element (``inv``)."""
            if not self.env:
                return ("node", c)
            role = self.env.get(id(c))
            if role is not None and role[0] == "node":
                return role
            if id(c) not in invariants:
                c_ix = broadcast_index(ix, c.shape)
                invariants[id(c)] = ("inv", len(invariants), c_ix, self.value(c, c_ix))
            return invariants[id(c)][:3]

        def env_for(graph):
            env = {}
            for role, leaf in graph.placeholders.values():
                env[id(leaf)] = outside(captured[role[1]]) if role[0] == "captured" else role
            return env

        env = env_for(sub)
        outs = sub.outputs
        cprog = self.program(outs[:1], env, ix) if lay.kind == "while" else None
        # an adjoint's replay computes the residuals too (outputs after the states), which
        # its reverse body reads as states m, m + 1, ... (popped, not recomputed)
        rsub = node.params[3] if lay.reverse else None
        res = residuals(rsub) if lay.reverse else ()
        bprog = self.program(body_outputs(lay.kind, sub) + res, env, ix)
        dts = tuple(n.dtype.str for n in node.inputs[lay.init])
        per_element += [v[3] for v in invariants.values()]
        if not lay.reverse:
            instr = Loop("loop", dts, lay.kind, lay.n_state, cprog, bprog, tuple(per_element))
        else:
            renv = env_for(rsub)
            renv.update({id(n): ("state", lay.n_state + k) for k, n in enumerate(res)})
            mark = len(self.t.nested_rows)
            rprog = self.program(rsub.outputs, renv, ix, self._scatter_cotangents(node))
            inner = self.t.nested_rows[mark:]
            del self.t.nested_rows[mark:]
            pushed = sorted({i.index for i in rprog.instrs if i.kind == "state"})
            res_dts = tuple(n.dtype.str for n in res)
            _, fb, ib = stack_rows(dts + res_dts, tuple(pushed), rprog)
            check = len(self.t.checks)
            self.t.checks.append(("adstack", f"loop_{sub.key[:12]}", 0, 0))
            self._stack_levels(node, lay, fb, ib, inner)
            instr = LoopVjp("loop_vjp", dts, lay.kind, lay.n_state, cprog, bprog, rprog,
                            tuple(per_element), tuple(pushed), check, res_dts)
        ssa = self._memo[key] = self.emit(instr)
        return ssa


def _vars(n: int, offset: int = 0) -> tuple:
    return tuple(ix_.var(offset + k) for k in range(n))


def _extents(*shapes) -> dict:
    ext, k = {}, 0
    for shape in shapes:
        for d in shape:
            ext[k] = d
            k += 1
    return ext


def build_tasks(schedule: Schedule, group) -> list:
    """The task(s) one group runs: one, except scatters (copy, then update) and concats."""
    root = group.root
    k = kind(root)
    if k == "library":
        return []
    if k == "reduce":
        src = root.inputs[0]
        axes = root.params[0]
        inner = tuple(src.shape[a] for a in axes)
        t = Task("reduce", root.shape, inner)
        b = TaskBuilder(schedule, group, t, _extents(root.shape, inner))
        outer_vars, inner_vars = _vars(len(root.shape)), _vars(len(inner), len(root.shape))
        it_o, it_i = iter(outer_vars), iter(inner_vars)
        full = tuple(next(it_i) if a in axes else next(it_o) for a in range(src.ndim))
        v = b.value(src, full)
        if root.prim in ("argmax", "argmin"):
            acc = src.dtype  # the running best value; the index is kept beside it
        elif root.dtype in (np.float32, np.complex64) and root.prim in ("reduce_sum", "reduce_prod"):
            acc = np.float64 if root.dtype == np.float32 else np.complex128  # accumulate wider
        else:
            acc = root.dtype
        t.reduce = (root.prim, v, np.dtype(acc).str)
        t.stores.append((b.arg(root, write=True), b.address(root, outer_vars), v))
        t.nodes.append(root)
        return [t]
    if k == "scan":
        src = root.inputs[0]
        axis = root.params[0]
        outer_shape = tuple(d for a, d in enumerate(src.shape) if a != axis)
        t = Task("scan", outer_shape, (src.shape[axis],))
        b = TaskBuilder(schedule, group, t, _extents(outer_shape, (src.shape[axis],)))
        it_o = iter(_vars(len(outer_shape)))
        r = ix_.var(len(outer_shape))
        full = tuple(r if a == axis else next(it_o) for a in range(src.ndim))
        v = b.value(src, full)
        t.reduce = ("cumsum", v, root.dtype.str)
        t.stores.append((b.arg(root, write=True), b.address(root, full), v))
        t.nodes.append(root)
        return [t]
    if root.prim == "loop_vjp" and root.params[-1] < 0:
        # a table's gradient: zeros, then the adjoint loop adds every gathered read's cotangent
        init = Task("map", root.shape)
        b = TaskBuilder(schedule, group, init, _extents(root.shape))
        ix = _vars(root.ndim)
        init.stores.append((b.arg(root, write=True), b.address(root, ix),
                            b.emit(Const("const", root.dtype.str, 0))))
        domain = root.inputs[0].shape
        run = Task("map", domain)
        table = root.inputs[layout(root).captured][-1 - root.params[-1]]
        b = TaskBuilder(schedule, group, run, _extents(domain), table=(table, root))
        b.loop(root, _vars(len(domain)))
        run.nodes.append(root)
        return [init, run]
    if k == "scatter":
        x, vals, coords = root.inputs[0], root.inputs[1], root.inputs[2:]
        init = Task("map", root.shape)
        b = TaskBuilder(schedule, group, init, _extents(root.shape))
        ix = _vars(root.ndim)
        init.stores.append((b.arg(root, write=True), b.address(root, ix), b.value(x, ix)))
        upd = Task("rmw", vals.shape, rmw=root.params[0])
        b = TaskBuilder(schedule, group, upd, _extents(vals.shape))
        ix = _vars(vals.ndim)
        cs = [b.value(c, ix) for c in coords]
        dst, ok = b.coordinates(root, cs, f"scatter (x.at[idx].{root.params[0]})", in_range(root))
        if ok and root.size:
            upd.stores.append((b.arg(root, write=True), b.address(root, dst), b.value(vals, ix)))
        upd.nodes.append(root)
        return [init, upd] if upd.stores or upd.checks else [init]
    if k == "concat":
        axis = root.params[0]
        tasks, offset = [], 0
        for inp in root.inputs:
            t = Task("map", inp.shape)
            b = TaskBuilder(schedule, group, t, _extents(inp.shape))
            ix = _vars(inp.ndim)
            dst = tuple(ix_.add(i, ix_.const(offset)) if a == axis else i for a, i in enumerate(ix))
            t.stores.append((b.arg(root, write=True), b.address(root, dst), b.value(inp, ix)))
            t.nodes.append(root)
            offset += inp.shape[axis]
            tasks.append(t)
        return tasks
    if group.base is not None:
        return _region_tasks(schedule, group)
    # elementwise / gather / view / loop: one map over the root's shape storing every stored member
    # (a member is stored at the index its consumers read it: injective, checked by partition)
    t = Task("map", root.shape)
    b = TaskBuilder(schedule, group, t, _extents(root.shape))
    for n in group.stored:
        ix = group.reads[id(n)][0] if n is not root else _vars(root.ndim)
        t.stores.append((b.arg(n, write=True), b.address(n, ix), b.value(n, ix)))
    return [t]


def _region_tasks(schedule: Schedule, group) -> list:
    """A region slice assignment: a map over the region storing the values into the base's
    buffer, in place (partitioning made only such assignments region tasks)."""
    root, base = group.root, group.base
    if not group.in_place:  # (partitioning drops the others before tasks are built)
        raise AssertionError(f"qtrace: a region task that cannot write in place: "
                             f"{root.prim}{list(root.shape)}")
    values = root.inputs[1]
    t = Task("map", values.shape, region=(root, base))
    b = TaskBuilder(schedule, group, t, _extents(values.shape))
    ix = _vars(values.ndim)
    t.stores.append((b.arg(root, write=True), b.address(root, region_index(root, ix)), b.value(values, ix)))
    for n in group.stored:  # members that are outputs: stored where the task reads them
        if n is not root:
            at = group.reads[id(n)][0]
            t.stores.append((b.arg(n, write=True), b.address(n, at), b.value(n, at)))
    t.nodes.append(root)
    return [t]


def _instr_forms(instrs):
    for instr in walk(instrs):
        if instr.kind == "load":
            yield from ix_.affine_forms(instr.ix)
        elif instr.kind == "ix":
            yield from ix_.affine_forms(instr.ix)


def _task_forms(task: Task):
    yield from _instr_forms(task.instrs)
    for _, ix, _ in task.stores:
        yield from ix_.affine_forms(ix)


def _rewrite_instrs(instrs, fn) -> list:
    """``instrs`` with every index expression substituted by ``fn``."""
    def one(i):
        return i._replace(ix=ix_.substitute(i.ix, fn)) if i.kind in ("load", "ix") else i
    return rewrite(instrs, one)


def _rewrite(task: Task, fn) -> None:
    task.instrs = _rewrite_instrs(task.instrs, fn)
    task.stores = [(a, ix_.substitute(ix, fn), v) for a, ix, v in task.stores]


def coalesce(task: Task) -> Task:
    """Merge adjacent loop dimensions that every access walks contiguously; drop size-1 ones.

    Two dimensions ``k, k+1`` (both outer or both inner) merge when every index
    expression has ``coef(k) == coef(k+1) * extent(k+1)``: the pair then addresses memory
    as one longer dimension, so a contiguous elementwise task becomes a single flat loop
    that vectorizes. Rewrites ``task`` in place and returns it.
    """
    groups = [list(task.domain), list(task.inner)]
    names = [list(range(len(task.domain))), list(range(len(task.domain), len(task.domain) + len(task.inner)))]
    zero = {}
    for g in range(2):
        for pos in range(len(groups[g]) - 1, -1, -1):
            if groups[g][pos] == 1 and len(groups[g]) > 1:
                zero[names[g][pos]] = True
                del groups[g][pos], names[g][pos]
    if zero:
        _rewrite(task, lambda k: ix_.ZERO if k in zero else ix_.var(k))
    forms = list(_task_forms(task))
    for g in range(2):
        pos = len(groups[g]) - 2
        while pos >= 0:
            a, b = names[g][pos], names[g][pos + 1]
            e1 = groups[g][pos + 1]
            va, vb = ("v", a), ("v", b)
            if all(f.coef(va) == f.coef(vb) * e1 for f in forms):
                _rewrite(task, lambda k, a=a: ix_.ZERO if k == a else ix_.var(k))
                forms = list(_task_forms(task))
                groups[g][pos + 1] *= groups[g][pos]
                del groups[g][pos], names[g][pos]
            pos -= 1
    if not groups[0]:  # a scalar result: one iteration of a size-1 dimension
        groups[0], names[0] = [1], [None]
    order = names[0] + names[1]
    renum = {old: new for new, old in enumerate(order) if old is not None}
    _rewrite(task, lambda k: ix_.var(renum[k]))
    task.domain, task.inner = tuple(groups[0]), tuple(groups[1])
    return task


def _store_index(task: Task) -> dict:
    """``{arg: (index, ssa)}`` of every buffer a map task stores."""
    return {a: (ix, v) for a, ix, v in task.stores}


def try_merge(a: Task, b: Task, max_cost: int | None = None) -> str | None:
    """Merge map task ``b`` into ``a`` (same launch bounds) if provably safe and the
    merged task costs at most ``max_cost`` (see :func:`instrs_cost`).

    Safe when every buffer ``a`` writes that ``b`` touches is accessed by ``b`` only at
    the index ``a`` writes it (then ``b`` reads the value ``a`` just computed, in the
    same thread: the load is replaced by that value). Returns None when merged, else
    the reason it was not.
    """
    if a.kind != "map" or b.kind != "map":
        return "only elementwise (map) tasks merge"
    if a.has_loops or b.has_loops:
        return "tasks running loops stay separate"
    if a.domain != b.domain:
        return f"launch bounds differ: {a.domain} vs {b.domain}"
    a_args = {id(n): i for i, n in enumerate(a.arg_nodes)}
    written = _store_index(a)
    remap_arg = {}
    for i, n in enumerate(b.arg_nodes):
        remap_arg[i] = a_args.get(id(n))
    for instr in b.instrs:
        if instr.kind == "load":
            ai = remap_arg[instr.arg]
            if ai in written and written[ai][0] != instr.ix:
                return f"reads a buffer the other task writes, at {instr.ix} instead of {written[ai][0]}"
    for arg, _, _ in b.stores:
        if remap_arg[arg] in written:
            return "both tasks write one buffer"
    # merge into copies of a's lists (a refused merge leaves a as it was): b's SSA values,
    # arguments and checks renumbered, and every instruction a already has (the same load,
    # the same operation on the same values) shared rather than repeated
    instrs, args, arg_nodes = list(a.instrs), list(a.args), list(a.arg_nodes)
    seen = {_instr_key(instr): k for k, instr in enumerate(instrs)}

    def arg_of(i: int) -> int:
        ai = remap_arg[i]
        if ai is None:
            ai = remap_arg[i] = len(args)
            args.append(b.args[i])
            arg_nodes.append(b.arg_nodes[i])
        return ai

    ssa = {}
    for j, instr in enumerate(b.instrs):
        op = instr.kind
        if op == "load":
            if remap_arg[instr.arg] in written:  # forward the value a computed at this very index
                ssa[j] = written[remap_arg[instr.arg]][1]
                continue
            new = instr._replace(arg=arg_of(instr.arg), ix=_remap_ssa_in_ix(instr.ix, ssa))
        elif op == "op":
            new = instr._replace(args=tuple(ssa[x] for x in instr.args))
        elif op == "bound":
            new = instr._replace(value=ssa[instr.value], check=instr.check + len(a.checks))
        else:
            new = instr
        key = _instr_key(new)
        k = seen.get(key)
        if k is None:
            k = seen[key] = len(instrs)
            instrs.append(new)
        ssa[j] = k
    stores = [(arg_of(arg), _remap_ssa_in_ix(ix, ssa), ssa[v]) for arg, ix, v in b.stores]
    cost = instrs_cost(instrs)
    if max_cost is not None and cost > max_cost:
        return f"task size limit ({max_cost}; merged: {cost}): bounds compile time"
    a.instrs, a.args, a.arg_nodes = instrs, args, arg_nodes
    a.writes.update(ai for ai, _, _ in stores)
    a.stores.extend(stores)
    a.checks.extend(b.checks)
    a.nodes.extend(b.nodes)
    return None


def _instr_key(instr: tuple):
    """Equal keys: instructions computing the same value (constants compare by repr)."""
    return (instr, repr(instr.value)) if instr.kind == "const" else instr


def _remap_ssa_in_ix(ix, ssa: dict):
    if not any(atom[0] != "v" for atom, _ in ix.terms):
        return ix
    total, acc = ix.const, {}
    for atom, c in ix.terms:
        if atom[0] == "s":
            atom = ("s", ssa[atom[1]])
        elif atom[0] in ix_.NESTED:
            atom = (atom[0], _remap_ssa_in_ix(atom[1], ssa)) + atom[2:]
        acc[atom] = acc.get(atom, 0) + c
    return ix_._make(total, acc)
