"""What one CPU-clock tick costs the thread it interrupts, beyond the BPF program's own time.

The monitor keeps a perf-event tick on every CPU (probes/loader.py TICK_HZ, 250 Hz) in every
mode, and re-draws its period every 50 ms (probes/tick_jitter.py: an ioctl per CPU). The
self-report prices the programs the tick runs from their measured run time (``bookkeeping``),
and the interrupt around them at the calibrated ``tick`` price (rlscope_top/commands/calib_tick.py,
which this bench runs): entry and exit, the hrtimer's re-arm (in a VM, a timer write the
hypervisor traps), and what they do to the thread's caches.

Two loops, each pinned to one CPU in a process of its own: a pure Python spin, and calibrate's
RL-shaped loop (a 200-iteration Python env step, a tiny MLP forward, an SGD update every 8
steps). The tick runs on that CPU only, with an empty program, at each of RATES, in windows
between windows without it; its cost is the loop's rate lost (per second on a CPU) over the
ticks. A last row re-draws the period every JITTER_EVERY s as the monitor does every 50 ms, to
price the draw's cross-CPU call.

usage: sudo .venv/bin/python bench/tick_cost.py [--pairs 21] [--rates 10000,2500] [--loops "python spin,RL-shaped"]
       [--write]      (--write: the default rates and loops only)
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
from rlscope_top.commands.calib_tick import tick_price  # noqa: E402
from probes.tick_jitter import TickJitter  # noqa: E402
from docsection import generated_by, replace_section  # noqa: E402

CPU = 1
RATES = (10000, 2500)       # Hz; 250 (the monitor's) would cost ~0.3-0.7%, under this VM's noise
WINDOW_S = 0.5
JITTER_EVERY = 0.002        # s
HEAD = "## The tick's own cost"
LOOPS = {
    "python spin": "def step():\n    x = 0\n    for i in range(200):\n        x = (x * 31 + i) % 1009\n",
    "RL-shaped": "from rlscope_top.commands.calib_target import _rl_step\n_s = _rl_step()\ndef step():\n    _s(8)\n",
}
CHILD = r"""
import mmap, os, struct, sys
sys.path.insert(0, sys.argv[2])
exec(sys.argv[3])
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 8)
n = 0
while True:
    step()
    n += 1
    struct.pack_into("q", m, 0, n)
"""


def _loop(tmp: str, code: str) -> tuple[subprocess.Popen, mmap.mmap]:
    path = os.path.join(tmp, "count")
    with open(path, "wb") as f:
        f.write(b"\0" * 8)
    p = subprocess.Popen([sys.executable, "-c", CHILD, path, REPO, code], env=dict(os.environ, OMP_NUM_THREADS="1"))
    for tid in os.listdir(f"/proc/{p.pid}/task"):
        os.sched_setaffinity(int(tid), {CPU})
    os.sched_setaffinity(p.pid, {CPU})
    return p, mmap.mmap(os.open(path, os.O_RDONLY), 8, prot=mmap.PROT_READ)


def _cpu_ns(pid: int) -> int:
    """The process's time on a CPU (/proc/PID/schedstat: an interrupt's time is charged to the
    thread it interrupts, a wait for the CPU is not)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def _rater(p: subprocess.Popen, m: mmap.mmap):
    def rate(seconds: float) -> float:
        n0, c0 = struct.unpack_from("q", m, 0)[0], _cpu_ns(p.pid)
        time.sleep(seconds)
        return (struct.unpack_from("q", m, 0)[0] - n0) / max(1, _cpu_ns(p.pid) - c0)
    return rate


class _Jitter:
    """on_attach for tick_price: re-draw the period as the monitor does, faster."""

    def __init__(self, hz: int):
        self.hz, self.j = hz, None

    def __call__(self, fds):
        if fds is None:
            self.j.stop()
            return
        self.j = TickJitter(fds, 1_000_000_000 // self.hz, every_s=JITTER_EVERY)
        assert self.j.start(), self.j.error


def run(pairs: int, rates=RATES, loops=tuple(LOOPS)) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in loops:
            p, m = _loop(tmp, LOOPS[name])
            try:
                while struct.unpack_from("q", m, 0)[0] < 100:
                    time.sleep(0.1)
                rate = _rater(p, m)
                for hz in rates:
                    rows.append({"loop": name, "hz": hz, "jitter": False,
                                 **tick_price(rate, CPU, hz=hz, pairs=pairs, window_s=WINDOW_S)})
                    print(rows[-1], flush=True)
                if name == "RL-shaped" and rates == RATES:
                    rows.append({"loop": name, "hz": RATES[0], "jitter": True,
                                 **tick_price(rate, CPU, hz=RATES[0], pairs=pairs, window_s=WINDOW_S,
                                              on_attach=_Jitter(RATES[0]))})
                    print(rows[-1], flush=True)
            finally:
                p.kill()
                p.wait()
    return rows


def table(rows: list[dict]) -> list[str]:
    out = ["| loop | tick rate | period re-drawn | ns per tick (median) | middle half | pairs | at 250 Hz, % of a busy thread |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['loop']} | {r['hz']:,} Hz | {'every %g ms' % (JITTER_EVERY * 1e3) if r['jitter'] else 'no'} | "
                   f"{r['per_tick']:,} | {r['q1']:,}-{r['q3']:,} | {r['pairs']} | {r['per_tick'] * 250 / 1e7:.2f} |")
    return out


def _rates(ap: argparse.ArgumentParser, text: str) -> tuple[int, ...]:
    try:
        rates = tuple(int(x) for x in text.split(","))
    except ValueError:
        ap.error(f"--rates {text!r}: give whole numbers of Hz, e.g. 10000,1000")
    if any(not 50 <= r <= 100_000 for r in rates):
        ap.error(f"--rates {text!r}: each rate 50-100000 Hz")
    return rates


def _loops(ap: argparse.ArgumentParser, text: str) -> tuple[str, ...]:
    loops = tuple(x.strip() for x in text.split(","))
    bad = [x for x in loops if x not in LOOPS]
    if bad:
        ap.error(f"--loops: unknown {', '.join(map(repr, bad))}; choose from {', '.join(LOOPS)}")
    return loops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=21)
    ap.add_argument("--rates", default=",".join(map(str, RATES)), help="tick rates, Hz, comma-separated")
    ap.add_argument("--loops", default=",".join(LOOPS), help="loops, comma-separated: " + ", ".join(LOOPS))
    ap.add_argument("--write", action="store_true", help="write the table into docs/overhead.md")
    a = ap.parse_args()
    rates, loops = _rates(ap, a.rates), _loops(ap, a.loops)
    if a.write and (rates, loops) != (RATES, tuple(LOOPS)):
        ap.error("--write keeps the documented table's rows: leave --rates and --loops at their defaults")
    os.sched_setaffinity(0, {0})
    rows = run(a.pairs, rates, loops)
    lines = table(rows)
    print("\n".join(lines))
    if a.write:
        intro = generated_by(f"bench/tick_cost.py --pairs {a.pairs} --write",
                             f"Each loop alone on CPU {CPU} (the bench on CPU 0); the tick on CPU {CPU} only, an empty "
                             f"program, in {WINDOW_S:g} s windows between windows without it; cost = rate lost per "
                             "second on a CPU / ticks.")
        replace_section(os.path.join(REPO, "docs", "overhead.md"), HEAD, [intro, "", *lines])


if __name__ == "__main__":
    main()
