"""Keep the counters record bounded: exited threads fold into one row per kind.

A target that starts and ends thousands of short threads would otherwise grow the
counters record (and the monitor's memory) for as long as it runs, until a record no
longer fits in the ring. The newest exited threads stay as their own rows; older ones
add into "(N exited threads)" rows, one for Python threads and one for the rest of each
process, so the totals (the job's and each process's) stay the same.
"""

from __future__ import annotations

from ..ring.records import FOLD_TID, fold_tid  # noqa: F401 - the folded rows' tids are the record layout's

KEEP_EXITED = 16                          # newest exited threads kept as their own rows


def add_counts(a, b):
    """Element-wise sum of two counter values (ints, floats, lists and dicts of them)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict):
        return {k: add_counts(a.get(k), b.get(k)) for k in a.keys() | b.keys()}
    if isinstance(a, list):
        n = max(len(a), len(b))
        return [add_counts(a[i] if i < len(a) else None, b[i] if i < len(b) else None) for i in range(n)]
    if isinstance(a, bool):
        return a or b
    return a + b


_SUMMED = ("ns", "trans", "calls", "oh", "fw", "ticks", "sw", "pre", "omp")


class ExitedThreads:
    """The rows of exited threads: the newest few as they are, the rest folded."""

    def __init__(self, keep: int = KEEP_EXITED, main_pid: int | None = None):
        self.keep = keep
        self.main_pid = main_pid
        self._recent: dict[int, dict] = {}       # tid -> record, oldest first
        self._folded: dict[tuple, dict] = {}     # (pid, python) -> row
        self._n: dict[tuple, int] = {}

    def add(self, rec: dict) -> None:
        """Take the final record of a thread that exited."""
        self._recent.pop(rec["tid"], None)
        self._recent[rec["tid"]] = rec
        while len(self._recent) > self.keep:
            self._fold(self._recent.pop(next(iter(self._recent))))

    def _fold(self, rec: dict, count: int = 1) -> None:
        py, pid = bool(rec["py"]), rec.get("pid")
        key = (pid, py)
        n = self._n[key] = self._n.get(key, 0) + count
        row = self._folded.get(key)
        if row is None:
            row = {k: v for k, v in rec.items() if k in _SUMMED}
            row.update(tid=fold_tid(py, pid, self.main_pid), py=py, exited=True)
            if pid is not None:
                row["pid"] = pid
            self._folded[key] = row
        else:
            for k in _SUMMED:
                if k in rec or k in row:
                    row[k] = add_counts(row.get(k), rec.get(k))
        row["name"] = f"({n} exited {'Python ' if py else ''}threads)"
        row["folded"] = n

    def fold_pids(self, pids: set[int], into: int) -> None:
        """Processes folded into one (``into``, processes.py): their rows add into its rows."""
        for tid in [t for t, r in self._recent.items() if r.get("pid") in pids]:
            self._fold(dict(self._recent.pop(tid), pid=into))
        for key in [k for k in self._folded if k[0] in pids]:
            self._fold(dict(self._folded.pop(key), pid=into), self._n.pop(key))

    def rows(self) -> list[dict]:
        """The rows to put in a counters record."""
        return list(self._recent.values()) + list(self._folded.values())

    def __len__(self) -> int:
        return len(self._recent) + sum(self._n.values())


def fold_all(threads: list[dict], main_tid: int) -> list[dict]:
    """Degrade a record that does not fit: every thread but the main one in one row per kind."""
    keep = [t for t in threads if t["tid"] == main_tid]
    rest = ExitedThreads(keep=0, main_pid=main_tid)
    for t in threads:
        if t["tid"] != main_tid:
            rest.add(dict(t))
    rows = rest.rows()
    for r in rows:
        r["name"] = r["name"].replace("exited ", "")
        r["exited"] = False
    return keep + rows
