"""The summary's invariants, checked on any summary document: random streams
(test_invariants.py) and real RL programs (test_ebpf_real_rl.py) use the same check.

No negative time or share anywhere; shares in [0, 1] adding up to 1; the categories add up
to the on/off-CPU totals; each thread's categories add up to its own on + off time; the
operations (with <none>) add up to the categories; n/a is None and the same everywhere.
"""

from __future__ import annotations

import math

import pytest

from rlscope_top.vocab import CATEGORIES


def check_figures(fig: dict, where: str) -> None:
    for k, v in fig.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert v >= 0 and math.isfinite(v), (where, k, v)


def check_summary(doc: dict) -> None:
    t = doc["totals"]
    check_figures(t, "totals")
    estimating = [c for c, e in doc["estimates"].items() if e["state"] == "estimating"]
    for c in estimating:                       # no window yet: n/a, and Python with it, never a number
        assert t[f"{c}_s"] is None and t["python_s"] is None and doc["shares"][c] is None
    cats = [t[f"{c}_s"] for c in CATEGORIES if t[f"{c}_s"] is not None]
    if not estimating:
        assert sum(cats) == pytest.approx(t["on_cpu_s"] + t["off_cpu_s"], abs=1e-5), t
    shares = [v for v in doc["shares"].values() if v is not None]
    assert all(0 <= v <= 1 for v in shares), doc["shares"]
    if shares and not estimating:
        assert sum(shares) == pytest.approx(1.0, abs=1e-4) or sum(cats) == 0
    for c, sp in doc["split"].items():
        check_figures(sp, f"split.{c}")
    for name, op in doc["operations"].items():
        check_figures({k: v for k, v in op.items() if not isinstance(v, dict)}, f"op {name}")
        for c, v in (op.get("shares") or {}).items():
            assert v is None or 0 <= v <= 1 + 1e-9, (name, c, v)
    rows = [op for n, op in doc["operations"].items() if n != "<all>" and "wall_s" in op]
    if rows and not estimating:
        assert sum(op["wall_s"] for op in rows) == pytest.approx(sum(cats), abs=1e-4)
    for th in doc["threads"]:    # ids are not figures: an "(N exited threads)" row's tid is negative
        check_figures({k: v for k, v in th.items() if k not in ("tid", "pid")}, f"thread {th['tid']}")
        parts = [th[k] for k in ("python_s", "native_s", "backend_s", "simulator_s", "cuda_api_s") if th.get(k) is not None]
        assert sum(parts) == pytest.approx(th["on_cpu_s"] + th["off_cpu_s"], abs=1e-5), th
        assert (th["python_s"] is None) == (not th["python_thread"])
    for part in ("critical_path", "cpu_s"):
        check_figures({k: v for k, v in doc["job"][part].items() if v is not None}, f"job.{part}")
    # the processes move what the job's totals move to Simulator (net of the estimates)
    moved = (doc.get("simulation_split") or {}).get("python_s") or 0.0
    procs = doc.get("processes") or []
    if procs and moved and not estimating and all((p["totals"]["python_s"] or 0) > 0 for p in procs):   # none capped
        got = sum(p["simulation_python_s"] or 0 for p in procs)
        assert got == pytest.approx(moved, rel=1e-3, abs=1e-4), (got, moved, doc["processes"])
    # every on-CPU second of every thread is somewhere in the job's CPU view (a native
    # thread's ticks in a probe's trap are its kernel time)
    on = sum(th["on_cpu_s"] for th in doc["threads"])
    assert sum(v or 0 for v in doc["job"]["cpu_s"].values()) == pytest.approx(on, rel=1e-4, abs=1e-4), doc["job"]
    for c, e in doc["estimates"].items():
        assert e["bound_pp"] is None or e["bound_pp"] >= 0
        assert e["windows"] >= 1 and e["state"] in ("ok", "estimating")
