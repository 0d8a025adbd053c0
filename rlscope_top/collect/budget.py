"""The overhead budget: keep the probes' estimated cost under --max-overhead.

Each window (0.25 s, every collector tick; 50 ms for the first ones after attach, so that a costly probe set does
not run a second at full rate before it is priced) it prices the hits of every probe with its calibrated cost.
The very first window (8-30 ms, collect/windows.py ``_first_window``) sees every category
counting, entries only, and prices each entry hit at its whole bracket: a category over budget
steps down before its exit probes ever go in (the traps run from attach, not from the first
decision: the tiny-op loop lost ~40% of its speed for the ~0.2 s the first decision took). When
the total is above the budget, the category whose probes cost most is made cheaper:
timed -> count (exit probes removed; calls and transitions stay exact, time becomes
estimated) -> off (no probes; calls and time estimated from the rates measured
before). It goes straight to off when counting alone would still be over budget.
A window whose costs, less the step, are still over budget takes the next step at once
(``Budget.then``), not a window later. Steps are never undone within a session.

The stack sampler's own CPU counts too, and the BPF program's bookkeeping on the target's
switches and ticks (``fixed_pct``: no step lowers them; the sampler halves its own rate when it
uses more than half the budget). Choosing between count and off, the costs that
stay must leave WINDOW_SHARE of the budget to the re-timing windows. (Holding every later
step to that stricter line stepped a ~3%-cost simulator down too on the phased trainer, and
its estimate then missed by 17 pp: further steps use the whole budget.)

Probes that no step above removes (named ranges, counters: kept on in every mode because they
are rare) are levers of their own, named by ``Budget.update``'s ``always_on``: one that costs
more than ALWAYS_ON_SHARE of the budget is stopped for the rest of the session (torch's optimizer
``record_function`` ranges ran at ~16k hits/s on the tiny-op loop, ~3% at the priced cost and
~1.9x that measured from its traps, with the Backend's per-call probes already off).

Sources outside the probes (the GPU agent: its buffer callbacks and CUPTI's own cost
per traced activity) are priced in the same window and may be the one made cheaper
(the GPU source then traces in windows, with estimates between them).
"""

from __future__ import annotations

import dataclasses

WINDOW_S = 0.25   # every tick: a phase that turns costly waits one tick, not two (0.5 s: SB3 PPO 32k
                  # ran 0.15-0.4 s longer in each of 3 paired runs, its update phase timed longer)
FIRST_WINDOW_S = 0.05   # right after attach (Collector.settle)
STEPS = ("timed", "count", "off")
COUNT_KEEPS = 0.5   # counting keeps the entry probe of each begin/end pair: about half the cost
WINDOW_SHARE = 0.35  # share of the budget kept for re-timing windows once a category is estimated
ALWAYS_ON_SHARE = 0.2   # share of the budget one always-on lever may use before it is stopped


@dataclasses.dataclass
class Decision:
    """One step taken by the budget."""

    category: int | str          # a probe category, a source's name ("gpu"), or an always-on lever's
    overhead_pct: float
    category_pct: float
    mode: str = "count"


class Budget:
    """Watches hit rates and picks the category to make cheaper."""

    def __init__(self, max_pct: float):
        self.max_pct = max_pct
        self.window_s = WINDOW_S
        self._last_ts: float | None = None
        self._last_hits: list[int] = []
        self._last_extra: dict[str, int] = {}
        self.last_pct = 0.0
        self.fixed_pct = 0.0    # costs no step can lower (the stack sampler's CPU, the program's bookkeeping), % of wall time
        self._window: tuple | None = None   # the last priced window's costs, for ``then``

    def reset(self) -> None:
        """Forget the current window (after a sample window whose cost is planned)."""
        self._last_ts = None
        self._window = None

    def update(self, now_s: float, hits: list[int], probes: list[tuple[int, int, int]],
               modes: dict[int, str], extra: dict[str, tuple[int, bool]] | None = None,
               always_on: dict[int, str] | None = None) -> Decision | None:
        """Feed cumulative hits; returns a step to take, or None.

        Args:
            now_s: monotonic seconds.
            hits: cumulative hits per probe id.
            probes: (probe id, category, current cost per hit in ns) of attached probes.
            modes: current mode per category.
            extra: per source, (cumulative cost ns, whether it can still be made cheaper).
            always_on: probe id -> lever name, for the probes no category step removes; a
                lever over ALWAYS_ON_SHARE of the budget gets a "stopped" decision.
        """
        extra, always_on = extra or {}, always_on or {}
        if self._last_ts is None:
            self._last_ts, self._last_hits = now_s, list(hits)
            self._last_extra = {k: v for k, (v, _) in extra.items()}
            return None
        dt = now_s - self._last_ts
        if dt < self.window_s:
            return None
        per_cat, levers = self._costs_since(hits, probes, extra, always_on)
        self._last_ts, self._last_hits = now_s, list(hits)
        self._last_extra = {k: v for k, (v, _) in extra.items()}
        total_pct = self._total_pct(dt, per_cat, levers)
        self.last_pct = total_pct
        self._window = (dt, per_cat, levers, dict(extra))
        return self._step(dt, total_pct, per_cat, levers, modes, extra)

    def then(self, d: Decision, modes: dict[int, str]) -> Decision | None:
        """The next step the same window calls for once ``d`` is taken, or None when ``d``
        brings its cost under the budget. A window over budget in two categories stepped one,
        then waited a window (0.25 s at full cost) to see the other: on an H200 launch loop,
        Backend then CUDA API ~0.3 s apart.

        Args:
            d: the step just taken (from ``update`` or an earlier ``then``).
            modes: the categories' modes with ``d`` taken.
        """
        if self._window is None:
            return None
        dt, per_cat, levers, extra = self._window
        if d.mode == "stopped":
            levers.pop(d.category, None)
        elif isinstance(d.category, str):       # a source in windows: about half the budget
            per_cat[d.category] = min(per_cat.get(d.category, 0.0), 0.5 * self.max_pct / 100 * dt * 1e9)
            extra[d.category] = (extra.get(d.category, (0, False))[0], False)
        else:
            per_cat[d.category] = per_cat.get(d.category, 0.0) * (COUNT_KEEPS if d.mode == "count" else 0.0)
        nxt = self._step(dt, self._total_pct(dt, per_cat, levers), per_cat, levers, modes, extra)
        if nxt is None:
            self._window = None
        return nxt

    def _total_pct(self, dt: float, per_cat: dict, levers: dict) -> float:
        """A window's costs as % of its wall time, the sampler's fixed share included."""
        return 100 * (sum(per_cat.values()) + sum(levers.values())) / (dt * 1e9) + self.fixed_pct

    def _costs_since(self, hits: list[int], probes: list[tuple[int, int, int]],
                     extra: dict[str, tuple[int, bool]], always_on: dict[int, str]) -> tuple[dict, dict]:
        """ns spent since the last window: per category or source, and per always-on lever."""
        per_cat: dict[int | str, float] = {}
        levers: dict[str, float] = {}
        for pid_, cat, cost in probes:
            d = hits[pid_] - (self._last_hits[pid_] if pid_ < len(self._last_hits) else 0)
            if pid_ in always_on:
                levers[always_on[pid_]] = levers.get(always_on[pid_], 0.0) + d * cost
            else:
                per_cat[cat] = per_cat.get(cat, 0.0) + d * cost
        for name, (cum, _) in extra.items():
            per_cat[name] = max(0, cum - self._last_extra.get(name, cum))
        return per_cat, levers

    def _step(self, dt: float, total_pct: float, per_cat: dict, levers: dict, modes: dict[int, str],
              extra: dict[str, tuple[int, bool]]) -> Decision | None:
        """The step a window's costs call for: stop a lever over its share; over budget, step
        down the costliest category (or source) that can still step down."""
        if levers:
            v, name = max((v, k) for k, v in levers.items())
            if 100 * v / (dt * 1e9) > ALWAYS_ON_SHARE * self.max_pct:
                return Decision(name, total_pct, 100 * v / (dt * 1e9), "stopped")
        if total_pct <= self.max_pct:
            return None
        candidates = [(v, c) for c, v in per_cat.items() if v > 0 and
                      (extra[c][1] if isinstance(c, str) else modes.get(c, "timed") != "off")]
        if not candidates:
            return None
        v, cat = max(candidates, key=lambda x: x[0])
        cat_pct = 100 * v / (dt * 1e9)
        if isinstance(cat, str):
            return Decision(cat, total_pct, cat_pct, "windowed")
        fits = modes.get(cat, "timed") == "timed" and \
            total_pct - cat_pct * (1 - COUNT_KEEPS) <= self.max_pct * (1 - WINDOW_SHARE)
        return Decision(cat, total_pct, cat_pct, "count" if fits else "off")
