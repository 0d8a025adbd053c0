"""Where a session's cost lands in the target, next to what the session says it cost (issue 12's
honest self-report): per training step, the target's wall time and its user and system CPU
(/proc), in spans attached and unattached, alternating (ABAB), medians over the reps.

The measured overhead is the attached span's extra time per step as a share of its own time
per step, the quantity the self-report estimates (`overhead.estimated_pct`: cost over wall
time). System CPU is the traps and the BPF programs; user CPU, the program's own code running
slower after them (caches) and anything else in user space. A program whose work per step
drifts (an agent whose episodes lengthen as it learns, tianshou's test phases) moves the
per-step time between spans by more than a default session costs: read the tiny loop's rows
for the self-report's error, the real programs' for where the cost lands.

usage: sudo .venv/bin/python bench/cost_split.py [--program tiny|tianshou|zoo|cleanrl]...
       [--mode default|exact]... [--reps 8] [--span 4] [--write]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import real_rl  # noqa: E402
from attach_cost import Target  # noqa: E402
from median_ci import median_interval  # noqa: E402

PY = sys.executable
MODES = {"default": [], "exact": ["--max-overhead", "100"]}
TINY = "issue 16's tiny-op RL loop (bench/workloads/rl_tiny_loop.py)"


def _tree_cpu(pid: int) -> tuple[float, float]:
    c = real_rl.tree_cpu(pid)
    if c is None:
        raise RuntimeError(f"the target (PID {pid}) is gone")
    return c


def per_step(steps0: int, steps1: int, cpu0: tuple, cpu1: tuple, wall_s: float) -> dict:
    """A span's microseconds per step: wall, user CPU, system CPU."""
    n = max(1, steps1 - steps0)
    return {"wall_us": 1e6 * wall_s / n, "user_us": 1e6 * (cpu1[0] - cpu0[0]) / n,
            "sys_us": 1e6 * (cpu1[1] - cpu0[1]) / n}


def summarize(plain: list[dict], attached: list[dict]) -> dict:
    """Medians over paired spans (each rep's attached span against the plain span before it):
    the measured overhead (% of attached wall time), the self-report, and the extra user and
    system CPU per step."""
    meas = [100 * (a["wall_us"] - p["wall_us"]) / a["wall_us"] for p, a in zip(plain, attached)]
    lo, hi, cover = median_interval(meas)
    med = lambda rows, k: statistics.median(r[k] for r in rows)   # noqa: E731
    extra = lambda k: statistics.median(a[k] - p[k] for p, a in zip(plain, attached))   # noqa: E731
    out = {"plain_us": med(plain, "wall_us"), "attached_us": med(attached, "wall_us"),
           "measured_pct": statistics.median(meas), "interval": (lo, hi, cover),
           "self_pct": med(attached, "self_pct"), "hits_per_s": med(attached, "hits_per_s"),
           "user_us": extra("user_us"), "sys_us": extra("sys_us")}
    out["ratio"] = out["self_pct"] / out["measured_pct"] if out["measured_pct"] > 0 else float("nan")
    return out


@contextlib.contextmanager
def _program(key: str):
    """(pid, step counter, scratch dir) of a program run for the whole bench."""
    if key != "tiny":
        with real_rl.training(key) as (t, steps, tmp):
            yield t.pid, steps, tmp
        return
    loop = Target(busy=False)
    try:
        time.sleep(4.0)
        with tempfile.TemporaryDirectory() as tmp:
            yield loop.p.pid, loop, tmp
    finally:
        loop.close()


def _span(pid: int, steps, seconds: float) -> dict:
    s0, c0, w0 = steps.now(), _tree_cpu(pid), time.monotonic()
    time.sleep(seconds)
    return per_step(s0, steps.now(), c0, _tree_cpu(pid), time.monotonic() - w0)


def _attached(pid: int, steps, tmp: str, mode: str, span: float) -> dict:
    """One session: the span starts 1 s after "attached" and ends before the session does."""
    summary = os.path.join(tmp, "s.json")
    m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(pid), "--headless", "--duration",
                          str(span + 2.5), "--summary", summary, *MODES[mode]], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in m.stderr:
        if "attached to PID" in line:
            break
    time.sleep(1.0)
    row = _span(pid, steps, span)
    m.stderr.read()
    if m.wait() != 0:
        raise RuntimeError(f"rlscope-top exited {m.returncode}")
    with open(summary) as f:
        s = json.load(f)
    wall = s["totals"]["wall_s"]
    return {**row, "self_pct": s["overhead"]["estimated_pct"], "hits_per_s": s["overhead"]["probe_hits"] / wall}


def run(key: str, mode: str, reps: int, span: float) -> dict:
    """``reps`` pairs of an unattached span and an attached one on one process."""
    plain, attached = [], []
    with _program(key) as (pid, steps, tmp):
        for _ in range(reps):
            plain.append(_span(pid, steps, span))
            attached.append(_attached(pid, steps, tmp, mode, span))
            time.sleep(1.0)
    return summarize(plain, attached)


def row(key: str, mode: str, reps: int, r: dict) -> str:
    lo, hi, cover = r["interval"]
    name = TINY if key == "tiny" else real_rl.PROGRAMS[key][0]
    return (f"| {name} | {mode} | {reps} | {r['plain_us']:.1f} | {r['attached_us']:.1f} | {r['measured_pct']:.1f} "
            f"[{lo:.1f} to {hi:.1f}, {100 * cover:.0f}%] | {r['self_pct']:.1f} | {r['ratio']:.2f} | "
            f"{r['user_us']:+.1f} | {r['sys_us']:+.1f} | {r['hits_per_s']:,.0f} |")


HEADER = ["| program | mode | reps | us/step unattached | us/step attached | measured overhead, % of attached wall "
          "(median [interval]) | self-reported % | self / measured | extra user CPU, us/step | extra system CPU, "
          "us/step | probe hits/s |", "|---|---|---|---|---|---|---|---|---|---|---|"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", choices=["tiny", *sorted(real_rl.PROGRAMS)], action="append")
    ap.add_argument("--mode", choices=sorted(MODES), action="append")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--span", type=float, default=4.0, help="seconds of each measured span")
    ap.add_argument("--write", action="store_true", help="write the table to docs/overhead.md")
    a = ap.parse_args()
    lines = list(HEADER)
    for key in a.program or ["tiny", "tianshou"]:
        for mode in a.mode or ["default", "exact"]:
            lines.append(row(key, mode, a.reps, run(key, mode, a.reps, a.span)))
            print(lines[-1], flush=True)
    if a.write:
        from docsection import replace_section  # noqa: PLC0415

        cmd = " ".join(["sudo .venv/bin/python bench/cost_split.py", *sys.argv[1:]])
        replace_section(os.path.join(REPO, "docs", "overhead.md"), "## Where the cost lands, against the self-report",
                        [f"Generated by `{cmd}` on {os.uname().nodename} ({os.cpu_count()} cores, kernel "
                         f"{os.uname().release}), {time.strftime('%Y-%m-%d')}.", "", *lines])


if __name__ == "__main__":
    main()
