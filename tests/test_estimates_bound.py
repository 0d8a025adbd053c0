"""The ``off`` mode's stated 95% bound covers its error (issue 12: a bound of 0.3 pp was
stated where the error was 4.4 pp, because the tick scale's noise was not in it).

Known answer by construction: a Python thread whose backend runs a set number of ns in
each stretch; the CPU-clock ticks that land in the backend's libraries are a Poisson count
of a share of that time that moves from stretch to stretch (an RL loop's collect and
update phases leave different parts of it in libc). Timed windows and ``off`` segments
alternate as the collector makes them. Over many sessions with a fixed seed, the stated
bound must cover the truth about 95% of the time and must not be uselessly wide.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from rlscope_top.account.estimates import NTICK, CategoryEstimate
from rlscope_top.vocab import NCAT
from rlscope_top.vocab import NONE_OP as NONE_PART

BACKEND = 1
TICK_NS = 4_000_000          # 250 Hz per CPU
STRETCH_NS = 300_000_000


def _thread() -> dict:
    return {"py": True, "ns": [[0, 0] for _ in range(NCAT)], "oh": [0] * NCAT, "calls": [0] * NCAT,
            "trans": [[0] * NCAT for _ in range(NCAT)], "ticks": [0] * NTICK}


def _session(rng: np.random.Generator, stretches: int = 24, by_sites: bool = False,
             mode: str = "off") -> tuple[float, float, float]:
    """One session; returns (true backend ns in off segments, estimated, stated bound).

    ``by_sites``: the kernel placed the ticks by call site (every tick inside a torch call is
    Backend, the others Python), and the windows' timed ns carry a probe cost calibrated 30% off.
    ``mode``: what the segments between windows are (``count``: calls exact)."""
    th, ts = _thread(), 0
    est = CategoryEstimate(BACKEND, ts)
    est.by_sites = by_sites
    truth = 0.0
    for i in range(stretches):
        timed = i % 4 == 0                        # a window, then three stretches off
        be = int(STRETCH_NS * rng.uniform(0.08, 0.25))
        seen = 1.0 if by_sites else rng.uniform(0.55, 0.9)   # share of backend time its ticks find
        th["ns"][0][0] += STRETCH_NS - (be if timed else 0)
        if timed:
            th["ns"][BACKEND][0] += int(be * 1.3) if by_sites else be
        else:
            truth += be
        th["calls"][BACKEND] += 1009
        th["ticks"][BACKEND] += int(rng.poisson(be * seen / TICK_NS))
        if by_sites:
            th["ticks"][0] += int(rng.poisson((STRETCH_NS - be) / TICK_NS))
        ts += STRETCH_NS
        est.change(mode if timed else "timed" if i % 4 == 3 else mode, ts, {1: copy.deepcopy(th)}, {})
    ex, _, bound, _ = est.now({1: th}, {}, ts)
    e = ex[NONE_PART]
    return truth, e.ns[0] + e.ns[1], bound


def test_the_stated_bound_covers_the_off_mode_error_about_95_percent_of_the_time():
    rng = np.random.default_rng(1009)
    runs = [_session(rng) for _ in range(401)]
    assert all(b is not None and b > 0 for _, _, b in runs)
    covered = sum(abs(e - t) <= b for t, e, b in runs) / len(runs)
    rel_bound = float(np.median([b / t for t, _, b in runs]))
    rel_err = float(np.median([abs(e - t) / t for t, e, _ in runs]))
    assert covered >= 0.90, (covered, rel_bound, rel_err)
    assert rel_bound < 6 * rel_err, (rel_bound, rel_err)    # honest, not a blanket


@pytest.mark.parametrize("mode", ["off", "count"])
def test_ticks_placed_by_call_site_are_the_share_of_on_cpu_time(mode):
    """With ticks placed by call site the estimate is the category's share of each stretch's
    ticks times its on-CPU time: no window's ns per tick or per call, no calibrated probe cost.
    Over 401 seeded sessions its bound (the ticks' binomial noise) covers >= 90% of errors and
    the median error is under 5% of the truth; the windows' ns per tick (``off``) or per call
    (``count``) would carry their probe cost error (30% here) into every stretch."""
    rng = np.random.default_rng(1009)
    runs = [_session(rng, by_sites=True, mode=mode) for _ in range(401)]
    assert all(b is not None and b > 0 for _, _, b in runs)
    covered = sum(abs(e - t) <= b for t, e, b in runs) / len(runs)
    rel_err = float(np.median([abs(e - t) / t for t, e, _ in runs]))
    rel_bound = float(np.median([b / t for t, _, b in runs]))
    assert covered >= 0.90, (covered, rel_bound, rel_err)
    assert rel_err < 0.05 and rel_bound < 6 * rel_err, (rel_bound, rel_err)


@pytest.mark.parametrize("mode", ["off", "count"])
def test_ticks_placed_by_site_need_no_window(mode):
    """Stepped down before any window: ticks placed by call site are a measurement, so the
    category gets their share of on-CPU time (23 of 101 ticks here), not `unknown`; without
    them there is nothing to scale and the estimate says so."""
    for by_sites in (True, False):
        th = _thread()
        est = CategoryEstimate(BACKEND, 0)
        est.by_sites = by_sites
        est.change(mode, 0, {1: copy.deepcopy(th)}, {})
        th["ns"][0][0] = 404_000_000            # all charged to Python while not timed
        th["calls"][BACKEND] = 1009
        th["ticks"][BACKEND], th["ticks"][0] = 23, 78
        ex, _, _, _ = est.now({1: th}, {}, 404_000_000)
        e = ex[NONE_PART]
        if by_sites:
            assert not e.unknown and e.ns[0] == pytest.approx(404_000_000 * 23 / 101)
        else:
            assert e.unknown


def test_off_cpu_part_of_a_site_placed_estimate_follows_its_ticks():
    """Time a category spends preempted (a busy machine: the thread's runnable time) is its
    on-CPU estimate times its own off/on ratio in the windows (1:2 here), so a part whose
    ticks never found torch gets none: a part's windows place time by sample and hold and blur
    it across fast-alternating operations (tests/test_ebpf_op_ticks.py under load read 22%).
    Time it spends blocked is the category's share of the windows' off-CPU time (all of it
    here: Python never blocked in them)."""
    for pre, share_of_off in ((100_000_000, 0.5 * 23 / 101 * 404 / 100), (0, 1.0)):
        th = _thread()
        est = CategoryEstimate(BACKEND, 0)
        est.by_sites = True
        th["ns"][BACKEND] = [100_000_000, 50_000_000]           # a timed window: off/on = 0.5
        th["ns"][0] = [300_000_000, 0]
        est.change("off", 450_000_000, {1: copy.deepcopy(th)}, {})
        th["ns"][0] = [300_000_000 + 404_000_000, 100_000_000]  # off: all charged to Python
        th["pre"] = pre                                         # preempted, or blocked (0)
        th["ticks"][BACKEND], th["ticks"][0] = 23, 78
        ex, _, _, _ = est.now({1: th}, {}, 954_000_000)
        on = 404_000_000 * 23 / 101
        assert ex[NONE_PART].ns == pytest.approx([on, 100_000_000 * share_of_off]), pre
        th["ticks"][BACKEND], th["ticks"][0] = 0, 101           # no tick in torch: nothing off CPU either
        ex, _, _, _ = est.now({1: th}, {}, 954_000_000)
        assert ex[NONE_PART].ns == pytest.approx([0.0, 0.0]), pre


def _two_phases(pre_share: float) -> tuple[float, float]:
    """A thread whose torch calls block (OpenMP's barrier, more threads than cores): in its
    update phase 2 ns off CPU for each on, in its rollout 0.2; Python itself never blocks.
    One timed window over both phases, then a stretch off. Returns (estimated, true) Backend
    off-CPU ns of the stretch; ``pre_share``: the share of the thread's off-CPU time spent
    runnable instead (a busy machine)."""
    est = CategoryEstimate(BACKEND, 0)
    est.by_sites = True
    upd, roll = _thread(), _thread()
    upd["name"], roll["name"] = "update", "rollout"
    upd["ns"][BACKEND], roll["ns"][BACKEND] = [40_000_000, 80_000_000], [60_000_000, 12_000_000]
    upd["ns"][0], roll["ns"][0] = [20_000_000, 0], [60_000_000, 0]
    th = _thread()
    _sum(th, upd, roll)
    est.change("off", 272_000_000, {1: copy.deepcopy(th)}, {"u": copy.deepcopy(upd), "r": copy.deepcopy(roll)})
    # the stretch off: each phase 1009 ms; all of torch's time charged to Python
    ons, offs = {"u": 1009e6 * 40 / 180, "r": 1009e6 * 60 / 132}, {"u": 1009e6 * 80 / 180, "r": 1009e6 * 12 / 132}
    for k, ph in (("u", upd), ("r", roll)):
        py_on = 1009e6 - ons[k] - offs[k]
        ph["ns"][0] = [ph["ns"][0][0] + int(py_on + ons[k]), int(offs[k])]
        ph["ticks"][BACKEND] = round(ons[k] / TICK_NS)
        ph["ticks"][0] = round((py_on + ons[k]) / TICK_NS) - ph["ticks"][BACKEND]
    th = _thread()
    _sum(th, upd, roll)
    th["pre"] = int(pre_share * th["ns"][0][1])
    ex, _, _, _ = est.now({1: th}, {"u": upd, "r": roll}, 272_000_000 + 2018_000_000)
    return ex["update"].ns[1] + ex["rollout"].ns[1], offs["u"] + offs["r"]


def _sum(into: dict, *recs: dict) -> None:
    for r in recs:
        for c in range(NCAT):
            into["ns"][c] = [into["ns"][c][0] + r["ns"][c][0], into["ns"][c][1] + r["ns"][c][1]]
        into["ticks"] = [a + b for a, b in zip(into["ticks"], r["ticks"])]


def test_blocked_time_inside_torch_goes_to_backend_whatever_each_phase_ratio():
    """Known answer: ~0.54 s of the stretch's off-CPU time is torch's (the update blocks 2 ns a
    ns on CPU, the rollout 0.2). The pooled off/on ratio (0.92) gave the update too little and
    capped the rollout at its own time: a third stayed Python (rl-games' PPO on 4 torch threads
    and 2 cores: waiting 8.4-9.0% of wall time, exact mode 0.3%). Blocked time now follows
    the windows' share of the off-CPU time, which is torch's. Preempted instead (a busy
    machine), the ratio stays: the estimate is then not above the truth."""
    est, true = _two_phases(0.0)
    assert est == pytest.approx(true, rel=0.03), (est, true)
    est, true = _two_phases(1.0)
    assert est <= true * 1.01, (est, true)


def test_two_untimed_categories_share_the_blocked_time_without_counting_it_twice():
    """Backend and Simulator both off between windows, each blocking as long in the windows
    (50 ms each, Python never): the stretch's 100 ms of Python-charged blocked time is split
    half and half, not given whole to each (Python would go below zero)."""
    th = _thread()
    th["ns"][BACKEND], th["ns"][2] = [100_000_000, 50_000_000], [100_000_000, 50_000_000]
    th["ns"][0] = [300_000_000, 0]
    th["ticks"][BACKEND], th["ticks"][2], th["ticks"][0] = 25, 25, 75
    got = []
    for ci in (BACKEND, 2):
        est = CategoryEstimate(ci, 0)
        est.by_sites = True
        t = copy.deepcopy(th)
        est.change("off", 600_000_000, {1: copy.deepcopy(t)}, {})
        t["ns"][0] = [300_000_000 + 500_000_000, 100_000_000]
        t["ticks"][BACKEND], t["ticks"][2], t["ticks"][0] = 50, 50, 175
        ex, _, _, _ = est.now({1: t}, {}, 1_200_000_000)
        got.append(ex[NONE_PART].ns[1])
    assert got == pytest.approx([50_000_000, 50_000_000], rel=0.01)
