"""Helpers for tests that read the PTX LLVM emits here for a task (no GPU needed)."""

from __future__ import annotations

import re

from qtrace.kernels import llvm_nvptx
from qtrace.kernels.target import CudaTarget


class Offline(CudaTarget):
    """The NVPTX target for ``arch`` without a device."""

    def __init__(self, arch: str):
        self.arch = arch


def ptx(task, arch: str = "sm_90") -> str:
    """The PTX of ``task``'s kernel ``k`` for ``arch``."""
    target = Offline(arch)
    module = target.new_module("probe")
    target.lower(task, module, "k", True)
    return llvm_nvptx.compile_module(module, ["k"], arch).decode()


def loop_spans(text: str) -> list[tuple[int, int]]:
    """Line spans of the loops of PTX ``text``: a label and the last branch back to it."""
    lines = text.splitlines()
    spans = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\$L__BB\d+_\d+):", line)
        if m:
            branch = re.compile(rf"bra(\.uni)?\s+{re.escape(m[1])};")
            back = [j for j in range(i, len(lines)) if branch.search(lines[j])]
            if back:
                spans.append((i, back[-1]))
    return spans
