"""Compile the BPF program, attach probes to a target's libraries, read them back.

This is the only module that imports bcc. It knows nothing about display or the
ring: it hands plain Python values to the collector.
"""

from __future__ import annotations

import contextlib
import ctypes as ct
import dataclasses
import os
import sys
import tempfile
import threading
import time
from importlib import resources
from typing import Callable

from . import catalog
from .catalog import ENTER, EXIT, PAIR, RANGE_BEGIN, RANGE_END, COUNT, ProbeSpec
from . import frameworks as fw
from . import uprobe_multi
from .symbols import resolve as resolve_symbol
from .static_copies import StaticCopies
from .prologue import cheap_offset, is_cheap_at
from ..collect.calibration import Calibration, load as load_calibration
from ..errors import BccUnavailable

DRAIN_BUDGET_S = 0.1   # monitor time one drain of the event buffer may take
TICK_HZ = 250   # CPU-clock tick per CPU that applies pending operation changes
NTICK = 6       # on-CPU ticks per thread: in a probed category's libraries (0-3), other user code, kernel
NRANGES = 64    # executable mappings the tick can tell apart
EV_RANGE_BEGIN, EV_RANGE_END, EV_THREAD_EXIT = 1, 2, 3
EV_ENTER, EV_EXIT, EV_ON, EV_OFF, EV_NEW = 5, 6, 7, 8, 9



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
    cost_ns: int       # calibrated cost of one hit, of the parts still attached
    root_path: str = ""
    parts: dict = dataclasses.field(default_factory=dict)   # part -> (uprobe|uretprobe, offset)


@dataclasses.dataclass
class ThreadCounters:
    """Cumulative in-kernel counters of one target thread (ns, counts)."""

    tid: int
    tgid: int
    ns: list[list[int]]       # [category][on, off]
    trans: list[list[int]]    # [from][to]
    calls: list[int]
    oh: list[int]             # calibrated probe cost charged per category, ns
    depth: list[int]
    run: int                  # 0 off CPU, 1 on CPU, 2 unknown
    last_ts: int
    pyflag: bool
    exited: bool
    aop: int = 0              # innermost annotated operation now (0 none)
    opflag: bool = False      # ran inside an operation
    fw: dict | None = None    # Backend split per framework slot: ns [[on, off]], calls, trans, oh
    ticks: list[int] = dataclasses.field(default_factory=lambda: [0] * NTICK)   # on-CPU ticks by where (TICK_*)
    switches: int = 0         # context switches out (the scheduler probe's cost)
    preempt_ns: int = 0       # off-CPU time while runnable (waiting for a CPU)


@dataclasses.dataclass
class OpCounters:
    """Cumulative in-kernel counters of one operation, summed over threads."""

    op: int
    ns: list[list[int]]
    trans: list[list[int]]
    calls: list[int]
    oh: list[int]
    ticks: list[int] = dataclasses.field(default_factory=list)   # CPU-clock ticks by where (as a thread's)


# uprobe_multi mode: a few generic programs; each link carries a cookie with the probe id
# (bits 0-15) and category (16-17), so the program is the same whatever the probe set.
GENERIC = """
#define CK_ID(c) ((int)((c) & 0xffff))
#define CK_CAT(c) ((int)(((c) >> 16) & 3))
int g_enter(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return on_enter(CK_ID(c), CK_CAT(c)); }
int g_exit_ret(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return on_exit(CK_ID(c), CK_CAT(c), 0); }
int g_exit_entry(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return on_exit(CK_ID(c), CK_CAT(c), 1); }
int g_sync_enter(struct pt_regs *ctx) {
    u64 c = bpf_get_attach_cookie(ctx); sync_begin(CK_ID(c), CK_CAT(c)); return on_enter(CK_ID(c), CK_CAT(c)); }
int g_sync_exit(struct pt_regs *ctx) {
    u64 c = bpf_get_attach_cookie(ctx); sync_end(); return on_exit(CK_ID(c), CK_CAT(c), 0); }
int g_guarded_exit(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return fw_wait_exit(CK_ID(c), CK_CAT(c)); }
int g_range_begin(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return emit(ctx, CK_ID(c), EV_RANGE_BEGIN, 1); }
int g_range_end(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return emit(ctx, CK_ID(c), EV_RANGE_END, 0); }
int g_count(struct pt_regs *ctx) { u64 c = bpf_get_attach_cookie(ctx); return on_count(CK_ID(c)); }
"""


def generic_fn(spec: ProbeSpec, part: str) -> str:
    """The generic program (uprobe_multi mode) that serves one part of a catalog probe."""
    sync = spec.kind == PAIR and spec.symbol in catalog.SYNC_SYMBOLS
    if spec.kind == PAIR:
        return ("g_sync_exit" if sync else "g_exit_ret") if part == "exit" else ("g_sync_enter" if sync else "g_enter")
    if spec.kind == EXIT:
        return "g_guarded_exit" if fw.is_guarded_exit(spec) else "g_exit_entry"
    return {ENTER: "g_enter", RANGE_BEGIN: "g_range_begin", RANGE_END: "g_range_end", COUNT: "g_count"}[spec.kind]


def program_text(specs: list[ProbeSpec], generic: bool = False) -> str:
    """The BPF C source for a probe catalog (also what ``--ebpf`` prints). ``generic``: the
    uprobe_multi form, a few programs keyed by the link's cookie instead of one per probe
    (several times less to compile)."""
    here = resources.files("rlscope_top.probes")
    base = here.joinpath("bpf_program.c").read_text()
    out = [f"#define NPROBES {max(1, len(specs))}", here.joinpath("fw_prelude.c").read_text(), base,
           here.joinpath("fw_guard.c").read_text(),
           here.joinpath("sync_timing.c").read_text()]
    if generic:
        return "\n".join([*out, GENERIC])
    for i, s in enumerate(specs):
        if s.kind == PAIR and s.symbol in catalog.SYNC_SYMBOLS:   # also timed as GPU waiting
            out.append(f"int p{i}_enter(struct pt_regs *ctx) {{ sync_begin({i}, {s.category}); "
                       f"return on_enter({i}, {s.category}); }}")
            out.append(f"int p{i}_exit(struct pt_regs *ctx) {{ sync_end(); return on_exit({i}, {s.category}, 0); }}")
        elif s.kind == PAIR:
            out.append(f"int p{i}_enter(struct pt_regs *ctx) {{ return on_enter({i}, {s.category}); }}")
            out.append(f"int p{i}_exit(struct pt_regs *ctx) {{ return on_exit({i}, {s.category}, 0); }}")
        elif s.kind == ENTER:
            out.append(f"int p{i}_enter(struct pt_regs *ctx) {{ return on_enter({i}, {s.category}); }}")
        elif fw.is_guarded_exit(s):
            out.append(f"int p{i}_exit(struct pt_regs *ctx) {{ return fw_wait_exit({i}, {s.category}); }}")
        elif s.kind == EXIT:
            out.append(f"int p{i}_exit(struct pt_regs *ctx) {{ return on_exit({i}, {s.category}, 1); }}")
        elif s.kind == RANGE_BEGIN:
            out.append(f"int p{i}_range_begin(struct pt_regs *ctx) {{ return emit(ctx, {i}, EV_RANGE_BEGIN, 1); }}")
        elif s.kind == RANGE_END:
            out.append(f"int p{i}_range_end(struct pt_regs *ctx) {{ return emit(ctx, {i}, EV_RANGE_END, 0); }}")
        elif s.kind == COUNT:
            out.append(f"int p{i}_count(struct pt_regs *ctx) {{ return on_count({i}); }}")
    return "\n".join(out) + "\n"


def exec_ranges(pid: int) -> list[tuple[int, int, str]]:
    """(start, end, path) of every executable file mapping of a process."""
    out = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
                    a, b = parts[0].split("-")
                    out.append((int(a, 16), int(b, 16), parts[5].rstrip("\n")))
    except OSError:
        pass
    return out


def mapped_files(pid: int) -> set[str]:
    """Paths of executable file mappings of a process (empty if it is gone)."""
    paths = set()
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
                    p = parts[5].rstrip("\n")
                    if not p.endswith(" (deleted)"):
                        paths.add(p)
    except OSError:
        pass
    return paths


class ProbeSet:
    """The BPF program and the probes attached to one target process."""

    def __init__(self, pid: int, specs: list[ProbeSpec], max_probes: int = catalog.MAX_PROBES,
                 notify: Callable[[str, str], None] | None = None, calibration: Calibration | None = None,
                 timeline: bool = False):
        self.pid = pid
        self.timeline = timeline
        self.tids0: list[int] = []
        self.calibration = calibration or load_calibration()
        self.specs = specs
        self.max_probes = max_probes
        self.notify = notify or (lambda level, msg: None)
        self.attached: list[Attached] = []
        self.missing: dict[str, list[str]] = {}
        self.groups: dict[str, str] = {}          # group -> library path
        self._tried: set[tuple[int, str]] = set()
        self.modes: dict[int, str] = {}           # category -> timed | count | off
        self._offsets: dict[tuple, int] = {}      # (library, symbol, offset) -> file offset
        self._events: list[tuple] = []
        self._drain_until = 0.0
        self.bpf = None
        self.t0_ns = 0
        self._cfg_lock = threading.Lock()
        self._sop: dict[int, object] = {}        # tid -> the sampled-op history leaf we write
        self._sop_seq: dict[int, int] = {}
        self._copies = StaticCopies(pid, frozenset(s.symbol for s in specs if s.any_lib))

    # -- lifecycle ---------------------------------------------------------
    def load(self) -> None:
        """Compile the program. Raises BccUnavailable, or RuntimeError with the compiler's words."""
        bcc = import_bcc()
        self._bcc = bcc
        # uprobe_multi links detach in parallel (~0.05 s for 35 probes, not ~3.5 s) and need only
        # the generic programs; RLSCOPE_PERF_UPROBES=1 forces bcc's perf-event uprobes
        self.multi = uprobe_multi.supported() and os.environ.get("RLSCOPE_PERF_UPROBES") != "1"
        with _capture_output() as said, _low_priority():
            try:
                self.bpf = bcc.BPF(text=program_text(self.specs, generic=self.multi))
            except Exception as e:
                raise RuntimeError(_compiler_reason(said(), e)) from None
        try:
            self.bpf["events"].open_ring_buffer(self._on_event)
        except Exception as e:          # bcc raises plain Exception: a kernel without BPF ring buffers
            raise RuntimeError(f"the kernel refused a BPF ring buffer (needs Linux 5.8+): {e}") from None

    def start(self) -> int:
        """Attach to mapped libraries, then begin counting. Returns t0 (monotonic ns)."""
        self.scan()
        self.t0_ns = time.monotonic_ns()
        threads = self.bpf["threads"]
        if self.timeline:
            self.bpf["timeline"][ct.c_int(0)] = ct.c_uint(1)
        self.tids0 = _task_ids(self.pid)
        for tid in self.tids0:
            leaf = threads.Leaf()
            leaf.tgid = self.pid
            leaf.tid = tid
            leaf.last_ts = self.t0_ns
            leaf.run = 2
            threads[ct.c_uint(tid)] = leaf
        self.bpf["targets"][ct.c_uint(self.pid)] = ct.c_uint(1)
        try:    # bounds how long a thread's operation change can wait for an event
            self.bpf.attach_perf_event(ev_type=self._bcc.PerfType.SOFTWARE,
                                       ev_config=self._bcc.PerfSWConfig.CPU_CLOCK,
                                       fn_name="on_tick", sample_freq=TICK_HZ, cpu=-1)
        except Exception as e:  # no perf events here: operation boundaries wait for events
            self.notify("warn", f"no CPU-clock tick ({_first_line(e)}): operation boundaries of threads "
                                "that run long without a probe hit are applied late")
        return self.t0_ns

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
        links = [how_fd[1] for a in self.attached for how_fd in a.parts.values() if how_fd[0] == "link"]
        uprobe_multi.close_all(links)            # all at once: their grace periods overlap
        for a in self.attached:
            a.parts = {k: v for k, v in a.parts.items() if v[0] != "link"}
        self.bpf.cleanup()
        self.bpf = None

    # -- attaching ---------------------------------------------------------
    def n_probes(self) -> int:
        """Kernel probes attached now."""
        return sum(len(a.parts) for a in self.attached)

    def scan(self) -> list[str]:
        """Attach probes to libraries mapped since the last scan. Returns new groups."""
        new_groups = []
        paths = mapped_files(self.pid)
        copies = self._copies.scan(paths, skip=self._named)   # libraries with a static copy (envpool's MuJoCo)
        # end-of-call probes first (as within a pair): a call already running when its begin
        # probe went in would otherwise hold the depth open for good
        order = sorted(enumerate(self.specs), key=lambda x: x[1].kind not in (EXIT, RANGE_END))
        for i, spec in order:
            for path in paths:
                if (i, path) in self._tried or not _lib_matches(spec, path, copies) or \
                        self.modes.get(spec.category) == "off":
                    continue
                self._tried.add((i, path))
                if self._attach(i, spec, path) and spec.group not in self.groups:
                    self.groups[spec.group] = path
                    new_groups.append(spec.group)
        for g in new_groups:
            mine = [a for a in self.attached if a.spec.group == g]
            libs = ", ".join(sorted({os.path.basename(a.path) for a in mine}))
            self.notify("info", f"attached {sum(a.spec.n_attach for a in mine)} probes for {g} ({libs})")
        return new_groups

    def _named(self, path: str) -> bool:
        """A library a static-copy probe matches by name already (libmujoco.so itself)."""
        return any(s.any_lib and s.matches(path) for s in self.specs)

    def _attach(self, i: int, spec: ProbeSpec, path: str) -> bool:
        if self.n_probes() + spec.n_attach > self.max_probes:
            self.missing.setdefault(spec.group, []).append(f"{spec.symbol} (probe limit {self.max_probes})")
            return False
        if spec.part == "wait" and spec.kind == ENTER and not self._has_wait_end(spec.group, path):
            # without its end a wait bracket would stay open: time it not at all instead
            self.missing.setdefault(spec.group, []).append(f"{spec.symbol} (no wait end probe)")
            return False
        root_path = path if os.path.exists(path) else f"/proc/{self.pid}/root{path}"
        try:
            spec = resolve_symbol(self._bcc, spec, root_path)
            offset = 0 if spec.kind == PAIR else self._entry_offset(root_path, spec.symbol)
        except Exception as e:  # bcc raises bare Exception for a missing symbol
            self.missing.setdefault(spec.group, []).append(spec.symbol)
            self.notify("warn", f"{spec.group}: cannot probe {spec.label} in {os.path.basename(path)}: "
                                f"{_first_line(e)}")
            return False
        emulated = self._emulated(root_path, spec.symbol, offset)
        cost = self.calibration.cost(spec.kind, emulated, spec.group)
        self.bpf["costs"][ct.c_int(i)] = self.bpf["costs"].Leaf(*(cost[k] for k in (
            "enter_before", "enter_after", "exit_before", "exit_after")))
        self.bpf["probe_fw"][ct.c_int(i)] = ct.c_uint(fw.probe_fw_value(spec))
        a = Attached(i, spec, path, offset, emulated, 0, root_path, {})
        for part in _parts(spec):
            self._attach_part(a, part)
            if part not in a.parts:
                for done in list(a.parts):
                    self._detach(a, done)
                self.missing.setdefault(spec.group, []).append(spec.symbol)
                return False
        self.attached.append(a)
        return True

    def _has_wait_end(self, group: str, path: str) -> bool:
        return any(fw.is_guarded_exit(a.spec) and a.spec.group == group and a.path == path
                   for a in self.attached)

    # -- the overhead budget's levers ------------------------------------
    def degrade(self, cat: int) -> str:
        """Make one category's probes cheaper: timed -> count (exits removed) -> off (per-call probes removed).

        The kernel switches to counting first, so no call can be left open without an exit.

        Returns:
            The category's new mode.
        """
        new = {"timed": "count", "count": "off"}.get(self.modes.get(cat, "timed"), "off")
        self.bpf["modes"][ct.c_int(cat)] = ct.c_uint(1)
        for a in [a for a in self.attached if a.spec.category == cat]:
            if new == "count" and a.spec.kind in (PAIR, EXIT):
                self._detach(a, "exit")
            elif new == "off" and a.spec.kind in (PAIR, ENTER, EXIT):   # low-rate counters and ranges stay
                for part in list(a.parts):
                    self._detach(a, part)
        self.modes[cat] = new
        return new

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

    def _attach_part(self, a: Attached, part: str) -> None:
        fns = a.spec.fn_names(a.id)
        try:
            if getattr(self, "multi", False):
                self._link_part(a, part, fns)
            elif a.spec.kind == PAIR and part == "exit":
                self.bpf.attach_uretprobe(name=a.root_path, sym=a.spec.symbol, fn_name=fns[1], pid=self.pid)
                a.parts[part] = ("uretprobe", 0)
            else:
                off = 0 if a.spec.kind == PAIR else a.offset
                self.bpf.attach_uprobe(name=a.root_path, sym=a.spec.symbol, sym_off=off, fn_name=fns[0], pid=self.pid)
                a.parts[part] = ("uprobe", off)
        except Exception as e:  # a missing symbol, or the library is gone
            self.notify("warn", f"{a.spec.group}: cannot probe {a.spec.label} in {os.path.basename(a.path)}: "
                                f"{_first_line(e)}")
            return
        a.cost_ns = self._cost_now(a)

    def _link_part(self, a: Attached, part: str, fns: tuple[str, ...]) -> None:
        """The same part as an uprobe_multi link (a return probe with the RETURN flag)."""
        ret = a.spec.kind == PAIR and part == "exit"
        off = 0 if a.spec.kind == PAIR else a.offset
        fn = self.bpf.load_func(generic_fn(a.spec, part), self._bcc.BPF.KPROBE,
                                attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI)
        file_off = self._file_offset(a.root_path, a.spec.symbol, off)
        cookie = a.id | (a.spec.category & 3) << 16
        a.parts[part] = ("link", uprobe_multi.link(fn.fd, a.root_path, file_off, ret, self.pid, cookie))

    def _file_offset(self, path: str, symbol: str, off: int) -> int:
        """A symbol's file offset, resolved once: every re-timing window attaches again, and
        bcc reads the library's whole symbol table each time (libtorch_cpu.so: ~10% of a core
        of monitor CPU at one window every ~2 s)."""
        key = (path, symbol, off)
        if key not in self._offsets:
            self._offsets[key] = self._bcc.BPF._check_path_symbol(path.encode(), symbol.encode(), None, -1, off)[1]
        return self._offsets[key]

    def _detach(self, a: Attached, part: str) -> None:
        if part not in a.parts:
            return
        how, off = a.parts.pop(part)
        try:
            if how == "link":
                os.close(off)
            elif how == "uretprobe":
                self.bpf.detach_uretprobe(name=a.root_path, sym=a.spec.symbol, pid=self.pid)
            else:
                self.bpf.detach_uprobe(name=a.root_path, sym=a.spec.symbol, sym_off=off, pid=self.pid)
        except Exception as e:  # gone with the process already
            self.notify("warn", f"detach {a.spec.label}: {_first_line(e)}")
        a.cost_ns = self._cost_now(a)

    def _cost_now(self, a: Attached) -> int:
        """Calibrated cost of one hit of the parts of a probe that are attached now."""
        if len(a.parts) == a.spec.n_attach:
            return self.calibration.hit_ns(a.spec.kind, a.emulated, a.spec.group)
        c = self.calibration.cost(a.spec.kind, a.emulated, a.spec.group)
        return sum(c[f"{p}_before"] + c[f"{p}_after"] for p in ("enter", "exit")
                   if ("entry" if p == "enter" else "exit") in a.parts)

    def _code_at(self, path: str, sym: str, n: int = 32) -> bytes:
        _, off = self._bcc.BPF._check_path_symbol(path.encode(), sym.encode(), None, -1)
        with open(path, "rb") as f:
            f.seek(off)
            return f.read(n)

    def _entry_offset(self, path: str, sym: str) -> int:
        return cheap_offset(self._code_at(path, sym))

    def _emulated(self, path: str, sym: str, offset: int) -> bool:
        try:
            code = self._code_at(path, sym)[offset:]
        except Exception:
            return False
        return bool(code) and is_cheap_at(code, 0)

    # -- reading -----------------------------------------------------------
    def hits(self) -> list[int]:
        """Hits per probe id, summed over CPUs."""
        table = self.bpf["hits"]
        return [int(sum(table[ct.c_int(i)])) for i in range(len(self.specs))]

    def threads(self) -> list[ThreadCounters]:
        """Cumulative counters for every thread the kernel holds state for."""
        out = []
        for k, s in self.bpf["threads"].items():
            out.append(ThreadCounters(
                tid=k.value, tgid=s.tgid,
                ns=[[s.ns[2 * c], s.ns[2 * c + 1]] for c in range(4)],
                trans=[[s.trans[4 * a + b] for b in range(4)] for a in range(4)],
                calls=[s.calls[c] for c in range(4)],
                oh=[s.oh[c] for c in range(4)],
                depth=[s.depth[c] for c in range(4)],
                run=s.run, last_ts=s.last_ts, pyflag=bool(s.pyflag), exited=bool(s.exited),
                aop=s.aop, opflag=bool(s.opflag), fw=_fw_counters(s.fw), ticks=list(s.ticks),
                switches=s.switches, preempt_ns=s.preempt_ns))
        return out

    def category_ranges(self) -> list[tuple[int, int, int]]:
        """Executable mappings that belong to a probed category: each attached library and the
        libraries beside it (torch/lib/*.so, nvidia/*/lib/*.so), so that a thread the probes do
        not bracket (an intra-op pool, a simulator worker) is still seen to run there."""
        dirs: dict[str, int] = {}
        for a in self.attached:
            dirs.setdefault(os.path.dirname(a.path), a.spec.category)
        exact = {a.path: a.spec.category for a in self.attached}
        out = []
        for start, end, path in exec_ranges(self.pid):
            cat = exact.get(path, dirs.get(os.path.dirname(path)))
            if cat is not None and cat != catalog.CAT_PY:
                out.append((start, end, cat))
        return out[:NRANGES]

    def set_ranges(self, ranges: list[tuple[int, int, int]]) -> None:
        """Tell the tick which address ranges belong to which category: (start, end, category)."""
        table = self.bpf["ranges"]
        for i, (a, b, cat) in enumerate(ranges[:NRANGES]):
            table[ct.c_int(i)] = table.Leaf(a, b, cat, 0)
        self.bpf["nranges"][ct.c_int(0)] = ct.c_uint(min(len(ranges), NRANGES))

    # -- operations ----------------------------------------------------------
    def ops(self) -> list[OpCounters]:
        """Cumulative counters per operation id."""
        return [OpCounters(op=k.value, ns=[[c.ns[2 * i], c.ns[2 * i + 1]] for i in range(4)],
                           trans=[[c.trans[4 * a + b] for b in range(4)] for a in range(4)],
                           calls=list(c.calls), oh=list(c.oh), ticks=list(c.ticks))
                for k, c in self.bpf["opstat"].items()]

    def set_op_source(self, bit: int, on: bool = True) -> None:
        """Turn an operation source on in the kernel: 1 annotations, 2 the stack sampler."""
        with self._cfg_lock:          # the sampler's reader thread calls this too
            cfg = self.bpf["opcfg"]
            cur = cfg[ct.c_int(0)].value
            cfg[ct.c_int(0)] = ct.c_uint(cur | bit if on else cur & ~bit)

    def set_annotation_region(self, address: int) -> None:
        """Tell the kernel where the target's annotation region is mapped."""
        self.bpf["annbase"][ct.c_uint(self.pid)] = ct.c_ulonglong(address)
        self.set_op_source(1)

    def set_sampled_op(self, tid: int, op: int, ts_ns: int) -> None:
        """The operation the stack sampler saw on a thread (0 none) and when (CLOCK_MONOTONIC).

        The kernel keeps the last 16 changes per thread and replays them in order at the
        thread's next event.
        """
        table = self.bpf["sop"]
        leaf = self._sop.get(tid)
        if leaf is None:
            leaf = self._sop[tid] = table.Leaf()
        seq = self._sop_seq.get(tid, 0) + 1
        self._sop_seq[tid] = seq
        e = leaf.e[seq % 16]
        e.ts, e.op, e.seq = ts_ns, op, seq
        table[ct.c_uint(tid)] = leaf

    def sync_times(self) -> dict[str, list[int]]:
        """Time blocked in synchronize calls: ``{label: [ns, calls]}`` (cumulative, outermost calls)."""
        ns, calls = self.bpf["sync_ns"], self.bpf["sync_calls"]
        out: dict[str, list[int]] = {}
        for i, s in enumerate(self.specs):
            if s.symbol in catalog.SYNC_SYMBOLS:
                n, c = int(sum(ns[ct.c_int(i)])), int(sum(calls[ct.c_int(i)]))
                if c:
                    cur = out.setdefault(s.label, [0, 0])
                    cur[0] += n
                    cur[1] += c
        return out

    def forget(self, tid: int) -> None:
        """Drop the state of an exited thread once it has been read: its counters and its
        sampled operations, in the kernel and here (a churning program makes thousands)."""
        for name in ("threads", "sop"):
            try:
                del self.bpf[name][ct.c_uint(tid)]
            except KeyError:
                pass
        self._sop.pop(tid, None)
        self._sop_seq.pop(tid, None)

    def events(self, budget_s: float = DRAIN_BUDGET_S) -> list[tuple]:
        """Drain the BPF ring buffer: (kind, ts, tid, name, category) tuples, for at most
        ``budget_s`` of the monitor's time: what is left waits for the next call, and what
        no longer fits in the kernel's buffer is counted (``event_drops``), so a flood of
        events (``--timeline`` on a hot loop) never stalls the session."""
        self._drain_until = time.monotonic() + budget_s
        self.bpf.ring_buffer_consume()
        ev, self._events = self._events, []
        return ev

    def _on_event(self, ctx, data, size):
        e = self.bpf["events"].event(data)
        self._events.append((e.kind, e.ts, e.tid, e.name.decode(errors="replace"), e.cat))
        if len(self._events) % 1024 == 0 and time.monotonic() > self._drain_until:
            return -1                 # libbpf stops consuming here; the rest stays in the buffer
        return 0

    def event_drops(self) -> int:
        """Events the kernel's ring buffer had no room for, summed over CPUs."""
        return int(sum(self.bpf["ev_drops"][ct.c_int(0)]))


def _fw_counters(f) -> dict:
    """A thread's per-framework Backend counters, for the slots that have names."""
    n = len(fw.SLOTS)
    return {"ns": [[f.ns[2 * k], f.ns[2 * k + 1]] for k in range(n)], "calls": [f.calls[k] for k in range(n)],
            "trans": [f.trans[k] for k in range(n)], "oh": [f.oh[k] for k in range(n)], "cur": f.cur}


def _lib_matches(spec: ProbeSpec, path: str, copies: dict[str, frozenset[str]]) -> bool:
    """A probe goes into a library named by its pattern, or one that carries a copy of its symbol."""
    return spec.matches(path) or (spec.any_lib and spec.symbol in copies.get(path, ()))


def _parts(spec: ProbeSpec) -> tuple[str, ...]:
    """The kernel probes a catalog entry needs, exits first: an exit seen without its entry
    is ignored, so attaching in this order can never leave a call open."""
    if spec.kind == PAIR:
        return ("exit", "entry")
    return ("exit",) if spec.kind in (EXIT, RANGE_END) else ("entry",)


# The compile starts at nice 19 and is raised step by step if it is still running: on a
# machine whose every core is busy, nice 19 gets ~1.5% of a core (a 3 s compile took 200 s).
COMPILE_NICE_STEPS = ((0.0, 19), (2.0, 10), (4.0, 0))   # (seconds into the compile, nice)


@contextlib.contextmanager
def _low_priority():
    """Compile at low priority (this thread only): the BPF compile takes seconds of CPU, and
    on a machine the job keeps busy it must not slow the job down; but it must finish, so a
    compile that is starved gets its priority back in steps (COMPILE_NICE_STEPS)."""
    tid = threading.get_native_id()
    try:
        was = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, COMPILE_NICE_STEPS[0][1])
    except OSError:
        yield
        return
    done = threading.Event()

    def raise_steps():
        t0 = time.monotonic()
        for at, nice in COMPILE_NICE_STEPS[1:]:
            if done.wait(max(0.0, t0 + at - time.monotonic())):
                return
            try:
                os.setpriority(os.PRIO_PROCESS, tid, max(was, nice))
            except OSError:
                return

    threading.Thread(target=raise_steps, name="rlscope-compile-nice", daemon=True).start()
    try:
        yield
    finally:
        done.set()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, was)
        except OSError:
            pass


@contextlib.contextmanager
def _capture_output():
    """Collect what libbcc/clang print on fds 1 and 2 so the user sees one line, not a log."""
    tmp = tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(tmp.fileno(), 1)
    os.dup2(tmp.fileno(), 2)
    try:
        yield lambda: (tmp.seek(0), tmp.read().decode(errors="replace"))[1]
    finally:
        for fd, old in zip((1, 2), saved):
            os.dup2(old, fd)
            os.close(old)
        tmp.close()


def _compiler_reason(log: str, e: Exception) -> str:
    for line in log.splitlines():
        if "kernel headers" in line or "error:" in line:
            return line.strip()[:200]
    return _first_line(e)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _task_ids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []
