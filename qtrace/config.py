"""Run-time configuration: environment variables, mirrored as attributes of ``qt.config``.

Every setting is read from the environment once, at import, and can be changed later
by assigning the attribute, e.g. ``qt.config.fusion = False``. Settings that change
the generated code (``fusion``, ``check_bounds``) are part of every kernel cache key.

==========================  ===========================  =================================
variable                    attribute                    meaning
==========================  ===========================  =================================
``QTRACE_DEVICE``           ``device``                   default device (``cpu``)
``QTRACE_FUSION``           ``fusion``                   ``0``: one task per operation
``QTRACE_FUSION_DIAG``      ``fusion_diag``              ``1``: print fusion decisions
``QTRACE_DEBUG_ADSTACK``    ``debug_adstack``            ``1``: print each loop task's
                                                         adstack sizing (path, depth,
                                                         bytes) to stderr
``QTRACE_DUMP_IR``          ``dump_ir``                  directory for each kernel's IR
``QTRACE_NUM_THREADS``      ``num_threads``              CPU worker threads (all cores)
``QTRACE_SPIN_US``          ``spin_us``                  how long idle CPU workers spin
                                                         before they sleep (300 us)
``QTRACE_LOG_RECOMPILES``   ``log_recompiles``           ``1``: say why a retrace happened
``QTRACE_CACHE_DIR``        ``cache_dir``                disk cache location (default:
                                                         :func:`default_cache_dir`)
``QTRACE_OFFLINE_CACHE``    ``offline_cache``            ``0``: no disk cache
``QTRACE_CACHE_MAX_MB``     ``cache_max_bytes``          disk cache size cap (1024 MB;
                                                         least recently used trimmed)
``QTRACE_FFI_NATIVE``       ``ffi_native``               ``0``: ``qt.to_jax`` calls run
                                                         through the Python FFI handler
``QTRACE_TIERED``           ``tiered``                   ``0``: compile every plan
                                                         optimised before its first run
                                                         (default: small plans run
                                                         quickly compiled code first)
``QTRACE_CUDA_GRAPHS``      ``cuda_graphs``              ``1``: jitted GPU calls replay
                                                         CUDA graphs (``qt.jit``'s
                                                         ``cuda_graph`` default)
``QTRACE_NATIVE``           ``native``                   ``0``: record in Python only,
                                                         without the compiled recorder,
                                                         and Python worker threads
                                                         (read once, at import)
(no variable)               ``check_bounds``             gather/scatter index checks
(no variable)               ``max_pending_nodes``        graph size that forces evaluation
(no variable)               ``adstack_max_depth``        debug cap on loop stacks (provokes
                                                         the overflow diagnostic)
==========================  ===========================  =================================
"""

from __future__ import annotations

import os


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _threads() -> int:
    value = os.environ.get("QTRACE_NUM_THREADS")
    if value:
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"QTRACE_NUM_THREADS must be a positive integer, got {value!r}") from None
        if n < 1:
            raise ValueError(f"QTRACE_NUM_THREADS must be a positive integer, got {value!r}")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS/Windows
        return max(1, os.cpu_count() or 1)


def default_cache_dir() -> str:
    """The disk cache location when ``QTRACE_CACHE_DIR`` is not set: the platform's user
    cache directory (``platformdirs``): ``$XDG_CACHE_HOME/qtrace`` or ``~/.cache/qtrace`` on
    Linux, ``~/Library/Caches/qtrace`` on macOS, ``%LOCALAPPDATA%\\qtrace\\Cache`` on Windows.

    Example:
        >>> import os
        >>> os.path.basename(default_cache_dir().rstrip(os.sep)) in ("qtrace", "Cache")
        True
    """
    try:
        import platformdirs
    except ImportError:  # qtrace put on PYTHONPATH without its dependencies (a machine with
        # no package index): the XDG location, which platformdirs also gives on Linux
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "qtrace")
    return platformdirs.user_cache_dir("qtrace", appauthor=False)


class Config:
    """Mutable settings of this process (see the module docstring for the table)."""

    def __init__(self) -> None:
        self.device: str = os.environ.get("QTRACE_DEVICE", "cpu") or "cpu"
        self.fusion: bool = _flag("QTRACE_FUSION", True)
        self.fusion_diag: bool = _flag("QTRACE_FUSION_DIAG", False)
        self.debug_adstack: bool = _flag("QTRACE_DEBUG_ADSTACK", False)
        self.dump_ir: str | None = os.environ.get("QTRACE_DUMP_IR") or None
        self.num_threads: int = _threads()
        self.spin_us: int = int(os.environ.get("QTRACE_SPIN_US") or 300)
        self.log_recompiles: bool = _flag("QTRACE_LOG_RECOMPILES", False)
        self.cache_dir: str = os.environ.get("QTRACE_CACHE_DIR") or default_cache_dir()
        self.offline_cache: bool = _flag("QTRACE_OFFLINE_CACHE", True)
        self.cache_max_bytes: int = int(float(os.environ.get("QTRACE_CACHE_MAX_MB") or 1024) * 2**20)
        self.ffi_native: bool = _flag("QTRACE_FFI_NATIVE", True)
        self.native: bool = _flag("QTRACE_NATIVE", True)
        self.tiered: bool = _flag("QTRACE_TIERED", True)
        self.cuda_graphs: bool = _flag("QTRACE_CUDA_GRAPHS", False)
        self.check_bounds: bool = True
        self.max_pending_nodes: int = 1000
        self.adstack_max_depth: int | None = None

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, name, value)
        for watcher in _watchers.get((id(self), name), ()):
            watcher(value)

    def watch(self, name: str, watcher) -> None:
        """Call ``watcher(value)`` with this object's setting ``name`` now and whenever it
        is assigned as an attribute (the compiled recorder keeps ``max_pending_nodes`` of
        ``qt.config`` as a C integer; other ``Config`` objects and their copies do not
        reach it). Writing ``vars(config)`` directly bypasses the watchers.

        Example:
            >>> seen = []
            >>> config.watch("spin_us", seen.append)
            >>> config.spin_us = config.spin_us
            >>> len(seen)
            2
            >>> _watchers[(id(config), "spin_us")].remove(seen.append)
        """
        _watchers.setdefault((id(self), name), []).append(watcher)
        watcher(getattr(self, name))

    def codegen_options(self) -> tuple:
        """The settings that change generated code; part of every kernel cache key."""
        options = _options.get((self.fusion, self.check_bounds))
        if options is None:
            options = _options[(self.fusion, self.check_bounds)] = (
                ("fusion", self.fusion), ("check_bounds", self.check_bounds))
        return options

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"qt.config({items})"


_options: dict = {}  # (fusion, check_bounds) -> the options tuple (built once)
_watchers: dict = {}  # (id of a Config, setting name) -> [watcher(value)] (Config.watch;
#                      only the process-wide `config` registers any, and it lives as long)
config = Config()
