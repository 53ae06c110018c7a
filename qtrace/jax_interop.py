"""qtrace functions inside JAX programs: XLA custom calls (FFI) with qtrace's gradients.

:func:`to_jax` turns a function written with qtrace into one that takes and returns
``jax.Array`` pytrees and works eagerly and under ``jax.jit``, ``jax.grad``/``jax.vjp``
(a ``jax.custom_vjp`` whose backward is qtrace's own reverse pass, so a per-element
``while_loop`` that JAX cannot differentiate gets its gradient), ``jax.vmap`` (the call
runs once per batch element) and ``jax.shard_map`` (once per shard).

How a call runs: each input/output signature gets one XLA FFI target (``qtrace_<n>``),
registered with ``jax.ffi.register_ffi_target`` for the CPU and, when JAX has a GPU, for
CUDA. Its handler is native where the plan allows (:mod:`qtrace.devices.xla_native`): a
function qtrace compiles that runs the plan's kernels on XLA's buffers (inputs read in
place, outputs written in place) with no Python and no GIL; on a GPU the plan is traced and
loaded on every GPU and the call launches on XLA's stream. Other plans (library steps, an
adstack depth bounded from the inputs' extremes, writes into arguments) get the Python
handler (:mod:`qtrace.devices.xla_ffi`), which views XLA's buffers as NumPy or CuPy arrays,
runs the function through ``qt.jit`` and copies the results out. The backward is a second
target running ``qt.vjp`` of the function, registered when JAX first differentiates the
call. ``f.handler_paths()`` tells which handler each target got.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from .ad import vjp as _vjp
from .config import config
from .devices import xla_ffi
from .tracer.creation import asarray as _as_tensor
from .tracer.jit import jit as _jit
from .tracer.tensor import Tensor

_lock = threading.RLock()
_count = itertools.count()
_handlers: list = []   # every registered handler stays alive with the process


def _jax():
    try:
        import jax
    except ImportError as exc:  # pragma: no cover - the jax extra is not installed
        raise ImportError("qt.to_jax needs JAX: pip install 'qtrace[jax]'") from exc
    return jax


def _platforms(jax) -> tuple:
    """XLA platforms to register targets for: the CPU, and CUDA when JAX has a GPU."""
    try:
        gpu = any(d.platform == "gpu" for d in jax.devices())
    except RuntimeError:
        gpu = False
    return ("cpu", "CUDA") if gpu else ("cpu",)


def _register(run, native) -> tuple[str, dict]:
    """Register a new FFI target on every platform: the native handler ``native(platform)``
    builds, else one calling ``run(args, results)`` in Python. Its name, and per platform
    which handler it got (``"native"`` or ``"python: <why>"``)."""
    jax = _jax()
    name = f"qtrace_{next(_count)}"
    paths = {}
    for platform in _platforms(jax):
        handler, why = native(platform) if config.ffi_native else (None, "QTRACE_FFI_NATIVE=0")
        if handler is None:
            handler = xla_ffi.handler(run, platform)
            paths[platform.lower()] = f"python: {why}"
        else:
            paths[platform.lower()] = "native"
        with _lock:
            _handlers.append(handler)
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler), platform=platform)
    return name, paths


def _native(jitted, specs: list, n_rets: int):
    """``native(platform)`` for :func:`_register`: ``jitted``'s plan for ``specs``, traced on
    the platform's devices (every GPU, in XLA's ordinal order), as a native handler."""
    def native(platform: str):
        from .devices import xla_native  # (LLVM: loaded when a target is registered)
        if platform == "cpu":
            devices = ["cpu"]
        else:
            from .devices import cuda
            devices = [str(d) for d in cuda.devices()]
        entries = [jitted.entry_for(specs, d) for d in devices]
        return xla_native.native_handler(entries, len(specs), n_rets, platform)
    return native


def _inputs(arrays: list) -> list:
    """XLA's buffers as call arguments: NumPy views as they are, GPU views as GPU tensors."""
    return [a if isinstance(a, np.ndarray) else _as_tensor(a) for a in arrays]


def _fill(results: list, values) -> None:
    for res, v in zip(results, values):
        if isinstance(res, np.ndarray):
            arr = v.numpy() if isinstance(v, Tensor) else np.asarray(v)
            copy = np.copyto
        else:  # a CuPy view of XLA's device buffer
            import cupy
            arr = cupy.asarray(v if isinstance(v, Tensor) else _as_tensor(v).to("cuda"))
            copy = cupy.copyto
        if arr.shape != res.shape:
            raise ValueError(f"qt.to_jax: the function returned shape {arr.shape} where its trace "
                             f"gave {res.shape}")
        copy(res, arr, casting="same_kind")


class _Signature:
    """One input signature of a function: its output specs and its forward and backward
    FFI targets (hashable by identity: a static argument of the custom VJP)."""

    def __init__(self, fn, in_tree, specs: list):
        jax = _jax()
        self.fn, self.in_tree, self.n_in = fn, in_tree, len(specs)
        self.forward = _jit(self._flat)
        self.backward = _jit(self._flat_vjp)
        outs = self.forward.output_specs(*[np.empty(shape, dtype) for shape, dtype in specs])
        self.out_specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in outs]
        self.in_specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in specs]
        self.specs = specs
        # the inputs JAX can differentiate (integer and boolean ones get float0 cotangents)
        self.inexact = [i for i, (_, dtype) in enumerate(specs) if np.dtype(dtype).kind in "fc"]
        self.fwd_name, fwd_paths = _register(self._run_forward, _native(self.forward, specs, len(outs)))
        self.paths = {"forward": fwd_paths}
        self._bwd_name = None

    @property
    def bwd_name(self) -> str:
        """The backward target, registered when JAX first differentiates the call."""
        with _lock:
            if self._bwd_name is None:
                specs = self.specs + [(s.shape, np.dtype(s.dtype)) for s in self.out_specs]
                self._bwd_name, self.paths["backward"] = _register(
                    self._run_backward, _native(self.backward, specs, len(self.inexact)))
        return self._bwd_name

    def _flat(self, *leaves):
        jax = _jax()
        out = self.fn(*jax.tree_util.tree_unflatten(self.in_tree, list(leaves)))
        flat, self.out_tree = jax.tree_util.tree_flatten(out)
        return tuple(flat)

    def _flat_vjp(self, *leaves_and_cts):
        """The cotangents of the inexact inputs (the others are held fixed)."""
        primals, cts = list(leaves_and_cts[:self.n_in]), leaves_and_cts[self.n_in:]

        def of_inexact(*xs):
            for i, x in zip(self.inexact, xs):
                primals[i] = x
            return self._flat(*primals)
        _, pullback = _vjp(of_inexact, *(primals[i] for i in self.inexact))
        return tuple(pullback(tuple(cts)))

    def _run_forward(self, args, results):
        _fill(results, self.forward(*_inputs(args)))

    def _run_backward(self, args, results):
        _fill(results, self.backward(*_inputs(args)))


def _varying(jax, x) -> frozenset:
    t = jax.typeof(x)
    manual = getattr(t, "manual_axis_type", None)
    if manual is not None:
        return frozenset(manual.varying)
    return frozenset(getattr(t, "vma", ()) or ())


def _vary_like(jax, outs: tuple, inputs) -> tuple:
    """``outs`` varying over the manual mesh axes its ``inputs`` vary over: inside
    ``jax.shard_map`` a custom call's results are per-shard values, as its inputs are."""
    axes = frozenset().union(*(_varying(jax, x) for x in inputs)) if inputs else frozenset()
    if not axes:
        return outs
    cast = getattr(jax.lax, "pcast", None)
    fixed = []
    for o in outs:
        missing = tuple(sorted(axes - _varying(jax, o)))
        if missing:
            o = cast(o, missing, to="varying") if cast is not None else jax.lax.pvary(o, missing)
        fixed.append(o)
    return tuple(fixed)


def _build_call(jax):
    """The custom-VJP primitive: forward and backward are the signature's FFI targets."""
    def forward(sig, *flat):
        outs = jax.ffi.ffi_call(sig.fwd_name, sig.out_specs, vmap_method="sequential")(*flat)
        return _vary_like(jax, tuple(outs), flat)

    call = jax.custom_vjp(forward, nondiff_argnums=(0,))

    def fwd(sig, *flat):
        return forward(sig, *flat), flat

    def bwd(sig, flat, cts):
        # integer and boolean inputs have no derivative: float0 zeros, as JAX wants them
        out = [np.zeros(s.shape, jax.dtypes.float0) for s in sig.in_specs]
        if sig.inexact:   # (integer/boolean outputs' cotangents are float0: zeros of their dtype)
            cts = [jax.numpy.asarray(c, dtype=s.dtype) if np.dtype(s.dtype).kind in "fc"
                   else jax.numpy.zeros(s.shape, s.dtype) for c, s in zip(cts, sig.out_specs)]
            grads = jax.ffi.ffi_call(sig.bwd_name, [sig.in_specs[i] for i in sig.inexact],
                                     vmap_method="sequential")(*flat, *cts)
            for i, g in zip(sig.inexact, _vary_like(jax, tuple(grads), flat)):
                out[i] = g
        return tuple(out)

    call.defvjp(fwd, bwd)
    return call


def to_jax(fn):
    """``fn`` (written with qtrace, taking and returning tensors or pytrees of them) as a
    JAX function on ``jax.Array`` pytrees, usable under ``jax.jit``, ``jax.grad``,
    ``jax.vmap`` and ``jax.shard_map``. Also a decorator.

    Example:
        >>> import jax, jax.numpy as jnp, qtrace as qt
        >>> @qt.to_jax
        ... def f(x):
        ...     return qt.sin(x) * 2.0
        >>> print(f"{float(jax.jit(f)(jnp.float32(0.5))):.6f}")
        0.958851
        >>> print(f"{float(jax.grad(f)(jnp.float32(0.5))):.6f}")
        1.755165
    """
    jax = _jax()
    call = _build_call(jax)
    signatures: dict = {}

    def wrapped(*args):
        flat, in_tree = jax.tree_util.tree_flatten(args)
        flat = [jax.numpy.asarray(x) for x in flat]
        key = (in_tree, tuple((tuple(x.shape), np.dtype(x.dtype)) for x in flat))
        with _lock:
            sig = signatures.get(key)
            if sig is None:
                sig = signatures[key] = _Signature(fn, in_tree, list(key[1]))
        outs = call(sig, *flat)
        return jax.tree_util.tree_unflatten(sig.out_tree, list(outs))

    def handler_paths() -> list:
        """Per traced signature, which FFI handler each target got on each platform:
        ``"native"`` (compiled, no Python per call) or ``"python: <why>"``."""
        with _lock:
            return [dict(sig.paths) for sig in signatures.values()]

    wrapped.handler_paths = handler_paths
    wrapped.__wrapped__ = fn
    wrapped.__doc__ = fn.__doc__
    return wrapped
