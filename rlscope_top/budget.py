"""The overhead budget: keep the probes' estimated cost under --max-overhead.

Each window (1 s) it prices the hits of every probe with its calibrated cost. When
the total is above the budget, the category whose probes cost most is made cheaper:
timed -> count (exit probes removed; calls and transitions stay exact, time becomes
estimated) -> off (no probes; calls and time estimated from the rates measured
before). It goes straight to off when counting alone would still be over budget.
Steps are never undone within a session.
"""

from __future__ import annotations

import dataclasses

WINDOW_S = 0.5
STEPS = ("timed", "count", "off")
COUNT_KEEPS = 0.5   # counting keeps the entry probe of each begin/end pair: about half the cost


@dataclasses.dataclass
class Decision:
    """One step taken by the budget."""

    category: int
    overhead_pct: float
    category_pct: float
    mode: str = "count"


class Budget:
    """Watches hit rates and picks the category to make cheaper."""

    def __init__(self, max_pct: float):
        self.max_pct = max_pct
        self._last_ts: float | None = None
        self._last_hits: list[int] = []
        self.last_pct = 0.0

    def reset(self) -> None:
        """Forget the current window (after a sample window whose cost is planned)."""
        self._last_ts = None

    def update(self, now_s: float, hits: list[int], probes: list[tuple[int, int, int]],
               modes: dict[int, str]) -> Decision | None:
        """Feed cumulative hits; returns a step to take, or None.

        Args:
            now_s: monotonic seconds.
            hits: cumulative hits per probe id.
            probes: (probe id, category, current cost per hit in ns) of attached probes.
            modes: current mode per category.
        """
        if self._last_ts is None:
            self._last_ts, self._last_hits = now_s, list(hits)
            return None
        dt = now_s - self._last_ts
        if dt < WINDOW_S:
            return None
        per_cat: dict[int, float] = {}
        for pid_, cat, cost in probes:
            d = hits[pid_] - (self._last_hits[pid_] if pid_ < len(self._last_hits) else 0)
            per_cat[cat] = per_cat.get(cat, 0.0) + d * cost
        self._last_ts, self._last_hits = now_s, list(hits)
        total_pct = 100 * sum(per_cat.values()) / (dt * 1e9)
        self.last_pct = total_pct
        if total_pct <= self.max_pct:
            return None
        candidates = [(v, c) for c, v in per_cat.items() if modes.get(c, "timed") != "off" and v > 0]
        if not candidates:
            return None
        v, cat = max(candidates)
        cat_pct = 100 * v / (dt * 1e9)
        fits = modes.get(cat, "timed") == "timed" and total_pct - cat_pct * (1 - COUNT_KEEPS) <= self.max_pct
        return Decision(cat, total_pct, cat_pct, "count" if fits else "off")
