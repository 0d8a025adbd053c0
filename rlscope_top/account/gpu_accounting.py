"""GPU accounting: what the GPU activity adds up to (pure Python + numpy, no bcc; numpy only once
there is GPU activity).

Collector side, :class:`GpuTotals` takes joined activity arrays (rlscope_top/collect/gpu_join.py),
NVML samples, synchronize times and the counters records the collector writes, and
turns them into one cumulative ``gtot`` ring record per tick: so a reader that starts
late, or loses records to a lapped ring, still has every GPU figure. The reader side
(the latest ``gtot`` and what it adds up to) is rlscope_top/account/gpu_figures.py.

- GPU-bound time is the union of activity intervals (kernels, memcpys, memsets),
  overall, per operation and per device, kept as busy time per 10 ms bin for the last
  minute and as a running total before that: memory does not grow with the session.
  Intervals may arrive out of order within ``REORDER_NS``; later ones are still binned,
  capped at the bin length, and counted in ``late``.
- The CPU side of the overlap comes from the counters records: the Python threads'
  on-CPU time per collector tick, and each operation's on-CPU and wall time per tick.
  A tick's overlap is computed once the GPU side of it can no longer change.
"""

from __future__ import annotations

import collections
import dataclasses

from ..ring import gpu_records as G
from ..vocab import OVERLAP_KEYS

BIN_NS = 10_000_000
REORDER_NS = 3_000_000_000      # GPU records reach the monitor ~0.5-1.5 s after they happen
KEEP_NS = 60_000_000_000        # bins kept for windows (the screen's "now", unfinished ticks)
PENDING_MAX = 200_000
NVML_KEEP = 4096                # recent samples kept per series (for windows); totals keep everything
TOP_N = 20
# The agent's records come from the target, so times and ids are checked: none ends in the
# future (records arrive late, never early), none names an impossible device, and the table
# of kernel names stops growing at a size no real program reaches.
FUTURE_SLACK_NS = 30_000_000_000
MAX_DEVICES = 64
# A record stamped before the first second of uptime: CUPTI gave it no time (0, less the
# clock offset). CUPTI 12.6u2-13.0 did that to kernels with a timestamp callback; the session
# start used to drop such records without a count (one candidate for an H200 attach that read
# 0 kernels and said complete).
NO_TIME_NS = 1_000_000_000
MAX_KERNEL_NAMES = 4096
OTHER_KERNELS = "(other kernels)"
LIVE_WINDOW_NS = 10_000_000_000     # the screen's "now" figures cover this much ...
LIVE_LAG_NS = 2_000_000_000         # ... ending this long ago (GPU records arrive late)
np = None   # numpy, imported with the first GPU activity: an attach with none skips its ~0.15 s import


def _numpy() -> None:
    global np  # noqa: PLW0603 - one module-wide name, bound once
    if np is None:
        import numpy  # noqa: PLC0415

        np = numpy


FIGURES = ("kernels", "kernel_ns", "memcpys", "memcpy_ns", "memcpy_bytes", "memsets", "memset_ns", "joined",
           "kernels_joined", "latency_ns")


def _union_arrays(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping [a, b) intervals (numpy): disjoint, sorted segments."""
    if not len(a):
        return a, b
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    ends = np.maximum.accumulate(b)
    new = np.ones(len(a), bool)
    new[1:] = a[1:] > ends[:-1]
    starts = np.flatnonzero(new)
    last = np.append(starts[1:] - 1, len(a) - 1)
    return a[starts], ends[last]


class BusyUnion:
    """Union of [start, end) intervals as busy ns per bin (recent) plus a running total."""

    def __init__(self, bin_ns: int = BIN_NS, reorder_ns: int = REORDER_NS, keep_ns: int = KEEP_NS):
        self.bin_ns, self.reorder_ns, self.keep_ns = bin_ns, reorder_ns, keep_ns
        self.bins: dict[int, int] = {}
        self.binned = 0              # busy ns of every bin ever filled (kept or folded)
        self.pa: list[np.ndarray] = []
        self.pb: list[np.ndarray] = []
        self.n_pending = 0
        self.done_until = 0          # the union before this instant is final (binned)
        self.newest = 0
        self.late = 0
        self.clipped = 0             # late intervals that reached back past the kept bins: time lost
        self._merged: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, a: int, b: int) -> None:
        """Add one interval."""
        _numpy()
        self.add_many(np.array([a], np.int64), np.array([b], np.int64))

    def add_many(self, a: np.ndarray, b: np.ndarray) -> None:
        """Add intervals (int64 arrays of starts and ends)."""
        _numpy()
        keep = b > a
        a, b = a[keep], b[keep]
        if not len(a):
            return
        late = a < self.done_until
        if late.any():               # arrived after its part of the timeline was binned
            self.late += int(late.sum())
            oldest = self.done_until - self.keep_ns      # older bins are folded: not re-opened
            self.clipped += int((a[late] < oldest).sum())
            for x, y in zip(np.maximum(a[late], oldest).tolist(), np.minimum(b[late], self.done_until).tolist()):
                self._bin(x, y, capped=True)
            a = np.maximum(a, self.done_until)
            keep = b > a
            a, b = a[keep], b[keep]
            if not len(a):
                return
        self.pa.append(a)
        self.pb.append(b)
        self.n_pending += len(a)
        self._merged = None
        self.newest = max(self.newest, int(b.max()))
        if self.n_pending > PENDING_MAX:
            self.finalize(self.newest - self.reorder_ns)

    def _pending(self) -> tuple[np.ndarray, np.ndarray]:
        """The pending intervals as one pair of arrays (callers check there are some)."""
        if len(self.pa) > 1:
            self.pa, self.pb = [np.concatenate(self.pa)], [np.concatenate(self.pb)]
        return self.pa[0], self.pb[0]

    def finalize(self, upto: int) -> None:
        """Bin the union of everything before ``upto``."""
        if upto <= self.done_until:
            return
        if not self.pa:              # nothing pending (and no numpy needed)
            self.done_until, self._merged = upto, None
            self._fold(upto)
            return
        a, b = self._pending()
        take = a < upto
        ua, ub = _union_arrays(a[take], np.minimum(b[take], upto))
        for x, y in zip(ua.tolist(), ub.tolist()):
            self._bin(x, y)
        rest = ~take | (b > upto)
        ka, kb = np.where(take[rest], upto, a[rest]), b[rest]
        self.pa, self.pb = ([ka], [kb]) if len(ka) else ([], [])
        self.n_pending = len(ka)
        self.done_until, self._merged = upto, None
        self._fold(upto)

    def _fold(self, upto: int) -> None:
        old = (upto - self.keep_ns) // self.bin_ns
        if self.bins and min(self.bins) < old:
            self.bins = {i: v for i, v in self.bins.items() if i >= old}

    def _bin(self, a: int, b: int, capped: bool = False) -> None:
        w = self.bin_ns
        while a < b:
            i = a // w
            end = min(b, (i + 1) * w)
            was = self.bins.get(i, 0)
            v = was + end - a
            v = min(v, w) if capped else v
            self.bins[i] = v
            self.binned += v - was
            a = end

    def busy(self, t0: int, t1: int) -> int:
        """Busy ns within [t0, t1) (bins cut by the window are pro-rated; recent windows only)."""
        if t1 <= t0:
            return 0
        w, total = self.bin_ns, 0.0
        first, last = t0 // w, (t1 - 1) // w
        # the screen's 10 s window is 1,000 bins, asked every tick: walk the kept bins where
        # they are fewer (none at all without a GPU), in the same order
        idx = range(first, last + 1) if last - first < len(self.bins) else \
            sorted(i for i in self.bins if first <= i <= last)
        for i in idx:
            v = self.bins.get(i)
            if v:
                lo, hi = max(t0, i * w), min(t1, (i + 1) * w)
                total += v * (hi - lo) / w
        ma, mb = self._pending_union() if self.pa else ((), ())
        if len(ma):
            total += int(np.clip(np.minimum(mb, t1) - np.maximum(ma, t0), 0, None).sum())
        return int(total)

    def _pending_union(self) -> tuple[np.ndarray, np.ndarray]:
        if self._merged is None:
            self._merged = _union_arrays(*self._pending())
        return self._merged

    def total(self) -> int:
        """All busy ns so far."""
        if not self.pa:
            return self.binned
        ma, mb = self._pending_union()
        return self.binned + int((mb - ma).sum())


@dataclasses.dataclass
class OpGpu:
    """GPU activity attributed to one operation (or device, or everything)."""

    kernels: int = 0
    kernel_ns: int = 0
    memcpys: int = 0
    memcpy_ns: int = 0
    memcpy_bytes: int = 0
    memsets: int = 0
    memset_ns: int = 0
    joined: int = 0              # activities matched to their CUDA API call
    kernels_joined: int = 0
    latency_ns: int = 0          # sum over joined kernels of (kernel start - API call start)
    busy: BusyUnion = dataclasses.field(default_factory=BusyUnion)

    def figures(self) -> dict:
        """Counts and times, with the busy (union) time so far."""
        return {**{k: getattr(self, k) for k in FIGURES}, "busy_ns": self.busy.total()}


class Series:
    """One NVML series: every sample counted, the recent ones kept for windows."""

    def __init__(self):
        self.n, self.total = 0, 0.0
        self.recent: collections.deque = collections.deque(maxlen=NVML_KEEP)

    def add(self, ts: int, value: float) -> None:
        """Take one sample."""
        self.n += 1
        self.total += value
        self.recent.append((ts, value))

    def mean(self, t0: int | None = None, t1: int | None = None) -> float | None:
        """Mean over all samples, or over the recent ones inside [t0, t1]."""
        if t0 is None:
            return self.total / self.n if self.n else None
        vals = [v for ts, v in self.recent if t0 <= ts <= (t1 if t1 is not None else ts)]
        return sum(vals) / len(vals) if vals else None

    def period_ms(self) -> float | None:
        """The series' own sample period (median spacing of recent samples)."""
        ts = [t for t, _ in self.recent]
        gaps = sorted(b - a for a, b in zip(ts, ts[1:]) if b > a)
        return gaps[len(gaps) // 2] / 1e6 if gaps else None

    def summary(self) -> dict:
        """What a reader needs: count, sum and the native period."""
        return {"n": self.n, "sum": self.total, "period_ms": self.period_ms()}


def _on_wall(ns_pairs) -> tuple[int, int]:
    """(on-CPU, on + off-CPU) ns of [[on, off], ...] category pairs."""
    on = off = 0
    for a, b in ns_pairs:
        on, off = on + a, off + b
    return on, on + off


def _split(on: float, wall: float, gpu_frac: float, scale: float) -> dict:
    on, off = on * scale, max(0, wall - on) * scale
    return {"both": on * gpu_frac, "cpu_only": on * (1 - gpu_frac),
            "gpu_only": off * gpu_frac, "idle": off * (1 - gpu_frac)}


def _add(into: dict, part: dict) -> None:
    for n, d in part.items():
        acc = into.setdefault(n, dict.fromkeys(OVERLAP_KEYS, 0.0))
        for k, v in d.items():
            acc[k] += v


class GpuTotals:
    """Collector side: GPU activity, NVML and sync times in, cumulative ``gtot`` records out."""

    def __init__(self, t0: int = 0):
        self.t0 = t0
        self.all = OpGpu()
        self.ops: dict[str, OpGpu] = {}
        self.devices: dict[int, OpGpu] = {}
        self.top: dict[str, list[int]] = {}        # kernel name -> [count, ns]
        self.nvml: dict[int, dict] = {}
        self.sync_ns: dict[str, int] = {}
        self.sync_calls: dict[str, int] = {}
        self.status: dict[str, dict] = {}          # source -> latest gstat record
        self.agent: dict = {}                      # the agent's counters (set by the collector)
        self.impossible = 0                        # records refused for their times or device
        self.untimed = 0                           # records CUPTI gave no timestamp (NO_TIME_NS)
        self.before = 0                            # records that ended before t0 (not this session's)
        self.ticks: list[tuple[int, int, int, dict, bool]] = []   # unfinished: (t0, t1, Python on-CPU ns,
        #                                                             op tick, GPU traced the whole tick)
        self.tick_ns = self.traced_tick_ns = 0      # finished ticks, all and traced
        self.overlap = dict.fromkeys(OVERLAP_KEYS, 0.0)     # finished ticks
        self.op_overlap: dict[str, dict] = {}
        self.overlap_until = 0
        self._cpu_prev: tuple[int, int] | None = None
        self._op_prev: tuple[tuple[int, int], dict] = ((0, 0), {})

    # -- input ---------------------------------------------------------------------
    def add(self, acts: np.ndarray, op_names: list[str], names: dict[int, str], now: int | None = None) -> None:
        """Count joined activities (rlscope_top/gpu_join.JOINED) and add their busy time.

        Args:
            acts: joined activities, times on the monitor's clock.
            op_names: operation index -> name.
            names: kernel name pointer -> name.
            now: the monitor's clock when they were read; an activity that ends later than
                this (plus slack), ends before it starts or names an impossible device is
                counted in ``impossible``, one without a timestamp in ``untimed``, one that
                ended before ``t0`` in ``before``; none of them is added.
        """
        if not len(acts):
            return
        _numpy()
        acts = self._checked(acts, now)
        if self.t0:
            after = acts["end"] > self.t0
            self.before += int(len(acts) - after.sum())
            acts = acts[after]
            acts["start"] = np.maximum(acts["start"], self.t0)
        self._count(self.all, acts)
        for i in np.unique(acts["op"]).tolist():
            self._count(self.ops.setdefault(op_names[i], OpGpu()), acts[acts["op"] == i])
        for d in np.unique(acts["device"]).tolist():
            self._count(self.devices.setdefault(int(d), OpGpu()), acts[acts["device"] == d])
        k = acts[acts["kind"] == 0]
        if len(k):
            ptrs, inv = np.unique(k["detail"], return_inverse=True)
            counts = np.bincount(inv)
            ns = np.bincount(inv, weights=np.maximum(0, k["end"] - k["start"]))
            for p, c, t in zip(ptrs.tolist(), counts.tolist(), ns.tolist()):
                name = names.get(p) or f"kernel@{p:#x}"
                if name not in self.top and len(self.top) >= MAX_KERNEL_NAMES:
                    name = OTHER_KERNELS
                top = self.top.setdefault(name, [0, 0])
                top[0] += c
                top[1] += int(t)

    @staticmethod
    def _count(acc: OpGpu, a: np.ndarray) -> None:
        dur = np.maximum(0, a["end"] - a["start"])
        kern, cpy, st = a["kind"] == 0, a["kind"] == 1, a["kind"] == 2
        joined = a["launch"] != 0
        acc.kernels += int(kern.sum())
        acc.kernel_ns += int(dur[kern].sum())
        acc.memcpys += int(cpy.sum())
        acc.memcpy_ns += int(dur[cpy].sum())
        acc.memcpy_bytes += int(a["detail"][cpy].sum())
        acc.memsets += int(st.sum())
        acc.memset_ns += int(dur[st].sum())
        acc.joined += int(joined.sum())
        kj = kern & joined
        acc.kernels_joined += int(kj.sum())
        acc.latency_ns += int(np.maximum(0, a["start"][kj] - a["launch"][kj]).sum())
        acc.busy.add_many(a["start"], a["end"])

    def nvml_sample(self, s: dict) -> None:
        """One NVML poll of a device (probes/nvml.py)."""
        d = self.nvml.setdefault(s["dev"], {"name": s.get("name", ""), "util": Series(), "mem_util": Series(),
                                            "sm_active": Series(), "proc_sm": Series(), "native": {}})
        for key in ("util", "mem_util", "sm_active"):
            for ts, v in s.get(key) or ():
                d[key].add(ts, v)
        for ts, sm, _mem in s.get("proc") or ():
            d["proc_sm"].add(ts, sm)
        for key in ("mem_used", "mem_total"):
            if key in s:
                d[key] = s[key]
                if key == "mem_used":
                    d["mem_used_max"] = max(d.get("mem_used_max", 0), s[key])
        d["native"] = s.get("native", d["native"])

    def sync(self, ns: dict[str, int], calls: dict[str, int]) -> None:
        """Cumulative time blocked in synchronize calls, per API."""
        self.sync_ns, self.sync_calls = dict(ns), dict(calls)

    def _checked(self, acts: np.ndarray, now: int | None) -> np.ndarray:
        """The records with possible times and devices; the others counted in ``untimed``
        (no timestamp) or ``impossible``."""
        untimed = (acts["start"] < NO_TIME_NS) | (acts["end"] < NO_TIME_NS)
        ok = ~untimed & (acts["end"] >= acts["start"]) & (acts["device"] < MAX_DEVICES)
        if now is not None:
            ok &= acts["end"] <= now + FUTURE_SLACK_NS
        if ok.all():
            return acts
        self.untimed += int(untimed.sum())
        self.impossible += int((~ok & ~untimed).sum())
        return acts[ok]

    def counters(self, r: dict, traced: bool = True) -> None:
        """One counters record the collector wrote: the CPU side of a tick (``traced``: the
        GPU was traced all through it; windowed tracing estimates the overlap from those)."""
        on = sum(sum(ns[0] for ns in th["ns"]) for th in r["threads"] if th.get("py"))
        ts = r["ts"]
        for u in self.unions():             # bin what can no longer change
            u.finalize(ts - REORDER_NS)
        tick = self._op_tick(r)
        if self._cpu_prev is not None and ts > self._cpu_prev[0]:
            self.ticks.append((self._cpu_prev[0], ts, max(0, on - self._cpu_prev[1]), tick, traced))
        self._cpu_prev = (ts, on)
        self._finish_ticks()

    def finish(self) -> None:
        """The session ended: everything received is final."""
        for u in self.unions():
            u.finalize(max(u.newest, u.done_until) + 1)
        self._finish_ticks(final=True)

    def _op_tick(self, r: dict) -> dict[str, tuple[int, int]]:
        """Each operation's (on-CPU, wall) ns since the previous counters, and ``<none>``'s:
        the Python threads' time outside every operation."""
        py = _on_wall(ns for th in r["threads"] if th.get("py") for ns in th["ns"])
        cur: dict[str, tuple[int, int]] = {}
        for o in r.get("ops", ()):     # a name may be both annotated and sampled: add them up
            on, wall = _on_wall(o["ns"])
            was = cur.get(o["name"], (0, 0))
            cur[o["name"]] = (was[0] + on, was[1] + wall)
        cum = {**self._op_prev[1], **cur}
        (py_on0, py_wall0), prev = self._op_prev
        tick = {n: (max(0, on - prev.get(n, (0, 0))[0]), max(0, wall - prev.get(n, (0, 0))[1]))
                for n, (on, wall) in cum.items()}
        tick = {n: v for n, v in tick.items() if v[1] > 0}
        none_on = max(0, py[0] - py_on0 - sum(v[0] for v in tick.values()))
        none_wall = max(0, py[1] - py_wall0 - sum(v[1] for v in tick.values()))
        if none_wall:
            tick[G.NONE_OP] = (min(none_on, none_wall), none_wall)
        self._op_prev = (py, cum)
        return tick

    def unions(self) -> list[BusyUnion]:
        """Every busy union kept (overall, per operation, per device)."""
        return [self.all.busy, *(o.busy for o in self.ops.values()), *(d.busy for d in self.devices.values())]

    # -- overlap ---------------------------------------------------------------------
    def _tick_parts(self, a: int, b: int, cpu: int, ops: dict) -> tuple[dict, dict]:
        """One tick: CPU and GPU busy time taken as independent within the tick (0.25 s)."""
        dt = b - a
        c = min(cpu, dt)
        gb = min(self.all.busy.busy(a, b), dt)
        both = c * gb / dt
        total = {"both": both, "cpu_only": c - both, "gpu_only": gb - both}
        f = gb / dt
        return total, {n: _split(on, wall, f, 1.0) for n, (on, wall) in ops.items()}

    def _finish_ticks(self, final: bool = False) -> None:
        done = self.all.busy.done_until
        while self.ticks and (final or self.ticks[0][1] <= done):
            a, b, cpu, ops, traced = self.ticks.pop(0)
            self.tick_ns += b - a
            self.overlap_until = b
            if not traced:
                continue
            self.traced_tick_ns += b - a
            total, per_op = self._tick_parts(a, b, cpu, ops)
            for k, v in total.items():
                self.overlap[k] += v
            _add(self.op_overlap, per_op)

    def _overlap_now(self) -> tuple[dict, dict]:
        """Finished ticks plus the unfinished ones as they stand; when only some ticks were
        traced (windowed tracing), their split scaled to all ticks."""
        total, per_op = dict(self.overlap), {n: dict(v) for n, v in self.op_overlap.items()}
        all_ns, traced_ns = self.tick_ns, self.traced_tick_ns
        for a, b, cpu, ops, traced in self.ticks:
            all_ns += b - a
            if not traced:
                continue
            traced_ns += b - a
            t, p = self._tick_parts(a, b, cpu, ops)
            for k, v in t.items():
                total[k] += v
            _add(per_op, p)
        if traced_ns and traced_ns < all_ns:
            f = all_ns / traced_ns
            total = {k: v * f for k, v in total.items()}
            per_op = {n: {k: v * f for k, v in d.items()} for n, d in per_op.items()}
        return total, per_op

    # -- output ----------------------------------------------------------------------
    def record(self, ts: int, windows: dict | None = None) -> dict:
        """The cumulative ``gtot`` ring record as of ``ts`` (``windows``: windowed tracing's
        state and estimates, rlscope_top/collect/gpu_windows.py)."""
        overlap, op_overlap = self._overlap_now()
        top = sorted(self.top.items(), key=lambda kv: -kv[1][1])[:TOP_N]
        return G.totals(
            ts, all=self.all.figures(), ops={n: o.figures() for n, o in self.ops.items()},
            devices={str(d): o.figures() for d, o in sorted(self.devices.items())},
            top=[[n, c, t] for n, (c, t) in top], late=self.all.busy.late, clipped=self.all.busy.clipped,
            untimed=self.untimed, before=self.before,
            overlap={k: int(v) for k, v in overlap.items()},
            op_overlap={n: {k: int(x) for k, x in v.items()} for n, v in op_overlap.items()},
            live=self._live(ts), nvml=self._nvml_out(), sync={"ns": self.sync_ns, "calls": self.sync_calls},
            status=self.status, agent=self.agent, windows=windows)

    def _live(self, ts: int) -> dict:
        b = max(0, ts - LIVE_LAG_NS)
        a = max(0, b - LIVE_WINDOW_NS)
        utils = [v["util"].mean(a, b) for v in self.nvml.values()]
        utils = [u for u in utils if u is not None]
        return {"a": a, "b": b, "busy_ns": self.all.busy.busy(a, b) if b > a else 0,
                "nvml_util": sum(utils) / len(utils) if utils else None}

    def _nvml_out(self) -> dict:
        out = {}
        for d, v in sorted(self.nvml.items()):
            out[str(d)] = {"name": v["name"], **{k: v[k].summary() for k in ("util", "mem_util", "sm_active", "proc_sm")},
                           "mem_used_max": v.get("mem_used_max"), "mem_total": v.get("mem_total"),
                           "native": v["native"]}
        return out
