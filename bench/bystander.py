"""What a session costs a process outside the job.

A bystander, an unrelated process calling the same library (torch.mm in a loop), would trap on
each call if the probes served every process that maps the library: so they did when a session
followed a process tree, until stop 68 (56% slower here). Each followed process now has its
own links (probes/loader.py ``_link_pids``). This measures the bystander's call rate, ABAB,
with no session, with a session on another torch process (the job: default, following
children) and with `--no-children` (the job's PID alone).

usage: sudo .venv/bin/python bench/bystander.py [--rounds 3] [--seconds 4] [--write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
BYSTANDER = r"""
import sys, time, torch
torch.set_num_threads(1)
a = torch.randn(16, 16)
out = open(sys.argv[1], "w", buffering=1)
n, t0 = 0, time.monotonic()
while True:
    torch.mm(a, a)
    n += 1
    if n % 2000 == 0:
        out.write(f"{time.monotonic_ns()} {n}\n")
"""
JOB = "import time, torch\nprint('ready', flush=True)\nwhile True:\n    time.sleep(1)\n"


def _rate(log: str, t0: int, t1: int) -> float:
    """Calls per second of the bystander between two CLOCK_MONOTONIC instants."""
    pts = []
    with open(log) as f:
        for line in f:
            ts, n = map(int, line.split())
            if t0 <= ts <= t1:
                pts.append((ts, n))
    if len(pts) < 2:
        return float("nan")
    return (pts[-1][1] - pts[0][1]) / ((pts[-1][0] - pts[0][0]) / 1e9)


def _span(log: str, seconds: float, job: int | None, extra: list[str], tmp: str) -> float:
    if job is None:
        t0 = time.monotonic_ns()
        time.sleep(seconds)
        return _rate(log, t0, time.monotonic_ns())
    m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(job), "--headless", "--duration",
                          str(seconds + 3), "--summary", os.path.join(tmp, "s.json"), *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in m.stderr:                  # measure once the probes are in
        if "attached to PID" in line:
            break
    time.sleep(0.5)
    t0 = time.monotonic_ns()
    time.sleep(seconds)
    r = _rate(log, t0, time.monotonic_ns())
    m.wait()
    return r


def measure(rounds: int, seconds: float) -> dict[str, list[float]]:
    """Bystander call rates per condition, interleaved."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "rate")
        by = subprocess.Popen([PY, "-c", BYSTANDER, log])
        job = subprocess.Popen([PY, "-c", JOB], stdout=subprocess.PIPE, text=True)
        job.stdout.readline()
        time.sleep(3)
        out: dict[str, list[float]] = {"alone": [], "session (tree)": [], "session --no-children": []}
        try:
            for _ in range(rounds):
                out["alone"].append(_span(log, seconds, None, [], tmp))
                out["session (tree)"].append(_span(log, seconds, job.pid, [], tmp))
                out["alone"].append(_span(log, seconds, None, [], tmp))
                out["session --no-children"].append(_span(log, seconds, job.pid, ["--no-children"], tmp))
        finally:
            by.kill()
            job.kill()
    return out


def table(rates: dict[str, list[float]]) -> list[str]:
    base = statistics.median(rates["alone"])
    rows = ["| condition | bystander torch.mm calls/s (median) | runs | slowdown % |", "|---|---|---|---|"]
    for k, v in rates.items():
        med = statistics.median(v)
        rows.append(f"| {k} | {med:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} | {100 * (1 - med / base):.1f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--write", action="store_true", help="write the table to docs/overhead.md")
    a = ap.parse_args()
    rows = table(measure(a.rounds, a.seconds))
    print("\n".join(rows))
    if a.write:
        sys.path.insert(0, HERE)
        from docsection import replace_section  # noqa: PLC0415

        how = (f"`sudo .venv/bin/python bench/bystander.py --write` ({a.rounds} rounds, {a.seconds:g} s spans, "
               "ABAB; a session on an idle torch process, a bystander calling torch.mm(16x16) in a loop outside it).")
        replace_section(os.path.join(REPO, "docs", "overhead.md"),
                        "## A bystander: another process using the same library", [how, "", *rows])


if __name__ == "__main__":
    main()
