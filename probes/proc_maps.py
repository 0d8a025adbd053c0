"""A process's /proc/PID/maps, parsed, and read once per scan.

The collector's scan (every 0.5 s) asks several questions of the same file: which libraries
are mapped, where their code lies, where the uprobes page is, whether the annotation region
is there. A training process maps ~1,300 regions (torch, TensorFlow and JAX side by side), so
each read costs ~2 ms in the kernel and as much again to parse. Inside ``one_read()`` they
share one read per process; outside it every call reads afresh.
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import NamedTuple


class Region(NamedTuple):
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str          # '' for an anonymous mapping; '[uprobes]', '/memfd:NAME (deleted)', ...


_scope = threading.local()


@contextlib.contextmanager
def one_read():
    """Within this block each process's maps are read once (on this thread)."""
    outer = getattr(_scope, "cache", None)
    if outer is None:
        _scope.cache = {}
    try:
        yield
    finally:
        if outer is None:
            _scope.cache = None


def text(pid: int) -> str:
    """The process's /proc/PID/maps ('' if it is gone or unreadable)."""
    return _read(pid)["text"]


def _read(pid: int) -> dict:
    cache = getattr(_scope, "cache", None)
    if cache is not None and pid in cache:
        return cache[pid]
    try:
        with open(f"/proc/{pid}/maps") as f:
            got = {"text": f.read()}
    except OSError:
        got = {"text": ""}
    if cache is not None:
        cache[pid] = got
    return got


def stamp(pids) -> tuple[tuple[int, int, int], ...]:
    """A cheap sign that processes' mappings may have changed what a scan looks for: each one's
    executable library code and its shared memory in kB (/proc/PID/status VmLib and RssShmem, no
    walk of its ~1,300 regions; -1 if gone). A dlopen changes the first, a memfd region (the
    annotation region, the GPU agent's) the second. The heap does not move them: the whole
    mapped size did, and a replay buffer filling up (tianshou DQN, ~150 kB/s) made every scan a
    full read of the maps (2.2 ms each). A library swapped for one of the same size does not."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if line.startswith(("VmLib:", "RssShmem:")))
            out.append((pid, int(fields["VmLib"].split()[0]), int(fields.get("RssShmem", "0 kB").split()[0])))
        except (OSError, ValueError, KeyError, IndexError):
            out.append((pid, -1, -1))
    return tuple(out)


def regions(pid: int) -> list[Region]:
    """The process's mappings (empty if it is gone or unreadable)."""
    return parse(text(pid).splitlines())


def parse(lines) -> list[Region]:
    """Regions from /proc/PID/maps lines; a line that is not one is skipped."""
    out = []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        try:
            a, b = parts[0].split("-")
            out.append(Region(int(a, 16), int(b, 16), parts[1], int(parts[2], 16), int(parts[4]),
                              parts[5].rstrip("\n") if len(parts) == 6 else ""))
        except ValueError:
            continue
    return out


# an executable mapping of a file: most of a process's ~1,300 lines are not, and skip here
_EXEC_FILE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (..x.) ([0-9a-f]+) \S+ (\d+) +(/[^\n]*)$", re.M)


def exec_files(pid: int) -> list[Region]:
    """Executable mappings of files (a path that starts with '/')."""
    got = _read(pid)
    if "exec" not in got:
        got["exec"] = exec_in(got["text"])
    return got["exec"]


def exec_in(maps_text: str) -> list[Region]:
    """The executable file mappings in the text of a /proc/PID/maps."""
    return [Region(int(m[1], 16), int(m[2], 16), m[3], int(m[4], 16), int(m[5]), m[6])
            for m in _EXEC_FILE.finditer(maps_text)]


def named(pid: int, *paths: str) -> list[Region]:
    """The mappings whose path field is one of ``paths`` exactly (a substring search first: cheap)."""
    t = text(pid)
    if not any(p in t for p in paths):
        return []
    return [r for r in parse(ln for ln in t.splitlines() if any(p in ln for p in paths)) if r.path in paths]
