"""rl-games' PPO (bench/workloads/rl_games_ppo.py), attached as a user would, its operations
against rl-games' own timers: each epoch returns the env steps' time, the rollout's and the
update's, which the workload's shim writes with the epoch's end. The known answer of a session
is each part's time over the wall time of the epochs that ended inside its window (the first of
them, begun before attach, left out); the rest of that wall time is rl-games' logging between
epochs, `<none>` to the rules.

rl-games pins psutil<6, so it runs from a virtual environment of its own (--python; the
workload's docstring has the two commands).

usage: sudo .venv/bin/python bench/rl_games_ops.py --python /tmp/rgvenv/bin/python [--sessions 3]
       [--seconds 15] [--exact 0] [--torch-threads 4] [--keep DIR]
       [--gap 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from attached import headless, op_shares, started

HERE = os.path.dirname(os.path.abspath(__file__))
# rl-games' part -> the operations the built-in rules name inside it
PARTS = {"env step": ("simulation",), "rest of rollout": ("collect_rollouts", "inference"),
         "update": ("train", "backward", "optimizer_step"), "between epochs": ("<none>",)}


def _epochs(path: str) -> list[tuple[int, float, float, float, float]]:
    with open(path) as f:
        return [(int(a), float(b), float(c), float(d), float(e))
                for a, b, c, d, e in (line.split() for line in f if line.strip())]


def truth(epochs: list[tuple], t0: int, t1: int) -> dict[str, float]:
    """Each part's share of the wall time from the end of the first epoch inside [t0, t1] to
    the end of the last."""
    inside = [e for e in epochs if t0 <= e[0] <= t1]
    if len(inside) < 3:
        raise RuntimeError(f"only {len(inside)} epochs ended inside the session")
    wall = (inside[-1][0] - inside[0][0]) / 1e9
    done = inside[1:]
    step, play, update, total = (sum(e[i] for e in done) for i in (1, 2, 3, 4))
    return {"env step": step / wall, "rest of rollout": (play - step) / wall, "update": update / wall,
            "between epochs": 1 - total / wall}


def epoch_s(epochs: list[tuple], t0: int, t1: int) -> float:
    """Mean wall time an epoch (end to end) of the epochs that ended inside [t0, t1]."""
    ends = [e[0] for e in epochs if t0 <= e[0] <= t1]
    return (ends[-1] - ends[0]) / 1e9 / (len(ends) - 1) if len(ends) > 2 else float("nan")


def slowdown_table(rows: list[tuple]) -> list[str]:
    """The self-report against the slowdown of rl-games' epochs (fixed work each: 512 steps and
    4 mini-epochs), attached against the unattached spans on both sides."""
    out = ["| session | mode | epoch unattached / attached, ms | measured slowdown % | self-reported % | self / measured "
           "| its parts: probes / bookkeeping / kernel_extra / contention / sampler % |", "|---|---|---|---|---|---|---|"]
    for i, mode, plain, on, self_pct, parts in rows:
        meas = 100 * (1 - plain / on)
        ratio = f"{self_pct / meas:.2f}" if meas > 0.5 else "n/a"
        out.append(f"| {i} | {mode} | {1e3 * plain:.2f} / {1e3 * on:.2f} | {meas:.1f} | {self_pct:.1f} | {ratio} "
                   f"| {parts} |")
    for mode in ("default", "exact"):
        sel = [r for r in rows if r[1] == mode]
        if sel:
            meas = statistics.median(100 * (1 - r[2] / r[3]) for r in sel)
            rep = statistics.median(r[4] for r in sel)
            ratio = f"{rep / meas:.2f}" if meas > 0.5 else "n/a"
            out.append(f"| median of {len(sel)} | {mode} | | {meas:.1f} | {rep:.1f} | {ratio} | |")
    return out


def categories(totals: dict) -> list[float]:
    """Python / Backend / Simulator, % of their sum (corrected in exact mode, as the table shows)."""
    v = [totals.get(f"{c}_s") or 0.0 for c in ("python", "backend", "simulator")]
    return [100 * x / sum(v) for x in v] if sum(v) else [float("nan")] * 3


def _session(pid: int, times: str, seconds: float, extra: list[str], keep: str | None, i: int
             ) -> tuple[dict, dict, dict]:
    s = headless(pid, seconds, extra, os.path.join(keep, f"{pid}-s{i}.json") if keep else None)
    t0, t1 = s["window"]["t0_monotonic_ns"], s["window"]["t1_monotonic_ns"]
    return truth(_epochs(times), t0, t1), op_shares(s, PARTS), s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", required=True,
                    help="the interpreter of a venv with torch==2.13.0, rl-games==1.6.5 and envpool==1.2.5")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--exact", type=int, default=0, help="sessions with --max-overhead 100 after the default ones")
    ap.add_argument("--keep", metavar="DIR", help="keep each session's summary there")
    ap.add_argument("--gap", type=float, default=0.0,
                    help="s unattached before each session and after the last: the self-report against "
                         "the epochs' slowdown")
    ap.add_argument("--torch-threads", type=int, default=4, help="torch's threads (the shipped config's 4)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        times = os.path.join(tmp, "times.txt")
        p = started([a.python, os.path.join(HERE, "workloads", "rl_games_ppo.py"), times,
                     os.path.join(tmp, "runs"), str(a.torch_threads)])
        try:
            time.sleep(8)                           # past start-up
            print("| session | mode | " + " | ".join(PARTS) + " | categories Python / Backend / Simulator | waiting |")
            print("|---|---|" + "---|" * (len(PARTS) + 2))
            spans, slow = [], []
            for i in range(a.sessions + a.exact):
                exact = i >= a.sessions
                if a.gap:
                    spans.append((time.monotonic_ns(), time.sleep(a.gap) or time.monotonic_ns()))
                t, o, s = _session(p.pid, times, a.seconds, ["--max-overhead", "100"] if exact else [],
                                   a.keep, i)
                cells = " | ".join(f"{100 * o[k]:.1f} / {100 * t[k]:.1f}" for k in PARTS)
                cats = " / ".join(f"{v:.1f}" for v in categories(s["totals"]))
                wait = (s["job"]["critical_path"].get("waiting_s") or 0) / s["totals"]["wall_s"]
                print(f"| {i} | {'exact' if exact else 'default'} | {cells} | {cats} | {100 * wait:.1f} |", flush=True)
                w0, w1 = s["window"]["t0_monotonic_ns"], s["window"]["t1_monotonic_ns"]
                src = s["overhead"]["by_source_s"]
                parts = " / ".join(f"{100 * (src.get(k) or 0) / s['totals']['wall_s']:.1f}"
                                   for k in ("probes", "bookkeeping", "kernel_extra", "contention", "sampler"))
                slow.append((i, "exact" if exact else "default", w0 + int(0.5e9), w1,
                             s["overhead"]["estimated_pct"], parts))
            if a.gap:
                spans.append((time.monotonic_ns(), time.sleep(a.gap) or time.monotonic_ns()))
                ep = _epochs(times)
                rows = [(i, mode, statistics.mean([epoch_s(ep, *spans[i]), epoch_s(ep, *spans[i + 1])]),
                         epoch_s(ep, w0, w1), pct, parts) for i, mode, w0, w1, pct, parts in slow]
                print("\n" + "\n".join(slowdown_table(rows)))
        finally:
            p.kill()
    print("\ncells: ours / rl-games' own, % (ours: each part's operations over all operations' wall time; "
          "rl-games': each part's time over its epochs' wall time); categories: % of their sum; waiting: the "
          "training thread blocked outside every probed call, % of wall time (the job line's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
