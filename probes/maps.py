"""The BPF maps, read and written from the monitor: per-thread and per-operation counters,
hits, the tick's address ranges, operation sources, synchronize times, the event buffer.

``MapAccess`` is the part of ``ProbeSet`` (probes/loader.py) that talks to the maps once the
program is loaded; the /proc readers beside it say what a process maps.
"""

from __future__ import annotations

import ctypes as ct
import dataclasses
import os
import re
import time

from . import catalog
from . import frameworks as fw
from . import proc_maps


def _env_s(name: str, default: float) -> float:
    """A positive number of seconds from the environment, else ``default`` (a bad value is ignored)."""
    try:
        v = float(os.environ.get(name, default))
    except ValueError:
        return default
    return v if v > 0 else default


DRAIN_BUDGET_S = _env_s("RLSCOPE_DRAIN_BUDGET_S", 0.1)   # monitor time one drain of the event buffer may
                                                         # take (the variable: a test makes it lag)
NTICK = 7       # on-CPU ticks per thread: Python (its frames read: bpf_program.c site_where), a probed category (1-3), other user code, kernel, a probe's trap
NRANGES = 64    # executable mappings the tick can tell apart
OMP_FLAG = 8    # a range's flag: an OpenMP runtime (bpf_program.c RANGE_OMP), its ticks also counted apart
# GNU (libgomp, as torch's wheels ship it: libgomp-<hash>.so.1), Intel (libiomp5) and LLVM (libomp)
OMP_RUNTIME = re.compile(r"/lib(gomp|iomp5|omp)(-[0-9a-f]+)?\.so(\.\d+)*$")
RANGE_NONE = 1 << 62   # an unused slot's start, above every user address (bpf_program.c)
EV_RANGE_BEGIN, EV_RANGE_END, EV_THREAD_EXIT = 1, 2, 3
UNNAMED_RANGE = "(ranges past the kernel's 1,024 names)"   # bpf_program.c range_ids is full
EV_ENTER, EV_EXIT, EV_ON, EV_OFF, EV_NEW, EV_OP, EV_CLOSE = 5, 6, 7, 8, 9, 10, 11
SOP_BLOCKED = 0x80000000    # bpf_program.c: the op of a blocked sample, for the time off CPU


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
    op_now: int = 0           # the operation the kernel charges the thread's time to now (cur_op)
    omp_ticks: int = 0        # of its user-space ticks, those in an OpenMP runtime (a subset of ``ticks``)


@dataclasses.dataclass
class OpCounters:
    """Cumulative in-kernel counters of one operation, summed over threads."""

    op: int
    ns: list[list[int]]
    trans: list[list[int]]
    calls: list[int]
    oh: list[int]
    ticks: list[int] = dataclasses.field(default_factory=list)   # CPU-clock ticks by where (as a thread's)
    pid: int = 0              # the process whose threads ran it (the kernel keeps one per process)


def exec_ranges(pid: int) -> list[tuple[int, int, str]]:
    """(start, end, path) of every executable file mapping of a process."""
    return [(r.start, r.end, r.path) for r in proc_maps.exec_files(pid)]


def _cur_op(s) -> int:
    """bpf_program.c cur_op: the annotation, else the op its stack showed as it blocked while it
    is still off CPU, else the one its last sample named."""
    if s.aop:
        return s.aop
    if s.sop_off & SOP_BLOCKED and s.run == 0:
        return s.sop_off & ~SOP_BLOCKED
    return s.sop_cur


def uprobes_page(pid: int) -> tuple[int, int] | None:
    """(start, end) of a process's ``[uprobes]`` mapping, or None before its first trap."""
    return _uprobes_in(proc_maps.named(pid, "[uprobes]"))


def find_uprobes_page(lines) -> tuple[int, int] | None:
    """The ``[uprobes]`` range in /proc/PID/maps lines. The name must be the whole path field:
    a file the target maps may be called ``/tmp/x [uprobes]``."""
    return _uprobes_in(proc_maps.parse(lines))


def _uprobes_in(regions) -> tuple[int, int] | None:
    return next(((r.start, r.end) for r in regions if r.path == "[uprobes]"), None)


def mapped_files(pid: int) -> set[str]:
    """Paths of executable file mappings of a process (empty if it is gone), as /proc/PID/maps
    names them: a library deleted or replaced since it was loaded keeps its " (deleted)" (it is
    probed through the process's own mapping: symbols.target_file); memfd code is left out."""
    return {r.path for r in proc_maps.exec_files(pid) if not r.path.startswith("/memfd:")}


class MapAccess:
    """Readers and writers of the loaded program's maps (mixed into ``ProbeSet``, which sets
    ``bpf``, ``pid``, ``specs``, ``attached`` and the bookkeeping they use)."""

    # -- reading -----------------------------------------------------------
    def hits(self) -> list[int]:
        """Hits per probe id, summed over CPUs (read for the ids ever attached: one syscall
        each, and a catalog has ~100 specs where a process takes ~20)."""
        table, out = self.bpf["hits"], [0] * len(self.specs)
        for i in {a.id for a in self.attached}:
            out[i] = int(sum(table[ct.c_int(i)]))
        return out

    def trap_counts(self) -> tuple[dict[int, int], dict[int, int], int]:
        """For the attached probes: per part (slot: id * 2, + 1 for exit fields) its hits; per
        part and side of its timestamp (slot * 2, + 1 after) the CPU-clock ticks that found a
        thread in its trap; and the trap ticks no part could be named for."""
        hits, ticks = self.bpf["trap_hits"], self.bpf["trap_ticks"]
        parts = [a.id * 2 + k for a in self.attached for k in (0, 1)]
        h = {p: int(sum(hits[ct.c_int(p)])) for p in parts}
        t = {q: int(sum(ticks[ct.c_int(q)])) for p in parts if h[p] for q in (2 * p, 2 * p + 1)}
        return h, t, int(sum(ticks[ct.c_int(ticks.max_entries - 1)]))

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
                switches=s.switches, preempt_ns=s.preempt_ns, op_now=_cur_op(s), omp_ticks=s.omp_ticks))
        return out

    def named_ranges(self) -> dict[str, list[int]]:
        """record_function ranges closed so far, summed in the kernel over threads and
        processes: ``{name: [count, ns]}``. A range open at attach is not in it, nor one nested
        deeper than the kernel keeps open per thread (bpf_program.c RANGE_DEPTH, 8)."""
        items = [(k.value, v.count, v.ns) for k, v in self.bpf["range_stat"].items()]
        if any(i not in self._range_names for i, _, _ in items):
            self._range_names = {v.value: k.s.decode(errors="replace") for k, v in self.bpf["range_ids"].items()}
        out: dict[str, list[int]] = {}
        for i, n, ns in items:
            c = out.setdefault(self._range_names.get(i, UNNAMED_RANGE), [0, 0])
            c[0] += n
            c[1] += ns
        return out

    def category_ranges(self, pid: int | None = None) -> list[tuple[int, int, int]]:
        """Executable mappings of ``pid`` (default: the first root) that belong to a probed
        category: each attached library and the libraries beside it (torch/lib/*.so,
        nvidia/*/lib/*.so), and simulator engines without probes (catalog.SIM_ENGINE_LIB), so
        that a thread the probes do not bracket (an intra-op pool, a simulator worker) is still
        seen to run there."""
        dirs: dict[str, int] = {}
        for a in self.attached:
            dirs.setdefault(os.path.dirname(a.path), a.spec.category)
        exact = {a.path: a.spec.category for a in self.attached}
        backend = any(a.spec.category == catalog.CAT_BACKEND for a in self.attached)
        out = []
        for start, end, path in exec_ranges(self.pid if pid is None else pid):
            cat = exact.get(path, dirs.get(os.path.dirname(path)))
            if cat is None and catalog.SIM_ENGINE_LIB.search(path):
                cat = catalog.CAT_SIM
            if OMP_RUNTIME.search(path) and (cat not in (None, catalog.CAT_PY) or backend):
                # an OpenMP runtime outside torch/lib (a conda env's) serves the ML backend too
                cat = (catalog.CAT_BACKEND if cat in (None, catalog.CAT_PY) else cat) | OMP_FLAG
            if cat is not None and cat != catalog.CAT_PY:
                out.append((start, end, cat))
        return out[:NRANGES]

    def set_ranges(self, ranges: list[tuple[int, int, int]]) -> None:
        """Tell the tick which address ranges belong to which category: (start, end, category)."""
        if ranges == self._ranges_set:
            return
        self._ranges_set = ranges
        table = self.bpf["ranges"]
        table[ct.c_int(0)] = _rangeset(table, ranges)

    def set_process_ranges(self) -> None:
        """Give each counted process whose layout is not the first root's its own ranges (a
        forked worker shares its parent's addresses; a spawned or exec'd one, another --pid or
        a launcher's python child has its libraries elsewhere, and its ticks there read as
        Python). Reads the maps the scan has just read."""
        want = {}
        for pid in self.pids():
            if pid != self.pid:
                mine = self.category_ranges(pid)
                if mine != self._ranges_set:
                    want[pid] = mine
        table = self.bpf["pranges"]
        for pid, mine in want.items():
            if self._pranges.get(pid) == mine:
                continue
            try:
                table[ct.c_uint(pid)] = _rangeset(table, mine)
            except Exception:            # full: this one keeps the root's ranges
                self._say_pranges_full(pid, len(self._pranges))
                continue
            self._pranges[pid] = mine
        self._forget_ranges([pid for pid in self._pranges if pid not in want])

    def _say_pranges_full(self, pid: int, held: int) -> None:
        """Say once that a process's ticks are placed with the first root's ranges: the table
        of per-process ranges is full (its ticks in its own libraries may read as Python)."""
        if self._pranges_full:
            return
        self._pranges_full = True
        self.notify("warn", f"{held:,} processes with their own library layout already: PID {pid} and any "
                            f"later ones place CPU ticks by PID {self.pid}'s libraries (their ticks in "
                            "other libraries may read as Python); follow fewer with --no-children or fewer --pid")

    def _forget_ranges(self, pids: list[int]) -> None:
        for pid in pids:
            self._pranges.pop(pid, None)
            try:
                del self.bpf["pranges"][ct.c_uint(pid)]
            except Exception:            # KeyError, or the program is gone
                pass

    def set_xol(self) -> None:
        """Tell the tick where the target's uprobes page is. It appears at the first trap that
        needs it and stays for the life of the process (the kernel puts it in the top page when
        that is free): /proc/PID/maps is read until it is found, not after."""
        if self._xol_set is not None:
            return
        r = uprobes_page(self.pid)
        if r is not None:
            self._xol_set = r
            self.bpf["xol"][ct.c_int(0)] = self.bpf["xol"].Leaf(r[0], r[1], 0, 0)

    # -- operations ----------------------------------------------------------
    def ops(self) -> list[OpCounters]:
        """Cumulative counters per operation id and process."""
        return [OpCounters(op=k.value & 0xFFFFFFFF, pid=k.value >> 32, ns=[[c.ns[2 * i], c.ns[2 * i + 1]] for i in range(4)],
                           trans=[[c.trans[4 * a + b] for b in range(4)] for a in range(4)],
                           calls=list(c.calls), oh=list(c.oh), ticks=list(c.ticks))
                for k, c in self.bpf["opstat"].items()]

    def forget_ops(self, keys: list[tuple[int, int]]) -> None:
        """Drop (pid, op) counters from the kernel: a folded process's (their final figures are
        kept by the caller), so that the table has room for the processes to come."""
        table = self.bpf["opstat"]
        for pid, op in keys:
            try:
                del table[ct.c_ulonglong(pid << 32 | op)]
            except Exception:            # KeyError, or the program is gone
                pass

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

    def forget_processes(self, pids: list[int]) -> None:
        """Stop counting processes that are gone (their threads' exits were counted already):
        the targets map has room for 4,096, and a pid may come back as another program."""
        for pid in pids:
            try:
                del self.bpf["targets"][ct.c_uint(pid)]
            except (KeyError, Exception):
                pass
        self._forget_ranges([pid for pid in pids if pid in self._pranges])

    def forget(self, tid: int) -> None:
        """Drop the state of an exited thread once it has been read: its counters and its
        sampled operations, in the kernel and here (a churning program makes thousands)."""
        for name in ("threads", "sop", "range_stack"):
            try:
                del self.bpf[name][ct.c_uint(tid)]
            except KeyError:
                pass
        self._sop.pop(tid, None)
        self._sop_seq.pop(tid, None)

    def events(self, budget_s: float | None = DRAIN_BUDGET_S) -> list[tuple]:
        """Drain the BPF ring buffer: (kind, ts, tid, name, category) tuples, for at most
        ``budget_s`` of the monitor's time: what is left waits for the next call, and what
        no longer fits in the kernel's buffer is counted (``event_drops``), so a flood of
        events (``--timeline`` on a hot loop) never stalls the session. ``None``: all of it,
        for the last drain once counting has stopped (what it left would be lost uncounted;
        the buffer holds ~87k events, well under a second of this)."""
        self._drain_until = float("inf") if budget_s is None else time.monotonic() + budget_s
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

    def run_fixes(self) -> int:
        """Ticks that found a thread the books held off-CPU: switch-ins sched_switch did not
        show (bpf_program.c ``tick_on_cpu``), summed over CPUs."""
        return int(sum(self.bpf["run_fixes"][ct.c_int(0)]))

    def bookkeeping_ns(self) -> int:
        """ns the program spent on the targets' context switches and CPU-clock ticks, stack
        reads included (bpf_program.c ``bookkeep``), summed over CPUs."""
        return int(sum(sum(self.bpf["bookkeep"][ct.c_int(k)]) for k in (0, 1)))

    def closed_calls(self) -> int:
        """Threads' calls a budget step left open (their exit probes gone), closed at their next
        event (bpf_program.c ``depth_sync``), summed over CPUs."""
        return int(sum(self.bpf["closed_calls"][ct.c_int(0)]))


def _fw_counters(f) -> dict:
    """A thread's per-framework Backend counters, for the slots that have names."""
    n = len(fw.SLOTS)
    return {"ns": [[f.ns[2 * k], f.ns[2 * k + 1]] for k in range(n)], "calls": [f.calls[k] for k in range(n)],
            "trans": [f.trans[k] for k in range(n)], "oh": [f.oh[k] for k in range(n)], "cur": f.cur}


def _rangeset(table, ranges: list[tuple[int, int, int]]):
    """A ``struct rangeset`` leaf of ``table`` holding (start, end, category) ranges, sorted by
    start, the unused slots starting at RANGE_NONE: the tick finds an address by halving
    (bpf_program.c ip_where), which needs both."""
    leaf = table.Leaf()
    kept = sorted(ranges[:NRANGES])
    leaf.n = len(kept)
    for i in range(NRANGES):
        a, b, cat = kept[i] if i < len(kept) else (RANGE_NONE, RANGE_NONE, 0)
        leaf.r[i].start, leaf.r[i].end, leaf.r[i].cat = a, b, cat
    return leaf


def task_ids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def ancestors(pid: int) -> list[int]:
    """A process's parent, its parent and so on up to init (PID 1, left out)."""
    out = []
    while pid > 1 and len(out) < 4096:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid > 1:
            out.append(pid)
    return out


def descendants(pid: int, prune: frozenset[int] = frozenset()) -> list[int]:
    """A process's children, their children and so on, parents first (empty if it is gone);
    the processes in ``prune`` and what they forked are left out."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        kids = []
        for tid in task_ids(p):          # a child belongs to the thread that forked it
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids += [int(k) for k in f.read().split()]
            except OSError:
                pass
        kids = [k for k in kids if k not in out and k not in prune]
        out += kids
        todo += kids
    return out
