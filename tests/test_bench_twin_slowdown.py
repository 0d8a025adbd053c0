"""bench/twin_slowdown.py: the session order, the twins' CPU trades, and the summary's
arithmetic (attached sessions less the controls, against the self-report less contention)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from twin_slowdown import Swapper, lag_s, order, ratio, summary  # noqa: E402


def test_attached_and_control_sessions_alternate_and_each_kind_takes_both_copies_in_turn():
    got = order(4)
    assert [null for null, _ in got] == [False, True] * 4
    assert [c for null, c in got if not null] == [0, 1, 0, 1]
    assert [c for null, c in got if null] == [1, 0, 1, 0]


def test_the_ratio_compares_the_copies_steps_in_the_same_stretch_and_the_lag_says_how_far_apart_they_are():
    twin = [(t * 10**8, 100 * t) for t in range(200)]                 # 1,000 steps/s, steady
    mine = [(t * 10**8, 90 * t) for t in range(200)]                  # 900 steps/s: 10% slower
    assert ratio(mine, twin, 2 * 10**9, 12 * 10**9) == pytest.approx(0.9)
    assert ratio(mine, twin, 2 * 10**9 + 5 * 10**7, 3 * 10**9) == pytest.approx(0.9)   # between samples too
    # the twin fast before 1.9 s and slow after: only the stretch counts
    uneven = [(t * 10**8, 100 * t) for t in range(20)] + [(19 * 10**8 + k * 2 * 10**8, 1900 + 100 * k) for k in range(1, 200)]
    assert ratio(mine, uneven, 3 * 10**9, 12 * 10**9) == pytest.approx(1.8)
    assert lag_s(mine, twin, 10 * 10**9) == pytest.approx(-1.0)       # mine at step 9,000: the twin was there at 9 s (ahead)
    assert ratio(mine, twin, 2 * 10**9, 40 * 10**9) != ratio(mine, twin, 2 * 10**9, 40 * 10**9)   # past the samples: nan


def _cpus(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        return next(ln.split()[1] for ln in f if ln.startswith("Cpus_allowed_list"))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_twins_trade_cpus_every_swap_with_every_thread():
    cpus = tuple(sorted(os.sched_getaffinity(0)))[:2]
    code = "import threading,time\nthreading.Thread(target=time.sleep, args=(60,)).start()\ntime.sleep(60)"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    try:
        time.sleep(0.3)                                   # both threads started
        sw = Swapper((procs[0].pid, procs[1].pid), cpus, 0.4)
        seen = []
        for _ in range(3):
            time.sleep(0.2)                               # mid-way between trades
            seen.append([[_cpus(p.pid)] + [_cpus(int(t)) for t in os.listdir(f"/proc/{p.pid}/task")] for p in procs])
            time.sleep(0.2)
        sw.stop.set()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for a, b in seen:
        assert len(set(a)) == 1 and len(set(b)) == 1 and len(a) >= 2   # every thread pinned alike
        assert {a[0], b[0]} == {str(c) for c in cpus}                    # one copy on each CPU
    assert seen[0][0][0] != seen[1][0][0] and seen[0][0][0] == seen[2][0][0]   # and they trade


def test_the_summary_takes_the_controls_off_and_compares_with_the_self_report_less_contention():
    att = [{"program": "p", "null": False, "measured_pct": m, "self_pct": 3.0, "contention_pct": 1.5}
           for m in (1.0, 2.0, 3.0, 2.0)]                                     # mean 2.0, sd 0.816, se 0.408
    ctl = [{"program": "p", "null": True, "measured_pct": m} for m in (-1.0, 0.0, 1.0, 0.0)]   # mean 0, se 0.408
    lines = summary([r for pair in zip(att, ctl) for r in pair])
    assert "attached, mean of 4 | | sd 0.82 pp a session | 2.00 +- 0.41 |" in lines[0]
    assert "control, mean of 4 | | sd 0.82 pp a session | 0.00 +- 0.41 |" in lines[1]
    # 2.0 - 0.0 +- sqrt(2) * 0.408 = 0.58; self 3.0, less contention 1.5: ratio 0.75, 2 se 0.85-3.15 -> 0.48-1.77
    assert lines[2].endswith("| **2.00 +- 0.58** | 3.00 | **1.50** | **0.75** (2 se: 0.48-1.77) |")
