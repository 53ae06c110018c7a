"""Scalars by value in the GPU's kernel entry, checked in the PTX that LLVM emits here (no
GPU needed): the 0-d arguments a task only reads (``qtrace.kernels.lowering.by_value_args``)
get an 8-byte value parameter each after the pointers (``llvm_nvptx.grid_entry``), the
value ends in a register (no local memory: the copy the body reads is promoted), and
nothing else changes (written 0-d results, complex values, the CPU's kernels). Which value
a launch passes is tested on a GPU (``tests/gpu/test_cuda.py``). Fusion on and off.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import qtrace as qt
from qtrace.graph.plan import build_plan
from qtrace.kernels import codegen, llvm_nvptx
from qtrace.kernels.lowering import CPU, NVPTX, by_value_args

ARCH = "sm_80"


def _ptx(task) -> str:
    module = llvm_nvptx.new_module("probe", ARCH)
    body = codegen.lower_task(task, module, "k" + llvm_nvptx.BODY_SUFFIX, True, NVPTX)
    lockstep = (codegen.lower_lockstep(task, module, "k" + llvm_nvptx.LOCKSTEP_SUFFIX, True, NVPTX,
                                       llvm_nvptx.VECTOR) if codegen.runs_in_lockstep(task) else None)
    llvm_nvptx.grid_entry(module, body, "k", len(task.args), lockstep,
                          by_value=by_value_args(task, NVPTX))
    return llvm_nvptx.compile_module(module, ["k"], ARCH).decode()


def _program(kind: str, x, s):
    if kind == "select":
        return qt.where(s, x, -x)
    if kind == "sum":
        return qt.sum(x * s)
    return x * s + s


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("dtype, kind", [
    (np.float32, "affine"), (np.float64, "affine"), (np.int32, "affine"), (np.int8, "affine"),
    (np.uint16, "affine"), (np.bool_, "select"), (np.float32, "sum"), (np.complex64, "affine")])
def test_read_only_scalars_become_value_parameters_held_in_registers(dtype, kind, fused, rng):
    x = qt.asarray(rng.standard_normal(1000).astype(np.float32))
    value = rng.standard_normal() * 5 if np.dtype(dtype).kind in "fc" else rng.integers(1, 9)
    s = qt.asarray(np.asarray(value, dtype))
    spec = build_plan((_program(kind, x, s)._node,), fused)
    found = 0
    for task in spec.tasks:
        chosen = by_value_args(task, NVPTX)
        expect = [(i, n.dtype.itemsize) for i, n in enumerate(task.arg_nodes)
                  if n.shape == () and i not in task.writes and n.dtype.kind in "biuf"]
        assert list(chosen) == expect and by_value_args(task, CPU) == ()
        found += len(chosen)
        ptx = _ptx(task)
        entry = ptx[ptx.index(".entry k("):]
        entry = entry[:entry.index(")")]
        params = re.findall(r"\.param \.u64 (\.ptr [^k]*)?k_param_(\d+)", entry)
        # pointers, values, then status and scratch (pointers), stride and extent
        assert len(params) == len(task.args) + len(chosen) + 4, entry
        values = [int(i) for ptr, i in params if not ptr]
        n = len(task.args)
        assert values == [*range(n, n + len(chosen)), n + len(chosen) + 2, n + len(chosen) + 3], entry
        assert ".local" not in ptx and "local_depot" not in ptx
    # the scalar is read by value by the tasks reading it (complex: never; unfused, several
    # tasks read it; a written 0-d result is never by value: ``expect``)
    assert (found > 0) == (np.dtype(dtype).kind != "c")


def test_launch_parameters_pass_values_and_refuse_a_host_array_elsewhere():
    """``launch_parameters``: device slots get their address, a by-value host scalar 0 and
    its bytes after the pointers, device memory in a by-value slot 0 there (the kernel reads
    it); a host array in a slot not passed by value is an error naming it, never a null
    pointer handed to a kernel."""
    from qtrace.devices.registry import launch_parameters

    class Device:   # (stands for a device buffer: anything but a NumPy array)
        def __init__(self, ptr):
            self.ptr = ptr
    dt, dev, big = np.array(0.25), Device(4096), Device(8192)
    bufs = [dev, dt, big, np.zeros(3, np.float32)]
    got = launch_parameters(bufs, [0, 1, 2], (1, 2), lambda b: b.ptr)
    assert got == [4096, 0, 8192, int.from_bytes(dt.tobytes(), "little"), 0]
    with pytest.raises(RuntimeError, match=r"argument 1 \(float32\[3\]\).*never uploaded"):
        launch_parameters(bufs, [0, 3], (), lambda b: b.ptr)
