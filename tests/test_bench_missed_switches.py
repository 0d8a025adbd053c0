"""bench/missed_switches.py on a real spinning thread: every switch-out it saw ends in a switch-in
it saw, a missed one a tick found, or the thread still out when it stopped (docs/accuracy.md,
"Whose switch-ins go missing")."""

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from missed_switches import SPIN, measure, report  # noqa: E402


def test_each_switch_out_is_accounted_for(ebpf):
    spin = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)
        r = measure(spin.pid, 3.0)
    finally:
        spin.kill()
        spin.wait()
    missed = sum(n for _, n in r["missed"])
    assert r["ticks"] >= 250, r            # it spins: ~3 s x 250 Hz of ticks find it, less what others took
    assert 0 <= r["switch_outs"] - r["switch_ins"] - missed <= 1, r
    assert all(n > 0 and name for (name, _), n in r["missed"]), r


def test_the_report_names_the_preempter_and_its_slices():
    r = {"switch_outs": 10, "switch_ins": 7, "ticks": 500, "missed": [(("tokio-rt-worker", 0), 3)],
         "watched": "tokio-rt-worker", "to_watched": 4, "from_watched": 0, "watched_ms": 4.0, "watched_slices": 4}
    lines = report(r, 20.0)
    assert lines[0].endswith("3 missed switch-ins"), lines
    assert lines[1] == "  after a switch to tokio-rt-worker (prev_state 0): 3", lines
    assert "4 switches to tokio-rt-worker, 0 from it" in lines[2] and "(1.000 ms each)" in lines[2], lines
