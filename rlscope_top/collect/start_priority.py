"""An attach's start-up work at a lower CPU priority that steps back to normal.

From the monitor's start to its first data an attach takes ~0.2 s of CPU (imports, loading
the kept program, the verifier, the uprobes). On a machine with an idle core that costs the
job nothing. Where every core is busy it came out of the job in one burst: issue 16's loop
ran 1.30x slower while a busy neighbour shared the 2-core VM. Niced, the same work waits
for the job's slack instead, and where a core is idle it runs as fast as before. It must
still finish in bounded time (nice 19 gets ~1.5% of a busy core), so the priority comes back
in steps (STEPS) and is whole again before the attach's last step, the GPU agent's injection,
which stops the target while it runs.

Only the threads this begins in or that start after it, and child processes started after
it, are reniced; a task the job or the user reniced is left alone (a task is ours while its
nice is one of the levels set here).

Given the target's pid, the same tasks also keep off the cores the target's running tasks are
on (start_cpus.py), until the end; the CPU mask comes back with the priority.
"""

from __future__ import annotations

import os
import threading
import time

from .start_cpus import away_from

# (seconds since begin, nice): beside one nice-0 task, nice 12 gets ~6% of its core and nice 6
# ~21%; on issue 16's busy 2-core VM the attach then ends at ~1.7 s (~0.6 s not niced)
STEPS = ((0.0, 12), (1.0, 6), (1.4, 0))

_lock = threading.Lock()
_now: NicedStart | None = None


def begin(pid: int | None = None) -> None:
    """Lower this thread's priority for the attach (once per process; later calls do nothing).
    ``RLSCOPE_POLITE_START=0`` turns it off.

    Args:
        pid: the target, whose cores the start-up work keeps off (None: any core).
    """
    global _now
    with _lock:
        if _now is not None or os.environ.get("RLSCOPE_POLITE_START") == "0":
            return
        _now = NicedStart(pid)


def end() -> dict | None:
    """Give every task this reniced its priority back (safe to call more than once).

    Returns:
        ``{"nice": [levels], "for_s": seconds}`` for the summary's probes.program (with
        ``"cpus"``, those it kept to, where it kept off the target's), or None where nothing
        was niced.
    """
    with _lock:
        p = _now
    return None if p is None else p.finish()


class NicedStart:
    """The niced stretch itself: begins in the calling thread, steps up with a timer thread."""

    def __init__(self, pid: int | None = None):
        self.tid, self.pid = threading.get_native_id(), pid
        self.pinned: set[int] | None = None
        self.cpus_used: set[int] = set()
        try:
            self.was = os.getpriority(os.PRIO_PROCESS, self.tid)
        except OSError:
            self.was = None
            return
        self.tasks0, self.kids0 = _tasks(), _children()
        self.levels: set[int] = set()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.t0, self.for_s = time.monotonic(), 0.0
        self.mask0 = _mask(self.tid)
        # the timer starts first, so it keeps the normal priority it needs to raise the rest
        threading.Thread(target=self._steps, name="rlscope-start-nice", daemon=True).start()
        self._set(STEPS[0][1])
        self._place()

    def _steps(self) -> None:
        for at, nice in STEPS[1:]:
            if self.done.wait(max(0.0, self.t0 + at - time.monotonic())):
                return
            self._set(nice)
            self._place()

    def _set(self, nice: int) -> None:
        """Every task of ours that is at a level set here (or is the first thread) gets ``nice``."""
        with self.lock:
            if self.was is None or (self.done.is_set() and nice != self.was):
                return
            nice = max(self.was, nice)
            mine = self.levels - {self.was}
            for tid in self._ours():
                try:
                    cur = os.getpriority(os.PRIO_PROCESS, tid)
                    if cur != nice and (cur in mine or (tid == self.tid and not self.levels)):
                        os.setpriority(os.PRIO_PROCESS, tid, nice)
                except OSError:          # a task that ended
                    pass
            self.levels.add(nice)

    def _place(self, final: bool = False) -> None:
        """Keep our tasks (those at our own mask) off the target's cores as they are now;
        ``final``: give them the mask the first thread had."""
        with self.lock:
            if self.mask0 is None or (self.done.is_set() and not final):
                return
            away = None if final else away_from(self.pid, self.mask0)
            want = away or self.mask0
            for tid in self._ours():
                try:
                    cur = os.sched_getaffinity(tid)
                    if cur != want and cur in (self.mask0, self.pinned):
                        os.sched_setaffinity(tid, want)
                except OSError:          # a task that ended
                    pass
            self.pinned = away
            self.cpus_used |= away or set()

    def _ours(self) -> list[int]:
        tids = [self.tid] + [t for t in _tasks() if t not in self.tasks0]
        for kid in _children() - self.kids0:
            tids += _tasks(kid)
        return tids

    def finish(self) -> dict | None:
        """Every task of ours back at the priority the first thread had (once)."""
        if self.was is None:
            return None
        if not self.done.is_set():
            self.done.set()
            self.for_s = round(time.monotonic() - self.t0, 3)
            self._set(self.was)
            self._place(final=True)
        niced = sorted(self.levels - {self.was}, reverse=True)
        if not niced:
            return None
        return {"nice": niced, "for_s": self.for_s, **({"cpus": sorted(self.cpus_used)} if self.cpus_used else {})}


def _mask(tid: int) -> set[int] | None:
    try:
        return os.sched_getaffinity(tid)
    except OSError:
        return None


def _tasks(pid: int | str = "self") -> set[int]:
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return set()


def _children() -> set[int]:
    """This process's direct children (their parent is us, not a grandchild's)."""
    out: set[int] = set()
    for tid in _tasks():
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return out
