"""d3rlpy's online DQN (bench/workloads/d3rlpy_dqn.py), attached as a user would, its operations
against d3rlpy's own timers: `fit_online` measures each part of every step (inference, the env
step, the replay buffer's draw, the update) and writes their mean per epoch of 1,000 steps. The
known answer of a session is each part's time over the step's time, from the epochs written while
it was attached (their rows are whole epochs inside the session, give or take the one it ended in).

d3rlpy pins gymnasium==1.0.0, so it runs from a virtual environment of its own (--python; the
workload's docstring has the two commands).

usage: sudo .venv/bin/python bench/d3rlpy_ops.py --python /tmp/d3venv/bin/python [--sessions 3] [--seconds 20]
       [--exact 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from attached import headless, op_shares, started

HERE = os.path.dirname(os.path.abspath(__file__))
# d3rlpy's timer -> the operations the built-in rules name inside it
PARTS = {"inference": ("inference",), "environment_step": ("simulation",), "sample_batch": ("replay_sample",),
         "algorithm_update": ("train", "backward", "optimizer_step")}


def _rows(logdir: str, part: str) -> dict[int, float]:
    """{epoch: mean seconds} of one timer (the first epoch has no update, so no row for it)."""
    run = next(os.scandir(logdir)).path
    with open(os.path.join(run, f"time_{part}.csv")) as f:
        return {int(r[0]): float(r[2]) for r in (line.split(",") for line in f.read().splitlines())}


def _session(pid: int, logdir: str, seconds: float, extra: list[str]) -> tuple[dict, dict]:
    before = set(_rows(logdir, "step"))
    s = headless(pid, seconds, extra)
    steps = _rows(logdir, "step")
    inside = [e for e in steps if e not in before][1:]   # the epoch running at attach ended inside: left out
    step_s = sum(steps[e] for e in inside)
    truth = {p: sum(_rows(logdir, p).get(e, 0.0) for e in inside) / step_s for p in PARTS}
    ops = s["operations"]
    ours = op_shares(s, PARTS)
    # torch calls per env step: counted in exact mode, estimated in default mode (the session's
    # steps: its wall time over d3rlpy's mean time per step in it)
    ours["calls_per_step"] = s["calls"]["backend"] * (step_s / len(inside)) / ops["<all>"]["wall_s"]
    bound = s["estimates"].get("backend", {}).get("calls_bound")
    ours["calls_bound"] = bound / s["calls"]["backend"] if isinstance(bound, int) and s["calls"]["backend"] else None
    return truth, ours


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", required=True, help="the interpreter of a venv with torch==2.13.0 and d3rlpy==2.8.1")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--exact", type=int, default=0, help="sessions with --max-overhead 100 after the default ones")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as logdir:
        p = started([a.python, os.path.join(HERE, "workloads", "d3rlpy_dqn.py"), logdir])
        try:
            time.sleep(12)                          # the first 1,000 steps fill the buffer, no updates
            print("| session | mode | epochs | inference | env step | replay draw | update | torch calls a step |")
            print("|---|---|---|---|---|---|---|---|")
            for i in range(a.sessions + a.exact):
                exact = i >= a.sessions
                truth, ours = _session(p.pid, logdir, a.seconds, ["--max-overhead", "100"] if exact else [])
                cells = " | ".join(f"{100 * ours[k]:.1f} / {100 * truth[k]:.1f}" for k in PARTS)
                epochs = max(_rows(logdir, "step"))
                calls = f"{ours['calls_per_step']:.0f}"
                bound = ours["calls_bound"]
                calls += f" ±{bound:.0%}" if bound is not None else ""
                print(f"| {i} | {'exact' if exact else 'default'} | {epochs} | {cells} | {calls} |", flush=True)
        finally:
            p.kill()
    print("\ncells: ours / d3rlpy's own, % (ours: each part's operations over all operations' wall time; "
          "d3rlpy's: each part's time over its steps' time); torch calls a step: estimated with their stated bound "
          "in default mode, counted in exact mode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
