"""The compiled recorder: ``qtrace.graph._native``, a C extension built when qtrace is
installed (``pip install``; it needs a C compiler, and is skipped without one).

It implements the per-operation recording path — creating graph nodes, and the
tensor-side fast paths bound by ``qtrace.tracer.methods._bind_native`` — with the same
algorithms as the Python definitions, which stay the reference: without the extension,
or with ``QTRACE_NATIVE=0`` in the environment at import, qtrace records in Python
(several times slower per operation, same graphs, same results).

Example:
    >>> from qtrace.graph import native
    >>> native.module() is None or hasattr(native.module(), "make_node")
    True
"""

from __future__ import annotations

import warnings

from ..config import config

ABI = 14  # the extension's QTRACE_NATIVE_ABI this code is written for
_loaded = False
_module = None


def module():
    """The extension module when present and enabled (``qt.config.native`` at import),
    else None."""
    global _loaded, _module
    if not _loaded:
        _loaded = True
        if config.native:
            try:
                from . import _native
            except ImportError:
                _native = None
            _module = checked(_native)
    return _module


def checked(mod):
    """``mod`` if it is the extension this code was written for, else None (a stale build
    left by an earlier install, with a warning: its functions may take other arguments)."""
    if mod is not None and getattr(mod, "ABI", None) != ABI:
        warnings.warn("qtrace: the compiled recorder (qtrace.graph._native) is a stale build, "
                      "so it is not used; reinstall qtrace (pip install .) to rebuild it",
                      RuntimeWarning, stacklevel=3)
        return None
    return mod


def active() -> bool:
    """Whether operations are recorded by the compiled recorder."""
    return module() is not None
