"""The monitor's own steady CPU, per thread, attached with default settings: what it takes
from a machine whose cores the job keeps busy (the self-report's `contention`), and, through
a shared core's caches, from the job beside it.

Each repetition attaches `rlscope-top attach PID --headless` to one long-running target, waits
SETTLE s after "attached", then reads every monitor thread's run time (/proc/.../schedstat)
over SPAN s. Targets: issue 16's tiny-op loop (bench/workloads/rl_tiny_loop.py), and rl-zoo3
PPO and tianshou DQN as bench/real_rl.py runs them, and rl-zoo3 SAC on MuJoCo's Hopper.

`--screen WxH` runs `rlscope-top attach PID` with its live screen instead, in a detached tmux
pane of that size (what a user runs by default: the screen in the monitor's process), and
stops it with `q`.

usage: sudo .venv/bin/python bench/monitor_cpu.py [--target tiny|zoo|tianshou|sac]... [--reps 3] [--span 10]
                                                  [--screen 150x45]
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
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
           "tianshou": (PROGRAMS["tianshou"][0], PROGRAMS["tianshou"][1], "ready"),
           "sac": ("rl-zoo3 2.9.2 SAC Hopper-v5 (MuJoCo)",
                   ["-m", "rl_zoo3.train", "--algo", "sac", "--env", "Hopper-v5", "-n", "100000000", "--seed", "0",
                    "--eval-freq", "-1", "--device", "cpu", "--log-interval", "-1",
                    "-params", "learning_starts:1000"], None)}
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


def _span(pid: int, settle: float, span: float) -> dict:
    """The monitor's CPU over ``span`` s after ``settle`` s, % of a core, in all and by thread
    (largest first)."""
    time.sleep(settle)
    a = _threads(pid)
    time.sleep(span)
    b = _threads(pid)
    per = sorted((100 * (b[t] - a.get(t, 0)) / 1e9 / span for t in b), reverse=True)
    return {"total": sum(per), "threads": per}


def one(pid: int, settle: float, span: float) -> dict:
    """One headless session (``_span``)."""
    m = subprocess.Popen([CLI, "attach", str(pid), "--headless"], env=monitor_env(), cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while "attached to PID" not in (m.stderr.readline() or "attached to PID"):
            pass
        threading.Thread(target=m.stderr.read, daemon=True).start()
        return _span(m.pid, settle, span)
    finally:
        m.send_signal(2)
        m.wait(timeout=60)


def one_screen(pid: int, settle: float, span: float, size: str) -> dict:
    """One session with the live screen, in a tmux pane of ``size`` (WxH); "attached" is the
    ring's appearance (the screen owns the terminal, so there is no status line to read)."""
    w, h = size.split("x")
    name = f"moncpu{os.getpid()}"
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in monitor_env().items() if k.startswith(("RLSCOPE", "PYTHON")))
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", w, "-y", h,
                    f"cd {REPO} && exec env -u PYTHONDONTWRITEBYTECODE {env} {CLI} attach {pid} --summary /dev/null"], check=True)
    try:
        mon = int(subprocess.check_output(["tmux", "list-panes", "-t", name, "-F", "#{pane_pid}"], text=True))
        deadline = time.monotonic() + 60
        while not glob.glob(f"/dev/shm/rlscope-top/ring-{pid}-*") and time.monotonic() < deadline:
            time.sleep(0.1)
        return _span(mon, settle, span)
    finally:
        subprocess.run(["tmux", "send-keys", "-t", name, "q"], check=False)
        for _ in range(100):
            if subprocess.run(["tmux", "has-session", "-t", name], capture_output=True).returncode:
                break
            time.sleep(0.1)
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=sorted(TARGETS), action="append")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--span", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--screen", metavar="WxH", help="with the live screen in a tmux pane of this size")
    a = ap.parse_args()
    warm_bytecode(REPO)
    how = f"live screen {a.screen}" if a.screen else "headless"
    rows = [f"| target | monitor CPU, % of a core, {how} (each rep) | median | by thread, median rep |", "|---|---|---|---|"]
    for key in a.target or ["tiny"]:
        name, argv, ready = TARGETS[key]
        with tempfile.TemporaryDirectory() as tmp:
            p = _start(argv, ready, tmp)
            try:
                got = [one_screen(p.pid, a.settle, a.span, a.screen) if a.screen else one(p.pid, a.settle, a.span)
                       for _ in range(a.reps)]
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
