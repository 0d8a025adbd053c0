"""Zero-change operations: sample the target's Python stacks with austin, from outside.

austin (https://github.com/P403n1x87/austin) reads the interpreter's frames with
process_vm_readv without stopping the target. Each sample's stack goes through the
operation rules (rlscope_top/collect/op_rules.py); when a thread's operation changes, the
sampler writes the new id into the kernel's ``sop`` map, and the BPF program charges
that thread's exact probe time, calls and transitions to it from then on. So an
operation's boundaries are known to within one sample period, while the time and
category split inside it are the probes' own (label: ``sampled``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Callable

_now = time.monotonic_ns

from ..collect.op_rules import Matcher, Rule
from .sampler_sched import prompt

SAMPLED_ID_BASE = 4096          # annotated operations use ids 1..1023
DEFAULT_HZ = 100


class StackCounts:
    """Time per distinct stack and thread, for ``--record`` (speedscope export): frames are
    interned, and ``take`` hands over what changed since the last call (thread-safe)."""

    MAX_STACKS = 50_000       # distinct stacks kept; past it, samples of new ones are not recorded

    def __init__(self):
        self._lock = threading.Lock()
        self._frames: dict[str, int] = {}
        self._new_frames: list[list] = []
        self._us: dict[tuple, int] = {}
        self._delta: dict[tuple, int] = {}
        self.dropped_us = 0

    def add(self, pid: int, tid: int, frames: list[str], us: int) -> None:
        """One sample: its stack (outermost first) and its time."""
        with self._lock:
            ids = []
            for f in frames:
                i = self._frames.get(f)
                if i is None:
                    i = self._frames[f] = len(self._frames)
                    self._new_frames.append([i, f])
                ids.append(i)
            key = (pid, tid, tuple(ids))
            if key not in self._us and len(self._us) >= self.MAX_STACKS:
                self.dropped_us += us
                return
            self._us[key] = self._us.get(key, 0) + us
            self._delta[key] = self._delta.get(key, 0) + us

    def take(self) -> tuple[list[list], list[list]]:
        """(new frames ``[[id, "file:function"]]``, changed stacks ``[[pid, tid, [frame ids], us]]``)."""
        with self._lock:
            frames, self._new_frames = self._new_frames, []
            items = [[pid, tid, list(ids), us] for (pid, tid, ids), us in self._delta.items()]
            self._delta = {}
        return frames, items


class AustinClock:
    """When austin took each sample, on CLOCK_MONOTONIC, from its own time deltas.

    austin prints no timestamps. In wall-time mode each line's metric is the time since the
    process's previous sample round, and those deltas telescope: round k was taken at
    ``T0 + sum of deltas``. T0 is unknown, but no line is read before it is written, so
    ``min(read time - sum)`` bounds it from above and converges to it within the pipe's
    least latency. Stamped when read, a sample carried the reader's delay: on the 2-core VM
    with both cores busy, a median 0.1 ms but 1.5-4 ms at the 99th percentile.
    """

    def __init__(self):
        self._procs: dict[str, list] = {}   # "P<pid>" -> [sum_us, round's delta, round's tids, anchor_ns, last_ns]

    def stamp(self, proc: str, tid: int, delta_us: int, read_ns: int) -> int:
        """The CLOCK_MONOTONIC time of one sample line of ``proc`` read at ``read_ns``."""
        st = self._procs.get(proc)
        if st is None:
            st = self._procs[proc] = [0, None, set(), read_ns, 0]
        if delta_us != st[1] or tid in st[2]:        # a new round: its threads share one delta
            st[0] += delta_us
            st[1], st[2] = delta_us, set()
        st[2].add(tid)
        sum_ns = st[0] * 1000
        st[3] = min(st[3], read_ns - sum_ns)
        st[4] = max(st[4], st[3] + sum_ns)             # the anchor only falls: never step back
        return st[4]

    def forget(self, pid: int) -> None:
        """A process exited (austin -C follows short-lived children: keep no state for them)."""
        self._procs.pop(f"P{pid}", None)


def austin_path() -> str | None:
    """The austin binary: next to this interpreter (the venv) or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "austin")
    return here if os.access(here, os.X_OK) else shutil.which("austin")


class StackSampler:
    """Runs austin on one PID and keeps each thread's sampled operation."""

    tool = "austin"

    def __init__(self, pid: int, rules: list[Rule], hz: float, set_op: Callable[[int, int, int], None],
                 children: bool = False, stacks: StackCounts | None = None):
        self.pid, self.hz = pid, hz
        self.stacks = stacks            # --record: time per stack, for the speedscope export
        self.children = children        # austin -C: the process's children too (tids are machine-wide)
        self.matcher = Matcher(rules)
        self.names = sorted({r.name for r in rules})
        self.ids = {n: SAMPLED_ID_BASE + i for i, n in enumerate(self.names)}
        self._set_op = set_op
        self._cur: dict[int, int] = {}
        self._samples: dict[int, int] = {}        # op id -> samples with it innermost
        self.inclusive: dict[str, int] = {}       # op name -> samples with it anywhere on the stack
        self.nested: dict[str, dict[str, int]] = {}   # innermost op -> {op on the stack: samples}
        self.total = 0                             # samples of threads that ran Python
        self.invalid = 0                           # torn samples austin marked INVALID (dropped)
        self.proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.sched_error: str | None = None      # why austin runs under the normal scheduler
        self._stopping = False
        self.ended = False          # austin is gone (error says why, unless we stopped it)
        self._cpu_final: float | None = None
        self._cpu_last: float | None = None
        self._cpu_base = 0.0        # CPU of the austin processes this one replaced
        self.started_ns = 0
        self._own = f"P{os.getpid()}"
        self.clock = AustinClock()

    def kind(self, op_id: int) -> str:
        """The rule kind ("simulation" or "") of a sampled operation id."""
        return self.matcher.kinds.get(self.names[op_id - SAMPLED_ID_BASE], "")

    def start(self) -> bool:
        """Start austin. Returns False (and sets ``error``) when it cannot run here."""
        exe = austin_path()
        if exe is None:
            self.error = "austin is not installed (pip install austin-dist==3.7.0)"
            return False
        interval_us = max(100, int(1e6 / self.hz))
        # austin block-buffers a pipe: ~40 samples would arrive at once, and operations
        # shorter than that would never be seen as current. stdbuf makes it line-buffered.
        line_buffered = [shutil.which("stdbuf"), "-oL"] if shutil.which("stdbuf") else []
        try:
            tree = ["-C"] if self.children else []
            self.proc = subprocess.Popen([*line_buffered, exe, "-P", *tree, "-i", f"{interval_us}us", "-p", str(self.pid)],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        except OSError as e:
            self.error = f"cannot run austin: {e}"
            return False
        self.started_ns = time.monotonic_ns()
        self.sched_error = prompt(self.proc.pid)
        self._thread = threading.Thread(target=self._read, name="rlscope-sampler", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop austin and the reader (idempotent)."""
        self._stopping = True
        if self._cpu_final is None:
            self._cpu_final = self._own_cpu()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def restarted(self, hz: float, children: bool | None = None) -> "StackSampler":
        """A new austin at another rate (or following children: ``children``) that carries
        this one's state (same ids and counts)."""
        self.stop()
        new = StackSampler(self.pid, [], hz, self._set_op, self.children if children is None else children,
                           self.stacks)
        new.matcher, new.names, new.ids = self.matcher, self.names, self.ids
        new._cur, new._samples, new.inclusive, new.nested = self._cur, self._samples, self.inclusive, self.nested
        new.total, new.invalid = self.total, self.invalid
        new._cpu_base = (self.cpu_s() or 0.0) + self._cpu_base
        if not new.start():
            new.ended = True
        return new

    def forget(self, tid: int) -> None:
        """A thread exited: drop what was kept for it."""
        self._cur.pop(tid, None)

    def forget_processes(self, pids: list[int]) -> None:
        """Processes that exited (austin lets go of its own; their sample clocks go)."""
        for pid in pids:
            self.clock.forget(pid)

    def current(self, tid: int) -> int:
        """The operation id a thread had at its latest sample (0 none)."""
        return self._cur.get(tid, 0)

    def samples(self) -> dict[int, int]:
        """Samples per operation id (innermost)."""
        return dict(self._samples)

    def site_ticks(self) -> int:
        """CPU-clock ticks the kernel placed by their Python call site (only the kernel sampler reads frames there)."""
        return 0

    def cpu_s(self) -> float | None:
        """CPU seconds austin has used (its cost on the machine); None if it never ran."""
        own = self._cpu_final if self._cpu_final is not None else self._own_cpu()
        return None if own is None else own + self._cpu_base

    def _own_cpu(self) -> float | None:
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            self._cpu_last = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, AttributeError, IndexError, ValueError):
            pass                    # gone with its target: the last reading stands
        return self._cpu_last

    # -- reading -----------------------------------------------------------
    def _read(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line and line[0] == "P":
                self.feed(line)
        rc = self.proc.wait()
        if not self._stopping and self.error is None:
            # reported by the collector from its own thread (the ring has one writer)
            self.error = _first_sentence(self.proc.stderr.read().decode("utf-8", "replace")) or \
                f"austin exited with status {rc}"
        self.ended = True

    def feed(self, line: str) -> None:
        """Apply one austin sample line: ``P<pid>;T<iid>:<tid>;<file:func:line>;... <metric>``."""
        read_ns = _now()
        stack, _, metric = line.rpartition(" ")
        parts = stack.split(";")
        if len(parts) < 3 or parts[0] == self._own:
            return                      # austin -C also follows the monitor, where it runs below the target
        try:
            pid, tid, us = int(parts[0][1:]), int(parts[1].rsplit(":", 1)[-1]), int(metric)
        except ValueError:
            return
        ts = self.clock.stamp(parts[0], tid, us, read_ns)
        frames = [f.rsplit(":", 1)[0] for f in parts[2:]]
        if "INVALID" in stack:
            # the stack changed under austin's non-blocking read: the frames inside the last
            # bad one are still good, and their innermost match is the innermost operation
            self.take_partial(tid, frames[max(i for i, f in enumerate(frames) if "INVALID" in f) + 1:], ts)
            return
        self.take(tid, frames, ts)
        if self.stacks is not None:
            self.stacks.add(pid, tid, frames, us)

    def take(self, tid: int, frames: list[str], ts_ns: int = 0, match: tuple | None = None) -> None:
        """One whole sample of a thread (frames outermost first, taken at ``ts_ns``; 0: now);
        ``match``: the matcher's answer for these frames, when the caller has it already."""
        match = match or self.matcher.match(frames)
        self._apply(tid, self.count(frames, match), ts_ns)

    def count(self, frames: list[str], match: tuple) -> int:
        """Count a whole sample (its innermost operation, every one on its stack); returns the op id."""
        inner, seen = match
        op = self.ids[inner] if inner else 0
        self.total += 1
        if op:
            self._samples[op] = self._samples.get(op, 0) + 1
        for n in seen:
            self.inclusive[n] = self.inclusive.get(n, 0) + 1
        if inner:
            row = self.nested.setdefault(inner, {})
            for n in seen:
                row[n] = row.get(n, 0) + 1
        return op

    def take_partial(self, tid: int, inner_frames: list[str], ts_ns: int = 0, match: tuple | None = None) -> None:
        """A sample whose outer frames are unknown: its innermost match still names the operation
        (``match``: the matcher's answer for these frames, when the caller has it already)."""
        inner = (match or self.matcher.match(inner_frames))[0]
        if inner is None:
            self.invalid += 1
            return
        self._apply(tid, self.ids[inner], ts_ns)     # outer frames unknown: not an inclusive sample

    def _apply(self, tid: int, op: int, ts_ns: int = 0) -> None:
        if self._cur.get(tid, 0) != op:
            self._cur[tid] = op
            self._set_op(tid, op, ts_ns or _now())


def _first_sentence(text: str) -> str:
    """austin's complaint as one plain line (it wraps lines and starts with an emoji)."""
    words = " ".join(text.split())
    words = words.lstrip("".join(ch for ch in words[:2] if not ch.isascii())).strip()
    end = words.find(". ")
    return (words if end < 0 else words[:end + 1])[:200]
