"""Issue 12: does a default session's estimate stay with the target's own ticks, session after
session? One training process from bench/real_rl.py's programs, run unchanged; SESSIONS
default `rlscope-top attach --headless` sessions in a row. For each, the busiest Python
thread's estimated Backend share of its on-CPU time (`backend_s / on_cpu_s`, which counts
Backend's off-CPU time too: ~1.5 pp over by construction) against its CPU-clock ticks' share
in Backend (`where.backend`, placed by call site), and the summary's repair counts
(`probes.closed_at_step`, `probes.missed_switch_ins`). A rare miss (stop 61: 3 sessions in 30
read +7.9 to +11.3 pp, a call left open at a budget step) needs many sessions to show.

usage: sudo .venv/bin/python bench/estimate_vs_ticks.py [--program zoo] [--sessions 30]
       [--seconds 20] [--record DIR] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from real_rl import PROGRAMS, _calibrated, training  # noqa: E402

PY = sys.executable
MISS_PP = 5.0        # issue 12's bound for default against exact; a departure past it is counted


def session_row(s: dict) -> dict:
    """The busiest Python thread's estimate against its own ticks, and the repair counts."""
    th = max((t for t in s["threads"] if t.get("python_thread")), key=lambda t: t.get("on_cpu_s") or 0)
    on = th.get("on_cpu_s") or 0.0
    est = (th.get("backend_s") or 0.0) / on if on else float("nan")
    tick = (th.get("where") or {}).get("backend", float("nan"))
    return {"tid": th["tid"], "on_cpu_s": on, "off_cpu_s": th.get("off_cpu_s") or 0.0, "estimate": est, "ticks": tick, "diff_pp": 100 * (est - tick),
            "closed_at_step": s["probes"].get("closed_at_step"), "missed_switch_ins": s["probes"].get("missed_switch_ins"),
            "modes": s["budget"]["modes"]}


def run(key: str, sessions: int, seconds: float, record: str | None) -> list[dict]:
    """Start the program, warm it up, and attach ``sessions`` default sessions one after another."""
    rows = []
    with training(key) as (t, _steps, tmp):
        for i in range(sessions):
            summary = os.path.join(tmp, f"s{i}.json")
            extra = ["--record", os.path.join(record, f"{key}-{t.pid}-s{i}.rec")] if record else []
            m = subprocess.run([PY, "-m", "rlscope_top.cli", "attach", str(t.pid), "--headless", "--duration",
                                str(seconds), "--summary", summary, "-q", *extra],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp)
            if m.returncode != 0:
                raise RuntimeError(f"rlscope-top exited {m.returncode}: {m.stderr[-800:]}")
            with open(summary) as f:
                rows.append(session_row(json.load(f)))
            print(json.dumps(rows[-1]), flush=True)
            time.sleep(2.0)
    return rows


def table(key: str, rows: list[dict]) -> list[str]:
    """One row: the spread of estimate - ticks, and each session past MISS_PP with its thread's
    off-CPU seconds (Backend's off-CPU time counts in the estimate, not in the ticks)."""
    d = sorted(r["diff_pp"] for r in rows)
    past = ", ".join(f"{r['diff_pp']:+.1f} (off-CPU {r['off_cpu_s']:.2f} s)" for r in rows if abs(r["diff_pp"]) > MISS_PP)
    n_past = sum(abs(r["diff_pp"]) > MISS_PP for r in rows)
    return ["| program | sessions | estimate - ticks, pp: min / median / max | past 5 pp | thread off-CPU, s: median | calls closed at a step | missed switch-ins per session |",
            "|---|---|---|---|---|---|---|",
            f"| {PROGRAMS[key][0]} | {len(rows)} | {d[0]:+.1f} / {statistics.median(d):+.1f} / {d[-1]:+.1f} | {n_past}"
            f"{f' ({past})' if past else ''} | {statistics.median(r['off_cpu_s'] for r in rows):.2f} | "
            f"{sum(r['closed_at_step'] or 0 for r in rows)} | {statistics.median(r['missed_switch_ins'] or 0 for r in rows):g} (median) |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="zoo")
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--record", metavar="DIR", help="also record each session into DIR (replay and bisect a miss)")
    ap.add_argument("--write", action="store_true", help="write the table to docs/accuracy.md")
    a = ap.parse_args()
    if a.sessions < 1 or a.seconds <= 0:
        ap.error("--sessions must be at least 1 and --seconds above 0")
    if a.record:
        os.makedirs(a.record, exist_ok=True)
    _calibrated()
    rows = run(a.program, a.sessions, a.seconds, a.record)
    lines = table(a.program, rows)
    print("\n".join(lines))
    if a.write:
        from docsection import generated_by, replace_section  # noqa: PLC0415
        replace_section(os.path.join(REPO, "docs", "accuracy.md"), "## Real RL programs: the estimate against the ticks",
                        [generated_by(f"bench/estimate_vs_ticks.py --program {a.program} --sessions {a.sessions} "
                                      f"--seconds {a.seconds:g} --write"), "", *lines])


if __name__ == "__main__":
    main()
