"""The budget loop: price the probes' hits each window, step a costly category down, and
re-time the categories it turned down in short jittered windows (rlscope_top/collect/budget.py
decides; this applies)."""

from __future__ import annotations

import math
import os
import random
import time

from ..probes.catalog import ALWAYS_ON
from ..ring import records as R
from .budget import ALWAYS_ON_SHARE, FIRST_WINDOW_S, WINDOW_S, WINDOW_SHARE
from ..vocab import CATEGORIES

SAMPLE_WINDOW_S = 0.4   # a category the budget turned down is timed again this long (at most) ...
MIN_WINDOW_S = 0.1      # ... shorter where it costs more, so that windows come often enough to land
                        # on every phase of a loop within the budget ...
MIN_SAMPLE_PERIOD_S = 2.0   # ... at most this often (further apart when it costs more) ...
SAMPLE_JITTER = 0.5     # ... at a random offset of up to +-50% of the period, so that windows
                        # land on every phase of a loop, not always on the same one
SAMPLE_SHARE = WINDOW_SHARE   # share of the budget the sample windows may use ...
SITE_SAMPLE_SHARE = 0.1       # ... where the kernel places the Python threads' ticks by call site, once a
SITE_AFTER_WINDOWS = 4        # category has had 4 windows. The ticks then set the on-CPU estimate with no
                              # window (account/estimates.py ``_tick_ns``); windows keep the calls per ns,
                              # the off-CPU ratio and native threads' ns per tick, so they are MIN_WINDOW_S
                              # long, and the first few come as often as before to sample the phases (1-2 in
                              # a 10 s session put the phased trainer's calls at 0.37-1.46x). 0.22 s every
                              # ~2.3 s cost the tiny-op loop 0.9-4.2% of its time.
SETTLE_STEPS = 4        # 50 ms budget windows right after attach: timed -> count -> off, and a second category
COUNT_WINDOW_S = 0.03   # the first one, entries only: the traps run from attach (~40% of the tiny-op
                        # loop's speed went in the ~0.2 s that the first decision took after it) ...
COUNT_MIN_S = 0.008     # ... or shorter, once it holds COUNT_ENOUGH hits: the tiny-op loop ran at
COUNT_ENOUGH = 2000     # 0.72 of its speed for the whole 30 ms, and has ~2.6k hits in 8 ms
MAX_STEPS_A_WINDOW = 4  # every step one window's costs call for, at once (categories, the GPU, a lever)
FIRST_RETIME_S = (1.0, 1.5)   # a category stepped down there has no timed window at all: its first
                              # one comes this soon (s after the step), not a whole period later


class BudgetLoop:
    """The budget side of a ``Collector`` (mixed in; it sets ``probes``, ``budget`` and
    ``_samples``)."""

    def _settle(self) -> None:
        """After the first window (``_first_window``), price the probes in 50 ms windows and
        step down at once while over budget, instead of running them at full cost for the
        first 0.5 s."""
        self.budget.window_s = FIRST_WINDOW_S
        try:
            for _ in range(SETTLE_STEPS):
                self.budget.reset()
                self._apply_budget(time.monotonic(), self.probes.hits())    # the window's start
                time.sleep(FIRST_WINDOW_S)
                if not self._apply_budget(time.monotonic(), self.probes.hits()):
                    return
        finally:
            self.budget.reset()
            self.budget.window_s = WINDOW_S

    def _first_window(self) -> None:
        """Every category starts counting, entries only (ProbeSet.count_first). Over a
        COUNT_WINDOW_S window from t0, price each one's entry hits at its whole bracket's cost
        and plan its mode as the budget would step a timed one; then time the categories the
        plan keeps timed and step the others down before an exit probe of theirs goes in."""
        counting = {c for c, m in self.probes.modes.items() if m == "count"}
        if not counting:
            return
        t, hits0 = self._count_from
        self._count_window(t, sum(hits0))
        now, hits = time.monotonic(), self.probes.hits()
        plan, steps, stopped = dict.fromkeys(counting, "timed"), [], []
        for _ in range(2 * len(counting) + 4):
            levers = {i: k for i, k in self.probes.always_on().items() if k not in {d.category for d in stopped}}
            probes = [(a.id, a.spec.category,
                       self.probes.full_cost_ns(a) if plan.get(a.spec.category) == "timed" else a.cost_ns)
                      for a in self.probes.attached if a.parts and plan.get(a.spec.category) != "off"
                      and (a.spec.kind not in ALWAYS_ON or a.id in levers)]
            d = self._price_once(t, hits0, now, hits, probes, {**self.probes.modes, **plan}, levers)
            if d is not None and d.mode == "stopped":
                stopped.append(d)
                continue
            if d is None or d.category not in counting:
                break
            plan[d.category] = d.mode
            steps.append(d)
        self.probes.step_down_all({c: m for c, m in plan.items() if m != "timed"}, [d.category for d in stopped])
        for cat in counting:
            if plan[cat] == "timed":
                self.probes.restore(cat)
        if steps or stopped:
            self._write_counters(self._counters(), sources=False)   # as of the steps (the sources start later)
        for d in stopped:
            self._stop_lever(d)
        for d in steps:
            if plan[d.category] == d.mode:          # the plan's last word for it
                self._step_category(d, now, untimed=True)

    def _count_window(self, t: float, hits0: int) -> None:
        """Wait out the first window: COUNT_WINDOW_S, or from COUNT_MIN_S on as soon as the
        probes have COUNT_ENOUGH hits to price (a hot loop's traps cost it most in this window)."""
        time.sleep(max(0.0, t + COUNT_MIN_S - time.monotonic()))
        while (left := t + COUNT_WINDOW_S - time.monotonic()) > 1e-4:
            if sum(self.probes.hits()) - hits0 >= COUNT_ENOUGH:
                return
            time.sleep(min(0.004, left))

    def _price_once(self, t0: float, hits0: list[int], t1: float, hits1: list[int], probes: list, modes: dict,
                    levers: dict):
        """The budget's decision for one window given whole (t0 to t1), with these prices."""
        self.budget.reset()
        self.budget.window_s = min(COUNT_WINDOW_S, t1 - t0)
        try:
            self.budget.update(t0, hits0, probes, {})
            return self.budget.update(t1, hits1, probes, modes, None, levers)
        finally:
            self.budget.window_s = WINDOW_S

    def _sample(self, now: float) -> bool:
        """Time categories the budget turned down (count or off) for a short window now and then.

        The estimates between windows come from all windows so far, per operation
        (rlscope_top/account/estimates.py). Windows start at jittered times, so that they sample
        every phase of the program. Returns whether a window is open.
        """
        busy = False
        for cat, st in self._samples.items():
            name = CATEGORIES[cat]
            if st["until"] is None and now >= st["next"]:
                if self._ticks_by_site():       # the sampler starts after the first step: its ticks come later
                    st["window"] = MIN_WINDOW_S
                self.probes.restore(cat)
                self._write_counters(self._counters())
                self.ring.write(R.mode(time.monotonic_ns(), name, "timed", 0.0, self.budget.max_pct))
                st["until"], st["opened"] = now + st["window"], (now, self._category_cost_ns(cat))
            elif st["until"] is not None and now >= st["until"]:
                self._write_counters(self._counters())
                self._reprice(st, now, self._category_cost_ns(cat))     # at full cost, before the step down
                # timed -> off in one batch of detaches: two (timed -> count, count -> off) each
                # waited out a grace period, the first with the entries still trapping (the
                # tiny-op loop ran at 0.79 of its speed for ~40 ms of each close; now at 0.96)
                closed = time.monotonic_ns()      # the kernel counts from here; the detach waits ~90 ms more
                self.probes.step_down_all({cat: st["mode"]}, [])
                self.ring.write(R.mode(closed, name, st["mode"], 0.0, self.budget.max_pct))
                st["until"], st["next"] = None, now + _jittered(st["period"])
                self.budget.reset()
            busy = busy or st["until"] is not None
        return busy

    def _category_cost_ns(self, cat: int) -> int:
        """Calibrated cost of one category's probe hits so far."""
        hits = self.probes.hits()
        return sum(hits[a.id] * a.cost_ns for a in self.probes.attached
                   if a.parts and a.spec.category == cat and a.id < len(hits))

    def _reprice(self, st: dict, now: float, cost_ns: int) -> None:
        """Space the windows by what they cost, on average over the windows so far (a phase
        with more calls costs more than the one the first decision saw)."""
        t0, c0 = st.pop("opened")
        st["win_s"] = st.get("win_s", 0.0) + (now - t0)
        st["win_cost_s"] = st.get("win_cost_s", 0.0) + (cost_ns - c0) / 1e9
        st["windows"] = st.get("windows", 0) + 1
        if st["win_s"] > 0:
            st.update(self._spacing(100.0 * st["win_cost_s"] / st["win_s"], st["windows"]))

    def _spacing(self, pct: float, windows: int = 0) -> dict:
        """Window length and period for a category that costs ``pct`` when timed, after
        ``windows`` windows: they use SAMPLE_SHARE of the budget (SITE_SAMPLE_SHARE where the
        ticks are placed by call site, from SITE_AFTER_WINDOWS on); a costlier category gets
        shorter, not rarer, windows."""
        by_site = self._ticks_by_site()
        window = MIN_WINDOW_S if by_site else min(SAMPLE_WINDOW_S,
                                                  max(MIN_WINDOW_S, SAMPLE_WINDOW_S * 10.0 / max(pct, 1e-9)))
        share = SITE_SAMPLE_SHARE if by_site and windows >= SITE_AFTER_WINDOWS else SAMPLE_SHARE
        return {"window": window, "period": max(MIN_SAMPLE_PERIOD_S, window * pct / (share * self.budget.max_pct))}

    def _ticks_by_site(self) -> bool:
        """Whether the kernel sampler has placed the Python threads' ticks by call site
        (``RLSCOPE_SITE_WINDOWS=0``: windows as if not, for bench/attach_cost.py's side by side)."""
        smp = getattr(self, "sampler", None)
        return smp is not None and smp.site_ticks() > 0 and os.environ.get("RLSCOPE_SITE_WINDOWS") != "0"

    def poll_windows(self, now: float) -> None:
        """Open or close a timed window on time (between ticks: windows are shorter than one)."""
        if any((st["until"] is None and now >= st["next"]) or (st["until"] is not None and now >= st["until"])
               for st in self._samples.values()):
            self._sample(now)

    def _apply_budget(self, now: float, hits: list[int]) -> bool:
        """Feed the budget; take the steps it asks for, all those one window's costs call for
        (``Budget.then``). Returns whether one was taken."""
        probes = [(a.id, a.spec.category, a.cost_ns) for a in self.probes.attached if a.parts]
        extra = {s.name: (s.cost_ns(), s.can_degrade()) for s in self.sources if hasattr(s, "cost_ns")}
        d = self.budget.update(now, hits, probes, self.probes.modes, extra, self.probes.always_on())
        if d is None:
            return False
        self._write_counters(self._counters())   # the figures as of the step: the estimates start here
        for _ in range(MAX_STEPS_A_WINDOW):
            self._take_step(d, now)
            d = self.budget.then(d, self.probes.modes)
            if d is None:
                break
        return True

    def _take_step(self, d, now: float) -> None:
        if d.mode == "stopped":
            self._stop_lever(d)
        elif isinstance(d.category, str):      # a source (the GPU agent) is the costly part
            src = next(s for s in self.sources if getattr(s, "name", None) == d.category)
            how = src.degrade(d)
            self.ring.write(R.mode(time.monotonic_ns(), d.category, "windowed", d.overhead_pct, self.budget.max_pct))
            self.note("warn", f"overhead {d.overhead_pct:.1f}% > budget {self.budget.max_pct:g}%: "
                              f"{d.category} ({d.category_pct:.1f}%) -> {how}")
        else:
            self._step_category(d, now)

    def _step_category(self, d, now: float, untimed: bool = False) -> None:
        """Step a category down to the decision's mode, straight from timed to off where counting
        would not fit (one batch of detaches: two took ~0.1 s more, at full cost, on SB3 PPO),
        write its one record, and plan its re-timing windows (the first one soon when the
        category was never timed: until then its time cannot be estimated)."""
        self.probes.step_down_all({d.category: d.mode}, [])
        new = self.probes.modes[d.category]
        self.ring.write(R.mode(time.monotonic_ns(), CATEGORIES[d.category], new, d.overhead_pct, self.budget.max_pct))
        spacing = self._spacing(d.category_pct)
        period = spacing["period"]
        first = random.uniform(*FIRST_RETIME_S) if untimed else _jittered(period)
        st = self._samples.setdefault(d.category, {"next": now + first, "until": None})
        st.update(spacing, mode=new)           # keep the estimate fresh with short timed windows
        how = ("counting calls only; its time is" if new == "count" else
               "per-call probes removed; calls and time are")
        self.note("warn", f"overhead {d.overhead_pct:.1f}% > budget {self.budget.max_pct:g}%: "
                          f"{CATEGORIES[d.category]} ({d.category_pct:.1f}%) -> {how} estimated, re-timed "
                          f"in short windows, at first about every {period:.0f} s")

    def _stop_lever(self, d) -> None:
        """Stop an always-on lever (torch's record_function ranges, a counter): it is not
        re-timed, so its counts end here, and the summary says so."""
        self.probes.stop_lever(d.category)
        self.ring.write(R.mode(time.monotonic_ns(), d.category, "stopped", d.overhead_pct, self.budget.max_pct))
        self.note("warn", f"{d.category} cost {d.category_pct:.1f}% (over {ALWAYS_ON_SHARE:.0%} of the "
                          f"{self.budget.max_pct:g}% budget): stopped, its counts end here "
                          f"(--max-overhead {math.ceil(d.category_pct / ALWAYS_ON_SHARE)} keeps it)")


def _jittered(period: float) -> float:
    return period * random.uniform(1 - SAMPLE_JITTER, 1 + SAMPLE_JITTER)
