"""The printed summary into a pipe or a file: rich would assume 80 columns there and cut the
operations table's cells to `7…`. tests/data/summary_sac_pendulum.json is a real summary
(rl-zoo3 2.9.2 SAC on Pendulum-v1, attached for 15 s with default settings)."""

import json
import os
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).parent / "data" / "summary_sac_pendulum.json"
PRINT = ("import json, sys; from rlscope_top.report import summary; "
         "summary.render(json.load(open(sys.argv[1])))")


def _printed(env_extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | env_extra
    return subprocess.run([sys.executable, "-c", PRINT, str(DOC)], env=env, stdout=subprocess.PIPE,
                          text=True, check=True).stdout


def _ops_rows(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.split("operations (src")[1].splitlines()[3:]:
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 5:
            rows[cells[0]] = cells
    return rows


def test_a_piped_summary_prints_every_cell_whole():
    out = _printed({})
    assert "…" not in out
    doc = json.loads(DOC.read_text())
    rows = _ops_rows(out)
    assert set(rows) == set(doc["operations"]) - {"<all>"}, rows
    train = rows["train"]
    # the backend share of `train` as the document has it, whole, in its column
    be = doc["operations"]["train"]["shares"]["backend"]
    assert f"{100 * be:.0f}%" in train, train


def test_columns_set_by_the_user_still_rule():
    out = _printed({"COLUMNS": "60"})
    assert max(len(line) for line in out.splitlines() if "│" in line) <= 60


def _doc(pct: float, parts: dict) -> dict:
    return {"overhead": {"estimated_pct": pct, "by_source_s": parts}, "budget": {"max_overhead_pct": 5.0}}


def test_a_self_report_over_the_budget_says_which_part_the_budget_could_not_turn_off():
    from rlscope_top.report import summary as S
    # rl-zoo3 DQN CartPole, `--timeline --record`, 12 s: 10.6% under a 5% budget
    busy = _doc(10.62, {"probes": 0.087, "scheduler": 0.003, "kernel_extra": 0.154, "contention": 1.030,
                        "sampler": 0.023, "gpu_agent": 0.0, "cupti": 0.0})
    assert S.over_budget(busy) == ("over the 5% budget: most of it (1.03 s) the monitor's own CPU on cores "
                                   "the job keeps busy, which no budget step turns off")
    traps = _doc(7.0, {"probes": 0.9, "contention": 0.1})
    assert S.over_budget(traps) == "over the 5% budget: most of it (0.90 s) probe traps"
    assert S.over_budget(_doc(4.9, {"contention": 1.0})) is None
    assert S.over_budget(_doc(None, {"contention": 1.0})) is None


def test_a_columns_value_that_is_no_width_does_not_swallow_the_summary():
    for bad in ("0", "abc", "-5"):
        out = _printed({"COLUMNS": bad})
        assert "rlscope-top summary" in out and "…" not in out, (bad, out[:200])
