"""The budget's decisions on hand-built hit streams."""

import pytest

from rlscope_top.collect.budget import Budget

# probe ids: 0 backend begin (1000 ns/hit), 1 backend end (1000), 2 simulator pair (2000)
PROBES = [(0, 1, 1000), (1, 1, 1000), (2, 2, 2000)]


def test_within_budget_nothing_happens():
    b = Budget(5.0)
    assert b.update(0.0, [0, 0, 0], PROBES, {}) is None
    assert b.update(1.0, [10_000, 10_000, 1_000], PROBES, {}) is None    # 2% + 0.2%
    assert abs(b.last_pct - 2.2) < 1e-9


def test_hottest_category_counts_when_that_fits():
    b = Budget(5.0)
    b.update(0.0, [0, 0, 0], PROBES, {})
    d = b.update(1.0, [30_000, 30_000, 1_000], PROBES, {})             # 6% backend + 0.2% sim
    assert d.category == 1 and d.mode == "count" and abs(d.overhead_pct - 6.2) < 1e-9


def test_goes_straight_to_off_when_counting_would_not_fit():
    b = Budget(5.0)
    b.update(0.0, [0, 0, 0], PROBES, {})
    d = b.update(1.0, [100_000, 100_000, 1_000], PROBES, {})           # 20% backend
    assert d.category == 1 and d.mode == "off"


def test_waits_for_a_full_window_and_skips_categories_already_off():
    b = Budget(1.0)
    b.update(0.0, [0, 0, 0], PROBES, {})
    assert b.update(0.1, [100_000, 100_000, 0], PROBES, {}) is None
    d = b.update(1.0, [200_000, 200_000, 10_000], PROBES, {1: "off"})
    assert d.category == 2


def test_count_is_chosen_only_when_it_leaves_room_for_the_windows():
    b = Budget(5.0)
    b.update(0.0, [0, 0, 0], PROBES, {})
    d = b.update(1.0, [40_000, 40_000, 1_000], PROBES, {})             # 8% backend: counting keeps 4.2%
    assert d.category == 1 and d.mode == "off"                         # > 65% of 5%: off, not count
    b = Budget(5.0)
    b.update(0.0, [0, 0, 0], PROBES, {1: "off"})
    assert b.update(1.0, [0, 0, 17_000], PROBES, {1: "off"}) is None   # 3.4% simulator: under 5%, no step


def test_the_samplers_cpu_counts_in_the_total():
    b = Budget(5.0)
    b.fixed_pct = 2.5
    b.update(0.0, [0, 0, 0], PROBES, {})
    d = b.update(1.0, [15_000, 15_000, 0], PROBES, {})                 # 3% probes + 2.5% sampler > 5%
    assert d is not None and d.category == 1 and abs(d.overhead_pct - 5.5) < 1e-9
    assert d.mode == "off"                                              # 1.5 + 2.5 > 3.25


def test_one_window_takes_every_step_its_costs_call_for():
    """Two categories over budget: both steps come from the same window (the second waited a
    window at full cost before, ~0.3 s apart on an H200 launch loop), and no more than needed."""
    b = Budget(5.0)
    b.update(0.0, [0, 0, 0], PROBES, {})
    d = b.update(1.0, [100_000, 100_000, 30_000], PROBES, {})          # 20% backend + 6% simulator
    assert d.category == 1 and d.mode == "off"
    d2 = b.then(d, {1: "off"})
    assert d2.category == 2 and d2.mode == "count" and abs(d2.overhead_pct - 6.0) < 1e-9   # 3% left fits
    assert b.then(d2, {1: "off", 2: "count"}) is None
    b = Budget(5.0)
    b.update(0.0, [0, 0, 0], PROBES, {})
    d = b.update(1.0, [100_000, 100_000, 1_000], PROBES, {})           # 20% backend + 0.2%
    assert d.category == 1 and b.then(d, {1: "off"}) is None           # one step is enough
    b.reset()
    assert b.then(d, {1: "off"}) is None                                # a forgotten window plans nothing


def test_the_gpu_in_windows_is_priced_at_half_the_budget_for_the_next_step():
    b = Budget(5.0)
    b.update(0.0, [0, 0, 0], PROBES, {}, {"gpu": (0, True)})
    d = b.update(1.0, [40_000, 40_000, 0], PROBES, {}, {"gpu": (150_000_000, True)})   # GPU 15%, backend 8%
    assert d.category == "gpu" and d.mode == "windowed"
    d2 = b.then(d, {})                                                   # 2.5% + 8% still over
    assert d2.category == 1 and d2.mode == "off" and abs(d2.overhead_pct - 10.5) < 1e-9
    assert b.then(d2, {1: "off"}) is None


# ids 3 and 4: a range's begin and end (1000 ns/hit each), kept on in every category mode
RANGES = [(3, 1, 1000), (4, 1, 1000)]
LEVERS = {3: "torch ranges", 4: "torch ranges"}


def test_an_always_on_lever_over_its_share_is_stopped_even_under_budget():
    b = Budget(5.0)
    b.update(0.0, [0] * 5, PROBES + RANGES, {1: "off"}, always_on=LEVERS)
    d = b.update(1.0, [0, 0, 0, 5_570, 5_570], PROBES + RANGES, {1: "off"}, always_on=LEVERS)
    assert d.category == "torch ranges" and d.mode == "stopped"       # 1.114% > 20% of 5%
    assert abs(d.category_pct - 1.114) < 1e-9 and abs(b.last_pct - 1.114) < 1e-9


def test_a_stopped_lever_and_a_category_step_come_from_one_window():
    b = Budget(5.0)
    b.update(0.0, [0] * 5, PROBES + RANGES, {}, always_on=LEVERS)
    d = b.update(1.0, [50_000, 50_000, 0, 10_000, 10_000], PROBES + RANGES, {}, always_on=LEVERS)
    assert d.category == "torch ranges" and d.mode == "stopped"       # 2% > 20% of 5%
    d2 = b.then(d, {})
    assert d2.category == 1 and d2.mode == "off"                       # 10% backend, the ranges gone
    assert b.then(d2, {1: "off"}) is None


def test_a_rare_always_on_lever_stays_and_is_not_its_categorys_saving():
    b = Budget(5.0)
    b.update(0.0, [0] * 5, PROBES + RANGES, {}, always_on=LEVERS)
    assert b.update(1.0, [0, 0, 0, 4_990, 4_990], PROBES + RANGES, {}, always_on=LEVERS) is None   # 0.998%
    b = Budget(5.0)
    b.update(0.0, [0] * 5, PROBES + RANGES, {}, always_on=LEVERS)
    d = b.update(1.0, [16_000, 16_000, 0, 4_000, 4_000], PROBES + RANGES, {}, always_on=LEVERS)
    # 3.2% backend + 0.8% ranges: counting would leave 1.6 + 0.8 = 2.4%, under 65% of 5%, but
    # the total is 4.0%: no step (the ranges are not backend savings)
    assert d is None and abs(b.last_pct - 4.0) < 1e-9
    d = b.update(2.0, [41_000, 41_000, 0, 8_000, 8_000], PROBES + RANGES, {}, always_on=LEVERS)
    # 5% backend + 0.8% ranges: counting leaves 2.5 + 0.8 = 3.3% > 65% of 5% -> off (had the
    # ranges been backend's, counting would have seemed to leave 2.9%)
    assert d.category == 1 and d.mode == "off" and abs(d.category_pct - 5.0) < 1e-9


class _Clock:
    """time.monotonic and time.sleep on a clock of the test's own (sleep moves it)."""

    def __init__(self):
        self.t = 100.0

    def monotonic(self):
        return self.t

    def monotonic_ns(self):
        return int(self.t * 1e9)

    def sleep(self, s):
        self.t += s


def test_the_first_window_ends_once_it_has_enough_hits_to_price_and_never_after_30_ms(monkeypatch):
    from types import SimpleNamespace

    from rlscope_top.collect import windows

    clock = _Clock()
    monkeypatch.setattr(windows, "time", clock)

    def waited(hits_per_s: float) -> float:
        t0 = clock.t
        probes = SimpleNamespace(hits=lambda: [int(hits_per_s * (clock.t - t0)), 7])
        windows.BudgetLoop._count_window(SimpleNamespace(probes=probes), t0, 7)
        return round(clock.t - t0, 6)

    assert waited(330_000) == pytest.approx(windows.COUNT_MIN_S)          # a hot loop: 2,640 hits in 8 ms
    assert waited(1_000) == pytest.approx(windows.COUNT_WINDOW_S, abs=1e-4)   # 30 hits: the whole window
    hot_enough = windows.COUNT_ENOUGH / 0.02                               # the hits are there at 20 ms
    assert windows.COUNT_MIN_S < waited(hot_enough) <= 0.02 + 0.004


class _Probes:
    """A ProbeSet's window levers; every call that detaches is one batch (one grace period with
    the remaining traps still running)."""

    def __init__(self):
        self.modes, self.batches = {1: "off"}, []
        self.attached = []

    def hits(self):
        return []

    def restore(self, cat):
        self.modes[cat] = "timed"

    def step_down_all(self, modes, levers):
        self.modes.update(modes)
        self.batches.append(dict(modes))


def test_a_timed_window_closes_its_exits_and_entries_in_one_batch(monkeypatch):
    from types import SimpleNamespace

    from rlscope_top.collect import windows

    clock = _Clock()
    monkeypatch.setattr(windows, "time", clock)
    probes = _Probes()
    loop = SimpleNamespace(probes=probes, ring=SimpleNamespace(write=lambda r: None), budget=Budget(5.0),
                           _samples={1: {"next": 100.0, "until": None, "window": 0.12, "period": 2.0, "mode": "off"}},
                           _write_counters=lambda c: None, _counters=lambda: None)
    loop._category_cost_ns = lambda cat: 0
    loop._reprice = lambda st, now, cost: windows.BudgetLoop._reprice(loop, st, now, cost)
    loop._spacing = lambda pct, n=0: {"window": 0.12, "period": 2.0}
    loop._ticks_by_site = lambda: False
    assert windows.BudgetLoop._sample(loop, 100.0) is True and probes.modes[1] == "timed"
    assert windows.BudgetLoop._sample(loop, 100.13) is False
    assert probes.modes[1] == "off" and probes.batches == [{1: "off"}]


def test_windows_are_short_and_then_rarer_once_the_kernel_places_ticks_by_call_site():
    """Ticks placed by call site set the on-CPU estimate with no window (account/estimates.py
    ``_tick_ns``): the windows are then MIN_WINDOW_S long and, from the SITE_AFTER_WINDOWS-th
    on, take SITE_SAMPLE_SHARE of the budget. A category costing 18% timed (the tiny-op loop's
    torch) is re-timed 0.1 s every 2 s, then every 3.6 s, where it was 0.22 s every 2.3 s.
    With no sampler, or one that places nothing (austin), the spacing is the old one."""
    from types import SimpleNamespace

    from rlscope_top.collect import windows

    def spacing(site_ticks, n, pct=18.0):
        sampler = None if site_ticks is None else SimpleNamespace(site_ticks=lambda: site_ticks)
        loop = SimpleNamespace(budget=Budget(5.0), sampler=sampler)
        loop._ticks_by_site = lambda: windows.BudgetLoop._ticks_by_site(loop)
        return windows.BudgetLoop._spacing(loop, pct, n)

    n, old = windows.SITE_AFTER_WINDOWS, 0.4 * 10 / 18
    plain = {"window": pytest.approx(old), "period": pytest.approx(old * 18 / (0.35 * 5))}
    assert spacing(0, 0) == spacing(0, n) == spacing(None, n) == plain
    assert spacing(409, n - 1) == {"window": 0.1, "period": windows.MIN_SAMPLE_PERIOD_S}
    assert spacing(409, n) == spacing(409, 3 * n) == {"window": 0.1, "period": pytest.approx(0.1 * 18 / (0.1 * 5))}
    assert spacing(409, n, pct=0.2)["period"] == windows.MIN_SAMPLE_PERIOD_S    # a cheap category: as often as ever


def test_a_window_close_counts_the_windows_for_their_spacing():
    from types import SimpleNamespace

    from rlscope_top.collect import windows

    seen = []
    loop = SimpleNamespace(_spacing=lambda pct, n: seen.append((round(pct, 6), n)) or {})
    st = {"opened": (10.0, 0)}
    windows.BudgetLoop._reprice(loop, st, 10.2, 20_000_000)
    st["opened"] = (12.0, 20_000_000)
    windows.BudgetLoop._reprice(loop, st, 12.2, 40_000_000)
    assert seen == [(10.0, 1), (10.0, 2)] and st["windows"] == 2


def test_a_window_opens_short_once_ticks_are_placed_by_call_site():
    """The first step comes before the sampler starts, so its plan has the long window; the
    window opening after the sampler has placed ticks is MIN_WINDOW_S."""
    from types import SimpleNamespace

    from rlscope_top.collect import windows

    probes = _Probes()
    loop = SimpleNamespace(probes=probes, ring=SimpleNamespace(write=lambda r: None), budget=Budget(5.0),
                           _samples={1: {"next": 100.0, "until": None, "window": 0.22, "period": 2.3, "mode": "off"}},
                           _write_counters=lambda c: None, _counters=lambda: None, _category_cost_ns=lambda cat: 0,
                           _ticks_by_site=lambda: True)
    assert windows.BudgetLoop._sample(loop, 100.0) is True
    assert loop._samples[1]["until"] == pytest.approx(100.0 + windows.MIN_WINDOW_S)


def test_the_collector_takes_every_step_of_one_window_in_one_tick():
    from types import SimpleNamespace

    from rlscope_top.collect import windows

    attached = [SimpleNamespace(id=i, spec=SimpleNamespace(category=c), cost_ns=ns, parts=True) for i, c, ns in PROBES]
    probes = SimpleNamespace(attached=attached, modes={}, always_on=lambda: {})
    taken = []

    def take(d, now):
        taken.append((d.category, d.mode))
        probes.modes[d.category] = d.mode

    loop = SimpleNamespace(probes=probes, sources=[], budget=Budget(5.0), _write_counters=lambda c: None,
                           _counters=lambda: None, _take_step=take)
    assert windows.BudgetLoop._apply_budget(loop, 0.0, [0, 0, 0]) is False
    assert windows.BudgetLoop._apply_budget(loop, 1.0, [100_000, 100_000, 30_000]) is True
    assert taken == [(1, "off"), (2, "count")]


class _Sources:
    """The collector's operation sources with a scripted bookkeeping, ticks and sampler (op_sources)."""

    def __init__(self, books: list[float], cpu: list[float] | None, ticks: list[float]):
        from types import SimpleNamespace

        from rlscope_top.collect import op_sources
        self.mixin = op_sources.OperationSources
        self.budget = Budget(5.0)
        self._books, self._cpu, self._ticks = iter(books), iter(cpu or ()), iter(ticks)
        self.sampler = (SimpleNamespace(cpu_s=lambda: next(self._cpu), ended=False, hz=10.0, children=True)
                        if cpu is not None else None)
        self._smp_window = self._bk_window = (0.0, 0.0)
        self._smp_pct = self._bk_pct = 0.0
        self._sampler_reported = True

    def _bookkeeping_s(self) -> float:
        return next(self._books)

    def _tick_s(self) -> float:
        return next(self._ticks)

    def check(self) -> None:
        self.mixin._bookkeeping_budget(self)
        if self.sampler is not None:
            self.mixin._sampler_budget(self, self.sampler)


@pytest.mark.parametrize("cpu, ticks, want", [(None, [0.0, 0.0], 2.2), (None, [0.0, 0.019], 2.58),
                                              ([0.0, 0.05], [0.0, 0.019], 3.58)])
def test_the_programs_bookkeeping_counts_in_the_total_beside_the_sampler(monkeypatch, cpu, ticks, want):
    """0.11 s of bookkeeping over 5 s (rl-games' 4 threads: ~2%) is 2.2% no step lowers; the
    ticks' interrupts (0.019 s: ~731 ticks at the default 26 us) count with it; with a sampler that used
    0.05 s of it, all count."""
    from rlscope_top.collect import op_sources
    clock = iter([100.0, 105.0] if cpu is None else [100.0, 100.0, 105.0, 105.0])    # a read per source a check
    monkeypatch.setattr(op_sources.time, "monotonic", lambda: next(clock))
    s = _Sources([0.0, 0.11], cpu, ticks)
    s.check()
    s.check()
    assert s.budget.fixed_pct == pytest.approx(want)
