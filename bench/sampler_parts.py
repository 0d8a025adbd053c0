"""Issue 16, item 1: what the stack sampler costs the target, measured so that a VM whose speed
flips (an AMD EPYC VM: the same loop at ~700 and ~1,400 ns per call seconds apart) cannot hide it.

One target (bench/workloads/rl_tiny_loop.py) runs the whole time. The sampler is paused and
resumed (SIGSTOP / SIGCONT to the austin process) in alternating windows of WINDOW s, many
times; each "on" window is compared with the "off" windows on either side of it, and the
median of those ratios is the cost. Settings:
- austin alone, 100 Hz and 25 Hz, its output thrown away: what reading the frames costs the target;
- `rlscope-top attach` (default mode), pausing the austin it started: austin plus the monitor's
  parsing of its samples and the operation writes into the kernel's map. The probes stay
  attached in both windows, so their cost cancels out.
Also the mean slowdown with the sampler off against no monitor is not measured here (spans
of seconds: docs/overhead.md, "Tiny-op RL loop").

usage: sudo .venv/bin/python bench/sampler_parts.py [--windows 40] [--window 1.0] [--write]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from attach_cost import PY, Target, _wait_line  # noqa: E402

import psutil  # noqa: E402


def start_austin(pid: int, hz: int = 100, children: bool = False) -> subprocess.Popen:
    """austin sampling PID on its own, its output discarded (-C with ``children``)."""
    return subprocess.Popen([os.path.join(os.path.dirname(PY), "austin"), "-P", *(["-C"] if children else []),
                             "-i", f"{1_000_000 // hz}us", "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _austin_alone(pid: int, tmp: str, hz: int = 100) -> tuple[subprocess.Popen, None]:
    return start_austin(pid, hz), None


def _monitor(pid: int, tmp: str) -> tuple[subprocess.Popen, str]:
    summary = os.path.join(tmp, "s.json")
    m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(pid), "--summary", summary],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp)
    _wait_line(m, "attached to PID")
    import threading  # noqa: PLC0415

    threading.Thread(target=lambda: [None for _ in m.stderr], daemon=True).start()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if any(c.name() == "austin" for c in psutil.Process(m.pid).children(recursive=True)):
            return m, summary
        time.sleep(0.1)
    raise RuntimeError("the monitor started no austin")


def _signal(proc: subprocess.Popen, sig: int) -> None:
    """To the sampler: austin itself, or every austin the monitor runs now (the budget may
    have restarted it at a lower rate)."""
    try:
        p = psutil.Process(proc.pid)
        for a in [p] if p.name() == "austin" else [c for c in p.children(recursive=True) if c.name() == "austin"]:
            a.send_signal(sig)
    except psutil.Error:
        pass


def measure(t: Target, start, windows: int, window: float, tmp: str) -> dict:
    """Alternate sampler on / off windows; the ratio of each on window's speed to its neighbours'."""
    proc, summary = start(t.p.pid, tmp)
    time.sleep(1.0)
    spans = []                                   # (on?, steps/s)
    try:
        for i in range(windows):
            on = i % 2 == 0
            _signal(proc, signal.SIGCONT if on else signal.SIGSTOP)
            time.sleep(0.1)                      # let the switch settle
            t0 = time.monotonic_ns()
            time.sleep(window)
            spans.append((on, t.rate(t0, time.monotonic_ns())))
    finally:
        _signal(proc, signal.SIGCONT)
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    ratios = []
    for i, (on, v) in enumerate(spans):
        near = [spans[j][1] for j in (i - 1, i + 1) if 0 <= j < len(spans)]
        if on and near:
            ratios.append(statistics.mean(near) / v)
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    out = {"slowdown": statistics.median(ratios), "q1": q1, "q3": q3, "pairs": len(ratios),
           "off_speed": statistics.median(v for on, v in spans if not on)}
    if summary:
        s = json.load(open(summary))
        out["sampler"] = s.get("sampler") or {}
        out["estimated_pct"] = s["overhead"]["estimated_pct"]
        out["by_source"] = s["overhead"]["by_source_s"]
        out["wall_s"] = s["totals"]["wall_s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=40)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--write", action="store_true", help="put the table in docs/overhead.md")
    a = ap.parse_args()
    t = Target(False)
    res = {}
    try:
        time.sleep(2.0)
        with tempfile.TemporaryDirectory() as tmp:
            for name, start in (("austin alone, 100 Hz", _austin_alone),
                                ("austin alone, 25 Hz", functools.partial(_austin_alone, hz=25)),
                                ("rlscope-top default (its austin)", _monitor)):
                res[name] = measure(t, start, a.windows, a.window, tmp)
                print(name, res[name], file=sys.stderr)
    finally:
        t.close()
    lines = ["| setting | sampler on vs off: slowdown (median) | middle half of the ratios | pairs | speed, sampler off "
             "| austin CPU (% of a core) | self-reported: sampler % / total % |", "|---|---|---|---|---|---|---|"]
    for name, r in res.items():
        smp, wall = r.get("sampler") or {}, r.get("wall_s")
        cpu = f"{smp['cpu_pct_of_one_core']:.1f}" if smp.get("cpu_pct_of_one_core") is not None else ""
        own = (f"{100 * r['by_source']['sampler'] / wall:.1f} / {r['estimated_pct']:.1f}" if wall else "")
        lines.append(f"| {name} | {r['slowdown']:.3f}x | {r['q1']:.3f}-{r['q3']:.3f}x | {r['pairs']} "
                     f"| {r['off_speed']:,.0f} steps/s | {cpu} | {own} |")
    print("\n".join(lines))
    if a.write:
        from docsection import generated_by, replace_section  # noqa: PLC0415

        replace_section(os.path.join(REPO, "docs", "overhead.md"), "## Stack sampler: on against off, paired", [
            generated_by(f"bench/sampler_parts.py --windows {a.windows} --window {a.window:g} --write",
                         "The tiny-op loop (bench/workloads/rl_tiny_loop.py) runs throughout; the "
                         f"sampler's austin is paused and resumed (SIGSTOP/SIGCONT) in alternating {a.window:g} s "
                         "windows; each on window's speed is compared with its two off neighbours, and the median "
                         "ratio is the cost. In the rlscope-top row the probes stay attached in both windows, so the "
                         "row is austin plus the monitor's handling of its samples."), "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
