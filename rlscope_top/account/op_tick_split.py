"""Sampled operations' category split from their own ticks (pure Python).

A sampled operation's time is placed by sample and hold: the time between two samples goes
to the operation the first one named. That is unbiased for how long each operation ran, but
not for what ran inside it. When operations alternate faster than the samples, each one's
held time is a mix of all of them: in exact mode the demo's `simulation` read 40% torch, and a
pure-Python function beside a torch one read 43%.

Where the kernel samples every CPU-clock tick and places it by call site (its stack
sampler), each tick names its own operation and category. That is an unbiased sample of the
split inside each operation. So the on-CPU split of the sampled rows is refit:
- it starts from each row's held time shared out by its ticks (a few pseudo-ticks of its held
  split keep a row with few ticks near where it was);
- it is then scaled (iterative proportional fitting) until each row keeps its held on-CPU
  time, and each category keeps its exact total over these rows.

Calls and transitions into a category follow the rows' new time in it. The ``off`` and
``count`` estimates already place their category's time by the ticks
(rlscope_top/account/estimates.py); this does the same for the timed categories.

The probes' cost has the same problem. The kernel charges a trap's cost to the operation
held when it fires, so a row held across another's torch calls is charged for their traps.
In exact mode that took 21% of the time out of gymnasium's `simulation` in a CleanRL-style
PPO (14.7% read as 10.3-11.7%), and gave it to the torch-calling rows. So the fit is made on
the time as the ticks saw it, the cost left in, and each category's cost is then taken out of
the rows by the ticks that found them in a probe's trap.
"""

from __future__ import annotations

from ..vocab import CATEGORIES, NCAT

PYTHON = CATEGORIES.index("python")
TICK_TRAP = 6            # the ticks' place "in a probe's trap" (probes/bpf_program.c TICK_TRAP)

PRIOR_TICKS = 5          # pseudo-ticks of the held split in each row's starting point
ITERATIONS = 200
TOLERANCE = 1e-6         # relative: rows and columns this close to their totals are done


def split_by_ticks(rows: list[dict]) -> bool:
    """Refit the on-CPU category split (and calls, transitions) of sampled rows in place.

    Args:
        rows: raw operation rows (rlscope_top/account/operations.py) with ``ticks``: the
            operation's tick counts by place (python, backend, simulator, cuda_api, ...).

    Returns:
        Whether the rows were refit (two or more sampled rows with ticks).
    """
    picked = [r for r in rows if r.get("source") == "sampled" and r.get("ticks")]
    if len(picked) < 2:
        return False
    cost = [list(r.get("oh") or [0.0] * NCAT) for r in picked]
    held = [[r["ns"][c][0] + k[i] for i, c in enumerate(CATEGORIES)] for r, k in zip(picked, cost)]
    row_tot = [sum(h) for h in held]
    col_tot = [sum(h[i] for h in held) for i in range(NCAT)]
    fit = _ipf([_seed(h, r["ticks"]) for h, r in zip(held, picked)], row_tot, col_tot)
    _follow(picked, fit, col_tot)
    _take_cost(fit, cost, [r["calls"] for r in picked],
               [r["ticks"][TICK_TRAP] if len(r["ticks"]) > TICK_TRAP else 0 for r in picked])
    for r, new in zip(picked, fit):
        for i, c in enumerate(CATEGORIES):
            r["ns"][c][0] = new[i]
    return True


def _take_cost(fit: list[list[float]], cost: list[list[float]], calls: list[list[int]],
               traps: list[int]) -> None:
    """Take each category's probe cost out of the fitted rows, never below zero.

    A row's share of the cost is its share of the ticks that found a thread in a probe's trap
    (each tick names its own operation), with PRIOR_TICKS pseudo-ticks shared by its calls
    priced by their kind (each row's share of the cost inside their timestamps). Calls follow
    time, which gives too many to a row whose calls are long: torch's backward. The cost
    inside a native category's timestamps goes to the rows with calls into it, by that share
    and their calls' mix. What the rows cannot give comes from the others, in proportion to
    their time in the category. Where no row has a probed call or a trap, each row pays what
    the kernel charged it.
    """
    native = [i for i in range(NCAT) if i != PYTHON]
    n_calls = [sum(c[i] for c in calls) for i in range(NCAT)]
    row_native = [sum(c[j] for j in native) for c in calls]
    owed_all = [sum(k[i] for k in cost) for i in range(NCAT)]
    priced = [sum(c[j] * owed_all[j] / n_calls[j] for j in native if n_calls[j]) for c in calls]
    if not sum(priced):
        priced = row_native
    whole = sum(priced)
    share = [t + (PRIOR_TICKS * p / whole if whole else 0.0) for t, p in zip(traps, priced)]
    for i in range(NCAT):
        owed = owed_all[i]
        if owed <= 0:
            continue
        weights = share
        if i != PYTHON and n_calls[i]:
            weights = [w * c[i] / max(1, n) for w, c, n in zip(share, calls, row_native)]
        if sum(weights):
            owed = _pay(fit, i, owed, weights)
        else:
            for f, k in zip(fit, cost):
                t = min(f[i], k[i])
                f[i] -= t
                owed -= t
        _pay(fit, i, owed, [f[i] for f in fit])


def _pay(fit: list[list[float]], i: int, owed: float, weights: list[float]) -> float:
    """Take ``owed`` ns of category ``i`` from the rows in proportion to ``weights``, none
    below zero; returns what is left unpaid (no row with weight has time left)."""
    open_rows = {j for j, w in enumerate(weights) if w > 0}
    while owed > TOLERANCE and open_rows:
        w = sum(weights[j] for j in open_rows)
        took = 0.0
        for j in list(open_rows):
            t = min(fit[j][i], owed * weights[j] / w)
            fit[j][i] -= t
            took += t
            if fit[j][i] <= 0:
                open_rows.discard(j)
        owed -= took
    return max(0.0, owed)


def _seed(held: list[float], ticks: list[int]) -> list[float]:
    """A row's held on-CPU time shared out by its ticks, with PRIOR_TICKS of its held split."""
    total = sum(held)
    if total <= 0:
        return [0.0] * NCAT
    t = [max(0, x) for x in ticks[:NCAT]]
    n = sum(t) + PRIOR_TICKS
    return [total * (t[i] + PRIOR_TICKS * held[i] / total) / n for i in range(NCAT)]


def _ipf(m: list[list[float]], row_tot: list[float], col_tot: list[float]) -> list[list[float]]:
    """Scale ``m`` until its rows sum to ``row_tot`` and its columns to ``col_tot``."""
    for _ in range(ITERATIONS):
        for j in range(NCAT):
            s = sum(r[j] for r in m)
            f = col_tot[j] / s if s > 0 else 0.0
            for r in m:
                r[j] *= f
        done = True
        for r, want in zip(m, row_tot):
            s = sum(r)
            if s > 0:
                done = done and abs(s - want) <= TOLERANCE * max(want, 1.0)
                f = want / s
                r[:] = [x * f for x in r]
        if done:
            break
    return m


def _follow(rows: list[dict], fit: list[list[float]], col_tot: list[float]) -> None:
    """Calls into a category, and transitions into it, follow the rows' time in it."""
    for i in range(NCAT):
        if col_tot[i] <= 0:          # no time in it here: its calls stay where they were counted
            continue
        w = [f[i] for f in fit]
        for r, n in zip(rows, apportion(sum(r["calls"][i] for r in rows), w)):
            r["calls"][i] = n
        for a in range(NCAT):
            for r, n in zip(rows, apportion(sum(r["trans"][a][i] for r in rows), w)):
                r["trans"][a][i] = n


def apportion(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` into integers that add up to it
    (largest remainder)."""
    s = sum(weights)
    if total <= 0 or s <= 0:
        return [0] * len(weights)
    exact = [total * w / s for w in weights]
    out = [int(x) for x in exact]
    for k in sorted(range(len(exact)), key=lambda k: out[k] - exact[k])[:total - sum(out)]:
        out[k] += 1
    return out
