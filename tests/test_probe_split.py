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


class _Written:
    """The BPF program's cost map: what reprice writes, by probe id."""

    def __init__(self):
        self.rows = {}

    def Leaf(self, *fields):
        return fields

    def __setitem__(self, key, fields):
        self.rows[key.value] = fields


def _probe_set(attached):
    from rlscope_top.collect.calibration import DEFAULT_KINDS, Calibration
    from rlscope_top.probes.loader import ProbeSet
    ps = object.__new__(ProbeSet)          # no BPF program: reprice's arithmetic and what it writes
    ps.attached, ps.calibration = attached, Calibration(kinds=DEFAULT_KINDS, measured=True, key="test")
    ps.bpf = {"costs": _Written()}
    return ps


def test_reprice_writes_torchs_split_from_its_ticks_and_the_summary_says_so():
    from rlscope_top.probes import catalog
    from rlscope_top.probes.loader import Attached
    begin, end = (Attached(i, spec, "/lib/libtorch_python.so", 0, True, 0, parts={p: ("uprobe", 0)})
                  for i, spec, p in ((0, catalog.TORCH[0], "enter"), (1, catalog.TORCH[1], "exit")))
    ps = _probe_set([begin, end])
    cal_begin, cal_end = ps._costs(begin), ps._costs(end)
    # ticks: op begin 391 ns before its timestamp and 305 after; op end 397 before, 267 after
    assert ps.reprice({0: (391.0, 305.0), 3: (397.0, 267.0)}) == 2
    rows = ps.bpf["costs"].rows
    b_total = cal_begin["enter_before"] + cal_begin["enter_after"]
    e_total = cal_end["exit_before"] + cal_end["exit_after"]
    assert rows[0][:2] == (391, b_total - 391)        # enter_before, enter_after
    assert rows[1][2:] == (397, e_total - 397)        # exit_before, exit_after
    assert ps.measured_splits() == {"op begin": [391, b_total - 391], "op end": [397, e_total - 397]}
    assert begin.cost_ns == b_total and end.cost_ns == e_total      # the total, for the budget, stays
    assert ps.reprice({0: (395.0, 305.0), 3: (399.0, 267.0)}) == 0  # under 5%: not written again
