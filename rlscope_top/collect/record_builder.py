"""What the collector writes to the ring: the meta record, the counters record (threads,
operations, exited threads folded) and the events drained from the kernel."""

from __future__ import annotations

import platform
import time

from ..ring import records as R
from ..probes import catalog
from ..probes import frameworks as FW
from ..probes import maps as M
from ..probes.maps import OpCounters, ThreadCounters
from ..vocab import CATEGORIES
from .target import thread_name, thread_running

META_PERIOD_S = 10.0    # late readers find a meta record within this
_TIMELINE_KINDS = {M.EV_ENTER: "enter", M.EV_EXIT: "exit", M.EV_ON: "on", M.EV_OFF: "off", M.EV_NEW: "new",
                   M.EV_CLOSE: "close"}


class RecordBuilder:
    """The ring records of a ``Collector`` (mixed in)."""

    # -- records -----------------------------------------------------------
    def _meta(self) -> dict:
        probes = [{"id": a.id, "group": a.spec.group, "label": a.spec.label, "kind": a.spec.kind,
                   "category": CATEGORIES[a.spec.category], "lib": a.path,
                   "offset": a.offset, "emulated": a.emulated, "cost_ns": a.cost_ns,
                   "kernel_share": self.probes.calibration.kernel_share(a.spec.kind, a.emulated, a.spec.group)}
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
                      tick_ns=self.probes.calibration.kinds["tick"]["per_tick"],
                      tids0=self.probes.tids0, timeline=self.probes.timeline, fw_slots=list(FW.SLOTS),
                      program=self.program)

    def meta_record(self) -> dict:
        """The session's meta record (what the ring's readers get first)."""
        return self._meta()

    def _counters(self, now: int | None = None) -> dict:
        now = now or time.monotonic_ns()
        per = {(o.pid, o.op): o for o in self.probes.ops()} if self.op_names or self.sampler else {}
        per.update(self._folded_ops)
        for tc in self.probes.threads():
            owner = self.processes.owner(tc.tgid)
            if owner is None:                # a pid whose process the job no longer has
                continue
            rec = self._thread_record(tc, now, per)
            if owner != tc.tgid:             # its process was folded (processes.fold_exited)
                rec["pid"] = owner
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
        if folded := self.processes.fold_exited():
            self._exited.fold_pids(folded, R.FOLD_PID)
            self._fold_ops(per, folded)
        ops = _job_ops(per)
        rec = R.counters(now, list(self._threads.values()) + self._exited.rows(), self.probes.hits(),
                         self.budget.last_pct, ops=self._op_records(ops), procs=self.processes.records(per))
        rec["event_drops"] = self.probes.event_drops()
        rec["run_fixes"] = self.probes.run_fixes()
        rec["closed_calls"] = self.probes.closed_calls()
        rec["bookkeeping_s"] = self._bookkeeping_s()
        if ranges := self.probes.named_ranges():
            rec["ranges"] = ranges
        cost = self.cost.read()
        if cost is not None:
            rec["cost"] = cost
        if self.prices.trap_ticks:
            rec["prices"] = self._prices()
        if self.sampler is not None:
            smp = self.sampler
            rec["sampler"] = {"tool": smp.tool, "hz": smp.hz, "samples": smp.total, "invalid": smp.invalid, "cpu_s": smp.cpu_s(),
                              "error": smp.error, "site_ticks": smp.site_ticks()}
        return rec

    def _bookkeeping_s(self) -> float:
        """The program's time on the targets' switches and ticks less its stack reads (the
        kernel sampler's ``cpu_s``, counted apart as ``sampler``)."""
        reads = self.sampler.cpu_s() if self.sampler is not None and self.sampler.tool == "kernel" else 0.0
        return round(max(0.0, self.probes.bookkeeping_ns() / 1e9 - (reads or 0.0)), 6)

    def _tick_s(self) -> float:
        """What the clock ticks' interrupts have cost the target's threads so far, beyond the
        program's own time (their ticks at the calibrated ``tick`` price)."""
        rows = [*self._threads.values(), *self._exited.rows()]
        return R.target_ticks(rows) * self.probes.calibration.kinds["tick"]["per_tick"] / 1e9

    def _prices(self) -> dict:
        """Probe costs measured on the target's calls (probe_prices.py): all trap ticks so far,
        per probe part measured so far its ns per hit before and after its timestamp, and the
        probes whose calibrated price the measurement raised, by how much, and those charged
        at the split their ticks found ([before, after] ns a hit)."""
        labels = {a.id: a.spec.label for a in self.probes.attached}
        measured = {f"{labels.get(slot // 2, slot // 2)}:{'exit' if slot % 2 else 'enter'}": [round(x) for x in ns]
                    for slot, ns in self.prices.last.items()}
        raised = {a.spec.label: round(a.scale, 3) for a in self.probes.attached if a.scale != 1.0}
        return {"trap_ticks": self.prices.trap_ticks, "ns_per_tick": round(self.prices.ns_per_tick),
                "measured_ns": measured, "raised": raised, "split": self.probes.measured_splits()}

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

    def _fold_ops(self, per: dict, folded: set[int]) -> None:
        """The folded processes' operations go with them: kept here, out of the kernel's table
        (4,096 entries, one per process and operation, never freed before)."""
        self.probes.forget_ops(_fold_ops_into(per, folded, self._folded_ops))

    def _thread_record(self, tc: ThreadCounters, now: int, ops: dict[tuple[int, int], OpCounters]) -> dict:
        ns = [list(x) for x in tc.ns]
        if not tc.exited and now > tc.last_ts:   # time since the thread's last event
            c = _innermost(tc.depth)
            on = tc.run == 1 or (tc.run == 2 and thread_running(tc.tgid, tc.tid))
            ns[c][0 if on else 1] += now - tc.last_ts
            if c == catalog.CAT_BACKEND and tc.fw:     # the same time, to the open call's framework
                tc.fw["ns"][tc.fw["cur"] % len(FW.SLOTS)][0 if on else 1] += now - tc.last_ts
            # the kernel's op (its state as of the last event), not the sampler's: a blocked
            # sample the kernel named owns the wait only, and the sampler's idea stays the op
            # the thread ran in (its open wait charged there read up to a sleep high at the end)
            op = (tc.tgid, tc.op_now if self.sampler is not None and self.sampler.tool == "kernel"
                  else self._op_of(tc.tid, tc.aop))
            if op in ops:
                ops[op].ns[c][0 if on else 1] += now - tc.last_ts
        if tc.tid not in self._names:
            self._names[tc.tid] = thread_name(tc.tgid, tc.tid)
        return R.thread(tid=tc.tid, name=self._names[tc.tid], pid=tc.tgid,
                        python=tc.pyflag or tc.opflag or self.processes.main_python(tc.tgid, tc.tid),
                        exited=tc.exited,
                        ns=ns, trans=tc.trans, calls=tc.calls, oh=tc.oh,
                        fw={k: v for k, v in (tc.fw or {}).items() if k != "cur"} or None, ticks=tc.ticks,
                        switches=tc.switches, preempt_ns=tc.preempt_ns, omp_ticks=tc.omp_ticks)

    def _op_changed(self, tid: int, op: int, ts: int) -> list[list]:
        """--timeline: a thread's operation changed at ``ts``; the one it left is an ``op`` interval."""
        if op and op not in self.op_names and self.region is not None:
            self._refresh_names()
        left = self._op_open.pop(tid, None)
        if op:
            self._op_open[tid] = (op, ts)
        if left is None:
            return []
        return [R.interval(tid, "op", self.op_names.get(left[0], (f"op#{left[0]}",))[0], left[1], ts)]

    def _close_ops(self, ts: int) -> None:
        """At the end: the operations still open are intervals up to ``ts``."""
        items = [iv for tid in list(self._op_open) for iv in self._op_changed(tid, 0, ts)]
        if items:
            self.ring.write(R.intervals(items))

    def _drain_events(self, final: bool = False) -> None:
        """Ranges, operation changes and timeline events from the kernel's buffer into the
        ring; ``final``: all of them (counting has stopped), not one tick's budget."""
        items, timeline = [], []
        for kind, ts, tid, name, cat in self.probes.events(None if final else M.DRAIN_BUDGET_S):
            if kind in _TIMELINE_KINDS:
                timeline.append([ts, tid, _TIMELINE_KINDS[kind], cat])
                continue
            stack = self._open.setdefault(tid, [])
            if kind == M.EV_RANGE_BEGIN:
                stack.append((name, ts))
            elif kind == M.EV_RANGE_END and stack:
                n, t0 = stack.pop()
                items.append(R.interval(tid, "range", n, t0, ts))
            elif kind == M.EV_OP:
                items += self._op_changed(tid, cat, ts)
            elif kind == M.EV_THREAD_EXIT and self.probes.timeline:
                timeline.append([ts, tid, "gone", 0])
        if items:
            self.ring.write(R.intervals(items))
        for i in range(0, len(timeline), 20000):     # keep each record well under the ring's size
            self.ring.write(R.events(timeline[i:i + 20000]))


def _fold_ops_into(per: dict, folded: set[int], into: dict) -> list[tuple[int, int]]:
    """Folded processes' operation counters (final: they exited) add into ``into``'s
    ((FOLD_PID, op) keys) and leave ``per``. Returns the keys that left."""
    mine = {k: o for k, o in per.items() if k[0] in folded}
    if mine:
        for op, o in _job_ops({**mine, **into}).items():
            o.pid = R.FOLD_PID
            into[(R.FOLD_PID, op)] = o
        for k in mine:
            del per[k]
        per.update(into)
    return list(mine)


def _job_ops(per: dict[tuple[int, int], OpCounters]) -> dict[int, OpCounters]:
    """Operation counters summed over the job's processes (the kernel keeps one per process)."""
    out: dict[int, OpCounters] = {}
    for (_, op), o in sorted(per.items()):
        if op not in out:
            out[op] = OpCounters(op=op, ns=[list(x) for x in o.ns], trans=[list(x) for x in o.trans],
                                 calls=list(o.calls), oh=list(o.oh), ticks=list(o.ticks))
            continue
        j = out[op]
        for i in range(len(j.ns)):
            j.ns[i] = [j.ns[i][0] + o.ns[i][0], j.ns[i][1] + o.ns[i][1]]
            j.calls[i] += o.calls[i]
            j.oh[i] += o.oh[i]
            j.trans[i] = [a + b for a, b in zip(j.trans[i], o.trans[i])]
        j.ticks = [a + b for a, b in zip(j.ticks, o.ticks)]
    return out


def _innermost(depth: list[int]) -> int:
    for c in (catalog.CAT_CUDA, catalog.CAT_SIM, catalog.CAT_BACKEND):
        if depth[c]:
            return c
    return catalog.CAT_PY
