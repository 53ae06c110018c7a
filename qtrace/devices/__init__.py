"""Devices: buffers, worker threads and the launch of compiled plans."""

from ..graph import evaluate as _evaluate
from . import cpu_matmul, lib_fft, lib_linalg, lib_numpy, runtime  # noqa: F401 - they register the CPU library functions

_evaluate.install(runtime)
