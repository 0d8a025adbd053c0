"""The monitor's memory over a long attach (issue 20: flat memory).

Attaches `rlscope-top` (default settings) to a hot loop (bench/workloads/rl_tiny_loop.py,
~150k probed torch calls/s) and a thread-churn target, samples the monitor's RSS every 5 s,
and reports the slope after the first minute (least squares), in MB per hour.

usage: sudo .venv/bin/python bench/soak.py [--minutes 60] [--write]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
CHURN = ("import threading, time\n"
         "print('ready', flush=True)\n"
         "while True:\n"
         "    ts = [threading.Thread(target=time.sleep, args=(0.001,)) for _ in range(30)]\n"
         "    [t.start() for t in ts]; [t.join() for t in ts]\n")


def slope_mb_per_h(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS (bytes) over time (s), in MB per hour."""
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    num = sum((t - mt) * (r - mr) for t, r in samples)
    den = sum((t - mt) ** 2 for t, _ in samples) or 1.0
    return num / den * 3600 / 2**20


def soak(target_argv: list[str], minutes: float) -> dict:
    t = subprocess.Popen(target_argv, stdout=subprocess.PIPE, text=True)
    assert t.stdout.readline().startswith("ready")
    with tempfile.TemporaryDirectory() as d:
        m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(t.pid), "--headless",
                              "--duration", str(minutes * 60), "--summary", os.path.join(d, "s.json")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pm, t0, samples = psutil.Process(m.pid), time.monotonic(), []
        while m.poll() is None:
            try:
                samples.append((time.monotonic() - t0, pm.memory_info().rss))
            except psutil.Error:
                break
            time.sleep(5)
        rc = m.wait()
    t.kill()
    late = [s for s in samples if s[0] >= 60] or samples
    return {"rc": rc, "first_mb": late[0][1] / 2**20, "last_mb": samples[-1][1] / 2**20,
            "slope": slope_mb_per_h(late) if len(late) > 2 else float("nan"), "n": len(samples)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--write", action="store_true", help="put the table in docs/security.md")
    a = ap.parse_args()
    rows = []
    for name, argv in (("hot torch loop", [PY, os.path.join(HERE, "workloads", "rl_tiny_loop.py")]),
                       ("thread churn (~3000 threads/s)", [PY, "-c", CHURN])):
        r = soak(argv, a.minutes)
        rows.append(f"| {name} | {a.minutes:g} min | {r['rc']} | {r['first_mb']:.0f} MB | {r['last_mb']:.0f} MB "
                    f"| {r['slope']:+.2f} MB/h |")
        print(rows[-1], flush=True)
    if a.write:
        sys.path.insert(0, HERE)
        from docsection import replace_section  # noqa: PLC0415

        replace_section(os.path.join(REPO, "docs", "security.md"), "## Memory over a long attach", [
            f"`sudo .venv/bin/python bench/soak.py --minutes {a.minutes:g} --write` on {platform.node()} "
            f"({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}: the monitor's RSS every 5 s, the slope "
            "after the first minute (least squares). Issue 20 asks < 1 MB/h over an hour.", "",
            "| target | attached | exit | RSS after 1 min | RSS at end | slope after 1 min |", "|---|---|---|---|---|---|",
            *rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
