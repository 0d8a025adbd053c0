"""Other rlscope-top sessions on the same target, or on a process of it that this session
follows. Their probes trap in it too, and this session's prices do not include their cost,
so both sessions read their categories slower than the program is. Each session says so once
per neighbour, at attach or when one comes."""

from __future__ import annotations

import time
from typing import Callable, Iterable

from ..ring.ring import live_writers

PERIOD_S = 1.0       # a newcomer is noticed within this (+ one tick)


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
        for target, mons in sorted(live_writers(self.targets()).items()):
            for mon in sorted(mons - self.seen):
                self.seen.add(mon)
                self.say("warn", f"another rlscope-top (PID {mon}) is attached to PID {target}: its probes' "
                                 "cost is in this session's times and neither session takes it off; "
                                 "detach one of them for clean numbers")
