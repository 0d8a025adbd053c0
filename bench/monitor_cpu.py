"""The monitor's own steady CPU, per thread, attached with default settings: what it takes
from a machine whose cores the job keeps busy (the self-report's `contention`), and, through
a shared core's caches, from the job beside it.

Each repetition attaches `rlscope-top attach PID --headless` to one long-running target, waits
SETTLE s after "attached", then reads every monitor thread's run time (/proc/.../schedstat)
over SPAN s. Targets: issue 16's tiny-op loop (bench/workloads/rl_tiny_loop.py), and rl-zoo3
PPO and tianshou DQN as bench/real_rl.py runs them.

usage: sudo .venv/bin/python bench/monitor_cpu.py [--target tiny|zoo|tianshou]... [--reps 3] [--span 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from monitor_env import monitor_env, warm_bytecode  # noqa: E402
from real_rl import PROGRAMS, PY  # noqa: E402

CLI = os.path.join(REPO, ".venv", "bin", "rlscope-top")
TARGETS = {"tiny": ("tiny-op RL loop", [os.path.join(HERE, "workloads", "rl_tiny_loop.py")], "ready"),
           "zoo": (PROGRAMS["zoo"][0], PROGRAMS["zoo"][1], None),
           "tianshou": (PROGRAMS["tianshou"][0], PROGRAMS["tianshou"][1], "ready")}
WARMUP_S = 15.0      # a program without a ready line (rl-zoo3) is given this long to start training


def _start(argv: list[str], ready: str | None, tmp: str) -> subprocess.Popen:
    p = subprocess.Popen([PY, *argv], cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if ready is None:
        time.sleep(WARMUP_S)
    else:
        while ready not in (p.stdout.readline() or ready):
            pass
    threading.Thread(target=p.stdout.read, daemon=True).start()
    return p


def _threads(pid: int) -> dict[int, int]:
    """Run time (ns) of each thread of ``pid``."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                out[int(t)] = int(f.read().split()[0])
        except OSError:
            pass
    return out


def one(pid: int, settle: float, span: float) -> dict:
    """One session: the monitor's CPU over ``span`` s, % of a core, in all and by thread (largest first)."""
    m = subprocess.Popen([CLI, "attach", str(pid), "--headless"], env=monitor_env(), cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while "attached to PID" not in (m.stderr.readline() or "attached to PID"):
            pass
        threading.Thread(target=m.stderr.read, daemon=True).start()
        time.sleep(settle)
        a = _threads(m.pid)
        time.sleep(span)
        b = _threads(m.pid)
    finally:
        m.send_signal(2)
        m.wait(timeout=60)
    per = sorted((100 * (b[t] - a.get(t, 0)) / 1e9 / span for t in b), reverse=True)
    return {"total": sum(per), "threads": per}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=sorted(TARGETS), action="append")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--span", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=3.0)
    a = ap.parse_args()
    warm_bytecode(REPO)
    rows = ["| target | monitor CPU, % of a core (each rep) | median | by thread, median rep |", "|---|---|---|---|"]
    for key in a.target or ["tiny"]:
        name, argv, ready = TARGETS[key]
        with tempfile.TemporaryDirectory() as tmp:
            p = _start(argv, ready, tmp)
            try:
                got = [one(p.pid, a.settle, a.span) for _ in range(a.reps)]
            finally:
                p.kill()
        tot = [g["total"] for g in got]
        mid = sorted(got, key=lambda g: g["total"])[len(got) // 2]
        rows.append(f"| {name} | {', '.join(f'{x:.2f}' for x in tot)} | {statistics.median(tot):.2f} | "
                    f"{' + '.join(f'{x:.2f}' for x in mid['threads'] if x >= 0.01)} |")
        print(rows[-1], flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
