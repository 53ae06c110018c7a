"""The disk (offline) kernel cache: compiled object code kept between processes.

A new process running the same program loads its kernels from here instead of
compiling them (``qt.stats()["cache_hits_disk"]`` counts them, ``compiles`` stays 0).

Key. One entry holds the kernels that one :func:`~qtrace.devices.runtime.compile_plan`
call compiled together (one LLVM module, one object file). Its key is the SHA-256 of a
canonical JSON document of:

* the content keys of those tasks (sorted; a task's symbol derives from its key);
* the target (:meth:`qtrace.kernels.target.Target.info`: the device kind and its
  architecture — for the CPU the triple, CPU name, CPU features, LLVM and llvmlite
  versions; for CUDA the GPU architecture, driver and libdevice), so an entry compiled
  for one device is never loaded for another;
* the compile options (``qt.config.codegen_options()``: fusion, check_bounds);
* the qtrace version, refined by a digest of qtrace's own source files (names, sizes,
  modification times) so that a development checkout whose code generator changed
  never loads stale kernels;
* the entry format and its version.

Layout. ``<cache_dir>/kernels/<kernels>-<key>.qtk``, where ``<kernels>`` hashes only the
task keys (so the entries for one set of kernels can be listed, to explain a miss) and
``<key>`` is the full key. A file is one line of JSON (the header, ASCII, ending in
``\\n``) followed by the payload, the object code::

    {"format": "qtrace-kernel-cache", "version": 1, "key": ..., "kernels": [...],
     "symbols": [...], "components": {...}, "payload_bytes": n, "payload_sha256": ...}
    <n bytes of ELF/Mach-O/COFF object code, or PTX text for a GPU>

``symbols`` are those the payload defines. Kernels that run the code of kernels compiled
for other tasks (the same lowered text: :mod:`qtrace.devices.kernel_bodies`) are stored
as an entry with ``"aliases": {symbol: symbol of the payload}`` and a copy of that payload.

Checks on load, in order: the file is ours (owner), the header parses, the format and
its version are ours, key/kernels/components equal what was asked for, the payload has
its length and checksum, and the object loads and defines every symbol. Any failure is
a :class:`QtraceCacheWarning`; the kernels are then compiled and the entry overwritten.
Metadata is JSON, never pickle: reading an entry runs no Python code.

Writes go to a temporary file in the same directory and are renamed into place
(``os.replace``), so readers, threads and concurrent processes only ever see complete
entries; two writers of one entry both write valid bytes, and the last rename wins.
No fsync: an entry cut short by a crash fails its checksum and is rebuilt.

Security. The cache holds native code that this process will execute, so its
directories are created with mode 0700, and a directory that is group- or
other-writable, or owned by another user, is refused: one warning, then kernels are
compiled in memory only. ``QTRACE_OFFLINE_CACHE=0`` (``qt.config.offline_cache``)
turns the cache off; with ``QTRACE_DUMP_IR`` set entries are written but not read, so
that every kernel's IR gets dumped.

Diagnostics. With ``QTRACE_LOG_RECOMPILES=1`` a miss logs (logger ``"qtrace"``) which
key component differs from the closest entry for the same kernels, e.g.
``options differ: check_bounds True -> False`` or ``llvm version differs: 15.0.7 -> 20.1.0``.

Size. Entries are kept per target (a CPU, each GPU architecture), so the cache is capped at
``qt.config.cache_max_bytes`` (``QTRACE_CACHE_MAX_MB``, default 1024 MB): after a write
that takes it over the cap, the least recently used entries (by modification time, which
a load refreshes) are removed until it fits.

``python -m qtrace cache info|clear`` reports and empties the cache (see :func:`info`,
:func:`clear`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import sys
import tempfile
import threading
import time
import warnings

from ..config import config
from ..stats import bump
from . import tiering
from .target import Target, target_for

FORMAT = "qtrace-kernel-cache"
VERSION = 1
SUFFIX = ".qtk"
SUBDIR = "kernels"
_MAX_HEADER = 1 << 20

log = logging.getLogger("qtrace")

_lock = threading.Lock()
_warned: set = set()
_source_digest: list = []


class QtraceCacheWarning(UserWarning):
    """A disk cache entry or directory was unusable: ignored, and the kernels compiled."""


class CacheDirectoryError(OSError):
    """The disk cache directory cannot be listed or changed (``cache info``/``clear``).

    Its message is one line naming the path, the reason and the way out; compiling never
    raises it (an unusable directory there is a :class:`QtraceCacheWarning`).
    """


# --------------------------------------------------------------------------- key


def _cpu() -> Target:
    from ..graph.device import CPU
    return target_for(CPU)


def _qtrace_version() -> str:
    """``<release>+src.<digest>`` (computed once per process).

    The digest covers the name, size and modification time of every ``.py`` file of
    the package: any edit of a development checkout changes it (stat only, no reads:
    this is on the path of a warm start), while an installed release never changes.
    """
    with _lock:
        if _source_digest:
            return _source_digest[0]
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.sha256()
        for base, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(base, name)
                    st = os.stat(path)
                    h.update(f"{os.path.relpath(path, package)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        module = sys.modules.get("qtrace")
        release = getattr(module, "__version__", None) or "unknown"
        _source_digest.append(f"{release}+src.{h.hexdigest()[:16]}")
        return _source_digest[0]


def components(options: dict | None = None, target: Target | None = None) -> dict:
    """Everything besides the kernels themselves that a compiled object depends on;
    ``options`` defaults to ``qt.config.codegen_options()``, ``target`` to the CPU's."""
    if options is None:
        options = dict(config.codegen_options())
    target = target or _cpu()
    return {**target.info(),
            "options": {str(k): v for k, v in options.items()}, "qtrace": _qtrace_version()}


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def entry_key(kernels: list, comps: dict) -> str:
    """The cache key of task keys ``kernels`` compiled under ``comps`` (:func:`components`)."""
    return _digest({"format": FORMAT, "version": VERSION, "kernels": sorted(kernels),
                    "components": comps})


def _kernels_id(kernels: list) -> str:
    return _digest(sorted(kernels))[:20]


# --------------------------------------------------------------------------- directory


def cache_root() -> str:
    return os.path.abspath(os.path.expanduser(config.cache_dir))


def kernel_dir() -> str:
    return os.path.join(cache_root(), SUBDIR)


def _warn_once(tag, message: str) -> None:
    with _lock:
        if tag in _warned:
            return
        _warned.add(tag)
    warnings.warn(message, QtraceCacheWarning, stacklevel=4)


def _insecure(path: str) -> str | None:
    """Why directory ``path`` must not hold code we execute (None: it may)."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _make_private(path: str) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask


def usable_dir(create: bool = True) -> str | None:
    """The kernel directory, created private to this user; None when the cache is off
    or the directory is unsafe or unusable (warned once per directory and reason)."""
    if not config.offline_cache:
        return None
    root = cache_root()
    path = os.path.join(root, SUBDIR)
    try:
        if create:
            parent = os.path.dirname(root)
            if parent:
                os.makedirs(parent, exist_ok=True)
            _make_private(root)
            _make_private(path)
        elif not os.path.isdir(path):
            return None
        for d in (root, path):
            why = _insecure(d)
            if why is not None:
                _warn_once(("insecure", d, why),
                           f"qtrace disk cache: not using {d}: it {why}; kernels are compiled in "
                           f"memory only (fix with `chmod 700 {d}` or set QTRACE_CACHE_DIR)")
                return None
    except OSError as exc:
        _warn_once(("oserror", root, type(exc).__name__),
                   f"qtrace disk cache: cannot use {root} ({exc}); kernels are compiled in memory only")
        return None
    return path


# --------------------------------------------------------------------------- entries


class _Corrupt(Exception):
    pass


def _parse(data: bytes) -> tuple[dict, bytes]:
    """Header and payload of an entry's bytes; raises :class:`_Corrupt` saying why not."""
    end = data.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        raise _Corrupt("truncated or missing header")
    try:
        header = json.loads(data[:end].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise _Corrupt("unreadable header (not JSON)") from None
    if not isinstance(header, dict):
        raise _Corrupt("unreadable header (not a JSON object)")
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise _Corrupt(f"foreign format {header.get('format')!r} version {header.get('version')!r} "
                       f"(expected {FORMAT!r} version {VERSION})")
    return header, data[end + 1:]


def _read(path: str) -> bytes:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        if hasattr(os, "getuid") and os.fstat(f.fileno()).st_uid != os.getuid():
            raise _Corrupt("file owned by another user")
        return f.read()


def write_atomically(path: str, data: bytes, prefix: str) -> None:
    """``path`` holds ``data`` or what it held before, never part of it: written to a
    temporary file (``.<prefix>-*.tmp``) in the same directory, then renamed into place;
    the temporary file is removed on failure (the OSError is raised)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{prefix}-", suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Entry:
    """The disk cache slot of one set of kernels compiled together under the current
    configuration. ``load`` returns the kernels or None (a miss); ``store`` writes them."""

    def __init__(self, directory: str, kernels: list, symbols: list, options: dict | None = None,
                 target: Target | None = None, counted: bool = True):
        self.dir = directory
        self.counted = counted    # whether a load counts in qt.stats()["cache_hits_disk"]
        self.kernels = sorted(kernels)
        self.symbols = list(symbols)
        self.target = target or _cpu()
        self.components = components(options, self.target)
        self.key = entry_key(self.kernels, self.components)
        self.prefix = _kernels_id(self.kernels)
        self.path = os.path.join(directory, f"{self.prefix}-{self.key}{SUFFIX}")
        # symbol -> digest of its lowered text (:mod:`qtrace.devices.kernel_bodies`), for the
        # symbols the payload defines: written by store when set, read back by a load
        self.bodies: dict = {}

    def load(self) -> dict | None:
        """``{symbol: callable}`` from the entry, or None if it is absent or unusable."""
        try:
            data = _read(self.path)
        except FileNotFoundError:
            if config.log_recompiles:
                log.warning("qtrace disk cache: compiling %d kernel(s) %s: %s", len(self.symbols),
                            _names(self.symbols), self.explain_miss())
            return None
        except _Corrupt as exc:
            return self._bad(str(exc))
        except OSError as exc:
            return self._bad(f"unreadable ({exc})")
        try:
            header, payload = _parse(data)
            if header.get("key") != self.key or header.get("kernels") != self.kernels \
                    or header.get("components") != self.components:
                raise _Corrupt("its header does not match its key (a foreign or altered entry)")
            if header.get("payload_bytes") != len(payload):
                raise _Corrupt(f"truncated payload ({len(payload)} of {header.get('payload_bytes')} "
                               "bytes)")
            if header.get("payload_sha256") != hashlib.sha256(payload).hexdigest():
                raise _Corrupt("payload checksum mismatch")
            aliases = header.get("aliases") or {}
            if not isinstance(aliases, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in aliases.items()):
                raise _Corrupt("unreadable aliases")
            defined = {s: aliases.get(s, s) for s in self.symbols}
            if not set(defined.values()) <= set(header.get("symbols") or ()):
                raise _Corrupt("it lacks some of the kernels' symbols")
        except _Corrupt as exc:
            return self._bad(str(exc))
        try:
            loaded = self.target.load(payload, sorted(set(defined.values())))
            kernels = {s: loaded[d] for s, d in defined.items()}
        except Exception as exc:  # a valid checksum over bad code: still never a crash
            return self._bad(f"object code failed to load ({exc})")
        bodies = header.get("bodies")
        self.bodies = {s: d for s, d in bodies.items() if s in defined and defined[s] == s
                       and isinstance(d, str)} if isinstance(bodies, dict) else {}
        if self.counted:
            bump("cache_hits_disk", len(self.symbols))
        try:
            os.utime(self.path)   # recently used: the last to be trimmed
        except OSError:
            pass
        return kernels

    def _bad(self, why: str) -> None:
        warnings.warn(f"qtrace disk cache: ignoring entry {self.path}: {why}; compiling its "
                      f"{len(self.symbols)} kernel(s) again and rewriting it", QtraceCacheWarning,
                      stacklevel=4)
        return None

    def store(self, obj: bytes, symbols: list | None = None, aliases: dict | None = None) -> None:
        """Write the entry atomically (temporary file + rename); failures only warn.

        ``obj`` defines ``symbols`` (default: the entry's own); ``aliases`` maps an entry
        symbol to the symbol of ``obj`` whose code it runs (:meth:`store_aliases`)."""
        header = {"format": FORMAT, "version": VERSION, "key": self.key, "kernels": self.kernels,
                  "symbols": self.symbols if symbols is None else symbols,
                  "components": self.components,
                  "payload_bytes": len(obj), "payload_sha256": hashlib.sha256(obj).hexdigest(),
                  "created": time.time()}
        if aliases:
            header["aliases"] = aliases
        elif self.bodies:
            header["bodies"] = self.bodies
        blob = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("ascii") + b"\n"
        try:
            write_atomically(self.path, blob + obj, self.prefix)
            trim(self.dir, config.cache_max_bytes)
        except OSError as exc:
            _warn_once(("write", self.dir, type(exc).__name__),
                       f"qtrace disk cache: cannot write to {self.dir} ({exc}); kernels stay in "
                       "memory only")

    def store_aliases(self, aliases: dict, source: str) -> bool:
        """Store the entry as kernels of another: each symbol of ``aliases`` runs the code
        of the symbol it maps to, defined by the entry file ``source`` (one
        :meth:`store` wrote: kernels shared by body, :mod:`qtrace.devices.kernel_bodies`).
        Its payload is copied, after the checks a load makes; False if ``source`` is gone,
        unreadable or lacks a symbol (nothing is stored: the next process compiles)."""
        try:
            header, payload = _parse(_read(source))
            if header.get("payload_bytes") != len(payload) \
                    or header.get("payload_sha256") != hashlib.sha256(payload).hexdigest():
                return False
        except (OSError, _Corrupt):
            return False
        symbols = list(header.get("symbols") or ())
        if header.get("components") != self.components or not set(aliases.values()) <= set(symbols):
            return False
        self.store(payload, symbols, aliases)
        return True

    def explain_miss(self) -> str:
        """Which key component differs from the closest entry for the same kernels."""
        best = None
        try:
            names = [e.name for e in os.scandir(self.dir)
                     if e.name.startswith(self.prefix + "-") and e.name.endswith(SUFFIX)]
        except OSError:
            names = []
        for name in names:
            try:
                with open(os.path.join(self.dir, name), "rb") as f:
                    header = json.loads(f.readline(_MAX_HEADER).decode("ascii"))
                if header.get("kernels") != self.kernels:
                    continue
                diffs = describe_differences(header.get("components") or {}, self.components)
                if header.get("format") != FORMAT or header.get("version") != VERSION:
                    diffs.insert(0, f"entry format differs: {header.get('format')} "
                                    f"v{header.get('version')} -> {FORMAT} v{VERSION}")
            except (OSError, ValueError, AttributeError):
                continue
            if best is None or len(diffs) < len(best):
                best = diffs
        if best is None:
            return "no cached entry for these kernels"
        return "; ".join(best) or "the closest entry has the same components (a hash collision?)"


def _names(symbols: list) -> str:
    return ", ".join(symbols[:3]) + (f", ... ({len(symbols)} in all)" if len(symbols) > 3 else "")


_WHAT = {"device": "device", "triple": "target triple", "cpu": "host CPU",
         "features": "CPU features", "llvm": "llvm version", "llvmlite": "llvmlite version",
         "qtrace": "qtrace version"}


def describe_differences(old: dict, new: dict) -> list:
    """Human-readable differences between two :func:`components` dicts (old -> new)."""
    out = []
    for name in sorted(set(old) | set(new), key=lambda n: (n != "options", n)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if name == "options" and isinstance(a, dict) and isinstance(b, dict):
            changed = [f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(set(a) | set(b))
                       if a.get(k) != b.get(k)]
            out.append("options differ: " + ", ".join(changed))
        elif name == "features":
            fa, fb = set(str(a).split(",")), set(str(b).split(","))
            out.append(f"CPU features differ: {_short(sorted(fa - fb))} -> {_short(sorted(fb - fa))}")
        else:
            out.append(f"{_WHAT.get(name, name)} differs: {a} -> {b}")
    return out


def _short(items: list) -> str:
    return ",".join(items[:6]) + (f",... ({len(items)})" if len(items) > 6 else "") or "-"


# --------------------------------------------------------------------------- runtime hook


def lookup(tasks: dict, options: dict | None = None,
           target: Target | None = None) -> tuple[Entry | None, dict | None]:
    """For ``{symbol: task}`` about to be compiled together for ``target`` (default: the
    CPU) with codegen ``options``: the disk entry (None when the cache is off or
    unusable) and the kernels loaded from it (None on a miss: compile them, then
    ``entry.store(payload)``)."""
    directory = usable_dir()
    if directory is None:
        return None, None
    entry = Entry(directory, [t.key for t in tasks.values()], list(tasks), options, target)
    if config.dump_ir:
        return entry, None
    return entry, entry.load()


# --------------------------------------------------------------------------- command line


def _directory_error(path: str, exc: OSError, doing: str) -> CacheDirectoryError:
    """A one-line :class:`CacheDirectoryError` for ``exc``, raised while ``doing`` ``path``."""
    if isinstance(exc, NotADirectoryError):
        blocker = path
        while os.path.dirname(blocker) != blocker and not os.path.isfile(blocker):
            blocker = os.path.dirname(blocker)
        why = f"{blocker} is a file, not a directory"
    elif isinstance(exc, PermissionError):
        why = f"permission denied {doing} {path}"
    else:
        why = f"cannot {doing.removesuffix('ing')} {path}: {exc.strerror or exc}"
    return CacheDirectoryError(f"disk cache unusable: {why} (remove it, fix its permissions, or "
                               "point QTRACE_CACHE_DIR at another directory)")


def _entries(path: str) -> tuple[list, list]:
    """The entry files and leftover temporary files in kernel directory ``path``."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise _directory_error(path, exc, "listing") from None
    entries = [os.path.join(path, n) for n in names if n.endswith(SUFFIX) and not n.startswith(".")]
    temps = [os.path.join(path, n) for n in names if n.startswith(".") and n.endswith(".tmp")]
    return entries, temps


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _size(paths: list) -> int:
    """Total bytes of the regular files among ``paths``."""
    total = 0
    for p in paths:
        try:
            st = os.lstat(p)
        except OSError:
            continue
        total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def _corrupt(path: str) -> bool:
    """Whether entry ``path`` is not a readable cache file with a valid header (the payload
    is checked only on load)."""
    if not _is_file(path):
        return True
    try:
        with open(path, "rb") as f:
            _parse(f.readline(_MAX_HEADER))
    except (OSError, _Corrupt):
        return True
    return False


def info() -> dict:
    """Location, state, entry count and total size of the disk cache.

    ``corrupt`` counts entries that are not cache files with a valid header (they are
    compiled over when met, and removed by :func:`clear`). Raises
    :class:`CacheDirectoryError` when the directory cannot be listed.

    Example:
        >>> from qtrace.kernels import disk_cache
        >>> sorted(disk_cache.info())
        ['bytes', 'cap_bytes', 'corrupt', 'entries', 'location', 'state', 'temporary_files']
    """
    tiering.wait()   # (the entries of plans this process compiled are written once optimised)
    path = kernel_dir()
    entries, temps = _entries(path)
    corrupt = sum(map(_corrupt, entries))
    if not config.offline_cache:
        state = "disabled (QTRACE_OFFLINE_CACHE=0)"
    elif not os.path.isdir(path):
        state = "enabled (empty, not created yet)"
    else:
        try:
            why = next((w for d in (cache_root(), path) if (w := _insecure(d))), None)
        except OSError as exc:
            raise _directory_error(path, exc, "reading") from None
        state = f"REFUSED: {why}" if why else "enabled"
    return {"location": path, "state": state, "entries": len(entries) - corrupt, "corrupt": corrupt,
            "bytes": _size(entries) + _size(temps), "cap_bytes": config.cache_max_bytes,
            "temporary_files": len(temps)}


def trim(directory: str, cap: int) -> int:
    """Remove the least recently used entries of ``directory`` until their total size is at
    most ``cap`` bytes; returns how many were removed."""
    paths, _ = _entries(directory)
    found = []
    for p in paths:
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.append((st.st_mtime_ns, st.st_size, p))
    total = sum(size for _, size, _ in found)
    removed = 0
    for _, size, p in sorted(found):
        if total <= cap:
            break
        try:
            os.unlink(p)
        except OSError:
            continue
        total -= size
        removed += 1
    return removed


def clear() -> tuple[int, int, int]:
    """Delete every entry (corrupt ones included) and leftover temporary file.

    Returns ``(files removed, bytes freed, skipped)``: ``skipped`` counts names that look
    like entries but are not regular files (a directory, a link), which are left alone.
    Raises :class:`CacheDirectoryError` when the directory cannot be listed or a file in
    it cannot be removed.
    """
    tiering.wait()   # (an optimising compile under way would write its entry after the clear)
    entries, temps = _entries(kernel_dir())
    removed = freed = skipped = 0
    for p in entries + temps:
        if not _is_file(p):
            skipped += os.path.lexists(p)
            continue
        try:
            size = os.lstat(p).st_size
            os.unlink(p)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _directory_error(p, exc, "removing") from None
        removed += 1
        freed += size
    return removed, freed, skipped


__all__ = ["QtraceCacheWarning", "CacheDirectoryError", "Entry", "lookup", "components", "entry_key",
           "describe_differences", "usable_dir", "info", "clear", "trim"]
