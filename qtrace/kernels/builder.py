"""qtrace's IR builder: an ``llvmlite.ir.IRBuilder`` that carries the kernel's lowering.

Scalar helpers and the math library receive only a builder; the target's choices
(:class:`~qtrace.kernels.lowering.Lowering`) and the emission's mutable state reach them
through it, as declared fields — nothing else is hung on a builder.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .lowering import CPU, Lowering


@dataclass
class _Emission:
    """Mutable per-kernel state of an emission (not options)."""

    trig_flags: list | None = None   # i1 values: "the fast trigonometry was exact here"
    rare: bool = False    # emitting the exact re-run of an optimistic pass: float32 sin/cos/tan
                          # are C library calls there (compiled in no time; run rarely)
    outline: bool = False   # transcendentals are calls of functions defined once per module
                            # (qtrace.kernels.outline)


class KernelBuilder(ir.IRBuilder):
    """An IR builder that carries the kernel's :class:`Lowering` and emission state."""

    def __init__(self, block: ir.Block, lowering: Lowering):
        super().__init__(block)
        self.lowering = lowering
        self.emission = _Emission()


def lowering_of(b: ir.IRBuilder) -> Lowering:
    """The lowering a builder emits under (the CPU's for a plain llvmlite builder)."""
    return b.lowering if isinstance(b, KernelBuilder) else CPU
