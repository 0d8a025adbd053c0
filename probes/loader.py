"""Load the BPF program and attach probes to a target's libraries; the budget's levers.

This is the only module that imports bcc. It knows nothing about display or the ring: it
hands plain Python values to the collector. The program's source and its compile live in
probes/program.py, the map readers and writers in probes/maps.py (mixed into ``ProbeSet``).
"""

from __future__ import annotations

import ctypes as ct
import dataclasses
import os
import resource
import threading
import time
from typing import Callable

from . import catalog
from .catalog import ALWAYS_ON, ENTER, EXIT, PAIR, RANGE_END, ProbeSpec
from . import frameworks as fw
from .tick_jitter import TickJitter
from . import bpf_cache, uprobe_multi
from .maps import MapAccess, ancestors, descendants, mapped_files, task_ids
from .program import capture_output, compiler_reason, first_line, generic_fn, low_priority, program_text
from . import elf_symbols, proc_maps, symbols
from .symbols import resolve as resolve_symbol, target_file
from .static_copies import StaticCopies
from .prologue import cheap_offset, is_cheap_at, pair_offset
from ..collect.calibration import Calibration, load as load_calibration
from ..errors import BccUnavailable
from ..safe_files import open_regular

FULL_SCAN_S = 5.0   # a scan reads the maps at least this often, changed or not (maps_changed)
TICK_HZ = 250   # CPU-clock tick per CPU that applies pending operation changes (bpf_program.c TICK_NS)


def import_bcc():
    """Import bcc or raise BccUnavailable with the reason."""
    try:
        import bcc  # noqa: PLC0415 - optional system module
    except Exception as e:  # ImportError, or a broken libbcc
        raise BccUnavailable(str(e)) from None
    return bcc


@dataclasses.dataclass
class Attached:
    """A probe that is live in the kernel."""

    id: int
    spec: ProbeSpec
    path: str
    offset: int
    emulated: bool     # the probed instruction is emulated, not stepped out of line
    cost_ns: int       # cost of one hit, of the parts still attached (calibrated, or measured)
    root_path: str = ""
    parts: dict = dataclasses.field(default_factory=dict)   # part -> (uprobe|uretprobe, offset)
    scale: float = 1.0  # its calibrated cost times this: what its traps measured on the target say (>= 1)
    before_ns: float | None = None   # a lone enter/exit probe: its trap's ns before the timestamp, measured


class ProbeSet(MapAccess):
    """The BPF program and the probes attached to one target process."""

    def __init__(self, pid: int, specs: list[ProbeSpec], max_probes: int = catalog.MAX_PROBES,
                 notify: Callable[[str, str], None] | None = None, calibration: Calibration | None = None,
                 timeline: bool = False, children: bool = True, roots: tuple[int, ...] = ()):
        self.pid = pid
        # the process tree: the kernel adds new processes to its targets map at fork; each
        # followed process that maps a library gets its own uprobe_multi links (_link_pids)
        self.children = children
        self.roots = (pid, *[r for r in roots if r != pid])   # --pid given more than once
        self.timeline = timeline
        self.tids0: list[int] = []
        self.calibration = calibration or load_calibration()
        self.specs = specs
        self.max_probes = max_probes
        self.notify = notify or (lambda level, msg: None)
        self.before_compile = lambda: None       # the session's niced start gives way to the compile's own steps
        self.attached: list[Attached] = []
        self.missing: dict[str, list[str]] = {}
        self._mappers: dict[str, list[int]] = {}  # mapped path -> the followed processes that map it
        self._first: list[int] = []              # the processes at attach
        self.groups: dict[str, str] = {}          # group -> library path
        self._tried: set[tuple[int, str]] = set()
        self._by_name: dict[str, tuple[int, ...]] = {}     # path -> specs whose library pattern it matches
        self._any_lib = [i for i, s in enumerate(specs) if s.any_lib]
        self.modes: dict[int, str] = {}           # category -> timed | count | off
        self._offsets: dict[tuple, int] = {}      # (library, symbol, offset) -> file offset
        self._events: list[tuple] = []
        self._drain_until = 0.0
        self._range_names: dict[int, str] = {}   # the kernel's range name ids (named_ranges)
        self.bpf = None
        self.compiled: str | None = None          # load(): "cache" (probes/bpf_cache.py) or "bcc"
        self.t0_ns = 0
        self.tick_hz = 0          # the CPU-clock tick's rate once attached (0: none)
        self.jitter: TickJitter | None = None    # draws the tick's period (None: not drawn)
        self.pystack_error: str | None = None   # why the in-kernel stack sampler cannot run
        self._cfg_lock = threading.Lock()
        self._sop: dict[int, object] = {}        # tid -> the sampled-op history leaf we write
        self._sop_seq: dict[int, int] = {}
        self._ranges_set: list[tuple[int, int, int]] | None = None   # what the tick's ranges map holds
        self._pranges: dict[int, list] = {}      # pid -> its own ranges in the kernel's pranges
        self._pranges_full = False                # said that pranges is full (once a session)
        self._xol_set: tuple[int, int] | None = None   # what the tick's xol map holds
        self._scan_key: tuple | None = None        # maps_changed: what the last scan saw, and when
        self._scan_at = 0.0
        self._copies = StaticCopies(pid, frozenset(s.symbol for s in specs if s.any_lib))

    # -- lifecycle ---------------------------------------------------------
    def load(self) -> None:
        """Compile the program. Raises BccUnavailable, or RuntimeError with the compiler's words."""
        bcc = import_bcc()
        self._bcc = bcc
        # uprobe_multi links detach in parallel (~0.05 s for 35 probes, not ~3.5 s) and need only
        # the generic programs
        self.multi = uprobe_multi.wanted()
        text = program_text(self.specs, generic=self.multi)
        self.bpf = self._from_cache(text)
        self.compiled = "cache" if self.bpf is not None else "bcc"
        if self.bpf is None:
            self.before_compile()
            with capture_output() as said, low_priority():
                try:
                    self.bpf = bcc.BPF(text=text.encode())
                except Exception as e:
                    raise RuntimeError(compiler_reason(said(), e)) from None
            why = bpf_cache.save(self.bpf, text)
            if why and bpf_cache.enabled():
                self.notify("info", f"compiled probes not kept for the next attach: {why}")
        try:
            self.bpf["events"].open_ring_buffer(self._on_event)
        except Exception as e:          # bcc raises plain Exception: a kernel without BPF ring buffers
            raise RuntimeError(f"the kernel refused a BPF ring buffer (needs Linux 5.8+): {e}") from None
        self._arm_stack_sampler()

    def _arm_stack_sampler(self) -> None:
        """Put the in-kernel stack sampler's programs behind on_tick's and sched_switch's tail
        calls (verified apart from them). On failure ``pystack_error`` says why; the session
        goes on, and the austin sampler stands in."""
        self.pystack_error = None
        try:
            for table, fn, kind in (("pys_tick_prog", "pys_tick", self._bcc.BPF.PERF_EVENT),
                                    ("pys_switch_prog", "pys_switch", self._bcc.BPF.TRACEPOINT)):
                self.bpf[table][ct.c_int(0)] = ct.c_int(self.bpf.load_func(fn, kind).fd)
        except Exception as e:          # bcc raises plain Exception (the verifier's refusal)
            self.pystack_error = f"the kernel refused its programs: {first_line(e)}"

    def _from_cache(self, text: str):
        """The same program compiled before, or None. Two programs every session uses load now:
        a record the verifier refuses is dropped and the program compiled."""
        bpf = bpf_cache.load(text)
        if bpf is None:
            return None
        try:
            if self.multi:     # every session uses it; the rest load (and verify) at attach
                bpf.load_func("g_enter", self._bcc.BPF.KPROBE, attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI)
            bpf.load_func("on_tick", self._bcc.BPF.PERF_EVENT)
        except Exception:
            bpf.cleanup()
            bpf_cache.forget(text)
            return None
        return bpf

    def start(self) -> int:
        """Attach to mapped libraries, then begin counting. Returns t0 (monotonic ns)."""
        _more_fds()
        self._first = list(self._seed_order())      # the first scan reads what the tree maps now
        self.scan()
        self._load_exits()
        self.t0_ns = time.monotonic_ns()
        threads = self.bpf["threads"]
        if self.timeline:
            self.bpf["timeline"][ct.c_int(0)] = ct.c_uint(1)
        self.bpf["follow"][ct.c_int(0)] = ct.c_uint(1 if self.children else 0)
        self.tids0 = []
        # a root first, then what it forked by now: a fork after its root went in is the kernel's
        for pid in self._seed_order():
            tids = task_ids(pid)
            self.tids0 += tids
            for tid in tids:
                leaf = threads.Leaf()
                leaf.tgid = pid
                leaf.tid = tid
                leaf.last_ts = self.t0_ns
                leaf.run = 2
                threads[ct.c_uint(tid)] = leaf
            self.bpf["targets"][ct.c_uint(pid)] = ct.c_uint(1)
        self.tick_hz = 0
        try:    # bounds how long a thread's operation change can wait for an event
            self.bpf.attach_perf_event(ev_type=self._bcc.PerfType.SOFTWARE,
                                       ev_config=self._bcc.PerfSWConfig.CPU_CLOCK,
                                       fn_name="on_tick", sample_freq=TICK_HZ, cpu=-1)
            self.tick_hz = TICK_HZ             # the in-kernel stack sampler's clock too (the mean rate)
        except Exception as e:  # no perf events here: operation boundaries wait for events
            self.notify("warn", f"no CPU-clock tick ({first_line(e)}): operation boundaries of threads "
                                "that run long without a probe hit are applied late")
        else:
            self._jitter_tick()
        return self.t0_ns

    def _jitter_tick(self) -> None:
        """Draw the tick's period at random from now on (probes/tick_jitter.py), unless
        RLSCOPE_TICK_JITTER=0 (benchmarks and the test that shows what it fixes)."""
        if os.environ.get("RLSCOPE_TICK_JITTER") == "0":
            return
        fds = self.bpf.open_perf_events[(self._bcc.PerfType.SOFTWARE, self._bcc.PerfSWConfig.CPU_CLOCK)]
        self.jitter = TickJitter(list(fds.values()), 1_000_000_000 // TICK_HZ)
        if not self.jitter.start():
            self.notify("warn", f"{self.jitter.error}: a loop paced in step with the 4 ms tick may have all "
                                "its CPU ticks in one part of its cycle")

    def _seed_order(self):
        """The roots, each followed by its descendants (when following children). The monitor
        is never one: where it runs below a root (a launcher script that attaches to itself),
        its own process, austin and anything else it started stay out of the counts. Nor is
        a process between a root and the monitor, or what it started (`attach 1`: the shell
        the monitor runs in, its other commands)."""
        mine = frozenset({os.getpid(), *ancestors(os.getpid())} - set(self.roots))
        for root in self.roots:
            yield root
            if self.children:
                yield from descendants(root, prune=mine)

    def pids(self) -> list[int]:
        """The processes counted now: the roots and, with children, what the kernel added."""
        if self.bpf is None:
            return list(self.roots)
        try:
            return sorted({*self.roots, *(k.value for k in self.bpf["targets"].keys())})
        except Exception:          # a map read during teardown
            return list(self.roots)

    @property
    def probe_pid(self) -> int:
        """The pid kernel probes filter on: the one target, or 0 when following a tree or
        several roots (uprobe_multi links: one for each process, ``_link_pids``; perf-event
        uprobes, before Linux 6.6: every process that maps the library, the program keeping
        the targets')."""
        return 0 if self.children or len(self.roots) > 1 else self.pid

    def freeze(self) -> int:
        """Stop counting (probes stay attached but do nothing). Returns the freeze time."""
        if self.bpf is not None:
            self.bpf["targets"].clear()
        return time.monotonic_ns()

    def stop(self) -> None:
        """Stop counting first, then remove every probe (slow: ~0.1 s each)."""
        if self.bpf is None:
            return
        try:
            self.freeze()
        except Exception:
            pass
        links = [fd for a in self.attached for how_fd in a.parts.values() if how_fd[0] == "link"
                 for fd in how_fd[1].values()]
        uprobe_multi.close_all(links)            # all at once: their grace periods overlap
        for a in self.attached:
            a.parts = {k: v for k, v in a.parts.items() if v[0] != "link"}
        if self.jitter is not None:
            self.jitter.stop()                   # before the fds it sets close
        self._close_events_at_once()
        self.bpf.cleanup()
        self.bpf = None

    def _close_events_at_once(self) -> None:
        """bcc's cleanup closes the tracepoints and per-CPU perf events one by one, and each
        close waits out a grace period (~65 ms here): close them together first."""
        b, close = self.bpf, self._bcc.libbcc.lib.bpf_close_perf_event_fd
        fds = list(b.tracepoint_fds.values()) + [fd for evs in b.open_perf_events.values() for fd in evs.values()]
        uprobe_multi.close_all(fds, close)
        b.tracepoint_fds.clear()      # bcc's detach_tracepoint does nothing more than the close
        b.open_perf_events.clear()

    # -- attaching ---------------------------------------------------------
    def n_probes(self) -> int:
        """Kernel probes attached now."""
        return sum(len(a.parts) for a in self.attached)

    def maps_changed(self, now: float) -> bool:
        """Whether a scan can find anything new: a scanned process's library code or shared memory (proc_maps.stamp),
        the categories' modes (an ``off`` category's new libraries wait for a window) or the
        probes attached changed since the last time this said so, or FULL_SCAN_S passed (a
        library swapped for one of the same size). rl-zoo3's ~1,300 regions cost ~3.5 ms a scan
        to read and parse, every 0.5 s, and stay the same for a whole training run."""
        key = (proc_maps.stamp(self._scan_pids()), tuple(sorted(self.modes.items())), self.n_probes())
        if key == self._scan_key and now - self._scan_at < FULL_SCAN_S:
            return False
        self._scan_key, self._scan_at = key, now
        return True

    def _scan_pids(self) -> list[int]:
        return list(dict.fromkeys([*self.roots, *self._first, *self.pids()]))

    def scan(self) -> list[str]:
        """Attach probes to libraries mapped since the last scan. Returns new groups."""
        new_groups = []
        self._mappers = {}
        for pid in self._scan_pids():
            for path in mapped_files(pid):
                self._mappers.setdefault(path, []).append(pid)
        paths = set(self._mappers)
        self._relink()
        copies = self._copies.scan(paths, skip=self._named)   # libraries with a static copy (envpool's MuJoCo)
        # end-of-call probes first (as within a pair): a call already running when its begin
        # probe went in would otherwise hold the depth open for good
        order = sorted(enumerate(self.specs), key=lambda x: x[1].kind not in (EXIT, RANGE_END))
        wanted = self._wanted(paths, copies)
        for i, spec in order:
            for path in wanted.get(i, ()):
                if (i, path) in self._tried or self.modes.get(spec.category) == "off":
                    continue
                self._tried.add((i, path))
                if self._attach(i, spec, path) and spec.group not in self.groups:
                    self.groups[spec.group] = path
                    new_groups.append(spec.group)
        for g in new_groups:
            mine = [a for a in self.attached if a.spec.group == g]
            libs = ", ".join(sorted({os.path.basename(a.path) for a in mine}))
            self.notify("info", f"attached {sum(a.spec.n_attach for a in mine)} probes for {g} ({libs})")
        symbols.OFFSETS.save()
        elf_symbols.DEFINES.save()
        return new_groups

    def _wanted(self, paths: set[str], copies: dict[str, frozenset[str]]) -> dict[int, list[str]]:
        """Spec index -> the mapped libraries it goes into. Which specs a library's name matches
        is asked once per path (a training process maps hundreds; the scan runs every 0.5 s)."""
        out: dict[int, list[str]] = {}
        for path in paths:
            named = self._by_name.get(path)
            if named is None:
                named = self._by_name[path] = tuple(i for i, s in enumerate(self.specs) if s.matches(path))
            copied = copies.get(path, ())
            for i in dict.fromkeys((*named, *(i for i in self._any_lib if self.specs[i].symbol in copied))):
                out.setdefault(i, []).append(path)
        return out

    def _named(self, path: str) -> bool:
        """A library a static-copy probe matches by name already (libmujoco.so itself)."""
        return any(s.any_lib and s.matches(path) for s in self.specs)

    def _attach(self, i: int, spec: ProbeSpec, path: str) -> bool:
        if sum(a.spec.n_attach for a in self.attached) + spec.n_attach > self.max_probes:   # exits to come too
            self.missing.setdefault(spec.group, []).append(f"{spec.symbol} (probe limit {self.max_probes})")
            return False
        if spec.part == "wait" and spec.kind == ENTER and not self._has_wait_end(spec.group, path):
            # without its end a wait bracket would stay open: time it not at all instead
            self.missing.setdefault(spec.group, []).append(f"{spec.symbol} (no wait end probe)")
            return False
        root_path = target_file(self._mappers.get(path, [self.pid])[0], path)   # the first process that maps it
        try:
            os.close(open_regular(root_path))      # bcc's own open would block on a FIFO put in its place
            spec = resolve_symbol(self._bcc, spec, root_path)
            offset = self._pair_offset(root_path, spec.symbol) if spec.kind == PAIR else \
                self._entry_offset(root_path, spec.symbol)
        except Exception as e:  # bcc raises bare Exception for a missing symbol
            self.missing.setdefault(spec.group, []).append(spec.symbol)
            self.notify("warn", f"{spec.group}: cannot probe {spec.label} in {os.path.basename(path)}: "
                                f"{first_line(e)}")
            return False
        emulated = self._emulated(root_path, spec.symbol, offset)
        self._write_cost(i, self.calibration.cost(spec.kind, emulated, spec.group))
        self.bpf["probe_fw"][ct.c_int(i)] = ct.c_uint(fw.probe_fw_value(spec))
        a = Attached(i, spec, path, offset, emulated, 0, root_path, {})
        for part in self._parts_now(spec):
            self._attach_part(a, part)
            if part not in a.parts:
                for done in list(a.parts):
                    self._detach(a, done)
                self.missing.setdefault(spec.group, []).append(spec.symbol)
                return False
        self.attached.append(a)
        return True

    def _parts_now(self, spec: ProbeSpec) -> tuple[str, ...]:
        """The parts to attach in the category's mode: a counting category's exits wait for
        restore() (an exit probe's Attached is kept with none)."""
        if self.modes.get(spec.category) == "count" and spec.kind in (PAIR, EXIT):
            return tuple(p for p in _parts(spec) if p != "exit")
        return _parts(spec)

    def count_first(self) -> None:
        """Start every category counting, entries only (call before start()): the budget prices
        the whole set from a short counting window before an exit probe goes in, instead of
        running it at full cost until the first decision (bpf_program.c ``modes``)."""
        for cat in {s.category for s in self.specs if s.kind in (PAIR, ENTER, EXIT)}:
            self.modes[cat] = "count"
            self.bpf["modes"][ct.c_int(cat)] = ct.c_uint(1)

    def full_cost_ns(self, a: Attached) -> int:
        """What one hit of a counting probe's entry would cost timed: its whole bracket (an
        entry probe's exit partner has the same calibrated cost)."""
        if a.spec.kind in (PAIR, ENTER):
            return sum(self._costs(a).values())
        return a.cost_ns

    def _has_wait_end(self, group: str, path: str) -> bool:
        return any(fw.is_guarded_exit(a.spec) and a.spec.group == group and a.path == path
                   for a in self.attached)

    # -- the overhead budget's levers ------------------------------------
    def _step_down(self, cat: int) -> tuple[str, list[tuple[Attached, str]]]:
        """Switch a category one mode down in the kernel; returns the mode and the parts to detach.

        The kernel counts before any part goes, so no call is left open without its exit."""
        new = {"timed": "count", "count": "off"}.get(self.modes.get(cat, "timed"), "off")
        self.bpf["modes"][ct.c_int(cat)] = ct.c_uint(1)
        parts = []
        for a in [a for a in self.attached if a.spec.category == cat]:
            if new == "count" and a.spec.kind in (PAIR, EXIT):
                parts.append((a, "exit"))
            elif new == "off" and a.spec.kind in (PAIR, ENTER, EXIT):   # counters and ranges are levers
                parts += [(a, part) for part in a.parts]
        self.modes[cat] = new
        return new, parts

    def step_down_all(self, modes: dict[int, str], levers: list[str]) -> None:
        """Step categories down to these modes and stop these levers with one batch of detaches
        (each batch waits one grace period: ~50 ms here, while the traps still run)."""
        parts, stepped = [], set()
        for cat, mode in modes.items():
            while self.modes.get(cat, "timed") not in (mode, "off"):
                parts += self._step_down(cat)[1]
                stepped.add(cat)
        parts += [(a, part) for a in self.attached if a.spec.kind in ALWAYS_ON and a.spec.lever in levers
                  for part in list(a.parts)]
        once = {(a.id, part): (a, part) for a, part in parts}     # timed -> off names each exit twice
        self._detach_all(list(once.values()))
        self._close_open_calls(stepped)

    def _close_open_calls(self, cats: set[int]) -> None:
        """Once a category's exits are gone, the calls still open in it are closed (bpf_program.c
        ``dgen``): one open across the step kept rl-zoo3 PPO's main thread in Backend for the
        rest of the session (3 sessions in 30: Backend 7.9-11.3 pp over its ticks' share)."""
        if not cats:
            return
        g = self.bpf["dgen"][ct.c_int(0)]
        for cat in cats:
            g.g[cat] = (g.g[cat] + 1) & 0xFF
        self.bpf["dgen"][ct.c_int(0)] = g

    def always_on(self) -> dict[int, str]:
        """Probe id -> lever name, for the attached probes no category step removes."""
        return {a.id: a.spec.lever for a in self.attached if a.parts and a.spec.kind in ALWAYS_ON}

    def stop_lever(self, lever: str) -> None:
        """Detach an always-on lever's probes for good (the budget found them too costly).

        A range open at this moment never closes: it is dropped, not paired with a later end.
        """
        self._detach_all([(a, part) for a in self.attached if a.spec.kind in ALWAYS_ON and a.spec.lever == lever
                          for part in list(a.parts)])

    def _detach_all(self, parts: list[tuple[Attached, str]]) -> None:
        """Detach several parts; their uprobe_multi links close at once (one by one, each waits for
        its own grace period: 15 links took 0.78 s on rl-zoo3 PPO, inside the first second)."""
        links = [(a, part) for a, part in parts if a.parts.get(part, ("",))[0] == "link"]
        uprobe_multi.close_all([fd for a, part in links for fd in a.parts.pop(part)[1].values()])
        for a, _ in links:
            a.cost_ns = self._cost_now(a)
        for a, part in parts:
            self._detach(a, part)          # the rest (perf-event uprobes); a link part is gone already

    def restore(self, cat: int) -> None:
        """Attach a category's per-call probes again and time it (a sample window).

        Exits go in before entries, so an exit seen without its entry is ignored and a
        call can never be left open.
        """
        mine = [a for a in self.attached if a.spec.category == cat and a.spec.kind in (PAIR, ENTER, EXIT)]
        for part in ("exit", "entry"):
            for a in mine:
                if part not in a.parts and part in _parts(a.spec):
                    self._attach_part(a, part)
        self.bpf["modes"][ct.c_int(cat)] = ct.c_uint(0)
        self.modes[cat] = "timed"

    def _load_exits(self) -> None:
        """Verify the exit programs of the counting probes before t0. Loaded when the first
        window times their category (~85 ms a program on the CI VM), their calls' time went to
        Python until then: the Simulator of a SubprocVecEnv worker read 2-4 pp low."""
        for a in self.attached:
            if "exit" in _parts(a.spec) and "exit" not in a.parts and self.modes.get(a.spec.category) == "count":
                try:
                    self._part_program(a, "exit")
                except Exception:     # the verifier's refusal: said when the window attaches it
                    pass

    def _part_program(self, a: Attached, part: str):
        """The loaded (verified) BPF program that serves one part of a probe: bcc keeps it, so
        only the first call for a program pays the verifier."""
        if getattr(self, "multi", False):
            return self.bpf.load_func(generic_fn(a.spec, part), self._bcc.BPF.KPROBE,
                                      attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI)
        fns = a.spec.fn_names(a.id)
        return self.bpf.load_func(fns[1] if a.spec.kind == PAIR and part == "exit" else fns[0], self._bcc.BPF.KPROBE)

    def _attach_part(self, a: Attached, part: str) -> None:
        fns = a.spec.fn_names(a.id)
        try:
            if getattr(self, "multi", False):
                self._link_part(a, part, fns)
            elif a.spec.kind == PAIR and part == "exit":
                self.bpf.attach_uretprobe(name=a.root_path, sym=a.spec.symbol, fn_name=fns[1], pid=self._perf_pid())
                a.parts[part] = ("uretprobe", 0)
            else:
                self.bpf.attach_uprobe(name=a.root_path, sym=a.spec.symbol, sym_off=a.offset, fn_name=fns[0],
                                       pid=self._perf_pid())
                a.parts[part] = ("uprobe", a.offset)
        except Exception as e:  # a missing symbol, or the library is gone
            self.notify("warn", f"{a.spec.group}: cannot probe {a.spec.label} in {os.path.basename(a.path)}: "
                                f"{first_line(e)}")
            return
        a.cost_ns = self._cost_now(a)

    def _link_part(self, a: Attached, part: str, fns: tuple[str, ...]) -> None:
        """The same part as uprobe_multi links, one for each process that ``_link_pids`` names
        (a return probe with the RETURN flag). Raises OSError where none could be made."""
        links = self._links(a, part, self._link_pids(a))
        if not links and self.probe_pid == 0 and self._mappers.get(a.path):
            raise OSError(f"no process of the tree took the probe at {a.spec.symbol}")
        a.parts[part] = ("link", links)

    def _links(self, a: Attached, part: str, pids: list[int]) -> dict[int, int]:
        """Links for one part, pid -> fd. A tree's process that exited meanwhile is left out;
        a lone target's refusal raises OSError."""
        ret = a.spec.kind == PAIR and part == "exit"
        fn = self._part_program(a, part)
        file_off = self._file_offset(a.root_path, a.spec.symbol, a.offset)
        cookie = a.id | (a.spec.category & 3) << 16
        out = {}
        for pid in pids:
            path = target_file(pid, a.path) if self.probe_pid == 0 else a.root_path   # the first mapper may be gone
            try:
                out[pid] = uprobe_multi.link(fn.fd, path, file_off, ret, pid, cookie)
            except OSError:
                if len(pids) == 1 and self.probe_pid != 0:
                    raise
        return out

    def _link_pids(self, a: Attached) -> list[int]:
        """The processes a probe's links serve. One target: its pid. A tree (or several roots):
        each followed process that maps the library, on its own link. A link for every process
        (pid 0) put the traps into every process on the machine that maps the library, followed
        or not: another user's torch job paid ~2.6 us a call (docs/overhead.md, "A bystander"),
        and a twin run beside the target paid nearly what the target did."""
        if self.probe_pid != 0:
            return [self.probe_pid]
        return list(self._mappers.get(a.path, ()))

    def _relink(self) -> None:
        """Keep each link part's processes those that map its library now: links for processes
        that came (a fork, a spawned worker that loaded the library), and closed for those gone.
        A forked child traps from the fork on (it has its parent's code pages), and is counted
        from its link on (the next scan: SCAN_PERIOD_S)."""
        if not getattr(self, "multi", False) or self.probe_pid != 0:
            return
        gone = []
        for a in self.attached:
            want = set(self._mappers.get(a.path, ()))
            for part, (how, links) in list(a.parts.items()):
                if how != "link":
                    continue
                for pid in [p for p in links if p not in want]:
                    gone.append(links.pop(pid))
                new = sorted(want - set(links))
                if new:
                    links.update(self._links(a, part, new))
        uprobe_multi.close_all(gone)

    def _perf_pid(self) -> int:
        return self.probe_pid or -1          # bcc's perf-event uprobes: -1 is every process

    def _file_offset(self, path: str, symbol: str, off: int) -> int:
        """A symbol's file offset, resolved once: every re-timing window attaches again, and
        bcc reads the library's whole symbol table each time (libtorch_cpu.so: ~10% of a core
        of monitor CPU at one window every ~2 s)."""
        key = (path, symbol, off)
        if key not in self._offsets:
            self._offsets[key] = symbols.offset(self._bcc, path, symbol) + off
        return self._offsets[key]

    def _detach(self, a: Attached, part: str) -> None:
        if part not in a.parts:
            return
        how, off = a.parts.pop(part)
        try:
            if how == "link":
                uprobe_multi.close_all(list(off.values()))
            elif how == "uretprobe":
                self.bpf.detach_uretprobe(name=a.root_path, sym=a.spec.symbol, pid=self._perf_pid())
            else:
                self.bpf.detach_uprobe(name=a.root_path, sym=a.spec.symbol, sym_off=off, pid=self._perf_pid())
        except Exception as e:  # gone with the process already
            self.notify("warn", f"detach {a.spec.label}: {first_line(e)}")
        a.cost_ns = self._cost_now(a)

    def _cost_now(self, a: Attached) -> int:
        """Cost of one hit of the parts of a probe that are attached now."""
        c = self._costs(a)
        return sum(_fields_ns(c, f) for f in self._charged(a))

    def measured_splits(self) -> dict[str, list[int]]:
        """Per lone enter or exit probe split by its own ticks (``split_at_measured``), the ns a
        hit charges [before, after] its timestamp."""
        out = {}
        for a in self.attached:
            side = _lone_side(a.spec.kind)
            if a.before_ns is not None and side:
                c = self._costs(a)
                out[a.spec.label] = [c[f"{side}_before"], c[f"{side}_after"]]
        return out

    def _costs(self, a: Attached) -> dict:
        """The four cost fields of a probe: calibrated, times its measured scale, and split as
        its ticks found it where it is a lone enter or exit probe."""
        c = self.calibration.cost(a.spec.kind, a.emulated, a.spec.group)
        c = {k: round(v * a.scale) for k, v in c.items()} if a.scale != 1.0 else dict(c)
        return split_at_measured(c, a.spec.kind, a.before_ns)

    def _write_cost(self, i: int, cost: dict) -> None:
        self.bpf["costs"][ct.c_int(i)] = self.bpf["costs"].Leaf(*(cost[k] for k in (
            "enter_before", "enter_after", "exit_before", "exit_after")))

    @staticmethod
    def _charged(a: Attached) -> list[int]:
        """The cost fields (0 enter, 1 exit) the probe's attached parts charge (bpf_program.c:
        a pair's entry and return, an exit probe's hit; counters and ranges charge enter)."""
        out = set()
        for part in a.parts:
            out.add(1 if part == "exit" and a.spec.kind in (PAIR, EXIT) else 0)
        return sorted(out)

    def calibrated_part_ns(self, slot: int) -> float:
        """The calibrated ns per hit of a probe part (slot: id * 2, + 1 for the exit fields)."""
        a = next((a for a in self.attached if a.id == slot // 2), None)
        if a is None:
            return 0.0
        return _fields_ns(self.calibration.cost(a.spec.kind, a.emulated, a.spec.group), slot % 2)

    def reprice(self, measured: dict[int, tuple[float, float]], change: float = 0.05) -> int:
        """Raise the price of each probe whose traps, measured on the target's own calls,
        cost more than the calibration says (rlscope_top/collect/probe_prices.py). The ticks
        see the kernel's part of a trap only, not its cost to the code after it (caches, a
        flushed TLB): a lower bound, so a price is raised to it and never lowered. A part not
        measured yet (its return trap is cheap: 20 ticks can take longer than a session) counts
        at its calibrated price.

        A lone enter or exit probe (torch's op begin and op end) also takes its split around the
        timestamp from its ticks (``split_at_measured``); a pair keeps its calibrated split.

        Args:
            measured: (before, after) ns per hit by part slot (probe id * 2, + 1 for the exit
                fields), on each side of the part's timestamp.
            change: relative move below which a price is not written again.

        Returns:
            How many probes were repriced.
        """
        n = 0
        for a in self.attached:
            fields = self._charged(a)
            m = [measured.get(a.id * 2 + f) for f in fields]
            if not fields or all(x is None for x in m):
                continue
            cal_parts = [self.calibrated_part_ns(a.id * 2 + f) for f in fields]
            cal = sum(cal_parts)
            got = sum(c if x is None else sum(x) for x, c in zip(m, cal_parts))
            k = max(1.0, got / cal) if cal > 0 else 1.0
            before = m[0][0] if _lone_side(a.spec.kind) and m[0] is not None else a.before_ns
            was = a.before_ns
            moved = before is not None and (was is None or abs(before - was) > change * max(was, 1.0))
            if abs(k - a.scale) > change * a.scale or moved:
                a.scale, a.before_ns = k, before
                self._write_cost(a.id, self._costs(a))
                a.cost_ns = self._cost_now(a)
                n += 1
        return n

    def _code_at(self, path: str, sym: str, n: int = 32) -> bytes:
        off = self._file_offset(path, sym, 0)
        with open(open_regular(path), "rb") as f:
            f.seek(off)
            return f.read(n)

    def _entry_offset(self, path: str, sym: str) -> int:
        return cheap_offset(self._code_at(path, sym))

    def _pair_offset(self, path: str, sym: str) -> int:
        """Where an entry and return pair goes: past instructions that leave rsp alone, on an
        uprobe_multi link, which takes any file offset; bcc's perf-event uretprobe takes none."""
        return pair_offset(self._code_at(path, sym)) if getattr(self, "multi", False) else 0

    def _emulated(self, path: str, sym: str, offset: int) -> bool:
        try:
            code = self._code_at(path, sym)[offset:]
        except Exception:
            return False
        return bool(code) and is_cheap_at(code, 0)


def _more_fds() -> None:
    """A followed process has a link (an fd) for each probe part in it: ~35 in one that maps
    torch. Raise the soft open-files limit to the hard one, as a job may have tens of them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def split_at_measured(cost: dict, kind: str, before_ns: float | None) -> dict:
    """A lone enter or exit probe's price, split around its timestamp as its trap ticks found it.

    calibrate prices torch's two probes on their binding but can only split them in the C
    bracket's proportions (rlscope_top/commands/calibrate.py ``_torch_split``); the target's own
    ticks say where its traps land. Only the part before the timestamp is taken from them: what
    the ticks cannot see (the BPF program, where no tick lands, and the code after the trap
    running cold) all comes after it. The total stays.

    Args:
        cost: the probe's four cost fields (calibrated, times its measured scale).
        kind: the probe's catalog kind; only ENTER and EXIT are split so.
        before_ns: its ns per hit before the timestamp, measured (None: not yet).

    Returns:
        The four fields, the charged side's two moved (a copy).
    """
    f = _lone_side(kind)
    if before_ns is None or not f:
        return cost
    total = cost[f"{f}_before"] + cost[f"{f}_after"]
    before = min(total, max(0, round(before_ns)))
    return {**cost, f"{f}_before": before, f"{f}_after": total - before}


def _lone_side(kind: str) -> str:
    """The cost fields a lone enter or exit probe charges ("enter", "exit"); "" for other kinds."""
    return {ENTER: "enter", EXIT: "exit"}.get(kind, "")


def _fields_ns(cost: dict, exit_fields: int) -> int:
    """One hit's cost in a probe's enter (0) or exit (1) fields, both sides of its timestamp."""
    f = "exit" if exit_fields else "enter"
    return cost[f"{f}_before"] + cost[f"{f}_after"]


def _parts(spec: ProbeSpec) -> tuple[str, ...]:
    """The kernel probes a catalog entry needs, exits first: an exit seen without its entry
    is ignored, so attaching in this order can never leave a call open."""
    if spec.kind == PAIR:
        return ("exit", "entry")
    return ("exit",) if spec.kind in (EXIT, RANGE_END) else ("entry",)


