"""What a process's main thread waits for, where the kernel can tell (sampled from /proc).

A thread blocked in a system call shows it in /proc/PID/task/TID/syscall: its number and
arguments. A read on a pipe or socket names its file descriptor; /proc/PID/fd names the pipe
or socket, and the socket's peer comes from the kernel's sock_diag (pyroute2: what `ss -xp`
does). The process at the other end is the job's process that holds that pipe or peer socket.
A futex is a lock or the GIL, a poll/select waits on several descriptors (which ones is in
the process's memory: not read), a wait4 waits for a child.

A daemon thread samples at random intervals (mean ``PERIOD_S``: no lock-step with a periodic
job); a wait's share of the samples taken while the thread was blocked apportions the
process's waiting time. While no process is blocked the interval grows to ``QUIET_PERIOD_S``
(a training loop that computes all the time cost ~0.5% of a core in /proc reads at 50 Hz);
the first blocked sample brings it back. Shares between waits are unbiased either way: the
rate at any moment is the same whatever a process waits for.
"""

from __future__ import annotations

import os
import platform
import random
import re
import threading
from collections import Counter

from ..ring.records import SHARED

PERIOD_S = 0.02
QUIET_PERIOD_S = 0.2
QUIET_GROWTH = 1.25       # per round with no process blocked: PERIOD_S to QUIET_PERIOD_S in ~10 rounds
OWNERS_TTL_S = 1.0
_FD_RE = re.compile(r"^(pipe|socket):\[(\d+)\]$")

# x86-64 and aarch64 syscall numbers: fd-first reads, waits on several fds, locks, children, sleeps
_SYSCALLS = {
    "x86_64": {"read": (0, 19, 45, 47, 299), "poll": (7, 23, 232, 270, 271, 281, 441),
               "futex": (202, 449), "child": (61, 247), "sleep": (35, 230, 34), "accept": (43, 288),
               "write": (1, 20, 44, 46)},
    "aarch64": {"read": (63, 65, 207, 212, 243), "poll": (72, 73, 22, 441),
                "futex": (98, 449), "child": (260, 95), "sleep": (101, 115), "accept": (202, 242),
                "write": (64, 66, 206, 211)},
}
KINDS = {"futex": "a lock or the GIL (futex)", "poll": "several descriptors (poll/select)",
         "child": "a child process to exit", "sleep": "a sleep", "accept": "a connection (accept)"}


def _classify(nr: int, table: dict) -> str | None:
    for kind, nrs in table.items():
        if nr in nrs:
            return kind
    return None


def _blocked_syscall(pid: int) -> tuple[int, int] | None:
    """The (syscall number, first argument) a process's main thread is blocked in, or None
    when it runs, is runnable, or cannot be read (gone, another namespace)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state not in ("S", "D"):
            return None
        with open(f"/proc/{pid}/task/{pid}/syscall") as f:
            parts = f.read().split()
        return int(parts[0]), int(parts[1], 16)
    except (OSError, ValueError, IndexError):
        return None


def _fd_object(pid: int, fd: int) -> tuple[str, int] | None:
    """("pipe" | "socket", inode) of a process's descriptor (readlink: never followed)."""
    try:
        m = _FD_RE.match(os.readlink(f"/proc/{pid}/fd/{fd}"))
    except (OSError, ValueError):
        return None
    return (m.group(1), int(m.group(2))) if m else None


def _unix_peers() -> dict[int, int]:
    """inode -> peer inode of every connected Unix socket on the machine (sock_diag)."""
    from pyroute2.netlink.diag import UDIAG_SHOW_PEER, DiagSocket
    peers = {}
    try:
        with DiagSocket() as ds:
            ds.bind()
            for m in ds.get_sock_stats(show=UDIAG_SHOW_PEER):
                peer = m.get_attr("UNIX_DIAG_PEER")
                if peer:
                    peers[m["udiag_ino"]] = peer
    except Exception:      # noqa: BLE001 (pyroute2 raises its own NetlinkError and OSError): no peers known
        return {}
    return peers


def _holders(pids: list[int]) -> dict[tuple[str, int], set[int]]:
    """(kind, inode) -> the processes among ``pids`` that hold it open."""
    out: dict[tuple[str, int], set[int]] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            obj = _fd_object(pid, int(fd)) if fd.isdigit() else None
            if obj:
                out.setdefault(obj, set()).add(pid)
    return out


class WaitSampler:
    """Samples what the job's processes' main threads are blocked on, in a daemon thread.

    Args:
        pids: returns the live processes to sample (called each round).
    """

    def __init__(self, pids, period_s: float = PERIOD_S):
        self._pids = pids
        self._period = period_s
        self._table = _SYSCALLS.get(platform.machine(), {})
        self._counts: dict[int, Counter] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owners: tuple[float, set, dict, dict] = (-1.0, set(), {}, {})

    def start(self) -> None:
        """Start sampling (no-op where the syscall table of this machine is unknown)."""
        if self._table and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rlscope-waits", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop sampling; the counts stay."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def forget(self, pids: set[int]) -> None:
        """Processes folded away (processes.py): their samples are not kept apart."""
        with self._lock:
            for pid in pids:
                self._counts.pop(pid, None)

    def counts(self, pid: int) -> list[list]:
        """A process's samples while blocked: ``[[what, peer pid or 0 or SHARED, samples], ...]``."""
        with self._lock:
            c = self._counts.get(pid) or Counter()
            return [[what, peer, n] for (what, peer), n in c.most_common()]

    def sample_once(self, now: float) -> int:
        """One round over the live processes. Returns how many were blocked."""
        pids, blocked = list(self._pids()), 0
        for pid in pids:
            got = _blocked_syscall(pid)
            if got is None:
                continue
            blocked += 1
            what = self._what(pid, *got, pids, now)
            with self._lock:
                self._counts.setdefault(pid, Counter())[what] += 1
        return blocked

    def _run(self) -> None:
        import time
        period = self._period
        while not self._stop.wait(random.uniform(0.5, 1.5) * period):
            try:
                blocked = self.sample_once(time.monotonic())
            except Exception:      # noqa: BLE001 (a /proc race must not end the session): next round
                continue
            period = self._period if blocked else min(max(QUIET_PERIOD_S, self._period), period * QUIET_GROWTH)

    def _what(self, pid: int, nr: int, arg0: int, pids: list[int], now: float) -> tuple[str, int]:
        kind = _classify(nr, self._table)
        if kind in ("read", "write"):
            obj = _fd_object(pid, arg0)
            if obj is None:
                return ("file or device I/O", 0)
            return (obj[0], self._peer(pid, obj, pids, now))
        return (KINDS.get(kind, f"syscall {nr}"), 0)

    def _peer(self, pid: int, obj: tuple[str, int], pids: list[int], now: float) -> int:
        """The job's process at the other end of a pipe or socket (0: outside the job or
        unknown; SHARED: several of the job's processes hold it, e.g. inherited at fork)."""
        at, seen, peers, holders = self._owners
        if now - at >= OWNERS_TTL_S or seen != set(pids):     # a new process: its descriptors too
            peers, holders = _unix_peers(), _holders(pids)
            self._owners = (now, set(pids), peers, holders)
        kind, ino = obj
        other = (kind, peers.get(ino, 0)) if kind == "socket" else obj
        who = holders.get(other, set()) - {pid}
        return next(iter(who)) if len(who) == 1 else SHARED if who else 0
