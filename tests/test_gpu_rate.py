"""bench/gpu_record_rate.py's path, checked for correctness (not speed): every CUPTI
record a stand-in GPU makes reaches the totals through the real agent and the real
monitor, joined to its launch; over budget, tracing turns into windows whose estimate
stays close to what was made."""

from __future__ import annotations

import sys

import pytest

from support import REPO

sys.path.insert(0, str(REPO / "bench"))
gpu_record_rate = pytest.importorskip("gpu_record_rate")
pytestmark = pytest.mark.ebpf


def test_every_record_at_a_high_rate_is_counted_and_joined(ebpf, tmp_path):
    r = gpu_record_rate.measure(60_000, 2.0, str(tmp_path))
    assert r["kernels_made"] > 0 and r["kernels_counted"] == r["kernels_made"] == r["joined"], r
    assert r["records_in_ring"] == 2 * r["kernels_made"]
    assert r["complete"] is True and not any(r["lost"].values())
    assert r["summary"]["gpu"]["mode"] == "traced" and r["summary"]["sources"]["gpu_s"] == "exact"
    assert 0 < r["agent_us_per_record"] < 50          # measured and reported (its size is the bench's business)


def test_over_budget_tracing_turns_into_windows_with_a_close_estimate(ebpf, tmp_path):
    r = gpu_record_rate.measure(100_000, 6.0, str(tmp_path), max_overhead=5.0, tail_s=0.0)
    s = r["summary"]
    assert s["gpu"]["mode"] == "windowed" and s["budget"]["modes"]["gpu"] == "windowed"
    assert s["sources"]["gpu_s"] == "estimated" and s["gpu"]["windows"]["windows"] >= 1
    assert abs(r["kernels_counted"] - r["kernels_made"]) <= 0.05 * r["kernels_made"], r   # 0.5-1.2% seen
    by = s["overhead"]["by_source_s"]
    assert by["cupti"] > 0 and by["gpu_agent"] > 0
    assert s["overhead"]["estimated_pct"] < 10            # the windows keep it near the 5% budget
    assert any("kernel tracing in 0.5 s windows" in n for n in s["notes"])
