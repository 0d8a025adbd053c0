"""Turn ring records into per-category totals (pure Python, no bcc).

The kernel already splits each thread's time into exclusive categories (see
probes/bpf_program.c); this layer keeps the latest cumulative counters of every
thread, sums the Python threads, and pairs named ranges. Each record costs work
proportional to its own size, never to the history.
"""

from __future__ import annotations

import dataclasses

from . import records as R

CATEGORIES = ("python", "backend", "simulator", "cuda_api")
CAT_GROUPS = {"backend": ("torch",), "simulator": ("mujoco", "sim:"), "cuda_api": ("cudart", "cuda-driver")}
TRANSITIONS = {  # name -> (from, to) category indices
    "python->backend": (0, 1),
    "python->simulator": (0, 2),
    "backend->cuda_api": (1, 3),
    "python->cuda_api": (0, 3),
}


@dataclasses.dataclass
class RangeStat:
    """Count and total time of one named range (record_function)."""

    count: int = 0
    total_ns: int = 0


class Accounting:
    """Consumes records from a ring reader; answers with plain data."""

    def __init__(self):
        self.meta: dict = {}
        self.threads: dict[int, dict] = {}
        self.hits: list[int] = []
        self.ranges: dict[str, RangeStat] = {}
        self.notes: list[dict] = []
        self.end_reason: str | None = None
        self.last_ts = 0

    def feed(self, records: list[dict]) -> None:
        """Apply records in ring order."""
        for r in records:
            t = r.get("t")
            if t == R.META:
                self.meta = r
            elif t == R.COUNTERS:
                self.last_ts = max(self.last_ts, r["ts"])
                self.hits = r["hits"]
                for th in r["threads"]:
                    self.threads[th["tid"]] = th
            elif t == R.INTERVALS:
                for tid, kind, name, t0, t1 in r["items"]:
                    if kind == "range":
                        st = self.ranges.setdefault(name, RangeStat())
                        st.count += 1
                        st.total_ns += max(0, t1 - t0)
            elif t == R.NOTE:
                self.notes.append(r)
            elif t == R.END:
                self.end_reason = r["reason"]
                self.last_ts = max(self.last_ts, r["ts"])

    @property
    def duration_s(self) -> float:
        """Seconds from attach to the newest counters."""
        t0 = self.meta.get("t0", 0)
        return max(0.0, (self.last_ts - t0) / 1e9) if t0 and self.last_ts else 0.0

    def attached_categories(self) -> set[str]:
        """Categories that have at least one probe set attached."""
        groups = self.meta.get("groups", {})
        out = {"python"}
        for cat, prefixes in CAT_GROUPS.items():
            if any(g.startswith(p) for g in groups for p in prefixes):
                out.add(cat)
        return out

    def breakdown(self, threads: list[dict]) -> dict:
        """Category seconds (on/off CPU), calls and transitions summed over threads."""
        split = {c: [0, 0] for c in CATEGORIES}
        calls = [0, 0, 0, 0]
        trans = [[0] * 4 for _ in range(4)]
        for th in threads:
            for i, c in enumerate(CATEGORIES):
                split[c][0] += th["ns"][i][0]
                split[c][1] += th["ns"][i][1]
                calls[i] += th["calls"][i]
                for j in range(4):
                    trans[i][j] += th["trans"][i][j]
        return {"split": split, "calls": calls, "trans": trans}

    def python_threads(self) -> list[dict]:
        """Threads that ran Python code (the ones category totals are summed over)."""
        return [th for th in self.threads.values() if th["py"]]

    def probe_hits(self) -> dict[str, int]:
        """Hits per probe label, summed over libraries."""
        labels = self.meta.get("labels", [])
        out: dict[str, int] = {}
        for i, n in enumerate(self.hits):
            if n and i < len(labels):
                out[labels[i]] = out.get(labels[i], 0) + n
        return out

    def estimated_overhead_s(self) -> float:
        """Hits x per-probe cost: the time the probes themselves added to the target."""
        cost = {p["id"]: p["cost_ns"] for p in self.meta.get("probes", [])}
        return sum(n * cost.get(i, 0) for i, n in enumerate(self.hits)) / 1e9
