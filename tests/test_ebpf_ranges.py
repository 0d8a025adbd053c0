"""torch's record_function ranges under the overhead budget (real torch, real eBPF).

The range probes stay on in every category mode, as they are rare in most programs. Where
they are not (the optimizers' own ranges on a tiny-op loop ran at ~16k hits/s), the budget
stops them once they cost over a fifth of it, and the summary says where their counts end.
"""

from __future__ import annotations

import pytest

from support import load_summary, stop, wait_file

pytestmark = pytest.mark.ebpf

COLD, HOT = 23, 100003


def _session(target, monitor, tmp_path, *extra) -> tuple[dict, str]:
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("range_rates.py", COLD, HOT, go, done)
    m, summary = monitor(t.pid, *extra)
    go.touch()
    wait_file(done, 120)
    assert stop(m) == 0, m.stderr_text
    return load_summary(summary), m.stderr_text


def test_hot_ranges_are_stopped_after_the_rare_ones_are_counted(ebpf, target, monitor, tmp_path):
    s, err = _session(target, monitor, tmp_path)
    assert s["ranges"]["cold"]["count"] == COLD                       # rare: counted, every one
    assert 0.005 * COLD <= s["ranges"]["cold"]["total_s"] <= 0.5 * COLD
    assert s["budget"]["modes"]["torch ranges"] == "stopped", s["budget"]
    step = next(x for x in s["budget"]["steps"] if x["category"] == "torch ranges")
    assert step["mode"] == "stopped" and step["at_s"] > 0
    assert s["ranges"].get("hot", {"count": 0})["count"] < HOT // 2, s["ranges"]   # their counts end at the stop
    assert s["probes"]["hits"]["record_function"] < COLD + HOT // 2, (s["probes"]["hits"], s["ranges"], s["budget"])
    lines = [ln for ln in err.splitlines() if "torch ranges" in ln and "stopped" in ln]
    assert len(lines) == 1 and "--max-overhead" in lines[0], err
    assert "Traceback" not in err


def test_a_budget_that_affords_them_keeps_every_range(ebpf, target, monitor, tmp_path):
    s, err = _session(target, monitor, tmp_path, "--max-overhead", "1000")
    assert s["ranges"]["cold"]["count"] == COLD
    assert s["probes"]["dropped_events"] == 0
    assert s["ranges"]["hot"]["count"] == HOT, (s["ranges"], s["budget"], s["probes"]["hits"])
    assert "torch ranges" not in s["budget"]["modes"], s["budget"]


def test_events_left_in_the_buffer_at_the_end_are_read_not_lost(ebpf, target, monitor, tmp_path):
    """A monitor that lags (here: each tick may drain only ~1k events) leaves a full buffer
    behind at the end. The last drain reads all of it: each range's two events are counted in
    a range or as dropped, but for the few pairs a burst of drops cuts in two. The last drain
    used to take one tick's budget and lose the rest unsaid (a slow CI host: 98,751 of 100,003
    ranges with 0 dropped)."""
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("range_rates.py", COLD, HOT, go, done)
    m, summary = monitor(t.pid, "--max-overhead", "1000", env={"RLSCOPE_DRAIN_BUDGET_S": "0.000001"})
    go.touch()
    wait_file(done, 120)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    counted = s["ranges"]["cold"]["count"] + s["ranges"].get("hot", {"count": 0})["count"]
    lost = s["probes"]["dropped_events"]
    assert lost > 0, s["probes"]               # it did lag: the buffer overflowed while running
    assert s["probes"]["hits"]["record_function"] == COLD + HOT, s["probes"]["hits"]
    unpaired = 2 * (COLD + HOT) - 2 * counted - lost     # events read that found no partner
    assert 0 <= unpaired <= 64, (counted, lost, s["ranges"])
