"""bench/cost_split.py: a span's time per step and the paired summary against the self-report."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from cost_split import per_step, summarize  # noqa: E402


def test_per_step_divides_by_the_steps_of_the_span():
    r = per_step(1000, 1000 + 1009, (2.0, 0.5), (2.0 + 1009e-4, 0.5 + 1009e-5), 0.2018)
    assert r == pytest.approx({"wall_us": 200.0, "user_us": 100.0, "sys_us": 10.0})


def test_summary_pairs_each_attached_span_with_the_plain_one_before_it():
    """A host that slows by half between reps: each pair still reads 20% (its attached span
    against its own plain span), where medians of the two columns apart would mix the states."""
    plain, attached = [], []
    for k, base in enumerate([100.0, 150.0, 100.0, 150.0, 100.0, 150.0, 100.0]):
        plain.append({"wall_us": base, "user_us": base, "sys_us": 0.0})
        attached.append({"wall_us": base * 1.25, "user_us": base * 1.05, "sys_us": base * 0.2,
                         "self_pct": 10.0 + k, "hits_per_s": 23.0})
    r = summarize(plain, attached)
    assert r["measured_pct"] == pytest.approx(20.0)
    assert r["interval"][:2] == pytest.approx((20.0, 20.0))
    assert r["self_pct"] == 13.0 and r["ratio"] == pytest.approx(13.0 / 20.0)
    assert r["sys_us"] == pytest.approx(20.0) and r["user_us"] == pytest.approx(5.0)


def test_no_measured_cost_gives_no_ratio():
    p = [{"wall_us": 100.0, "user_us": 100.0, "sys_us": 0.0}] * 3
    a = [{"wall_us": 99.0, "user_us": 99.0, "sys_us": 0.0, "self_pct": 2.0, "hits_per_s": 0.0}] * 3
    r = summarize(p, a)
    assert r["measured_pct"] < 0 and r["ratio"] != r["ratio"]       # nan
