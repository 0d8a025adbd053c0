"""GPU side of the accounting: what the GPU ring records add up to (pure Python).

- GPU-bound time is the union of GPU activity intervals (kernels, memcpys, memsets),
  overall, per operation and per device. Unions are kept as busy time per 10 ms bin,
  so memory grows with wall time, not with the number of kernels. Records may arrive
  out of order within ``REORDER_NS``; later ones are still binned, capped at the bin
  length, and counted in ``late``.
- The CPU side of the overlap comes from the counters records: on-CPU time of the
  Python threads per collector tick, and each operation's on-CPU and wall time per
  tick (see :mod:`rlscope_top.gpu_summary`).
- NVML samples and the time blocked in synchronize calls are kept as they come.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses

from . import gpu_records as G
from . import records as R
from .engine import union

BIN_NS = 10_000_000
REORDER_NS = 3_000_000_000      # GPU records reach the ring ~1.5 s after they happen (flush + join wait)
PENDING_MAX = 20_000
NVML_KEEP = 4096            # recent samples kept per series (for windows); totals keep everything


class BusyUnion:
    """Union of [start, end) intervals as busy ns per bin."""

    def __init__(self, bin_ns: int = BIN_NS, reorder_ns: int = REORDER_NS):
        self.bin_ns, self.reorder_ns = bin_ns, reorder_ns
        self.bins: dict[int, int] = {}
        self.pending: list[tuple[int, int]] = []
        self.done_until = 0          # the union before this instant is final (binned)
        self.newest = 0
        self.late = 0
        self._merged: list[tuple[int, int]] | None = None   # union of pending, cached until the next add

    def add(self, a: int, b: int) -> None:
        """Add one interval."""
        if b <= a:
            return
        if a < self.done_until:      # arrived after its part of the timeline was binned
            self.late += 1
            self._bin(a, min(b, self.done_until), capped=True)
            a = self.done_until
            if b <= a:
                return
        self.pending.append((a, b))
        self._merged = None
        self.newest = max(self.newest, b)
        if len(self.pending) > PENDING_MAX:
            self.finalize(self.newest - self.reorder_ns)

    def finalize(self, upto: int) -> None:
        """Bin the union of everything before ``upto``."""
        if upto <= self.done_until:
            return
        take, keep = [], []
        for a, b in self.pending:
            if a < upto:
                take.append((a, min(b, upto)))
                if b > upto:
                    keep.append((upto, b))
            else:
                keep.append((a, b))
        for a, b in union(take):
            self._bin(a, b)
        self.pending, self.done_until, self._merged = keep, upto, None

    def _bin(self, a: int, b: int, capped: bool = False) -> None:
        w = self.bin_ns
        while a < b:
            i = a // w
            end = min(b, (i + 1) * w)
            v = self.bins.get(i, 0) + end - a
            self.bins[i] = min(v, w) if capped else v
            a = end

    def busy(self, t0: int, t1: int) -> int:
        """Busy ns within [t0, t1) (bins cut by the window are pro-rated)."""
        if t1 <= t0:
            return 0
        w, total = self.bin_ns, 0.0
        for i in range(t0 // w, (t1 - 1) // w + 1):
            v = self.bins.get(i)
            if v:
                lo, hi = max(t0, i * w), min(t1, (i + 1) * w)
                total += v * (hi - lo) / w
        merged = self._pending_union()
        i = bisect.bisect_right(merged, (t0, t0)) - 1      # the interval that may straddle t0
        for a, b in merged[max(0, i):]:
            if a >= t1:
                break
            total += max(0, min(b, t1) - max(a, t0))
        return int(total)

    def _pending_union(self) -> list[tuple[int, int]]:
        if self._merged is None:
            self._merged = union(self.pending)
        return self._merged

    def total(self) -> int:
        """All busy ns so far."""
        return sum(self.bins.values()) + sum(b - a for a, b in self._pending_union())


@dataclasses.dataclass
class OpGpu:
    """GPU activity attributed to one operation."""

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


class Series:
    """One NVML series: every sample counted, the recent ones kept for windows."""

    def __init__(self):
        self.n, self.total = 0, 0.0
        self.recent: collections.deque = collections.deque(maxlen=NVML_KEEP)
        self.first_ts = self.last_ts = 0

    def add(self, ts: int, value: float) -> None:
        """Take one sample."""
        self.n += 1
        self.total += value
        self.recent.append((ts, value))
        self.first_ts = self.first_ts or ts
        self.last_ts = ts

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


class GpuAccounting:
    """Consumes GPU ring records (and counters, for CPU time per tick)."""

    def __init__(self):
        self.status: dict[str, dict] = {}           # source -> latest gstat record
        self.names: dict[int, str] = {}
        self.ops: dict[str, OpGpu] = {}
        self.devices: dict[int, OpGpu] = {}
        self.all = OpGpu()
        self.top: dict[int, list[int]] = {}         # kernel name id -> [count, ns]
        self.nvml: dict[int, dict] = {}             # device -> {name, util, mem_util, sm_active, proc, mem_used, mem_total}
        self.sync_ns: dict[str, int] = {}
        self.sync_calls: dict[str, int] = {}
        self.cpu_ticks: list[tuple[int, int, int]] = []   # (t0, t1, on-CPU ns of Python threads)
        self._cpu_prev: tuple[int, int] | None = None
        self.op_ticks: list[dict[str, tuple[int, int]]] = []   # per cpu tick: op -> (on-CPU ns, wall ns)
        self._op_prev: tuple[tuple[int, int], dict[str, tuple[int, int]]] = ((0, 0), {})
        self.op_overlap_cache: tuple[int, dict] = (0, {})
        self.raw: list[tuple[int, int]] | None = None     # every interval, only with --timeline
        self.overlap_cache: tuple[int, dict] = (0, {})    # ticks whose overlap can no longer change

    @property
    def have_activity(self) -> bool:
        """Whether CUPTI is delivering (its status said ok)."""
        return bool(self.status.get("cupti", {}).get("ok"))

    def feed(self, r: dict) -> None:
        """Apply one ring record (records this class does not use are ignored)."""
        t = r.get("t")
        if t == G.GPU:
            self._activity(r)
        elif t == G.GPU_STATUS:
            self.status[r["source"]] = r
        elif t == G.NVML:
            self._nvml(r)
        elif t == G.SYNC:
            self.sync_ns, self.sync_calls = dict(r["ns"]), dict(r["calls"])
        elif t == R.COUNTERS:
            self._cpu(r)
        elif t == R.META and r.get("timeline") and self.raw is None:
            self.raw = []

    def _activity(self, r: dict) -> None:
        for nid, name in (r.get("names") or {}).items():
            self.names[int(nid)] = name
        for it in r["items"]:
            kind, a, b, dev = it[G.KIND], it[G.START], it[G.END], it[G.DEVICE]
            op = self.ops.setdefault(it[G.OP], OpGpu())
            d = self.devices.setdefault(dev, OpGpu())
            for acc in (self.all, op, d):
                _count(acc, it)
                acc.busy.add(a, b)
            if kind == G.KERNEL:
                top = self.top.setdefault(it[G.DETAIL], [0, 0])
                top[0] += 1
                top[1] += max(0, b - a)
            if self.raw is not None:
                self.raw.append((a, b))

    def _nvml(self, r: dict) -> None:
        d = self.nvml.setdefault(r["dev"], {"name": r.get("name", ""), "util": Series(), "mem_util": Series(),
                                            "sm_active": Series(), "proc_sm": Series(), "native": {}})
        for key in ("util", "mem_util", "sm_active"):
            for ts, v in r.get(key) or ():
                d[key].add(ts, v)
        for ts, sm, _mem in r.get("proc") or ():
            d["proc_sm"].add(ts, sm)
        for key in ("mem_used", "mem_total"):
            if key in r:
                d[key] = r[key]
                if key == "mem_used":
                    d["mem_used_max"] = max(d.get("mem_used_max", 0), r[key])
        d["native"] = r.get("native", d["native"])

    def _cpu(self, r: dict) -> None:
        on = sum(sum(ns[0] for ns in th["ns"]) for th in r["threads"] if th.get("py"))
        ts = r["ts"]
        for u in self.unions():           # keep the pending part short: bin what can no longer change
            u.finalize(ts - REORDER_NS)
        if self._cpu_prev is not None and ts > self._cpu_prev[0]:
            self.cpu_ticks.append((self._cpu_prev[0], ts, max(0, on - self._cpu_prev[1])))
            self.op_ticks.append(self._op_tick(r))
        else:
            self._op_tick(r)
        self._cpu_prev = (ts, on)

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

    def kernel_name(self, nid: int) -> str:
        """A kernel's name (``kernel#N`` when its name record was lost to an overrun)."""
        return self.names.get(nid, f"kernel#{nid}")


def _on_wall(ns_pairs) -> tuple[int, int]:
    """(on-CPU, on + off-CPU) ns of [[on, off], ...] category pairs."""
    on = off = 0
    for a, b in ns_pairs:
        on, off = on + a, off + b
    return on, on + off


def _count(acc: OpGpu, it: list) -> None:
    kind, dur = it[G.KIND], max(0, it[G.END] - it[G.START])
    if kind == G.KERNEL:
        acc.kernels += 1
        acc.kernel_ns += dur
        if it[G.LAUNCH]:
            acc.kernels_joined += 1
            acc.latency_ns += max(0, it[G.START] - it[G.LAUNCH])
    elif kind == G.MEMCPY:
        acc.memcpys += 1
        acc.memcpy_ns += dur
        acc.memcpy_bytes += it[G.DETAIL]
    elif kind == G.MEMSET:
        acc.memsets += 1
        acc.memset_ns += dur
    if it[G.LAUNCH]:
        acc.joined += 1
