"""No impossible values, ever: random record streams through the accounting and the summary
builder, and random event streams through the reference engine (hypothesis, seeded).

Invariants: no negative time or share anywhere; shares in [0, 1] adding up to 1; the
categories add up to the on/off-CPU totals; each thread's categories add up to its own
on + off time; the operations (with <none>) add up to the categories; n/a is None and the
same everywhere. The budget's modes (timed / count / off, with windows) are drawn too, so
the estimates are exercised.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings, strategies as st

from rlscope_top.ring import records as R
from rlscope_top.report import summary as S
from rlscope_top.account.accounting import Accounting
from rlscope_top.account.engine import Engine

from invariants import check_summary

MS = 1_000_000
T0 = 1000 * MS
CATS = ("backend", "simulator", "cuda_api")
N_STREAMS = 10_000       # the bar: 10k random streams in CI (split over the two tests below)


def _meta(groups):
    probes = [{"id": 0, "group": "torch", "label": "op begin", "kind": "enter", "cost_ns": 700}]
    return R.meta(pid=42, command="python train.py", t0_ns=T0, wall0=1_700_000_000.0, interval_s=1.0,
                  probes=probes, labels=["op begin"], groups=groups, missing={}, host="h", kernel="k",
                  tids0=[42, 43])


@st.composite
def streams(draw):
    """A session: cumulative counters that only grow, operations, and budget mode changes.

    Hypothesis draws the shape and a seed; the numbers come from the seed (fast enough for
    10k streams in the suite; a failure still prints the whole stream)."""
    rnd = random.Random(draw(st.integers(0, 2 ** 32)))
    groups = draw(st.sampled_from([{"torch": ["/x"]}, {"torch": ["/x"], "mujoco": ["/y"]},
                                   {"torch": ["/x"], "mujoco": ["/y"], "cudart": ["/z"]}, {}]))
    n = draw(st.integers(1, 12))
    tids = draw(st.lists(st.sampled_from([42, 43, 44]), min_size=1, max_size=3, unique=True))
    op_names = draw(st.lists(st.sampled_from(["rollout", "train", "simulation"]), max_size=3, unique=True))
    mode_odds = draw(st.integers(0, 4))
    py = {t: rnd.random() < 0.6 or t == 42 for t in tids}
    cum = {t: {"ns": [[0, 0] for _ in range(4)], "calls": [0] * 4, "oh": [0] * 4,
               "trans": [[0] * 4 for _ in range(4)]} for t in tids}
    ops = {o: [[0, 0] for _ in range(4)] for o in op_names}
    out = [_meta(groups)]
    ts = T0
    for _ in range(n):
        ts += rnd.randint(1, 500) * MS
        for t in tids:
            _grow(rnd, cum[t])
            if py[t]:
                _grow_ops(rnd, cum[t], ops, op_names)
        threads = [R.thread(tid=t, name=f"t{t}", python=py[t], exited=False, ns=[list(x) for x in cum[t]["ns"]],
                            trans=[list(x) for x in cum[t]["trans"]], calls=list(cum[t]["calls"]),
                            oh=list(cum[t]["oh"]), ticks=[0] + [rnd.randint(0, 9) for _ in range(6)])
                   for t in tids]
        oprecs = [R.operation(id=k + 1, name=o, kind="simulation" if o == "simulation" else "",
                              source="annotated", ns=[list(x) for x in ops[o]], trans=[[0] * 4] * 4,
                              calls=[0] * 4, oh=[0] * 4) for k, o in enumerate(op_names)]
        out.append(R.counters(ts, threads, [0], 0.0, ops=oprecs))
        if rnd.randint(0, 4) < mode_odds:
            out.append(R.mode(ts, rnd.choice(CATS), rnd.choice(["count", "off", "timed"]), 9.0, 5.0))
    if draw(st.booleans()):
        out.append(R.end(ts, "target exited"))
    return out


def _grow(rnd, c: dict) -> None:
    for i in range(4):
        for k in (0, 1):
            c["ns"][i][k] += rnd.randint(0, 200) * MS
        calls = rnd.randint(0, 50)
        c["calls"][i] += calls
        c["trans"][0][i] += rnd.randint(0, calls)
        c["oh"][i] += min(c["ns"][i][0], rnd.randint(0, 30) * MS)


def _grow_ops(rnd, c: dict, ops: dict, names: list) -> None:
    """An operation's time is part of its threads' time (each takes a share of what is left)."""
    for o in names:
        for i in range(4):
            for k in (0, 1):
                left = c["ns"][i][k] - sum(ops[x][i][k] for x in names)
                ops[o][i][k] += max(0, int(left * rnd.random() / len(names)))


@settings(max_examples=N_STREAMS // 2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams())
def test_summaries_of_random_streams_hold_the_invariants(recs):
    a = Accounting()
    a.feed(recs)
    check_summary(S.build(a))


@st.composite
def event_streams(draw):
    rnd = random.Random(draw(st.integers(0, 2 ** 32)))
    evs, ts = [], T0
    for _ in range(draw(st.integers(1, 60))):
        ts += rnd.randint(-2, 50) * 1000          # a little out of order, as CPUs report
        evs.append((ts, rnd.choice([1, 2, 3]), rnd.choice(["enter", "exit", "on", "off", "new", "gone"]),
                    rnd.randint(1, 3)))
    return evs


@settings(max_examples=N_STREAMS // 2, deadline=None, derandomize=True)
@given(event_streams())
def test_the_engine_never_makes_negative_or_extra_time(evs):
    e = Engine(T0, [1, 2, 3], reorder_ns=10_000)
    for ev in evs:
        e.add(*ev)
        e.advance()
    end = max([T0] + [ev[0] for ev in evs]) + 1000
    e.advance(final_ts=end)
    for tid, st_ in e.threads.items():
        total = sum(a + b for a, b in st_.ns)
        assert all(a >= 0 and b >= 0 for a, b in st_.ns), (tid, st_.ns)
        assert total <= end - T0, (tid, total)
        assert all(c >= 0 for c in st_.calls)
