"""The collector: reads the probes and writes records to the ring.

It is the ring's only writer. Counter records carry cumulative totals per thread
since attach, so a reader that loses records to an overrun loses resolution, not
totals. Record types are documented in docs/ring-format.md.
"""

from __future__ import annotations

import time
from typing import Callable

from ..errors import AttachError, BccMissing, BpfCompileError
from ..probes import ann_region, catalog, proc_maps
from ..probes.loader import BccUnavailable, ProbeSet
from ..probes.maps import mapped_files
from ..ring import records as R
from ..ring.ring import RecordTooLarge, RingWriter
from . import op_rules as rules
from .budget import Budget
from .cost_meter import CostMeter
from .op_sources import OperationSources
from . import probe_prices, start_priority
from .neighbours import Neighbours
from .processes import Processes
from .record_builder import META_PERIOD_S, RecordBuilder
from .thread_fold import ExitedThreads, fold_all
from .target import command_line
from .windows import BudgetLoop

EXACT_PCT = 100.0       # --max-overhead 100: the budget never steps a category down
SCAN_PERIOD_S = 0.5     # new libraries are picked up within this (+ one tick)


class Collector(OperationSources, BudgetLoop, RecordBuilder):
    """Attach to one PID and stream what the probes see into a ring."""

    def __init__(self, pid: int, ring: RingWriter, specs: list[catalog.ProbeSpec] | None = None,
                 notify: Callable[[str, str], None] | None = None, interval_s: float = 1.0,
                 max_probes: int = catalog.MAX_PROBES, max_overhead_pct: float = 5.0, timeline: bool = False,
                 op_rules: list | None = None, sample_hz: float | None = 0.0, sources: list | None = None,
                 sampler: str = "auto",
                 children: bool = True, roots: tuple[int, ...] = (), roles: dict[int, str] | None = None):
        self.pid, self.ring, self.interval_s = pid, ring, interval_s
        self.sources = list(sources or [])   # e.g. rlscope_top.collect.gpu_source.GpuSource: start/tick/drain/finish/stop
        self.specs = specs if specs is not None else catalog.builtin()
        self._notify = notify or (lambda level, msg: None)
        self.probes = ProbeSet(pid, self.specs, max_probes=max_probes, notify=self.note, timeline=timeline,
                               children=children, roots=roots)
        self.probes.before_compile = start_priority.end
        self.processes = Processes(self.probes.roots, roles, self.note)
        self.neighbours = Neighbours(self.processes.live, self.note)   # refreshed each tick (_forget_gone)
        self.command = command_line(pid)
        self._names: dict[int, str] = {}
        self._threads: dict[int, dict] = {}     # live threads' rows
        self._exited = ExitedThreads(main_pid=pid)
        self._folded_ops: dict = {}              # (FOLD_PID, op) -> folded processes' OpCounters (record_builder)
        self._folded_note = False
        self._open: dict[int, list[tuple[str, int]]] = {}
        self._op_open: dict[int, tuple[int, int]] = {}    # --timeline: tid -> (its operation, since)
        self._last_scan = self._last_meta = 0.0
        self.t0_ns = 0
        self.program: dict | None = None         # where the BPF program came from, load/attach s (start)
        self.budget = Budget(max_overhead_pct)
        self._samples: dict[int, dict] = {}      # category -> {next, until, period}
        self.region: ann_region.Region | None = None   # the target's annotations, once found
        self.sampler = None                      # probes.stack_sampler.StackSampler, when on
        self.op_names: dict[int, tuple[str, str, str]] = {}   # op id -> (name, kind, source)
        self.op_rules = list(op_rules or []) + rules.BUILTIN
        self.sample_hz = sample_hz
        self.sampler_kind = sampler
        self._sampling_on = False
        self._sampler_reported = False
        self._aops: dict[int, int] = {}          # tid -> annotated op at the latest read
        self._smp_window = (0.0, 0.0)            # (monotonic s, sampler CPU s) at the window start
        self._bk_window = (0.0, 0.0)             # (monotonic s, bookkeeping s) at the window start
        self._smp_pct = self._bk_pct = 0.0       # the sampler's and the bookkeeping's budget.fixed_pct
        self.cost = CostMeter(pid)               # kernel time and CPU the probes' calibration does not see
        self.prices = probe_prices.ProbePrices()  # probe costs measured on the target's own calls
        self._last_price = 0.0

    def note(self, level: str, msg: str) -> None:
        """A notice: to the user (stderr, unless the screen owns the terminal) and to the ring."""
        self._notify(level, msg)
        self.ring.write(R.note(time.monotonic_ns(), level, msg))

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Compile, attach and begin counting. Raises typed errors with hints."""
        self.cost.before_attach()                # the compile below is the target's unprobed stretch
        self._attach_began = time.monotonic()
        self._load()
        self.program = {"from": self.probes.compiled}
        self.mark_attach_step("load_s")
        self.cost.probes_in()
        self._attach()
        self.probes_at_attach = self.probes.n_probes()   # the budget's first windows may change them at once
        self.cost.begin()
        self.mark_attach_step("attach_s")
        self._last_scan = self._last_meta = time.monotonic()
        self.probes.set_ranges(self.probes.category_ranges())
        self.probes.set_process_ranges()
        self.processes.refresh(self.probes.pids())     # the counters' processes, for the first steps
        self.ring.write(self._meta())
        self.neighbours.check()
        self._first_window()                 # the traps run from attach: price them before anything else
        self.mark_attach_step("priced_s")
        self._find_annotations()
        self._start_sampler()
        self.mark_attach_step("sampler_s")
        self.ring.write(self._meta())
        self._attach_notes()
        # before the sources: the GPU agent's injection stops the target, which must not wait on a niced monitor
        if niced := start_priority.end():
            self.program["niced"] = niced
        for src in self.sources:
            src.start(self)
        self.mark_attach_step("sources_s")
        self._forget_gone()   # the children, for waits
        self.processes.waits.start()
        self._settle()
        self._note_verifier()
        self.mark_attach_step("ready_s")
        self.ring.write(self._meta())        # with the whole attach's steps

    def _load(self) -> None:
        """The eBPF program: kept from an earlier session, or compiled now."""
        try:
            self.probes.load()
        except BccUnavailable as e:
            raise BccMissing(f"the bcc Python module is not importable: {e}", pid=self.pid,
                             hint="run `sudo bash scripts/setup.sh` (installs python3-bpfcc) and use .venv/bin/rlscope-top") from None
        except RuntimeError as e:             # the compiler's (or the kernel's) words
            raise BpfCompileError(f"cannot compile the eBPF program: {_last_line(e)}", pid=self.pid,
                                  hint="install or link the kernel headers: `sudo bash scripts/setup.sh`, then `rlscope-top doctor`") from None

    def _attach(self) -> None:
        """The probes, attached and counting from ``t0_ns``."""
        try:
            if self.budget.max_pct < EXACT_PCT:    # exact mode times every call from t0: nothing to price
                self.probes.count_first()        # BudgetLoop._first_window times what fits
            self.t0_ns = self.probes.start()
            self._count_from = (time.monotonic(), self.probes.hits())
        except Exception as e:
            self.probes.stop()
            raise AttachError(f"cannot attach probes to PID {self.pid}: {_last_line(e)}", pid=self.pid,
                              hint="check `rlscope-top doctor`; tracefs must be mounted and you must be root") from None

    def _attach_notes(self) -> None:
        """What the attach could not do, as notes: no known library, a missing one, an unused
        calibration, a build that lacks a symbol."""
        missing = [g for g in ("torch", "cudart", "mujoco") if g not in self.probes.groups]
        if not self.probes.groups:
            py = self.processes.known.get(self.pid, {}).get("python", True)
            self.note("warn", f"PID {self.pid} maps none of the known libraries ({', '.join(catalog.groups())}): "
                               f"counting {'Python and ' if py else ''}on/off-CPU time only; probes attach if one "
                               "is loaded later")
        elif missing:
            self.note("info", "not loaded (yet): " + ", ".join(missing))
        if self.probes.calibration.problem:
            self.note("warn", f"calibration not used: {self.probes.calibration.problem}; probe costs are the "
                              "defaults until `rlscope-top calibrate` runs again")
        for group, syms in self.probes.missing.items():
            self.note("warn", f"{group}: {len(syms)} probe(s) not attached: {', '.join(syms)[:300]}")
        self._sim_lib_notes()

    def _sim_lib_notes(self) -> None:
        """A --sim-lib library the target does not map yet: one warning, since a misspelt name
        would otherwise never attach and never say so."""
        waiting = dict.fromkeys(s.group for s in self.probes.specs
                                if catalog.is_user_spec(s) and s.group not in self.probes.groups)
        if not waiting:
            return
        from ..commands.symbols_cmd import not_mapped_note  # noqa: PLC0415 - only with --sim-lib
        mapped = sorted(mapped_files(self.pid))
        for group in waiting:
            self.note("warn", not_mapped_note(group.removeprefix("sim:"), mapped))

    def _note_verifier(self) -> None:
        """What the kernel's verifier did for the kept program's loads so far (seconds and
        instructions walked): most of a cached load's time (docs/overhead.md, "The verifier")."""
        verified = getattr(self.probes.bpf, "verified", None)
        if verified:
            self.program["verifier"] = {"s": round(sum(s for _, s in verified.values()), 3),
                                        "insns": sum(n for n, _ in verified.values())}

    def mark_attach_step(self, step: str) -> None:
        """Where attach time goes: seconds from the load's start to the end of ``step``, in the
        summary's probes.program (the GPU source marks its own steps too)."""
        self.program[step] = round(time.monotonic() - self._attach_began, 3)

    def _forget_gone(self) -> None:
        """Let go of the processes that exited since the last tick: the kernel's targets and
        the sampler's per-process state (both bounded; a job may churn workers all day)."""
        gone = self.processes.refresh(self.probes.pids())
        self.probes.forget_processes(gone)
        if gone and self.sampler is not None:
            self.sampler.forget_processes(gone)

    def tick(self) -> None:
        """Pick up new libraries, drain events, and write one counters record."""
        with proc_maps.one_read():            # the scan and the GPU source's look share one read
            self._tick()

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last_scan >= SCAN_PERIOD_S:
            self._last_scan = now
            self._scan(now)
        if now - self._last_meta >= META_PERIOD_S:
            self._last_meta = now
            self.ring.write(self._meta())
        self.neighbours.check(now)
        self._drain_events()
        self._check_sampler()
        self._bookkeeping_budget()
        self._record_stacks()
        self._forget_gone()
        ctr = self._counters()
        self._write_counters(ctr)
        if now - self._last_price >= probe_prices.PERIOD_S:
            self._last_price = now
            probe_prices.reprice(self.prices, self.probes, ctr["threads"], now)
        for src in self.sources:
            src.tick()
        if not self._sample(now):
            self._apply_budget(now, ctr["hits"])


    def _scan(self, now: float) -> None:
        """New libraries, the annotation region, the tick's ranges (what the maps say only
        where they may have changed; the region's new names each time)."""
        changed = self.probes.maps_changed(now)
        if changed or self.region is not None:
            self._find_annotations()
        if not changed:
            return
        if self.probes.scan():
            self.ring.write(self._meta())
            self._last_meta = now
        self.probes.set_ranges(self.probes.category_ranges())     # a library that maps no probe counts too
        self.probes.set_process_ranges()
        self.probes.set_xol()

    def _write_counters(self, ctr: dict, sources: bool = True) -> None:
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
        for src in self.sources if sources else ():
            src.on_counters(ctr)

    def stop_counting(self, reason: str) -> None:
        """Freeze the counters and write the final records (probes stay attached)."""
        for src in self.sources:          # e.g. the GPU agent's last buffers (a forced flush)
            src.drain()
        frozen = self.probes.freeze()
        self.processes.waits.stop()
        self.processes.refresh([])               # a process that ended just now ends in the summary
        self._stop_operations()
        self._record_stacks()
        self._drain_events(final=True)
        self._close_ops(frozen)
        self._write_counters(self._counters(frozen))
        for src in self.sources:
            src.finish(frozen)
        self.ring.write(R.end(frozen, reason))


    def detach(self) -> float:
        """Remove every probe. Returns the seconds it took."""
        t = time.monotonic()
        self.close()
        return time.monotonic() - t

    def close(self) -> None:
        """Stop the sampler and the sources, release the annotation region, remove the probes (idempotent)."""
        self._stop_operations()
        self.processes.waits.stop()
        for src in self.sources:
            src.stop()
        self.probes.stop()


def _last_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[-1][:200]

