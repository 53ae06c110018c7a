"""The GPU adstack's float heap rows are claimed per warp, checked in the PTX that LLVM
emits here (no GPU needed; the gradients it gives are tested on a GPU in
``tests/gpu/test_cuda.py``): in the reverse-mode loop task of a per-element ``fori_loop``
the lanes that need a row take the mask of those converged (``activemask``), one lane adds
the warp's row count to the heap counter (one ``atom.global.add``, inside no loop but the
grid-stride one over elements: never in the replay loop, which ran 8x the instructions), and
the rows are handed out with one ``shfl.sync.idx``. Every architecture the NVPTX target
takes compiles it (before sm_75 LLVM's default PTX ISA has no ``activemask``: its
instruction selection aborted the process). Fusion on and off.
"""

from __future__ import annotations

import numpy as np
import pytest
from ptx_probe import loop_spans, ptx

import qtrace as qt
from qtrace.graph.plan import build_plan


@pytest.mark.parametrize("arch", ["sm_61", "sm_70", "sm_80", "sm_90"])
def test_heap_rows_are_claimed_once_per_warp_before_the_loop(arch, fusion, rng):
    n = 1000
    x = qt.asarray(rng.random(n).astype(np.float32))
    k = qt.asarray(rng.integers(0, 9, n))
    g = qt.grad(lambda x: qt.sum(qt.fori_loop(0, k, lambda i, v: qt.sin(v) * 1.1 + 0.1, x)))(x)
    texts = [ptx(t, arch) for t in build_plan((g._node,), fusion).tasks]
    claims = [t for t in texts if "activemask" in t]
    assert len(claims) == 1, [t.count("activemask") for t in texts]
    text = claims[0]
    assert text.count("activemask.b32") == 1
    adds = [i for i, line in enumerate(text.splitlines()) if "atom.global.add" in line]
    assert len(adds) == 1 and text.count("shfl.sync.idx") == 1
    around = sum(a <= adds[0] <= b for a, b in loop_spans(text))
    assert around == 1, f"the claim is inside {around} loops (only the grid-stride loop over elements)"
