"""Devices: buffers, worker threads and the launch of compiled plans."""

from ..graph import evaluate as _evaluate
from . import runtime

_evaluate.install(runtime)
