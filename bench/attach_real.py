"""Issue 16 on real RL programs: attach time with the compiled program kept (the default) and
compiling (RLSCOPE_BPF_CACHE=0), on an idle machine and beside a busy loop.

Each program (bench/real_rl.py's: rl-zoo3 PPO and tianshou DQN on CartPole, run unchanged)
trains for the whole run; sessions of --span s alternate the two settings. Attach = monitor
start to its "attached" line; the summary's `probes.program` says where the program came
from and how long loading it took.

usage: sudo .venv/bin/python bench/attach_real.py [--reps 3] [--span 2] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
sys.path.insert(0, HERE)
from real_rl import PROGRAMS  # noqa: E402
from docsection import generated_by, replace_section  # noqa: E402
from monitor_env import monitor_env, warm_bytecode  # noqa: E402

SETTINGS = {"kept (default)": {}, "compiling": {"RLSCOPE_BPF_CACHE": "0"}}
WARM_S = 8.0                  # past the program's start-up (imports, env creation)


def session(pid: int, env: dict, span: float, tmp: str) -> dict:
    summary = os.path.join(tmp, f"s-{time.monotonic_ns()}.json")
    t0 = time.monotonic()
    m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(pid), "--headless", "--duration", str(span),
                          "--summary", summary], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                         cwd=tmp, env=monitor_env(env))
    attach = None
    for line in m.stderr:
        if attach is None and "attached to PID" in line:
            attach = time.monotonic() - t0
    m.wait(120)
    if attach is None or m.returncode != 0:
        raise RuntimeError(f"the session failed (exit {m.returncode})")
    prog = json.load(open(summary))["probes"]["program"]
    return {"attach_s": attach, "from": prog["from"], "load_s": prog["load_s"]}


def run(key: str, reps: int, span: float, busy: bool) -> dict:
    out = {k: [] for k in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        argv = [PY, os.path.join(HERE, "workloads", "count_steps.py"), os.path.join(tmp, "steps"), *PROGRAMS[key][1]]
        p = subprocess.Popen(argv, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        hog = subprocess.Popen([PY, "-c", "while True: pass"]) if busy else None
        try:
            time.sleep(WARM_S)
            for _ in range(reps):
                for name, env in SETTINGS.items():
                    out[name].append(session(p.pid, env, span, tmp))
                    print(f"[{key}{' busy' if busy else ''}] {name}: {out[name][-1]}", file=sys.stderr)
        finally:
            for q in (p, hog):
                if q is not None:
                    q.kill()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--span", type=float, default=2.0)
    ap.add_argument("--write", action="store_true", help="put the table in docs/overhead.md")
    a = ap.parse_args()
    warm_bytecode(REPO)
    lines = ["| program | machine | program from | attach (median, each) | program load (median) |", "|---|---|---|---|---|"]
    for key, label in (("zoo", "rl-zoo3 PPO CartPole-v1"), ("tianshou", "tianshou DQN CartPole-v1")):
        for busy in (False, True):
            res = run(key, a.reps, a.span, busy)
            for name, rs in res.items():
                each = ", ".join(f"{r['attach_s']:.2f}" for r in rs)
                origin = "/".join(sorted({r["from"] for r in rs}))
                lines.append(f"| {label} | {'one busy loop beside it' if busy else 'idle'} | {name}: {origin} | "
                             f"{statistics.median(r['attach_s'] for r in rs):.2f} s ({each}) | "
                             f"{statistics.median(r['load_s'] for r in rs):.2f} s |")
    print("\n".join(lines))
    if a.write:
        replace_section(os.path.join(REPO, "docs", "overhead.md"), "## Attach on real RL programs", [
            generated_by(f"bench/attach_real.py --reps {a.reps} --span {a.span:g} --write"),
            "Each program trains for the whole run, unchanged; sessions alternate the kept program and a compile "
            "(`RLSCOPE_BPF_CACHE=0`). Attach = monitor start to its \"attached\" line; the monitor "
            "runs with its bytecode cached, as an installed tool does (bench/monitor_env.py).", "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
