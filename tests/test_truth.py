"""The phased trainer's known answer (tests/truth.py): the same work's unprobed shares.

A synthetic log with a known answer: collect phases of 7 steps (Python 3 us, a simulator call of
23 us of which 1 us is its binding's dispatch, one torch call of 2 us) and update phases of 11
torch calls of 2 us with 1 us of loop between them. Every interval carries a 100 ns timer.
"""

from __future__ import annotations

from truth import unprobed_shares, work_shares

TIMER, DISPATCH = 100, 1_000
COLLECT = (("python", 3_000), ("simulator", 23_000), ("backend", 2_000))


def _log(cycles: int) -> list:
    items, t = [], 0
    for _ in range(cycles):
        items.append(("phase", 1, t, 0))
        for _ in range(7):
            for kind, ns in COLLECT:
                items.append((kind, 1, t, t + ns + TIMER))
                t += ns + TIMER
        items.append(("phase", 1, t, 1))
        for _ in range(11):
            items.append(("backend", 1, t, t + 2_000 + TIMER))
            t += 3_000 + TIMER
    items.append(("phase", 1, t, 0))
    return items + [("timer_ns", 0, TIMER, 0), ("dispatch_ns", 0, DISPATCH, 0)]


def _expected(collect_steps: int, update_calls: int) -> dict:
    py = collect_steps * (3_000 + 3 * TIMER + DISPATCH) + update_calls * (1_000 + TIMER)
    sim = collect_steps * (23_000 - DISPATCH)
    be = collect_steps * 2_000 + update_calls * 2_000
    tot = py + sim + be
    return {"python": py / tot, "simulator": sim / tot, "backend": be / tot}


def test_work_shares_hold_the_window_own_mix_at_the_unprobed_rates():
    items = _log(40)
    cycle = 7 * (28_000 + 3 * TIMER) + 11 * (3_000 + TIMER)
    spans = [(0, 5 * cycle + 9_000), (30 * cycle - 4_000, 40 * cycle)]   # cut mid-phase on purpose
    window = {"t0_monotonic_ns": 10 * cycle, "t1_monotonic_ns": 20 * cycle}
    got, want = work_shares(items, spans, window), _expected(70, 110)
    for c in want:
        assert abs(got[c] - want[c]) < 1e-9, (c, got, want)


def test_work_shares_follow_a_window_that_cuts_a_phase():
    items = _log(40)
    cycle = 7 * (28_000 + 3 * TIMER) + 11 * (3_000 + TIMER)
    window = {"t0_monotonic_ns": 10 * cycle, "t1_monotonic_ns": 12 * cycle + 3 * (28_000 + 3 * TIMER)}
    got, want = work_shares(items, [(0, 40 * cycle)], window), _expected(2 * 7 + 3, 2 * 11)
    for c in want:
        assert abs(got[c] - want[c]) < 1e-9, (c, got, want)


def test_spans_cut_mid_phase_move_the_old_truth_and_not_this_one():
    """The reason for work_shares: a span that ends inside a collect phase over-weights it."""
    items = _log(40)
    cycle = 7 * (28_000 + 3 * TIMER) + 11 * (3_000 + TIMER)
    spans = [(0, 2 * cycle + 6 * (28_000 + 3 * TIMER))]
    window = {"t0_monotonic_ns": 0, "t1_monotonic_ns": 40 * cycle}
    want = _expected(7, 11)
    assert abs(unprobed_shares(items, spans)["simulator"] - want["simulator"]) > 0.03
    assert abs(work_shares(items, spans, window)["simulator"] - want["simulator"]) < 1e-9
