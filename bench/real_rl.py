"""Real RL programs from the registry, attached as a user would (issue 12): tianshou 2.0.1 DQN
and rl-zoo3 2.9.2 PPO on CartPole, run unchanged, and a CleanRL-style single-file PPO (a shim
counts CartPole steps into shared memory: the program's own progress rate is the slowdown).

One long-running training process per program. Between unattached stretches, `rlscope-top
attach --headless --duration S` runs SESSIONS times with default settings and EXACT times
with `--max-overhead 100` (exact), spread among them. For each session: the category shares,
how far default mode is from the shares of the exact sessions nearest it, the overhead the tool reported, and the slowdown measured
from the step rate (attached, against the unattached stretches on both sides). Also the
`simulation` operation's true share: the time in the outermost environment step or reset (SB3's
VecEnv.step, gymnasium's vector env or wrappers) over the unattached stretches' wall time (the
shim times it).

usage: sudo .venv/bin/python bench/real_rl.py [--program tianshou|zoo|zoo_subproc|cleanrl|torchrl|skrl]... [--sessions 5]
       [--exact 1] [--seconds 10] [--write]      (tianshou, rl-zoo3: the `test` extra)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from median_ci import median_interval  # noqa: E402
PY = sys.executable
CATS = ("python", "backend", "simulator", "cuda_api")
PROGRAMS = {
    "tianshou": ("tianshou 2.0.1 DQN CartPole-v1", [os.path.join(HERE, "workloads", "tianshou_dqn.py")]),
    "zoo": ("rl-zoo3 2.9.2 PPO CartPole-v1", ["-m", "rl_zoo3.train", "--algo", "ppo", "--env", "CartPole-v1",
                                              "-n", "100000000", "--seed", "0", "--eval-freq", "-1",
                                              "--device", "cpu", "--log-interval", "-1"]),
    # the whole job (issue 13): 4 CartPole envs in SubprocVecEnv workers (forkserver), one learner
    "zoo_subproc": ("rl-zoo3 2.9.2 PPO CartPole-v1, --vec-env subproc (4 workers)",
                    ["-m", "rl_zoo3.train", "--algo", "ppo", "--env", "CartPole-v1", "--vec-env", "subproc",
                     "--hyperparams", "n_envs:4", "-n", "100000000", "--seed", "0", "--eval-freq", "-1",
                     "--device", "cpu", "--log-interval", "-1"]),
    # CleanRL's single-file layout (SyncVectorEnv, get_action_and_value), written here in its style
    "cleanrl": ("CleanRL-style PPO CartPole-v1 (4 envs)", [os.path.join(HERE, "workloads", "cleanrl_ppo.py")]),
    # torchrl's PPO tutorial on CartPole: a Collector, tensordicts, ClipPPOLoss
    "torchrl": ("torchrl 0.14.1 PPO CartPole-v1", [os.path.join(HERE, "workloads", "torchrl_ppo.py")]),
    # skrl's PPO: SequentialTrainer over 4 CartPole envs behind skrl's wrapper, torch's default threads
    "skrl": ("skrl 2.1.1 PPO CartPole-v1 (4 envs)", [os.path.join(HERE, "workloads", "skrl_ppo.py")]),
}


class Steps:
    """The target's CartPole step count, sampled every ``every`` s."""

    def __init__(self, path: str, every: float = 0.1):
        self.every = every
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, 16)
        self.m = mmap.mmap(fd, 16)
        self.samples: list[tuple[int, int]] = []
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def now(self) -> int:
        return struct.unpack_from("q", self.m, 0)[0]

    def sim_ns(self) -> int:
        """ns the target has spent in its outermost environment step or reset (bench/workloads/count_steps.py)."""
        return struct.unpack_from("q", self.m, 8)[0]

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            n = self.now()
            if not self.samples or n >= self.samples[-1][1]:   # a count never goes back: one read -67.8x at a kill
                self.samples.append((time.monotonic_ns(), n))

    def rate(self, t0: int, t1: int) -> float:
        """Steps per second between two CLOCK_MONOTONIC instants."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return float("nan")
        (a, na), (b, nb) = inside[0], inside[-1]
        return (nb - na) / ((b - a) / 1e9)


def _shares(s: dict) -> dict:
    tot = sum(s["totals"].get(f"{c}_s") or 0.0 for c in CATS)
    return {c: 100 * (s["totals"].get(f"{c}_s") or 0.0) / tot if tot else float("nan") for c in CATS}


def _timed_run(argv: list[str], cwd: str) -> subprocess.CompletedProcess:
    """Run the monitor; ``cpu_s`` is the CPU it and its children (austin) used once attached
    (its BPF compile before that is not the session's)."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd)
    err, c0 = [], None
    for line in p.stderr:
        err.append(line)
        if c0 is None and "attached to PID" in line:
            c0 = _tree_cpu(p.pid)
        c1 = _tree_cpu(p.pid) if c0 is not None else None
    p.wait(timeout=300)
    m = subprocess.CompletedProcess(argv, p.returncode, "", "".join(err))
    m.cpu_s = (c1 - c0) if c0 is not None and c1 is not None else float("nan")
    return m


def tree_cpu(pid: int) -> tuple[float, float] | None:
    """(user, system) CPU seconds of a process and its descendants; None once it is gone."""
    try:
        import psutil  # noqa: PLC0415

        pr = psutil.Process(pid)
        times = [x.cpu_times() for x in (pr, *pr.children(recursive=True))]
        return sum(t.user for t in times), sum(t.system for t in times)
    except Exception:
        return None


def _tree_cpu(pid: int) -> float | None:
    c = tree_cpu(pid)
    return None if c is None else sum(c)


def _session(pid: int, steps: Steps, tmp: str, seconds: float, gap: float, extra: list[str], i: int,
             keep: str | None = None) -> dict:
    u0, v0 = time.monotonic_ns(), steps.sim_ns()
    time.sleep(gap)
    u1, v1 = time.monotonic_ns(), steps.sim_ns()
    summary = os.path.join(tmp, f"s{i}.json")
    m = _timed_run([PY, "-m", "rlscope_top.cli", "attach", str(pid), "--headless", "--duration", str(seconds),
                        "--summary", summary, *extra], tmp)
    if m.returncode != 0:
        raise RuntimeError(f"rlscope-top exited {m.returncode}: {m.stderr[-800:]}")
    with open(summary) as f:
        s = json.load(f)
    if keep:                                          # --keep: a copy of each session's summary
        shutil.copy(summary, os.path.join(keep, f"{os.getpid()}-{pid}-s{i}.json"))
    w0, w1 = s["window"]["t0_monotonic_ns"], s["window"]["t1_monotonic_ns"]
    a0, va0 = time.monotonic_ns(), steps.sim_ns()
    time.sleep(gap)
    a1, va1 = time.monotonic_ns(), steps.sim_ns()
    after = steps.rate(w1 + int(0.5e9), a1)
    # the simulation operation's share of wall time, unattached, before and after
    sim_truth = 50 * ((v1 - v0) / (u1 - u0) + (va1 - va0) / (a1 - a0)) if v1 > v0 else float("nan")
    unattached = statistics.mean([steps.rate(u0, u1), after])
    attached = steps.rate(w0 + int(0.5e9), w1)        # past the first half second's budget decisions
    return {"mode": "exact" if "--max-overhead" in extra else "default", "shares": _shares(s),
            "self_pct": s["overhead"]["estimated_pct"], "measured_pct": 100 * (1 - attached / unattached),
            "rate_unattached": unattached, "rate_attached": attached, "modes": s["budget"]["modes"],
            "negatives": [k for k, v in s["totals"].items() if isinstance(v, (int, float)) and v < 0],
            "by_source_s": s["overhead"]["by_source_s"], "wall_s": s["totals"]["wall_s"],
            "samples": s["budget"]["samples"], "monitor_cpu_s": round(m.cpu_s, 2),
            "calibrated": s["overhead"].get("calibrated"), "sim_truth_pct": sim_truth}


@contextlib.contextmanager
def training(key: str, every: float = 0.1):
    """One of PROGRAMS, run unchanged under the step counter, past its start-up: yields
    (its process, its Steps read every ``every`` s, a scratch directory); killed on the way out."""
    name, argv = PROGRAMS[key]
    with tempfile.TemporaryDirectory() as tmp:
        counter = os.path.join(tmp, "steps")
        steps = Steps(counter, every)
        t = subprocess.Popen([PY, os.path.join(HERE, "workloads", "count_steps.py"), counter, *argv],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
        try:
            end = time.monotonic() + 120
            while steps.now() < 2000 and time.monotonic() < end:
                time.sleep(0.5)
            if steps.now() < 2000:
                raise RuntimeError(f"{name}: no training progress in 120 s")
            time.sleep(5.0)                              # past start-up (replay warm-up, first updates)
            yield t, steps, tmp
        finally:
            steps.stop.set()
            t.kill()
            t.wait()


def run_program(key: str, sessions: int, seconds: float, gap: float, args: list[str] = (),
                keep: str | None = None, exact: int = 1) -> list[dict]:
    """Start the program once, attach ``sessions`` times by default and ``exact`` times exact
    (spread among them: ``schedule``); each session's distance from exact mode is taken
    against the exact sessions nearest it (``_nearest_exact``)."""
    name = PROGRAMS[key][0]
    with training(key) as (t, steps, tmp):
        rows = [_session(t.pid, steps, tmp, seconds, gap, ["--max-overhead", "100"] if m == "exact" else list(args),
                         i, keep) for i, m in enumerate(schedule(sessions, exact))]
    for r in rows:
        r["program"] = name
    for i, r in enumerate(rows):
        ref = _nearest_exact(rows, i)
        r["vs_exact_pp"] = max(abs(r["shares"][c] - ref[c]) for c in CATS)
    return rows


def schedule(sessions: int, exact: int) -> list[str]:
    """The order of the sessions: the exact ones spread evenly among the default ones, each
    in the middle of its share of them (a program's split drifts as its agent learns:
    tianshou's Backend rose from 33% to 38% over a 12-session run)."""
    at = [(2 * k + 1) * sessions // (2 * exact) for k in range(exact)]
    out: list[str] = []
    for i in range(sessions + 1):
        out += ["exact"] * at.count(i)
        if i < sessions:
            out.append("default")
    return out


def _nearest_exact(rows: list[dict], i: int) -> dict:
    """The reference shares for session i: the mean of the nearest exact session before it
    and the nearest after it (one of them at either end of the run; itself, for an exact one)."""
    exact = [j for j, r in enumerate(rows) if r["mode"] == "exact"]
    near = [i] if i in exact else [j for j in exact if j < i][-1:] + [j for j in exact if j > i][:1]
    return {c: statistics.mean(rows[j]["shares"][c] for j in near) for c in CATS}


def _ratio(self_pct: float, measured_pct: float) -> float:
    """Self-report over measured slowdown; nan where the slowdown is too small to divide by."""
    return self_pct / measured_pct if measured_pct > 0.5 else float("nan")


def table(rows: list[dict]) -> list[str]:
    out = ["| program | session | Python / Backend / Simulator % | max diff from exact, pp | Simulator truth % "
           "| self-reported overhead % | measured slowdown % (step rate) | self / measured | budget modes |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sh = r["shares"]
        ratio = _ratio(r["self_pct"], r["measured_pct"])
        truth = r.get("sim_truth_pct", float("nan"))
        out.append(f"| {r['program']} | {r['mode']} | {sh['python']:.1f} / {sh['backend']:.1f} / {sh['simulator']:.1f} "
                   f"| {r['vs_exact_pp']:.1f} | {'n/a' if truth != truth else f'{truth:.1f}'} | {r['self_pct']:.1f} "
                   f"| {r['measured_pct']:.1f} | {ratio:.2f} | {r['modes'] or '-'} |")
    return out


def overhead_table(rows: list[dict]) -> list[str]:
    """The self-report against the measured slowdown, with the self-report's parts (issue 12:
    within 30%)."""
    out = ["| program | session | measured slowdown % | self-reported % | self / measured | probes % | bookkeeping % "
           "| kernel_extra % | contention % | sampler % | monitor CPU, % of a core |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        src, w = r["by_source_s"], r["wall_s"] or float("nan")
        ratio = _ratio(r["self_pct"], r["measured_pct"])
        parts = " | ".join(f"{100 * (src.get(k) or 0.0) / w:.1f}" for k in ("probes", "bookkeeping", "kernel_extra", "contention", "sampler"))
        cpu = f"{100 * r['monitor_cpu_s'] / w:.1f}" if r.get("monitor_cpu_s") is not None else "n/a"
        out.append(f"| {r['program']} | {r['mode']} | {r['measured_pct']:.1f} | {r['self_pct']:.1f} | {ratio:.2f} | {parts} "
                   f"| {cpu} |")
    return out + _medians(rows)


def _medians(rows: list[dict]) -> list[str]:
    """Per program and mode, the median session's self-report against the median measured
    slowdown: one session's yardstick moves by several points (the unattached step rate drifts
    as the agent learns, and the host's speed with it), the self-report much less, so the ratio
    of medians is the steadier check. The measured median carries its order-statistic interval
    (bench/median_ci.py) and the ratio the range that interval allows."""
    out = []
    for prog in dict.fromkeys(r["program"] for r in rows):
        for mode in ("default", "exact"):
            ds = [r for r in rows if r["program"] == prog and r["mode"] == mode]
            if len(ds) < 2:
                continue
            meas, self_ = statistics.median(r["measured_pct"] for r in ds), statistics.median(r["self_pct"] for r in ds)
            lo, hi, cover = median_interval([r["measured_pct"] for r in ds])
            out.append(f"| {prog} | {mode}, median of {len(ds)} | {meas:.1f} [{lo:.1f} to {hi:.1f}, {100 * cover:.0f}%] "
                       f"| {self_:.1f} | {_ratio(self_, meas):.2f} [{_ratio_range(self_, lo, hi)}] | | | | | |")
            out.append(_mean_row(prog, mode, ds))
    return out


def _mean_row(prog: str, mode: str, ds: list[dict]) -> str:
    """The sessions' mean slowdown with its standard error, against the mean self-report: a
    session's yardstick is unbiased (unattached "sessions" in its place read a mean of ~0) but
    spreads by ~2.5 pp (this VM's cores each slow by up to a quarter for seconds at a time, on
    their own), so many sessions narrow it as 1 / sqrt(N)."""
    meas = [r["measured_pct"] for r in ds]
    mean, se = statistics.mean(meas), statistics.stdev(meas) / len(meas) ** 0.5
    self_, lo, hi = statistics.mean(r["self_pct"] for r in ds), mean - 2 * se, mean + 2 * se
    return (f"| {prog} | {mode}, mean of {len(ds)} | {mean:.1f} +- {se:.1f} (2 se: {lo:.1f} to {hi:.1f}) "
            f"| {self_:.1f} | {_ratio(self_, mean):.2f} [{_ratio_range(self_, lo, hi)}] | | | | | |")


def _ratio_range(self_pct: float, lo: float, hi: float) -> str:
    """The self / measured ratios a measured interval [lo, hi] allows; no upper end where lo
    is too small to divide by."""
    return f"{_ratio(self_pct, hi):.2f}-{_ratio(self_pct, lo):.2f}" if lo > 0.5 else f"{_ratio(self_pct, hi):.2f}-"


def write_docs(rows: list[dict], sessions: int, seconds: float, gap: float, exact: int = 1) -> None:
    """Both tables into docs/: accuracy (default against exact) and overhead (self-report)."""
    sys.path.insert(0, HERE)
    from docsection import replace_section  # noqa: PLC0415

    how = (f"Generated by `sudo .venv/bin/python bench/real_rl.py {' '.join(sys.argv[1:])}` on {platform.node()} "
           f"({os.cpu_count()} cores, kernel {platform.release()}), {time.strftime('%Y-%m-%d')}: "
           f"({sessions} default sessions and {exact} exact spread among "
           f"them, {seconds:g} s each, each default one against the exact ones nearest it, {gap:g} s unattached on both sides; one training process per program, run unchanged; the slowdown "
           "is 1 - attached / unattached CartPole step rate, from the half second after the summary's window opens).")
    replace_section(os.path.join(REPO, "docs", "accuracy.md"), "## Real RL programs: default against exact",
                    [how, "", *table(rows)])
    replace_section(os.path.join(REPO, "docs", "overhead.md"), "## Self-report against the measured slowdown: real RL programs",
                    [how, "The parts are `overhead.by_source_s` (docs/summary-schema.md) as % of the session's wall time.",
                     "", *overhead_table(rows)])


def _calibrated() -> None:
    """Calibrate first where this machine has no calibration: the self-report prices probe hits
    with it, and the defaults are another machine's."""
    sys.path.insert(0, REPO)
    from rlscope_top.collect import calibration  # noqa: PLC0415
    if not calibration.load().measured:
        print("no calibration for this machine: running `rlscope-top calibrate` first", flush=True)
        subprocess.run([PY, "-m", "rlscope_top.cli", "calibrate"], cwd=REPO, check=True)


def _at_least_one(v: str) -> int:
    n = int(v)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v}: at least one exact session (default mode is compared with them)")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", choices=sorted(PROGRAMS), action="append")
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--exact", type=_at_least_one, default=1, metavar="N",
                    help="exact sessions, 1 or more, spread among the default ones (each default session is compared with the nearest)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--gap", type=float, default=6.0, help="unattached seconds before and after each session")
    ap.add_argument("--args", default="", help="more rlscope-top arguments for the default sessions")
    ap.add_argument("--write", action="store_true", help="write the tables to docs/accuracy.md and docs/overhead.md")
    ap.add_argument("--keep", metavar="DIR", help="also copy each session's summary JSON into DIR")
    a = ap.parse_args()
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    _calibrated()
    rows = []
    for key in a.program or ["tianshou", "zoo"]:
        got = run_program(key, a.sessions, a.seconds, a.gap, a.args.split(), a.keep, a.exact)
        for r in got:
            print(json.dumps(r), flush=True)
        rows += got
    lines = table(rows)
    print("\n".join(lines))
    print("\n".join(overhead_table(rows)))
    if a.write:
        write_docs(rows, a.sessions, a.seconds, a.gap, a.exact)


if __name__ == "__main__":
    main()
