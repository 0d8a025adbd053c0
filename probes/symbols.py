"""Resolve a probe's symbol in a library the way attaching will, before attaching.

Mangled C++ names of TensorFlow carry absl's versioned inline namespace
(``absl::lts_20250814``), which changes between builds, so the catalog matches them by
an anchored regex. Attaching and detaching then use the exact name.

A user's ``--sim-lib`` symbol is checked the same way, so a misspelled one is reported
with a way to find the right name instead of bcc's "could not determine address".
"""

from __future__ import annotations

import dataclasses
import os

from . import bpf_cache, proc_maps
from .catalog import ProbeSpec, is_user_spec
from ..errors import SymbolMissing

# bcc walks a library's whole symbol table for each symbol it resolves (libtorch_cpu.so:
# ~20 ms a call, a dozen calls per attach), so offsets are kept per file version, in this
# process and in the compile cache's directory for the next session.
OFFSETS = bpf_cache.KeptMemo("symbol-offsets")


def offset(bcc, path: str, symbol: str) -> int:
    """The file offset of ``symbol`` in ``path`` as bcc resolves it for attach_uprobe.

    Raises:
        Exception: bcc's, when the library defines no such function (or is unreadable).
    """
    return OFFSETS.get((*bpf_cache.file_id(path), symbol),
                       lambda: bcc.BPF._check_path_symbol(path.encode(), symbol.encode(), None, -1)[1])


def resolve(bcc, spec: ProbeSpec, path: str) -> ProbeSpec:
    """The spec with ``symbol`` made exact; the spec itself when it is not a regex.

    Args:
        bcc: the imported bcc module (its symbol walker reads .dynsym and .symtab).
        spec: a catalog entry.
        path: the library file as this process can open it.

    Raises:
        SymbolMissing: no match, or matches at several addresses (ambiguous).
    """
    if not spec.sym_re:
        if is_user_spec(spec):
            check(bcc, path, spec.symbol)
        return spec
    found = bcc.BPF.get_user_functions_and_addresses(path.encode(), spec.symbol.encode())
    by_addr = {addr: name.decode() for name, addr in found}
    if not by_addr:
        raise SymbolMissing(f"this build has no symbol matching {spec.symbol}")
    if len(by_addr) > 1:
        raise SymbolMissing(f"{len(by_addr)} functions match {spec.symbol}: ambiguous, not probed")
    return dataclasses.replace(spec, symbol=next(iter(by_addr.values())), sym_re=False)


def check(bcc, path: str, symbol: str) -> None:
    """Raise SymbolMissing unless bcc resolves ``symbol`` in ``path`` as attach_uprobe will.

    bcc looks in .dynsym, .symtab and a separate debug file, and takes functions only.

    Args:
        bcc: the imported bcc module (no BPF program is needed).
        path: the library file as this process can open it.
        symbol: the exact (mangled) name.
    """
    try:
        offset(bcc, path, symbol)
    except Exception:  # bcc raises a bare Exception
        raise SymbolMissing(f"{os.path.basename(path)} defines no function {symbol}; list them with "
                            f"`rlscope-top symbols {path}`") from None


DELETED = " (deleted)"


def target_file(pid: int, path: str) -> str:
    """A path from /proc/PID/maps as this process can open it: through the target's root when
    it runs in another mount namespace, and a library whose file was deleted or replaced since
    it was loaded (``pip install -U torch`` under a running job) through the target's own
    mapping of it, /proc/PID/map_files/START-END: that opens the inode the process runs, and a
    uprobe placed by that path fires in it (the new file at the old path is another inode)."""
    if path.endswith(DELETED):
        for r in proc_maps.exec_files(pid):
            if r.path == path:
                return f"/proc/{pid}/map_files/{r.start:x}-{r.end:x}"
        return path
    return path if os.path.exists(path) else f"/proc/{pid}/root{path}"
