"""rlscope_top/collect/probe_prices.py: trap ticks per probe part turned into ns per hit."""

from __future__ import annotations

import pytest

from rlscope_top.collect.probe_prices import HALF_LIFE_S, MIN_TRAP_TICKS, ProbePrices, ns_per_tick
from rlscope_top.probes.maps import find_uprobes_page

TICK = 4_000_000       # ns per tick at 250 Hz


def _l(xs: list) -> dict:
    """Counters by slot, as the kernel's arrays are read."""
    return dict(enumerate(xs))


def test_a_part_is_priced_from_its_ticks_per_hit_on_each_side_of_its_timestamp():
    p = ProbePrices()
    # part 0 (an entry): 23 ticks before, 211 after, over 100,003 hits; part 1 (its return): 7 after
    p.update(_l([100_003, 100_003]), _l([23, 211, 0, 7]), 0, TICK, now=1.0)
    before, after = p.price(0)
    assert before == pytest.approx(23 * TICK / 100_003) and after == pytest.approx(211 * TICK / 100_003)
    assert p.price(1) is None                          # 7 ticks: too few to say
    # ... unless the calibration would have it trap far more often than it did
    assert p.price(1, calibrated_ns=3_000) == pytest.approx((0.0, 7 * TICK / 100_003))


def test_ticks_no_part_was_named_for_are_shared_in_proportion():
    p = ProbePrices()
    p.update(_l([1009, 1009]), _l([0, 30, 0, 10]), 20, TICK, now=1.0)
    assert sum(p.price(0)) == pytest.approx(45 * TICK / 1009)
    assert p.price(1, calibrated_ns=1e9)[1] == pytest.approx(15 * TICK / 1009)
    assert p.trap_ticks == 60


def test_counters_are_cumulative_and_old_stretches_weigh_less():
    p = ProbePrices()
    p.update(_l([1000, 0]), _l([0, MIN_TRAP_TICKS, 0, 0]), 0, TICK, now=1.0)          # 80 us a hit
    p.update(_l([2000, 0]), _l([0, 2 * MIN_TRAP_TICKS, 0, 0]), 0, TICK, now=1.0 + HALF_LIFE_S)   # the same again
    assert sum(p.price(0)) == pytest.approx(MIN_TRAP_TICKS * TICK / 1000)
    p.update(_l([3000, 0]), _l([0, 2 * MIN_TRAP_TICKS, 0, 0]), 0, TICK, now=1.0 + 2 * HALF_LIFE_S)  # no trap now
    # decayed: (20/4 + 20/2 + 0) ticks over (1000/4 + 1000/2 + 1000) hits; 15 ticks say it only
    # where the calibrated price would have made more
    assert p.price(0) is None
    assert sum(p.price(0, calibrated_ns=TICK)) == pytest.approx(15 * TICK / 1750)


def test_ns_per_tick_is_the_threads_on_cpu_time_over_their_ticks():
    rows = [{"ns": [[8_000_000, 5], [4_000_000, 0], [0, 0], [0, 0]], "ticks": [2, 1, 0, 0, 0, 0, 0]},
            {"ns": [[4_000_000, 0]] * 4, "ticks": None}]
    assert ns_per_tick(rows) == pytest.approx(4_000_000)
    assert ns_per_tick([]) == 0.0


def test_the_uprobes_page_is_the_kernel_s_mapping_not_a_file_named_like_it():
    maps = ["55d0c0a00000-55d0c0a01000 r-xp 00001000 fd:01 42 /tmp/x [uprobes]\n",
            "7f0000000000-7f0000001000 r-xp 00000000 fd:01 43 /tmp/[uprobes]\n",
            "7fffffffe000-7ffffffff000 r-xp 00000000 00:00 0                          [uprobes]\n"]
    assert find_uprobes_page(maps) == (0x7FFFFFFFE000, 0x7FFFFFFFF000)
    assert find_uprobes_page(maps[:2]) is None
    assert find_uprobes_page(["garbage\n", ""]) is None
