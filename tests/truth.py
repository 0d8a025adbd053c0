"""Ground truth from a known-answer target's phase log, cut to the monitor's window."""

from __future__ import annotations

CATS = ("python", "simulator", "backend")


def _timer(items) -> tuple[int, list]:
    """Split off the timer-cost record; each logged interval includes one timer call."""
    timer = next((x[2] for x in items if x[0] == "timer_ns"), 0)
    return timer, [x for x in items if x[0] != "timer_ns"]


def truth_seconds(items, window) -> dict:
    """Seconds per category over the window, summed over the logged threads.

    Time of a logged thread between its phases (loop overhead) is Python, as the
    target itself sees it.
    """
    t0, t1 = window["t0_monotonic_ns"], window["t1_monotonic_ns"]
    timer, items = _timer(items)
    per_thread: dict[int, dict] = {}
    for kind, *rest in items:
        tid, a, b = rest if len(rest) == 3 else (0, *rest)
        a, b = max(a, t0), min(b - timer, t1)
        if b > a:
            d = per_thread.setdefault(tid, dict.fromkeys(CATS, 0))
            d[kind] += b - a
    tot = dict.fromkeys(CATS, 0)
    for d in per_thread.values():
        d["python"] += max(0, (t1 - t0) - sum(d.values()))
        for k in CATS:
            tot[k] += d[k]
    return {k: v / 1e9 for k, v in tot.items()}


def truth_shares(items, window) -> dict:
    """Shares per category over the window."""
    s = truth_seconds(items, window)
    whole = sum(s.values())
    return {k: v / whole for k, v in s.items()}


def unprobed_shares(items, spans) -> dict:
    """Shares over the cycles that ran entirely inside unprobed spans: what the program
    does without probes. Pass the span before the monitor started and the one after it
    detached, so that drift of the machine over the run cancels out.

    Args:
        items: the target's phase log.
        spans: [(start_ns, end_ns), ...] in CLOCK_MONOTONIC.
    """
    timer, items = _timer(items)
    tot = dict.fromkeys(CATS, 0)
    for lo, hi in spans:
        per_thread: dict[int, dict] = {}
        for kind, tid, a, b in items:
            if lo <= a and b <= hi:
                d = per_thread.setdefault(tid, {"first": a, "last": b, **dict.fromkeys(CATS, 0)})
                d[kind] += max(0, b - a - timer)
                d["first"], d["last"] = min(d["first"], a), max(d["last"], b)
        for d in per_thread.values():
            d["python"] += (d["last"] - d["first"]) - sum(d[k] for k in CATS)
            for k in CATS:
                tot[k] += d[k]
    whole = sum(tot.values())
    return {k: v / whole for k, v in tot.items()}
