"""Issue 16: what the default mode's re-timing windows cost the tiny-op RL loop, against what the
budget and the self-report price them at.

One target (bench/workloads/rl_tiny_loop.py, reporting its steps every 10 ms) runs the whole time.
Each session: SPAN s unattached, `rlscope-top attach --record` for DURATION s, SPAN s unattached
after the last one; the base speed of a session is the mean of the plain spans on either side.
The recording's mode records say when the Backend was timed (a window: from its "timed" record to
the record of its step down, which is written as the kernel stops timing). From the 10 ms reports,
over the steady part (from 2 s after the first counters):
- the slowdown in the windows and out of them (30 ms either side of a window left out), and
  in the AFTER_NS after each window (does the program run slower once the probes are out?);
- the windows' share of wall time, and the time they cost: window time x (1 - speed in it / base);
- per Backend call in a window, what the traps really cost (step time in a window less the base
  step time, over the calls per step) against the calibrated torch bracket the budget prices.

With --program (one of bench/real_rl.py's), that program runs unchanged instead, its CartPole steps
counted one by one (bench/workloads/count_steps.py) and read every 5 ms.

usage: sudo .venv/bin/python bench/window_cost.py [--program torchrl] [--sessions 3] [--duration 24] [--span 8]
       [--args "..."] [--write]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)
from attach_cost import PY, Target  # noqa: E402
from monitor_env import monitor_env, warm_bytecode  # noqa: E402

from rlscope_top.collect import calibration  # noqa: E402
from rlscope_top.ring import recording, records as R  # noqa: E402

MARGIN_NS = 30_000_000
AFTER_NS = 500_000_000
WHOLE_AFTER_NS = 500_000_000      # "from 0.5 s": bench/real_rl.py's yardstick, past the budget's first steps
STEADY_AFTER_NS = 2_000_000_000


def steps_in(marks: list[tuple[int, int]], spans: list[tuple[int, int]]) -> tuple[int, int]:
    """(steps, ns) over the (ns, steps) reports whose interval lies wholly inside the spans."""
    n = t = 0
    for (ta, na), (tb, nb) in zip(marks, marks[1:]):
        if any(a <= ta and tb <= b for a, b in spans):
            n, t = n + nb - na, t + tb - ta
    return n, t


class Loop(Target):
    """The tiny-op loop reporting its steps every 10 ms (attach_cost.Target)."""

    def __init__(self):
        super().__init__(busy=False, print_ms=10)

    def steps_in(self, spans: list[tuple[int, int]]) -> tuple[int, int]:
        return steps_in(self.marks, spans)


class Program:
    """A real RL program (bench/real_rl.py's PROGRAMS), its steps read every 5 ms."""

    def __init__(self, key: str):
        from real_rl import training  # noqa: PLC0415  (its imports: only for a program)
        os.environ["COUNT_STEPS_EVERY"] = "1"
        self._ctx = contextlib.ExitStack()
        self.p, self._steps, _ = self._ctx.enter_context(training(key, every=0.005))

    @property
    def marks(self) -> list[tuple[int, int]]:
        return self._steps.samples

    def rate(self, t0: int, t1: int) -> float:
        return self._steps.rate(t0, t1)

    def steps_in(self, spans: list[tuple[int, int]]) -> tuple[int, int]:
        return steps_in(self.marks, spans)

    def close(self) -> None:
        self._ctx.close()


def _plain(loop: Loop, span: float) -> float:
    t0 = time.monotonic_ns()
    time.sleep(span)
    return loop.rate(t0, time.monotonic_ns())


def _session(loop: Loop, duration: float, tmp: str, i: int, extra: list[str]) -> tuple[dict, list[dict]]:
    summary, rec = os.path.join(tmp, f"s{i}.json"), os.path.join(tmp, f"s{i}.rlsrec")
    subprocess.run([PY, "-m", "rlscope_top.cli", "attach", str(loop.p.pid), "--duration", str(duration),
                    "--headless", "-q", "--summary", summary, "--record", rec, *extra],
                   cwd=REPO, env=monitor_env({}), check=True, capture_output=True)
    with open(summary) as f:
        return json.load(f), recording.read(rec).records


def _windows(records: list[dict]) -> list[tuple[int, int]]:
    out, opened = [], None
    for r in records:
        if r.get("t") == R.MODE and r.get("category") == "backend":
            if r["mode"] == "timed":
                opened = r["ts"]
            elif opened is not None:
                out.append((opened, r["ts"]))
                opened = None
    return out


def measure(loop: Loop, summary: dict, records: list[dict], base: float, bracket_ns: float) -> dict:
    """One session's figures (see the module's docstring)."""
    ctr = [r["ts"] for r in records if r.get("t") == R.COUNTERS]
    s0, s1 = ctr[0] + STEADY_AFTER_NS, ctr[-1]
    wins = [(a, b) for a, b in _windows(records) if s0 <= a and b <= s1]
    gaps, last = [], s0
    for a, b in wins:
        gaps.append((last, a - MARGIN_NS))
        last = b + MARGIN_NS
    gaps.append((last, s1))
    after = [(b + MARGIN_NS, min(b + AFTER_NS, nxt - MARGIN_NS))
             for (_, b), (nxt, _) in zip(wins, [*wins[1:], (s1 + MARGIN_NS, 0)])]
    n_in, t_in = loop.steps_in(wins)
    n_out, t_out = loop.steps_in(gaps)
    n_aft, t_aft = loop.steps_in(after)
    speed_in = n_in / t_in * 1e9 if t_in else float("nan")   # no window: every probe stayed off
    speed_out, steady = n_out / t_out * 1e9, loop.rate(s0, s1)
    calls = summary["calls"]["backend"] or 0
    per_step = calls / (loop.rate(ctr[0], ctr[-1]) * summary["duration_s"])
    win_s = sum(b - a for a, b in wins) / 1e9
    lost_s = win_s * (1 - speed_in / base) if wins else 0.0
    ov = summary["overhead"]
    speed_aft = n_aft / t_aft * 1e9 if t_aft else float("nan")
    return {"base": base, "whole": base / loop.rate(ctr[0] + WHOLE_AFTER_NS, s1), "steady": base / steady,
            "out": base / speed_out, "in": base / speed_in, "after": base / speed_aft,
            "windows": len(wins), "win_share": win_s / ((s1 - s0) / 1e9), "win_cost": lost_s / ((s1 - s0) / 1e9),
            "per_call_ns": (1 / speed_in - 1 / base) * 1e9 / per_step, "priced_ns": bracket_ns,
            "self_pct": ov["estimated_pct"], "probes_pct": 100 * ov["by_source_s"]["probes"] / summary["duration_s"]}


def _row(i: int, m: dict) -> str:
    return (f"| {i} | {m['base']:,.0f} | {m['whole']:.3f}x | {m['steady']:.3f}x | {m['out']:.3f}x | {m['after']:.3f}x | {m['in']:.3f}x | "
            f"{m['windows']} | "
            f"{100 * m['win_share']:.1f}% | {100 * m['win_cost']:.1f}% | {m['per_call_ns']:,.0f} ns | "
            f"{m['priced_ns']:,.0f} ns | {m['probes_pct']:.1f}% / {m['self_pct']:.1f}% |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--program", help="one of bench/real_rl.py's programs instead of the tiny-op loop")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--duration", type=float, default=24.0)
    ap.add_argument("--span", type=float, default=8.0)
    ap.add_argument("--args", default="", help="more `attach` arguments, e.g. \"--sample-hz 0\"")
    ap.add_argument("--write", action="store_true", help="put the table in docs/overhead.md")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("window_cost: needs root (eBPF); hint: sudo .venv/bin/python bench/window_cost.py", file=sys.stderr)
        return 2
    warm_bytecode(REPO)
    kind = calibration.load().cost("enter", True, "torch")   # the begin and end probes: one bracket
    bracket = sum(kind.values())
    loop = Program(a.program) if a.program else Loop()
    rows = []
    try:
        time.sleep(3)
        before = _plain(loop, a.span)
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(a.sessions):
                summary, records = _session(loop, a.duration, tmp, i, a.args.split())
                after = _plain(loop, a.span)
                m = measure(loop, summary, records, (before + after) / 2, bracket)
                rows.append(m)
                print(_row(i + 1, m), flush=True)
                before = after
    finally:
        loop.close()
    med = {k: statistics.median(m[k] for m in rows) for k in rows[0]}
    head = ["| session | base steps/s | from 0.5 s | steady (from 2 s) | out of windows | 0.5 s after a window | in windows | windows | windows' share of wall "
            "| windows' cost | a call's traps, measured | priced (calibrated bracket) | self-report: probes / all |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines = head + [_row(i + 1, m) for i, m in enumerate(rows)] + [_row("median", med).replace("| median |", "| **median** |")]
    print("\n".join(lines))
    if a.write:
        from docsection import generated_by, replace_section  # noqa: PLC0415
        prog = f"--program {a.program} " if a.program else ""
        cmd = f"bench/window_cost.py {prog}--sessions {a.sessions} --duration {a.duration:g} --span {a.span:g} --write"
        cmd += f' --args "{a.args}"' if a.args else ""
        title = "## Re-timing windows: their measured cost" + (f" on {a.program}" if a.program else "")
        replace_section(os.path.join(REPO, "docs", "overhead.md"), title,
                        [generated_by(cmd), "", *__doc__.split("\n\n")[1].splitlines(), "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
