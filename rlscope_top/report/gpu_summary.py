"""The GPU part of the summary document (docs/summary-schema.md): GPU-bound time,
the CPU/GPU overlap, per-operation kernel figures, the CPU-side CUDA API figures,
and NVML utilization set against the true GPU-bound % (the nvidia-smi contrast).

``None`` is the one "not available" value, as everywhere in the summary.
"""

from __future__ import annotations

from ..account.engine import overlap as exact_overlap
from ..account.gpu_accounting import OVERLAP_KEYS, GpuView
from ..ring.gpu_records import HOW_TO
from ..ring.records import seconds as _s
from ..vocab import ALL_OP, NA, fmt

FIG0 = dict.fromkeys(("kernels", "kernel_ns", "memcpys", "memcpy_ns", "memcpy_bytes", "memsets", "memset_ns",
                      "joined", "kernels_joined", "latency_ns", "busy_ns"), 0)


def _pct(part: float, whole: float) -> float | None:
    return round(100 * part / whole, 3) if whole > 0 else NA


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else NA


def apply(doc: dict, acct) -> None:
    """Fill the GPU figures of a summary document built from ``acct`` (an Accounting)."""
    g: GpuView = acct.gpu
    tot = g.latest or {}
    t0 = doc["window"]["t0_monotonic_ns"] or 0
    t1 = doc["window"]["t1_monotonic_ns"] or t0
    wall = max(0, t1 - t0)
    have = g.have_activity
    steps, steps_from = _steps(doc)
    win = tot.get("windows")
    est = (win or {}).get("estimate") or {}
    every = _plus(tot.get("all") or FIG0, est.get("all"))
    ops = {n: _plus(f, (est.get("ops") or {}).get(n)) for n, f in (tot.get("ops") or {}).items()}
    ov, ov_source = _overlap(g, tot, acct, t0, t1) if have else (NA, "unavailable")
    doc["totals"]["gpu_s"] = _s(every["busy_ns"]) if have else NA
    doc["totals"]["overlap_s"] = ov
    for name in ops:
        doc["operations"].setdefault(name, {})
    op_ov = tot.get("op_overlap") or {}
    for name, entry in doc["operations"].items():
        fig = every if name == ALL_OP else ops.get(name)
        entry["gpu_s"] = _s(fig["busy_ns"]) if have and fig is not None else NA
        if name == ALL_OP:
            entry["overlap_s"] = ov
        else:
            entry["overlap_s"] = {k: _s(v) for k, v in op_ov[name].items()} if have and name in op_ov else NA
        # rates per second of the operation's own wall time, as its transitions_per_s
        op_wall = int(entry["wall_s"] * 1e9) if name != ALL_OP and entry.get("wall_s") else wall
        entry["gpu"] = _op_figures(fig, op_wall, steps, steps_from) if have and fig else NA
    cuda = _cuda_api(doc, tot.get("sync") or {}, wall)
    nvml = _nvml(g, tot, wall, have)
    busy_pct = _pct(every["busy_ns"], wall) if have else NA
    lost = _lost(tot, have)
    doc["gpu"] = {
        "source": "cupti" if have else "unavailable",
        "mode": (win["mode"] if win else "traced") if have else NA,
        "windows": {"windows": win["windows"], "period_s": win["period_s"], "traced_s": _s(win["traced_ns"]),
                    "estimated_s": _s(win["estimated_ns"]), "basis": win["basis"]} if have and win else NA,
        "notice": _notice(g),
        "kernels": every["kernels"] if have else NA,
        "busy_s": doc["totals"]["gpu_s"],
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
    doc["sources"]["gpu_s"] = ("estimated" if win else "exact") if have else "unavailable"
    doc["sources"]["overlap_s"] = "estimated" if win and have else ov_source
    doc["sources"]["operations.overlap_s"] = "estimated" if have else "unavailable"
    doc["sources"]["gpu.nvml"] = "sampled" if nvml["available"] else "unavailable"
    doc["sources"]["gpu.cuda_api.sync_blocked_s"] = "exact" if cuda["sync_blocked_s"] is not None else "unavailable"


def _plus(measured: dict, estimated: dict | None) -> dict:
    """Measured figures plus what windowed tracing estimated between its windows."""
    if not estimated:
        return measured
    return {k: v + estimated.get(k, 0) for k, v in measured.items()}


def _lost(tot: dict, have: bool) -> dict:
    """Records that never reached the totals, by why (all zero: the GPU figures are complete)."""
    a = tot.get("agent") or {}
    return {"dropped_ring_full": a.get("dropped_records", 0), "dropped_by_cupti": a.get("cupti_dropped", 0),
            "undecodable": a.get("unknown_records", 0) + a.get("undecoded", 0), "late": tot.get("late", 0)}


def _steps(doc: dict) -> tuple[int | None, str | None]:
    """Training steps: optimizer steps (record_function ranges), else simulator calls."""
    opt = sum(r["count"] for n, r in doc.get("ranges", {}).items() if n.startswith("Optimizer.step"))
    if opt:
        return opt, "optimizer steps"
    sim = (doc.get("calls") or {}).get("simulator")
    if sim:
        return sim, "simulator calls"
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


def _overlap(g: GpuView, tot: dict, acct, t0: int, t1: int) -> tuple[dict, str]:
    """CPU-only / GPU-only / both / idle seconds over the window.

    With ``--timeline`` the Python threads' on-CPU intervals are known exactly and the
    sweep is exact. Otherwise CPU time is known per collector tick (0.25 s): within a
    tick CPU and GPU activity are taken as independent (both = cpu x gpu / tick).
    """
    if g.raw is not None and acct.engine is not None:
        py = {th["tid"] for th in acct.threads.values() if th["py"]}
        busy = [iv for tid, st in acct.engine.threads.items() if tid in py for iv in st.busy]
        return {k: _s(v) for k, v in exact_overlap(busy, g.raw, t0, t1).items()}, "exact"
    out = {k: float((tot.get("overlap") or {}).get(k, 0)) for k in OVERLAP_KEYS}
    out["idle"] = max(0.0, (t1 - t0) - out["both"] - out["cpu_only"] - out["gpu_only"])
    return {k: _s(v) for k, v in out.items()}, "estimated"


def _cuda_api(doc: dict, sync: dict, wall_ns: int) -> dict:
    """CPU-side figures from the CUDA API probes: they need no CUPTI."""
    hits = doc.get("probes", {}).get("hits", {})
    attached = doc.get("probes", {}).get("attached", {})
    if not any(k in attached for k in ("cudart", "cuda-driver")):
        return {"launches": NA, "launches_per_s": NA, "sync_blocked_s": NA, "sync_calls": NA,
                "sync_blocked_pct": NA, "sync_by_api": {}}
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


# -- text, for the printed summary and the live screen ---------------------------
def _f(v, spec: str) -> str:
    return fmt(v, spec)


def lines(doc: dict) -> list[str]:
    """The GPU panel as plain text lines (the printed summary and the screen share them)."""
    g = doc.get("gpu") or {}
    out = [_activity_line(doc, g)]
    cuda = g.get("cuda_api") or {}
    if g.get("source") != "cupti" and cuda.get("launches") is not None:
        out.append(f"CUDA API (CPU side): {cuda['launches']:,} launches ({_f(cuda['launches_per_s'], ',.0f')}/s); "
                   f"blocked in sync {_f(cuda['sync_blocked_s'], '.3f')}s = "
                   f"{_f(cuda['sync_blocked_pct'], '.1f')}% of wall (GPU-bound >= this)")
    out.append(_nvml_line(g))
    return [x for x in out if x]


def _activity_line(doc: dict, g: dict) -> str:
    if g.get("source") != "cupti":
        why = g.get("notice")
        if not why or why == HOW_TO:          # the long how-to is in the summary's notice
            why = HOW_TO_SHORT
        return f"GPU: n/a, no GPU activity measured: {why}"
    op = (doc.get("operations", {}).get(ALL_OP) or {}).get("gpu") or {}
    ov = doc["totals"].get("overlap_s") or {}
    wall = doc["totals"].get("wall_s") or 0
    parts = [f"GPU: busy {_f(g['busy_s'], '.3f')}s ({_f(g['busy_pct'], '.1f')}%)",
             f"kernels {g['kernels']:,} ({_f(op.get('launches_per_s'), ',.0f')}/s, "
             f"mean {_f(op.get('mean_kernel_us'), ',.1f')} us, {_f(op.get('launches_per_step'), ',.1f')}/step)"]
    if ov and wall:
        parts.append("overlap " + " ".join(f"{k.replace('_', '-')} {100 * ov[k] / wall:.0f}%" for k in OVERLAP_KEYS)
                     + f" ({doc['sources'].get('overlap_s', '')})")
    lost = {k: v for k, v in (g.get("lost") or {}).items() if v}
    if lost:
        parts.append("INCOMPLETE: " + ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in lost.items()))
    return "  ".join(parts)


def _nvml_line(g: dict) -> str:
    nv = g.get("nvml") or {}
    if not nv.get("available"):
        return nv.get("notice") or ""
    c = g.get("contrast") or {}
    util = _f(c.get("nvml_util_pct"), ".1f")
    if c.get("ratio_is") == "exact":
        return (f"nvidia-smi util {util}% vs true GPU-bound {_f(c['gpu_bound_pct'], '.1f')}%: "
                f"ratio {_f(c['ratio'], '.1f')}x")
    if c.get("ratio_is") == "at most":
        return (f"nvidia-smi util {util}% vs GPU-bound >= {_f(c['gpu_bound_lower_pct'], '.1f')}% (sync lower bound): "
                f"ratio at most {_f(c['ratio'], '.1f')}x")
    return f"nvidia-smi util {util}%; true GPU-bound n/a (no kernel timing)"


HOW_TO_SHORT = "for kernel timing launch with `rlscope-top run -- CMD` or set RLSCOPE_GPU_ACTIVITY=1 (README)"


def render(doc: dict, console) -> None:
    """Print the GPU lines under the summary table."""
    for line in lines(doc):
        console.print(line, soft_wrap=True, markup=False)
