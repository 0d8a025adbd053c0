"""Sampled operations against the program unprobed: unannotated SB3 PPO CartPole
(tests/targets/sb3_ops.py, which times its own operations in-process, flattened as the
built-in rules are) runs 6 s unattached, then a session of 12 s, then 6.5 s unattached. Each
operation's share of the session against its share of the unattached stretches' wall time
(their mean): the truth without the probes' cost, which exact mode takes out.
bench/ops_accuracy.py compares against the same program's timing while attached instead.

usage: sudo .venv/bin/python bench/ops_unprobed.py [--mode exact|default] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TARGETS = os.path.join(REPO, "tests", "targets")
sys.path.insert(0, os.path.join(REPO, "tests"))
from test_ebpf_sampled_ops import _window_shares  # noqa: E402  (an operation's share of a stretch, from the snapshots)

PY = sys.executable
OPS = ("collect_rollouts", "simulation", "train", "backward", "optimizer_step")


def run(mode: str, tmp: str, i: int) -> dict:
    """One run; returns {op: (ours %, unprobed %)}."""
    out, summary = os.path.join(tmp, f"inproc{i}.json"), os.path.join(tmp, f"s{i}.json")
    t = subprocess.Popen([PY, "sb3_ops.py", out], cwd=TARGETS, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        while "ready" not in t.stdout.readline():
            pass
        time.sleep(3)
        u0 = time.monotonic_ns()
        time.sleep(6)
        u1 = time.monotonic_ns()
        extra = ["--max-overhead", "100"] if mode == "exact" else []
        subprocess.run([PY, "-m", "rlscope_top.cli", "attach", str(t.pid), "--headless", "--duration", "12",
                        "--summary", summary, *extra], cwd=tmp, check=True, capture_output=True)
        a0 = time.monotonic_ns() + int(0.5e9)
        time.sleep(6.5)
        a1 = time.monotonic_ns()
    finally:
        t.send_signal(signal.SIGTERM)
        t.wait(timeout=60)
    with open(out) as f:
        snaps = json.load(f)
    with open(summary) as f:
        ops = json.load(f)["operations"]
    before, after = (_window_shares(snaps, {"t0_monotonic_ns": t0, "t1_monotonic_ns": t1}, 1)
                     for t0, t1 in ((u0, u1), (a0, a1)))
    return {n: (100 * ops[n]["share"], 50 * (before.get(n, 0) + after.get(n, 0))) for n in OPS if n in ops}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("exact", "default"), default="exact")
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    print("| run | " + " | ".join(f"{n}: ours / unprobed (pp)" for n in OPS) + " | largest error, pp |")
    print("|---|" + "---|" * (len(OPS) + 1))
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            r = run(a.mode, tmp, i)
            cells = [f"{r[n][0]:.1f} / {r[n][1]:.1f} ({r[n][0] - r[n][1]:+.1f})" if n in r else "n/a" for n in OPS]
            worst = max(abs(o - u) for o, u in r.values())
            print(f"| {a.mode} {i + 1} | " + " | ".join(cells) + f" | {worst:.1f} |", flush=True)


if __name__ == "__main__":
    main()
