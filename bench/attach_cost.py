"""Issue 16: the default mode's cost on an RL-shaped tiny-op loop, the first second after
attach, and attach/detach times, in one run.

One target (bench/workloads/rl_tiny_loop.py) runs the whole time and reports its steps
with timestamps. Each repetition, in ABAB order: SPAN s unattached; then `rlscope-top
attach` with each setting, SPAN s measured from 1 s after "attached"; the first second
after "attached" is measured apart, as is the target's speed while the monitor compiles
and attaches. Also py-spy at 100 Hz for the same spans, as the peer. Attach time is from
the monitor's start to its "attached" line (the first counters follow within one tick);
detach time is the summary's `overhead.detach_s`.

usage: sudo .venv/bin/python bench/attach_cost.py [--reps 3] [--span 3] [--write]
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
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
sys.path.insert(0, HERE)
from median_ci import median_interval  # noqa: E402
from monitor_env import monitor_env, warm_bytecode  # noqa: E402

# (arguments, environment): the default run loads the compiled program kept by an earlier
# session (probes/bpf_cache.py); "compiling" turns that off, as on a machine's first attach
SETTINGS = {"default": ([], {}), "default, compiling (no cache)": ([], {"RLSCOPE_BPF_CACHE": "0"}),
            "--sample-hz 0": (["--sample-hz", "0"], {}), "--sampler austin": (["--sampler", "austin"], {}),
            # the re-timing windows as before stop 52 (0.22 s every ~2.3 s on this loop), side by side
            "default (windows as before)": ([], {"RLSCOPE_SITE_WINDOWS": "0"}),
            # the start-up work on any core, as before stop 60 (rlscope_top/collect/start_cpus.py)
            "default (start on any core)": ([], {"RLSCOPE_START_CPUS": "0"})}


class Target:
    """The loop, with its (timestamp, steps) reports read in the background."""

    def __init__(self, busy: bool, print_ms: float | None = None):
        env = {**os.environ, "RL_LOOP_PRINT_MS": str(print_ms)} if print_ms else None
        self.p = subprocess.Popen([PY, os.path.join(HERE, "workloads", "rl_tiny_loop.py")],
                                  stdout=subprocess.PIPE, text=True, env=env)
        assert self.p.stdout.readline().startswith("ready")
        self.marks: list[tuple[int, int]] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.hog = subprocess.Popen([PY, "-c", "while True: pass"]) if busy else None

    def _read(self):
        for line in self.p.stdout:
            f = line.split()
            if f and f[0] == "t":
                self.marks.append((int(f[1]), int(f[3])))

    def now(self) -> int:
        """Steps so far (at the latest report)."""
        return self.marks[-1][1] if self.marks else 0

    def rate(self, t0: int, t1: int) -> float:
        """Steps per second between two monotonic ns times (from the reports inside)."""
        inside = [m for m in self.marks if t0 <= m[0] <= t1]
        if len(inside) < 2:
            return float("nan")
        (a, sa), (b, sb) = inside[0], inside[-1]
        return (sb - sa) / ((b - a) / 1e9)

    def close(self):
        for p in (self.p, self.hog):
            if p is not None:
                p.kill()


def _wait_line(p: subprocess.Popen, needle: str, timeout: float = 180) -> int:
    end, seen = time.monotonic() + timeout, []
    for line in p.stderr:
        if needle in line:
            return time.monotonic_ns()
        seen.append(line)
        if time.monotonic() > end:
            break
    raise RuntimeError(f"no {needle!r} from the monitor (exit {p.poll()}):\n{''.join(seen)[-2000:]}")


def attached_span(t: Target, setting: tuple[list[str], dict], span: float, tmp: str) -> dict:
    args, env = setting
    summary = os.path.join(tmp, f"s-{time.monotonic_ns()}.json")
    t_start = time.monotonic_ns()
    m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(t.p.pid), "--summary", summary, *args],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp,
                         env=monitor_env(env))
    t_att = _wait_line(m, "attached to PID")
    threading.Thread(target=lambda: [None for _ in m.stderr], daemon=True).start()
    time.sleep(1.0 + span)
    m.send_signal(2)
    m.wait(120)
    s = json.load(open(summary))
    return {"attach_s": (t_att - t_start) / 1e9, "detach_s": s["overhead"]["detach_s"],
            "during_attach": t.rate(t_start, t_att), "first_s": t.rate(t_att, t_att + 1_000_000_000),
            "steady": t.rate(t_att + 1_000_000_000, t_att + int((1 + span) * 1e9)),
            "program": s["probes"].get("program") or {},
            "estimated_pct": s["overhead"]["estimated_pct"], "modes": s["budget"]["modes"]}


def pyspy_span(t: Target, span: float, tmp: str) -> dict:
    m = subprocess.Popen([os.path.join(os.path.dirname(PY), "py-spy"), "record", "-r", "100", "-p", str(t.p.pid),
                          "-o", os.path.join(tmp, "p.svg"), "--nonblocking"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    t0 = time.monotonic_ns()
    time.sleep(span)
    r = t.rate(t0, time.monotonic_ns())
    m.send_signal(2)
    m.wait(60)
    return {"steady": r}


def plain_span(t: Target, span: float) -> float:
    t0 = time.monotonic_ns()
    time.sleep(span)
    return t.rate(t0, time.monotonic_ns())


def run(reps: int, span: float, busy: bool, settings: dict) -> dict:
    out: dict = {"plain": [], **{k: [] for k in settings}, "py-spy 100 Hz": []}
    t = Target(busy)
    waiting: list[dict] = []          # attached spans whose next plain span is yet to come

    def plain() -> None:
        out["plain"].append(plain_span(t, span))
        for r in waiting:
            r["after"] = out["plain"][-1]
        waiting.clear()

    def attached(name: str, r: dict) -> None:
        r["before"] = out["plain"][-1]
        out[name].append(r)
        waiting.append(r)

    try:
        time.sleep(2.0)                                  # warm up
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(reps):
                for name, setting in settings.items():   # ABAB: a plain span before and after each attached one
                    plain()
                    attached(name, attached_span(t, setting, span, tmp))
                    print(f"[{'busy' if busy else 'idle'}] rep {rep} {name}: {out[name][-1]}", file=sys.stderr)
                plain()
                attached("py-spy 100 Hz", pyspy_span(t, span, tmp))
            plain()
    finally:
        t.close()
    return out


def _slow(base: float, v: float) -> str:
    return f"{base / v:.3f}x" if v == v and v > 0 else "n/a"


def _paired(rs: list[dict], key: str = "steady") -> tuple[str, str]:
    """Each attached span's ``key`` figure against the mean of the plain spans just before and
    after it (the loop's speed drifts by a few percent over a run, and by more on a noisy
    host): the median with its order-statistic interval [low-high, coverage]
    (bench/median_ci.py), and each rep's."""
    each = [(r["before"] + r["after"]) / 2 / r[key] for r in rs if r[key] == r[key] and r[key] > 0]
    if not each:
        return "n/a", ""
    lo, hi, cover = median_interval(each)
    return (f"{statistics.median(each):.3f}x [{lo:.3f}-{hi:.3f}x, {100 * cover:.0f}%]",
            ", ".join(f"{x:.3f}x" for x in each))


def table(res: dict, label: str, settings: dict) -> list[str]:
    base = statistics.median(res["plain"])
    rows = [f"| {label} | plain | {base:,.0f} steps/s | 1.000x | | | | | |"]
    for name in settings:
        rs = res[name]
        med = {k: statistics.median([r[k] for r in rs]) for k in ("steady", "attach_s", "detach_s",
                                                                   "estimated_pct")}
        each = ", ".join(_slow(base, r["steady"]) for r in rs)
        load = statistics.median([r["program"].get("load_s", float("nan")) for r in rs])
        origin = "/".join(sorted({r["program"].get("from", "?") for r in rs}))
        paired, paired_each = _paired(rs)
        rows.append(f"| {label} | {name} | {med['steady']:,.0f} steps/s | {paired} ({paired_each}) | "
                    f"{_slow(base, med['steady'])} ({each}) | "
                    f"{_paired(rs, 'first_s')[0]} | {_paired(rs, 'during_attach')[0]} | "
                    f"{med['attach_s']:.2f} s (program from {origin}: {load:.2f} s) | "
                    f"{med['detach_s']:.2f} s; own estimate {med['estimated_pct']:.1f}% |")
    py = statistics.median([r["steady"] for r in res["py-spy 100 Hz"]])
    rows.append(f"| {label} | py-spy 100 Hz | {py:,.0f} steps/s | {_paired(res['py-spy 100 Hz'])[0]} | "
                f"{_slow(base, py)} | | | | |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--span", type=float, default=3.0)
    ap.add_argument("--write", action="store_true", help="put the table in docs/overhead.md")
    ap.add_argument("--only", choices=["idle", "busy"], help="one machine state only")
    ap.add_argument("--settings", default="", help="comma-separated setting names (default: all)")
    a = ap.parse_args()
    names = a.settings.split(",") if a.settings else list(SETTINGS)
    if unknown := [k for k in names if k not in SETTINGS]:
        ap.error(f"unknown setting {', '.join(unknown)}; one of: {', '.join(SETTINGS)}")
    settings = {k: SETTINGS[k] for k in names}
    warm_bytecode(REPO)
    lines = ["| target | setting | speed (median) | steady slowdown, paired (each rep) | steady, against all plain "
             "spans (each rep) | first second after attach, paired | while attaching, paired | attach | detach |",
             "|---|---|---|---|---|---|---|---|---|"]
    for busy in [b for b in (False, True) if a.only is None or a.only == ("busy" if b else "idle")]:
        lines += table(run(a.reps, a.span, busy, settings), "busy machine (1 busy loop)" if busy else "idle machine",
                       settings)
    print("\n".join(lines))
    if a.write:
        sys.path.insert(0, HERE)
        from docsection import replace_section  # noqa: PLC0415

        replace_section(os.path.join(REPO, "docs", "overhead.md"), "## Tiny-op RL loop: steady, first second, attach and detach", [
            f"Generated by `sudo .venv/bin/python bench/attach_cost.py --reps {a.reps} --span {a.span:g} --write` on "
            f"{platform.node()} ({os.cpu_count()} cores, kernel {platform.release()}), {time.strftime('%Y-%m-%d')}.",
            "The target is bench/workloads/rl_tiny_loop.py (issue 16's loop: a tiny MLP forward per step, an SGD "
            "update every 8 steps, a 200-iteration Python env step), one process for the whole run; spans of "
            f"{a.span:g} s alternate unattached and attached (ABAB), the attached one from 1 s after \"attached\". "
            "Slowdown = unattached speed / attached speed: paired, against the mean of the plain spans just "
            "before and after (the loop drifts by a few percent over a run; the median's distribution-free "
            "interval in brackets, with the probability it holds the true median), and against the median of all plain "
            "spans. The first second after attach and the stretch while attaching are paired the same way. Attach = monitor start to its \"attached\" line, with the "
            "program it loaded (kept from an earlier session, or compiled at nice 19) and how long that took; detach from the summary. The monitor runs with its bytecode cached, as an installed tool does (bench/monitor_env.py). The busy rows add one pure-Python busy loop "
            "beside the target on the 2-core VM.", "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
