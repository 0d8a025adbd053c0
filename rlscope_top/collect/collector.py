"""The collector: reads the probes and writes records to the ring.

It is the ring's only writer. Counter records carry cumulative totals per thread
since attach, so a reader that loses records to an overrun loses resolution, not
totals. Record types are documented in docs/ring-format.md.
"""

from __future__ import annotations

import platform
import random
import time
from typing import Callable

from ..ring import records as R
from ..errors import AttachError, BccMissing, BpfCompileError
from . import op_rules as rules
from ..probes import ann_region, catalog
from ..probes import frameworks as FW
from ..probes.stack_sampler import StackSampler
from ..probes import loader as L
from .cost_meter import CostMeter
from ..probes.loader import BccUnavailable, OpCounters, ProbeSet, ThreadCounters
from .budget import FIRST_WINDOW_S, WINDOW_S, WINDOW_SHARE, Budget
from ..ring.ring import RecordTooLarge, RingWriter
from .thread_fold import ExitedThreads, fold_all
from ..vocab import ALL_OP, CATEGORIES
from .target import command_line, is_alive, thread_name, thread_running

SCAN_PERIOD_S = 0.5     # new libraries are picked up within this (+ one tick)
SAMPLE_WINDOW_S = 0.4   # a category the budget turned down is timed again this long (at most) ...
MIN_WINDOW_S = 0.1      # ... shorter where it costs more, so that windows come often enough to land
                        # on every phase of a loop within the budget ...
MIN_SAMPLE_PERIOD_S = 2.0   # ... at most this often (further apart when it costs more) ...
SAMPLE_JITTER = 0.5     # ... at a random offset of up to +-50% of the period, so that windows
                        # land on every phase of a loop, not always on the same one
SAMPLE_SHARE = WINDOW_SHARE   # share of the budget the sample windows may use
META_PERIOD_S = 10.0    # late readers find a meta record within this
SAMPLER_WINDOW_S = 5.0  # the stack sampler's CPU is checked over this ...
SAMPLER_SHARE = 0.5     # ... against this share of the overhead budget (% of one core)
MIN_SAMPLE_HZ = 10.0
SETTLE_STEPS = 4        # 50 ms budget windows right after attach: timed -> count -> off, and a second category


class Collector:
    """Attach to one PID and stream what the probes see into a ring."""

    def __init__(self, pid: int, ring: RingWriter, specs: list[catalog.ProbeSpec] | None = None,
                 notify: Callable[[str, str], None] | None = None, interval_s: float = 1.0,
                 max_probes: int = catalog.MAX_PROBES, max_overhead_pct: float = 5.0, timeline: bool = False,
                 op_rules: list | None = None, sample_hz: float = 0.0, sources: list | None = None):
        self.pid, self.ring, self.interval_s = pid, ring, interval_s
        self.sources = list(sources or [])   # e.g. rlscope_top.collect.gpu_source.GpuSource: start/tick/drain/finish/stop
        self.specs = specs if specs is not None else catalog.builtin()
        self._notify = notify or (lambda level, msg: None)
        self.probes = ProbeSet(pid, self.specs, max_probes=max_probes, notify=self.note, timeline=timeline)
        self.command = command_line(pid)
        self._names: dict[int, str] = {}
        self._threads: dict[int, dict] = {}     # live threads' rows
        self._exited = ExitedThreads()
        self._folded_note = False
        self._open: dict[int, list[tuple[str, int]]] = {}
        self._last_scan = self._last_meta = 0.0
        self.t0_ns = 0
        self.budget = Budget(max_overhead_pct)
        self._samples: dict[int, dict] = {}      # category -> {next, until, period}
        self.region: ann_region.Region | None = None   # the target's annotations, once found
        self.sampler = None                      # probes.stack_sampler.StackSampler, when on
        self.op_names: dict[int, tuple[str, str, str]] = {}   # op id -> (name, kind, source)
        self.op_rules = list(op_rules or []) + rules.BUILTIN
        self.sample_hz = sample_hz
        self._sampling_on = False
        self._sampler_reported = False
        self._aops: dict[int, int] = {}          # tid -> annotated op at the latest read
        self._smp_window = (0.0, 0.0)            # (monotonic s, sampler CPU s) at the window start
        self.cost = CostMeter(pid)               # kernel time and CPU the probes' calibration does not see

    def note(self, level: str, msg: str) -> None:
        """A notice: to the user (stderr, unless the screen owns the terminal) and to the ring."""
        self._notify(level, msg)
        self.ring.write(R.note(time.monotonic_ns(), level, msg))

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Compile, attach and begin counting. Raises typed errors with hints."""
        self.cost.before_attach()                # the compile below is the target's unprobed stretch
        try:
            self.probes.load()
        except BccUnavailable as e:
            raise BccMissing(f"the bcc Python module is not importable: {e}", pid=self.pid,
                             hint="run `sudo bash scripts/setup.sh` (installs python3-bpfcc) and use .venv/bin/rlscope-top") from None
        except RuntimeError as e:             # the compiler's (or the kernel's) words
            raise BpfCompileError(f"cannot compile the eBPF program: {_last_line(e)}", pid=self.pid,
                                  hint="install or link the kernel headers: `sudo bash scripts/setup.sh`, then `rlscope-top doctor`") from None
        try:
            self.t0_ns = self.probes.start()
        except Exception as e:
            self.probes.stop()
            raise AttachError(f"cannot attach probes to PID {self.pid}: {_last_line(e)}", pid=self.pid,
                              hint="check `rlscope-top doctor`; tracefs must be mounted and you must be root") from None
        self.cost.begin()
        self._last_scan = self._last_meta = time.monotonic()
        self.probes.set_ranges(self.probes.category_ranges())
        self._find_annotations()
        self._start_sampler()
        self.ring.write(self._meta())
        missing = [g for g in ("torch", "cudart", "mujoco") if g not in self.probes.groups]
        if not self.probes.groups:
            self.note("warn", f"PID {self.pid} maps none of the known libraries ({', '.join(catalog.groups())}): "
                               "counting Python and on/off-CPU time only; probes attach if one is loaded later")
        elif missing:
            self.note("info", "not loaded (yet): " + ", ".join(missing))
        for group, syms in self.probes.missing.items():   # a build that lacks a symbol: say so in the summary
            self.note("warn", f"{group}: {len(syms)} probe(s) not attached: {', '.join(syms)[:300]}")
        for src in self.sources:
            src.start(self)
        self._settle()

    def _settle(self) -> None:
        """Price the probes in 50 ms windows right after attach and step down at once while
        over budget, instead of running the whole set at full cost for the first 0.5 s."""
        self.budget.window_s = FIRST_WINDOW_S
        try:
            for _ in range(SETTLE_STEPS):
                self.budget.reset()
                self._apply_budget(time.monotonic(), self.probes.hits())    # the window's start
                time.sleep(FIRST_WINDOW_S)
                if not self._apply_budget(time.monotonic(), self.probes.hits()):
                    return
        finally:
            self.budget.reset()
            self.budget.window_s = WINDOW_S

    def tick(self) -> None:
        """Pick up new libraries, drain events, and write one counters record."""
        now = time.monotonic()
        if now - self._last_scan >= SCAN_PERIOD_S:
            self._last_scan = now
            self._find_annotations()
            if self.probes.scan():
                self.probes.set_ranges(self.probes.category_ranges())
                self.ring.write(self._meta())
                self._last_meta = now
        if now - self._last_meta >= META_PERIOD_S:
            self._last_meta = now
            self.ring.write(self._meta())
        self._drain_events()
        self._check_sampler()
        ctr = self._counters()
        self._write_counters(ctr)
        for src in self.sources:
            src.tick()
        if not self._sample(now):
            self._apply_budget(now, ctr["hits"])

    def _sample(self, now: float) -> bool:
        """Time categories the budget turned down (count or off) for a short window now and then.

        The estimates between windows come from all windows so far, per operation
        (rlscope_top/account/estimates.py). Windows start at jittered times, so that they sample
        every phase of the program. Returns whether a window is open.
        """
        busy = False
        for cat, st in self._samples.items():
            name = CATEGORIES[cat]
            if st["until"] is None and now >= st["next"]:
                self.probes.restore(cat)
                self._write_counters(self._counters())
                self.ring.write(R.mode(time.monotonic_ns(), name, "timed", 0.0, self.budget.max_pct))
                st["until"], st["opened"] = now + st["window"], (now, self._category_cost_ns(cat))
            elif st["until"] is not None and now >= st["until"]:
                self._write_counters(self._counters())
                self._reprice(st, now, self._category_cost_ns(cat))     # at full cost, before the step down
                while self.probes.degrade(cat) != st["mode"]:
                    pass
                self.ring.write(R.mode(time.monotonic_ns(), name, st["mode"], 0.0, self.budget.max_pct))
                st["until"], st["next"] = None, now + _jittered(st["period"])
                self.budget.reset()
            busy = busy or st["until"] is not None
        return busy

    def _category_cost_ns(self, cat: int) -> int:
        """Calibrated cost of one category's probe hits so far."""
        hits = self.probes.hits()
        return sum(hits[a.id] * a.cost_ns for a in self.probes.attached
                   if a.parts and a.spec.category == cat and a.id < len(hits))

    def _reprice(self, st: dict, now: float, cost_ns: int) -> None:
        """Space the windows by what they cost, on average over the windows so far (a phase
        with more calls costs more than the one the first decision saw)."""
        t0, c0 = st.pop("opened")
        st["win_s"] = st.get("win_s", 0.0) + (now - t0)
        st["win_cost_s"] = st.get("win_cost_s", 0.0) + (cost_ns - c0) / 1e9
        if st["win_s"] > 0:
            st.update(self._spacing(100.0 * st["win_cost_s"] / st["win_s"]))

    def _spacing(self, pct: float) -> dict:
        """Window length and period for a category that costs ``pct`` when timed: the windows
        use SAMPLE_SHARE of the budget; a costlier category gets shorter, not rarer, windows."""
        window = min(SAMPLE_WINDOW_S, max(MIN_WINDOW_S, SAMPLE_WINDOW_S * 10.0 / max(pct, 1e-9)))
        return {"window": window,
                "period": max(MIN_SAMPLE_PERIOD_S, window * pct / (SAMPLE_SHARE * self.budget.max_pct))}

    def poll_windows(self, now: float) -> None:
        """Open or close a timed window on time (between ticks: windows are shorter than one)."""
        if any((st["until"] is None and now >= st["next"]) or (st["until"] is not None and now >= st["until"])
               for st in self._samples.values()):
            self._sample(now)

    def _apply_budget(self, now: float, hits: list[int]) -> bool:
        """Feed the budget; take the step it asks for. Returns whether one was taken."""
        probes = [(a.id, a.spec.category, a.cost_ns) for a in self.probes.attached if a.parts]
        extra = {s.name: (s.cost_ns(), s.can_degrade()) for s in self.sources if hasattr(s, "cost_ns")}
        d = self.budget.update(now, hits, probes, self.probes.modes, extra)
        if d is None:
            return False
        self._write_counters(self._counters())   # the figures as of the step: the estimates start here
        if isinstance(d.category, str):      # a source (the GPU agent) is the costly part
            src = next(s for s in self.sources if getattr(s, "name", None) == d.category)
            how = src.degrade(d)
            self.ring.write(R.mode(time.monotonic_ns(), d.category, "windowed", d.overhead_pct, self.budget.max_pct))
            self.note("warn", f"overhead {d.overhead_pct:.1f}% > budget {self.budget.max_pct:g}%: "
                              f"{d.category} ({d.category_pct:.1f}%) -> {how}")
            return True
        name = CATEGORIES[d.category]
        new = self.probes.degrade(d.category)
        self.ring.write(R.mode(time.monotonic_ns(), name, new, d.overhead_pct, self.budget.max_pct))
        if new != d.mode:               # counting alone would not fit: remove the entries too
            new = self.probes.degrade(d.category)
            self.ring.write(R.mode(time.monotonic_ns(), name, new, d.overhead_pct, self.budget.max_pct))
        spacing = self._spacing(d.category_pct)
        period = spacing["period"]
        st = self._samples.setdefault(d.category, {"next": now + _jittered(period), "until": None})
        st.update(spacing, mode=new)           # keep the estimate fresh with short timed windows
        how = ("counting calls only; its time is" if new == "count" else
               "per-call probes removed; calls and time are")
        self.note("warn", f"overhead {d.overhead_pct:.1f}% > budget {self.budget.max_pct:g}%: "
                          f"{name} ({d.category_pct:.1f}%) -> {how} estimated, re-timed "
                          f"{spacing['window']:.2g} s about every {period:.0f} s")
        return True

    def _write_counters(self, ctr: dict) -> None:
        try:
            self.ring.write(ctr)
        except RecordTooLarge:           # thousands of live threads: one row per kind, said once
            ctr["threads"] = fold_all(ctr["threads"], self.pid)
            ctr["folded"] = True
            if not self._folded_note:
                self._folded_note = True
                self.note("warn", f"{len(self._threads)} live threads do not fit in one ring record: "
                                  "threads other than the main one are shown folded")
            self.ring.write(ctr)
        for src in self.sources:
            src.on_counters(ctr)

    def stop_counting(self, reason: str) -> None:
        """Freeze the counters and write the final records (probes stay attached)."""
        for src in self.sources:          # e.g. the GPU agent's last buffers (a forced flush)
            src.drain()
        frozen = self.probes.freeze()
        self._stop_operations()
        self._drain_events()
        self._write_counters(self._counters(frozen))
        for src in self.sources:
            src.finish(frozen)
        self.ring.write(R.end(frozen, reason))

    # -- operations ----------------------------------------------------------
    def _find_annotations(self) -> None:
        """Pick up the target's annotation region (it appears at its first annotation)."""
        if self.region is not None:
            self._refresh_names()
            return
        self.region = ann_region.open_region(self.pid)
        if self.region is None:
            return
        self.probes.set_annotation_region(self.region.address)
        self.region.attach()
        self._refresh_names()
        self.note("info", f"PID {self.pid} is annotated (rlscope_top.operation): "
                           "its annotations scope time from now on and win over sampled rules")

    def _start_sampler(self) -> None:
        """Sample Python stacks for rule-based operations (the zero-change path)."""
        if not self.sample_hz:
            return
        smp = StackSampler(self.pid, self.op_rules, self.sample_hz, self._sampled_op)
        if not smp.start():
            self.note("warn", f"operations unavailable: {smp.error}; the category breakdown is unaffected")
            return
        self.sampler = smp
        for name, i in smp.ids.items():
            self.op_names[i] = (name, smp.matcher.kinds.get(name, ""), "sampled")

    def current_op_name(self, tid: int, ts: int = 0) -> str:
        """The operation a thread is in now (annotation, else sampled rule), ``<all>`` if none.

        Used to scope GPU activity: the join runs shortly after the launch, so an operation
        boundary in between attributes the activity to the next operation.
        """
        op = self._op_of(tid, self._aops.get(tid, 0))
        return self.op_names[op][0] if op in self.op_names else ALL_OP

    def _op_of(self, tid: int, aop: int) -> int:
        """A thread's operation id: its annotation wins over the sampled rule (0: none)."""
        return aop or (self.sampler.current(tid) if self.sampler is not None else 0)

    def _check_sampler(self) -> None:
        """Keep the sampler's own CPU inside half the budget; say once why it stopped."""
        smp = self.sampler
        if smp is None:
            return
        self._sampler_budget(smp)
        if not smp.ended or self._sampler_reported:
            return
        self._sampler_reported = True
        if smp.error and is_alive(self.pid):
            self.note("warn", f"operations unavailable: austin cannot sample PID {self.pid}: {smp.error} "
                               "The category breakdown is unaffected.")

    def _sampler_budget(self, smp) -> None:
        """Every 5 s: austin's CPU goes into the budget's total; above half the budget (% of one
        core) it halves its rate."""
        now, cpu = time.monotonic(), smp.cpu_s()
        if cpu is None or smp.ended:
            return
        t0, c0 = self._smp_window
        if now - t0 < SAMPLER_WINDOW_S:
            return
        self._smp_window = (now, cpu)
        pct = 100 * (cpu - c0) / (now - t0) if t0 else 0.0
        if t0:
            self.budget.fixed_pct = pct           # in the budget's total: no step lowers it
        if t0 and pct > SAMPLER_SHARE * self.budget.max_pct and smp.hz > MIN_SAMPLE_HZ:
            hz = max(MIN_SAMPLE_HZ, smp.hz / 2)
            self.note("warn", f"stack sampler used {pct:.1f}% of a core > {SAMPLER_SHARE * self.budget.max_pct:g}%: "
                               f"{smp.hz:g} -> {hz:g} samples/s")
            self.sampler = smp.restarted(hz)
            self._smp_window = (0.0, 0.0)

    def _sampled_op(self, tid: int, op: int, ts_ns: int) -> None:
        """The sampler saw a thread change operation (called from its reader thread)."""
        self.probes.set_sampled_op(tid, op, ts_ns)
        if op and not self._sampling_on:
            # the kernel looks sampled operations up only once a rule has matched, so a
            # target no rule fits pays nothing for the sampler in its probes
            self._sampling_on = True
            self.probes.set_op_source(2)

    def _refresh_names(self) -> None:
        for i, (name, kind) in self.region.names().items():
            self.op_names.setdefault(i, (name, kind, "annotated"))

    def detach(self) -> float:
        """Remove every probe. Returns the seconds it took."""
        t = time.monotonic()
        self.close()
        return time.monotonic() - t

    def close(self) -> None:
        """Stop the sampler and the sources, release the annotation region, remove the probes (idempotent)."""
        self._stop_operations()
        for src in self.sources:
            src.stop()
        self.probes.stop()

    def _stop_operations(self) -> None:
        """Stop the stack sampler and release the annotation region (idempotent)."""
        if self.sampler is not None:
            self.sampler.stop()
        if self.region is not None:
            self.region.detach()

    # -- records -----------------------------------------------------------
    def _meta(self) -> dict:
        probes = [{"id": a.id, "group": a.spec.group, "label": a.spec.label, "kind": a.spec.kind,
                   "category": CATEGORIES[a.spec.category], "lib": a.path,
                   "offset": a.offset, "emulated": a.emulated, "cost_ns": a.cost_ns}
                  for a in self.probes.attached]
        return R.meta(pid=self.pid, command=self.command, t0_ns=self.t0_ns,
                      wall0=time.time() - (time.monotonic_ns() - self.t0_ns) / 1e9,
                      interval_s=self.interval_s, probes=probes,
                      labels=[s.label for s in self.specs],
                      groups={g: sorted({a.path for a in self.probes.attached if a.spec.group == g})
                              for g in self.probes.groups},
                      missing=self.probes.missing, host=platform.node(), kernel=platform.release(),
                      calibrated=self.probes.calibration.measured, max_overhead_pct=self.budget.max_pct,
                      switch_ns=self.probes.calibration.kinds["sched_switch"]["per_switch"],
                      tids0=self.probes.tids0, timeline=self.probes.timeline, fw_slots=list(FW.SLOTS))

    def meta_record(self) -> dict:
        """The session's meta record (what the ring's readers get first)."""
        return self._meta()

    def _counters(self, now: int | None = None) -> dict:
        now = now or time.monotonic_ns()
        ops = {o.op: o for o in self.probes.ops()} if self.op_names or self.sampler else {}
        for tc in self.probes.threads():
            if tc.tgid != self.pid:
                continue
            rec = self._thread_record(tc, now, ops)
            self._aops[tc.tid] = tc.aop
            if tc.exited:                 # its last figures; the record stays bounded (thread_fold)
                self.probes.forget(tc.tid)
                if self.sampler is not None:
                    self.sampler.forget(tc.tid)
                self._threads.pop(tc.tid, None)
                self._names.pop(tc.tid, None)
                self._aops.pop(tc.tid, None)
                self._exited.add(rec)
            else:
                self._threads[tc.tid] = rec
        rec = R.counters(now, list(self._threads.values()) + self._exited.rows(), self.probes.hits(),
                         self.budget.last_pct, ops=self._op_records(ops))
        if self.probes.timeline:
            rec["event_drops"] = self.probes.event_drops()
        cost = self.cost.read()
        if cost is not None:
            rec["cost"] = cost
        if self.sampler is not None:
            smp = self.sampler
            rec["sampler"] = {"hz": smp.hz, "samples": smp.total, "invalid": smp.invalid, "cpu_s": smp.cpu_s(),
                              "error": smp.error}
        return rec

    def _op_records(self, ops: dict[int, OpCounters]) -> list[dict]:
        if ops and any(i not in self.op_names for i in ops) and self.region is not None:
            self._refresh_names()
        smp = self.sampler
        samples = smp.samples() if smp is not None else {}
        out = []
        for i, o in sorted(ops.items()):
            name, kind, src = self.op_names.get(i, (f"op#{i}", "", "annotated"))
            sampled = src == "sampled"
            out.append(R.operation(id=i, name=name, kind=kind, source=src, ns=o.ns, trans=o.trans,
                                   calls=o.calls, oh=o.oh, ticks=o.ticks, samples=samples.get(i, 0) if sampled else None,
                                   samples_incl=smp.inclusive.get(name, 0) if sampled else None,
                                   nested=smp.nested.get(name) if sampled else None,
                                   samples_total=smp.total if sampled else None))
        return out

    def _thread_record(self, tc: ThreadCounters, now: int, ops: dict[int, OpCounters]) -> dict:
        ns = [list(x) for x in tc.ns]
        if not tc.exited and now > tc.last_ts:   # time since the thread's last event
            c = _innermost(tc.depth)
            on = tc.run == 1 or (tc.run == 2 and thread_running(self.pid, tc.tid))
            ns[c][0 if on else 1] += now - tc.last_ts
            if c == catalog.CAT_BACKEND and tc.fw:     # the same time, to the open call's framework
                tc.fw["ns"][tc.fw["cur"] % len(FW.SLOTS)][0 if on else 1] += now - tc.last_ts
            op = self._op_of(tc.tid, tc.aop)
            if op in ops:
                ops[op].ns[c][0 if on else 1] += now - tc.last_ts
        if tc.tid not in self._names:
            self._names[tc.tid] = thread_name(self.pid, tc.tid)
        return R.thread(tid=tc.tid, name=self._names[tc.tid],
                        python=tc.pyflag or tc.opflag or tc.tid == self.pid, exited=tc.exited,
                        ns=ns, trans=tc.trans, calls=tc.calls, oh=tc.oh,
                        fw={k: v for k, v in (tc.fw or {}).items() if k != "cur"} or None, ticks=tc.ticks,
                        switches=tc.switches, preempt_ns=tc.preempt_ns)

    def _drain_events(self) -> None:
        items, timeline = [], []
        for kind, ts, tid, name, cat in self.probes.events():
            if kind in _TIMELINE_KINDS:
                timeline.append([ts, tid, _TIMELINE_KINDS[kind], cat])
                continue
            stack = self._open.setdefault(tid, [])
            if kind == L.EV_RANGE_BEGIN:
                stack.append((name, ts))
            elif kind == L.EV_RANGE_END and stack:
                n, t0 = stack.pop()
                items.append(R.interval(tid, "range", n, t0, ts))
            elif kind == L.EV_THREAD_EXIT and self.probes.timeline:
                timeline.append([ts, tid, "gone", 0])
        if items:
            self.ring.write(R.intervals(items))
        for i in range(0, len(timeline), 20000):     # keep each record well under the ring's size
            self.ring.write(R.events(timeline[i:i + 20000]))


_TIMELINE_KINDS = {L.EV_ENTER: "enter", L.EV_EXIT: "exit", L.EV_ON: "on", L.EV_OFF: "off", L.EV_NEW: "new"}


def _jittered(period: float) -> float:
    return period * random.uniform(1 - SAMPLE_JITTER, 1 + SAMPLE_JITTER)


def _innermost(depth: list[int]) -> int:
    for c in (catalog.CAT_CUDA, catalog.CAT_SIM, catalog.CAT_BACKEND):
        if depth[c]:
            return c
    return catalog.CAT_PY


def _last_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[-1][:200]

