"""Declaring LLVM intrinsics and C library functions in a module (once per module)."""

from __future__ import annotations

from llvmlite import ir


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
