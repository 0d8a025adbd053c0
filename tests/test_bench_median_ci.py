"""bench/median_ci.py: the order-statistic interval for a bench's median."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from median_ci import median_interval  # noqa: E402


@pytest.mark.parametrize("n, ranks, cover", [
    (3, (1, 3), 0.75),            # three reps: the whole range, and only 75% sure
    (5, (1, 5), 0.9375),
    (11, (2, 10), 1 - 2 * 12 / 2048),   # P(at most 1 of 11 below the median) = 12/2048
    (23, (7, 17), 1 - 2 * sum(__import__("math").comb(23, j) for j in range(7)) / 2 ** 23),
])
def test_the_interval_is_the_order_statistics_the_binomial_gives(n, ranks, cover):
    xs = [float(v) for v in range(n, 0, -1)]          # n..1, unsorted: the ranks are the values
    lo, hi, c = median_interval(xs)
    assert (lo, hi) == ranks and c == pytest.approx(cover) and c >= (0.95 if n >= 6 else 0)


def test_its_coverage_holds_on_a_known_distribution():
    import random
    rng = random.Random(23)
    hits = sum(lo <= 0.0 <= hi for lo, hi, _ in (median_interval([rng.gauss(0, 1) for _ in range(11)])
                                                 for _ in range(1009)))
    assert 0.975 <= hits / 1009 <= 1.0                 # 98.8% stated


def test_no_values_is_an_error():
    with pytest.raises(ValueError):
        median_interval([])
