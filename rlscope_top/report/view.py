"""What the live screen shows, as plain data built from the ring (no textual, no bcc).

The TUI polls a ring reader, feeds an Accounting and asks a ViewModel for a snapshot
each refresh. Rates are per second over the last refresh; `reset()` starts the
counters afresh from now (the `r` key).
"""

from __future__ import annotations

import collections
import time

from . import gpu_summary
from . import summary as S
from ..account import processes as P
from ..account.books import Books
from ..account.session_figures import coverage_text, figures, openmp_text, waiting_text
from ..ring.records import pid_label
from ..ring.ring import RingReader
from ..safe_files import is_stream
from ..vocab import ALL_OP, CATEGORIES, LABELS, NA

HISTORY = 120
MIN_RATE_WALL_S = 0.05      # an operation's rates are shown once it ran this long (since a reset)


def _source(s: dict, c: str) -> str:
    """Where a category's figure comes from, with the estimate's 95% bound when there is one."""
    src = s["sources"].get(f"{c}_s", "unavailable")
    bound = (s.get("estimates") or {}).get(c, {}).get("bound_pp")
    return f"{src} ±{bound:.1f}pp" if src == "estimated" and bound is not None else src


def _calls(cat: dict, c: str, est: dict, whole) -> str:
    """A category's calls since the reset ("" for Python: it has none), with the bound of the
    session's estimated calls (``est``, over the session's ``whole`` calls) where there is one."""
    if c not in cat["calls_by"]:
        return ""
    return S.calls_text(cat["calls_by"][c], est.get(c, {}), whole.get(c))


def _job_line(s: dict, base: dict | None = None) -> str:
    """The job two ways: the Python threads' wall time (waiting apart), and CPU over all threads;
    since ``base`` (the figures at the last reset) where there is one."""
    job, was = s.get("job") or {}, (base or {}).get("job") or {}
    crit, cpu = job.get("critical_path") or {}, job.get("cpu_s") or {}
    crit, cpu = _minus(crit, was.get("critical_path"), tuple(crit)), _minus(cpu, was.get("cpu_s"), tuple(cpu))
    wall = sum(v for v in crit.values() if v) or 0.0
    up = (s.get("duration_s") or 0.0) - ((base or {}).get("duration_s") or 0.0)
    if not wall or up <= 0:
        return ""
    names = {"python_s": "Python", "waiting_s": "waiting", "simulator_s": "Sim", "backend_s": "Backend",
             "cuda_api_s": "CUDA"}
    a = "  ".join(f"{n} {100 * crit[k] / wall:.0f}%" for k, n in names.items() if crit.get(k))
    cores = {"python": "Python", "simulator": "Sim", "backend": "Backend", "cuda_api": "CUDA",
             "openmp": "OpenMP", "native": "native", "kernel": "kernel"}
    b = "  ".join(f"{n} {cpu[k] / up:.2f}" for k, n in cores.items() if cpu.get(k))
    th = job.get("threads") or {}
    return (f"Python threads: {a}   |   CPU (cores) over {th.get('python', 0) + th.get('native', 0)} "
            f"threads: {b}")


def _shares(tot: dict) -> tuple[dict, float]:
    """Each category's share of the categories' sum (0 while there is none; NA for a category
    not measured), and the sum."""
    whole = sum(tot[c] or 0.0 for c in CATEGORIES)
    return {c: NA if tot[c] is NA else (tot[c] / whole if whole else 0.0) for c in CATEGORIES}, whole


THREAD_SECONDS = ("on_cpu_s", "off_cpu_s", "python_s", "native_s", *(f"{c}_s" for c in CATEGORIES if c != "python"))
PROCESS_FIGURES = ("on_cpu_s", "off_cpu_s", "python_s", "waiting_s", "native_cpu_s", "calls",
                   *(f"{c}_s" for c in CATEGORIES if c != "python"))


def _minus(row: dict, base: dict | None, keys: tuple) -> dict:
    """``row`` with ``keys`` counted from ``base`` (the same row at the reset): never below 0
    (the budget re-estimates), n/a stays n/a."""
    if base is None:
        return row
    out = dict(row)
    for k in keys:
        if isinstance(row.get(k), (int, float)) and isinstance(base.get(k), (int, float)):
            out[k] = max(type(row[k])(0), row[k] - base[k])
    return out


def _process_row(p: dict) -> dict:
    """One row of the processes table: its Python column is Python at work, its waiting apart
    (the two add up to the process's Python time in its categories)."""
    t = p["totals"]
    return {"pid": p["pid"], "label": pid_label(p["pid"]),
            "role": P.shown_role(p), "command": p["command"], "exited": p["exited"],
            "python": p["python"], "on_cpu_s": t.get("on_cpu_s"), "off_cpu_s": t.get("off_cpu_s"),
            "waiting_s": p.get("waiting_s"), "native_cpu_s": (p.get("cpu_s") or {}).get("native"),
            "calls": sum(v or 0 for v in p["calls"].values()), "waits_for": p.get("waits_for") or [],
            **{f"{c}_s": t.get(f"{c}_s") for c in CATEGORIES}, "python_s": P.python_at_work(t.get("python_s"), p.get("waiting_s"))}



class ViewModel:
    """Reads a ring and turns it into snapshots for display."""

    def __init__(self, ring_path: str, clock=time.monotonic):
        self.reader = RingReader(ring_path)
        self.books = Books()                # the CPU and GPU accounting, fed the same records
        self.clock = clock
        self.history: dict[str, collections.deque] = {c: collections.deque(maxlen=HISTORY) for c in CATEGORIES}
        self._prev: tuple[float, dict] | None = None
        self._base: dict | None = None
        self.started = clock()
        self.scope: int | None = None       # a process the categories panel shows (None: the job)

    def poll(self) -> None:
        """Read what the collector wrote since the last call."""
        self.books.feed(self.reader.poll())

    def reset(self) -> None:
        """Count from now on (the display only; the summary file keeps everything)."""
        self._base = self.figures()
        self._prev = None
        for h in self.history.values():
            h.clear()

    def set_scope(self, pid: int | None) -> None:
        """Show one process's categories (None: the whole job); its history starts afresh."""
        if pid != self.scope:
            self.scope = pid
            self._prev = None
            for h in self.history.values():
                h.clear()

    @property
    def attaching(self) -> bool:
        """Whether the collector is still loading (or compiling) the probes: no session yet."""
        return not self.books.cpu.meta

    def notes(self) -> list[str]:
        """Every notice so far, oldest first."""
        return [n["msg"] for n in self.books.cpu.notes]

    def figures(self) -> dict:
        """What the accounting adds up to now (the summary document's figures)."""
        return figures(self.books.cpu, self.books.gpu)

    def summary(self) -> dict:
        """The full summary document as it stands."""
        return S.build(self.books.cpu, self.books.gpu, ring_path=self.reader.path, dropped=self.reader.dropped)

    def write_summary(self, path: str) -> tuple[str, str | None]:
        """Write the summary as it stands (summary.write_safely: never lost, 0600).

        Returns:
            (the path written, why ``path`` failed or None).
        """
        return S.write_safely(self.summary(), path, self.books.cpu.meta.get("pid", 0))

    @staticmethod
    def snapshot_path(summary_path: str, n: int) -> str:
        """Where the screen's ``n``-th snapshot goes: beside the summary, or in the working
        directory when the summary is a stream (/dev/null, /dev/stdout, a FIFO)."""
        if is_stream(summary_path):
            return f"rlscope-top-snapshot{n}.json"
        return summary_path.removesuffix(".json") + f".snapshot{n}.json"

    def snapshot(self) -> dict:
        """Everything the screen shows, for this refresh (categories: the scope's; the rest: the job's)."""
        s = self.figures()
        procs = {p["pid"]: p for p in s.get("processes") or []}
        if self.scope is not None and self.scope not in procs:
            self.set_scope(None)
        tot = self._since_reset(s)
        cat = tot if self.scope is None else self._since_reset(s, procs[self.scope])
        now = self.clock()
        rates = self._rates(now, tot)
        shares, cat_sum = _shares(tot)
        cat_shares, _ = _shares(cat)
        est = (s.get("estimates") or {}) if self.scope is None else {}    # the estimates are the job's
        for c in CATEGORIES:
            self.history[c].append(100 * (cat_shares[c] or 0.0))
        meta = self.books.cpu.meta
        return {
            "pid": s["pid"], "command": s["command"], "uptime_s": self.books.cpu.duration_s,
            "groups": sorted(meta.get("groups", {})),
            "modes": s["budget"]["modes"], "calibrated": s["overhead"]["calibrated"],
            "priced_up": sorted(((s["overhead"].get("measured_prices") or {}).get("raised") or {})),
            # the session's self-reported overhead (as the summary has it) and the latest window's
            "overhead_pct": s["overhead"]["estimated_pct"] or 0.0, "overhead_now_pct": self.books.cpu.live_overhead_pct,
            "dropped": self.reader.dropped, "steal_pct": s["machine"]["steal_pct"],
            "end_reason": s["end_reason"], "ended": self.books.cpu.end_reason is not None,
            "categories": [{"name": c, "label": LABELS[c], "seconds": cat[c], "share": cat_shares[c],
                            "calls": _calls(cat, c, est, s["calls"]), "source": _source(s, c),
                            "history": list(self.history[c])}
                           for c in CATEGORIES],
            "job": _job_line(s, self._base),
            "operations": [{"name": ALL_OP, "source": "", "wall_share": 1.0 if cat_sum else 0.0,
                            "shares": shares, "transitions_per_s": rates["trans"], "calls_per_s": rates["calls"],
                            "transitions": tot["transitions"], "calls": tot["calls"]}] + self._ops(s),
            "threads": self._threads(s),
            "processes": self._processes(procs),
            "scope": None if self.scope is None else {"pid": self.scope, "role": procs[self.scope]["role"]},
            "gpu": {"available": s["totals"]["gpu_s"] is not None, "lines": gpu_summary.lines(s)},
            "warnings": [self._when(n) + n["msg"] for n in self.books.cpu.notes if n["level"] in ("warn", "error")],
            "notes": self.notes(),
            "checks": coverage_text(s) + openmp_text(s) + waiting_text(s),
        }

    def _threads(self, s: dict) -> list[dict]:
        """The thread rows, their seconds since the last reset (a thread born since: all of it)."""
        base = {t["tid"]: t for t in (self._base or {}).get("threads") or []}
        return [_minus(t, base.get(t["tid"]), THREAD_SECONDS) for t in s["threads"]]

    def _processes(self, procs: dict) -> list[dict]:
        """The process rows, their seconds and calls since the last reset."""
        base = {p["pid"]: _process_row(p) for p in (self._base or {}).get("processes") or []}
        return [_minus(_process_row(p), base.get(pid), PROCESS_FIGURES) for pid, p in procs.items()]

    def _when(self, note: dict) -> str:
        """'at 12s: ' for a notice: a budget step is an event of the past, not the state now."""
        t0 = self.books.cpu.meta.get("t0", 0)
        return f"at {(note['ts'] - t0) / 1e9:.0f}s: " if t0 and note.get("ts", 0) >= t0 else ""

    def _ops(self, s: dict) -> list[dict]:
        """One row per operation (since the last reset); rates are per second of the operation."""
        base = (self._base or {}).get("operations", {})
        rows = [self._op_row(name, op, base.get(name)) for name, op in s["operations"].items()
                if name != ALL_OP and "wall_s" in op]      # GPU-only entries have no CPU time
        total = sum(r["_wall"] for r in rows)
        na = [c for c in CATEGORIES if s["totals"][f"{c}_s"] is NA]    # n/a in every table, here too
        for r in rows:
            r["wall_share"] = r.pop("_wall") / total if total else 0.0
            r["shares"].update(dict.fromkeys(na, NA))
        return rows

    @staticmethod
    def _op_row(name: str, op: dict, base: dict | None) -> dict:
        def since(key):
            return (op.get(key) or 0.0) - ((base or {}).get(key) or 0.0)

        def total(key):
            return sum(v or 0 for v in op[key].values()) - sum(v or 0 for v in ((base or {}).get(key) or {}).values())

        # Since a reset, estimated figures can shrink a little (the budget re-estimates
        # them): never show a negative time or share.
        secs = {c: max(0.0, since(f"{c}_s")) for c in CATEGORIES}
        wall = max(0.0, since("wall_s"))
        trans, calls = total("transitions"), total("calls")
        return {"name": name, "source": {"remainder": ""}.get(op["source"], op["source"]), "_wall": wall,
                "shares": {c: (v / wall if wall else 0.0) for c, v in secs.items()},
                # per second of the operation: not yet meaningful over its first few milliseconds
                "transitions_per_s": trans / wall if wall >= MIN_RATE_WALL_S else None,
                "calls_per_s": calls / wall if wall >= MIN_RATE_WALL_S else None,
                "transitions": trans, "calls": calls,
                # GPU figures cover the whole session: GPU records arrive late, a reset does not split them
                "gpu_s": op.get("gpu_s"), "overlap_s": op.get("overlap_s"), "gpu": op.get("gpu")}

    def _since_reset(self, s: dict, proc: dict | None = None) -> dict:
        """The job's (or one process's) figures since the last reset."""
        b = self._base
        if proc is not None:       # one process: the same figures from its entry
            s = proc
            b = next((p for p in (b or {}).get("processes") or [] if p["pid"] == proc["pid"]), None)
        out = {}
        for c in CATEGORIES:
            v = s["totals"][f"{c}_s"]
            out[c] = None if v is None else v - (((b["totals"].get(f"{c}_s") or 0.0)) if b else 0.0)
        out["calls_by"] = {c: v if v is None or not b else v - (b["calls"].get(c) or 0)
                           for c, v in s["calls"].items()}
        out["calls"] = sum(v or 0 for v in out["calls_by"].values())
        out["transitions"] = sum(v or 0 for v in s["transitions"].values()) - (
            sum(v or 0 for v in b["transitions"].values()) if b else 0)
        return out

    def _rates(self, now: float, tot: dict) -> dict:
        prev, self._prev = self._prev, (now, tot)
        if prev is None or now <= prev[0]:
            return {"calls": 0.0, "trans": 0.0}
        dt = now - prev[0]
        return {"calls": (tot["calls"] - prev[1]["calls"]) / dt,
                "trans": (tot["transitions"] - prev[1]["transitions"]) / dt}
