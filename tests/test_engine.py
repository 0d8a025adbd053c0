"""The timeline engine on hand-built event streams with exact answers."""

from __future__ import annotations

import random

from rlscope_top.account.engine import BACKEND, CUDA, ENTER, EXIT, GONE, OFF, ON, PY, SIM, Engine, overlap, union


def run(events, t0=0, final=None, tids=(1,), **kw):
    e = Engine(t0, tids, **kw)
    for ev in events:
        e.add(*ev)
    e.advance(final)
    return e


def test_nesting_innermost_wins_and_transitions():
    # Python 0-10, backend 10-20, CUDA 20-25 (inside backend), backend 25-30, python 30-40
    e = run([(10, 1, ENTER, BACKEND), (20, 1, ENTER, CUDA), (25, 1, EXIT, CUDA), (30, 1, EXIT, BACKEND)],
            final=40)
    st = e.threads[1]
    assert [sum(x) for x in st.ns] == [20, 15, 0, 5]
    assert st.trans[PY][BACKEND] == 1 and st.trans[BACKEND][CUDA] == 1
    assert st.calls == [0, 1, 0, 1]


def test_nested_same_category_counts_once():
    e = run([(10, 1, ENTER, BACKEND), (12, 1, ENTER, BACKEND), (14, 1, EXIT, BACKEND), (20, 1, EXIT, BACKEND)],
            final=30)
    st = e.threads[1]
    assert st.calls[BACKEND] == 1 and sum(st.ns[BACKEND]) == 10 and sum(st.ns[PY]) == 20


def test_simulator_inside_python_and_priority():
    e = run([(0, 1, ENTER, SIM), (7, 1, EXIT, SIM), (9, 1, ENTER, BACKEND), (11, 1, ENTER, SIM),
             (13, 1, EXIT, SIM), (15, 1, EXIT, BACKEND)], final=23)
    st = e.threads[1]
    assert [sum(x) for x in st.ns] == [2 + 8, 4, 7 + 2, 0]
    assert st.trans[PY][SIM] == 1 and st.trans[BACKEND][SIM] == 1


def test_on_off_cpu_split():
    # backend call that blocks 4 ns in the middle; thread starts in unknown state
    e = run([(10, 1, ENTER, BACKEND), (12, 1, OFF), (16, 1, ON), (20, 1, EXIT, BACKEND), (25, 1, OFF)],
            final=30)
    st = e.threads[1]
    assert st.ns[PY] == [10 + 5, 5]          # 0-10 and 20-25 on, 25-30 off
    assert st.ns[BACKEND] == [2 + 4, 4]


def test_unknown_start_resolved_by_first_event():
    e = run([(10, 1, ON), (20, 1, OFF)], final=30)
    assert e.threads[1].ns[PY] == [10, 20]   # off until 10 (the ON says so), on 10-20, off after


def test_out_of_order_events_give_the_same_answer():
    events = [(10, 1, ENTER, BACKEND), (12, 2, ENTER, SIM), (15, 1, OFF), (17, 2, EXIT, SIM), (18, 1, ON),
              (20, 1, EXIT, BACKEND), (22, 2, OFF), (25, 2, ON), (27, 1, ENTER, CUDA), (29, 1, EXIT, CUDA)]
    ordered = run(events, final=40, tids=(1, 2))
    shuffled = events[:]
    random.Random(1009).shuffle(shuffled)
    e = run(shuffled, final=40, tids=(1, 2), reorder_ns=100)
    for tid in (1, 2):
        assert e.threads[tid].ns == ordered.threads[tid].ns
        assert e.threads[tid].trans == ordered.threads[tid].trans
    assert e.late == 0


def test_incremental_refresh_applies_only_old_enough_events():
    e = Engine(0, (1,), reorder_ns=10)
    e.add(10, 1, ENTER, BACKEND)
    e.add(30, 1, EXIT, BACKEND)
    e.advance()                     # newest 30, window 10: only the event at 10 is applied
    assert e.applied_until == 10 and e.threads[1].depth[BACKEND] == 1
    e.add(25, 1, OFF)               # arrives late but inside the window: still in order
    e.advance(40)
    assert e.threads[1].ns[BACKEND] == [15, 5] and e.late == 0


def test_event_older_than_applied_is_counted_late_not_lost():
    e = Engine(0, (1,), reorder_ns=0)
    e.add(10, 1, ENTER, BACKEND)
    e.advance()
    e.add(5, 1, EXIT, BACKEND)
    e.advance(20)
    assert e.late == 1 and e.threads[1].depth[BACKEND] == 0


def test_thread_exit_mid_call_and_new_threads():
    e = run([(10, 1, ENTER, SIM), (14, 1, GONE), (20, 1, EXIT, SIM), (22, 3, ENTER, BACKEND),
             (30, 3, EXIT, BACKEND)], final=40, tids=(1,))
    assert sum(e.threads[1].ns[SIM]) == 4 and sum(sum(x) for x in e.threads[1].ns) == 14
    assert e.threads[1].gone
    assert sum(e.threads[3].ns[BACKEND]) == 8 and sum(e.threads[3].ns[PY]) == 10   # counted from 22


def test_exit_without_enter_is_ignored():
    e = run([(5, 1, EXIT, BACKEND), (10, 1, ENTER, BACKEND), (12, 1, EXIT, BACKEND)], final=20)
    assert sum(e.threads[1].ns[BACKEND]) == 2 and e.threads[1].depth == [0, 0, 0, 0]


def test_busy_intervals_and_gpu_overlap():
    e = run([(10, 1, OFF), (20, 1, ON), (30, 1, OFF)], final=40, keep_busy=True)
    assert e.threads[1].busy == [(0, 10), (20, 30)]
    o = overlap(e.threads[1].busy, [(5, 25), (38, 45)], 0, 40)
    assert o == {"cpu_only": 5 + 5, "gpu_only": 10 + 2, "both": 5 + 5, "idle": 8}
    assert sum(o.values()) == 40


def test_union_merges():
    assert union([(5, 7), (1, 3), (2, 4), (7, 8), (9, 9)]) == [(1, 4), (5, 8)]
