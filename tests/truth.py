"""Ground truth from a known-answer target's phase log, cut to the monitor's window."""

from __future__ import annotations

CATS = ("python", "simulator", "backend")


def interval_costs(items) -> tuple[dict, list]:
    """Split off the cost records and phase marks: what to take off each logged interval, by
    category (every interval includes one timer call; a simulator call also its binding's
    dispatch, which is Python up to the library's entry), and the intervals."""
    rec = {x[0]: x[2] for x in items if x[0] in ("timer_ns", "dispatch_ns")}
    timer = rec.get("timer_ns", 0)
    off = {c: timer for c in CATS}
    off["simulator"] += rec.get("dispatch_ns", 0)
    return off, [x for x in items if x[0] in CATS]


def truth_seconds(items, window) -> dict:
    """Seconds per category over the window, summed over the logged threads.

    Time of a logged thread between its phases (loop overhead) is Python, as the
    target itself sees it.
    """
    t0, t1 = window["t0_monotonic_ns"], window["t1_monotonic_ns"]
    off, items = interval_costs(items)
    per_thread: dict[int, dict] = {}
    for kind, *rest in items:
        tid, a, b = rest if len(rest) == 3 else (0, *rest)
        a, b = max(a, t0), min(b - off[kind], t1)
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
    off, items = interval_costs(items)
    tot = dict.fromkeys(CATS, 0)
    for lo, hi in spans:
        per_thread: dict[int, dict] = {}
        for kind, tid, a, b in items:
            if lo <= a and b <= hi:
                d = per_thread.setdefault(tid, {"first": a, "last": b, **dict.fromkeys(CATS, 0)})
                d[kind] += max(0, b - a - off[kind])
                d["first"], d["last"] = min(d["first"], a), max(d["last"], b)
        for d in per_thread.values():
            d["python"] += (d["last"] - d["first"]) - sum(d[k] for k in CATS)
            for k in CATS:
                tot[k] += d[k]
    whole = sum(tot.values())
    return {k: v / whole for k, v in tot.items()}


def _phases(items) -> list[tuple[int, int, int, list]]:
    """The phased trainer's phases from its marks: (start, end, kind, its intervals), kind 0
    collect, 1 update. The last, unfinished phase is left out."""
    marks = sorted((x[2], x[3]) for x in items if x[0] == "phase")
    _, ivals = interval_costs(items)
    ivals = sorted(ivals, key=lambda x: x[2])
    out, j = [], 0
    for (a, kind), (b, _) in zip(marks, marks[1:]):
        while j < len(ivals) and ivals[j][2] < a:
            j += 1
        k = j
        while k < len(ivals) and ivals[k][2] < b:
            k += 1
        out.append((a, b, kind, ivals[j:k]))
        j = k
    return out


def _unit(kind: int) -> str:
    """What one step of a phase is counted by: a collect step has one Python interval, an
    update phase is counted in torch calls."""
    return "python" if kind == 0 else "backend"


def _phase_rates(phases: list, off: dict, spans) -> dict:
    """Unprobed seconds per step, by category, of each phase kind: {kind: {cat: s}}, from the
    whole phases inside the spans. Python is the phase's time less its other intervals (loop
    overhead included), as the target itself sees it."""
    tot: dict[int, dict] = {}
    for a, b, kind, ivals in phases:
        if not any(lo <= a and b <= hi for lo, hi in spans):
            continue
        d = tot.setdefault(kind, {"steps": 0, "wall": 0, **dict.fromkeys(CATS, 0)})
        d["wall"] += b - a
        for cat, _, x, y in ivals:
            d["steps"] += cat == _unit(kind)
            if cat != "python":
                d[cat] += max(0, y - x - off[cat])
    rates = {}
    for kind, d in tot.items():
        py = d["wall"] - d["simulator"] - d["backend"]
        rates[kind] = {c: (py if c == "python" else d[c]) / max(1, d["steps"]) / 1e9 for c in CATS}
    return rates


def work_shares(items, spans, window) -> dict:
    """The unprobed shares of the work the program did inside the window: its steps there,
    per phase kind, at the unprobed time per step of the spans' whole phases.

    Unlike unprobed_shares, this does not move with where the spans and the window cut the
    phases (a 2 s span holds ~13 phases; one more collect phase in it moved the Simulator
    share by several pp), and it holds the window's own work mix.

    Args:
        items: the target's phase log (with its phase marks).
        spans: [(start_ns, end_ns), ...] unprobed, CLOCK_MONOTONIC.
        window: the summary's window (t0_monotonic_ns, t1_monotonic_ns).
    """
    tot = work_seconds(items, spans, window)
    whole = sum(tot.values())
    return {k: v / whole for k, v in tot.items()}


def work_seconds(items, spans, window) -> dict:
    """work_shares' seconds: the window's steps at the spans' unprobed time per step."""
    phases = _phases(items)
    rates = _phase_rates(phases, interval_costs(items)[0], spans)
    t0, t1 = window["t0_monotonic_ns"], window["t1_monotonic_ns"]
    tot = dict.fromkeys(CATS, 0.0)
    for _, _, kind, ivals in phases:
        steps = sum(1 for cat, _, x, _ in ivals if cat == _unit(kind) and t0 <= x < t1)
        for c in CATS:
            tot[c] += steps * rates[kind][c]
    return tot
