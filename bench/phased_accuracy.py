"""Issue 12's phased trainer (tests/targets/phased_trainer.py), attached as the accuracy tests
do, with what the tests do not print: per session, our shares against the unprobed truth and,
per call, the target's own clock unprobed and probed against our corrected time per call
(docs/accuracy.md, "Where the exact mode's lost simulator time goes").

``--mode control`` attaches nothing: the same 10 s window with no monitor, and the target's time
per call inside it over outside it, for how far the host alone moves the truth.

usage: sudo .venv/bin/python bench/phased_accuracy.py [--mode exact|default|control] [--sessions 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
from truth import interval_costs, truth_shares, unprobed_shares, work_seconds, work_shares  # noqa: E402

PY = sys.executable
CATS = ("python", "simulator", "backend")


def session(tmp: str, simlib: str, calib: str, mode: str, i: int) -> tuple[dict, list, list]:
    """One session: 2 s unprobed, 10 s attached, 2 s unprobed.

    Returns:
        (the summary, the target's log, the unprobed spans).
    """
    truth = os.path.join(tmp, f"truth{i}.json")
    t = subprocess.Popen([PY, "phased_trainer.py", simlib, truth], cwd=os.path.join(REPO, "tests", "targets"),
                         stdout=subprocess.PIPE, text=True)
    assert t.stdout.readline().startswith("ready")
    b0 = time.monotonic_ns()
    time.sleep(2.0)
    b1 = time.monotonic_ns()
    summary = os.path.join(tmp, f"s{i}.json")
    if mode == "control":                # the window with nothing attached
        w0 = time.monotonic_ns()
        time.sleep(10.0)
        with open(summary, "w") as f:
            json.dump({"window": {"t0_monotonic_ns": w0, "t1_monotonic_ns": time.monotonic_ns()}}, f)
    else:
        extra = ["--max-overhead", "100"] if mode == "exact" else ["--op", "collect=collect", "--op", "update=update"]
        subprocess.run([PY, "-m", "rlscope_top.cli", "attach", str(t.pid), "--headless", "--summary", summary,
                        "--sim-lib", f"{simlib}:sim_work", "--duration", "10", *extra], cwd=REPO, capture_output=True,
                       env={**os.environ, "RLSCOPE_CALIBRATION": calib}, check=True)
    a0 = time.monotonic_ns()
    time.sleep(2.0)
    t.send_signal(signal.SIGTERM)
    t.wait()
    with open(summary) as f, open(truth) as g:
        return json.load(f), json.load(g), [(b0, b1), (a0, time.monotonic_ns())]


def per_call(s: dict, items: list, kind: str, cat: str) -> tuple[float, float, float]:
    """us per call: the target's clock unprobed and probed (less its timer and, for the
    simulator, the binding's dispatch, as the truth counts them), and ours corrected."""
    ours = s["totals"][f"{cat}_s"] / max(1, s["calls"][cat] or 0)
    raw = s["raw"][f"{cat}_s"] / max(1, s["calls"][cat] or 0)
    print(f"   {kind}: raw per call {raw * 1e6:.2f} us, taken off the target's intervals "
          f"{interval_costs(items)[0][kind]} ns")
    return (*target_clock(s, items, kind), ours * 1e6)


def target_clock(s: dict, items: list, kind: str) -> tuple[float, float]:
    """us per logged interval of ``kind`` by the target's own clock (less what the truth takes
    off it), unprobed (outside the window) and probed (inside)."""
    w0, w1 = s["window"]["t0_monotonic_ns"], s["window"]["t1_monotonic_ns"]
    off = interval_costs(items)[0][kind]
    inside = [b - a - off for k, _, a, b in items if k == kind and w0 <= a and b <= w1]
    outside = [b - a - off for k, _, a, b in items if k == kind and (b < w0 or a > w1)]
    return sum(outside) / len(outside) / 1e3, sum(inside) / len(inside) / 1e3


def target_calls(s: dict, items: list, kind: str) -> int:
    """The target's own count of ``kind`` calls that began inside the session's window."""
    w0, w1 = s["window"]["t0_monotonic_ns"], s["window"]["t1_monotonic_ns"]
    return sum(1 for k, _, a, _b in items if k == kind and w0 <= a < w1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("exact", "default", "control"), default="exact")
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--calibration", help="a calibration file to use (made there if missing)")
    ap.add_argument("--keep", help="copy each session's summary here (s<i>.json)")
    ap.add_argument("--cflags", default="", help="more gcc flags for the simulator library, e.g. "
                    "-fno-omit-frame-pointer (sim_work then starts with an emulated push)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        simlib, calib = os.path.join(tmp, "libtoysim.so"), args.calibration or os.path.join(tmp, "calibration.json")
        subprocess.run(["gcc", "-O1", *args.cflags.split(), "-shared", "-fPIC", "-o", simlib, os.path.join(REPO, "tests/native/simlib.c")],
                       check=True)
        if not os.path.exists(calib) and args.mode != "control":
            subprocess.run([PY, "-m", "rlscope_top.cli", "calibrate"], cwd=REPO, check=True, capture_output=True,
                           env={**os.environ, "RLSCOPE_CALIBRATION": calib})
        for i in range(args.sessions):
            s, items, spans = session(tmp, simlib, calib, args.mode, i)
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                shutil.copy(os.path.join(tmp, f"s{i}.json"), args.keep)
            if args.mode == "control":
                print(f"control {i}: per call, inside the window over outside it: " + "  ".join(
                    f"{k} {p / u:.3f}x" for k, (u, p) in ((k, target_clock(s, items, k)) for k in CATS)))
                continue
            truth = unprobed_shares(items, spans)
            before, after = unprobed_shares(items, spans[:1]), unprobed_shares(items, spans[1:])
            print("   truth before / after: " + "  ".join(
                f"{c} {100 * before[c]:.1f} / {100 * after[c]:.1f}%" for c in CATS))
            missing = [c for c in CATS if s["totals"][f"{c}_s"] is None]
            if missing:          # n/a (estimating): a figure the summary would not guess
                print(f"{args.mode} {i}: {', '.join(missing)} n/a ({s['sources']})")
                continue
            tot = sum(s["totals"][f"{c}_s"] for c in CATS)
            during = truth_shares(items, s["window"])      # the target's clock while attached (probed)
            print("   against the target's clock during the session: " + "  ".join(
                f"{c} {100 * during[c]:.1f}% ({100 * (s['totals'][f'{c}_s'] / tot - during[c]):+.1f} pp)" for c in CATS))
            print("   against the unprobed truth before and after (its two halves moved apart above): " + "  ".join(
                f"{c} {100 * truth[c]:.1f}% ({100 * (s['totals'][f'{c}_s'] / tot - truth[c]):+.1f} pp)" for c in CATS))
            secs = work_seconds(items, spans, s["window"])
            print("   seconds, ours / the same work unprobed: " + "  ".join(
                f"{c} {s['totals'][f'{c}_s']:.2f} / {secs[c]:.2f}" for c in CATS))
            # the headline: the window's own work at the unprobed rates, as tests/test_ebpf_phased.py
            # and issue 12's acceptance read it (the truth spans either side drift with the phases)
            work = work_shares(items, spans, s["window"])
            errs = {c: 100 * (s["totals"][f"{c}_s"] / tot - work[c]) for c in CATS}
            print(f"{args.mode} {i}: " + "  ".join(
                f"{c} {100 * s['totals'][f'{c}_s'] / tot:.1f}% vs {100 * work[c]:.1f}% ({errs[c]:+.1f} pp)" for c in CATS)
                + f"  (the window's own work at the unprobed rates; largest {max(map(abs, errs.values())):.1f} pp)")
            smp = s.get("sampler") or {}
            print(f"   modes {s['budget']['modes']}, sampler {smp.get('tool')}, ticks placed by call site "
                  f"{smp.get('site_ticks')}, stated bound ±{s['estimates'].get('backend', {}).get('bound_pp')} pp, "
                  f"overhead {s['overhead']['estimated_pct']}% {s['overhead']['by_source_s']}")
            print(f"   measured prices {json.dumps(s['overhead'].get('measured_prices'))}")
            for kind, cat in (("simulator", "simulator"), ("backend", "backend")):
                ours, theirs = s["calls"][cat] or 0, target_calls(s, items, kind)
                est = s["estimates"].get(cat) or {}
                bound = est.get("calls_bound")
                print(f"   {kind} calls: ours {ours:,} against the target's {theirs:,} "
                      f"({100 * (ours / max(1, theirs) - 1):+.1f}%), stated bound "
                      f"{'n/a' if bound is None else f'±{100 * bound / max(1, ours):.0f}%'} "
                      f"({est.get('calls_estimated', 0):,} estimated)")
                u, p, ours = per_call(s, items, kind, cat)
                print(f"   {kind} per call: target unprobed {u:.2f} us, probed {p:.2f} us, ours corrected {ours:.2f} us")
            u, p = target_clock(s, items, "python")
            print(f"   python_work per call (the target's clock): unprobed {u:.2f} us, probed {p:.2f} us "
                  "(code after a probe's trap runs on cold caches)")


if __name__ == "__main__":
    main()
