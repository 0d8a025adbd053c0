"""A job with more processes of their own library layout than the kernel's per-process range
table holds (bpf_program.c ``pranges``): the ones past it are said, once, to place their
ticks with the first process's libraries (before: silently)."""

from __future__ import annotations

import ctypes as ct

from rlscope_top.probes.maps import MapAccess


class _Leaf:
    def __init__(self):
        self.n = 0
        self.r = [type("R", (), {})() for _ in range(64)]


class _Table(dict):
    """A BPF hash that holds ``size`` keys, then fails as bcc does when full."""

    Leaf = _Leaf

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def __setitem__(self, k, v):
        key = k.value if isinstance(k, ct.c_uint) else k
        if key not in self and len(self) >= self.size:
            raise Exception("Could not update table: [Errno 7] Argument list too long")
        super().__setitem__(key, v)


class _Probes(MapAccess):
    def __init__(self, pids: list[int], size: int):
        self.pid, self._pids, self.said = pids[0], pids, []
        self.bpf = {"pranges": _Table(size)}
        self._ranges_set, self._pranges, self._pranges_full = [(1, 2, 1)], {}, False
        self.notify = lambda level, msg: self.said.append((level, msg))

    def pids(self):
        return self._pids

    def category_ranges(self, pid=None):
        return [(pid * 16, pid * 16 + 8, 1)]          # every process its own layout


def test_processes_past_the_range_table_are_said_once():
    pids = [100] + list(range(101, 101 + 29))          # the root and 29 spawned workers
    p = _Probes(pids, size=23)
    p.set_process_ranges()
    p.set_process_ranges()                             # the next scan: still full, not said again
    assert sorted(p._pranges) == pids[1:24] and len(p.bpf["pranges"]) == 23
    assert len(p.said) == 1, p.said
    level, msg = p.said[0]
    assert level == "warn" and msg.startswith("23 processes with their own library layout already: PID 124 ")
    assert "PID 100's libraries" in msg and "--no-children" in msg


def test_a_table_with_room_says_nothing():
    p = _Probes([100, 101, 102], size=23)
    p.set_process_ranges()
    assert sorted(p._pranges) == [101, 102] and p.said == []
