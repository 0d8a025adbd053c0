"""Overhead benchmark: the slowdown of reference RL training when attached.

ABAB in one run: for each repetition, each mode runs the same fixed-seed, fixed-step
training in a fresh process: not attached, rlscope-top attached (default probe set
and budget), py-spy record at 100 Hz, torch.profiler (CPU activities). Medians and
the ratio to not-attached. Also attach/detach time, and the monitor's CPU and peak
RSS against a target making ~100k probed calls/s. Writes docs/overhead.md.

usage: sudo .venv/bin/python bench/overhead.py [--reps 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
WORKLOADS = [("SB3 PPO CartPole-v1", ["ppo", "CartPole-v1", "4096"]),
             ("SB3 SAC InvertedPendulum-v5 (MuJoCo)", ["sac", "InvertedPendulum-v5", "600"])]
MODES = ["none", "rlscope-top", "py-spy 100 Hz", "torch.profiler"]
# Longer run, no torch.profiler (it needs >12 GB to build its event list at this length):
# the budget's first half second at full cost weighs less, as in a real training job.
LONG = ("SB3 PPO CartPole-v1, 32768 steps", ["ppo", "CartPole-v1", "32768"])
LONG_MODES = ["none", "rlscope-top", "py-spy 100 Hz"]


RLSCOPE_ARGS = {"rlscope-top": [], "rlscope-top, no sampler": ["--sample-hz", "0"],
                "rlscope-top, austin sampler": ["--sampler", "austin"]}


def _start_target(args: list[str], profiler: bool) -> subprocess.Popen:
    p = subprocess.Popen([PY, os.path.join(HERE, "workloads", "sb3_train.py"), *args,
                          *(["--torch-profiler"] if profiler else [])],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready")
    return p


def _wait_stderr(proc: subprocess.Popen, needle: str, timeout: float = 60) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stderr.readline()
        if needle in line:
            return time.monotonic() - t0
        if not line and proc.poll() is not None:
            break
    raise RuntimeError(f"{needle!r} not seen")


def run_once(args: list[str], mode: str, tmp: str) -> dict:
    t = _start_target(args, mode == "torch.profiler")
    mon, extra = None, {}
    if mode in RLSCOPE_ARGS:
        summary = os.path.join(tmp, f"s-{t.pid}.json")
        t_attach = time.monotonic()
        mon = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(t.pid), "--summary", summary,
                                *RLSCOPE_ARGS[mode]],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp)
        _wait_stderr(mon, "attached to PID")
        extra["attach_s"] = time.monotonic() - t_attach
    elif mode.startswith("py-spy"):
        mon = subprocess.Popen([os.path.join(os.path.dirname(PY), "py-spy"), "record", "-r", "100", "-p", str(t.pid),
                                "-o", os.path.join(tmp, f"p-{t.pid}.svg"), "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    t.stdin.write("go\n")
    t.stdin.flush()
    peak = 0
    pt = psutil.Process(t.pid)
    while t.poll() is None:
        try:
            peak = max(peak, pt.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.1)
    fields = t.stdout.readline().split()
    extra["time_s"], extra["post_s"], extra["target_rss_mb"] = float(fields[1]), float(fields[3]), peak / 2**20
    if mon is not None:
        mon.wait(timeout=120)
        if mode in RLSCOPE_ARGS:
            s = json.load(open(summary))
            extra["sampler_cpu_pct"] = (s.get("sampler") or {}).get("cpu_pct_of_one_core")
            extra["detach_s"] = s["overhead"]["detach_s"]
            extra["budget"] = s["budget"]["modes"]
            extra["estimated_pct"] = s["overhead"]["estimated_pct"]
    return extra


def monitor_cost(seconds: float = 10.0) -> dict:
    """The monitor's CPU % and peak RSS while the target makes ~100k probed calls/s."""
    t = subprocess.Popen([PY, os.path.join(HERE, "workloads", "tiny_ops.py")], stdout=subprocess.PIPE, text=True)
    t.stdout.readline()
    with tempfile.TemporaryDirectory() as d:
        m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(t.pid), "--duration", str(seconds),
                              "--max-overhead", "100", "--summary", os.path.join(d, "s.json")],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        _wait_stderr(m, "attached to PID")
        pm = psutil.Process(m.pid)
        c0, w0, rss = pm.cpu_times(), time.monotonic(), 0
        while m.poll() is None and time.monotonic() - w0 < seconds - 0.5:
            rss = max(rss, pm.memory_info().rss)
            time.sleep(0.2)
        c1, w1 = pm.cpu_times(), time.monotonic()
        m.wait(60)
        s = json.load(open(os.path.join(d, "s.json")))
    t.kill()
    calls_s = s["calls"]["backend"] / s["duration_s"]
    return {"cpu_pct": 100 * ((c1.user + c1.system) - (c0.user + c0.system)) / (w1 - w0),
            "peak_rss_mb": rss / 2**20, "calls_per_s": calls_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "overhead.md"))
    args = ap.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name, wargs in WORKLOADS:
                for mode in MODES:                   # ABAB: modes alternate within each repetition
                    r = run_once(wargs, mode, tmp)
                    results.setdefault(name, {}).setdefault(mode, []).append(r)
                    print(f"rep {rep} {name:38s} {mode:15s} {r['time_s']:.2f}s", file=sys.stderr, flush=True)
        for rep in range(args.reps):
            for mode in LONG_MODES:
                r = run_once(LONG[1], mode, tmp)
                results.setdefault(LONG[0], {}).setdefault(mode, []).append(r)
                print(f"rep {rep} {LONG[0]:38s} {mode:15s} {r['time_s']:.2f}s", file=sys.stderr, flush=True)
    cost = monitor_cost()
    write(results, cost, args)


def _med(rs: list[dict], key: str):
    vals = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


TOP = "## Reference RL training: next to py-spy and torch.profiler"


def write(results: dict, cost: dict, args) -> None:
    """Rewrite this bench's two sections of ``args.out``; every other section, and the notes
    under each section's marker, stay (bench/docsection.py)."""
    sys.path.insert(0, HERE)
    from docsection import replace_section  # noqa: PLC0415

    lines = [f"Generated by `sudo .venv/bin/python bench/overhead.py --reps {args.reps}` on "
             f"{platform.node()} ({os.cpu_count()} cores, kernel {platform.release()}), "
             f"{time.strftime('%Y-%m-%d')}. Each cell: median of {args.reps} fresh processes; the modes "
             "alternate within each repetition (ABAB). Training is CPU-only, one torch thread, fixed seed and steps.",
             "", "| workload | mode | median time (s) | slowdown | notes |", "|---|---|---|---|---|"]
    for name, modes in results.items():
        base = _med(modes["none"], "time_s")
        for mode in [m for m in MODES if m in modes]:
            rs = modes[mode]
            med = _med(rs, "time_s")
            note = f"target peak RSS {_med(rs, 'target_rss_mb'):,.0f} MB"
            if mode == "torch.profiler":
                note += f"; then {_med(rs, 'post_s'):.1f} s to stop and build its event list"
            if mode == "rlscope-top":
                note += (f"; attach {_med(rs, 'attach_s'):.2f} s, detach {_med(rs, 'detach_s'):.2f} s, "
                        f"budget steps {rs[-1]['budget'] or 'none'}, own estimate {_med(rs, 'estimated_pct'):.1f}%")
            lines.append(f"| {name} | {mode} | {med:.2f} | {100 * (med / base - 1):+.1f}% | {note} |")
    own = [f"Target making {cost['calls_per_s']:,.0f} probed torch calls/s (bench/workloads/tiny_ops.py), "
           "exact mode (`--max-overhead 100`), 10 s:", "",
           "| monitor CPU (% of one core) | monitor peak RSS (MB) |", "|---|---|",
           f"| {cost['cpu_pct']:.1f} | {cost['peak_rss_mb']:.0f} |"]
    text = open(args.out).read() if os.path.exists(args.out) else ""
    if not text.startswith("# Overhead"):
        with open(args.out, "w") as f:
            f.write("# Overhead\n\n" + text)
    replace_section(args.out, TOP, lines)
    replace_section(args.out, "## The monitor's own cost", own)
    print("\n".join(lines + [""] + own))


if __name__ == "__main__":
    main()
