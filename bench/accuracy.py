"""Accuracy benchmark: known-answer workloads, per-category error in percentage points.

Each workload (tests/targets/known_split.py) logs its own phases with CLOCK_MONOTONIC
bounds. It runs unprobed for a few seconds first: those cycles are the reference for
the corrected figures (what the program does without probes, RL-Scope's criterion).
Then rlscope-top attaches in exact mode (`--max-overhead 100`) for a fixed window.
Raw error: our uncorrected shares against the target's own in-window timing (which
includes the probes' cost). Corrected error: our corrected shares against the
unprobed reference. Writes docs/accuracy.md.

usage: sudo .venv/bin/python bench/accuracy.py [--seconds 6] [--only TEXT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
from truth import truth_shares, unprobed_shares  # noqa: E402

PY = sys.executable
CATS = ("python", "simulator", "backend")
WORKLOADS = [
    ("mix Python ≈ simulator", ["--py-iters", "80000", "--sim-us", "3000", "--ops", "16", "--op-size", "96"]),
    ("mix python-heavy", ["--py-iters", "150000", "--sim-us", "1000", "--ops", "8", "--op-size", "64"]),
    ("mix simulator-heavy", ["--py-iters", "15000", "--sim-us", "8000", "--ops", "8", "--op-size", "64"]),
    ("mix backend-heavy", ["--py-iters", "15000", "--sim-us", "1000", "--ops", "40", "--op-size", "128"]),
    ("many small ops, 16x16", ["--py-iters", "400", "--sim-us", "200", "--ops", "10", "--op-size", "16"]),
    ("many tiny ops, 8x8", ["--py-iters", "400", "--sim-us", "100", "--ops", "10", "--op-size", "8"]),
    ("2 Python threads", ["--threads", "2", "--py-iters", "30000", "--sim-us", "1500", "--ops", "12",
                          "--op-size", "64"]),
    # tests/targets/framework_split.py: the first argument names the framework (no simulator)
    ("TensorFlow eager MatMul 192", ["tf", "--py-iters", "20000", "--ops", "2", "--op-size", "192"]),
    ("JAX jit + block_until_ready 256", ["jax", "--py-iters", "20000", "--ops", "2", "--op-size", "256"]),
]
FRAMEWORKS = ("tf", "jax")


def run(wargs: list[str], seconds: float, simlib: str, tmp: str) -> dict:
    truth_path = os.path.join(tmp, "truth.json")
    targets = os.path.join(REPO, "tests", "targets")
    if wargs[0] in FRAMEWORKS:
        argv, sim = [os.path.join(targets, "framework_split.py"), wargs[0], truth_path, *wargs[1:]], []
    else:
        argv, sim = [os.path.join(targets, "known_split.py"), simlib, truth_path, *wargs], ["--sim-lib", f"{simlib}:sim_step"]
    t = subprocess.Popen([PY, *argv], stdout=subprocess.PIPE, text=True, cwd=targets)
    t.stdout.readline()
    before = time.monotonic_ns()
    time.sleep(3.0)                 # unprobed reference before the monitor starts (its compile competes
    before_end = time.monotonic_ns()  # for the CPUs) and after it detached, so that drift cancels
    summary = os.path.join(tmp, "s.json")
    m = subprocess.run([PY, "-m", "rlscope_top.cli", "attach", str(t.pid), "--duration", str(seconds),
                        "--max-overhead", "100", *sim, "--summary", summary, "-q"],
                       capture_output=True, text=True)
    after = time.monotonic_ns()
    time.sleep(3.0)
    spans = [(before, before_end), (after, time.monotonic_ns())]
    if wargs[0] in FRAMEWORKS:
        open(truth_path + ".stop", "w").close()   # framework_split.py stops on a file, not a signal
    else:
        t.send_signal(signal.SIGTERM)
    t.wait()
    if m.returncode:
        raise RuntimeError(m.stderr)
    s = json.load(open(summary))
    items = json.load(open(truth_path))
    return {"summary": s, "probed": truth_shares(items, s["window"]),
            "unprobed": unprobed_shares(items, spans)}


def shares(figs: dict) -> dict:
    tot = sum(figs[f"{c}_s"] or 0.0 for c in CATS)     # null: no simulator probed
    return {c: (figs[f"{c}_s"] or 0.0) / tot for c in CATS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "accuracy.md"))
    ap.add_argument("--only", action="append", metavar="TEXT",
                    help="run only the workloads whose name contains TEXT (repeatable) and update their rows "
                         "in --out, keeping the others")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        simlib = os.path.join(tmp, "libtoysim.so")
        subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", simlib,
                        os.path.join(REPO, "tests", "native", "simlib.c")], check=True)
        for name, wargs in WORKLOADS:
            if args.only and not any(t in name for t in args.only):
                continue
            r = run(wargs, args.seconds, simlib, tmp)
            s = r["summary"]
            raw, cor = shares(s["raw"]), shares(s["totals"])
            rows.append((name, s, r, raw, cor))
            print(f"{name:28s} raw err {[round(100 * (raw[c] - r['probed'][c]), 2) for c in CATS]} "
                  f"corrected err {[round(100 * (cor[c] - r['unprobed'][c]), 2) for c in CATS]}",
                  file=sys.stderr, flush=True)
    if args.only and os.path.exists(args.out):
        merge(rows, args)
    else:
        write(rows, args)


def row_line(name, s, r, raw, cor) -> str:
    """One markdown table row: rate, truth, raw and corrected errors."""
    rate = s["calls"]["backend"] / s["duration_s"]
    truth = "/".join(f"{100 * r['unprobed'][c]:.1f}" for c in CATS)
    rerr = "/".join(f"{100 * (raw[c] - r['probed'][c]):+.2f}" for c in CATS)
    cerr = [100 * (cor[c] - r["unprobed"][c]) for c in CATS]
    return (f"| {name} | {rate:,.0f} | {truth} | {rerr} | {'/'.join(f'{e:+.2f}' for e in cerr)} | "
            f"{max(abs(e) for e in cerr):.2f} |")


def merge(rows, args) -> None:
    """Replace (or append) the rows of the workloads just run in an existing table."""
    lines = open(args.out).read().splitlines()
    table_end = next(i for i, ln in enumerate(lines) if ln.startswith("| workload |"))
    while table_end + 1 < len(lines) and lines[table_end + 1].startswith("|"):   # the first table only:
        table_end += 1                                                          # other benches add sections
    for row in rows:
        new = row_line(*row)
        at = next((i for i, ln in enumerate(lines) if ln.startswith(f"| {row[0]} |")), None)
        if at is None:
            table_end += 1
            lines.insert(table_end, new)
        else:
            lines[at] = new
    note = (f"Rows {', '.join(r[0] for r in rows)}: run on {time.strftime('%Y-%m-%d')} with `--only` "
            f"(`--seconds {args.seconds:g}`).")
    lines.insert(table_end + 1, "")
    lines.insert(table_end + 2, note)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def write(rows, args) -> None:
    cal = rows[0][1]["overhead"]["calibrated"]
    lines = ["# Accuracy", "",
             f"Generated by `sudo .venv/bin/python bench/accuracy.py --seconds {args.seconds:g}` on {platform.node()} "
             f"({os.cpu_count()} cores, kernel {platform.release()}), {time.strftime('%Y-%m-%d')}; probe costs "
             f"{'calibrated on this machine (`rlscope-top calibrate`)' if cal else 'NOT calibrated (defaults)'}.",
             "",
             "Truth is what each target measures itself (tests/targets/known_split.py: pure-Python loop, a C "
             "simulator call through ctypes, `torch.mm`; tests/targets/framework_split.py for TensorFlow and JAX). *Raw* compares our uncorrected shares with the target's "
             "own in-window timing, which includes the probes' cost. *Corrected* compares our corrected shares with "
             "the same target's unprobed cycles, before the monitor started and after it detached (drift "
             "cancels), as RL-Scope compared against an uninstrumented run. "
             "Errors are percentage points of the Python+Simulator+Backend total.", "",
             "| workload | backend calls/s | truth py/sim/backend % | raw error pp (py/sim/be) | "
             "corrected error pp (py/sim/be) | max corrected |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(row_line(*row))
    lines += ["", "The last two rows use tests/targets/framework_split.py: the same fixed-work Python phase, then "
              "TensorFlow's generated eager MatMul op (run inline, one intra-op thread), or a jitted JAX function "
              "and `block_until_ready` (asynchronous: the Python thread waits for a worker thread; dispatch and "
              "wait are both Backend). With the computation on another thread, the JAX row's unprobed reference "
              "moves with the load of the machine: on a shared 2-core VM its corrected error is mostly drift "
              "between the unprobed and the probed cycles, so read the raw column (same cycles) there.", ""]
    lines += ["", "What limits it: the time CPython spends dispatching a call before the native function is "
              "entered (argument conversion in ctypes, the call into a torch binding) is Python to us and "
              "Simulator/Backend to the target's own timer; for calls of a few microseconds that is a few percent "
              "of the call. Freed result tensors are deallocated outside the binding and count as Python. "
              "The probes' indirect cost (cache and TLB pollution after each trap) is calibrated on a C loop "
              "and can differ in a large C++ code base. With several Python threads the probes also change how "
              "the threads contend for the GIL and the CPUs, so the unprobed cycles are a different schedule: "
              "compare the raw column there.", ""]
    old = open(args.out).read() if os.path.exists(args.out) else ""
    kept = old[old.find("\n## ") + 1:] if "\n## " in old else ""   # sections other benches write
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n" + ("\n" + kept if kept else ""))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
