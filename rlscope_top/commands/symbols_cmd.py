"""`rlscope-top symbols LIB [PATTERN]`: the functions of a library that --sim-lib can probe.

Also the up-front check of ``--sim-lib LIB:SYM`` against the libraries a target maps, so
a misspelled symbol ends the command before the long BPF compile, with a way to find the
right name.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import os
import struct
import sys
from typing import Callable

from ..errors import NoSuchProcess, SymbolError
from ..probes import catalog
from ..probes.elf_symbols import EMULATED, Function, Listing, NotElf, functions
from ..probes.loader import BccUnavailable, import_bcc
from ..probes.maps import mapped_files
from ..probes.symbols import SymbolMissing, check, target_file

COLUMNS = ("SYMBOL", "SIZE", "FROM", "PROBE", "DEMANGLED")


def run(lib: str, pattern: str | None = None, pid: int | None = None, as_json: bool = False,
        out=None, err=None) -> int:
    """List a library's probeable functions, one row each.

    Args:
        lib: a path (absolute or relative to the cwd), or with ``pid`` a library it maps.
        pattern: a glob, or a substring, of the mangled or demangled name (case-insensitive).
        pid: a process whose mapped libraries ``lib`` names.
        as_json: one JSON document instead of the table.

    Returns:
        0 (rows were printed).

    Raises:
        SymbolError: LIB unreadable, not ELF, without symbols, or nothing matches PATTERN.
        NoSuchProcess: ``pid`` does not exist.
    """
    out, err = out or sys.stdout, err or sys.stderr
    shown, path = locate(lib, pid)
    listing = read(shown, path, pattern)
    if as_json:
        json.dump(_document(shown, listing, pattern), out, indent=1)
        out.write("\n")
    else:
        _table(listing.functions, out)
        err.write(_footer(shown, listing) + "\n")
    return 0


def locate(lib: str, pid: int | None) -> tuple[str, str]:
    """(the path to show, the path to open) of LIB.

    Raises:
        SymbolError, NoSuchProcess.
    """
    if pid is None:
        return os.path.abspath(lib), os.path.abspath(lib)
    if not os.path.isdir(f"/proc/{pid}"):
        raise NoSuchProcess(f"no process with PID {pid}", pid=pid,
                            hint="check the PID with `ps -ef`, or give the library's path without --pid")
    hits = _mapped_matches(lib, sorted(mapped_files(pid)))
    if len(hits) == 1:
        return hits[0], target_file(pid, hits[0])
    if len(hits) > 1:
        raise SymbolError(f"{len(hits)} libraries mapped by PID {pid} match {lib}: "
                          f"{', '.join(os.path.basename(h) for h in hits)[:200]}", pid=pid,
                          hint=f"give one by its full path, e.g. rlscope-top symbols {hits[0]}")
    if os.path.exists(lib):          # a path the process does not map: list it all the same
        return os.path.abspath(lib), os.path.abspath(lib)
    raise SymbolError(f"PID {pid} maps no library named {lib}", pid=pid,
                      hint=f"see what it maps with `grep -F .so /proc/{pid}/maps`, or give the library's path")


def _mapped_matches(lib: str, mapped: list[str]) -> list[str]:
    """Mapped paths LIB names: the same path, else the same basename, else --sim-lib's prefix rule."""
    full = os.path.abspath(lib)
    if full in mapped:
        return [full]
    same = [p for p in mapped if os.path.basename(p) == os.path.basename(lib)]
    if same:
        return same
    spec = catalog.sim_lib_specs(lib, ["_"])[0]     # what --sim-lib LIB:SYM would probe
    return [p for p in mapped if spec.matches(p)]


def read(shown: str, path: str, pattern: str | None) -> Listing:
    """The functions of a library that match a pattern.

    Raises:
        SymbolError: with a one-line reason and a hint.
    """
    try:
        listing = functions(path, keep=matcher(pattern))
    except IsADirectoryError:
        raise SymbolError(f"{shown} is a directory", hint="give a library file, e.g. .../libmysim.so") from None
    except FileNotFoundError:
        raise SymbolError(f"cannot read {shown}: no such file",
                          hint="give the library's path (absolute or relative to the current directory), "
                               "or its name with --pid PID of a process that maps it") from None
    except OSError as e:
        raise SymbolError(f"cannot read {shown}: {e.strerror or e}",
                          hint="check the path and its permissions (run as root for other users' files)") from None
    except (NotElf, ValueError, struct.error):
        raise SymbolError(f"{shown} is not an ELF file",
                          hint="give a shared library (.so) or an executable; `file LIB` says what it is") from None
    total = sum(listing.counts.values())
    if total == 0 and listing.damaged:
        raise SymbolError(f"{shown} is truncated or damaged: its section headers or symbol tables lie past "
                          "the end of the file", hint="give the library the process loaded, or copy it again")
    if total == 0:
        raise SymbolError(f"{shown} has no function symbols: it is stripped (no .symtab, no exported functions "
                          "in .dynsym) and no debug file was found",
                          hint="install its debug symbols (the -dbgsym/-debuginfo package puts them under "
                               "/usr/lib/debug), or rebuild it with -g and without -s")
    if not listing.functions:
        raise SymbolError(f"no function in {os.path.basename(shown)} matches {pattern!r} ({total} functions)",
                          hint=f"try a broader pattern, e.g. '*{_pattern_stem(pattern)}*', or none to list all {total}")
    return listing


def matcher(pattern: str | None) -> Callable[[Function], bool] | None:
    """A glob (with * ? or [) or else a substring, matched against the mangled and the
    demangled name, ignoring case."""
    if not pattern:
        return None
    pat = pattern.lower()
    if any(c in pat for c in "*?["):
        test = lambda s: fnmatch.fnmatchcase(s.lower(), pat)   # noqa: E731
    else:
        test = lambda s: pat in s.lower()                      # noqa: E731
    return lambda fn: test(fn.name) or (fn.name.startswith("_Z") and test(fn.demangled))


def _pattern_stem(pattern: str | None) -> str:
    """The first half of a pattern's literal characters (at least 3): a broader pattern to suggest."""
    stem = "".join(c for c in (pattern or "") if c not in "*?[]")
    return stem[: max(3, len(stem) // 2)] or "step"


def _rows(fns: list[Function]) -> list[tuple[str, ...]]:
    return [(f.name, str(f.size), f.source, f.probe, f.demangled) for f in fns]


def _table(fns: list[Function], out) -> None:
    rows = [COLUMNS, *_rows(fns)]
    widths = [min(60, max(len(r[i]) for r in rows)) for i in range(len(COLUMNS) - 1)]
    for r in rows:
        cells = [r[0].ljust(widths[0]), r[1].rjust(widths[1]), r[2].ljust(widths[2]), r[3].ljust(widths[3]), r[4]]
        out.write("  ".join(cells) + "\n")


def _footer(shown: str, listing: Listing) -> str:
    total = sum(listing.counts.values())
    where = ", ".join(f"{k} {v}" for k, v in listing.counts.items())
    dbg = f"; debug file {listing.debug_file}" if listing.debug_file else ""
    fns = listing.functions    # suggest a C name with a cheap first instruction if there is one
    first = next((f for f in fns if f.probe == EMULATED and not f.name.startswith("_Z")),
                 next((f for f in fns if f.probe == EMULATED), fns[0]))
    return (f"{len(listing.functions)} of {total} functions in {shown} ({where}{dbg}). "
            f"PROBE: 'emulated' costs far less a hit than 'out of line'. "
            f"Probe one with --sim-lib {os.path.basename(shown)}:{first.name}")


def _document(shown: str, listing: Listing, pattern: str | None) -> dict:
    return {"library": shown, "debug_file": listing.debug_file, "pattern": pattern,
            "counts": listing.counts, "total": sum(listing.counts.values()),
            "functions": [{"symbol": f.name, "demangled": f.demangled, "size": f.size, "address": f.address,
                           "found_in": f.source, "probe": f.probe} for f in listing.functions]}


# -- --sim-lib, checked before anything is compiled --------------------------------
def check_sim_libs(pid: int, sim_libs: list[tuple[str, list[str]]]) -> None:
    """Refuse ``--sim-lib LIB:SYM`` when PID maps LIB and no mapped copy defines SYM.

    Uses bcc's resolution, as attaching will. A LIB that is not mapped yet is left to the
    session, which warns when it is loaded without SYM.

    Raises:
        SymbolError: with the symbols that are missing and how to list the right ones.
    """
    if not sim_libs:
        return
    try:
        bcc = import_bcc()
    except BccUnavailable:       # the session reports that with its own error
        return
    mapped = sorted(mapped_files(pid))
    for lib, syms in sim_libs:
        specs = catalog.sim_lib_specs(lib, syms)
        paths = [p for p in mapped if specs[0].matches(p)]
        if not paths:
            _check_loadable(lib, pid)
            continue
        missing = [s.symbol for s in specs if not any(_resolves(bcc, pid, p, s.symbol) for p in paths)]
        if missing:
            raise SymbolError(_missing_message(lib, paths[0], pid, missing), pid=pid,
                              hint=f"list its functions with `rlscope-top symbols {paths[0]}` "
                                   f"(or `rlscope-top symbols {os.path.basename(paths[0])} --pid {pid}`) "
                                   "and give --sim-lib a name from the SYMBOL column")


def _check_loadable(lib: str, pid: int) -> None:
    """A LIB named by its path must exist, or it can never be loaded (the session would wait
    for it in silence)."""
    if "/" in lib and not os.path.isfile(lib):
        raise SymbolError(f"--sim-lib {lib}: no such file", pid=pid,
                          hint="give the library's path as PID maps it, or just its name "
                               f"(e.g. {os.path.basename(lib)}:SYM); `rlscope-top doctor {pid}` lists what it maps")


def not_mapped_note(lib: str, mapped: list[str]) -> str:
    """The warning for a --sim-lib LIB the target does not map (yet), with the mapped
    libraries whose names are close to it (a misspelling shows at once)."""
    by_stem: dict[str, list[str]] = {}
    for name in sorted({os.path.basename(p) for p in mapped}):
        by_stem.setdefault(_stem(name), []).append(name)
    close = [n for st in difflib.get_close_matches(_stem(os.path.basename(lib)), by_stem, n=2, cutoff=0.75)
             for n in by_stem[st]]
    like = f" (it maps {', '.join(close)})" if close else ""
    return (f"--sim-lib {lib}: not loaded (yet){like}; its probes attach when the target loads it")


def _stem(name: str) -> str:
    """A library's name without ``.so`` and its version (libmujoco.so.4.0.0: libmujoco)."""
    return name.split(".so")[0]


def _resolves(bcc, pid: int, path: str, symbol: str) -> bool:
    try:
        check(bcc, target_file(pid, path), symbol)
    except SymbolMissing:
        return False
    return True


def _missing_message(lib: str, path: str, pid: int, missing: list[str]) -> str:
    msg = (f"--sim-lib {lib}: {os.path.basename(path)} (mapped by PID {pid}) defines no function "
           f"{', '.join(missing)}")
    try:
        names = [f.name for f in functions(target_file(pid, path)).functions]
    except (OSError, NotElf, ValueError):
        return msg
    close = [c for m in missing for c in difflib.get_close_matches(m, names, n=1)]
    return msg + (f" (did you mean {', '.join(close)}?)" if close else "")
