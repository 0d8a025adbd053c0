"""A call open when the budget removes its category's exit probes is closed
(probes/bpf_program.c ``dgen``, probes/loader.py ``_close_open_calls``).

A uretprobe's pending return runs no handler once it is unregistered, so a call that was open
at the step never saw its exit: its depth held the thread in the category to the end of the
session. On rl-zoo3 PPO (3 default sessions in 30) the main thread read Backend 7.9-11.3 pp
above its own ticks' share; in the first, all of it from 16 s on, where the raw counters
charged every ns to Backend and none to Python.

The known answer: one 1.3 s native call (simlib's ``sim_step``, timed by its own clock reads),
stepped down 0.4 s into it, then pure Python. The Simulator time is the call's until the step
(plus up to one 4 ms tick: the close happens at the thread's next event); the rest of the
call, and the Python after it, are Python.
"""

from __future__ import annotations

import ctypes as ct
import sys
import time

import pytest

from support import TARGETS

from rlscope_top.account.engine import Engine
from rlscope_top.collect.record_builder import _TIMELINE_KINDS
from rlscope_top.probes import catalog
from rlscope_top.probes.loader import ProbeSet

CALL_S = 1.3
STEP_AT_S = 0.4
TICK_NS = 4_000_000
PY, SIM = catalog.CAT_PY, catalog.CAT_SIM


def _timeline(ps: ProbeSet, tid: int) -> list[tuple]:
    """The thread's timeline events, named as the record builder names them for the engine."""
    return [(ts, _TIMELINE_KINDS[k], cat) for k, ts, t, _name, cat in ps.events(None)
            if t == tid and k in _TIMELINE_KINDS]


@pytest.mark.parametrize("mode", ["off", "count"])
def test_a_call_open_at_the_step_down_ends_with_the_step(ebpf, spawn, simlib, tmp_path, mode):
    go = tmp_path / "go"
    t = spawn([sys.executable, str(TARGETS / "long_call.py"), simlib, str(CALL_S), str(go)], cwd=str(TARGETS))
    t.wait_line("ready")
    ps = ProbeSet(t.pid, catalog.sim_lib_specs(simlib, ["sim_step"]), timeline=True)
    events = []
    try:
        ps.load()
        ps.start()
        go.touch()
        time.sleep(STEP_AT_S)
        s0 = time.monotonic_ns()
        ps.step_down_all({SIM: mode}, [])
        s1 = time.monotonic_ns()
        _, c0, c1 = t.wait_line("call ", timeout=30).split()
        time.sleep(0.5)                                     # Python after the call
        events = _timeline(ps, t.pid)
        th = ps.bpf["threads"][ct.c_uint(t.pid)]
        t_read = time.monotonic_ns()
        sim_ns, depth, closed = th.ns[2 * SIM] + th.ns[2 * SIM + 1], th.depth[SIM], ps.closed_calls()
        # Python's on- and off-CPU time, with the time since the thread's last event (its
        # category is Python now: the record builder charges it so too)
        py_ns = th.ns[2 * PY] + th.ns[2 * PY + 1] + max(0, t_read - th.last_ts)
    finally:
        ps.stop()
    c0 = int(c0)
    print(f"{mode}: step {(s0 - c0) / 1e6:.1f}-{(s1 - c0) / 1e6:.1f} ms into the call; Simulator "
          f"{sim_ns / 1e6:.1f} ms, Python {py_ns / 1e6:.1f} ms of the {(t_read - s1) / 1e6:.1f} ms since")
    assert depth == 0 and closed == 1, (depth, closed)
    assert s0 - c0 - 1_000_000 <= sim_ns <= s1 - c0 + TICK_NS + 1_000_000, (sim_ns, s0 - c0, s1 - c0)
    # the rest of the call and the Python after it: all Python's, on or off CPU
    assert py_ns >= t_read - s1 - TICK_NS - 1_000_000, (py_ns, t_read - s1)
    # the reference engine agrees, from the same events (a close is one of them)
    assert [k for _, k, c in events if k == "close" and c == SIM] == ["close"], events[-5:]
    eng = Engine(events[0][0], [t.pid])
    for ts, kind, cat in events:
        eng.add(ts, t.pid, kind, cat)
    eng.advance(th.last_ts)
    st = eng.threads[t.pid]
    assert abs(sum(st.ns[SIM]) - sim_ns) <= 1_000_000, (st.ns, sim_ns)
