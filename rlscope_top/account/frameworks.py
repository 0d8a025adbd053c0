"""Per-framework split of Backend time (pure Python, no bcc).

The kernel charges each thread's Backend time, calls and Python->Backend transitions to
the framework slot of the outermost Backend call in progress (probes/fw_prelude.c); the
collector puts them in each thread record under ``fw``. This module sums them over the
Python threads, takes the probes' calibrated cost out (as for the category totals), and
groups slots by framework: JAX has a ``dispatch`` part (jitted calls) and a ``wait`` part
(``block_until_ready``). When the overhead budget made Backend estimated, the measured
split is scaled to the estimated Backend total and marked ``estimated``.
"""

from __future__ import annotations

from ..ring.records import seconds as _s

PARTS = {"": "dispatch", "wait": "wait"}


def slot_sums(threads: list[dict], n_slots: int) -> list[dict]:
    """Per slot: on/off-CPU ns, calibrated cost ns, calls and python->backend, summed over threads."""
    out = [{"on": 0, "off": 0, "oh": 0, "calls": 0, "trans": 0} for _ in range(n_slots)]
    for th in threads:
        f = th.get("fw")
        if not f:
            continue
        for k in range(min(n_slots, len(f["calls"]))):
            out[k]["on"] += f["ns"][k][0]
            out[k]["off"] += f["ns"][k][1]
            out[k]["oh"] += f["oh"][k]
            out[k]["calls"] += f["calls"][k]
            out[k]["trans"] += f["trans"][k]
    return out


def _figures(sums: list[dict], on_scale: float, off_scale: float, call_scale: float) -> dict:
    on = sum(max(0, s["on"] - s["oh"]) for s in sums) * on_scale
    off = sum(s["off"] for s in sums) * off_scale
    return {"backend_s": _s(on + off), "on_cpu_s": _s(on), "off_cpu_s": _s(off),
            "raw_s": _s(sum(s["on"] + s["off"] for s in sums)),
            "calls": round(sum(s["calls"] for s in sums) * call_scale),
            "python->backend": round(sum(s["trans"] for s in sums) * call_scale)}


def _scales(sums: list[dict], backend_s: float | None, backend_calls: int | None, estimated: bool):
    """Factors that make the slots add up to the category: (on-CPU, off-CPU, calls).

    A slot whose probe cost exceeds its own on-CPU time (a wait, mostly off CPU) is
    corrected to 0, not below, so the corrected slots can exceed the category's corrected
    on-CPU total by that much; their on-CPU parts are scaled back to it. With the budget's
    estimates, the measured split is scaled to the estimated totals.
    """
    con = sum(max(0, s["on"] - s["oh"]) for s in sums)
    off = sum(s["off"] for s in sums)
    calls = sum(s["calls"] for s in sums)
    if estimated:
        t = (backend_s or 0.0) * 1e9 / (con + off) if con + off else 1.0
        return t, t, (backend_calls or 0) / calls if calls else 1.0
    exact_on = max(0, sum(s["on"] - s["oh"] for s in sums))
    return (exact_on / con if con else 1.0), 1.0, 1.0


def split(slots: list[str], groups: dict, threads: list[dict], backend_s: float | None,
          backend_calls: int | None, estimated: bool) -> dict:
    """The summary's ``frameworks`` object.

    Args:
        slots: slot names by id (ring ``meta.fw_slots``), e.g. ``["other", "torch", "jax", "jax:wait"]``.
        groups: attached probe groups (``meta.groups``): a framework appears when attached.
        threads: the Python threads' records (with ``fw``).
        backend_s: the (corrected, possibly estimated) Backend total of the same threads.
        backend_calls: the Backend calls total of the same threads.
        estimated: whether the budget made Backend estimated: scale the measured split to it.

    Returns:
        ``{framework: {backend_s, share_of_backend, on_cpu_s, off_cpu_s, raw_s, calls,
        python->backend[, parts: {dispatch: {...}, wait: {...}}]}}``.
    """
    sums = slot_sums(threads, len(slots))
    by_fw: dict[str, dict[str, list[dict]]] = {}
    for name, s in zip(slots, sums):
        fw, _, part = name.partition(":")
        if fw in groups or s["calls"]:
            by_fw.setdefault(fw, {}).setdefault(PARTS.get(part, part), []).append(s)
    scales = _scales(sums, backend_s, backend_calls, estimated)
    out = {}
    for fw, parts in by_fw.items():
        allp = [s for ps in parts.values() for s in ps]
        fig = _figures(allp, *scales)
        fig["share_of_backend"] = round(fig["backend_s"] / backend_s, 6) if backend_s else None
        if len(parts) > 1:
            fig["parts"] = {p: _figures(ps, *scales) for p, ps in parts.items()}
        out[fw] = fig
    return out


def render_line(summary: dict) -> str | None:
    """One line for the printed summary, or None when fewer than one framework was seen."""
    fws = summary.get("frameworks") or {}
    if not fws:
        return None
    items = []
    for name, f in sorted(fws.items(), key=lambda kv: -kv[1]["backend_s"]):
        if not f["calls"]:
            continue            # attached (the library is mapped) but never called
        text = f"{name} {f['backend_s']:.3f}s x{f['calls']:,}"
        for p, g in (f.get("parts") or {}).items():
            text += f" ({p} {g['backend_s']:.3f}s x{g['calls']:,}, off-CPU {g['off_cpu_s']:.3f}s)"
        items.append(text)
    if not items:
        return None
    src = (summary.get("sources") or {}).get("frameworks", "exact")
    return "backend by framework  " + "  ".join(items) + ("" if src == "exact" else f"  [{src}]")


def summarize(acct, py_threads: list[dict], totals: dict, calls: dict) -> dict:
    """The ``frameworks`` object of a summary, from an Accounting and its Python threads.

    Args:
        acct: the session's Accounting (meta, budget modes).
        py_threads: the Python threads with the budget's estimates applied.
        totals: the summary's corrected ``totals`` (``backend_s``).
        calls: the summary's ``calls`` (``backend``).
    """
    meta = acct.meta
    return split(meta.get("fw_slots") or [], meta.get("groups", {}), py_threads, totals.get("backend_s"),
                 calls.get("backend"), "backend" in acct.modes)


def source(acct) -> str:
    """Where the per-framework figures come from (the ``sources`` vocabulary)."""
    if not acct.meta.get("fw_slots"):
        return "unavailable"
    return "estimated" if "backend" in acct.modes else "exact"
