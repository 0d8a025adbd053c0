"""Turn ring records into per-category totals (pure Python, no bcc).

The kernel already splits each thread's time into exclusive categories (see
probes/bpf_program.c); this layer keeps the latest cumulative counters of every
thread, sums the Python threads, and pairs named ranges. Each record costs work
proportional to its own size, never to the history.
"""

from __future__ import annotations

import dataclasses

from ..ring import records as R
from .engine import Engine, overlap
from .estimates import CategoryEstimate, Extra
from ..probes.catalog import category_of_group
from ..vocab import CATEGORIES


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
        self._kernel_ranges = False              # the counters carry the ranges' totals
        self.notes: list[dict] = []
        self.end_reason: str | None = None
        self.last_ts = 0
        self.live_overhead_pct = 0.0
        self.modes: dict[str, str] = {}          # category -> timed | count | off (budget)
        self.source_modes: dict[str, str] = {}   # e.g. gpu -> windowed (budget)
        self.budget_steps: list[dict] = []       # the budget's own steps (not its sample windows)
        self.estimates: dict[str, CategoryEstimate] = {}   # categories the budget stopped timing
        self._est_cache: tuple | None = None
        self.engine: Engine | None = None        # only with --timeline
        self.ops: dict[int, dict] = {}           # op id -> latest cumulative operation record
        self.sampler: dict | None = None         # the stack sampler's latest state, when one runs
        self.cost: dict | None = None            # cost_meter readings: target system time, monitor CPU, idle
        self.prices: dict | None = None          # probe costs measured on the target's calls (probe_prices)
        self.event_drops = 0                     # events the kernel's buffer had no room for
        self.run_fixes = 0                       # switch-ins a tick found missing (maps.run_fixes)
        self.closed_calls = 0                    # calls a budget step left open, closed (maps.closed_calls)
        self.bookkeeping_s = 0.0                 # the program's own time on the target's switches and ticks
        self.procs: list[dict] = []              # the job's processes (``process`` records), newest

    def feed(self, records: list[dict]) -> None:
        """Apply records in ring order."""
        for r in records:
            t = r.get("t")
            if t == R.META:
                self.meta = r
            elif t == R.COUNTERS:
                self._counters(r)
            elif t == R.INTERVALS:
                for tid, kind, name, t0, t1 in r["items"]:
                    if kind == "range" and not self._kernel_ranges:
                        st = self.ranges.setdefault(name, RangeStat())
                        st.count += 1
                        st.total_ns += max(0, t1 - t0)
            elif t == R.NOTE:
                self.notes.append(r)
            elif t == R.EVENTS:
                self._events(r)
            elif t == R.MODE:
                self._mode(r)
            elif t == R.END:
                self.end_reason = r["reason"]
                if self.engine is not None:
                    self.engine.advance(final_ts=self.last_ts)

    def _counters(self, r: dict) -> None:
        self.last_ts = max(self.last_ts, r["ts"])
        self.hits = r["hits"]
        self.live_overhead_pct = r.get("oh_pct", 0.0)
        # each counters record lists every thread (the exited ones folded): keeping a
        # thread's last live record after it was folded counted it twice, and grew
        # with every thread a churning program ever made (+237 MB/h at 3000 threads/s)
        self.threads = {th["tid"]: th for th in r["threads"]}
        for o in r.get("ops", ()):
            self.ops[o["id"]] = o
        for key in ("sampler", "cost", "prices", "procs"):
            if key in r:
                setattr(self, key, r[key])
        self.event_drops = r.get("event_drops", self.event_drops)
        self.run_fixes = r.get("run_fixes", self.run_fixes)
        self.closed_calls = r.get("closed_calls", self.closed_calls)
        self.bookkeeping_s = r.get("bookkeeping_s", self.bookkeeping_s)
        if "ranges" in r:      # summed in the kernel (recordings from before: paired from intervals)
            self._kernel_ranges = True
            self.ranges = {n: RangeStat(count, ns) for n, (count, ns) in r["ranges"].items() if count}

    def _events(self, r: dict) -> None:
        if self.engine is None:
            self.engine = Engine(self.meta.get("t0", 0), self.meta.get("tids0", []), keep_busy=True)
        for ts, tid, kind, cat in r["items"]:
            self.engine.add(ts, tid, kind, cat)
        self.engine.advance()

    def _mode(self, r: dict) -> None:
        """A budget step: a source's mode, or a category's, whose estimate changes mode at the
        counters' own time (the collector writes counters just before a mode change)."""
        self._budget_step(r)
        cat = r["category"]
        if cat not in CATEGORIES:
            self.source_modes[cat] = r["mode"]
            return
        self.modes[cat] = r["mode"]
        est = self.estimates.get(cat)
        if est is None:
            est = self.estimates[cat] = CategoryEstimate(CATEGORIES.index(cat), self.meta.get("t0", 0))
        est.by_sites = self.by_sites()
        est.change(r["mode"], self.last_ts or r["ts"], self.threads, self.ops)
        self._est_cache = None

    def by_sites(self) -> bool:
        """Whether the kernel places the Python threads' ticks by call site (its stack sampler)."""
        return bool((self.sampler or {}).get("site_ticks"))

    def _budget_step(self, r: dict) -> None:
        """Keep the budget's own steps; its sample windows' toggles carry no overhead."""
        pct = r.get("overhead_pct")
        if isinstance(pct, (int, float)) and pct > 0 and len(self.budget_steps) < 64:
            self.budget_steps.append(r)

    @property
    def duration_s(self) -> float:
        """Seconds from attach to the newest counters."""
        t0 = self.meta.get("t0", 0)
        return max(0.0, (self.last_ts - t0) / 1e9) if t0 and self.last_ts else 0.0

    def attached_categories(self) -> set[str]:
        """Categories that have at least one probe set attached."""
        groups = self.meta.get("groups", {})
        return {"python"} | {c for c in map(category_of_group, groups) if c}

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
        """Every thread, with the budget's estimates applied (rlscope_top/account/estimates.py)."""
        if not self.estimates:
            return list(self.threads.values())
        per_thread = self._estimated()["threads"]
        return [self._with(th, per_thread.get(th["tid"], {})) for th in self.threads.values()]

    def part_extras(self) -> dict[str, dict[str, Extra]]:
        """Per operation name (and ``<none>``): what the estimates add to each category."""
        return self._estimated()["parts"] if self.estimates else {}

    def estimate_info(self) -> dict[str, dict]:
        """Per estimated category: mode, windows, the time they covered, the 95% bound (ns) and
        whether some of it cannot be estimated yet (calls, but no window)."""
        return self._estimated()["info"] if self.estimates else {}

    def samples(self, cat: str) -> int:
        """How many timed windows a category got after the budget turned it down."""
        est = self.estimates.get(cat)
        if est is None:
            return 0
        return est.windows if est.counted_first else max(0, est.windows - 1)   # less the first timed stretch

    def _estimated(self) -> dict:
        key = (self.last_ts, len(self.threads), len(self.ops))
        if self._est_cache is not None and self._est_cache[0] == key:
            return self._est_cache[1]
        parts: dict[str, dict[str, Extra]] = {}
        threads: dict[int, dict[str, Extra]] = {}
        info = {}
        for cat, est in self.estimates.items():
            est.by_sites = self.by_sites()
            ex, ext, bound, calls_bound = est.now(self.threads, self.ops, self.last_ts)
            total = sum(sum(e.ns) for e in ex.values())
            t_total = sum(sum(e.ns) for e in ext.values())
            f = total / t_total if t_total else 0.0          # thread rows add up to the parts
            for name, e in ex.items():
                parts.setdefault(name, {})[cat] = e
            for tid, e in ext.items():
                threads.setdefault(tid, {})[cat] = Extra([e.ns[0] * f, e.ns[1] * f], e.calls, e.trans, e.unknown)
            info[cat] = {"mode": est.base_mode, "windows": est.windows, "window_s": est.window_ns / 1e9,
                         "estimated_s": est.estimated_s(self.last_ts), "bound_ns": bound,
                         "unknown": any(e.unknown for e in ex.values()), "extra_ns": total,
                         "extra_calls": sum(e.calls for e in ex.values()), "calls_bound": calls_bound,
                         "ns_per_tick": est.win_on_ns / est.win_ticks if est.win_ticks else None}
        out = {"parts": parts, "threads": threads, "info": info}
        self._est_cache = (key, out)
        return out

    @staticmethod
    def _with(th: dict, extras: dict[str, Extra]) -> dict:
        """A thread record with estimated time moved out of Python into its categories."""
        if not extras:
            return th
        th = {**th, "ns": [list(x) for x in th["ns"]], "calls": list(th["calls"]),
              "trans": [list(x) for x in th["trans"]]}
        apply_extras(th, extras)
        return th

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

    def python_busy(self) -> list[tuple[int, int]] | None:
        """The Python threads' on-CPU intervals (``--timeline`` only), ns: the CPU side of
        the exact CPU/GPU overlap."""
        if self.engine is None:
            return None
        py = self._python_tids()
        return [iv for tid, st in self.engine.threads.items() if tid in py for iv in st.busy]

    def _python_tids(self) -> set[int]:
        return {th["tid"] for th in self.threads.values() if th["py"]}

    def timeline(self) -> dict | None:
        """The engine's view of the Python threads (``--timeline`` only), in ns."""
        if self.engine is None:
            return None
        py = self._python_tids()
        tot = {c: [0, 0] for c in CATEGORIES}
        for tid, st in self.engine.threads.items():
            if tid in py:
                for i, c in enumerate(CATEGORIES):
                    tot[c][0] += st.ns[i][0]
                    tot[c][1] += st.ns[i][1]
        t0 = self.meta.get("t0", 0)
        return {"split": tot, "late_events": self.engine.late,
                "overlap": overlap(self.python_busy(), [], t0, self.last_ts)}


def apply_extras(rec: dict, extras: dict[str, Extra]) -> None:
    """Move estimated time out of a record's Python into its categories, and add the
    estimated calls and transitions (a thread record or an operation row, in place)."""
    for cat, e in extras.items():
        ci = CATEGORIES.index(cat)
        take_on = min(e.ns[0], rec["ns"][0][0])
        take_off = min(e.ns[1], rec["ns"][0][1])
        rec["ns"][0][0] -= take_on
        rec["ns"][0][1] -= take_off
        rec["ns"][ci][0] += take_on
        rec["ns"][ci][1] += take_off
        rec["calls"][ci] += round(e.calls)
        for f in range(4):
            rec["trans"][f][ci] += round(e.trans[f])
