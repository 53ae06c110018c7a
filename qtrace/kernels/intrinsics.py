"""Declaring LLVM intrinsics and C library functions in a module (once per module)."""

from __future__ import annotations

from llvmlite import ir

from . import interrupt


def suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{suffix(ty.element)}"
    raise TypeError(f"no intrinsic suffix for {ty}")


def declare(module: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    return fn


def intrinsic(b: ir.IRBuilder, base: str, args: list, overloads: list | None = None,
              ret: ir.Type | None = None) -> ir.Value:
    """Call ``llvm.<base>`` overloaded on ``overloads`` types (default: the first arg's type)."""
    overloads = overloads if overloads is not None else [args[0].type]
    ret = ret if ret is not None else overloads[0]
    name = "llvm." + base + "".join("." + suffix(t) for t in overloads)
    return b.call(declare(b.module, name, ret, [a.type for a in args]), args)


def libm(b: ir.IRBuilder, cname: str, args: list) -> ir.Value:
    """Call the C math library function ``cname`` (``f`` suffix for float)."""
    ty = args[0].type
    name = cname + ("f" if isinstance(ty, ir.FloatType) else "")
    return b.call(declare(b.module, name, ty, [ty] * len(args)), args)


def libdevice(b: ir.IRBuilder, cname: str, args: list) -> ir.Value:
    """Call NVIDIA libdevice's ``__nv_<cname>`` (``f`` suffix for float), linked into
    the module by the NVPTX target: float32 math stays in float32 on the GPU."""
    return libm(b, "__nv_" + cname, args)


def aborted(b: ir.IRBuilder) -> ir.Value:
    """IR: whether the process's abort flag (:mod:`qtrace.kernels.interrupt`) is set, an i1."""
    module = b.function.module
    flag = module.globals.get(interrupt.SYMBOL)
    if flag is None:
        flag = ir.GlobalVariable(module, ir.IntType(32), interrupt.SYMBOL)
        flag.linkage = "external"
    # atomic: another thread sets it while the loop runs (a plain load could be hoisted)
    value = b.load_atomic(flag, "monotonic", 4, typ=ir.IntType(32))
    return b.icmp_signed("!=", value, ir.Constant(ir.IntType(32), 0))


def gpu_thread(b: ir.IRBuilder) -> tuple[ir.Value, ir.Value]:
    """IR (NVPTX): ``(this thread's index in the 1-D grid, the grid's thread count)``, i64."""
    i32, i64 = ir.IntType(32), ir.IntType(64)

    def sreg(name):
        return b.zext(b.call(declare(b.module, f"llvm.nvvm.read.ptx.sreg.{name}", i32, []), []), i64)
    return (b.add(b.mul(sreg("ctaid.x"), sreg("ntid.x")), sreg("tid.x")),
            b.mul(sreg("nctaid.x"), sreg("ntid.x")))
