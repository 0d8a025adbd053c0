"""Find copies of a catalog library linked statically into other libraries.

envpool links MuJoCo into each of its modules (``envpool/mujoco/mujoco_gym_envpool.so``
exports ``mj_step``), so the MuJoCo probes must also go where a mapped library *defines*
those symbols, not only into ``libmujoco.so*``. Two costs are kept bounded:

- Reading: the loader rescans /proc/PID/maps every 0.5 s and a training process maps
  a hundred libraries or more, so which library defines what is decided once per file
  (probes/elf_symbols.defines caches it by path, inode and mtime).
- Probes: ``import envpool`` maps all five of its MuJoCo modules, and probing every copy
  would spend the whole probe budget (catalog.MAX_PROBES) on four copies that never run.
  A copy is taken only once the target has run it: the page holding one of the symbols
  is present in the target's page table (/proc/PID/pagemap). Code of an imported but
  unused module is never faulted in; the first ``make``/``reset`` of an env faults it.
"""

from __future__ import annotations

import os
import struct

from . import proc_maps
from .elf_symbols import defines
from .symbols import target_file

PAGE = os.sysconf("SC_PAGE_SIZE")


class StaticCopies:
    """Which mapped libraries carry (and have run) their own copy of some symbols."""

    def __init__(self, pid: int, names: frozenset[str]):
        """
        Args:
            pid: the target process.
            names: the symbols to look for (e.g. MuJoCo's mj_step, mj_forward, ...).
        """
        self.pid = pid
        self.names = names
        self._active: dict[str, frozenset[str]] = {}   # path -> names, once the copy ran
        self._skip: dict[str, bool] = {}                # path -> matched by name (asked once)
        self._where: dict[str, list[int]] = {}          # path -> the symbols' addresses in the target
        self._none: dict[str, int] = {}                 # path -> the inode mapped when it defined none

    def scan(self, paths: set[str], skip=lambda path: False) -> dict[str, frozenset[str]]:
        """The libraries among ``paths`` whose copy of ``names`` the target has run.

        Args:
            paths: mapped file paths as the target sees them.
            skip: paths that need no look (those the catalog already matches by name).

        Returns:
            path -> the names it defines; a library stays in once it is in.
        """
        if not self.names:
            return {}
        waiting: dict[str, dict[str, int]] = {}
        inodes = {r.path: r.inode for r in proc_maps.exec_files(self.pid)}
        for p in paths:
            if p not in self._skip:
                self._skip[p] = skip(p)
            if p in self._active or self._skip[p] or (p in self._none and self._none[p] == inodes.get(p)):
                continue          # the same mapped file defined none at the last look: no stat, no read
            found = defines(target_file(self.pid, p), self.names)
            if found:
                waiting[p] = found
            elif p in inodes:
                self._none[p] = inodes[p]
        for gone in self._where.keys() - paths:     # unmapped: a new mapping may lie elsewhere
            del self._where[gone]
        if waiting:
            ran = self._ran(waiting)
            for p in ran:
                self._active[p] = frozenset(waiting[p])
        return {p: n for p, n in self._active.items() if p in paths}

    def _ran(self, libs: dict[str, dict[str, int]]) -> list[str]:
        """The libraries in which a page of one of the symbols is present in the target."""
        if libs.keys() - self._where.keys():     # where they are mapped: read once, not every scan
            maps = _file_maps(self.pid, set(libs))
            for path in libs.keys() - self._where.keys():
                self._where[path] = _addresses(libs[path], maps.get(path, []))
        out = []
        try:
            pagemap = open(f"/proc/{self.pid}/pagemap", "rb")
        except OSError:            # cannot tell: take every copy (the probe limit still holds)
            return list(libs)
        with pagemap:
            for path in libs:
                if any(_present(pagemap, va) for va in self._where[path]):
                    out.append(path)
        return out


def _file_maps(pid: int, paths: set[str]) -> dict[str, list[tuple[int, int, int]]]:
    """path -> (start, end, file offset) of each mapping of ``paths`` in a process."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for r in proc_maps.regions(pid):
        if r.path in paths:
            out.setdefault(r.path, []).append((r.start, r.end, r.offset))
    return out


def _addresses(syms: dict[str, int], maps: list[tuple[int, int, int]]) -> list[int]:
    """Where the symbols' first bytes (file offsets) are mapped in the target."""
    return [lo + off - moff for off in syms.values() for lo, hi, moff in maps if moff <= off < moff + (hi - lo)]


def _present(pagemap, va: int) -> bool:
    """Bit 63 of a page's pagemap entry: the page is in the process's page table."""
    try:
        pagemap.seek(va // PAGE * 8)
        entry = pagemap.read(8)
    except (OSError, ValueError, OverflowError):
        return False
    return len(entry) == 8 and bool(struct.unpack("<Q", entry)[0] >> 63)
