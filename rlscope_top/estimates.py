"""What a category the overhead budget stopped timing cost, estimated from timed windows
(pure Python; fed by rlscope_top/accounting.py).

When a category's probes cost too much, the collector counts its calls only (``count``:
entry probes stay) or removes its per-call probes (``off``), and times it again in short
windows now and then (``timed``). The kernel charges what it no longer times to Python.
Here that time is given back:

- per *part* of the Python threads' time: each operation (annotated or sampled), and
  ``<none>`` for time outside every operation, so phases with different costs (an RL
  loop's collect and update) are estimated with their own figures;
- in ``count`` mode from the exact calls and the time per call the windows measured;
- in ``off`` mode from the part's time and the category's share of it in the windows,
  with the on-CPU total set by the 250 Hz CPU-clock ticks that found the Python threads in
  the category's libraries, scaled by the ratio of timed ns to ticks in the windows (the
  ticks see every phase of a loop; a few short windows may all land in one);
- from windows pooled over the session, the older ones weighing less (half-life
  ``HALF_LIFE_S``), each segment with the windows before it (a closed segment keeps
  the estimate it got when it closed);
- with a 95% bound from the spread between windows, in seconds.

A part whose category has calls but no window yet cannot be estimated: that is said
(``unknown``), never guessed. State is folded as segments close: memory does not grow
with the session.
"""

from __future__ import annotations

import dataclasses
import math

HALF_LIFE_S = 120.0      # a window this old weighs half as much as a new one
MIN_PART_WINDOW_NS = 50_000_000   # a part with less window time than this uses the pooled figures
MIN_WINDOW_TICKS = 20    # window ticks in the category before they scale the ``off`` estimates
NONE_PART = "<none>"
NCAT = 4
NTICK = 6                # tick places: unused, backend, simulator, cuda_api, other, kernel


def _zero() -> dict:
    return {"ns": [[0, 0] for _ in range(NCAT)], "oh": [0] * NCAT, "calls": [0] * NCAT,
            "trans": [[0] * NCAT for _ in range(NCAT)], "ticks": [0] * NTICK, "ticks_ok": True}


def _add(into: dict, rec: dict, sign: int = 1) -> None:
    for i in range(NCAT):
        into["ns"][i][0] += sign * rec["ns"][i][0]
        into["ns"][i][1] += sign * rec["ns"][i][1]
        into["oh"][i] += sign * (rec.get("oh") or [0] * NCAT)[i]
        into["calls"][i] += sign * rec["calls"][i]
        for j in range(NCAT):
            into["trans"][i][j] += sign * rec["trans"][i][j]
    ticks = rec.get("ticks")
    if ticks is None:
        into["ticks_ok"] = False
    else:
        for i in range(min(NTICK, len(ticks))):
            into["ticks"][i] += sign * ticks[i]
    into["ticks_ok"] = into["ticks_ok"] and rec.get("ticks_ok", True)


def parts(threads: dict, ops: dict) -> dict[str, dict]:
    """Cumulative counters of the Python threads split into operations and ``<none>``."""
    py = _zero()
    for th in threads.values():
        if th.get("py"):
            _add(py, th)
    out: dict[str, dict] = {}
    for o in ops.values():
        _add(out.setdefault(o["name"], _zero()), o)
    none = _zero()
    _add(none, py)
    for rec in out.values():
        _add(none, rec, -1)
        none["ticks_ok"] = none["ticks_ok"] and rec["ticks_ok"]
    out[NONE_PART] = _clamped(none)
    return out


def _ticks(th: dict, ci: int) -> int:
    t = th.get("ticks")
    return t[ci] if t and ci < len(t) else 0


def by_thread(threads: dict) -> dict[int, dict]:
    """Cumulative counters of each Python thread (the thread rows' parts)."""
    return {tid: th for tid, th in threads.items() if th.get("py")}


def _clamped(rec: dict) -> dict:
    rec["ns"] = [[max(0, a), max(0, b)] for a, b in rec["ns"]]
    rec["oh"] = [max(0, x) for x in rec["oh"]]
    rec["calls"] = [max(0, x) for x in rec["calls"]]
    rec["trans"] = [[max(0, x) for x in row] for row in rec["trans"]]
    rec["ticks"] = [max(0, x) for x in rec["ticks"]]
    return rec


def _delta(a: dict | None, b: dict) -> dict:
    d = _zero()
    _add(d, b)
    if a is not None:
        _add(d, a, -1)
    return _clamped(d)


@dataclasses.dataclass
class Pool:
    """Window figures of one part for one category (decayed sums)."""

    c_on: float = 0.0       # the category's corrected on-CPU ns
    c_off: float = 0.0
    all: float = 0.0        # all categories' corrected ns
    calls: float = 0.0
    trans: list = dataclasses.field(default_factory=lambda: [0.0] * NCAT)   # from-category -> c
    ts: int = 0             # when last decayed

    @property
    def c(self) -> float:
        return self.c_on + self.c_off

    def decay(self, ts: int) -> None:
        if self.ts and ts > self.ts:
            f = 0.5 ** ((ts - self.ts) / 1e9 / HALF_LIFE_S)
            self.c_on, self.c_off, self.all, self.calls = (self.c_on * f, self.c_off * f, self.all * f,
                                                           self.calls * f)
            self.trans = [x * f for x in self.trans]
        self.ts = max(self.ts, ts)

    def add(self, d: dict, ci: int, ts: int) -> None:
        self.decay(ts)
        self.c_on += max(0, d["ns"][ci][0] - d["oh"][ci])
        self.c_off += d["ns"][ci][1]
        self.all += max(0, sum(a + b for a, b in d["ns"]) - sum(d["oh"]))
        self.calls += d["calls"][ci]
        for f in range(NCAT):
            self.trans[f] += d["trans"][f][ci]


@dataclasses.dataclass
class Extra:
    """What the estimates add to a part's category (and take from its Python)."""

    ns: list = dataclasses.field(default_factory=lambda: [0.0, 0.0])
    calls: float = 0.0
    trans: list = dataclasses.field(default_factory=lambda: [0.0] * NCAT)
    unknown: bool = False

    def plus(self, o: Extra) -> Extra:
        return Extra([self.ns[0] + o.ns[0], self.ns[1] + o.ns[1]], self.calls + o.calls,
                     [a + b for a, b in zip(self.trans, o.trans)], self.unknown or o.unknown)


def estimate(pool: Pool, seg: dict, ci: int, mode: str) -> Extra:
    """The category's share of one segment of a part, from the part's (or pooled) windows.

    Args:
        pool: window figures to use.
        seg: the segment's counters (delta) for the part.
        ci: category index.
        mode: ``count`` (calls exact) or ``off`` (nothing of the category counted).
    """
    py_on, py_off = seg["ns"][0]
    seg_all = max(0, sum(a + b for a, b in seg["ns"]) - sum(seg["oh"]))
    if mode == "count":
        calls = seg["calls"][ci]
        if not calls:
            return Extra()
        if pool.calls <= 0:
            return Extra(unknown=True)
        ns, extra_calls = calls * pool.c / pool.calls, 0.0
    else:
        if pool.all <= 0:
            return Extra(unknown=seg_all > 0)
        ns, extra_calls = seg_all * pool.c / pool.all, seg_all * pool.calls / pool.all
    on_frac = pool.c_on / pool.c if pool.c else 1.0
    take_on = min(ns * on_frac, py_on)
    take_off = min(ns - take_on, py_off)
    per_call = [t / pool.calls for t in pool.trans] if pool.calls else [0.0] * NCAT
    return Extra([take_on, take_off], extra_calls, [extra_calls * t for t in per_call])


@dataclasses.dataclass
class Spread:
    """Weighted spread of the windows' ratios, for the bound (Welford-style sums)."""

    n: int = 0
    w: float = 0.0
    wr: float = 0.0
    wr2: float = 0.0

    def add(self, weight: float, ratio: float) -> None:
        if weight > 0:
            self.n += 1
            self.w += weight
            self.wr += weight * ratio
            self.wr2 += weight * ratio * ratio

    def se(self) -> float | None:
        """Standard error of the weighted mean ratio (None with fewer than two windows)."""
        if self.n < 2 or self.w <= 0:
            return None
        mean = self.wr / self.w
        var = max(0.0, self.wr2 / self.w - mean * mean) * self.n / (self.n - 1)
        return math.sqrt(var / self.n)


class CategoryEstimate:
    """The running estimate of one category, fed at each of its mode changes."""

    def __init__(self, ci: int, t0: int):
        self.ci = ci
        self.mode, self.ts = "timed", t0
        self.base_mode = "timed"           # the mode between windows (count or off)
        self.snap_parts: dict[str, dict] = {}
        self.snap_threads: dict[int, dict] = {}
        self.pools: dict[str, Pool] = {}
        self.thread_pools: dict[int, Pool] = {}
        self.pooled = Pool()
        self.closed: dict[str, Extra] = {}          # estimates of closed segments, per part
        self.closed_threads: dict[int, Extra] = {}
        self.windows = 0
        self.window_ns = 0
        self.spread = {"count": Spread(), "off": Spread()}   # per window: ns per call, share of time
        self.win_on_ns = 0.0                       # windows: the category's timed on-CPU ns ...
        self.win_ticks = 0                         # ... and the ticks that found it there
        self.var_ns2 = 0.0                         # closed segments' bound, squared
        self.estimated_ns = 0                      # time of the segments estimated so far (closed)

    def change(self, new_mode: str, ts: int, threads: dict, ops: dict) -> None:
        """The collector switched the category to ``new_mode`` at ``ts`` (counters as of then)."""
        p, th = parts(threads, ops), by_thread(threads)
        if self.mode == "timed":
            self._window(p, th, ts)
        else:
            ex, ext, var = self._segment(p, th)
            for k, e in ex.items():
                self.closed[k] = self.closed.get(k, Extra()).plus(e)
            for k, e in ext.items():
                self.closed_threads[k] = self.closed_threads.get(k, Extra()).plus(e)
            self.var_ns2 += var
            self.estimated_ns += max(0, ts - self.ts)
        self.mode, self.ts, self.snap_parts, self.snap_threads = new_mode, ts, p, th
        if new_mode != "timed":
            self.base_mode = new_mode

    def _window(self, p: dict, th: dict, ts: int) -> None:
        self.windows += 1
        self.window_ns += max(0, ts - self.ts)
        whole = _zero()
        for name, cur in p.items():
            d = _delta(self.snap_parts.get(name), cur)
            self.pools.setdefault(name, Pool()).add(d, self.ci, ts)
            _add(whole, d)
        for tid, cur in th.items():
            self.thread_pools.setdefault(tid, Pool()).add(_delta(self.snap_threads.get(tid), cur), self.ci, ts)
            self.win_ticks += max(0, _ticks(cur, self.ci) - _ticks(self.snap_threads.get(tid) or {}, self.ci))
        self.win_on_ns += max(0, whole["ns"][self.ci][0] - whole["oh"][self.ci])
        self.pooled.add(whole, self.ci, ts)
        one = Pool()
        one.add(whole, self.ci, ts)
        if one.calls:
            self.spread["count"].add(one.calls, one.c / one.calls)
        if one.all:
            self.spread["off"].add(one.all, one.c / one.all)

    def _pool_for(self, key, pools: dict) -> Pool:
        p = pools.get(key)
        return p if p is not None and p.all >= MIN_PART_WINDOW_NS else self.pooled

    def _segment(self, p: dict, th: dict) -> tuple[dict, dict, float]:
        """Estimates of the open segment (from the last change to these counters), and the
        square of its 95% bound in ns."""
        ex, basis = {}, 0.0
        for name, cur in p.items():
            d = _delta(self.snap_parts.get(name), cur)
            ex[name] = estimate(self._pool_for(name, self.pools), d, self.ci, self.mode)
            basis += d["calls"][self.ci] if self.mode == "count" else \
                max(0, sum(a + b for a, b in d["ns"]) - sum(d["oh"]))
        ext = {tid: estimate(self._pool_for(tid, self.thread_pools), _delta(self.snap_threads.get(tid), cur),
                             self.ci, self.mode) for tid, cur in th.items()}
        if self.mode == "off":
            self._scale_by_ticks(ex, ext, p, th)
        se = self.spread[self.mode].se()
        return ex, ext, (2 * se * basis) ** 2 if se is not None else 0.0

    def _scale_by_ticks(self, ex: dict, ext: dict, p: dict, th: dict) -> None:
        """Set the segment's on-CPU estimate to what the ticks say, per thread and in total
        (the parts keep their proportions, each within its own Python on-CPU time)."""
        if self.win_ticks < MIN_WINDOW_TICKS or self.win_on_ns <= 0:
            return
        ns_per_tick = self.win_on_ns / self.win_ticks
        total = 0.0
        for tid, cur in th.items():
            d = _delta(self.snap_threads.get(tid), cur)
            ticks = max(0, _ticks(cur, self.ci) - _ticks(self.snap_threads.get(tid) or {}, self.ci))
            e = ext.get(tid)
            if e is not None:
                e.ns[0] = min(ticks * ns_per_tick, d["ns"][0][0])
                total += e.ns[0]
        deltas = {name: _delta(self.snap_parts.get(name), p[name]) for name in ex}
        if all(d["ticks_ok"] for d in deltas.values()):      # each part by its own ticks
            for name, e in ex.items():
                d = deltas[name]
                e.ns[0] = min(d["ticks"][self.ci] * ns_per_tick, d["ns"][0][0])
            return
        have = sum(e.ns[0] for e in ex.values())              # older records: in proportion
        if have <= 0:
            return
        f = total / have
        for name, e in ex.items():
            e.ns[0] = min(e.ns[0] * f, deltas[name]["ns"][0][0])

    def now(self, threads: dict, ops: dict, ts: int) -> tuple[dict[str, Extra], dict[int, Extra], float | None]:
        """Per part and per thread, everything estimated so far (closed segments plus the open
        one), and the 95% bound in ns (None while fewer than two windows say how they spread)."""
        ex, ext, var = dict(self.closed), dict(self.closed_threads), self.var_ns2
        if self.mode != "timed":
            open_ex, open_ext, v = self._segment(parts(threads, ops), by_thread(threads))
            for k, e in open_ex.items():
                ex[k] = ex.get(k, Extra()).plus(e)
            for k, e in open_ext.items():
                ext[k] = ext.get(k, Extra()).plus(e)
            var += v
        known = any(s.se() is not None for s in self.spread.values())
        return ex, ext, math.sqrt(var) if known else None

    def estimated_s(self, ts: int) -> float:
        """Seconds of the session this category was estimated (not timed) so far."""
        return (self.estimated_ns + (max(0, ts - self.ts) if self.mode != "timed" else 0)) / 1e9
