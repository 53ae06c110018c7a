"""``qt.jit``: trace a function once per input signature, then replay its compiled plan."""

from __future__ import annotations

import ctypes
import functools
import inspect
import logging
import threading

import numpy as np

from ..config import config
from ..graph import buffers
from ..graph import evaluate as graph_evaluate
from ..graph import native as graph_native
from ..graph import node as graph_node
from ..graph.device import Device
from ..graph.subgraph import Subgraph, cut
from ..stats import bump
from . import dtypes, pytree, views
from .context import ad_level, buffered, is_abstract, record, special, trace_scope, tracing
from .convert import const_node, input_node
from .selections import Selection, refuse
from .tensor import Tensor

log = logging.getLogger("qtrace")


_SIGNATURES: list = []   # id -> ("tensor", shape, dtype, weak, device) | ("scalar", dtype)
_SIGNATURE_IDS: dict = {}
_sig_lock = threading.Lock()


def _signature_id(desc: tuple) -> int:
    i = _SIGNATURE_IDS.get(desc)
    if i is None:
        with _sig_lock:
            i = _SIGNATURE_IDS.get(desc)
            if i is None:
                i = _SIGNATURE_IDS[desc] = len(_SIGNATURES)
                _SIGNATURES.append(desc)
    return i


_SCALAR_IDS = {t: _signature_id(("scalar", dtypes.weak_dtype(t()))) for t in (bool, int, float)}


def _describe(leaf) -> int:
    """The signature entry of one argument leaf (what forces a retrace when it changes).

    Signatures are interned to small ints (cached on the tensor's node), so checking a
    call's signature hashes a tuple of ints.
    """
    if type(leaf) is Tensor or isinstance(leaf, Tensor):
        n = leaf._node
        s = n.sig
        if s is None:
            s = n.sig = _signature_id(("tensor", n.shape, n.dtype, n.weak, n.device))
        return s
    scalar = _SCALAR_IDS.get(type(leaf))
    if scalar is not None:
        return scalar
    if isinstance(leaf, (bool, int, float)):
        return _signature_id(("scalar", dtypes.weak_dtype(leaf)))
    if isinstance(leaf, (np.ndarray, np.generic)):
        dt = np.dtype(leaf.dtype)
        dtypes.check("qt.jit argument", dt)
        # NumPy data goes where new tensors go (qt.config.device), as with qt.asarray
        return _signature_id(("tensor", tuple(leaf.shape), dt, False, Device(config.device)))
    raise TypeError(f"qt.jit: unsupported argument type {type(leaf).__name__}; arguments must be "
                    "pytrees of tensors, NumPy arrays and Python scalars (mark other values static)")


def _call_device(descs) -> Device:
    """Where a call's Python scalars live: with its first tensor argument, else on the
    default device."""
    for d in descs:
        desc = _SIGNATURES[d]
        if desc[0] == "tensor":
            return desc[4]
    return Device(config.device)


def _buffer(leaf, desc: int) -> np.ndarray:
    if type(leaf) is Tensor:
        n = leaf._node
        buf = n.buffer if n.prim == "input" and n.buffer is not None else leaf._materialize()
    elif _SIGNATURES[desc][0] == "scalar":
        return np.array(leaf, dtype=_SIGNATURES[desc][1])
    elif isinstance(leaf, Tensor):
        buf = leaf._materialize()
    else:
        buf = np.asarray(leaf)
        if isinstance(leaf, np.ndarray):  # the caller's memory, read in place
            buffers.borrow(buf)
    if not buf.flags.c_contiguous:
        buf = buf.copy(order="C")  # (NumPy's or CuPy's: a strided view on either device)
    return buf


def _c_contiguous(buf) -> bool:
    """Whether ``buf`` (a NumPy or CuPy array) is C-contiguous; CuPy's own flag is read
    directly (its ``flags`` object costs ~0.4 us, a tenth of a replayed jitted call)."""
    c = getattr(buf, "_c_contiguous", None)
    return buf.flags.c_contiguous if c is None else c


class _Entry:
    __slots__ = ("plan", "bind", "captured", "out_tree", "out_kinds", "out_meta", "flat_tuple",
                 "all_tensors", "mutated", "aliases", "graph", "graphs", "graph_spec")

    def __init__(self):
        self.graphs = None   # its CUDA graphs (qt.jit(..., cuda_graph=True)), made at first use
        self.graph_spec = None   # their compiled replay's spec (_graph_spec), False: none


_new_tensor = object.__new__


class Jitted:
    """A function compiled by :func:`jit`; call it like the original."""

    def __init__(self, fn, static_argnums=(), static_argnames=(), cuda_graph=None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.cuda_graph = cuda_graph
        self.static_argnums = tuple(sorted({static_argnums} if isinstance(static_argnums, int)
                                           else set(static_argnums)))
        self.static_argnames = frozenset({static_argnames} if isinstance(static_argnames, str)
                                         else static_argnames)
        try:
            self._sig = inspect.signature(fn)
        except (TypeError, ValueError):  # pragma: no cover - builtins
            self._sig = None
        self._cache: dict = {}
        self._flat: dict = {}
        self._specs: dict = {}  # signature -> a one-kernel entry as the compiled recorder runs it
        self._subs: dict = {}  # signature -> traced body, for calls inside derivatives
        self._last = None
        self._lock = threading.Lock()

    def _split(self, args, kwargs):
        static = []
        dyn_args = []
        for i, a in enumerate(args):
            if i in self.static_argnums or (i - len(args)) in self.static_argnums:
                static.append((i, a))
            else:
                dyn_args.append(a)
        dyn_kwargs = {}
        for k, v in kwargs.items():
            if k in self.static_argnames:
                static.append((k, v))
            else:
                dyn_kwargs[k] = v
        return tuple(static), tuple(dyn_args), dyn_kwargs

    def __call__(self, *args, **kwargs):
        if self._specs and not kwargs:
            # one kernel on ready host arrays, or a CUDA graph's replay: the compiled
            # recorder runs it (outside traces and derivatives: it checks)
            result = _native_call(self._specs, args)
            if result is not NotImplemented:
                return result
        if special():
            if ad_level():  # inside a derivative: one call node, its plans compiled once
                return self._call_node(args, kwargs)
            if tracing():  # inside another trace: trace through (and fuse across)
                return self.fn(*args, **kwargs)
        if not kwargs and not self.static_argnums:
            # fast path: flat positional arguments, the common shape of a step function
            try:
                descs = []
                for a in args:  # _describe, with a tensor's cached entry read inline
                    d = a._node.sig if type(a) is Tensor else None
                    descs.append(d if d is not None else _describe(a))
                descs = tuple(descs)
            except TypeError:
                pass
            else:
                entry = self._flat.get(descs)
                if entry is not None:
                    bump("cache_hits_memory")
                    result = self._run(entry, args, descs)
                    if entry.graphs is not None and descs not in self._specs:
                        if entry.graph_spec is None:
                            entry.graph_spec = _graph_spec(entry, self.cuda_graph is True) or False
                        if entry.graph_spec:   # (the next calls: the compiled replay first)
                            self._specs[descs] = entry.graph_spec
                    return result
                result = self._call(args, kwargs)
                tree = pytree.flatten((args, {}))[1]
                # (missing if the pytree library changed during the call: JAX imported by it)
                entry = self._cache.get((tree, descs, ()))
                if entry is not None:
                    self._flat[descs] = entry
                    spec = _native_spec(entry, tree) if _native_call is not None else None
                    if spec is not None:
                        self._specs[descs] = spec
                return result
        return self._call(args, kwargs)

    def graph_paths(self) -> list:
        """For each compiled signature whose calls ran with CUDA graphs on (on a GPU):
        None where they replay graphs, else why they run launch by launch."""
        return [e.graphs.why_not() for e in list(self._cache.values()) if e.graphs is not None]

    def _call(self, args, kwargs):
        if kwargs or self.static_argnums:
            static, dyn_args, dyn_kwargs = self._split(args, kwargs)
        else:
            static, dyn_args, dyn_kwargs = (), args, {}
        leaves, tree = pytree.flatten((dyn_args, dyn_kwargs))
        descs = tuple(_describe(leaf) for leaf in leaves)
        try:
            sig = (tree, descs, static)
            entry = self._cache.get(sig)
        except TypeError:
            raise TypeError(f"qt.jit({self.__name__}): static arguments must be hashable, got "
                            f"{[type(v).__name__ for _, v in static]}") from None
        if entry is None:
            with self._lock:
                entry = self._cache.get(sig)
                if entry is None:
                    entry = self._trace(sig, static, dyn_args, dyn_kwargs, tree, descs)
                    self._cache[sig] = entry
        else:
            bump("cache_hits_memory")
        return self._run(entry, leaves, descs)

    def _run(self, entry: _Entry, leaves, descs):
        bufs = []
        for src in entry.bind:
            if src >= 0:
                leaf = leaves[src]
                if type(leaf) is Tensor:  # _buffer's common case, inline
                    n = leaf._node
                    buf = n.buffer
                    if buf is None or n.prim != "input" or not (
                            buf.flags.c_contiguous if type(buf) is np.ndarray else _c_contiguous(buf)):
                        buf = _buffer(leaf, descs[src])
                else:
                    buf = _buffer(leaf, descs[src])
                bufs.append(buf)
            else:
                bufs.append(entry.captured[-src - 1])
        plan = entry.plan
        if plan is None:
            outs = []
        elif plan.rt.kind != "cpu" and (config.cuda_graphs if self.cuda_graph is None else self.cuda_graph):
            runner = entry.graphs
            if runner is None:
                with self._lock:   # (one runner per signature, whichever thread comes first)
                    runner = entry.graphs
                    if runner is None:
                        runner = entry.graphs = graph_evaluate.graph_runner(plan)
            outs = runner.run(bufs, entry.graph)
        else:
            outs = plan.run(bufs, entry.graph)
        if entry.mutated:
            return self._run_writing(entry, leaves, outs)
        results = []
        if entry.all_tensors:
            leaf_like = graph_node.leaf_like
            for meta, buf in zip(entry.out_meta, outs):
                t = _new_tensor(Tensor)  # a leaf: nothing for Tensor.__init__ to note
                t._node = leaf_like(meta, buf)
                t._view = None
                results.append(t)
        else:
            it = iter(outs)
            for kind, meta in zip(entry.out_kinds, entry.out_meta):
                if kind == "tensor":
                    results.append(Tensor(graph_node.leaf_like(meta, next(it))))
                else:
                    results.append(meta)
        if entry.flat_tuple:
            return tuple(results)
        return pytree.unflatten(entry.out_tree, results)

    def _run_writing(self, entry: _Entry, leaves, outs):
        """The end of a call that wrote into its arguments: the writes land in the caller's
        arrays (tensors and NumPy arrays, as NumPy would have written them), and a result
        that is such an argument is the caller's object itself."""
        n_user = len(outs) - len(entry.mutated)
        for k, (arg, template) in enumerate(entry.mutated):
            leaf, buf = leaves[arg], outs[n_user + k]
            for other, obj in enumerate(leaves):
                if other != arg and _shares_memory(obj, leaf):
                    raise ValueError(
                        f"qt.jit({self.__name__}): arguments {arg} and {other} are the same array (or "
                        f"views of one array) and the function writes into argument {arg}; the trace "
                        "treated them as distinct. Pass a copy of one of them.")
            if isinstance(leaf, Tensor):
                views.assign(leaf, graph_node.leaf_like(template, buf))
            elif isinstance(leaf, np.ndarray):
                # NumPy's in-place semantics for a NumPy argument (from a GPU: copied back)
                np.copyto(leaf, buf if isinstance(buf, np.ndarray) else graph_evaluate.to_host(buf))
                buffers.bump(leaf)
        results, it = [], iter(outs[:n_user])
        for kind, meta, alias in zip(entry.out_kinds, entry.out_meta, entry.aliases):
            if kind != "tensor":
                results.append(meta)
                continue
            buf = next(it)
            caller = leaves[alias] if alias >= 0 else None
            results.append(caller if isinstance(caller, Tensor) else Tensor(graph_node.leaf_like(meta, buf)))
        if entry.flat_tuple:
            return tuple(results)
        return pytree.unflatten(entry.out_tree, results)

    def _trace(self, sig, static, dyn_args, dyn_kwargs, tree, descs) -> _Entry:
        if config.log_recompiles and self._last is not None:
            log.warning("qt.jit(%s): retracing because %s", self.__name__, _why(self._last, sig))
        self._last = sig
        bump("traces")
        out_leaves, out_tree, placeholders, originals = self._trace_graph(static, tree, descs)
        entry = _Entry()
        self._finish_trace(entry, out_leaves, out_tree, placeholders, originals)
        return entry

    def entry_for(self, specs: list, device) -> _Entry:
        """The compiled call for positional array arguments of ``specs`` (``(shape,
        dtype)`` each) placed on ``device``: traced and compiled on first use, as such a call
        would be (what a native XLA handler binds to)."""
        descs = tuple(_signature_id(("tensor", tuple(shape), np.dtype(dt), False, Device(device)))
                      for shape, dt in specs)
        tree = pytree.flatten((tuple(range(len(specs))), {}))[1]
        sig = (tree, descs, ())
        with self._lock:
            entry = self._cache.get(sig)
            if entry is None:
                entry = self._cache[sig] = self._trace(sig, (), (), {}, tree, descs)
        return entry

    def signature(self, args, kwargs):
        """``(static, tree, descs)`` of a call: what a trace is keyed by."""
        static, dyn_args, dyn_kwargs = self._split(args, kwargs)
        leaves, tree = pytree.flatten((dyn_args, dyn_kwargs))
        return static, tree, tuple(_describe(leaf) for leaf in leaves)

    def output_specs(self, *args, **kwargs) -> list:
        """``(shape, dtype)`` of every output leaf for a call with ``args`` (arrays stand
        for their shapes and dtypes), found by tracing on placeholders: nothing runs.

        Example:
            >>> import numpy as np, qtrace as qt
            >>> qt.jit(lambda x: (x.sum(), x * 2)).output_specs(np.ones((2, 3), np.float32))
            [((), dtype('float32')), ((2, 3), dtype('float32'))]
        """
        out_leaves, _, _, _ = self._trace_graph(*self.signature(args, kwargs))
        specs = []
        for leaf in out_leaves:
            arr = leaf if isinstance(leaf, Tensor) else np.asarray(leaf)
            specs.append((tuple(arr.shape), np.dtype(arr.dtype)))
        return specs

    def _trace_graph(self, static, tree, descs):
        """Run the function on placeholders; its output leaves, structure and placeholders."""
        placeholders = []
        here = _call_device(descs)
        for desc in (_SIGNATURES[d] for d in descs):
            if desc[0] == "scalar":   # a Python scalar lives where the call's tensors do
                ph = graph_node.make_input((), desc[1], here, buffer=None, weak=True)
            else:
                _, shape, dt, weak, dev = desc
                ph = graph_node.make_input(shape, dt, dev, buffer=None, weak=weak)
            placeholders.append(Tensor(ph))
        targs, tkwargs = pytree.unflatten(tree, placeholders)
        full_args = list(targs)
        for i, v in static:
            if isinstance(i, int):
                full_args.insert(i if i >= 0 else len(full_args) + 1 + i, v)
        call_kwargs = dict(tkwargs)
        call_kwargs.update({k: v for k, v in static if isinstance(k, str)})
        originals = [p._node for p in placeholders]
        with trace_scope():
            out = self.fn(*full_args, **call_kwargs)
        out_leaves, out_tree = pytree.flatten(out)
        if any(type(leaf) is Selection for leaf in out_leaves):
            raise refuse("a qt.jit function's result")
        return out_leaves, out_tree, placeholders, originals

    def _finish_trace(self, entry, out_leaves, out_tree, placeholders, originals):
        entry.out_tree = out_tree
        entry.flat_tuple = pytree.is_flat_tuple(out_tree, len(out_leaves))
        entry.all_tensors = all(isinstance(leaf, (Tensor, np.ndarray)) for leaf in out_leaves)
        entry.out_kinds, entry.out_meta = [], []
        nodes = []
        for leaf in out_leaves:
            if isinstance(leaf, np.ndarray):
                leaf = Tensor(input_node(leaf, "jit output"))
            if isinstance(leaf, Tensor):
                n = leaf._node
                nodes.append(n)
                entry.out_kinds.append("tensor")
                entry.out_meta.append(_template(n))
            else:
                entry.out_kinds.append("python")
                entry.out_meta.append(leaf)
        written = _writes(placeholders, originals)
        entry.mutated = [(i, _template(n)) for i, n in written]
        final = {id(n): i for i, n in written}
        entry.aliases = [final.get(id(n), -1) for n in nodes]
        nodes += [n for _, n in written]
        if not nodes:
            entry.plan, entry.bind, entry.captured = None, [], []
            return
        key, plan_leaves = graph_node.graph_key(tuple(nodes))
        entry.plan = graph_evaluate.plan_for(tuple(nodes), key)
        entry.graph = tuple(nodes)   # (the plan may be shared with another graph of this structure)
        where = {id(n): i for i, n in enumerate(originals)}
        entry.bind, entry.captured = [], []
        for leaf in plan_leaves:
            if id(leaf) in where:
                entry.bind.append(where[id(leaf)])
            else:
                if leaf.buffer is None:
                    raise RuntimeError("qt.jit: a traced value escaped from another trace")
                entry.captured.append(leaf.buffer)
                entry.bind.append(-len(entry.captured))

    def _call_node(self, args, kwargs):
        static, dyn_args, dyn_kwargs = self._split(args, kwargs)
        leaves, tree = pytree.flatten((dyn_args, dyn_kwargs))
        descs = tuple(_describe(leaf) for leaf in leaves)
        key = (tree, descs, static)
        entry = self._subs.get(key)
        if entry is None:
            bump("traces")
            out_leaves, out_tree, placeholders, originals = self._trace_graph(static, tree, descs)
            roles = {id(n): ("arg", i) for i, n in enumerate(originals)}
            outs = [leaf._node if isinstance(leaf, Tensor) else None for leaf in out_leaves]
            written = _writes(placeholders, originals)
            nodes = tuple(n for n in outs if n is not None) + tuple(n for _, n in written)
            cut_outs, all_roles, captured = cut(nodes, roles)
            entry = (Subgraph(cut_outs, all_roles), captured, out_tree, out_leaves, [i for i, _ in written])
            self._subs[key] = entry
        sub, captured, out_tree, out_leaves, written = entry
        inputs = []
        here = _call_device(descs)
        for leaf, desc in zip(leaves, (_SIGNATURES[d] for d in descs)):
            if isinstance(leaf, Tensor):
                inputs.append(leaf._node)
            elif desc[0] == "scalar":
                inputs.append(const_node(leaf, desc[1], here, weak=True))
            else:
                inputs.append(input_node(np.ascontiguousarray(leaf), "jit argument"))
        inputs = tuple(buffered(n) for n in inputs) + tuple(buffered(n) for n in captured)
        results, k = [], 0
        for leaf in out_leaves:
            if isinstance(leaf, Tensor):
                o = sub.outputs[k]
                results.append(Tensor(record("call", inputs, (sub, len(leaves), k), o.shape, o.dtype,
                                             weak=o.weak)))
                k += 1
            else:
                results.append(leaf)
        for arg in written:  # writes into arguments reach the caller's tensors
            o = sub.outputs[k]
            if not isinstance(leaves[arg], Tensor):
                raise TypeError(f"qt.jit({self.__name__}): inside a derivative, a jitted function may "
                                f"write only into qt.Tensor arguments (argument {arg} is "
                                f"{type(leaves[arg]).__name__})")
            views.assign(leaves[arg], record("call", inputs, (sub, len(leaves), k), o.shape, o.dtype,
                                             weak=o.weak))
            k += 1
        return pytree.unflatten(out_tree, results)

    def clear_cache(self) -> None:
        """Forget every traced signature (the next call traces again)."""
        with self._lock:
            self._cache.clear()
            self._flat.clear()
            self._specs.clear()
            self._last = None


_native_call = getattr(graph_native.module(), "jit_call", None)


def _native_spec(entry: _Entry, tree) -> tuple | None:
    """``entry`` as the compiled recorder replays it (``jit_call``; the layout is described
    in ``qtrace/graph/_native.c``), or None when it is not a call of one small kernel on
    flat tensor arguments whose results are fresh arrays, returned as a tuple or alone."""
    plan = entry.plan
    fast = getattr(plan, "fast", None)
    if fast is None or entry.mutated or not entry.all_tensors or any(k != "tensor" for k in entry.out_kinds):
        return None
    fn, extent, _pack, slots, allocs, outs, _extra = fast
    if entry.flat_tuple:
        mode = 0
    elif len(outs) == 1 and pytree.unflatten(entry.out_tree, [_ONE]) is _ONE:
        mode = 1
    else:
        return None
    made = {s: j for j, (s, *_) in enumerate(allocs)}
    if any(v not in made for v in outs):   # a result that is an argument's own buffer
        return None
    sources = []
    for s in slots:
        if s >= plan.n_leaves:
            sources.append(-1 - made[s])
            continue
        src = entry.bind[s]
        if src < 0:  # a constant the trace captured: passed as it is, if it can be
            src = entry.captured[-src - 1]
            if type(src) is not np.ndarray or not src.flags.c_contiguous:
                return None
        sources.append(src)
    return (ctypes.cast(fn, ctypes.c_void_p).value, extent, tuple(sources),
            tuple((shape, dtype, small) for _, shape, dtype, small in allocs),
            tuple(made[v] for v in outs), tuple(entry.out_meta), mode)


_ONE = object()


def _graph_spec(entry: _Entry, explicit: bool) -> tuple | None:
    """``entry``'s CUDA graph runner as the compiled recorder replays it (``graph_call``
    in ``qtrace/graph/_native.c``, which describes the layout), or None where it cannot:
    no compiled replay bound, calls the runner refuses, results that are not fresh
    tensors returned as a tuple or alone, or writes into arguments. ``explicit``: graphs
    asked for by ``cuda_graph=True`` (else only while ``qt.config.cuda_graphs``)."""
    runner = entry.graphs
    if (runner.native is None or runner.why_not() is not None or entry.mutated
            or not entry.all_tensors or any(k != "tensor" for k in entry.out_kinds)):
        return None
    if entry.flat_tuple:
        mode = 0
    elif len(entry.out_meta) == 1 and pytree.unflatten(entry.out_tree, [_ONE]) is _ONE:
        mode = 1
    else:
        return None
    return (runner.fast, runner.lock, tuple(s if s >= 0 else -1 for s in entry.bind),
            tuple(entry.out_meta), mode, explicit, "cuda_graph", entry.plan.rt.index)


def _template(n) -> graph_node.Node:
    """A placeholder leaf with ``n``'s signature, for the results holding ``n``'s values."""
    template = graph_node.make_input(n.shape, n.dtype, n.device, buffer=None, weak=n.weak)
    # so passing the result back in needs no signature lookup
    template.sig = _signature_id(("tensor", n.shape, n.dtype, n.weak, n.device))
    return template


def _writes(placeholders, originals) -> list:
    """``(argument index, its final value)`` of every argument the traced function wrote into."""
    out = []
    for i, (p, orig) in enumerate(zip(placeholders, originals)):
        final = p._view[0].node if p._view is not None else p._node
        if final is not orig:
            out.append((i, final))
    return out


def _shares_memory(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a._view is not None and b._view is not None and a._view[0] is b._view[0]
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.shares_memory(a, b)
    return False


def _why(old, new) -> str:
    otree, odesc, ostatic = old
    ntree, ndesc, nstatic = new
    if otree != ntree:
        return "the structure of the arguments changed"
    if ostatic != nstatic:
        return f"a static argument changed: {ostatic} -> {nstatic}"
    if len(odesc) != len(ndesc):
        return "the number of array arguments changed"
    for i, (a, b) in enumerate(zip(odesc, ndesc)):
        a, b = _SIGNATURES[a], _SIGNATURES[b]
        if a != b:
            fields = ("kind", "shape", "dtype", "weak type", "device")
            diffs = [f"{f} {x} -> {y}" for f, x, y in zip(fields, a, b) if x != y]
            return f"argument leaf {i} changed: {', '.join(diffs)}"
    return "an unknown part of the signature changed"


def jit(fn=None, *, static_argnums=(), static_argnames=(), cuda_graph=None):
    """Compile ``fn``: trace it once per input signature and replay the compiled plan.

    Arguments and results are pytrees of tensors, NumPy arrays and Python scalars.
    Python scalars in non-static positions are traced as weakly typed 0-d values, so
    changing their value does not retrace. Python side effects run only while tracing.

    ``cuda_graph=True`` (default: ``qt.config.cuda_graphs``): on a GPU, a call replays
    its plan from a captured CUDA graph, one launch for all its kernels, writing results
    the graph owns (never one the caller still holds); calls a graph cannot take run as
    usual (:mod:`qtrace.devices.cuda_graphs` says which, ``graph_paths`` why).

    Example:
        >>> import qtrace as qt
        >>> @qt.jit
        ... def step(x, v, dt):
        ...     v = v - 4.0 * x * dt
        ...     return x + dt * v, v
        >>> x, v = step(qt.ones(3), qt.zeros(3), 0.1)
        >>> [round(t, 2) for t in x.tolist()]
        [0.96, 0.96, 0.96]
    """
    if fn is None:
        return lambda f: Jitted(f, static_argnums, static_argnames, cuda_graph)
    return Jitted(fn, static_argnums, static_argnames, cuda_graph)


def is_traced(t) -> bool:
    return isinstance(t, Tensor) and is_abstract(t._node)
