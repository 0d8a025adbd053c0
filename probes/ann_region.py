"""The monitor's side of the annotation region (rlscope_top/annotate.py writes it).

An annotated process maps a memfd named ``rlscope-top-ops``; it shows in
/proc/PID/maps, and root can open the same pages through /proc/PID/map_files.
The monitor maps them too, reads the operation names, and sets the epoch byte
that tells the process to log its annotations. The kernel reads the per-thread
logs itself (probes/bpf_program.c), so nothing here runs per annotation.
"""

from __future__ import annotations

import mmap
import os
import struct

from . import proc_maps
from ..annotate import (ATTACHED_OFF, MAGIC, MEMFD_NAME, NAME_SIZE, NAMES_OFF, NNAMES_OFF,
                        REGION_SIZE, VERSION)

KIND_NAMES = {0: "", 1: "simulation"}


def find_memfd(pid: int, name: str) -> tuple[int, str] | None:
    """(address, map_files path) of the memfd mapping called ``name`` in ``pid``, or None."""
    want = f"/memfd:{name}"
    for r in proc_maps.named(pid, want, f"{want} (deleted)"):
        return r.start, f"/proc/{pid}/map_files/{r.start:x}-{r.end:x}"
    return None


def find(pid: int) -> tuple[int, str] | None:
    """(address, map_files path) of the process's annotation region, or None."""
    return find_memfd(pid, MEMFD_NAME)


class Region:
    """An open annotation region of one process."""

    def __init__(self, pid: int, address: int, path: str):
        self.pid, self.address = pid, address
        fd = os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, REGION_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        magic, version = struct.unpack_from("<8sI", self.mm, 0)
        if magic != MAGIC or version != VERSION:
            self.mm.close()
            raise ValueError(f"annotation region of PID {pid} has format {magic!r}/{version}, "
                             f"this rlscope-top reads {MAGIC!r}/{VERSION}")

    def attach(self) -> int:
        """Start logging in the target with a new epoch (threads reset their stacks)."""
        epoch = self.mm[ATTACHED_OFF] % 255 + 1
        self.mm[ATTACHED_OFF] = epoch
        return epoch

    def detach(self) -> None:
        """Stop the target's logging; its annotations go back to costing a flag check."""
        try:
            self.mm[ATTACHED_OFF] = 0
            self.mm.close()
        except (ValueError, OSError):
            pass

    def names(self) -> dict[int, tuple[str, str]]:
        """Operation id -> (name, kind) for every name the process has published."""
        n = struct.unpack_from("<I", self.mm, NNAMES_OFF)[0]
        out = {}
        for i in range(min(n, 1024)):
            raw = self.mm[NAMES_OFF + i * NAME_SIZE:NAMES_OFF + (i + 1) * NAME_SIZE]
            name = raw[1:].split(b"\0", 1)[0].decode("utf-8", "replace")
            out[i + 1] = (name, KIND_NAMES.get(raw[0], ""))
        return out


def open_region(pid: int) -> Region | None:
    """Open the region if the process has one (None if it has none, or it vanished)."""
    found = find(pid)
    if found is None:
        return None
    try:
        return Region(pid, *found)
    except (OSError, ValueError):
        return None
