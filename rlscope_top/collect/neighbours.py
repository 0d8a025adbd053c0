"""Other rlscope-top sessions on the same target, on a process of it that this session
follows, or on a parent of it (a session follows its target's children unless started with
--no-children). Their probes trap in it too, and this session's prices do not include their
cost, so both sessions read their categories slower than the program is. Each session says so
once per neighbour, at attach or when one comes."""

from __future__ import annotations

import time
from typing import Callable, Iterable

import psutil

from ..ring.ring import live_writers

PERIOD_S = 1.0       # a newcomer is noticed within this (+ one tick)
MAX_DEPTH = 64       # parents looked at above a target


class Neighbours:
    """Watches for other monitors on the processes ``targets()`` gives (their open default rings)."""

    def __init__(self, targets: Callable[[], Iterable[int]], say: Callable[[str, str], None]):
        self.targets, self.say = targets, say
        self.seen: set[int] = set()
        self._next = 0.0

    def check(self, now: float | None = None) -> None:
        """Say once for each monitor newly found on a target (every PERIOD_S at most)."""
        now = time.monotonic() if now is None else now
        if now < self._next:
            return
        self._next = now + PERIOD_S
        targets = set(self.targets())
        parents = _parents(targets)
        for target, mons in sorted(live_writers(targets | set(parents)).items()):
            for mon in sorted(mons - self.seen):
                self.seen.add(mon)
                where = f"PID {target}" if target in targets else \
                    f"PID {target}, a parent of PID {parents[target]} (followed unless --no-children)"
                self.say("warn", f"another rlscope-top (PID {mon}) is attached to {where}: its probes' "
                                 "cost is in this session's times (not taken off); detach one for clean numbers")


def _parents(pids: set[int]) -> dict[int, int]:
    """Each parent, grandparent, ... of these processes that is not one of them, with the one
    of them it is above."""
    out: dict[int, int] = {}
    for pid in sorted(pids):
        child = pid
        for _ in range(MAX_DEPTH):
            try:
                ppid = psutil.Process(child).ppid()
            except (psutil.Error, OSError):
                break
            if ppid <= 0 or ppid in pids or ppid in out:
                break
            out[ppid], child = pid, ppid
    return out
