"""Loading the CPU's compiled kernels without LLVM: a loader for x86-64 ELF object files.

A kernel compiled once is kept in the disk cache as the object file LLVM emitted. Handing
it back to LLVM's MCJIT to load means importing llvmlite and initialising LLVM (~35 ms
and ~40 MB of a warm start that compiles nothing). The objects qtrace emits for the host
(``reloc="pic"``, the large code model) are simple: executable and read-only sections, a
few relocation types against a global offset table, and a handful of external symbols
(the abort flag, ``memcpy``/``memset``, C math functions). This module maps such an
object itself:

1. every allocated section is copied into anonymous memory, laid out by kind (code, then
   read-only data and the GOT, then writable data), each kind page-aligned;
2. symbols resolve to their section's address, ``_GLOBAL_OFFSET_TABLE_`` to the GOT, and
   undefined symbols through a resolver (the process's own symbols by default, like
   MCJIT's);
3. the relocations of the loaded sections are applied: 64-bit absolute, GOT-relative and
   GOT-slot forms (the large code model), 32-bit PC-relative ones to a symbol or its GOT
   slot where the value fits (the small model; a call to an external function goes
   through a stub);
4. code pages become read+execute and data pages read-only (never writable and executable
   at once).

Unwind tables (``.eh_frame``) are not loaded: no exception or ``longjmp`` ever crosses a
kernel, so nothing unwinds through one (MCJIT registers them; debuggers then show
kernel frames, which here they do not).

Anything else — another architecture or file type, a relocation type or section kind not
listed, a symbol that does not resolve, memory the system will not make executable —
raises :class:`Unsupported`, and the caller loads the object with MCJIT instead. Memory
is never unmapped: kernels live as long as the process (as MCJIT's engines do).

Example:
    >>> from qtrace.kernels import elf_loader
    >>> elf_loader.load(b"not an object", ["f"])
    Traceback (most recent call last):
    ...
    qtrace.kernels.elf_loader.Unsupported: not an x86-64 ELF relocatable object
"""

from __future__ import annotations

import ctypes
import mmap
import struct
import sys
import threading

from . import interrupt

PAGE = mmap.PAGESIZE

# section types and flags
_PROGBITS, _SYMTAB, _RELA, _NOBITS, _REL, _NOTE = 1, 2, 4, 8, 9, 7
_UNWIND = 0x70000001    # .eh_frame: not loaded (no exception ever unwinds through a kernel)
_ALLOC, _WRITE, _EXEC, _TLS = 0x2, 0x1, 0x4, 0x400
_UNDEF, _ABS = 0, 0xFFF1

# x86-64 relocation types handled (those LLVM emits for the host's code models; each is
# exercised by the tests): absolute, PC-relative (and calls), GOT-relative 64-bit forms
_R64, _PC32, _PLT32, _GOTOFF64, _GOT64, _GOTPC64 = 1, 2, 4, 25, 27, 29
_GOTPCRELX = (9, 41, 42)     # GOTPCREL, GOTPCRELX, REX_GOTPCRELX: a GOT slot, PC-relative
_STUB = 16        # movabs $target, %r11; jmp *%r11 (13 bytes), padded

_PROT_R, _PROT_W, _PROT_X = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20

_lock = threading.Lock()
_libc: list = []          # the C library, set up at first use (on Linux)
_libraries: list = []     # where undefined symbols are looked up, once the C math library is added
_defined: dict = {}       # symbols qtrace defines in its own memory: name -> address


class Unsupported(Exception):
    """The object is not one this loader maps; load it with MCJIT."""


# void kernel(i64 start, i64 end, ptr args, ptr status, ptr scratch)
KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p)


def kernels(obj: bytes, symbols: list) -> dict:
    """``{symbol: callable}`` for the kernels (:data:`KERNEL`) of ``obj`` mapped by
    :func:`load`; :class:`Unsupported` where it does not apply."""
    return {sym: KERNEL(addr) for sym, addr in load(obj, symbols).items()}


def _c() -> ctypes.CDLL:
    """The process's C library, with the memory calls typed (Linux only: see _Sections)."""
    with _lock:
        if not _libc:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_long]
            libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            _libc.append(libc)
        return _libc[0]


def define(name: str, address: int) -> None:
    """Resolve ``name`` to ``address`` in every object loaded from now on (a word of
    qtrace's own memory that kernels read, such as :mod:`qtrace.kernels.tiering`'s slots)."""
    _defined[name] = address


def defined() -> dict:
    """The symbols :func:`define` gave, ``{name: address}`` (MCJIT is told them too)."""
    return dict(_defined)


def process_symbol(name: str) -> int | None:
    """The address of ``name`` in this process: the kernels' abort flag or a symbol
    :func:`define` gave, else the first of the process's global symbols and the C math
    library that defines it."""
    if name == interrupt.SYMBOL:
        return interrupt.address()
    if name in _defined:
        return _defined[name]
    found = _lookup(_libraries or [_c()], name)
    if found is None and not _libraries:   # not among the process's symbols: add libm, once
        with _lock:
            if not _libraries:
                from ctypes.util import find_library  # (~7 ms: only when needed)
                libm = find_library("m")
                _libraries.extend([_libc[0]] + ([ctypes.CDLL(libm)] if libm else []))
        found = _lookup(_libraries, name)
    return found


def _lookup(libraries: list, name: str) -> int | None:
    for lib in libraries:
        try:
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        except AttributeError:
            continue
    return None


class _Sections:
    """The object's section headers, names and contents."""

    def __init__(self, obj: bytes):
        if (len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1
                or sys.platform != "linux"):
            raise Unsupported("not an x86-64 ELF relocatable object")
        (e_type, e_machine, _, _, _, shoff, _, _, _, _, shentsize, shnum,
         shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", obj, 16)
        if e_type != 1 or e_machine != 62 or shentsize != 64:
            raise Unsupported("not an x86-64 ELF relocatable object")
        self.obj = obj
        self.headers = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + 64 * i) for i in range(shnum)]
        names = self.headers[shstrndx]
        self.names = [self._string(names, h[0]) for h in self.headers]

    def _string(self, strtab, offset: int) -> str:
        start = strtab[4] + offset
        return self.obj[start:self.obj.index(b"\0", start)].decode()

    def data(self, i: int) -> bytes:
        h = self.headers[i]
        return self.obj[h[4]:h[4] + h[5]]

    def symbols(self, i: int) -> list:
        """(name, info, section index, value) of each entry of symbol table ``i``."""
        h = self.headers[i]
        strtab = self.headers[h[6]]
        out = []
        for k in range(h[5] // 24):
            st_name, st_info, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", self.obj, h[4] + 24 * k)
            out.append((self._string(strtab, st_name), st_info, shndx, value))
        return out


def _layout(sec: _Sections, stubs: int, got: int):
    """Where everything goes in the mapping: ``(offsets of the loaded sections, offset of
    the call stubs, offset of the GOT, zones, size)``. Zones, each starting on a page,
    are ``(start, end, protection)``: code and the stubs; read-only data and the GOT;
    writable data."""
    offsets, zones, at = {}, [], 0
    extra = {"code": (_STUB * stubs, 16), "const": (8 * got, 8), "data": (0, 1)}
    places = {}
    for kind, prot in (("code", _PROT_R | _PROT_X), ("const", _PROT_R), ("data", _PROT_R | _PROT_W)):
        at = start = -(-at // PAGE) * PAGE
        for i, (_, typ, flags, _, _, size, _, _, align, _) in enumerate(sec.headers):
            if not flags & _ALLOC or size == 0 or typ == _UNWIND:
                continue
            if typ not in (_PROGBITS, _NOBITS, _NOTE) or flags & _TLS:
                raise Unsupported(f"section {sec.names[i]!r} of type {typ:#x}, flags {flags:#x}")
            if kind == ("code" if flags & _EXEC else "data" if flags & _WRITE else "const"):
                align = max(align, 1)
                at = -(-at // align) * align
                offsets[i] = at
                at += size
        nbytes, align = extra[kind]
        at = places[kind] = -(-at // align) * align
        at += nbytes
        zones.append((start, at, prot))
    return offsets, places["code"], places["const"], zones, max(-(-at // PAGE) * PAGE, PAGE)


def load(obj: bytes, symbols: list, resolve=process_symbol) -> dict:
    """Map ``obj`` and return ``{symbol: address}`` for the requested defined symbols.

    Raises :class:`Unsupported` where the object needs anything this loader does not do.
    """
    sec = _Sections(obj)
    tables = [i for i, h in enumerate(sec.headers) if h[1] == _SYMTAB]
    if len(tables) != 1:
        raise Unsupported("expected one symbol table")
    table = sec.symbols(tables[0])
    if any(h[1] == _REL for h in sec.headers):
        raise Unsupported("REL relocations")
    loaded = {i for i, h in enumerate(sec.headers) if h[2] & _ALLOC and h[5] and h[1] != _UNWIND}
    relocs = []    # (section patched, offset, type, symbol, addend); sections not loaded: skipped
    for h in sec.headers:
        if h[1] == _RELA and h[7] in loaded:
            for k in range(h[5] // 24):
                r_offset, info, addend = struct.unpack_from("<QQq", obj, h[4] + 24 * k)
                relocs.append((h[7], r_offset, info & 0xFFFFFFFF, info >> 32, addend))
    # a GOT slot per symbol loaded through it; a call stub per external function that a
    # PLT-style relocation reaches
    got_syms = sorted({k for _, _, kind, k, _ in relocs if kind == _GOT64 or kind in _GOTPCRELX})
    stub_syms = sorted({k for _, _, kind, k, _ in relocs
                        if kind == _PLT32 and table[k][2] == _UNDEF})
    offsets, stubs_at, got_at, zones, size = _layout(sec, len(stub_syms), len(got_syms))

    base = _c().mmap(None, size, _PROT_R | _PROT_W, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise Unsupported(f"mmap failed (errno {ctypes.get_errno()})")
    try:
        return _fill(sec, table, relocs, symbols, resolve, base, size, offsets, stubs_at, got_at,
                     zones, got_syms, stub_syms)
    except Unsupported:
        _c().munmap(base, size)
        raise


def _fill(sec, table, relocs, symbols, resolve, base, size, offsets, stubs_at, got_at, zones,
          got_syms, stub_syms) -> dict:
    """Copy, relocate and protect the mapping at ``base`` (see :func:`load`)."""
    mem = (ctypes.c_char * size).from_address(base)
    for i, off in offsets.items():
        if sec.headers[i][1] == _PROGBITS:
            data = sec.data(i)
            mem[off:off + len(data)] = data
    got = base + got_at

    def address(k: int) -> int:
        name, _, shndx, value = table[k]
        if shndx == _UNDEF:
            if name == "_GLOBAL_OFFSET_TABLE_":
                return got
            found = resolve(name)
            if found is None:
                raise Unsupported(f"undefined symbol {name!r}")
            return found
        if shndx == _ABS:
            return value
        if shndx not in offsets:
            raise Unsupported(f"symbol {name!r} in a section that is not loaded")
        return base + offsets[shndx] + value

    slot = {}
    for n, k in enumerate(got_syms):
        slot[k] = 8 * n
        struct.pack_into("<Q", mem, got_at + 8 * n, address(k))
    stub = {}
    for n, k in enumerate(stub_syms):
        at = stubs_at + _STUB * n
        mem[at:at + _STUB] = b"\x49\xbb" + struct.pack("<Q", address(k)) + b"\x41\xff\xe3\x90\x90\x90"
        stub[k] = base + at
    for shndx, r_offset, kind, k, addend in relocs:
        _apply(mem, base, offsets[shndx] + r_offset, kind, k, addend, address, got, slot, stub)
    for start, end, prot in zones:
        lo, hi = start, -(-end // PAGE) * PAGE
        if hi > lo and _c().mprotect(base + lo, hi - lo, prot) != 0:
            raise Unsupported(f"mprotect failed (errno {ctypes.get_errno()})")
    defined = {name: (shndx, value) for name, _, shndx, value in table if shndx in offsets}
    missing = [sym for sym in symbols if sym not in defined]
    if missing:
        raise Unsupported(f"object lacks symbol {missing[0]}")
    return {sym: base + offsets[defined[sym][0]] + defined[sym][1] for sym in symbols}


def _apply(mem, base: int, at: int, kind: int, k: int, addend: int, address, got: int,
           slot: dict, stub: dict) -> None:
    """Write relocation ``kind`` of symbol ``k`` at offset ``at`` of the mapping."""
    place = base + at
    if kind in (_PC32, _PLT32):
        value, form = (stub.get(k) or address(k)) + addend - place, "<i"
    elif kind in _GOTPCRELX:
        value, form = got + slot[k] + addend - place, "<i"
    elif kind == _R64:
        value, form = address(k) + addend, "<Q"
    elif kind == _GOTOFF64:
        value, form = address(k) + addend - got, "<Q"
    elif kind == _GOTPC64:
        value, form = got + addend - place, "<Q"
    elif kind == _GOT64:
        value, form = slot[k] + addend, "<Q"
    else:
        raise Unsupported(f"relocation type {kind}")
    if form == "<Q":
        value &= 0xFFFFFFFFFFFFFFFF
    elif not -(1 << 31) <= value < 1 << 31:
        raise Unsupported(f"32-bit relocation (type {kind}) out of range")
    struct.pack_into(form, mem, at, value)
