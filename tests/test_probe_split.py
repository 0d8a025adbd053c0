"""A lone enter or exit probe's price, split around its timestamp as its own trap ticks found it
(probes/loader.py ``split_at_measured``): torch's op begin and op end take the ticks' part before
the timestamp, and everything the ticks cannot see (the BPF program, the code after the trap
running cold) after it; the total stays, and a pair keeps its calibrated split."""

import pytest

from rlscope_top.probes.catalog import COUNT, ENTER, EXIT, PAIR
from rlscope_top.probes.loader import split_at_measured

COST = {"enter_before": 560, "enter_after": 465, "exit_before": 465, "exit_after": 560}   # torch, C-bracket split


def test_op_begin_keeps_its_total_and_takes_the_ticks_part_before_its_timestamp():
    got = split_at_measured(COST, ENTER, 391.4)
    assert (got["enter_before"], got["enter_after"]) == (391, 1025 - 391)
    assert {k: got[k] for k in ("exit_before", "exit_after")} == {"exit_before": 465, "exit_after": 560}


def test_op_end_moves_its_exit_fields_only():
    got = split_at_measured(COST, EXIT, 397)
    assert (got["exit_before"], got["exit_after"]) == (397, 628)
    assert (got["enter_before"], got["enter_after"]) == (560, 465)


def test_inside_the_call_is_begins_after_plus_ends_before():
    """The phased trainer's torch calls (2026-12-08): ticks put 391 ns before op begin's timestamp
    and 397 before op end's; the call's inside goes from the calibrated 930 ns to 1,031."""
    begin, end = split_at_measured(COST, ENTER, 391), split_at_measured(COST, EXIT, 397)
    assert begin["enter_after"] + end["exit_before"] == 1031
    assert begin["enter_before"] + end["exit_after"] == 2050 - 1031


@pytest.mark.parametrize("before", [None, 0.0, 5_000.0, -3.0])
def test_the_total_never_changes_and_no_side_goes_negative(before):
    got = split_at_measured(COST, ENTER, before)
    assert got["enter_before"] + got["enter_after"] == 1025
    assert min(got.values()) >= 0


@pytest.mark.parametrize("kind", [PAIR, COUNT])
def test_a_pair_or_counter_keeps_its_calibrated_split(kind):
    assert split_at_measured(COST, kind, 100) == COST


def test_the_cost_given_is_not_changed():
    cost = dict(COST)
    split_at_measured(cost, ENTER, 100)
    assert cost == COST
