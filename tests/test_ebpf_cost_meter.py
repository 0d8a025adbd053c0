"""The self-report's measured part (rlscope_top/collect/cost_meter.py), on a known answer: a real
target that spends a known amount of system time once the monitor is attached, and none
before. No probe fires in it, so the calibrated figures explain none of that time, and the
summary's `kernel_extra` must be what the target itself measured (os.times)."""

from __future__ import annotations

import json

import pytest

from support import load_summary, stop, wait_file

pytestmark = pytest.mark.ebpf
BURST_S = 1.5


def test_target_system_time_after_attach_is_measured_cost(ebpf, target, monitor, tmp_path):
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("sys_burst.py", go, done, BURST_S)
    m, summary = monitor(t.pid, "--sample-hz", "0")
    go.touch()
    wait_file(done, 120)
    assert stop(m) == 0, m.stderr_text
    truth = json.loads(done.read_text())["sys_s"]
    s = load_summary(summary)
    src = s["overhead"]["by_source_s"]
    assert truth > 0.5 * BURST_S, truth                    # the burst is mostly system time
    assert src["probes"] < 0.01, src
    # psutil and os.times both count in clock ticks (10 ms); the sleeping stretches add ~nothing
    assert src["kernel_extra"] == pytest.approx(truth, abs=0.05 + 0.05 * truth), (src, truth)
    assert s["overhead"]["estimated_s"] >= src["kernel_extra"]
