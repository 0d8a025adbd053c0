"""bench/tick_cost.py's choices: bad rates and loops get one line and exit 2, and --write keeps
the documented table's rows (a run over other rates would overwrite them)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "tick_cost.py"


@pytest.mark.parametrize("args, says", [
    (["--rates", "10000,x"], "--rates '10000,x': give whole numbers of Hz"),
    (["--rates", "10"], "each rate 50-100000 Hz"),
    (["--loops", "RL-shaped,idle"], "--loops: unknown 'idle'; choose from python spin, RL-shaped"),
    (["--rates", "1009", "--write"], "--write keeps the documented table's rows"),
])
def test_bad_choices_get_one_line_and_exit_2(args, says):
    r = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert says in r.stderr.splitlines()[-1]
    assert "Traceback" not in r.stderr
