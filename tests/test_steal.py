"""Hypervisor steal in the summary and on the screen: the share of all CPUs' time the host gave
to other guests over the window (rlscope_top/account/session_figures.py ``machine``)."""

import pytest

from rlscope_top.account.session_figures import machine
from rlscope_top.report.summary import steal_text


def test_steal_is_its_share_of_all_cpu_time_and_na_without_readings():
    assert machine({"steal_cpu_s": 0.23, "all_cpu_s": 7.0}) == {"steal_pct": pytest.approx(100 * 0.23 / 7.0, abs=1e-3),
                                                                 "steal_cpu_s": 0.23}
    assert machine({"steal_cpu_s": 0.0, "all_cpu_s": 7.0})["steal_pct"] == 0.0
    assert machine(None) == {"steal_pct": None, "steal_cpu_s": None}       # a recording from before the readings
    assert machine({"idle_cpu_s": 1.0})["steal_pct"] is None


@pytest.mark.parametrize("pct, shown", [(None, False), (0.0, False), (0.99, False), (1.0, True), (13.7, True)])
def test_the_summary_prints_steal_from_one_percent(pct, shown):
    line = steal_text({"machine": {"steal_pct": pct}})
    assert (line is not None) == shown
    if shown:
        assert line.startswith(f"host steal {pct:.1f}% of the CPUs' time") and "on-CPU times include" in line
