"""The sampled rows' split refit to their own ticks (rlscope_top/account/op_tick_split.py).

Known answer by construction: two sampled operations alternating faster than the samples,
one pure Python (300 ms), one 80% torch (300 ms: 240 ms torch, 1009 calls). Sample and hold
gave each the same 40/60 mix. Their ticks (4 ms each) are the true split. After the refit
each row keeps its held time, each category its total, and the calls follow the torch time.
"""

from __future__ import annotations

import pytest

from rlscope_top.account.op_tick_split import apportion, split_by_ticks
from rlscope_top.vocab import CATEGORIES

MS = 1_000_000


def _row(name: str, src: str, py_ms: float, be_ms: float, calls: int, ticks: list[int] | None) -> dict:
    ns = {c: [0, 0] for c in CATEGORIES}
    ns["python"], ns["backend"] = [py_ms * MS, 3 * MS], [be_ms * MS, 0]
    return {"name": name, "source": src, "ns": ns, "calls": [0, calls, 0, 0],
            "trans": [[0, calls, 0, 0], [0] * 4, [0] * 4, [0] * 4], "ticks": ticks}


def test_rows_keep_their_time_categories_their_totals_and_the_split_follows_the_ticks():
    think = _row("think", "sampled", 180, 120, 504, [75, 0, 0, 0, 0, 0, 0])     # truly 300 ms Python
    infer = _row("infer", "sampled", 180, 120, 505, [15, 60, 0, 0, 0, 0, 0])    # truly 60 / 240
    assert split_by_ticks([think, infer])
    for r in (think, infer):
        assert r["ns"]["python"][0] + r["ns"]["backend"][0] == pytest.approx(300 * MS)
        assert r["ns"]["python"][1] == 3 * MS                       # off-CPU time is left as held
    assert think["ns"]["backend"][0] + infer["ns"]["backend"][0] == pytest.approx(240 * MS)
    assert think["ns"]["backend"][0] < 15 * MS                      # was 120 ms
    assert think["calls"][1] + infer["calls"][1] == 1009 and think["calls"][1] < 70
    assert think["trans"][0][1] == think["calls"][1]


def test_annotated_rows_and_a_lone_sampled_row_are_left_alone():
    ann = _row("a", "annotated", 100, 100, 7, [1, 99, 0, 0, 0, 0, 0])
    lone = _row("s", "sampled", 100, 100, 7, [99, 1, 0, 0, 0, 0, 0])
    assert not split_by_ticks([ann, lone])
    assert ann["ns"]["backend"][0] == lone["ns"]["backend"][0] == 100 * MS


@pytest.mark.parametrize("total,weights", [(1009, [1, 2, 3]), (23, [0.1, 0.1, 0.1]), (0, [1, 1]), (5, [0, 0])])
def test_apportion_adds_up(total, weights):
    out = apportion(total, weights)
    assert sum(out) == (total if sum(weights) else 0) and all(x >= 0 for x in out)


def _charged(name: str, held_ms: float, mix_py: float, oh_py_ms: float, oh_be_ms: float, calls: int,
             ticks: list[int]) -> dict:
    """A sampled row as the kernel leaves it: ``held_ms`` of on-CPU time in the global mix,
    less the probe cost charged while it was held."""
    r = _row(name, "sampled", held_ms * mix_py - oh_py_ms, held_ms * (1 - mix_py) - oh_be_ms, calls, ticks)
    r["oh"] = [oh_py_ms * MS, oh_be_ms * MS, 0, 0]
    return r


def test_the_probes_cost_is_taken_from_the_rows_that_made_the_calls():
    """Known answer: `simulation` is 300 ms of pure Python; `infer` 60 ms of Python and 240 ms
    of torch in 1009 calls, each trap costing 60 us outside its timestamps and 40 us inside.
    The two alternate faster than the samples, so each row is held in the global mix (Python
    0.6) and the kernel charges the traps' 100.9 ms in proportion to held time: 43.2 ms to
    `simulation`, which made none of them. Before the fix `simulation` read 256.8 ms (-14%).
    The ticks (4 ms each, 1,750) see the time where it was spent, the cost included."""
    o_py, o_be = 1009 * 0.060, 1009 * 0.040
    held_sim, held_inf = 300.0, 60 + o_py + 240 + o_be
    share = held_sim / (held_sim + held_inf)
    sim = _charged("simulation", held_sim, 0.6, o_py * share, o_be * share, 0, [750, 0, 0, 0, 0, 0, 0])
    inf = _charged("infer", held_inf, 0.6, o_py * (1 - share), o_be * (1 - share), 1009, [300, 700, 0, 0, 0, 0, 0])
    py_total = sim["ns"]["python"][0] + inf["ns"]["python"][0]
    be_total = sim["ns"]["backend"][0] + inf["ns"]["backend"][0]
    assert split_by_ticks([sim, inf])
    assert sim["ns"]["python"][0] + sim["ns"]["backend"][0] == pytest.approx(300 * MS, rel=0.01)
    assert sim["ns"]["backend"][0] < 10 * MS
    assert inf["ns"]["python"][0] == pytest.approx(60 * MS, rel=0.1)
    assert inf["ns"]["backend"][0] == pytest.approx(240 * MS, rel=0.03)
    assert sim["ns"]["python"][0] + inf["ns"]["python"][0] == pytest.approx(py_total)   # the totals stay
    assert sim["ns"]["backend"][0] + inf["ns"]["backend"][0] == pytest.approx(be_total)
    assert sim["ns"]["python"][1] == 3 * MS


def test_a_cost_the_calling_rows_cannot_pay_comes_from_the_others_and_no_row_goes_negative():
    a = _charged("a", 100.0, 0.5, 0.0, 0.0, 0, [50, 50, 0, 0, 0, 0, 0])
    b = _charged("b", 100.0, 0.5, 20.0, 0.0, 7, [100, 0, 0, 0, 0, 0, 0])      # b's torch time is ~0
    before = a["ns"]["backend"][0] + b["ns"]["backend"][0] + a["ns"]["python"][0] + b["ns"]["python"][0]
    assert split_by_ticks([a, b])
    got = [r["ns"][c][0] for r in (a, b) for c in ("python", "backend")]
    assert min(got) >= 0 and sum(got) == pytest.approx(before)


def test_the_cost_outside_the_timestamps_follows_each_rows_calls_priced_by_their_kind():
    """`collect` makes 1009 simulator calls whose traps cost 1 us inside and 2 us outside;
    `update` 1009 torch calls at 3 us inside and 6 us outside. The kernel charged the 8.07 ms
    of Python-side cost half to each; `collect` made a quarter of it."""
    def row(name, py, sim, be, calls, ticks):
        ns = {c: [0, 0] for c in CATEGORIES}
        ns["python"], ns["simulator"], ns["backend"] = [py * MS, 0], [sim * MS, 0], [be * MS, 0]
        return {"name": name, "source": "sampled", "ns": ns, "calls": calls,
                "trans": [[0] * 4 for _ in range(4)], "ticks": ticks, "oh": [4.036 * MS, 0, 0, 0]}
    i_sim, i_be = CATEGORIES.index("simulator"), CATEGORIES.index("backend")
    calls_c, calls_u = [0] * 4, [0] * 4
    calls_c[i_sim], calls_u[i_be] = 1009, 1009
    ticks_c, ticks_u = [0] * 7, [0] * 7
    ticks_c[0], ticks_c[i_sim], ticks_u[0], ticks_u[i_be] = 2000, 2000, 2000, 2000
    collect = row("collect", 100 + 2.018 - 4.036, 100 + 1.009, 0, calls_c, ticks_c)
    update = row("update", 100 + 6.054 - 4.036, 0, 100 + 3.027, calls_u, ticks_u)
    collect["oh"][i_sim], update["oh"][i_be] = 1.009 * MS, 3.027 * MS
    collect["ns"]["simulator"][0] -= 1.009 * MS
    update["ns"]["backend"][0] -= 3.027 * MS
    assert split_by_ticks([collect, update])
    assert collect["ns"]["python"][0] == pytest.approx(100 * MS, rel=0.002)
    assert update["ns"]["python"][0] == pytest.approx(100 * MS, rel=0.002)
    assert collect["ns"]["simulator"][0] == pytest.approx(100 * MS, rel=0.002)
    assert update["ns"]["backend"][0] == pytest.approx(100 * MS, rel=0.002)


def test_the_cost_goes_by_the_ticks_that_found_each_row_in_a_trap_not_by_calls_that_follow_time():
    """`forward` makes 9,000 short torch calls (100 ms Python, 100 ms torch unprobed);
    `backward` 1,000 long ones (200 ms of torch); `simulation` none (100 ms). A trap costs
    10 us outside its timestamps and 5 us inside. Calls follow time, which gives `backward`
    most of them (its torch time is longest); the ticks in traps (1 a ms) say it made a tenth
    of the cost. Known answer: every row its unprobed time."""
    o_py, o_be = 100.0, 50.0
    inflated = {"simulation": (100.0, 0.0), "forward": (190.0, 145.0), "backward": (10.0, 205.0)}
    total = sum(p + b for p, b in inflated.values())
    mix = sum(p for p, _ in inflated.values()) / total
    ticks = {"simulation": [100, 0, 0, 0, 0, 0, 0], "forward": [100, 100, 0, 0, 0, 0, 135],
             "backward": [0, 200, 0, 0, 0, 0, 15]}
    rows = []
    for name, (p, b) in inflated.items():
        held, share = p + b, (p + b) / total
        r = _row(name, "sampled", held * mix - o_py * share, held * (1 - mix) - o_be * share,
                 round(10_000 * share), ticks[name])
        r["oh"] = [o_py * share * MS, o_be * share * MS, 0, 0]
        rows.append(r)
    assert split_by_ticks(rows)
    on = {r["name"]: r["ns"]["python"][0] + r["ns"]["backend"][0] for r in rows}
    assert on["simulation"] == pytest.approx(100 * MS, rel=0.01)
    assert on["forward"] == pytest.approx(200 * MS, rel=0.03)
    assert on["backward"] == pytest.approx(200 * MS, rel=0.03)
    assert rows[2]["calls"][1] > 5000          # the calls did follow time: they could not price it
