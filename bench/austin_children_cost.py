"""austin's own CPU with and without -C (follow child processes), at 100 and 25 samples/s,
on the tiny-op RL loop (bench/workloads/rl_tiny_loop.py), settings interleaved. Why the
monitor starts austin without -C and restarts it with -C once the target has a child.
Adds a section to docs/overhead.md.

usage: sudo .venv/bin/python bench/austin_children_cost.py [--reps 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from attach_cost import Target  # noqa: E402
from docsection import generated_by, replace_section  # noqa: E402
from sampler_parts import start_austin  # noqa: E402

import psutil  # noqa: E402

SECTION = "## austin -C: following children costs a fixed ~1% of a core"
SETTINGS = [(hz, tree) for hz in (100, 25) for tree in (False, True)]


def _cpu_s(p: psutil.Process) -> float:
    return sum(p.cpu_times()[:2])


def austin_pct(pid: int, hz: int, tree: bool, seconds: float) -> float:
    """austin's CPU, % of one core, over `seconds` after a 0.3 s start."""
    a = start_austin(pid, hz, children=tree)
    try:
        time.sleep(0.3)
        p = psutil.Process(a.pid)
        c0, t0 = _cpu_s(p), time.monotonic()
        time.sleep(seconds)
        return 100 * (_cpu_s(p) - c0) / (time.monotonic() - t0)
    finally:
        a.terminate()
        a.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "docs", "overhead.md"))
    args = ap.parse_args()
    t = Target(busy=False)
    res: dict[tuple, list[float]] = {s: [] for s in SETTINGS}
    try:
        for _ in range(args.reps):
            for hz, tree in SETTINGS:
                res[(hz, tree)].append(austin_pct(t.p.pid, hz, tree, args.seconds))
                print(hz, tree, f"{res[(hz, tree)][-1]:.2f}%", flush=True)
    finally:
        t.close()
    lines = [generated_by(f"bench/austin_children_cost.py --reps {args.reps} "
                          f"--seconds {args.seconds:g}",
                          "austin 3.7 on the tiny-op loop (no children), its own CPU from /proc (10 ms ticks), "
                          "median of the repetitions."), "",
             "| samples/s | austin | austin -C | -C adds |", "|---|---|---|---|"]
    for hz in (100, 25):
        a, c = (statistics.median(res[(hz, tree)]) for tree in (False, True))
        lines.append(f"| {hz} | {a:.2f}% | {c:.2f}% | {c - a:+.2f} pp |")
    lines += ["", "austin -C looks for new children on its own schedule, whatever the sample rate, so halving "
              "the rate (the budget's step) cannot take that part away. The monitor starts austin without -C "
              "and restarts it with -C (same operations and counts) at the first tick that finds a child in "
              "the process tree (`tests/test_ebpf_op_rules.py::test_sampler_follows_a_child_forked_after_attach`)."]
    replace_section(args.out, SECTION, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
