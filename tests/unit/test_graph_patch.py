"""Patching a captured CUDA graph's kernel arguments (``qtrace.devices.cuda_driver.Graph``),
with a fake driver (no GPU needed; replays on a GPU are tested in
``tests/gpu/test_cuda_graphs.py``): each argument is attributed to the input whose range
held it at the capture, or to a by-value mark; an argument inside two inputs' ranges (the
same array passed twice) is kept while neither input moves — by-value scalars are still
patched — and the graph refuses (nothing changed) a patch that moves either of them."""

from __future__ import annotations

from qtrace.devices import cuda_driver


class _FakeDriver:
    def __init__(self):
        self.calls = []

    def call(self, name, *args):
        self.calls.append(name)


def _graph(spans: list, marked: tuple, kernel_values: list) -> cuda_driver.Graph:
    g = cuda_driver.Graph.__new__(cuda_driver.Graph)   # (no capture: the parts patch reads)
    g._d, g._exec, g._graph = _FakeDriver(), None, None
    g._spans, g._copies = spans, 0
    g._marks = {cuda_driver.mark(i): i for i in marked}
    g._kernels = [cuda_driver._Kernel(None, values, [g._source(v) for v in values],
                                      cuda_driver._KernelParams()) for values in kernel_values]
    return g


def test_arguments_are_attributed_to_their_input_or_mark_or_both_overlapping():
    a, b = 1 << 20, 1 << 21
    g = _graph([(a, 400), (a, 400), (b, 80), None], (3,), [])
    assert g._source(a + 8) == cuda_driver._Overlap((0, 1))
    assert g._source(b + 16) == (2, 16)
    assert g._source(cuda_driver.mark(3)) == (3, -1)
    assert g._source(12345) is None


def test_overlapping_inputs_stay_while_values_and_other_inputs_move():
    a, b = 1 << 20, 1 << 21
    mark = cuda_driver.mark(3)
    g = _graph([(a, 400), (a, 400), (b, 80), None], (3,), [[a, a + 8, b + 16, mark, 7]])
    kernel = g._kernels[0]
    assert g.patch([None, None, None, None], {3: 99}) == 1    # a scalar: patched
    assert kernel.values == [a, a + 8, b + 16, 99, 7]
    c = 1 << 22
    assert g.patch([None, None, c, None], {3: 99}) == 1       # another input moves: patched
    assert kernel.values == [a, a + 8, c + 16, 99, 7]
    before = list(kernel.values)
    for moved in ([1 << 23, None, None, None], [None, 1 << 23, None, None]):
        assert g.patch(moved, {3: 5}) is None                 # an overlapped input moves: refused
        assert kernel.values == before                        # (nothing changed)
    assert g._d.calls.count("cuGraphExecKernelNodeSetParams") == 2
