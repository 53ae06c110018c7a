"""qtrace: NumPy-like arrays recorded into a dataflow graph, fused and JIT-compiled.

Operations on :class:`qt.Tensor` are recorded, not run; values are computed (the graph
partitioned into range tasks, fused, compiled through LLVM, cached by content hash)
when they are needed.

Example:
    >>> import qtrace as qt
    >>> x = qt.linspace(0.0, 1.0, 5)
    >>> (qt.sin(x) ** 2 + qt.cos(x) ** 2).tolist()
    [1.0, 1.0, 1.0, 1.0, 1.0]
"""

from . import devices as _devices  # noqa: F401 - installs the runtime
from .ad import grad, value_and_grad, vjp
from .config import config
from .errors import TracerError
from .graph.device import Device
from .stats import reset_stats, stats
from .tracer import Tensor
from .tracer.convert import astype
from .tracer.creation import (
                              arange,
                              array,
                              asarray,
                              copy,
                              empty,
                              empty_like,
                              from_dlpack,
                              full,
                              full_like,
                              linspace,
                              ones,
                              ones_like,
                              zeros,
                              zeros_like,
)
from .tracer.dtypes import (
                              bool_,
                              float32,
                              float64,
                              int8,
                              int16,
                              int32,
                              int64,
                              uint8,
                              uint16,
                              uint32,
                              uint64,
)
from .tracer.elementwise import *  # noqa: F403 - every elementwise function by its NumPy name
from .tracer.elementwise import FUNCTIONS as _ELEMENTWISE
from .tracer.elementwise import absolute, around, clip, conjugate, mod, round, true_divide, where
from .tracer.evaluation import devices, eval, sync
from .tracer.explain import explain
from .tracer.jit import jit
from .tracer.linalg import dot, matmul
from .tracer.reductions import (
                              all,
                              amax,
                              amin,
                              any,
                              argmax,
                              argmin,
                              cumsum,
                              max,
                              mean,
                              min,
                              prod,
                              sum,
)
from .tracer.shape_ops import (
                              broadcast_arrays,
                              broadcast_to,
                              concatenate,
                              expand_dims,
                              flip,
                              moveaxis,
                              permute_dims,
                              ravel,
                              reshape,
                              squeeze,
                              stack,
                              swapaxes,
                              transpose,
)

__version__ = "0.1.0"

globals().update(_ELEMENTWISE)

__all__ = sorted(
    ["Tensor", "TracerError", "grad", "value_and_grad", "vjp", "explain", "Device", "config", "stats", "reset_stats", "jit", "eval", "sync",
     "devices", "astype", "arange", "array", "asarray", "copy", "empty", "empty_like",
     "from_dlpack", "full", "full_like", "linspace", "ones", "ones_like", "zeros", "zeros_like",
     "bool_", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
     "uint32", "uint64", "absolute", "around", "clip", "conjugate", "mod", "round",
     "true_divide", "where", "dot", "matmul", "all", "amax", "amin", "any", "argmax", "argmin",
     "cumsum", "max", "mean", "min", "prod", "sum", "broadcast_arrays", "broadcast_to",
     "concatenate", "expand_dims", "flip", "moveaxis", "permute_dims", "ravel", "reshape",
     "squeeze", "stack", "swapaxes", "transpose"] + list(_ELEMENTWISE))
