"""The pre-attach system-time rate the self-report subtracts (rlscope_top/collect/cost_meter.py)."""

from __future__ import annotations

import os

import pytest

from rlscope_top.collect import cost_meter as C


@pytest.mark.parametrize("span_s, sys_in_span, life, want", [
    (0.8, 0.04, 0.3, 0.05),     # a long stretch (the program compiled): its own rate
    (0.2, 0.0, 0.02, 0.0),      # from the cache: no tick in 0.2 s, a start-up-heavy life: the lower
    (0.2, 0.04, 0.15, 0.15),    # a program with system time of its own reads high either way
    (0.05, 0.0, 0.02, 0.02),    # too short to read: the life
])
def test_the_base_rate_is_the_stretch_or_the_lower_of_it_and_the_life(monkeypatch, span_s, sys_in_span, life, want):
    m = C.CostMeter(os.getpid())
    now = C.time.monotonic()
    m._pre = (now - span_s, 1.0)
    monkeypatch.setattr(m, "_target_cpu", lambda: (1.0 + sys_in_span, 5.0))
    monkeypatch.setattr(m, "_lifetime_sys_rate", lambda sys_s: life)
    m.probes_in()
    assert m.base_sys_per_s == pytest.approx(want, rel=0.05)


def test_the_stretch_starts_at_the_command_when_noted_early_and_only_once():
    C.note_early(os.getpid())
    early = C._EARLY[os.getpid()]
    m = C.CostMeter(os.getpid())
    m.before_attach()
    assert m._pre == early
    again = C.CostMeter(os.getpid())
    again.before_attach()
    assert again._pre[0] > early[0]


def _proc_stat_s() -> tuple[float, float]:
    """(steal, all but guest) CPU seconds from /proc/stat's first line, read here directly."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    guest = sum(v[8:10])
    return v[7] / hz, (sum(v) - guest) / hz


def test_steal_is_the_kernels_own_figure_and_inside_the_whole():
    before = _proc_stat_s()
    idle, busy, steal, whole = C._machine_s()
    after = _proc_stat_s()
    assert before[0] - 0.02 <= steal <= after[0] + 0.02, (before, steal, after)
    assert before[1] - 0.02 <= whole <= after[1] + 0.02, (before, whole, after)
    assert idle + busy + steal == pytest.approx(whole)


def test_a_reading_carries_the_steal_and_whole_cpu_time_since_begin(monkeypatch):
    seq = iter([(100.0, 50.0, 3.0, 153.0), (110.0, 56.0, 3.5, 169.5)])     # idle, busy, steal, whole
    monkeypatch.setattr(C, "_machine_s", lambda: next(seq))
    m = C.CostMeter(os.getpid())
    m.begin()
    r = m.read()
    assert (r["idle_cpu_s"], r["busy_cpu_s"], r["steal_cpu_s"], r["all_cpu_s"]) == (10.0, 6.0, 0.5, 16.5)
