"""Per-operation figures from the kernel's per-operation counters (pure Python).

Rules (docs/summary-schema.md, "operations"):
- An operation's time is the time its threads spent with it innermost (nested
  operations are flattened, as in RL-Scope), summed over threads, split into the
  same exclusive categories as the totals, with the probes' calibrated cost taken out.
- ``<none>`` is Python-thread time outside every operation: the totals minus the
  operations, so the rows always add up to the totals.
- Python time inside an operation of kind "simulation" counts as simulation; the
  row keeps the Python/native split in ``simulation_split``. The top-level totals
  follow the same rule.
- When the budget estimated a category (count or off mode), each operation gets the
  estimate made from its own timed windows (rlscope_top/account/estimates.py).
- When the kernel placed each tick by call site, sampled operations' on-CPU split (the
  estimates given back included) follows their own ticks (rlscope_top/account/op_tick_split.py).
"""

from __future__ import annotations

from ..vocab import CATEGORIES, NA, TRANSITIONS
from .op_tick_split import split_by_ticks
from ..ring.gpu_records import NONE_OP
from ..ring.records import seconds as _s



def raw_rows(acct, measured: dict) -> list[dict]:
    """Per-operation corrected ns, calls and transitions, plus the ``<none>`` remainder.

    Args:
        acct: The Accounting holding the latest ``ops`` counters.
        measured: Breakdown (``split`` corrected [on, off] ns per category, ``calls``,
            ``trans``) of the Python threads as the kernel counted them.

    Returns:
        Rows ``{name, kind, source, samples..., ns: {cat: [on, off]}, calls, trans}``; just
        ``<none>`` when the target has no operations.
    """
    rows = []
    for o in acct.ops.values():
        ns = {c: [max(0, o["ns"][i][0] - o["oh"][i]), o["ns"][i][1]] for i, c in enumerate(CATEGORIES)}
        rows.append({"name": o["name"], "kind": o.get("kind", ""), "source": o.get("src", "annotated"),
                     "samples": o.get("samples"), "samples_incl": o.get("samples_incl"), "nested": o.get("nested"),
                     "samples_total": o.get("samples_total"), "ns": ns,
                     "oh": [o["ns"][i][0] - ns[c][0] for i, c in enumerate(CATEGORIES)],   # the cost taken out
                     "calls": list(o["calls"]), "trans": [list(r) for r in o["trans"]],
                     "ticks": o.get("ticks")})     # None in records from before ticks
    m = measured
    _fit(rows, m["split"])
    rows.append({"name": NONE_OP, "kind": "", "source": "remainder", "samples": None,
                 "ns": {c: [max(0, m["split"][c][k] - sum(r["ns"][c][k] for r in rows)) for k in (0, 1)]
                        for c in CATEGORIES},
                 "calls": [max(0, m["calls"][i] - sum(r["calls"][i] for r in rows)) for i in range(4)],
                 "trans": [[max(0, m["trans"][a][b] - sum(r["trans"][a][b] for r in rows)) for b in range(4)]
                           for a in range(4)]})
    _apply_estimates(rows, acct.part_extras())
    if acct.by_sites():
        split_by_ticks(rows)
    return rows


def _fit(rows: list[dict], split: dict) -> None:
    """Operations never add up to more than the threads they ran on: the kernel's operation
    and thread counters are read a moment apart, so scale the rows down where they do."""
    for c in CATEGORIES:
        for k in (0, 1):
            ops = sum(r["ns"][c][k] for r in rows)
            if ops > split[c][k]:
                f = split[c][k] / ops if ops else 0.0
                for r in rows:
                    r["ns"][c][k] *= f
                    if k == 0:
                        r["oh"][CATEGORIES.index(c)] *= f


def _apply_estimates(rows: list[dict], extras: dict) -> None:
    """Give each row what the budget's estimates found for its operation (rlscope_top/account/estimates.py):
    the time the kernel charged to Python while a category was not timed goes back to that
    category, with the estimated calls and transitions. Rows that share a name share its
    estimate in proportion to their Python time."""
    by_name: dict[str, list[dict]] = {}
    for r in rows:
        by_name.setdefault(r["name"], []).append(r)
    for name, cats in extras.items():
        group = by_name.get(name, [])
        py = [sum(r["ns"]["python"]) for r in group]
        whole = sum(py)
        for r, p in zip(group, py):
            w = p / whole if whole else 1.0 / len(group)
            for cat, e in cats.items():
                i = CATEGORIES.index(cat)
                take_on = min(e.ns[0] * w, r["ns"]["python"][0])
                take_off = min(e.ns[1] * w, r["ns"]["python"][1])
                r["ns"]["python"][0] -= take_on
                r["ns"]["python"][1] -= take_off
                r["ns"][cat][0] += take_on
                r["ns"][cat][1] += take_off
                r["calls"][i] += round(e.calls * w)
                for f in range(4):
                    r["trans"][f][i] += round(e.trans[f] * w)


def figures(row: dict, have: set[str], wall_total_ns: float) -> dict:
    """One operation's summary entry from a raw row (simulation rule applied)."""
    ns = {c: list(v) for c, v in row["ns"].items()}
    sim_split = None
    if row["kind"] == "simulation":
        py, native = sum(ns["python"]), sum(ns["simulator"])
        sim_split = {"python_s": _s(py), "native_s": _s(native)}
        ns["simulator"] = [ns["simulator"][k] + ns["python"][k] for k in (0, 1)]
        ns["python"] = [0, 0]
    wall = sum(sum(v) for v in ns.values())
    out = {"source": row["source"], "kind": row["kind"] or None, "wall_s": _s(wall),
           "share": round(wall / wall_total_ns, 6) if wall_total_ns else NA,
           "on_cpu_s": _s(sum(v[0] for v in ns.values())), "off_cpu_s": _s(sum(v[1] for v in ns.values()))}
    for c in CATEGORIES:
        out[f"{c}_s"] = _s(sum(ns[c])) if c in have or c == "simulator" and sim_split else NA
    out["gpu_s"] = NA
    out["shares"] = {c: (round(sum(ns[c]) / wall, 6) if wall and out[f"{c}_s"] is not None else NA)
                     for c in CATEGORIES}
    if sim_split is not None:
        out["simulation_split"] = sim_split
    out["calls"] = {c: (row["calls"][i] if c in have else NA) for i, c in enumerate(CATEGORIES) if c != "python"}
    trans = {n: (row["trans"][a][z] if CATEGORIES[z] in have else NA) for n, (a, z) in TRANSITIONS.items()}
    out["transitions"] = trans
    out["transitions_per_s"] = {n: (round(v / (wall / 1e9), 3) if v is not None and wall else NA)
                                for n, v in trans.items()}
    if row["samples"] is not None:
        out["samples"] = row["samples"]
    return out


def inclusive_shares(rows: list[dict], entries: dict) -> None:
    """Sampled operations' inclusive share: their own share plus, for every operation Y,
    Y's share times the fraction of Y's samples that had them on the stack.

    The shares are the probes' (exact time, sampled boundaries); only the nesting comes
    from the samples, as a ratio, so samples austin could not read do not bias it.
    """
    nested = {r["name"]: r.get("nested") for r in rows if r.get("nested") is not None}
    for name, e in entries.items():
        if e.get("source") != "sampled":
            continue
        total = 0.0
        for inner, counts in nested.items():
            n = counts.get(inner, 0)
            if n and entries.get(inner, {}).get("share") is not None:
                total += entries[inner]["share"] * counts.get(name, 0) / n
        e["inclusive_share"] = round(total, 6)


def simulation_python_ns(rows: list[dict]) -> list[float]:
    """[on, off] Python time inside simulation operations (moved to simulator in the totals),
    in the rows' unit (ns here; seconds for processes.op_seconds' rows)."""
    on = sum(r["ns"]["python"][0] for r in rows if r["kind"] == "simulation")
    off = sum(r["ns"]["python"][1] for r in rows if r["kind"] == "simulation")
    return [on, off]
