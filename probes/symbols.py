"""Resolve a catalog probe whose symbol is a regex to the one name a library defines.

Mangled C++ names of TensorFlow carry absl's versioned inline namespace
(``absl::lts_20250814``), which changes between builds, so the catalog matches them by
an anchored regex. Attaching and detaching then use the exact name.
"""

from __future__ import annotations

import dataclasses

from .catalog import ProbeSpec


class SymbolMissing(Exception):
    """The library defines no (or more than one distinct) function matching a pattern."""


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
        return spec
    found = bcc.BPF.get_user_functions_and_addresses(path.encode(), spec.symbol.encode())
    by_addr = {addr: name.decode() for name, addr in found}
    if not by_addr:
        raise SymbolMissing(f"this build has no symbol matching {spec.symbol}")
    if len(by_addr) > 1:
        raise SymbolMissing(f"{len(by_addr)} functions match {spec.symbol}: ambiguous, not probed")
    return dataclasses.replace(spec, symbol=next(iter(by_addr.values())), sym_re=False)
