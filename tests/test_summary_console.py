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
