"""A CPU-clock tick is placed by the probed libraries' address ranges (probes/bpf_program.c
``ip_where``), found by halving the table sorted by start (maps._rangeset). The scan it
replaced was ~30k instructions of each load's verification (docs/overhead.md, "The verifier").

The known answer: a thread in one 1.5 s native call (simlib's ``sim_step``) is in the
simulator library for its ticks, with that library's range anywhere in a full table of 64
among 63 decoys given out of order; with the range left out, none of them is Simulator and
none lands in a decoy's category.
"""

from __future__ import annotations

import os
import random
import sys

import pytest

from support import TARGETS

from rlscope_top.probes import catalog
from rlscope_top.probes.loader import ProbeSet
from rlscope_top.probes.maps import NRANGES, exec_ranges

CALL_S = 1.5
PY, SIM, OTHER, KERNEL, TRAP = catalog.CAT_PY, catalog.CAT_SIM, 4, 5, 6
DECOY_CATS = (catalog.CAT_BACKEND, catalog.CAT_CUDA)      # a wrong match would show in these


def _table(real: tuple[int, int], at: int | None, seed: int) -> list[tuple[int, int, int]]:
    """63 decoy ranges (64 without the real one) around the library's, 1 MiB apart, the real
    one (start, end) sorted to index ``at``, the whole given shuffled."""
    n_below = at if at is not None else NRANGES // 2
    n_above = NRANGES - n_below - (at is not None)
    below = [(real[0] - (k + 1) * (1 << 20), real[0] - (k + 1) * (1 << 20) + 4096, DECOY_CATS[k % 2])
             for k in range(n_below)]
    above = [(real[1] + k * (1 << 20) + 4096, real[1] + k * (1 << 20) + 8192, DECOY_CATS[k % 2])
             for k in range(n_above)]
    out = below + above + ([(real[0], real[1], SIM)] if at is not None else [])
    assert len(out) == NRANGES
    if at is not None:
        assert sorted(out).index((real[0], real[1], SIM)) == at
    random.Random(seed).shuffle(out)
    return out


def _sim_range(pid: int, simlib: str) -> tuple[int, int]:
    (r,) = [(a, b) for a, b, p in exec_ranges(pid) if os.path.realpath(p) == os.path.realpath(simlib)]
    return r


@pytest.mark.parametrize("at", [0, 23, NRANGES - 1, None], ids=["first", "23rd", "last", "absent"])
def test_a_tick_in_a_library_is_found_in_a_full_table(ebpf, spawn, simlib, tmp_path, at):
    go = tmp_path / "go"
    t = spawn([sys.executable, str(TARGETS / "long_call.py"), simlib, str(CALL_S), str(go)], cwd=str(TARGETS))
    t.wait_line("ready")
    ps = ProbeSet(t.pid, catalog.sim_lib_specs(simlib, ["sim_step"]))
    try:
        ps.load()
        ps.start()
        ps.set_ranges(_table(_sim_range(t.pid, simlib), at, seed=1009))
        go.touch()
        t.wait_line("call ", timeout=30)
        (th,) = [x for x in ps.threads() if x.tid == t.pid]
    finally:
        ps.stop()
    user = sum(th.ticks) - th.ticks[KERNEL] - th.ticks[TRAP]
    assert user >= 0.5 * CALL_S * 250 * 0.5, th.ticks          # it ran (half a core's ticks at least)
    assert sum(th.ticks[c] for c in DECOY_CATS) == 0, th.ticks
    if at is None:
        # elsewhere in user space: TICK_OTHER, or Python where its call site's ticks say so
        assert th.ticks[SIM] == 0 and th.ticks[OTHER] + th.ticks[PY] >= 0.8 * user, th.ticks
    else:
        assert th.ticks[SIM] >= 0.8 * user, th.ticks          # the loop is the library's; clock reads are the vDSO's
