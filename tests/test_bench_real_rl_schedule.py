"""bench/real_rl.py: where the exact sessions go among the default ones, and which of them
a default session is compared with (a real program's split drifts as its agent learns)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from real_rl import CATS, _nearest_exact, schedule  # noqa: E402


@pytest.mark.parametrize("sessions, exact, order", [
    (5, 1, "DDEDDD"),                          # one: in the middle, not after the last
    (12, 4, "DEDDDEDDDEDDDEDD"),              # one in the middle of each 3
    (3, 3, "EDEDED"),
    (0, 1, "E"),
])
def test_the_exact_sessions_are_spread_among_the_default_ones(sessions, exact, order):
    assert "".join(m[0].upper() for m in schedule(sessions, exact)) == order


def test_a_default_session_is_compared_with_the_exact_ones_either_side_of_it():
    rows = [{"mode": m, "shares": dict.fromkeys(CATS, 10.0 * i)} for i, m in enumerate(schedule(5, 2))]
    order = [r["mode"] for r in rows]
    assert "".join(m[0] for m in order) == "deddedd"
    ref = [_nearest_exact(rows, i)["python"] for i in range(len(rows))]
    first, second = (10.0 * i for i, m in enumerate(order) if m == "exact")
    for i, m in enumerate(order):
        if m == "exact":
            assert ref[i] == 10.0 * i                         # itself
        elif 10.0 * i < first:
            assert ref[i] == first                            # before the first: the first alone
        elif 10.0 * i > second:
            assert ref[i] == second
        else:
            assert ref[i] == (first + second) / 2             # between: the mean of both


def test_the_mean_row_gives_the_sessions_mean_its_standard_error_and_the_ratio_it_allows():
    from real_rl import _mean_row
    rows = [{"measured_pct": m, "self_pct": 1.5} for m in (1.0, 2.0, 3.0, 4.0, 5.0)]   # mean 3, sd 1.58, se 0.71
    row = _mean_row("p", "default", rows)
    assert "mean of 5 | 3.0 +- 0.7 (2 se: 1.6 to 4.4) | 1.5 | 0.50 [0.34-0.95]" in row
    wide = _mean_row("p", "default", [{"measured_pct": m, "self_pct": 1.5} for m in (-9.0, 3.0, 12.0)])
    assert wide.endswith("| 0.75 [0.11-] | | | | | |")     # an interval reaching 0 gives no upper bound
