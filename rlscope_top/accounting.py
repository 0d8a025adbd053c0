"""Turn ring records into per-category totals (pure Python, no bcc).

The kernel already splits each thread's time into exclusive categories (see
probes/bpf_program.c); this layer keeps the latest cumulative counters of every
thread, sums the Python threads, and pairs named ranges. Each record costs work
proportional to its own size, never to the history.
"""

from __future__ import annotations

import dataclasses

from . import records as R
from .engine import Engine, overlap
from .gpu_accounting import GpuAccounting

CATEGORIES = ("python", "backend", "simulator", "cuda_api")
CAT_GROUPS = {"backend": ("torch", "tensorflow", "jax"), "simulator": ("mujoco", "sim:"), "cuda_api": ("cudart", "cuda-driver")}
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
        self.live_overhead_pct = 0.0
        self.modes: dict[str, str] = {}          # category -> timed | count | off (budget)
        self._segs: dict[str, list[tuple[str, int, dict]]] = {}   # category -> (mode, start, threads then)
        self.engine: Engine | None = None        # only with --timeline
        self.ops: dict[int, dict] = {}           # op id -> latest cumulative operation record
        self.sampler: dict | None = None         # the stack sampler's latest state, when one runs
        self.gpu = GpuAccounting()               # GPU records (rlscope_top/gpu_accounting.py)

    def feed(self, records: list[dict]) -> None:
        """Apply records in ring order."""
        for r in records:
            self.gpu.feed(r)
            t = r.get("t")
            if t == R.META:
                self.meta = r
            elif t == R.COUNTERS:
                self.last_ts = max(self.last_ts, r["ts"])
                self.hits = r["hits"]
                self.live_overhead_pct = r.get("oh_pct", 0.0)
                for th in r["threads"]:
                    self.threads[th["tid"]] = th
                for o in r.get("ops", ()):
                    self.ops[o["id"]] = o
                if "sampler" in r:
                    self.sampler = r["sampler"]
            elif t == R.INTERVALS:
                for tid, kind, name, t0, t1 in r["items"]:
                    if kind == "range":
                        st = self.ranges.setdefault(name, RangeStat())
                        st.count += 1
                        st.total_ns += max(0, t1 - t0)
            elif t == R.NOTE:
                self.notes.append(r)
            elif t == R.EVENTS:
                if self.engine is None:
                    self.engine = Engine(self.meta.get("t0", 0), self.meta.get("tids0", []), keep_busy=True)
                for ts, tid, kind, cat in r["items"]:
                    self.engine.add(ts, tid, kind, cat)
                self.engine.advance()
            elif t == R.MODE:
                self.modes[r["category"]] = r["mode"]
                segs = self._segs.setdefault(r["category"], [("timed", self.meta.get("t0", 0), {})])
                # bounded by the snapshot's own time: the collector writes counters just before
                segs.append((r["mode"], self.last_ts or r["ts"], dict(self.threads)))
            elif t == R.END:
                self.end_reason = r["reason"]
                if self.engine is not None:
                    self.engine.advance(final_ts=self.last_ts)

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
        oh = {c: 0 for c in CATEGORIES}
        calls = [0, 0, 0, 0]
        trans = [[0] * 4 for _ in range(4)]
        for th in threads:
            for i, c in enumerate(CATEGORIES):
                split[c][0] += th["ns"][i][0]
                split[c][1] += th["ns"][i][1]
                oh[c] += th.get("oh", (0, 0, 0, 0))[i]
                calls[i] += th["calls"][i]
                for j in range(4):
                    trans[i][j] += th["trans"][i][j]
        return {"split": split, "oh": oh, "calls": calls, "trans": trans}

    @staticmethod
    def corrected(b: dict) -> dict:
        """On/off-CPU split per category with the probes' own cost taken out of on-CPU time."""
        return {c: [max(0, on - b["oh"][c]), off] for c, (on, off) in b["split"].items()}

    def python_threads(self) -> list[dict]:
        """Threads that ran Python code (the ones category totals are summed over)."""
        return [th for th in self.all_threads() if th["py"]]

    def all_threads(self) -> list[dict]:
        """Every thread, with the budget's estimates applied."""
        if not self._segs:
            return list(self.threads.values())
        return [self._estimated(th) for th in self.threads.values()]

    def _estimated(self, th: dict) -> dict:
        """Fill in what a category measured by counting (or not at all) no longer times.

        Segments between the budget's mode changes: timed segments are exact and give
        the time per call, calls per second and transitions per call; a count segment
        has exact calls and gets time from the latest timed segment; an off segment
        gets both. Estimated time is moved out of Python, where the kernel puts it.
        """
        orig = th
        th = {**th, "ns": [list(x) for x in th["ns"]], "calls": list(th["calls"]),
              "trans": [list(x) for x in th["trans"]]}
        zero = {"ns": [[0, 0]] * 4, "calls": [0] * 4, "trans": [[0] * 4] * 4, "oh": [0] * 4}
        for cat, segs in self._segs.items():
            ci = CATEGORIES.index(cat)
            bounds = [(mode, ts, snap.get(th["tid"], zero)) for mode, ts, snap in segs]
            bounds.append((None, self.last_ts, orig))      # measured values, never the estimate
            stats = None
            extra_ns, extra_calls = 0.0, 0.0
            extra_trans = [0.0] * 4
            for (mode, t0, a), (_, t1, b) in zip(bounds, bounds[1:]):
                dcalls = b["calls"][ci] - a["calls"][ci]
                if mode == "timed":
                    dns = sum(b["ns"][ci]) - sum(a["ns"][ci]) - (b.get("oh", zero["oh"])[ci] - a.get("oh", zero["oh"])[ci])
                    if dcalls > 0 and t1 > t0:
                        on = b["ns"][ci][0] - a["ns"][ci][0]
                        stats = (max(0, dns) / dcalls, dcalls / (t1 - t0),
                                 on / max(1, on + b["ns"][ci][1] - a["ns"][ci][1]),
                                 [(b["trans"][f][ci] - a["trans"][f][ci]) / dcalls for f in range(4)])
                    continue
                if stats is None:
                    continue
                mean, rate, on_frac, per_call = stats
                if mode == "off":       # calls counted while probes were being removed stay
                    est = max(rate * max(0, t1 - t0), dcalls)
                    extra_calls += est - dcalls
                    for f in range(4):
                        extra_trans[f] += (est - dcalls) * per_call[f]
                    dcalls = est
                extra_ns += dcalls * mean
            th["calls"][ci] += round(extra_calls)
            for f in range(4):
                th["trans"][f][ci] += round(extra_trans[f])
            if extra_ns:
                self._move_from_python(th, ci, extra_ns, on_frac)
        return th

    def samples(self, cat: str) -> int:
        """How many timed sample windows a category got after the budget turned it off."""
        return sum(1 for mode, _, _ in self._segs.get(cat, [])[1:] if mode == "timed")

    @staticmethod
    def _move_from_python(th: dict, ci: int, ns: float, on_frac: float) -> None:
        take_on = min(ns * on_frac, th["ns"][0][0])
        take_off = min(ns - take_on, th["ns"][0][1])
        th["ns"][0][0] -= take_on
        th["ns"][0][1] -= take_off
        th["ns"][ci][0] += take_on
        th["ns"][ci][1] += take_off

    def probe_hits(self) -> dict[str, int]:
        """Hits per probe label, summed over libraries."""
        labels = self.meta.get("labels", [])
        out: dict[str, int] = {}
        for i, n in enumerate(self.hits):
            if n and i < len(labels):
                out[labels[i]] = out.get(labels[i], 0) + n
        return out

    def estimated_overhead_s(self) -> float:
        """Calibrated probe cost charged to the target's threads, all of them."""
        return sum(sum(th.get("oh", ())) for th in self.threads.values()) / 1e9

    def timeline(self) -> dict | None:
        """The engine's view of the Python threads (``--timeline`` only), in ns."""
        if self.engine is None:
            return None
        py = {th["tid"] for th in self.threads.values() if th["py"]}
        tot = {c: [0, 0] for c in CATEGORIES}
        busy = []
        for tid, st in self.engine.threads.items():
            if tid in py:
                for i, c in enumerate(CATEGORIES):
                    tot[c][0] += st.ns[i][0]
                    tot[c][1] += st.ns[i][1]
                busy += st.busy
        t0 = self.meta.get("t0", 0)
        return {"split": tot, "late_events": self.engine.late,
                "overlap": overlap(busy, [], t0, self.last_ts)}
