"""The GPU part of the summary document (docs/summary-schema.md): GPU-bound time,
the CPU/GPU overlap, per-operation kernel figures, the CPU-side CUDA API figures,
and NVML utilization set against the true GPU-bound % (the nvidia-smi contrast).

``None`` is the one "not available" value, as everywhere in the summary.
"""

from __future__ import annotations

from .engine import overlap as exact_overlap
from .gpu_accounting import GpuAccounting, OpGpu
from .gpu_records import HOW_TO
from .records import seconds as _s

NA = None
LIVE_WINDOW_NS = 10_000_000_000     # the screen's "now" figures cover this much ...
LIVE_LAG_NS = 2_000_000_000         # ... ending this long ago (GPU records arrive ~1.5 s late)
OVERLAP_KEYS = ("cpu_only", "gpu_only", "both", "idle")


def _pct(part: float, whole: float) -> float | None:
    return round(100 * part / whole, 3) if whole > 0 else NA


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else NA


def apply(doc: dict, acct) -> None:
    """Fill the GPU figures of a summary document built from ``acct`` (an Accounting)."""
    g: GpuAccounting = acct.gpu
    t0 = doc["window"]["t0_monotonic_ns"] or 0
    t1 = doc["window"]["t1_monotonic_ns"] or t0
    wall = max(0, t1 - t0)
    have = g.have_activity
    steps, steps_from = _steps(doc)
    ov, ov_source = (_overlap(g, acct, t0, t1) if have else (NA, "unavailable"))
    op_ov = _op_overlap(g, t0, t1) if have else {}
    doc["totals"]["gpu_s"] = _s(g.all.busy.busy(t0, t1)) if have else NA
    doc["totals"]["overlap_s"] = ov
    for name in g.ops:
        doc["operations"].setdefault(name, {})
    for name, entry in doc["operations"].items():
        acc = g.all if name == "<all>" else g.ops.get(name)
        entry["gpu_s"] = _s(acc.busy.busy(t0, t1)) if have and acc is not None else NA
        entry["overlap_s"] = ov if name == "<all>" else op_ov.get(name, NA)
        # rates per second of the operation's own wall time, as its transitions_per_s
        op_wall = int(entry["wall_s"] * 1e9) if name != "<all>" and entry.get("wall_s") else wall
        entry["gpu"] = _op_figures(acc, op_wall, steps, steps_from) if have and acc else NA
    cuda = _cuda_api(doc, g, wall)
    nvml = _nvml(g, t0, t1, wall, have)
    busy_pct = _pct(g.all.busy.busy(t0, t1), wall) if have else NA
    doc["gpu"] = {
        "source": "cupti" if have else "unavailable",
        "notice": _notice(g),
        "kernels": g.all.kernels if have else NA,
        "busy_s": doc["totals"]["gpu_s"],
        "busy_pct": busy_pct,
        "late_records": g.all.busy.late if have else NA,
        "devices": {str(d): {"kernels": a.kernels, "busy_s": _s(a.busy.busy(t0, t1)),
                             "busy_pct": _pct(a.busy.busy(t0, t1), wall)} for d, a in sorted(g.devices.items())},
        "top_kernels": _top(g) if have else [],
        "cuda_api": cuda,
        "nvml": nvml,
        "contrast": _contrast(nvml, busy_pct, cuda),
        "window": _live(g, acct.last_ts, have),
    }
    doc["sources"]["gpu_s"] = "exact" if have else "unavailable"
    doc["sources"]["overlap_s"] = ov_source
    doc["sources"]["operations.overlap_s"] = "estimated" if have else "unavailable"
    doc["sources"]["gpu.nvml"] = "sampled" if nvml["available"] else "unavailable"
    doc["sources"]["gpu.cuda_api.sync_blocked_s"] = "exact" if cuda["sync_blocked_s"] is not None else "unavailable"


def _steps(doc: dict) -> tuple[int | None, str | None]:
    """Training steps: optimizer steps (record_function ranges), else simulator calls."""
    opt = sum(r["count"] for n, r in doc.get("ranges", {}).items() if n.startswith("Optimizer.step"))
    if opt:
        return opt, "optimizer steps"
    sim = (doc.get("calls") or {}).get("simulator")
    if sim:
        return sim, "simulator calls"
    return NA, NA


def _op_figures(a: OpGpu, wall_ns: int, steps: int | None, steps_from: str | None) -> dict:
    return {
        "kernels": a.kernels,
        "kernel_s": _s(a.kernel_ns),
        "mean_kernel_us": round(a.kernel_ns / a.kernels / 1e3, 3) if a.kernels else NA,
        "launches_per_s": round(a.kernels / (wall_ns / 1e9), 3) if wall_ns else NA,
        "steps": steps, "steps_from": steps_from,
        "launches_per_step": round(a.kernels / steps, 3) if steps else NA,
        "memcpys": a.memcpys, "memcpy_s": _s(a.memcpy_ns), "memcpy_bytes": a.memcpy_bytes,
        "memsets": a.memsets, "memset_s": _s(a.memset_ns),
        "joined": a.joined,
        "launch_latency_us": round(a.latency_ns / a.kernels_joined / 1e3, 3) if a.kernels_joined else NA,
    }


def _overlap(g: GpuAccounting, acct, t0: int, t1: int) -> tuple[dict, str]:
    """CPU-only / GPU-only / both / idle seconds over the window.

    With ``--timeline`` the Python threads' on-CPU intervals are known exactly and the
    sweep is exact. Otherwise CPU time is known per collector tick (0.25 s): within a
    tick CPU and GPU activity are taken as independent (both = cpu x gpu / tick).
    """
    if g.raw is not None and acct.engine is not None:
        py = {th["tid"] for th in acct.threads.values() if th["py"]}
        busy = [iv for tid, st in acct.engine.threads.items() if tid in py for iv in st.busy]
        return {k: _s(v) for k, v in exact_overlap(busy, g.raw, t0, t1).items()}, "exact"
    done, cached = g.overlap_cache
    out = dict.fromkeys(OVERLAP_KEYS, 0.0)
    out.update(cached)
    for i in range(done, len(g.cpu_ticks)):
        a, b, cpu = g.cpu_ticks[i]
        part = _tick_overlap(g, max(a, t0), min(b, t1), cpu)
        for k, v in part.items():
            out[k] += v
        if i == done and b <= g.all.busy.done_until and a >= t0 and b <= t1:
            done += 1                     # final: never recomputed (the screen refreshes every second)
            g.overlap_cache = (done, {k: cached.get(k, 0.0) + part.get(k, 0.0) for k in OVERLAP_KEYS})
            cached = g.overlap_cache[1]
    out["idle"] = max(0.0, (t1 - t0) - out["both"] - out["cpu_only"] - out["gpu_only"])
    return {k: _s(v) for k, v in out.items()}, "estimated"


def _op_overlap(g: GpuAccounting, t0: int, t1: int) -> dict[str, dict]:
    """Per operation: CPU-only / GPU-only / both / idle seconds of its own wall time.

    Per collector tick, the operation's on-CPU time is split by the share of the tick in
    which the GPU was busy (with any activity), and so is the rest of its wall time (the
    thread off CPU: waiting, often on the GPU). Ticks that can no longer change are
    summed once and cached.
    """
    done, cached = g.op_overlap_cache
    out = {n: dict(v) for n, v in cached.items()}
    for i in range(done, min(len(g.cpu_ticks), len(g.op_ticks))):
        a, b, _cpu = g.cpu_ticks[i]
        lo, hi = max(a, t0), min(b, t1)
        if hi <= lo:
            continue
        f = min(g.all.busy.busy(a, b), b - a) / (b - a)
        part = {n: _split(on, wall, f, (hi - lo) / (b - a)) for n, (on, wall) in g.op_ticks[i].items()}
        _add(out, part)
        if i == done and b <= g.all.busy.done_until and a >= t0 and b <= t1:
            done += 1
            _add(cached, part)
            g.op_overlap_cache = (done, cached)
    return {n: {k: _s(v[k]) for k in OVERLAP_KEYS} for n, v in out.items()}


def _split(on: int, wall: int, gpu_frac: float, scale: float) -> dict:
    on, off = on * scale, max(0, wall - on) * scale
    return {"both": on * gpu_frac, "cpu_only": on * (1 - gpu_frac),
            "gpu_only": off * gpu_frac, "idle": off * (1 - gpu_frac)}


def _add(into: dict, part: dict) -> None:
    for n, d in part.items():
        acc = into.setdefault(n, dict.fromkeys(OVERLAP_KEYS, 0.0))
        for k, v in d.items():
            acc[k] += v


def _tick_overlap(g: GpuAccounting, a: int, b: int, cpu: int) -> dict:
    """One tick: CPU and GPU busy time, independent within the tick."""
    dt = b - a
    if dt <= 0:
        return {}
    c = min(cpu, dt)
    gb = min(g.all.busy.busy(a, b), dt)
    both = c * gb / dt
    return {"both": both, "cpu_only": c - both, "gpu_only": gb - both}


def _cuda_api(doc: dict, g: GpuAccounting, wall_ns: int) -> dict:
    """CPU-side figures from the CUDA API probes: they need no CUPTI."""
    hits = doc.get("probes", {}).get("hits", {})
    attached = doc.get("probes", {}).get("attached", {})
    if not any(k in attached for k in ("cudart", "cuda-driver")):
        return {"launches": NA, "launches_per_s": NA, "sync_blocked_s": NA, "sync_calls": NA,
                "sync_blocked_pct": NA, "sync_by_api": {}}
    rt = sum(v for k, v in hits.items() if "Launch" in k and k.startswith("cuda"))
    drv = sum(v for k, v in hits.items() if "Launch" in k and k.startswith("cu") and not k.startswith("cuda"))
    launches = rt or drv                      # a runtime launch may also enter the driver's: count once
    blocked = sum(g.sync_ns.values())
    return {"launches": launches, "launches_per_s": round(launches / (wall_ns / 1e9), 3) if wall_ns else NA,
            "sync_blocked_s": _s(blocked), "sync_calls": sum(g.sync_calls.values()),
            "sync_blocked_pct": _pct(blocked, wall_ns),
            "sync_by_api": {k: {"calls": g.sync_calls.get(k, 0), "blocked_s": _s(v)} for k, v in g.sync_ns.items()}}


def _nvml(g: GpuAccounting, t0: int, t1: int, wall: int, have: bool) -> dict:
    st = g.status.get("nvml")
    devices = {}
    for d, v in sorted(g.nvml.items()):
        busy = g.devices[d].busy.busy(t0, t1) if have and d in g.devices else (0 if have else None)
        util = v["util"].mean()
        bound = _pct(busy, wall) if busy is not None else NA
        devices[str(d)] = {
            "name": v["name"], "util_pct": _round(util), "mem_util_pct": _round(v["mem_util"].mean()),
            "sm_active_pct": _round(v["sm_active"].mean()), "proc_sm_pct": _round(v["proc_sm"].mean()),
            "mem_used_mb_max": round(v["mem_used_max"] / 2**20, 1) if "mem_used_max" in v else NA,
            "mem_total_mb": round(v["mem_total"] / 2**20, 1) if "mem_total" in v else NA,
            "samples": v["util"].n, "period_ms": _round(v["util"].period_ms()),
            "native_period": bool(v["native"].get("util", False)),
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


def _live(g: GpuAccounting, last_ts: int, have: bool) -> dict:
    """The last LIVE_WINDOW_NS (ending LIVE_LAG_NS ago): what the screen shows as now."""
    b = max(0, last_ts - LIVE_LAG_NS)
    a = max(0, b - LIVE_WINDOW_NS)
    bound = _pct(g.all.busy.busy(a, b), b - a) if have and b > a else NA
    utils = [v["util"].mean(a, b) for v in g.nvml.values()]
    utils = [u for u in utils if u is not None]
    util = round(sum(utils) / len(utils), 3) if utils else NA
    return {"s": _s(b - a), "gpu_bound_pct": bound, "nvml_util_pct": util, "ratio": _ratio(util, bound)}


def _top(g: GpuAccounting, n: int = 5) -> list[dict]:
    items = sorted(g.top.items(), key=lambda kv: -kv[1][1])[:n]
    return [{"name": g.kernel_name(nid), "count": c, "total_s": _s(ns), "mean_us": round(ns / c / 1e3, 3)}
            for nid, (c, ns) in items]


def _notice(g: GpuAccounting) -> str | None:
    st = g.status.get("cupti")
    if st is None:
        return NA
    return NA if st.get("ok") else st["msg"]


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


# -- text, for the printed summary and the live screen ---------------------------
def _f(v, fmt: str, na: str = "n/a") -> str:
    return na if v is None else format(v, fmt)


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
    op = (doc.get("operations", {}).get("<all>") or {}).get("gpu") or {}
    ov = doc["totals"].get("overlap_s") or {}
    wall = doc["totals"].get("wall_s") or 0
    parts = [f"GPU: busy {_f(g['busy_s'], '.3f')}s ({_f(g['busy_pct'], '.1f')}%)",
             f"kernels {g['kernels']:,} ({_f(op.get('launches_per_s'), ',.0f')}/s, "
             f"mean {_f(op.get('mean_kernel_us'), ',.1f')} us, {_f(op.get('launches_per_step'), ',.1f')}/step)"]
    if ov and wall:
        parts.append("overlap " + " ".join(f"{k.replace('_', '-')} {100 * ov[k] / wall:.0f}%" for k in OVERLAP_KEYS)
                     + f" ({doc['sources'].get('overlap_s', '')})")
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
