"""GPU accounting, reader side: the peer of :class:`~rlscope_top.account.accounting.Accounting`.

:class:`GpuView` takes the same ring records as the CPU accounting and keeps the GPU's
(the latest cumulative ``gtot`` record, the sources' status, and with ``--timeline`` every
activity interval). :func:`figures` adds them up against what the CPU side measured
(:class:`CpuSide`, plain data): GPU-bound time, the CPU/GPU overlap, per-operation kernel
figures, the CPU-side CUDA API figures, and NVML utilization set against the true
GPU-bound % (the nvidia-smi contrast); :func:`place_gpu` adds them to a session's figures
(session_figures.py). report/gpu_summary.py writes their text; nothing here formats.

Standard library only (the collector side, with numpy, is gpu_accounting.py). ``None`` is
the one "not available" value, as everywhere in the summary.
"""

from __future__ import annotations

import dataclasses

from .engine import overlap as exact_overlap
from ..ring import gpu_records as G
from ..ring import records as R
from ..ring.records import seconds as _s
from ..vocab import ALL_OP, NA, OVERLAP_KEYS

FIG0 = dict.fromkeys(("kernels", "kernel_ns", "memcpys", "memcpy_ns", "memcpy_bytes", "memsets", "memset_ns",
                      "joined", "kernels_joined", "latency_ns", "busy_ns"), 0)


class GpuView:
    """The latest cumulative GPU record, the sources' status, and (with ``--timeline``)
    every activity interval for the exact overlap."""

    def __init__(self):
        self.status: dict[str, dict] = {}
        self.latest: dict | None = None
        self.raw: list[tuple[int, int]] | None = None

    @property
    def have_activity(self) -> bool:
        """Whether CUPTI is delivering (its status said ok)."""
        return bool(self.status.get("cupti", {}).get("ok"))

    def feed(self, records: list[dict]) -> None:
        """Apply ring records (those this class does not use are ignored)."""
        for r in records:
            self._one(r)

    def _one(self, r: dict) -> None:
        t = r.get("t")
        if t == G.TOTALS:
            self.latest = r
            self.status.update(r.get("status") or {})
        elif t == G.GPU_STATUS:
            self.status[r["source"]] = r
        elif t == G.GPU and self.raw is not None:
            self.raw.extend((it[G.START], it[G.END]) for it in r["items"])
        elif t == R.META and r.get("timeline") and self.raw is None:
            self.raw = []


@dataclasses.dataclass
class CpuSide:
    """What the CPU accounting measured that the GPU figures are set against."""

    t0: int                                   # the session's window, monotonic ns
    t1: int
    op_wall_ns: dict[str, int | None]         # every operation row (with <all>) and its wall time
    range_counts: dict[str, int]              # record_function ranges: optimizer steps
    sim_calls: int | None                     # simulator calls (steps when no optimizer ranges)
    hits: dict[str, int]                      # probe hits by symbol (CUDA launches)
    attached: tuple[str, ...]                 # the probe groups attached
    python_busy: list[tuple[int, int]] | None = None   # the Python threads' on-CPU intervals (--timeline)


def figures(gpu: GpuView, cpu: CpuSide) -> dict:
    """The GPU figures of a session.

    Args:
        gpu: the GPU records so far.
        cpu: what the CPU side measured over the same window.

    Returns:
        ``{"totals": {gpu_s, overlap_s}, "operations": {name: {gpu_s, overlap_s, gpu}},
        "gpu": {...}, "sources": {...}}``, the shapes docs/summary-schema.md gives.
    """
    tot = gpu.latest or {}
    wall = max(0, cpu.t1 - cpu.t0)
    have = gpu.have_activity
    win = tot.get("windows")
    est = (win or {}).get("estimate") or {}
    every = _plus(tot.get("all") or FIG0, est.get("all"))
    ops = {n: _plus(f, (est.get("ops") or {}).get(n)) for n, f in (tot.get("ops") or {}).items()}
    ov, ov_source = _overlap(gpu, tot, cpu) if have else (NA, "unavailable")
    gpu_s = _s(every["busy_ns"]) if have else NA
    steps = _steps(cpu)
    rows = {name: _op_row(name, every if name == ALL_OP else ops.get(name), cpu.op_wall_ns.get(name) or wall,
                          ov, tot.get("op_overlap") or {}, have, steps)
            for name in {**cpu.op_wall_ns, **ops}}
    cuda = _cuda_api(cpu, tot.get("sync") or {}, wall)
    nvml = _nvml(gpu, tot, wall, have)
    busy_pct = _pct(every["busy_ns"], wall) if have else NA
    lost = _lost(tot)
    if have:
        lost["launches_without_kernels"] = unreported_launches(every["kernels"], cuda["launches"])
        lost["ended_before_the_session"] = foreign_records(tot.get("before", 0), every)
    section = {
        "source": "cupti" if have else "unavailable",
        "mode": (win["mode"] if win else "traced") if have else NA,
        "windows": _windows(win) if have and win else NA,
        "notice": _notice(gpu),
        "kernels": every["kernels"] if have else NA,
        "busy_s": gpu_s,
        "busy_pct": busy_pct,
        "late_records": tot.get("late", 0) if have else NA,
        "complete": (not any(lost.values())) if have else NA,
        "lost": lost if have else NA,
        "agent": tot.get("agent") or NA,
        "devices": {d: {"kernels": f["kernels"], "busy_s": _s(f["busy_ns"]), "busy_pct": _pct(f["busy_ns"], wall)}
                    for d, f in (tot.get("devices") or {}).items()},
        "top_kernels": _top(tot) if have else [],
        "cuda_api": cuda,
        "nvml": nvml,
        "contrast": _contrast(nvml, busy_pct, cuda),
        "window": _live(tot, have),
    }
    return {"totals": {"gpu_s": gpu_s, "overlap_s": ov}, "operations": rows, "gpu": section,
            "sources": _sources(have, bool(win), ov_source, nvml, cuda)}


def _sources(have: bool, windowed: bool, ov_source: str, nvml: dict, cuda: dict) -> dict:
    """How each GPU figure was had: exact, estimated (from windows), sampled or unavailable."""
    return {"gpu_s": ("estimated" if windowed else "exact") if have else "unavailable",
            "overlap_s": "estimated" if windowed and have else ov_source,
            "operations.overlap_s": "estimated" if have else "unavailable",
            "gpu.nvml": "sampled" if nvml["available"] else "unavailable",
            "gpu.cuda_api.sync_blocked_s": "exact" if cuda["sync_blocked_s"] is not None else "unavailable"}


def _windows(win: dict) -> dict:
    """The kernel-timing windows: how many, how often, traced and estimated seconds, the basis."""
    return {"windows": win["windows"], "period_s": win["period_s"], "traced_s": _s(win["traced_ns"]),
            "estimated_s": _s(win["estimated_ns"]), "basis": win["basis"]}


def place_gpu(doc: dict, gpu: GpuView, cpu_python_busy=None) -> None:
    """Add the GPU figures to a session's figures whose CPU part is built.

    Args:
        doc: the figures so far (their window, operations, ranges, calls and probes are read).
        gpu: the GPU accounting fed the same records.
        cpu_python_busy: the Python threads' on-CPU intervals (``--timeline``), for the exact overlap.
    """
    figs = figures(gpu, cpu_side(doc, cpu_python_busy))
    doc["totals"].update(figs["totals"])
    for name, cells in figs["operations"].items():
        doc["operations"].setdefault(name, {}).update(cells)
    doc["gpu"] = figs["gpu"]
    doc["sources"].update(figs["sources"])


def cpu_side(doc: dict, python_busy=None) -> CpuSide:
    """What the GPU figures need of the CPU figures."""
    t0 = doc["window"]["t0_monotonic_ns"] or 0
    probes = doc.get("probes", {})
    return CpuSide(
        t0=t0, t1=doc["window"]["t1_monotonic_ns"] or t0,
        op_wall_ns={n: (int(e["wall_s"] * 1e9) if n != ALL_OP and e.get("wall_s") else NA)
                    for n, e in doc["operations"].items()},
        range_counts=({} if ranges_stopped(doc) else {n: r["count"] for n, r in doc.get("ranges", {}).items()}),
        sim_calls=(doc.get("calls") or {}).get("simulator"),
        hits=probes.get("hits", {}), attached=tuple(probes.get("attached", {})),
        python_busy=python_busy)


def agent_cost_ns(gpu: GpuView) -> tuple[int, int]:
    """The GPU agent's buffer-callback time and its total cost (with CUPTI's per record), ns."""
    agent = (gpu.latest or {}).get("agent") or {}
    return agent.get("callback_ns", 0), agent.get("cost_ns", 0)


def _pct(part: float, whole: float) -> float | None:
    return round(100 * part / whole, 3) if whole > 0 else NA


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else NA


def _op_row(name: str, fig: dict | None, wall_ns: int, ov, op_ov: dict, have: bool, steps) -> dict:
    """One operation's GPU cells; rates per second of the operation's own wall time."""
    if name == ALL_OP:
        overlap = ov
    else:
        overlap = {k: _s(v) for k, v in op_ov[name].items()} if have and name in op_ov else NA
    return {"gpu_s": _s(fig["busy_ns"]) if have and fig is not None else NA, "overlap_s": overlap,
            "gpu": _op_figures(fig, wall_ns, *steps) if have and fig else NA}


def _plus(measured: dict, estimated: dict | None) -> dict:
    """Measured figures plus what windowed tracing estimated between its windows."""
    if not estimated:
        return measured
    return {k: v + estimated.get(k, 0) for k, v in measured.items()}


def _lost(tot: dict) -> dict:
    """Records that never reached the totals, by why (all zero: the GPU figures are complete).
    `late`: records so late that their time reached back past the kept minute of bins. A record
    later than the 3 s reorder window but inside that minute is counted and binned: not lost
    (the H200's context set-up gave 4 such records a run; `late_records` counts them)."""
    a = tot.get("agent") or {}
    return {"dropped_ring_full": a.get("dropped_records", 0), "dropped_by_cupti": a.get("cupti_dropped", 0),
            "undecodable": a.get("unknown_records", 0) + a.get("undecoded", 0), "late": tot.get("clipped", 0),
            "without_timestamps": tot.get("untimed", 0)}


UNREPORTED_MIN = 1000   # launches the probes must count before a shortfall of kernel records counts


def unreported_launches(kernels: int, launches: int | None) -> int:
    """Launches the CUDA probes counted that CUPTI gave no kernel for, when that is most of
    them: 0 otherwise. On an H200 (2026-12-04) a third `attach --gpu-activity` into one job
    read 0 kernels beside ~135k CUDA API calls, with CUPTI on and memcpy records arriving, and
    the summary said complete. The probes go in ~0.8 s before CUPTI starts on attach, and a
    windowed session's kernels include its estimate, so only a shortfall past half counts.

    Args:
        kernels: kernel records (with a windowed session's estimate between windows).
        launches: the launch probes' hits over the session, or None where none were attached.
    """
    if not launches or launches < UNREPORTED_MIN or kernels >= launches / 2:
        return 0
    return launches - kernels


def foreign_records(before: int, every: dict) -> int:
    """Records that ended before the session began, when they outnumber its own: 0 otherwise.
    A few are normal (a previous session's last flush, kernels traced while attaching), so
    only a majority of at least UNREPORTED_MIN counts: then the target's CUPTI clock and
    ours disagree, and the records this session made were dropped with them.

    Args:
        before: records the totals dropped for ending before the session's start.
        every: the session's figures (kernels, memcpys, memsets counted).
    """
    own = every["kernels"] + every["memcpys"] + every["memsets"]
    return before if before >= UNREPORTED_MIN and before > own else 0


def ranges_stopped(doc: dict) -> float | None:
    """Seconds into the session when the budget stopped the record_function ranges (their
    counts end there, so they count no steps), or None. A window cut from a recording after
    the stop has the mode in force and no step: 0."""
    budget = doc.get("budget") or {}
    for step in budget.get("steps", ()):
        if step["category"].endswith(" ranges") and step["mode"] == "stopped":
            return step["at_s"]
    return 0.0 if any(k.endswith(" ranges") and m == "stopped" for k, m in budget.get("modes", {}).items()) else None


def _steps(cpu: CpuSide) -> tuple[int | None, str | None]:
    """Training steps: optimizer steps (record_function ranges), else simulator calls."""
    opt = sum(c for n, c in cpu.range_counts.items() if n.startswith("Optimizer.step"))
    if opt:
        return opt, "optimizer steps"
    if cpu.sim_calls:
        return cpu.sim_calls, "simulator calls"
    return NA, NA


def _op_figures(a: dict, wall_ns: int, steps: int | None, steps_from: str | None) -> dict:
    k = a["kernels"]
    return {
        "kernels": k,
        "kernel_s": _s(a["kernel_ns"]),
        "mean_kernel_us": round(a["kernel_ns"] / k / 1e3, 3) if k else NA,
        "launches_per_s": round(k / (wall_ns / 1e9), 3) if wall_ns else NA,
        "steps": steps, "steps_from": steps_from,
        "launches_per_step": round(k / steps, 3) if steps else NA,
        "memcpys": a["memcpys"], "memcpy_s": _s(a["memcpy_ns"]), "memcpy_bytes": a["memcpy_bytes"],
        "memsets": a["memsets"], "memset_s": _s(a["memset_ns"]),
        "joined": a["joined"],
        "launch_latency_us": round(a["latency_ns"] / a["kernels_joined"] / 1e3, 3) if a["kernels_joined"] else NA,
    }


def _overlap(g: GpuView, tot: dict, cpu: CpuSide) -> tuple[dict, str]:
    """CPU-only / GPU-only / both / idle seconds over the window.

    With ``--timeline`` the Python threads' on-CPU intervals are known exactly and the
    sweep is exact. Otherwise CPU time is known per collector tick (0.25 s): within a
    tick CPU and GPU activity are taken as independent (both = cpu x gpu / tick).
    """
    if g.raw is not None and cpu.python_busy is not None:
        return {k: _s(v) for k, v in exact_overlap(cpu.python_busy, g.raw, cpu.t0, cpu.t1).items()}, "exact"
    out = {k: float((tot.get("overlap") or {}).get(k, 0)) for k in OVERLAP_KEYS}
    out["idle"] = max(0.0, (cpu.t1 - cpu.t0) - out["both"] - out["cpu_only"] - out["gpu_only"])
    return {k: _s(v) for k, v in out.items()}, "estimated"


def _cuda_api(cpu: CpuSide, sync: dict, wall_ns: int) -> dict:
    """CPU-side figures from the CUDA API probes: they need no CUPTI."""
    if not any(k in cpu.attached for k in ("cudart", "cuda-driver")):
        return {"launches": NA, "launches_per_s": NA, "sync_blocked_s": NA, "sync_calls": NA,
                "sync_blocked_pct": NA, "sync_by_api": {}}
    hits = cpu.hits
    rt = sum(v for k, v in hits.items() if "Launch" in k and k.startswith("cuda"))
    drv = sum(v for k, v in hits.items() if "Launch" in k and k.startswith("cu") and not k.startswith("cuda"))
    launches = rt or drv                      # a runtime launch may also enter the driver's: count once
    sync_ns, sync_calls = sync.get("ns") or {}, sync.get("calls") or {}
    blocked = sum(sync_ns.values())
    return {"launches": launches, "launches_per_s": round(launches / (wall_ns / 1e9), 3) if wall_ns else NA,
            "sync_blocked_s": _s(blocked), "sync_calls": sum(sync_calls.values()),
            "sync_blocked_pct": _pct(blocked, wall_ns),
            "sync_by_api": {k: {"calls": sync_calls.get(k, 0), "blocked_s": _s(v)} for k, v in sync_ns.items()}}


def _mean(series: dict | None) -> float | None:
    return round(series["sum"] / series["n"], 3) if series and series.get("n") else None


def _nvml(g: GpuView, tot: dict, wall: int, have: bool) -> dict:
    st = g.status.get("nvml")
    devices = {}
    for d, v in (tot.get("nvml") or {}).items():
        dev = (tot.get("devices") or {}).get(d)
        busy = (dev["busy_ns"] if dev else 0) if have else None
        util = _mean(v["util"])
        bound = _pct(busy, wall) if busy is not None else NA
        devices[d] = {
            "name": v["name"], "util_pct": util, "mem_util_pct": _mean(v["mem_util"]),
            "sm_active_pct": _mean(v["sm_active"]), "proc_sm_pct": _mean(v["proc_sm"]),
            "mem_used_mb_max": round(v["mem_used_max"] / 2**20, 1) if v.get("mem_used_max") is not None else NA,
            "mem_total_mb": round(v["mem_total"] / 2**20, 1) if v.get("mem_total") is not None else NA,
            "samples": v["util"]["n"], "period_ms": _round(v["util"]["period_ms"]),
            "native_period": bool((v.get("native") or {}).get("util", False)),
            "gpu_bound_pct": bound, "ratio": _ratio(util, bound)}
    return {"available": bool(st and st.get("ok")), "notice": st["msg"] if st and not st.get("ok") else NA,
            "devices": devices}


def _contrast(nvml: dict, gpu_bound_pct: float | None, cuda: dict) -> dict:
    """nvidia-smi's utilization against the true GPU-bound % of the same window."""
    utils = [d["util_pct"] for d in nvml["devices"].values() if d["util_pct"] is not None]
    bounds = [d["gpu_bound_pct"] for d in nvml["devices"].values() if d["gpu_bound_pct"] is not None]
    util = round(sum(utils) / len(utils), 3) if utils else NA
    if gpu_bound_pct is not None:
        bound = round(sum(bounds) / len(bounds), 3) if bounds else gpu_bound_pct
        return {"nvml_util_pct": util, "gpu_bound_pct": bound, "gpu_bound_from": "cupti",
                "ratio": _ratio(util, bound), "ratio_is": "exact"}
    lb = cuda.get("sync_blocked_pct")
    return {"nvml_util_pct": util, "gpu_bound_pct": NA, "gpu_bound_from": "sync lower bound" if lb else NA,
            "gpu_bound_lower_pct": lb, "ratio": _ratio(util, lb), "ratio_is": "at most" if lb else NA}


def _live(tot: dict, have: bool) -> dict:
    """The last 10 s (ending 2 s ago, GPU records arrive late): what the screen shows as now."""
    lv = tot.get("live") or {}
    a, b = lv.get("a", 0), lv.get("b", 0)
    bound = _pct(lv.get("busy_ns", 0), b - a) if have and b > a else NA
    util = _round(lv.get("nvml_util"))
    return {"s": _s(b - a), "gpu_bound_pct": bound, "nvml_util_pct": util, "ratio": _ratio(util, bound)}


def _top(tot: dict, n: int = 5) -> list[dict]:
    return [{"name": name, "count": c, "total_s": _s(ns), "mean_us": round(ns / c / 1e3, 3)}
            for name, c, ns in (tot.get("top") or [])[:n] if c]


def _notice(g: GpuView) -> str | None:
    st = g.status.get("cupti")
    if st is None:
        return NA
    return NA if st.get("ok") else st["msg"]


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)
