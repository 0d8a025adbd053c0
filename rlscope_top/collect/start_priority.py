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
"""

from __future__ import annotations

import os
import threading
import time

# (seconds since begin, nice): beside one nice-0 task, nice 12 gets ~6% of its core and nice 6
# ~21%; on issue 16's busy 2-core VM the attach then ends at ~1.7 s (~0.6 s not niced)
STEPS = ((0.0, 12), (1.0, 6), (1.4, 0))

_lock = threading.Lock()
_now: NicedStart | None = None


def begin() -> None:
    """Lower this thread's priority for the attach (once per process; later calls do nothing).
    ``RLSCOPE_POLITE_START=0`` turns it off."""
    global _now
    with _lock:
        if _now is not None or os.environ.get("RLSCOPE_POLITE_START") == "0":
            return
        _now = NicedStart()


def end() -> dict | None:
    """Give every task this reniced its priority back (safe to call more than once).

    Returns:
        ``{"nice": [levels], "for_s": seconds}`` for the summary's probes.program, or None
        where nothing was niced.
    """
    with _lock:
        p = _now
    return None if p is None else p.finish()


class NicedStart:
    """The niced stretch itself: begins in the calling thread, steps up with a timer thread."""

    def __init__(self):
        self.tid = threading.get_native_id()
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
        # the timer starts first, so it keeps the normal priority it needs to raise the rest
        threading.Thread(target=self._steps, name="rlscope-start-nice", daemon=True).start()
        self._set(STEPS[0][1])

    def _steps(self) -> None:
        for at, nice in STEPS[1:]:
            if self.done.wait(max(0.0, self.t0 + at - time.monotonic())):
                return
            self._set(nice)

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
        niced = sorted(self.levels - {self.was}, reverse=True)
        return {"nice": niced, "for_s": self.for_s} if niced else None


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
