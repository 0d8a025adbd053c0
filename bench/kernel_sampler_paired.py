"""What the in-kernel stack sampler costs a real RL program, paired so that this VM's speed
flips cannot pass for it (issue 16 item 1; issue 12 item 6: is its cost in the self-report?).

One training process (bench/real_rl.py PROGRAMS, run unchanged under the step counter) and one
default attach for the whole run. Inside it the kernel sampler is switched off and on in
alternating windows by writing its period to the program's `pycfg` map (probes/pystack.c; 0:
off), with bpftool (scripts/setup.sh installs it). The probes and the operation bookkeeping stay
as they are on both sides. Each on window's step rate is compared with the off windows on
either side of it; the median of those ratios is the cost. The monitor's CPU (/proc: its
collector and the sampler's reader) is read over each window too.

With --sessions N it also runs N pairs of whole sessions, default and `--sample-hz 0`
alternating (ABAB), each against the unattached spans on both sides of it (bench/real_rl.py's
yardstick): the comparison a user makes.

usage: sudo .venv/bin/python bench/kernel_sampler_paired.py [--program tianshou] [--windows 60]
       [--window 1] [--sessions 0] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from real_rl import PROGRAMS, PY, _session, _tree_cpu, training  # noqa: E402

SETTLE_S = 0.15           # after a switch, before a window's rate is read


class SamplerSwitch:
    """The kernel sampler's period in a loaded program's `pycfg` map, read and written by bpftool."""

    def __init__(self, map_id: int | None = None):
        if not shutil.which("bpftool"):
            raise SystemExit("kernel_sampler_paired: bpftool not found. Hint: bash scripts/setup.sh installs it")
        if map_id is None:
            maps = json.loads(subprocess.check_output(["bpftool", "-j", "map", "show"]))
            ids = [m["id"] for m in maps if m.get("name") == "pycfg"]
            if not ids:
                raise SystemExit("kernel_sampler_paired: no pycfg map: the monitor runs no kernel sampler")
            map_id = max(ids)                # the newest: this run's monitor
        self.id = str(map_id)
        self.on = self.read()

    def read(self) -> int:
        out = json.loads(subprocess.check_output(["bpftool", "-j", "map", "lookup", "id", self.id,
                                                  "key", "0", "0", "0", "0"]))
        return int.from_bytes(bytes(int(x, 16) for x in out["value"]), "little")

    def set(self, on: bool) -> None:
        value = [str(b) for b in struct.pack("<Q", self.on if on else 0)]
        subprocess.check_call(["bpftool", "map", "update", "id", self.id, "key", "0", "0", "0", "0",
                               "value", *value])


def _start_monitor(pid: int, tmp: str) -> tuple[subprocess.Popen, str]:
    summary = os.path.join(tmp, "paired.json")
    m = subprocess.Popen([PY, "-m", "rlscope_top.cli", "attach", str(pid), "--headless", "--duration", "100000",
                          "--summary", summary], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                         cwd=REPO)
    for line in m.stderr:
        if "attached to PID" in line:
            break
    else:
        raise SystemExit(f"kernel_sampler_paired: the monitor exited {m.wait()} before attaching")
    threading.Thread(target=lambda: [None for _ in m.stderr], daemon=True).start()
    return m, summary


def paired(key: str, windows: int, window: float) -> dict:
    """Sampler on / off windows inside one default session on program ``key``."""
    with training(key) as (t, steps, tmp):
        m, summary = _start_monitor(t.pid, tmp)
        try:
            time.sleep(6.0)                          # past the budget's first windows
            sw = SamplerSwitch()
            spans = []                               # (on?, steps/s, monitor CPU % of a core)
            for i in range(windows):
                on = i % 2 == 0
                sw.set(on)
                time.sleep(SETTLE_S)
                t0, c0 = time.monotonic_ns(), _tree_cpu(m.pid)
                time.sleep(window)
                t1, c1 = time.monotonic_ns(), _tree_cpu(m.pid)
                spans.append((on, steps.rate(t0, t1), 100 * (c1 - c0) / ((t1 - t0) / 1e9)))
            sw.set(True)
        finally:
            m.send_signal(2)
            m.wait(60)
        with open(summary) as f:
            s = json.load(f)
    ratios = [statistics.mean(spans[j][1] for j in (i - 1, i + 1)) / v
              for i, (on, v, _) in enumerate(spans) if on and 0 < i < len(spans) - 1]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    wall = s["totals"]["wall_s"]
    return {"program": PROGRAMS[key][0], "period_ns": sw.on, "slowdown": statistics.median(ratios),
            "q1": q1, "q3": q3, "pairs": len(ratios),
            "off_speed": statistics.median(v for on, v, _ in spans if not on),
            "monitor_on": statistics.mean(c for on, _, c in spans if on),
            "monitor_off": statistics.mean(c for on, _, c in spans if not on),
            "self_sampler_pct": 100 * s["overhead"]["by_source_s"]["sampler"] / wall,
            "self_pct": s["overhead"]["estimated_pct"]}


def sessions(key: str, n: int, seconds: float, gap: float) -> dict:
    """N ABAB pairs of whole sessions: default, then --sample-hz 0."""
    out = {"default": [], "--sample-hz 0": []}
    with training(key) as (t, steps, tmp):
        for i in range(n):
            for j, (name, extra) in enumerate((("default", []), ("--sample-hz 0", ["--sample-hz", "0"]))):
                r = _session(t.pid, steps, tmp, seconds, gap, extra, 2 * i + j)
                out[name].append(r)
                print(name, f"measured {r['measured_pct']:.1f}% self {r['self_pct']:.1f}%", file=sys.stderr)
    return out


def _paired_lines(r: dict) -> list[str]:
    hz = "every tick" if r["period_ns"] <= 1 else f"{1e9 / r['period_ns']:.0f} Hz"
    return ["| program | sampler (rate) | on vs off: slowdown (median) | middle half of the ratios | pairs "
            "| speed, sampler off | monitor CPU on / off (% of a core) | self-reported: sampler % / total % |",
            "|---|---|---|---|---|---|---|---|",
            f"| {r['program']} | kernel ({hz}) | {r['slowdown']:.3f}x | {r['q1']:.3f}-{r['q3']:.3f}x | {r['pairs']} "
            f"| {r['off_speed']:,.0f} steps/s | {r['monitor_on']:.2f} / {r['monitor_off']:.2f} "
            f"| {r['self_sampler_pct']:.2f} / {r['self_pct']:.1f} |"]


def _session_lines(res: dict) -> list[str]:
    lines = ["| sessions | measured slowdown %: median (each, in order) | self-reported %: median |", "|---|---|---|"]
    for name, rows in res.items():
        m = [r["measured_pct"] for r in rows]
        lines.append(f"| {name} | {statistics.median(m):.1f} ({', '.join(f'{x:.1f}' for x in m)}) "
                     f"| {statistics.median(r['self_pct'] for r in rows):.1f} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="tianshou")
    ap.add_argument("--windows", type=int, default=60)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--sessions", type=int, default=0, help="also N ABAB pairs of whole sessions")
    ap.add_argument("--seconds", type=float, default=12.0, help="each whole session's length")
    ap.add_argument("--write", action="store_true", help="put the tables in docs/overhead.md")
    a = ap.parse_args()
    if a.windows < 5:
        raise SystemExit("kernel_sampler_paired: --windows must be at least 5. Hint: 60 gives ~30 pairs")
    r = paired(a.program, a.windows, a.window)
    lines = _paired_lines(r)
    if a.sessions:
        lines += ["", *_session_lines(sessions(a.program, a.sessions, a.seconds, 4.0))]
    print("\n".join(lines))
    if a.write:
        from docsection import generated_by, replace_section  # noqa: PLC0415

        replace_section(os.path.join(REPO, "docs", "overhead.md"), "## The kernel sampler on a real program, paired", [
            generated_by(f"bench/kernel_sampler_paired.py --program {a.program} --windows {a.windows} --window "
                         f"{a.window:g} --sessions {a.sessions} --seconds {a.seconds:g} --write",
                         "One default session for the whole run; inside it the kernel sampler's period (pycfg) is "
                         f"set to 0 and back in alternating {a.window:g} s windows, the probes and operations "
                         "unchanged. Each on window's step rate against its two off neighbours; the median ratio "
                         "is the cost." + (" Below it, whole sessions, default and `--sample-hz 0` alternating, "
                                           "each against the unattached spans around it." if a.sessions else "")),
            "", *lines])
    return 0


if __name__ == "__main__":
    sys.exit(main())
