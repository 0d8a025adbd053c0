"""The GPU lines of the printed summary and the live screen, from the summary document's
`gpu` section (its figures: rlscope_top/account/gpu_figures.py)."""

from __future__ import annotations

from ..ring.gpu_records import HOW_TO, NO_GPU
from ..vocab import ALL_OP, OVERLAP_KEYS, fmt


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
        if why and why.startswith(NO_GPU):
            return f"GPU: n/a, {why}"
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
