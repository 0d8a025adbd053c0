"""What a category the overhead budget stopped timing cost, estimated from timed windows
(pure Python; fed by rlscope_top/account/accounting.py).

When a category's probes cost too much, the collector counts its calls only (``count``:
entry probes stay) or removes its per-call probes (``off``), and times it again in short
windows now and then (``timed``). The kernel charges what it no longer times to Python.
Here that time is given back:

- per *part* of the Python threads' time: each operation (annotated or sampled), and
  ``<none>`` for time outside every operation, so phases with different costs (an RL
  loop's collect and update) are estimated with their own figures;
- in ``count`` mode from the exact calls and the time per call the windows measured, or,
  where the ticks are placed by call site (below), the on-CPU part from the ticks as in
  ``off`` mode (the calls stay exact);
- in ``off`` mode from the part's time and the category's share of it in the windows,
  with the on-CPU total set by the 250 Hz CPU-clock ticks: where the kernel sampler reads
  the Python threads' frames it places each tick by its call site (a tick anywhere inside
  a torch call is torch's), and the category's share of a part's ticks is its share of the
  part's on-CPU time; elsewhere the ticks that found the threads in the category's own
  libraries, scaled by the ratio of timed ns to ticks in the windows (the ticks see every
  phase of a loop; a few short windows may all land in one); the calls and transitions
  follow that time at the windows' calls per ns of the category (an operation with 1% of its
  time in torch gets the calls of that 1%, not a share of its wall time);
- from windows pooled over the session, the older ones weighing less (half-life
  ``HALF_LIFE_S``), each segment with the windows before it (a closed segment keeps
  the estimate it got when it closed); the segments that closed before the first window
  (the budget steps a category down before it times it) with the windows so far;
- with a 95% bound from the spread between windows, in seconds.

The collector's first stretch counts entries only (probes/loader.py ``count_first``): it has
the calls and none of their time, so it is a ``count`` segment, not a window.

A part whose category has calls but no window yet cannot be estimated: that is said
(``unknown``), never guessed. State is folded as segments close: memory does not grow
with the session (past the few segments before the first window).
"""

from __future__ import annotations

import dataclasses
import math

from ..vocab import NCAT
from ..vocab import NONE_OP as NONE_PART

HALF_LIFE_S = 120.0      # a window this old weighs half as much as a new one
MIN_PART_WINDOW_NS = 50_000_000   # a part with less window time than this uses the pooled figures
PRICE_REL_ERR = 0.5      # a calibrated price against what the probes cost a window: the Intel VM's speed
                         # moves ~1.7x between windows of one session, the traps' cost with it, while the
                         # price taken out stays (docs/accuracy.md, "Estimated calls and their bound")
MIN_WINDOW_TICKS = 20    # window ticks in the category before they scale the ``off`` estimates
T95 = ((1, 12.71), (2, 4.30), (3, 3.18), (4, 2.78), (5, 2.57), (6, 2.45), (7, 2.36), (8, 2.31), (9, 2.26),
       (10, 2.23), (15, 2.13), (20, 2.09), (30, 2.04))   # two-sided Student's t, by degrees of freedom
NTICK = 7                # tick places: python (frames read), backend, simulator, cuda_api, other, kernel, probe trap


def _zero() -> dict:
    return {"ns": [[0, 0] for _ in range(NCAT)], "oh": [0] * NCAT, "calls": [0] * NCAT,
            "trans": [[0] * NCAT for _ in range(NCAT)], "ticks": [0] * NTICK, "ticks_ok": True, "pre": 0}


def _add(into: dict, rec: dict, sign: int = 1) -> None:
    for i in range(NCAT):
        into["ns"][i][0] += sign * rec["ns"][i][0]
        into["ns"][i][1] += sign * rec["ns"][i][1]
        into["oh"][i] += sign * (rec.get("oh") or [0] * NCAT)[i]
        into["calls"][i] += sign * rec["calls"][i]
        for j in range(NCAT):
            into["trans"][i][j] += sign * rec["trans"][i][j]
    into["pre"] = into.get("pre", 0) + sign * (rec.get("pre") or 0)    # a thread's preempted ns (runnable)
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


def _all_ns(d: dict) -> float:
    """All categories' ns of a counter record, less the calibrated probe cost charged in them."""
    return max(0, sum(a + b for a, b in d["ns"]) - sum(d["oh"]))


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
    oh: float = 0.0         # the calibrated probe cost taken out of them
    off_all: float = 0.0    # every category's off-CPU ns in them: the category's share of it is its blocked time's
    calls: float = 0.0
    trans: list = dataclasses.field(default_factory=lambda: [0.0] * NCAT)   # from-category -> c
    ts: int = 0             # when last decayed
    per_all: Spread = dataclasses.field(default_factory=lambda: Spread())   # per window: calls per ns of all time

    @property
    def c(self) -> float:
        return self.c_on + self.c_off

    def decay(self, ts: int) -> None:
        if self.ts and ts > self.ts:
            f = 0.5 ** ((ts - self.ts) / 1e9 / HALF_LIFE_S)
            self.c_on, self.c_off, self.all, self.calls, self.oh = (self.c_on * f, self.c_off * f, self.all * f,
                                                                    self.calls * f, self.oh * f)
            self.off_all *= f
            self.trans = [x * f for x in self.trans]
        self.ts = max(self.ts, ts)

    def add(self, d: dict, ci: int, ts: int) -> None:
        self.decay(ts)
        self.c_on += max(0, d["ns"][ci][0] - d["oh"][ci])
        self.c_off += d["ns"][ci][1]
        self.off_all += sum(off for _, off in d["ns"])
        every = _all_ns(d)
        self.all += every
        self.oh += sum(d["oh"])
        self.calls += d["calls"][ci]
        if every > 0:
            self.per_all.add(every, d["calls"][ci] / every)
        for f in range(NCAT):
            self.trans[f] += d["trans"][f][ci]


@dataclasses.dataclass
class Extra:
    """What the estimates add to a part's category (and take from its Python)."""

    ns: list = dataclasses.field(default_factory=lambda: [0.0, 0.0])
    calls: float = 0.0
    trans: list = dataclasses.field(default_factory=lambda: [0.0] * NCAT)
    unknown: bool = False
    per_ns: float = 0.0      # ``off``: the windows' calls per ns of the category (not summed)
    per_call: list | None = None   # ... and transitions per call

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
    seg_all = _all_ns(seg)
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
    e = Extra([take_on, take_off], extra_calls, [extra_calls * t for t in per_call])
    if mode == "off":
        e.per_ns, e.per_call = (pool.calls / pool.c if pool.c else 0.0), per_call
    return e


def _blocked_share(threads) -> float:
    """The share of threads' off-CPU time in which they were not runnable (blocked, not
    preempted); 1 where their records have no preemption count."""
    off = sum(b for d in threads for _, b in d["ns"])
    pre = sum(d.get("pre", 0) for d in threads)
    return 1.0 - min(1.0, max(0, pre) / off) if off > 0 else 1.0


def _keep_total(extras: dict, total: float) -> None:
    """Scale ``off`` estimates' calls back to the total they had from all of each part's time.

    The ticks give each part its share of the category's time, and its calls follow that
    share. The total stays the one from all time at the windows' calls per ns of all time:
    over 7 demo sessions that total came to 38-52 torch calls a simulator call (median 48)
    against 46.5 timed; calls per ns of the category's own (corrected) time gave 42-66 (median
    58) over 5."""
    after = sum(e.calls for e in extras.values() if e.per_call is not None)
    if after <= 0:
        return
    f = (total - sum(e.calls for e in extras.values() if e.per_call is None)) / after
    for e in extras.values():
        if e.per_call is not None:
            e.calls *= max(0.0, f)
            e.trans = [t * max(0.0, f) for t in e.trans]


@dataclasses.dataclass
class Spread:
    """Spread of the windows' ratios (x / y each: ns per call, share of time, ns per tick),
    for the bound of the pooled ratio sum(x) / sum(y)."""

    n: int = 0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    syy: float = 0.0
    sxy: float = 0.0

    def add(self, weight: float, ratio: float) -> None:
        """One window: ``weight`` (y) and its ratio (x / y)."""
        if weight > 0:
            x = weight * ratio
            self.n += 1
            self.sx, self.sy = self.sx + x, self.sy + weight
            self.sxx, self.syy, self.sxy = self.sxx + x * x, self.syy + weight * weight, self.sxy + x * weight

    def mean(self) -> float:
        return self.sx / self.sy if self.sy > 0 else 0.0

    def se(self) -> float | None:
        """Standard error of the pooled ratio (None with fewer than two windows): the ratio
        estimator's linearised variance, right for windows of unequal size."""
        if self.n < 2 or self.sy <= 0:
            return None
        r = self.mean()
        ss = max(0.0, self.sxx - 2 * r * self.sxy + r * r * self.syy)
        return math.sqrt(ss * self.n / (self.n - 1)) / self.sy

    def k95(self) -> float:
        """Student's t for a 95% bound from ``n`` windows (few windows: wider than 2 se)."""
        dof = max(1, self.n - 1)
        return next((t for d, t in T95 if dof <= d), 1.96)


@dataclasses.dataclass
class BoundParts:
    """What a category's 95% bound is made of. Segments share their windows' figures, so
    those errors add up linearly over segments; only each segment's own tick count is
    independent of the others."""

    var: float = 0.0                      # ns^2: the segments' own tick counts
    basis: dict = dataclasses.field(default_factory=lambda: {"count": 0.0, "off": 0.0})
    tick_ns: float = 0.0                  # ns set by the ticks (times the ns-per-tick error)
    calls: dict = dataclasses.field(default_factory=dict)   # ``off``: per part, the ns its calls were estimated over

    def plus(self, o: BoundParts) -> BoundParts:
        calls = dict(self.calls)
        for k, v in o.calls.items():
            calls[k] = calls.get(k, 0.0) + v
        return BoundParts(self.var + o.var, {k: self.basis[k] + o.basis[k] for k in self.basis},
                          self.tick_ns + o.tick_ns, calls)


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
        self.tick_spread = Spread()                # per window: timed on-CPU ns per tick
        self.win_inv_ticks = 0.0                   # sum of 1 / (a window's ticks): their Poisson part
        self.bound = BoundParts()                  # closed segments' bound
        self.estimated_ns = 0                      # time of the segments estimated so far (closed)
        self.by_sites = False                      # the kernel places Python threads' ticks by call site
        self.pending: list[tuple] = []             # segments closed before the first window
        self.counted_first = False                 # the first stretch counted only: every window is a re-time

    def change(self, new_mode: str, ts: int, threads: dict, ops: dict) -> None:
        """The collector switched the category to ``new_mode`` at ``ts`` (counters as of then)."""
        p, th = parts(threads, ops), by_thread(threads)
        # the collector's first window counts entries only (ProbeSet.count_first): not a timing
        counted = self.mode == "timed" and self._counted_only(p)
        if self.mode == "timed" and not counted:
            self._window(p, th, ts)
        elif counted or not self.windows:
            # nothing to estimate it from yet: it is estimated with the windows that come later
            self.pending.append(((self.snap_parts, self.snap_threads), (p, th), "count" if counted else self.mode))
            self.estimated_ns += max(0, ts - self.ts)
            self.counted_first = self.counted_first or counted
        else:
            ex, ext, b = self._segment((self.snap_parts, self.snap_threads), (p, th), self.mode)
            for k, e in ex.items():
                self.closed[k] = self.closed.get(k, Extra()).plus(e)
            for k, e in ext.items():
                self.closed_threads[k] = self.closed_threads.get(k, Extra()).plus(e)
            self.bound = self.bound.plus(b)
            self.estimated_ns += max(0, ts - self.ts)
        self.mode, self.ts, self.snap_parts, self.snap_threads = new_mode, ts, p, th
        if new_mode != "timed":
            self.base_mode = new_mode

    def _counted_only(self, p: dict) -> bool:
        """Whether the stretch since the session's start had the category's calls but no time
        in it: its exit probes were never attached."""
        if self.windows or self.pending or self.base_mode != "timed":
            return False
        calls = ns = 0
        for name, cur in p.items():
            d = _delta(self.snap_parts.get(name), cur)
            calls += d["calls"][self.ci]
            ns += d["ns"][self.ci][0] + d["ns"][self.ci][1]
        return calls > 0 and ns == 0

    def _window(self, p: dict, th: dict, ts: int) -> None:
        self.windows += 1
        self.window_ns += max(0, ts - self.ts)
        whole = _zero()
        for name, cur in p.items():
            d = _delta(self.snap_parts.get(name), cur)
            self.pools.setdefault(name, Pool()).add(d, self.ci, ts)
            _add(whole, d)
        ticks = 0
        for tid, cur in th.items():
            d = _delta(self.snap_threads.get(tid), cur)
            self.thread_pools.setdefault(tid, Pool()).add(d, self.ci, ts)
            ticks += d["ticks"][self.ci]
        self.win_ticks += ticks
        on_ns = max(0, whole["ns"][self.ci][0] - whole["oh"][self.ci])
        self.win_on_ns += on_ns
        if ticks:
            self.tick_spread.add(ticks, on_ns / ticks)
            self.win_inv_ticks += 1.0 / ticks
        self.pooled.add(whole, self.ci, ts)
        one = Pool()
        one.add(whole, self.ci, ts)
        if one.calls:
            self.spread["count"].add(one.calls, one.c / one.calls)
        if one.all:
            self.spread["off"].add(one.all, one.c / one.all)

    def _pool_for(self, key, pools: dict, seg: dict | None = None) -> Pool:
        """A part's own windows where they hold MIN_PART_WINDOW_NS, else the pooled ones; and the
        pooled ones for a ``count`` segment with calls its own windows never saw (a few calls
        sample and hold put in the wrong phase made a whole phased session's Simulator n/a)."""
        p = pools.get(key)
        if p is None or p.all < MIN_PART_WINDOW_NS:
            return self.pooled
        return self.pooled if seg is not None and seg["calls"][self.ci] > 0 and p.calls <= 0 else p

    def _segment(self, start: tuple[dict, dict], end: tuple[dict, dict], mode: str,
                 whole: tuple[dict, dict] | None = None) -> tuple[dict, dict, BoundParts]:
        """Estimates of one segment in ``mode`` between two (parts, threads) counter snapshots,
        and what its 95% bound is made of. ``whole``: the counters until now, for a segment
        before the first window (its ticks may be too few to place)."""
        dp = {name: _delta(start[0].get(name), cur) for name, cur in end[0].items()}
        dt = {tid: _delta(start[1].get(tid), cur) for tid, cur in end[1].items()}
        counted = mode == "count"
        ex = {name: estimate(self._pool_for(name, self.pools, d if counted else None), d, self.ci, mode)
              for name, d in dp.items()}
        ext = {tid: estimate(self._pool_for(tid, self.thread_pools, d if counted else None), d, self.ci, mode)
               for tid, d in dt.items()}
        b = BoundParts()
        if counted:
            basis = sum(d["calls"][self.ci] for d in dp.values())
        else:
            b.calls = {name: _all_ns(d) for name, d in dp.items()}    # ``off``: what each part's calls rest on
            basis = sum(b.calls.values())
        if self._scale_by_ticks(ex, ext, dp, dt, b, mode, whole or ({}, {})):
            on, off = sum(e.ns[0] for e in ex.values()), sum(e.ns[1] for e in ex.values())
            basis *= off / (on + off) if on + off > 0 else 0.0    # the share sets the off-CPU part only
        b.basis[mode] = basis
        return ex, ext, b

    def _scale_by_ticks(self, ex: dict, ext: dict, dp: dict, dt: dict, b: BoundParts, mode: str,
                        whole: tuple[dict, dict]) -> bool:
        """Set the segment's on-CPU estimate to what the ticks say, per thread and per part
        (each within its own Python on-CPU time), and its bound's parts in ``b``. Returns
        whether the ticks were used.

        In ``count`` mode only ticks placed by call site replace the estimate from the exact
        calls (their time per call comes from windows with the calibrated cost taken out:
        4-6 pp off on the phased trainer's simulator); elsewhere the calls' estimate stays."""
        if mode == "count" and not (self.by_sites and all(d["ticks_ok"] for d in dp.values())):
            return False
        windows = mode == "off" and self.win_ticks >= MIN_WINDOW_TICKS and self.win_on_ns > 0
        if not windows and not self.by_sites:
            return False
        ns_per_tick = self.win_on_ns / self.win_ticks if windows else None
        calls_before = sum(e.calls for e in ex.values())
        scaled, seg_ticks, site_var, total = 0.0, 0, 0.0, 0.0
        for tid, d in dt.items():
            e = ext.get(tid)
            ns, var = self._tick_ns(d, ns_per_tick, whole[1].get(tid))
            if e is None or ns is None:
                continue
            self._place(e, d, ns, var, self._pool_for(tid, self.thread_pools), _blocked_share([d]))
            total += ns
            if var is None:
                scaled += ns
                seg_ticks += d["ticks"][self.ci]
            else:
                site_var += var
        if all(d["ticks_ok"] for d in dp.values()):      # each part by its own ticks
            blocked = _blocked_share(dt.values())
            for name, e in ex.items():
                ns, var = self._tick_ns(dp[name], ns_per_tick, whole[0].get(name))
                if ns is not None:
                    self._place(e, dp[name], ns, var, self._pool_for(name, self.pools), blocked)
        else:
            have = sum(e.ns[0] for e in ex.values())          # older records: in proportion
            f = total / have if have > 0 else 0.0
            for name, e in ex.items():
                e.ns[0] = min(e.ns[0] * f, dp[name]["ns"][0][0])
        _keep_total(ex, calls_before)
        # the parts split the Python threads' time by phase, each with its own windows where it has
        # them; a thread's pool mixes the phases its few windows landed in (the phased trainer's
        # threads read 62k simulator calls where its parts read 75k): the threads take the parts' total
        _keep_total(ext, sum(e.calls for e in ex.values()))   # ex always has <none>
        b.var = 4 * site_var
        if seg_ticks > 0:
            b.var += (2 * scaled) ** 2 * self._segment_rel_var(seg_ticks)
        elif ns_per_tick is not None and not site_var:
            b.var += (2 * ns_per_tick) ** 2                   # no tick yet: one tick's worth
        b.tick_ns = scaled
        return True

    def _place(self, e: Extra, d: dict, ns: float, var: float | None, pool: Pool, blocked: float) -> None:
        """Set an estimate's on-CPU part from the ticks. Placed by call site (``var`` given) it
        is a measurement that needs no window, and its off-CPU part comes from ``_off_cpu``."""
        e.ns[0] = ns
        if var is not None:
            e.ns[1] = self._off_cpu(ns, d["ns"][0][1], pool, blocked)
            e.unknown = False
        if e.per_call is not None:   # off: the calls follow the tick-placed time (_keep_total keeps their sum)
            e.calls = (e.ns[0] + e.ns[1]) * e.per_ns
            e.trans = [e.calls * t for t in e.per_call]

    def _off_cpu(self, on_ns: float, py_off: float, pool: Pool, blocked: float) -> float:
        """A site-placed estimate's off-CPU part, out of the ``py_off`` ns its thread spent off CPU
        while charged to Python; ``blocked``: the threads' share of off-CPU time not runnable.

        - Runnable (preempted on a busy machine): at most the on-CPU part times the category's
          own off/on ratio in all windows. A part's windows place time by sample and hold, so
          operations that alternate faster than the samples share their ratio; the whole pool's
          is the category's, and a part whose ticks never found the category gets none.
        - Blocked (OpenMP's barrier inside torch with more threads than cores, a lock): the
          category's share of all off-CPU time in the part's windows (``pool``), where Python's
          own waits (a queue, a pipe) show as Python's. The ratio took too little of it: per
          part the ratios spread 0-2x, and each part is capped at its own time (rl-games' PPO
          left ~1 s of 12 in Python, which exact mode read as Backend).
        """
        p = self.pooled
        ratio = p.c_off / p.c_on if p.c_on > 0 else 0.0
        share = pool.c_off / pool.off_all if pool.off_all > 0 else 0.0   # two untimed categories: <= 1 together
        blocked_ns = blocked * py_off
        off = min(on_ns * ratio, py_off - blocked_ns) + (share * blocked_ns if on_ns > 0 else 0.0)
        return min(off, py_off)

    def _tick_ns(self, d: dict, ns_per_tick: float | None, whole: dict | None = None) -> tuple[float | None, float | None]:
        """A part's on-CPU ns in the category by its ticks, and the variance of that when its
        ticks were placed by call site (None: scaled by the windows' ns per tick instead).

        A thread that runs Python (ticks in the interpreter) has its ticks placed by call site
        in the kernel: a tick inside a torch call counts as torch whichever library it is in.
        Its ticks are then a sample of its on-CPU time, and their share is the category's,
        with no window and no calibrated probe cost in it. Other threads' ticks see only the
        category's own libraries, which the windows' ns per tick scales."""
        ticks, cap = d["ticks"][self.ci], d["ns"][0][0]
        for src in (d, whole):    # a pending stretch too short for placed ticks of its own: the part's share until now
            if src is not None and self.by_sites and (src["ticks"][0] > 0 or src["ticks"][self.ci] > 0):
                every, on = sum(src["ticks"]), sum(x[0] for x in d["ns"])
                p = src["ticks"][self.ci] / every
                return min(p * on, cap), on * on * p * (1 - p) / every
        if ns_per_tick is None:
            return None, None
        return min(ticks * ns_per_tick, cap), None

    def _segment_rel_var(self, seg_ticks: int) -> float:
        """A segment's own relative variance: its tick count (Poisson), and how far a stretch's
        ns per tick strays from the mean beyond the windows' own Poisson noise, less in a
        longer segment (it averages more stretches)."""
        sp, n = self.tick_spread, self.tick_spread.n
        own = 1.0 / seg_ticks
        if n < 2 or sp.mean() <= 0:
            return own
        per_window = (sp.se() / sp.mean()) ** 2 * n        # a window's relative variance
        between = max(0.0, per_window - self.win_inv_ticks / n)
        return own + between * min(1.0, (sp.sy / n) / seg_ticks)

    def _tick_rel_se(self) -> float:
        """Relative standard error of the windows' ns per tick: from their spread when there
        are two or more (an RL loop's phases differ), else from their tick count."""
        sp = self.tick_spread
        se = sp.se()
        if se is None or sp.mean() <= 0:
            return 1.0 / math.sqrt(self.win_ticks) if self.win_ticks else 1.0
        return sp.k95() / 2 * se / sp.mean()

    def _bound_ns(self, b: BoundParts) -> float:
        var = b.var + (2 * self._tick_rel_se() * b.tick_ns) ** 2
        for mode, basis in b.basis.items():
            se = self.spread[mode].se()
            var += (self.spread[mode].k95() * se * basis) ** 2 if se is not None else 0.0
        return math.sqrt(var)

    def _calls_bound(self, b: BoundParts) -> float | None:
        """Bound (aimed at 95%) on the calls estimated in ``off`` segments, None while no pool
        has two windows. A part's calls are its time times its windows' calls per ns of all
        time, a ratio the host's speed moves between windows (docs/accuracy.md, "Estimated
        calls and their bound"). Two terms:

        - the windows' spread, as a prediction: a part with ``basis`` ns off and ``sy`` ns of
          windows has (basis^2 + basis * sy) * se^2 (the stretches' own ratio strays too);
          parts add in quadrature;
        - a price up to PRICE_REL_ERR off what the traps cost: the windows' time is the probed
          time less that price, so the ratio moves by up to PRICE_REL_ERR / (1 - PRICE_REL_ERR)
          times the price's share of it; one price for all, so added linearly, as a bias."""
        var, price, known = 0.0, 0.0, False
        for name, basis in b.calls.items():
            pool = self._pool_for(name, self.pools)
            sp = pool.per_all if pool.per_all.n >= 2 else self.pooled.per_all
            se = sp.se()
            if se is None:
                continue
            known = True
            var += (sp.k95() * se) ** 2 * (basis * basis + basis * sp.sy)
            if pool.all > 0:
                price += PRICE_REL_ERR / (1 - PRICE_REL_ERR) * pool.oh / pool.all * basis * pool.calls / pool.all
        return math.sqrt(var) + price if known else (0.0 if not b.calls else None)

    def now(self, threads: dict, ops: dict, ts: int) -> tuple[dict[str, Extra], dict[int, Extra], float | None,
                                                               float | None]:
        """Per part and per thread, everything estimated so far (closed segments plus the open
        one), the 95% bound in ns (None while fewer than two windows say how they spread) and
        the bound on the estimated calls (``_calls_bound``)."""
        ex, ext, b = dict(self.closed), dict(self.closed_threads), self.bound
        now = parts(threads, ops), by_thread(threads)
        segs = [self._segment(start, end, mode, now) for start, end, mode in self.pending]
        if self.mode != "timed":
            segs.append(self._segment((self.snap_parts, self.snap_threads), now, self.mode))
        for open_ex, open_ext, ob in segs:
            for k, e in open_ex.items():
                ex[k] = ex.get(k, Extra()).plus(e)
            for k, e in open_ext.items():
                ext[k] = ext.get(k, Extra()).plus(e)
            b = b.plus(ob)
        known = (any(s.se() is not None for s in self.spread.values()) or self.tick_spread.se() is not None
                 or (self.by_sites and b.var > 0))
        return ex, ext, self._bound_ns(b) if known else None, self._calls_bound(b)

    def estimated_s(self, ts: int) -> float:
        """Seconds of the session this category was estimated (not timed) so far."""
        return (self.estimated_ns + (max(0, ts - self.ts) if self.mode != "timed" else 0)) / 1e9
