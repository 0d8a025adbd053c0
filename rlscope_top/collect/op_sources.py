"""Where the collector learns operations: the target's annotation region and the stack
sampler (in the kernel, or austin), throttled to its share of the overhead budget."""

from __future__ import annotations

import time

from ..probes import ann_region
from ..probes.kernel_sampler import SOP_BLOCKED, KernelStackSampler
from ..probes.stack_sampler import StackCounts, StackSampler
from ..ring import records as R
from ..vocab import ALL_OP
from .target import is_alive

SAMPLER_WINDOW_S = 5.0  # the stack sampler's CPU is checked over this ...
SAMPLER_SHARE = 0.5     # ... against this share of the overhead budget (% of one core)
MIN_SAMPLE_HZ = 10.0
AUSTIN_HZ = 100.0       # austin's default rate (it costs ~5% of a core there, docs/overhead.md)


class OperationSources:
    """The operation sources of a ``Collector`` (mixed in; it sets ``probes``, ``pid`` and
    the operation bookkeeping)."""

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
        if self.sample_hz == 0:
            return
        stacks = StackCounts() if hasattr(self.ring, "record") else None     # recording: keep the stacks
        smp = self._kernel_sampler(stacks) if self.sampler_kind != "austin" else None
        if smp is None and self.sampler_kind != "kernel":
            smp = StackSampler(self.pid, self.op_rules, self.sample_hz or AUSTIN_HZ, self._sampled_op,
                               children=self._has_children(), stacks=stacks)
            if not smp.start():
                self.note("warn", f"operations unavailable: {smp.error}; the category breakdown is unaffected")
                return
            if smp.sched_error:
                self.note("warn", f"austin runs under the normal scheduler ({smp.sched_error}): on a machine with "
                                  "no idle core its samples come late, and short phases that keep the CPU busy read short")
        if smp is None:
            return
        self.sampler = smp
        for name, i in smp.ids.items():
            self.op_names[i] = (name, smp.matcher.kinds.get(name, ""), "sampled")

    def _kernel_sampler(self, stacks) -> KernelStackSampler | None:
        """The in-kernel sampler, or None (said why: a warning if asked for, else austin takes over)."""
        # by default every tick: a tick's category counts for the operation its own stack names
        # (probes/bpf_program.c op_tick); a tick with no sample keeps the last one's
        hz = self.sample_hz or self.probes.tick_hz or AUSTIN_HZ
        smp = KernelStackSampler(self.pid, self.op_rules, hz, self._sampled_op, self.probes,
                                 children=self._has_children(), stacks=stacks)
        if not self.probes.tick_hz or self.probes.pystack_error:
            smp.error = self.probes.pystack_error or "no CPU-clock tick to sample on"
        elif smp.start():
            if smp.root_error:
                self.note("info", f"operations unavailable in PID {self.pid} itself ({smp.root_error}); "
                                  "the Python processes it starts are sampled")
            return smp
        if self.sampler_kind == "kernel":
            self.note("warn", f"operations unavailable: the in-kernel stack sampler cannot read PID {self.pid}: "
                               f"{smp.error}. Hint: --sampler austin; the category breakdown is unaffected")
        else:
            self.note("info", f"stack sampler: austin (the in-kernel one cannot read PID {self.pid}: {smp.error})")
        return None

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
        self._sampler_follows_tree()
        if not smp.ended or self._sampler_reported:
            return
        self._sampler_reported = True
        if smp.error and is_alive(self.pid):
            launcher = smp.tool == "austin" and not self.processes.known.get(self.pid, {}).get("python", True)
            hint = (f" PID {self.pid} runs no Python: --sampler auto reads the Python processes it starts."
                    if launcher else "")
            self.note("warn", f"operations unavailable: {smp.tool} cannot sample PID {self.pid}: {smp.error} "
                               f"The category breakdown is unaffected.{hint}")

    def _has_children(self) -> bool:
        """The tree is followed and has processes besides its roots."""
        return self.probes.children and len(self.probes.pids()) > len(self.probes.roots)

    def _sampler_follows_tree(self) -> None:
        """Restart austin with -C once the target has children. Not before: -C costs austin
        ~1.4% of a core at any rate (bench/austin_children_cost.py: 25 Hz 0.6% -> 2.0%), which
        halving the rate cannot lower, and more than half a 2% budget."""
        smp = self.sampler
        if smp.ended or smp.children or not self._has_children():
            return
        self.sampler = smp.restarted(smp.hz, children=True)
        self._smp_window = (0.0, 0.0)

    def _bookkeeping_budget(self) -> None:
        """Every 5 s: the program's bookkeeping on the target's switches and ticks (measured in
        the kernel; ~2% of rl-games' job with 4 torch threads) and the ticks' interrupts around
        it go into the budget's total beside the sampler's CPU: no step lowers them either."""
        self._bk_window, pct = _window_pct(self._bk_window, lambda: self._bookkeeping_s() + self._tick_s())
        if pct is not None:
            self._bk_pct = pct
            self.budget.fixed_pct = self._smp_pct + self._bk_pct

    def _sampler_budget(self, smp) -> None:
        """Every 5 s: austin's CPU goes into the budget's total; above half the budget (% of one
        core) it halves its rate."""
        if smp.ended:
            return
        self._smp_window, pct = _window_pct(self._smp_window, smp.cpu_s)
        if pct is not None:
            self._smp_pct = pct
            self.budget.fixed_pct = self._smp_pct + self._bk_pct    # in the budget's total: no step lowers it
        if pct is not None and pct > SAMPLER_SHARE * self.budget.max_pct and smp.hz > MIN_SAMPLE_HZ:
            hz = max(MIN_SAMPLE_HZ, smp.hz / 2)
            self.note("warn", f"stack sampler used {pct:.1f}% of a core > {SAMPLER_SHARE * self.budget.max_pct:g}%: "
                               f"{smp.hz:g} -> {hz:g} samples/s")
            self.sampler = smp.restarted(hz)
            self._smp_window = (0.0, 0.0)

    def _sampled_op(self, tid: int, op: int, ts_ns: int) -> None:
        """The sampler saw a thread change operation (called from its reader thread)."""
        self.probes.set_sampled_op(tid, op, ts_ns)
        if op & ~SOP_BLOCKED and not self._sampling_on:
            # the kernel looks sampled operations up only once a rule has matched, so a
            # target no rule fits pays nothing for the sampler in its probes
            self._sampling_on = True
            self.probes.set_op_source(2)

    def _refresh_names(self) -> None:
        for i, (name, kind) in self.region.names().items():
            self.op_names.setdefault(i, (name, kind, "annotated"))

    def _record_stacks(self) -> None:
        """--record: the stacks sampled since the last call go to the recording (not the ring)."""
        smp = self.sampler
        if smp is None or smp.stacks is None:
            return
        frames, items = smp.stacks.take()
        if frames or items:
            self.ring.record(R.stacks(time.monotonic_ns(), frames, items))

    def _stop_operations(self) -> None:
        """Stop the stack sampler and release the annotation region (idempotent)."""
        if self.sampler is not None:
            self.sampler.stop()
        if self.region is not None:
            self.region.detach()


def _window_pct(window: tuple[float, float], read) -> tuple[tuple[float, float], float | None]:
    """A cost's growth over its window as % of the window's wall time, once SAMPLER_WINDOW_S
    has passed since the window began (``read`` is called only then).

    Args:
        window: (monotonic s, the cost's cumulative seconds) at the window's start; (0, 0) before the first.
        read: the cost's cumulative seconds now, or None where it cannot say (the window stays).

    Returns:
        (the window to keep, the % over the one that ended, or None: too early, unread, or the first).
    """
    now = time.monotonic()
    t0, c0 = window
    if now - t0 < SAMPLER_WINDOW_S:
        return window, None
    cost = read()
    if cost is None:
        return window, None
    return (now, cost), (100 * (cost - c0) / (now - t0) if t0 else None)
