"""Timeline accounting engine: per-thread exclusive time from raw events, and the
CPU/GPU overlap (pure Python; no bcc).

It applies the same rules as the in-kernel state machine (probes/bpf_program.c), so
it is both the reference the kernel is tested against (``--timeline`` streams every
event) and the place where events from outside the kernel (GPU activity from CUPTI)
are combined with CPU time.

Events may arrive out of order across CPUs: they are buffered and applied in time
order once they are older than the newest event by more than ``reorder_ns``. Work
per refresh is proportional to the new events only.
"""

from __future__ import annotations

import dataclasses
import heapq

PY, BACKEND, SIM, CUDA = 0, 1, 2, 3
ENTER, EXIT, ON, OFF, GONE, NEW, CLOSE = "enter", "exit", "on", "off", "gone", "new", "close"
OFF_CPU, ON_CPU, UNKNOWN = 0, 1, 2


@dataclasses.dataclass
class ThreadState:
    """What the engine knows of one thread."""

    last_ts: int
    run: int = UNKNOWN
    depth: list = dataclasses.field(default_factory=lambda: [0, 0, 0, 0])
    ns: list = dataclasses.field(default_factory=lambda: [[0, 0] for _ in range(4)])
    calls: list = dataclasses.field(default_factory=lambda: [0, 0, 0, 0])
    trans: list = dataclasses.field(default_factory=lambda: [[0] * 4 for _ in range(4)])
    busy: list = dataclasses.field(default_factory=list)   # closed on-CPU intervals, for overlap
    on_since: int | None = None
    gone: bool = False

    def cat(self) -> int:
        """Innermost category by priority: CUDA > Simulator > Backend > Python."""
        for c in (CUDA, SIM, BACKEND):
            if self.depth[c]:
                return c
        return PY


class Engine:
    """Incremental per-thread accounting over a stream of timestamped events."""

    def __init__(self, t0: int, tids: list[int] | tuple = (), reorder_ns: int = 50_000_000,
                 keep_busy: bool = False, on_slice=None):
        self.t0 = t0
        self.on_slice = on_slice    # on_slice(tid, category, on_cpu, start, end): each charged span
        self.reorder_ns = reorder_ns
        self.keep_busy = keep_busy
        self.threads: dict[int, ThreadState] = {t: ThreadState(t0) for t in tids}
        self._heap: list[tuple[int, int, str, int, int]] = []
        self._seq = 0
        self._newest = t0
        self.late = 0           # events older than what was already applied
        self.applied_until = t0

    def add(self, ts: int, tid: int, kind: str, cat: int = 0) -> None:
        """Queue one event (enter/exit a category, on/off CPU, thread gone)."""
        if ts < self.applied_until:
            self.late += 1
            ts = self.applied_until
        heapq.heappush(self._heap, (ts, self._seq, kind, tid, cat))
        self._seq += 1
        self._newest = max(self._newest, ts)

    def advance(self, final_ts: int | None = None) -> None:
        """Apply every event older than the reorder window (all of them with final_ts)."""
        limit = final_ts if final_ts is not None else self._newest - self.reorder_ns
        while self._heap and self._heap[0][0] <= limit:
            ts, _, kind, tid, cat = heapq.heappop(self._heap)
            self._apply(ts, tid, kind, cat)
            self.applied_until = ts
        if final_ts is not None:
            for tid, st in self.threads.items():
                if not st.gone:
                    start = st.last_ts
                    self._charge(st, final_ts, ON_CPU if st.run == ON_CPU else OFF_CPU, tid)
                    if self.keep_busy and st.run == ON_CPU:
                        st.busy.append((st.on_since if st.on_since is not None else start, final_ts))
                        st.on_since = final_ts
            self.applied_until = final_ts

    def _state(self, tid: int, ts: int) -> ThreadState:
        st = self.threads.get(tid)
        if st is None:                 # first seen mid-stream: counted from now
            st = self.threads[tid] = ThreadState(ts)
        return st

    def _charge(self, st: ThreadState, ts: int, prev: int, tid: int = 0) -> None:
        if ts > st.last_ts:
            st.ns[st.cat()][0 if prev == ON_CPU else 1] += ts - st.last_ts
            if self.on_slice is not None:
                self.on_slice(tid, st.cat(), prev == ON_CPU, st.last_ts, ts)
        st.last_ts = max(st.last_ts, ts)

    def _apply(self, ts: int, tid: int, kind: str, cat: int) -> None:
        if kind == NEW:                # a thread created now starts off CPU
            if tid not in self.threads or self.threads[tid].gone:
                self.threads[tid] = ThreadState(ts, OFF_CPU)
            return
        st = self._state(tid, ts)
        if st.gone:
            return
        if kind == CLOSE:              # the category's open calls closed (bpf_program.c depth_sync): no switch
            self._charge(st, ts, ON_CPU if st.run == UNKNOWN else st.run, tid)
            st.depth[cat] = 0
            return
        # What the thread must have been doing since its last event for this one to
        # happen: an OFF or a probe hit means it was running, an ON that it was not.
        hint = OFF_CPU if kind == ON else ON_CPU
        prev = hint if st.run == UNKNOWN else st.run
        start = st.last_ts
        self._charge(st, ts, prev, tid)
        if kind == ENTER:
            if st.depth[cat] == 0:
                st.trans[st.cat()][cat] += 1
                st.calls[cat] += 1
            st.depth[cat] += 1
        elif kind == EXIT and st.depth[cat]:
            st.depth[cat] -= 1
        new = OFF_CPU if kind in (OFF, GONE) else ON_CPU
        if self.keep_busy:
            if prev == ON_CPU and st.on_since is None:
                st.on_since = start if st.run == UNKNOWN else st.on_since
            if prev == ON_CPU and new == OFF_CPU:
                st.busy.append((st.on_since if st.on_since is not None else start, ts))
                st.on_since = None
            elif prev == OFF_CPU and new == ON_CPU:
                st.on_since = ts
        st.run = new
        st.gone = kind == GONE


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping [start, end) intervals."""
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap(cpu: list[tuple[int, int]], gpu: list[tuple[int, int]], t0: int, t1: int) -> dict:
    """RL-Scope's overlap: split [t0, t1) into CPU-only, GPU-only, both and idle (ns).

    Args:
        cpu: intervals when a (Python) thread of the target was on a CPU.
        gpu: intervals of GPU activity (kernels, memcpys, memsets).
    """
    points = []
    for a, b in union([(max(a, t0), min(b, t1)) for a, b in cpu]):
        points += [(a, 0, 1), (b, 0, -1)]
    for a, b in union([(max(a, t0), min(b, t1)) for a, b in gpu]):
        points += [(a, 1, 1), (b, 1, -1)]
    points.sort()
    out = {"cpu_only": 0, "gpu_only": 0, "both": 0, "idle": 0}
    active = [0, 0]
    prev = t0
    for ts, which, d in points + [(t1, 0, 0)]:
        key = ("both" if active[0] and active[1] else "cpu_only" if active[0]
               else "gpu_only" if active[1] else "idle")
        out[key] += max(0, ts - prev)
        prev = max(prev, ts)
        active[which] += d
    return out
