"""Transcendental functions emitted once per module, as internal functions kernels call.

Inline, every call site of ``sin``/``tanh``/... puts the function's whole body (100-300
instructions of straight-line IR) into its loop, and LLVM optimises, vectorizes and
emits that body once per call site and per copy of the loop (the vector body, the scalar
remainder, the exact re-run of :mod:`qtrace.kernels.fastmath`): B4's step, 14
transcendental call sites, spent ~220 ms in LLVM. Outlined, a kernel calls
``qt_math_<name>_<type>``, an internal function defined once per module
(:func:`call`); when the module is compiled, :func:`finish` gives each such function its
vector variants, which LLVM's loop vectorizer substitutes for the scalar call (the
``vector-function-abi-variant`` attribute, LLVM's vector function ABI):

* one real variant at the host's full width for the function's type: a loop over its
  lanes that calls the scalar function inline (an ``alwaysinline`` call site), vectorized
  at that width: the same IR, hence the same results bit for bit, as the inline code;
* cheap wrappers at the narrower widths a kernel's loop may be vectorized at (a loop
  whose widest type is wider than the function's): they repeat their lanes up to the
  full width. (With wider wrappers, LLVM vectorized B4's loop 64 lanes wide.)

The scalar function is ``noinline`` (it must stay a call for the vectorizer to replace)
and serves the loops that do not vectorize (scalar remainders, the exact re-run). All use
the C calling convention: with ``fastcc`` vector variants, a kernel vectorized with masked
gathers around the calls crashed (a clobbered pointer register; LLVM 22, AVX-512).

When to outline (measured, one thread, float32 and float64): a call costs run time where
the kernel's transcendentals are independent of each other — inline, the loop's body
interleaves their long dependency chains; called, each runs alone: 8-16 independent
``exp``/``sin``/``tanh`` ran 15-70% slower outlined (B1's chain ~15%), though they
compiled up to 2x faster. Where each call feeds the next (B4's step, an MLP's ``tanh``
layers), there is nothing to interleave: outlined, they ran as fast or faster (B4: 44 ->
31 ms per 2e6 elements) and compiled 1.5-2.5x faster. So a kernel outlines only if its
calls form chains (:func:`chained`), and :func:`finish` keeps a function called only
where the module calls it at least :data:`MIN_CALLS` times (once, outlined, it would
compile no faster); the others are marked ``alwaysinline``, the inline code of before.

Only kernels whose lowering has ``outline_math`` (the CPU's) outline; the GPU keeps
libdevice.
"""

from __future__ import annotations

import weakref

from llvmlite import ir

from .builder import KernelBuilder
from .intrinsics import suffix
from .loop_hints import loop_properties
from .mathlib import SUPPORTED

PREFIX = "qt_math_"
MIN_CALLS = 2          # call sites of a function in a module from which it stays outlined
MAX_PARALLEL = 1.5     # transcendental calls per step of their longest chain, at most
I32, I64 = ir.IntType(32), ir.IntType(64)

_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> {function: calls}


def chained(task) -> bool:
    """Whether ``task``'s transcendental calls form chains: at most :data:`MAX_PARALLEL`
    per call on the longest path of calls through its data flow (so outlining them loses
    no parallelism between them; see the module doc). Not for tasks with loops."""
    if task.has_loops:
        return False
    depth, calls, longest = [], 0, 0
    for instr in task.instrs:
        d = 0
        if instr.kind == "op":
            d = max((depth[a] for a in instr.args), default=0)
            if instr.prim in SUPPORTED:
                d, calls = d + 1, calls + 1
                longest = max(longest, d)
        depth.append(d)
    return calls <= MAX_PARALLEL * longest


class _Attributes(ir.values.FunctionAttributes):
    """Function attributes that also take LLVM string attributes (``"key"="value"``),
    which llvmlite's set of known attributes lacks."""

    def add(self, name):
        if name.startswith('"'):
            set.add(self, name)
        else:
            super().add(name)


def call(b: KernelBuilder, key: str, args: list, emit) -> ir.Value:
    """``emit(builder, args)`` (straight-line scalar code: a math function's body) as a
    call of the module's internal function for ``key`` and the arguments' type, defined
    on first use. All arguments and the result have one floating-point type."""
    module = b.module
    name = f"{PREFIX}{key}_{suffix(args[0].type)}"
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(args[0].type, [a.type for a in args]), name=name)
        fn.linkage = "internal"
        fn.attributes = _Attributes(("nounwind", "readnone"))
        body = KernelBuilder(fn.append_basic_block("entry"), b.lowering.scalar_code(False))
        body.ret(emit(body, list(fn.args)))
    sites = _sites.setdefault(module, {})
    # the exact re-run of a fast pass (emission.rare) is a scalar loop: an inline copy
    # there costs little, so its calls do not count
    sites[fn] = sites.get(fn, 0) + (not b.emission.rare)
    return b.call(fn, args)


def finish(module: ir.Module, vector_bits: int) -> None:
    """Settle the module's outlined functions before it is compiled (once; later calls do
    nothing): inline those with fewer than :data:`MIN_CALLS` call sites, keep the others
    called and give each its vector variants for ``vector_bits``-wide registers."""
    sites = _sites.pop(module, None)
    kept = []
    for fn, calls in (sites or {}).items():
        if calls < MIN_CALLS:
            fn.attributes.add("alwaysinline")
        else:
            fn.attributes.add("noinline")
            kept += _variants(module, fn, vector_bits)
    if kept:
        # the variants are only named in attributes until the loop vectorizer calls them:
        # listed here, the optimizer keeps them until then
        used = ir.GlobalVariable(module, ir.ArrayType(ir.PointerType(), len(kept)), "llvm.compiler.used")
        used.linkage, used.section = "appending", "llvm.metadata"
        used.initializer = ir.Constant(used.value_type, kept)


def _variants(module: ir.Module, fn: ir.Function, vector_bits: int) -> list:
    """Define ``fn``'s vector variants and name them in its VFABI attribute; the list."""
    ty = fn.function_type.return_type
    full = max(vector_bits // (32 if isinstance(ty, ir.FloatType) else 64), 2)
    real = _real(module, fn, full)
    variants = {full: real}
    for width in (full // 4, full // 2):
        if width >= 2:
            variants[width] = _wrapper(module, fn, real, full, width)
    params = "v" * len(fn.args)
    names = ",".join(f"_ZGV_LLVM_N{w}{params}_{fn.name}({v.name})" for w, v in sorted(variants.items()))
    fn.attributes.add(f'"vector-function-abi-variant"="{names}"')
    return list(variants.values())


def _vector_function(module: ir.Module, fn: ir.Function, width: int) -> ir.Function:
    ty = ir.VectorType(fn.function_type.return_type, width)
    v = ir.Function(module, ir.FunctionType(ty, [ty] * len(fn.args)), name=f"{fn.name}_v{width}")
    v.linkage = "internal"
    v.attributes.add("nounwind")
    v.attributes.add("readnone")
    return v


def _real(module: ir.Module, fn: ir.Function, width: int) -> ir.Function:
    """``fn`` on ``width`` lanes: a loop over them, vectorized at ``width`` (it runs once).

    ``noinline``: inlined into a wrapper, it would be narrowed to the wrapper's lanes and
    compiled once more there."""
    v = _vector_function(module, fn, width)
    v.attributes.add("noinline")
    b = ir.IRBuilder(v.append_basic_block("entry"))
    ty = fn.function_type.return_type
    lanes = ir.ArrayType(ty, width)
    arrays = []
    for arg in v.args:   # a vector in memory is its lanes' array
        arrays.append(b.alloca(arg.type))
        b.store(arg, arrays[-1])
    out = b.alloca(lanes)
    pre = b.block
    loop = v.append_basic_block("lane")
    done = v.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), pre)

    args = [b.load(b.gep(a, [i], inbounds=True, source_etype=ty), typ=ty) for a in arrays]
    # alwaysinline at the call site overrides the function's noinline (here only)
    result = b.call(fn, args, attrs=("alwaysinline",))
    b.store(result, b.gep(out, [ir.Constant(I64, 0), i], inbounds=True))
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, loop)
    back = b.cbranch(b.icmp_unsigned("<", nxt, ir.Constant(I64, width)), loop, done)
    back.set_metadata("llvm.loop", loop_properties(module, {"llvm.loop.vectorize.width": width}))
    b.position_at_end(done)
    b.ret(b.load(out, typ=v.function_type.return_type))
    return v


def _lanes(b: ir.IRBuilder, x: ir.Value, indices) -> ir.Value:
    """The lanes ``indices`` of vector ``x``, as a vector."""
    return b.shuffle_vector(x, x, ir.Constant(ir.VectorType(I32, len(indices)), list(indices)))


def _wrapper(module: ir.Module, fn: ir.Function, real: ir.Function, full: int, width: int) -> ir.Function:
    """``fn`` on ``width < full`` lanes by a call of ``real`` (``full`` lanes): the lanes
    repeated up to the full width, the first ``width`` of the result kept."""
    v = _vector_function(module, fn, width)
    b = ir.IRBuilder(v.append_basic_block("entry"))
    r = b.call(real, [_lanes(b, a, [k % width for k in range(full)]) for a in v.args])
    b.ret(_lanes(b, r, range(width)))
    return v
