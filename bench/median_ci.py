"""A distribution-free confidence interval for a median: the order statistics whose ranks a
binomial(n, 1/2) puts the median between (no assumption about how the reps spread). On a host
whose single paired reps spread +-10%, a bench's median says little without it."""

from __future__ import annotations

from math import comb


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """The narrowest order-statistic interval around the median of ``xs`` that covers the
    true median with at least ``level`` probability, or the whole range where ``xs`` has too
    few values for that.

    Returns:
        (low, high, its coverage: the probability it holds the median, for any distribution).
    """
    s, n = sorted(xs), len(xs)
    if not n:
        raise ValueError("no values")
    below = [comb(n, j) / 2 ** n for j in range(n + 1)]     # P(exactly j values below the median)
    k = 0                                                      # ranks k+1 .. n-k (0-based k .. n-1-k)
    while k + 1 < n - 1 - (k + 1) and 1.0 - 2 * sum(below[:k + 2]) >= level:
        k += 1
    return s[k], s[n - 1 - k], 1.0 - 2 * sum(below[:k + 1]) if n > 1 else 0.0
