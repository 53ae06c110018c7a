"""Buffer versions: what data-dependent caches (adstack depths) are keyed by.

A cache keyed on a buffer's data (the adstack's max-reducer, ``devices/adstack.py``)
asks :func:`identity` for it: ``(id, version)`` while the cached value may be trusted,
``None`` while it may not. Who can change a buffer's data, and how each path is seen:

* **qtrace's own writes** are functionalized (``v[key] = x``, ``v += x``, ``.at[]``,
  ``np.add.at``, ``out=`` a tensor, writes into ``qt.jit`` tensor arguments): the result
  is a *new* buffer, computed by a kernel or a library step, and a new buffer is a new
  identity — the cache entry of the old one can no more match than an old version could
  (entries are checked against a weak reference to the buffer object, so a recycled
  ``id`` never matches either). Library outputs are new arrays too.
* **qtrace writing into memory it does not own** — a NumPy array argument of ``qt.jit``
  written back in place, ``out=`` a NumPy array — calls :func:`bump`: a new version.
* **Host memory qtrace borrows** zero-copy (``qt.asarray`` of a NumPy array or a
  buffer-protocol object, ``qt.from_dlpack``, NumPy operands of operations, NumPy
  arguments of ``qt.jit`` functions) is :func:`borrow`-ed: *volatile* for as long as it
  lives. Its owner may write it at any time and nothing tells qtrace, so no cache keyed
  on it is ever trusted: the reducer re-runs on every launch whose trip counts read it.
  This was chosen over copying on entry: a copy costs the same pass over the data as the
  reducer does (plus the memory), but on every borrowed array, while volatility costs
  only where a loop's trip counts come from borrowed memory — and ``qt.asarray`` keeps
  its zero-copy contract. A cheap fingerprint (a few sampled elements, a checksum of a
  prefix) would not be correct: one element written past the sample gives a stale depth.
  Pass ``copy=True`` (``qt.asarray(a, copy=True)``, ``qt.array(a)``) to hand qtrace
  memory of its own, whose depth is then cached.
* **Exports**: a DLPack export of a tensor (``np.from_dlpack(t)``, ``torch.from_dlpack``)
  hands out writable memory. The exported buffer is volatile *while exported* — until
  the consumer drops the last array viewing the export — and gets a new version when the
  export ends, so a depth cached before or during the export is never trusted after it.
  ``t.numpy()`` and ``np.asarray(t)`` are not writable exports: they return arrays whose
  base is a read-only memoryview, so NumPy refuses both writes and turning the
  ``writeable`` flag back on (``qtrace.tracer.tensor``).

Versions and volatility belong to the array that owns the memory (the end of NumPy's
``.base`` chain), so every view of it — a jitted call's fresh view of a tensor, a
reshaped operand — sees them.

GPU memory (CuPy arrays) follows the same rules: device buffers qtrace computes are new
identities; a GPU array taken zero-copy (``qt.asarray`` of a CuPy array or of anything
with ``__cuda_array_interface__``, ``qt.from_dlpack``) is borrowed; a GPU tensor's
``__cuda_array_interface__`` hands its memory out with no end the producer can see, so
that buffer is borrowed from then on, and its DLPack export is volatile while exported.
An array that cannot be weakly referenced is never trusted (``identity`` is None).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

_lock = threading.Lock()


class _State:
    """What is known about one memory owner: its version and why it is volatile."""

    __slots__ = ("ref", "version", "borrowed", "exports", "host")

    def __init__(self, ref: weakref.ref):
        self.ref = ref
        self.version = 0
        self.borrowed = False
        self.exports = 0
        self.host = None   # (version, host copy) of a small device buffer uploaded by qtrace


_states: dict[int, _State] = {}


def _owner(buf):
    """The array at the end of ``buf``'s ``.base`` chain (the one viewing the memory first):
    NumPy's, or a device array's views of its own kind (CuPy)."""
    base = buf.base
    while base is not None and (isinstance(base, np.ndarray) or type(base) is type(buf)):
        buf, base = base, base.base
    return buf


def _forget(key: int, ref: weakref.ref) -> None:
    with _lock:
        state = _states.get(key)
        if state is not None and state.ref is ref:
            del _states[key]


def _state(owner) -> _State | None:
    """The state of ``owner`` (created on first use; the caller holds ``_lock``), or None
    for an array that cannot be weakly referenced (then never trusted: see ``identity``)."""
    key = id(owner)
    state = _states.get(key)
    if state is None or state.ref() is not owner:
        try:
            ref = weakref.ref(owner, lambda r, key=key: _forget(key, r))
        except TypeError:
            return None
        state = _states[key] = _State(ref)
    return state


def borrow(buf) -> None:
    """Record that ``buf``'s memory belongs to someone else, who may write it at any time."""
    owner = _owner(buf)
    state = _states.get(id(owner))
    if state is not None and state.borrowed and state.ref() is owner:
        return  # the common repeat (a NumPy argument of every jitted call): no lock
    with _lock:
        state = _state(owner)
        if state is not None:
            state.borrowed = True


def bump(buf) -> None:
    """Record a write into ``buf`` (qtrace writing memory it does not own): a new version."""
    with _lock:
        state = _state(_owner(buf))
        if state is not None:
            state.version += 1


def watch(bufs) -> tuple:
    """The records (version, volatility) of the memory of each of ``bufs``, made where
    missing, for a caller that keeps ``bufs`` and rewrites them again and again (a CUDA
    graph's results): :func:`advance` gives them new versions, :func:`volatile` says
    whether any may change unseen. None for an array that cannot be weakly referenced."""
    with _lock:
        return tuple(_state(_owner(b)) for b in bufs)


def advance(records: tuple) -> None:
    """A new version of the memory of each record of :func:`watch`."""
    with _lock:
        for state in records:
            state.version += 1


def volatile(records: tuple) -> bool:
    """Whether memory of any record of :func:`watch` may change unseen (lent to someone
    else, exported), or cannot be watched."""
    for state in records:   # (a loop: this runs at every replay of a CUDA graph)
        if state is None or state.borrowed or state.exports:
            return True
    return False


def export(buf):
    """A view of ``buf`` to hand to a consumer that may write it: ``buf``'s memory is
    volatile until that view dies, and gets a new version then (for good, if the view
    cannot be watched)."""
    view = buf.view()
    with _lock:
        state = _state(_owner(buf))
        if state is None:
            return view
        state.exports += 1
    try:
        weakref.finalize(view, _end_export, state)
    except TypeError:
        with _lock:
            state.exports -= 1
            state.borrowed = True
    return view


def _end_export(state: _State) -> None:
    with _lock:
        state.exports -= 1
        state.version += 1


def mirror(buf, host: np.ndarray) -> None:
    """Remember ``host``, the data a device buffer qtrace owns was just uploaded from (a
    small one: a Python scalar, a loop bound), so that reading it on the host needs no copy
    back (:func:`host_value`)."""
    with _lock:
        state = _state(_owner(buf))
        if state is not None:
            state.host = (state.version, host)


def host_value(buf) -> np.ndarray | None:
    """The host copy :func:`mirror` kept of ``buf``'s memory, while it still holds that
    data (no write since, not borrowed or exported), shaped as ``buf`` when ``buf`` views
    all of it (in whatever order: what reads it takes extremes or a single value); else
    None."""
    owner = _owner(buf)
    state = _states.get(id(owner))
    if state is None or state.host is None or state.ref() is not owner:
        return None
    version, host = state.host
    if state.borrowed or state.exports or version != state.version or host.size != buf.size:
        return None
    return host.reshape(buf.shape)


def identity(buf) -> tuple | None:
    """``(id, version)`` of ``buf``, or None while its data may change unseen (volatile)."""
    owner = _owner(buf)
    state = _states.get(id(owner))
    if state is None or state.ref() is not owner:
        try:
            weakref.ref(owner)   # (what a cache entry holds to recognise the buffer)
        except TypeError:
            return None
        return (id(buf), 0)
    if state.borrowed or state.exports:
        return None
    return (id(buf), state.version)
