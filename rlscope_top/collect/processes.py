"""The processes of the job: the target, what it forked or spawned, and any other --pid.

The kernel adds a target's new processes to its targets map at fork (probes/bpf_program.c,
task_newtask); this keeps what the monitor knows of each: its command, whether it runs
Python, whether it is gone, the user's role for it. A process that exits keeps its final
figures: its threads' last counters stay in the ring's counters record.
"""

from __future__ import annotations

import collections
import os
import re
import time
from typing import Callable

from ..probes.elf_symbols import defines
from ..ring import records as R
from ..ring.records import FOLD_PID
from .target import command_line, is_alive
from .waits import WaitSampler

REREAD_S = 1.0          # a live process's command is read again this often (a fork may exec)
FOLLOW_NOTES = 8        # children named one by one in the notes
KEEP_EXITED = 256       # exited processes kept as their own records; older ones fold into one
FOLDED_PIDS = 65_536    # folded pids remembered, for a thread of theirs read late
_PYTHON_EXE = re.compile(r"^python(\d+(\.\d+)?)?t?$")
_INTERPRETER = frozenset(("Py_Initialize", "Py_InitializeEx"))


class Processes:
    """What the monitor knows of the job's processes (``pids`` come from the probe set)."""

    def __init__(self, roots: tuple[int, ...], roles: dict[int, str] | None = None,
                 note: Callable[[str, str], None] | None = None):
        self.roots = roots
        self.roles = dict(roles or {})
        self._note = note or (lambda level, msg: None)
        self.info: dict[int, dict] = {}
        self._read_at: dict[int, float] = {}
        self._said: set[int] = set()
        self._noted: dict[str, int] = {}
        self._exit_order: collections.deque[int] = collections.deque()
        self._folded: dict[int, None] = {}          # recently folded pids (ordered, bounded)
        self.folded = {"n": 0, "python": False}     # the "(N exited processes)" record's
        self.waits = WaitSampler(self.live)
        for pid in roots:
            self._read(pid)

    def live(self) -> list[int]:
        """The processes not known to have exited (safe to call from another thread)."""
        return [pid for pid, p in list(self.info.items()) if not p["exited"]]

    @property
    def known(self) -> dict[int, dict]:
        """pid -> what is known of it (every process counted and not folded, the exited ones too)."""
        return self.info

    def owner(self, pid: int) -> int | None:
        """Whose figures a thread of ``pid`` adds to: its own process's, the folded record's
        (FOLD_PID), or None (not the job's)."""
        if pid in self.info:
            return pid
        return FOLD_PID if pid in self._folded else None

    def fold_exited(self) -> set[int]:
        """Fold the exited processes past the newest KEEP_EXITED into one record (FOLD_PID): a
        job that runs a command each step makes thousands, and each would stay in every counters
        record (a record too large for the ring ended the session). Returns the pids folded now:
        their thread rows go with them (thread_fold.ExitedThreads.fold_pids)."""
        out = set()
        while len(self._exit_order) > KEEP_EXITED:
            pid = self._exit_order.popleft()
            p = self.info.pop(pid, None)
            if p is None:
                continue
            self._read_at.pop(pid, None)
            self._said.discard(pid)
            self.folded["n"] += 1
            self.folded["python"] = self.folded["python"] or p["python"]
            self._folded[pid] = None
            out.add(pid)
        while len(self._folded) > FOLDED_PIDS:
            del self._folded[next(iter(self._folded))]
        if out:
            self.waits.forget(out)
        return out

    def refresh(self, pids: list[int]) -> list[int]:
        """Take the probe set's processes now. Returns the ones that are gone since last time
        (the caller stops the kernel counting them)."""
        now = time.monotonic()
        gone = []
        for pid in pids:
            if pid not in self.info or (not self.info[pid]["exited"] and now - self._read_at[pid] >= REREAD_S):
                self._read(pid)
        for pid, p in self.info.items():
            if not p["exited"] and not is_alive(pid):
                p["exited"] = True
                gone.append(pid)
        gone = [g for g in gone if g not in self.roots]
        self._exit_order.extend(gone)
        return gone

    def _read(self, pid: int) -> None:
        first = pid not in self.info
        p = self.info.setdefault(pid, {"ppid": _ppid(pid), "cmd": "", "python": True, "exited": False})
        self._read_at[pid] = time.monotonic()
        cmd = command_line(pid)
        if cmd:
            p["cmd"] = cmd
        root = pid in self.roots
        py = _runs_python(pid, linked_in=root)
        if py is None and first and root and is_alive(pid):    # alive, but its executable and maps unreadable
            py = False
            self._note("info", f"PID {pid} ({_short(p['cmd'])}): its executable and memory map cannot be read "
                               "(a protected process): not known to run Python, its threads count as native time")
            self._said.add(pid)
        if py is None:                   # gone: what it ran when last read; never read: a fork runs its parent's
            # program, or (its parent unknown too) a launcher's children are mostly not Python (sleep, touch)
            like = self.info.get(p["ppid"]) or self.info.get(self.roots[0] if self.roots else -1) or {}
            py = like.get("python", True) if first else p["python"]
        p["python"] = py
        if first and pid not in self.roots and p["cmd"]:
            self._child_note("follow", f"following PID {pid} ({_short(p['cmd'])}), child of {p['ppid']}",
                             f"following more children (PID {pid} and later): not noted one by one; "
                             "the summary's processes list has every one")
        if not p["python"] and pid not in self._said and p["cmd"]:
            self._said.add(pid)
            one = f"PID {pid} ({_short(p['cmd'])}) does not run Python: its threads count as on/off-CPU native time only"
            if root:                     # a launcher (bash train.sh): its children are the job
                self._note("info", f"{one} (a launcher's Python processes are followed, unless --no-children)")
            else:
                self._child_note("native", one, f"more children that do not run Python (PID {pid} and later): not "
                                                "noted one by one; their threads count as on/off-CPU native time only")

    def _child_note(self, kind: str, one: str, rest: str) -> None:
        """A note per child for the first FOLLOW_NOTES of a kind, then one that says the rest are
        not noted (a job that churns workers, or runs `nvidia-smi` every step, makes thousands)."""
        n = self._noted[kind] = self._noted.get(kind, 0) + 1
        if n <= FOLLOW_NOTES:
            self._note("info", one)
        elif n == FOLLOW_NOTES + 1:
            self._note("info", rest)

    def main_python(self, pid: int, tid: int) -> bool:
        """Whether a thread is a process's main Python thread (a root's is, unless it was found
        not to run Python: a launcher script, a native program)."""
        if tid != pid:
            return False
        return self.info.get(pid, {}).get("python", pid in self.roots)

    def records(self, ops: dict | None = None) -> list[dict]:
        """The ``process`` records of every process counted so far, each with its operations'
        counters from ``ops`` ({(pid, op id): OpCounters}, the kernel's per-process ones)."""
        mine: dict[int, list] = {}
        for (pid, op), o in sorted((ops or {}).items()):
            mine.setdefault(pid, []).append({"id": op, "ns": o.ns, "oh": o.oh, "calls": o.calls})
        out = [R.process(pid=pid, ppid=p["ppid"], command=p["cmd"], python=p["python"], exited=p["exited"],
                         role=self.roles.get(pid), ops=mine.get(pid), waits=self.waits.counts(pid))
               for pid, p in sorted(self.info.items())]
        if self.folded["n"]:
            out.append(R.process(pid=FOLD_PID, ppid=self.roots[0] if self.roots else 0,
                                 command=f"({self.folded['n']:,} exited processes, folded)",
                                 python=self.folded["python"], exited=True, role=None, folded=self.folded["n"],
                                 ops=mine.get(FOLD_PID)))
        return out


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _runs_python(pid: int, linked_in: bool = False) -> bool | None:
    """A CPython interpreter: its executable is pythonX[.Y], or it maps libpython, or (with
    ``linked_in``, for a root) its executable defines ``Py_Initialize`` (a program with the
    interpreter linked in). None when that cannot be told: the process is gone, or a zombie
    (no executable, no maps)."""
    try:
        if _PYTHON_EXE.match(os.path.basename(os.readlink(f"/proc/{pid}/exe"))):
            return True
        with open(f"/proc/{pid}/maps") as f:
            if any("libpython" in line for line in f):
                return True
    except OSError:
        return None
    # /proc/PID/exe opens the very file the process runs, whatever its path names now
    return linked_in and bool(defines(f"/proc/{pid}/exe", _INTERPRETER))


def _short(cmd: str, n: int = 60) -> str:
    return cmd if len(cmd) <= n else cmd[:n - 3] + "..."
