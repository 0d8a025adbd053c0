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
