"""The self-report on a program whose cost is its context switches (bench/workloads/pingpong.py:
two threads passing a byte over pipes, ~2 switches a round trip): its round-trip rate unattached
(the spans either side) against attached (the session's window from 1 s after it opens), next
to the self-report and its parts (issue 12: an honest self-report; the program's bookkeeping
on switches is measured by the program itself, `bookkeeping`).

usage: sudo .venv/bin/python bench/switch_cost.py [--sessions 5] [--seconds 8] [--gap 4] [--args "--sample-hz 0"]
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
sys.path.insert(0, HERE)
from attached import PY, headless  # noqa: E402
from real_rl import Steps, _ratio  # noqa: E402


def _spans(steps: Steps, seconds: float) -> float:
    """The round-trip rate over the next ``seconds``, unattached."""
    t0 = time.monotonic_ns()
    time.sleep(seconds)
    return steps.rate(t0, time.monotonic_ns())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--gap", type=float, default=4.0, help="unattached seconds before and after each session")
    ap.add_argument("--args", default="", help="more rlscope-top arguments for the sessions")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "count")
        steps = Steps(path, every=0.05)       # samples the workload's counter on the monotonic clock
        t = subprocess.Popen([PY, os.path.join(HERE, "workloads", "pingpong.py"), path], stdout=subprocess.PIPE, text=True)
        try:
            assert t.stdout.readline().startswith("ready")
            time.sleep(2.0)
            print("| session | round trips/s unattached / attached | measured slowdown % | self-reported % "
                  "| self / measured | its parts: probes / scheduler / bookkeeping / kernel_extra / sampler % |")
            print("|---|---|---|---|---|---|")
            ratios = []
            before = _spans(steps, a.gap)
            for i in range(a.sessions):
                s = headless(t.pid, a.seconds, a.args.split())
                on = steps.rate(s["window"]["t0_monotonic_ns"] + int(1e9), s["window"]["t1_monotonic_ns"])
                after = _spans(steps, a.gap)
                plain = (before + after) / 2
                meas = 100 * (1 - on / plain)
                rep = s["overhead"]["estimated_pct"]
                src, w = s["overhead"]["by_source_s"], s["duration_s"]
                parts = " / ".join(f"{100 * (src.get(k) or 0.0) / w:.1f}" for k in ("probes", "scheduler", "bookkeeping",
                                                                                    "kernel_extra", "sampler"))
                ratio = _ratio(rep, meas)
                ratios.append(ratio)
                print(f"| {i} | {plain:,.0f} / {on:,.0f} | {meas:.1f} | {rep:.1f} | {ratio:.2f} | {parts} |")
                before = after
            ok = [r for r in ratios if r == r]
            if ok:
                print(f"| median of {len(ok)} | | | | {statistics.median(ok):.2f} | |")
        finally:
            t.kill()
            t.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
