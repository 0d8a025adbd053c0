"""Keep the counters record bounded: exited threads fold into one row per kind.

A target that starts and ends thousands of short threads would otherwise grow the
counters record (and the monitor's memory) for as long as it runs, until a record no
longer fits in the ring. The newest exited threads stay as their own rows; older ones
add into "(N exited threads)" rows, one for Python threads and one for the rest, so the
totals stay the same.
"""

from __future__ import annotations

KEEP_EXITED = 16                          # newest exited threads kept as their own rows
FOLD_TID = {True: -1, False: -2}          # the folded rows' tids: Python, other


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


_SUMMED = ("ns", "trans", "calls", "oh", "fw", "ticks", "sw", "pre")


class ExitedThreads:
    """The rows of exited threads: the newest few as they are, the rest folded."""

    def __init__(self, keep: int = KEEP_EXITED):
        self.keep = keep
        self._recent: dict[int, dict] = {}       # tid -> record, oldest first
        self._folded: dict[bool, dict] = {}
        self._n: dict[bool, int] = {True: 0, False: 0}

    def add(self, rec: dict) -> None:
        """Take the final record of a thread that exited."""
        self._recent.pop(rec["tid"], None)
        self._recent[rec["tid"]] = rec
        while len(self._recent) > self.keep:
            self._fold(self._recent.pop(next(iter(self._recent))))

    def _fold(self, rec: dict) -> None:
        py = bool(rec["py"])
        self._n[py] += 1
        row = self._folded.get(py)
        if row is None:
            row = {k: v for k, v in rec.items() if k in _SUMMED}
            row.update(tid=FOLD_TID[py], py=py, exited=True)
            self._folded[py] = row
        else:
            for k in _SUMMED:
                if k in rec or k in row:
                    row[k] = add_counts(row.get(k), rec.get(k))
        row["name"] = f"({self._n[py]} exited {'Python ' if py else ''}threads)"
        row["folded"] = self._n[py]

    def rows(self) -> list[dict]:
        """The rows to put in a counters record."""
        return list(self._recent.values()) + list(self._folded.values())

    def __len__(self) -> int:
        return len(self._recent) + sum(self._n.values())


def fold_all(threads: list[dict], main_tid: int) -> list[dict]:
    """Degrade a record that does not fit: every thread but the main one in one row per kind."""
    keep = [t for t in threads if t["tid"] == main_tid]
    rest = ExitedThreads(keep=0)
    for t in threads:
        if t["tid"] != main_tid:
            rest.add(dict(t))
    rows = rest.rows()
    for r in rows:
        r["name"] = r["name"].replace("exited ", "")
        r["exited"] = False
    return keep + rows
