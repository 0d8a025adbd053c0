"""Read the function symbols of an ELF library: .dynsym, .symtab and a separate debug file.

A small reader of its own (struct over an mmap) rather than a full ELF library: it only
needs section and segment headers, symbol tables and two notes, and it must be fast on
libraries with hundreds of thousands of symbols. The debug file is looked up the way bcc
does (build-id under /usr/lib/debug, then .gnu_debuglink with its CRC), so what is listed
here is what the loader can attach to.
"""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os
import struct
import zlib
from typing import Callable, Iterator

from .bpf_cache import KeptMemo, file_id
from .prologue import is_cheap_at, pair_offset
from ..errors import NotElf, UnsafePath
from ..safe_files import open_regular

SHT_SYMTAB, SHT_NOTE, SHT_NOBITS, SHT_DYNSYM = 2, 7, 8, 11
STT_OBJECT, STT_FUNC, STT_GNU_IFUNC = 1, 2, 10
PT_LOAD = 1
NT_GNU_BUILD_ID = 3
EM_X86_64 = 62
DEBUG_ROOT = "/usr/lib/debug"

EMULATED, OUT_OF_LINE, UNKNOWN = "emulated", "out of line", "unknown"
# What the C runtime's startup files put into every library: never a simulator's entry point.
CRT_HELPERS = frozenset({"_init", "_fini", "_start", "__do_global_dtors_aux", "frame_dummy",
                         "register_tm_clones", "deregister_tm_clones", "__libc_csu_init", "__libc_csu_fini"})



@dataclasses.dataclass(frozen=True)
class Function:
    """One probeable function of a library."""

    name: str          # as in the symbol table (mangled): what --sim-lib LIB:SYM takes
    address: int       # st_value (link-time virtual address)
    size: int
    source: str        # dynsym | symtab | debuginfo
    probe: str = UNKNOWN   # emulated | out of line | unknown: how a probe on its first instruction runs

    @property
    def demangled(self) -> str:
        return demangle(self.name)


@dataclasses.dataclass
class Listing:
    """What ``functions()`` found in one library."""

    path: str
    functions: list[Function]
    counts: dict[str, int]           # source -> functions first found there
    debug_file: str | None = None
    has_symtab: bool = False
    damaged: bool = False            # truncated: what lies past the end is missing


@dataclasses.dataclass(frozen=True)
class _Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


class ElfFile:
    """Read-only view of an ELF file (64- or 32-bit, either byte order)."""

    def __init__(self, path: str):
        self.path = path
        try:                    # no FIFO or device: a target's user names the libraries read here
            fd = open_regular(path)
        except UnsafePath as e:
            raise NotElf(e.message) from None
        with open(fd, "rb") as f:
            if os.fstat(f.fileno()).st_size < 64:
                raise NotElf(f"{path} is not an ELF file")
            self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self.mm[:4] != b"\x7fELF" or self.mm[4] not in (1, 2) or self.mm[5] not in (1, 2):
            self.mm.close()
            raise NotElf(f"{path} is not an ELF file")
        self.is64 = self.mm[4] == 2
        self.end = "<" if self.mm[5] == 1 else ">"
        hdr = struct.unpack_from(self.end + ("HHIQQQIHHHHHH" if self.is64 else "HHIIIIIHHHHHH"), self.mm, 16)
        self.etype, self.machine, phoff, shoff = hdr[0], hdr[1], hdr[4], hdr[5]   # etype 2: fixed addresses
        self.damaged = False        # headers or sections past the end of the file: truncated
        phentsize, phnum, shentsize, shnum, shstrndx = hdr[8], hdr[9], hdr[10], hdr[11], hdr[12]
        self.sections = self._sections(shoff, shentsize, shnum, shstrndx)
        self.loads = self._loads(phoff, phentsize, phnum)

    def close(self) -> None:
        self.mm.close()

    def __enter__(self) -> "ElfFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- headers ---------------------------------------------------------------
    def _sections(self, shoff: int, entsize: int, num: int, strndx: int) -> list[_Section]:
        if not shoff:
            return []
        if shoff + max(1, num) * entsize > len(self.mm):
            self.damaged = True
            return []
        fmt = self.end + ("IIQQQQIIQQ" if self.is64 else "IIIIIIIIII")
        first = struct.unpack_from(fmt, self.mm, shoff)
        num = num or first[5]               # extended numbering: the count lives in section 0
        strndx = first[6] if strndx == 0xFFFF else strndx
        raw = []
        for i in range(num):
            if shoff + (i + 1) * entsize > len(self.mm):
                break
            raw.append(struct.unpack_from(fmt, self.mm, shoff + i * entsize))
        names = raw[strndx] if strndx < len(raw) else None
        self.damaged = any(r[1] != SHT_NOBITS and r[4] + r[5] > len(self.mm) for r in raw)
        return [_Section(self._cstr(names[4] + r[0]) if names else "", r[1], r[3], r[4], r[5], r[6], r[9])
                for r in raw]

    def _loads(self, phoff: int, entsize: int, num: int) -> list[tuple[int, int, int]]:
        """(vaddr, filesz, offset) of each PT_LOAD segment."""
        out = []
        for i in range(num):
            at = phoff + i * entsize
            if at + entsize > len(self.mm):
                break
            if self.is64:
                typ, _, off, vaddr, _, filesz, _, _ = struct.unpack_from(self.end + "IIQQQQQQ", self.mm, at)
            else:
                typ, off, vaddr, _, filesz, _, _, _ = struct.unpack_from(self.end + "IIIIIIII", self.mm, at)
            if typ == PT_LOAD:
                out.append((vaddr, filesz, off))
        return out

    def _cstr(self, at: int) -> str:
        if not 0 <= at < len(self.mm):      # a damaged table points anywhere
            return ""
        end = self.mm.find(b"\0", at)
        return self.mm[at:end if end >= 0 else len(self.mm)].decode(errors="replace")

    def section(self, name: str) -> _Section | None:
        return next((s for s in self.sections if s.name == name and s.type != SHT_NOBITS), None)

    # -- symbols -----------------------------------------------------------------
    def symbol_tables(self) -> list[tuple[str, _Section, _Section]]:
        """(source name, symbol section, its string table) for .dynsym and .symtab with contents."""
        out = []
        for typ, source in ((SHT_DYNSYM, "dynsym"), (SHT_SYMTAB, "symtab")):
            for s in self.sections:
                if s.type == typ and s.link < len(self.sections) and s.size:
                    out.append((source, s, self.sections[s.link]))
        return out

    def raw_symbols(self, sec: _Section) -> Iterator[tuple[int, int, int, int, int]]:
        """(st_name, st_value, st_size, st_info, st_shndx) of each entry of a symbol section."""
        size = 24 if self.is64 else 16
        end = min(sec.offset + sec.size, len(self.mm))
        end -= (end - sec.offset) % size
        if end <= sec.offset:
            return
        data = memoryview(self.mm)[sec.offset:end]
        try:
            if self.is64:
                for name, info, _, shndx, value, sz in struct.iter_unpack(self.end + "IBBHQQ", data):
                    yield name, value, sz, info, shndx
            else:
                for name, value, sz, info, _, shndx in struct.iter_unpack(self.end + "IIIBBH", data):
                    yield name, value, sz, info, shndx
        finally:
            data.release()

    def functions(self, source: str, sec: _Section, strtab: _Section) -> Iterator[Function]:
        """Defined functions of one symbol table, less the C runtime's startup helpers."""
        for name, value, size, info, shndx in self.raw_symbols(sec):
            if info & 0xF in (STT_FUNC, STT_GNU_IFUNC) and shndx != 0 and value and name:
                fn = self._cstr(strtab.offset + name)
                if fn and fn not in CRT_HELPERS:
                    yield Function(fn, value, size, source)

    # -- code --------------------------------------------------------------------
    def file_offset(self, addr: int) -> int | None:
        """Where a link-time address lies in the file (None: not in a loaded segment)."""
        for vaddr, filesz, off in self.loads:
            if vaddr <= addr < vaddr + filesz:
                return addr - vaddr + off
        return None

    def code(self, addr: int, n: int = 16) -> bytes:
        off = self.file_offset(addr)
        return b"" if off is None else self.mm[off:off + n]

    def probe_kind(self, addr: int) -> str:
        """How a `--sim-lib` probe on the function at ``addr`` runs: its entry and return pair
        sits past a CET `endbr64` and other instructions that leave rsp alone (prologue.py
        ``pair_offset``; x86-64 only, else unknown)."""
        if self.machine != EM_X86_64:
            return UNKNOWN
        code = self.code(addr, 32)
        return UNKNOWN if not code else EMULATED if is_cheap_at(code, pair_offset(code)) else OUT_OF_LINE

    # -- debug file links --------------------------------------------------------------
    def build_id(self) -> str | None:
        for s in self.sections:
            if s.type != SHT_NOTE:
                continue
            at, end = s.offset, min(s.offset + s.size, len(self.mm))
            while at + 12 <= end:
                namesz, descsz, typ = struct.unpack_from(self.end + "III", self.mm, at)
                name_at = at + 12
                desc_at = name_at + (namesz + 3) // 4 * 4
                if typ == NT_GNU_BUILD_ID and self.mm[name_at:name_at + namesz] == b"GNU\0":
                    return self.mm[desc_at:desc_at + descsz].hex()
                at = desc_at + (descsz + 3) // 4 * 4
        return None

    def debuglink(self) -> tuple[str, int] | None:
        s = self.section(".gnu_debuglink")
        if s is None:
            return None
        name = self._cstr(s.offset)
        crc_at = s.offset + (len(name.encode()) + 1 + 3) // 4 * 4
        if not name or crc_at + 4 > s.offset + s.size:
            return None
        return name, struct.unpack_from(self.end + "I", self.mm, crc_at)[0]


def find_debug_file(elf: ElfFile) -> str | None:
    """The separate debug file of a library, as bcc finds it: build-id, then .gnu_debuglink.

    Args:
        elf: the opened library.

    Returns:
        A path, or None when there is none (or its CRC does not match the link).
    """
    bid = elf.build_id()
    if bid and len(bid) > 2:
        p = os.path.join(DEBUG_ROOT, ".build-id", bid[:2], bid[2:] + ".debug")
        if os.path.isfile(p):
            return p
    link = elf.debuglink()
    if link is None:
        return None
    name, crc = link
    here = os.path.dirname(os.path.abspath(elf.path))
    for p in (os.path.join(here, name), os.path.join(here, ".debug", name), DEBUG_ROOT + os.path.join(here, name)):
        if os.path.isfile(p) and p != os.path.abspath(elf.path) and _crc32(p) == crc:
            return p
    return None


def _crc32(path: str) -> int:
    crc = 0
    try:
        fd = open_regular(path)
    except UnsafePath:
        return -1               # never a CRC32: a debug file that is not a regular file is not used
    with open(fd, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def functions(path: str, keep: Callable[[Function], bool] | None = None) -> Listing:
    """Every probeable function of a library: .dynsym first, then .symtab, then the debug file.

    A name is listed once, with the table it was first found in.

    Args:
        path: the library file.
        keep: lists only the functions it accepts (``counts`` still counts all of them);
            their first instruction is decoded, which costs time on big libraries.

    Raises:
        OSError: unreadable. NotElf: not an ELF file.
    """
    with ElfFile(path) as elf:
        seen: dict[str, Function] = {}
        _collect(elf, None, seen)
        dbg = find_debug_file(elf)
        if dbg:
            try:
                with ElfFile(dbg) as d:
                    _collect(d, "debuginfo", seen)
            except (OSError, NotElf, struct.error):
                dbg = None
        counts: dict[str, int] = {}
        for fn in seen.values():
            counts[fn.source] = counts.get(fn.source, 0) + 1
        kept = [dataclasses.replace(fn, probe=elf.probe_kind(fn.address))
                for fn in sorted(seen.values(), key=lambda f: f.name) if keep is None or keep(fn)]
        has_symtab = any(s.type == SHT_SYMTAB for s in elf.sections)
    return Listing(path, kept, counts, dbg, has_symtab, elf.damaged)


def _collect(elf: ElfFile, source: str | None, seen: dict) -> None:
    for src, sec, strtab in elf.symbol_tables():
        for fn in elf.functions(source or src, sec, strtab):
            seen.setdefault(fn.name, fn)


# -- does a library define these names? (cheap, for every mapped library) -------------
DEFINES = KeptMemo("elf-defines")


def defines(path: str, names: frozenset[str]) -> dict[str, int]:
    """Which of ``names`` a library defines as functions, with where their code is in the file.

    Cheap enough for every mapped library: a byte search of the string tables rules out
    almost every file, and only a hit walks the symbol tables. Kept per file version (path,
    device, inode, mtime, size) in this process and for the next session (bpf_cache.KeptMemo:
    a real program maps ~250 libraries, ~0.7 s to search), so rescans cost one stat.

    Args:
        path: the library file as this process can open it.
        names: exact symbol names.

    Returns:
        name -> file offset of its first byte; empty when it defines none (or is unreadable
        or not ELF).
    """
    try:
        key = (*file_id(path), tuple(sorted(names)))
    except OSError:
        return {}
    return DEFINES.get(key, lambda: _defined_in(path, names))


def _defined_in(path: str, names: frozenset[str]) -> dict[str, int]:
    try:
        with ElfFile(path) as elf:
            return _defined(elf, names)
    except (OSError, NotElf, struct.error, ValueError):
        return {}


def _defined(elf: ElfFile, names: frozenset[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in symbol_values(elf, names, (STT_FUNC, STT_GNU_IFUNC)):
        off = elf.file_offset(value)
        if off is not None:
            out.setdefault(name, off)
    return out


def symbol_values(elf: ElfFile, names: frozenset[str], kinds: tuple[int, ...]) -> Iterator[tuple[str, int]]:
    """(name, link-time address) of each defined symbol of the given types (STT_*) spelled as
    one of ``names``, in table order (a name may come more than once)."""
    for _, sec, strtab in elf.symbol_tables():
        offsets = _name_offsets(elf, strtab, names)
        if not offsets:
            continue
        for name, value, _, info, shndx in elf.raw_symbols(sec):
            if name in offsets and info & 0xF in kinds and shndx != 0 and value:
                yield offsets[name], value


def _name_offsets(elf: ElfFile, strtab: _Section, names: frozenset[str]) -> dict[int, str]:
    """st_name values that spell one of ``names`` (a name may be the tail of a longer string).

    One pass over the table for the names' common prefix (``mj_``) when they share one of
    3 bytes or more: string tables of big libraries run to hundreds of MB.
    """
    out = {}
    lo, hi = min(strtab.offset, len(elf.mm)), min(strtab.offset + strtab.size, len(elf.mm))
    prefix = os.path.commonprefix(sorted(names)).encode()
    groups = [(prefix, names)] if len(prefix) >= 3 else [(n.encode(), {n}) for n in names]
    wanted = {n.encode() + b"\0": n for n in names}
    longest = max(map(len, wanted))
    for needle, _ in groups:
        at = elf.mm.find(needle, lo, hi)
        while at >= 0:
            tail = elf.mm[at:min(at + longest, hi)]
            name = wanted.get(tail[:tail.find(b"\0") + 1])
            if name is not None:
                out[at - lo] = name
            at = elf.mm.find(needle, at + 1, hi)
    return out


# -- demangling -------------------------------------------------------------------
_CXA = None


def demangle(name: str) -> str:
    """The C++ demangled form of a symbol name; the name itself when it is not mangled."""
    global _CXA
    if not name.startswith("_Z"):
        return name
    if _CXA is None:
        _CXA = _load_demangler()
    return _CXA(name) if _CXA else name


def _load_demangler():
    """libstdc++'s own demangler (what c++filt uses), through ctypes; False if absent."""
    try:
        cxx = ctypes.CDLL("libstdc++.so.6")
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    fn = cxx.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]

    def run(name: str) -> str:
        status = ctypes.c_int(-1)
        p = fn(name.encode(), None, None, ctypes.byref(status))
        if not p:
            return name
        try:
            return ctypes.string_at(p).decode(errors="replace") if status.value == 0 else name
        finally:
            libc.free(p)

    return run
