"""Zero-change operations from Python stacks read in the kernel (pystack.c), not by austin.

The BPF program reads a target thread's frame chain on its CPU-clock tick, at most once per
sampling period, and again whenever it blocks, so time spent waiting (an env worker's pipe,
a vector env's recv) belongs to the operation it waits in. The thread is stopped while its
own frames are read: no torn samples, which an outside reader drops more often in
call-heavy Python (a gym env's step) than elsewhere, and so undercounts it. Samples come
here through their own ring buffer; code objects are named from the target's memory
(pystack.Interpreter) and go through the same rules and bookkeeping as austin's lines.
"""

from __future__ import annotations

import ctypes as ct
import os
import struct
import threading
import time
from typing import Callable

from ..errors import NotReadablePython
from .maps import SOP_BLOCKED
from .pystack import Interpreter
from .stack_sampler import StackCounts, StackSampler

DEPTH = 128                 # PYS_DEPTH in pystack.c
REFRESH_S = 0.5             # new threads and processes are looked for this often
POLL_MS = 50
STARTING_POLL_MS = 5
WHY_BLOCK, WHY_EXEC = 1, 2  # PYS_WHY_* in pystack.c
MAX_STACKS = 100_000        # distinct stacks whose names and match are kept
BLOCK_GAP_MIN_NS = 2_500_000  # least gap between a thread's blocked samples (what 100 Hz gave)
_HEAD = struct.Struct("<QIIHBBI")          # struct pysample up to its frames


class _PyInfo(ct.Structure):
    _fields_ = [("o_cframe", ct.c_uint32), ("o_current_frame", ct.c_uint32), ("o_code", ct.c_uint32),
                ("o_previous", ct.c_uint32), ("o_instr", ct.c_uint32), ("pad", ct.c_uint32)]


class KernelStackSampler(StackSampler):
    """The StackSampler interface over the in-kernel sampler of a loaded ProbeSet."""

    tool = "kernel"

    def __init__(self, pid: int, rules: list, hz: float, set_op: Callable[[int, int, int], None],
                 probes, children: bool = False, stacks: StackCounts | None = None):
        super().__init__(pid, rules, hz, set_op, children, stacks)
        self.probes = probes
        self.interps: dict[int, Interpreter | None] = {}   # None: not a CPython we can read
        self._prev: dict[int, tuple[int, list[str]]] = {}  # tid -> (ts, frames) of its last sample
        self._known: dict[tuple[int, bytes], tuple] = {}   # (pid, code addresses) -> (frames, match)
        self._taught: set[tuple[int, int]] = set()          # (pid, code) the kernel knows (code_op)
        self._pyts: dict[int, int] = {}                     # tid -> the PyThreadState written to pyts
        self._starting: set[int] = set()                    # exec'd processes whose interpreter is starting
        self._gone: set[int] = set()                        # exited processes the reader lets go of next
        self._stale_sites: set[int] = set()                 # exec'd processes whose site_ticks go at the next refresh
        self._sites_final: int | None = None                # site-placed ticks when it stopped
        self._native: dict[int, str] = {}                   # pid -> the program it ran when found not Python
        self.root_error: str | None = None                  # why the root itself cannot be read (its tree can)
        self._rb = None
        self._cb = None

    def start(self) -> bool:
        """Arm the kernel half. False (``error`` says why) for a target it cannot read."""
        try:
            first = Interpreter(self.pid)
        except NotReadablePython as e:
            if not self.probes.children or e.other_version:    # a Python of its own: austin reads it
                self.error = str(e)
                return False
            first = None                 # a launcher (bash train.sh): its Python children are read
            self.root_error = str(e)
        bpf = self.probes.bpf
        try:
            self._open_ring(bpf)
        except Exception as e:           # bcc raises plain Exception
            if first is not None:
                first.close()
            self.error = f"cannot open the stack ring buffer: {e}"
            return False
        if first is None:
            self._native[self.pid] = _program(self.pid)
        self._add(self.pid, first)
        self._set_rate(self.hz)
        self.started_ns = time.monotonic_ns()
        self._thread = threading.Thread(target=self._read, name="rlscope-ksampler", daemon=True)
        self._thread.start()
        return True

    def _open_ring(self, bpf) -> None:
        from bcc.libbcc import _RINGBUF_CB_TYPE, lib      # noqa: PLC0415 (bcc only where it runs)

        self._lib = lib
        self._cb = _RINGBUF_CB_TYPE(self._on_sample)
        # a manager of its own: bcc's would share its poll with the collector's event ring
        self._rb = lib.bpf_new_ringbuf(bpf["pystacks"].map_fd, self._cb, None)
        if not self._rb:
            raise RuntimeError("libbpf refused it")

    def _set_rate(self, hz: float) -> None:
        # At the tick's own rate or above, every tick is sampled (1 ns: no gap to wait for): a
        # thread that moves between CPUs, or is preempted, gets its ticks less than a period
        # apart, and a tick without its own sample counts for the operation standing (op_tick)
        tick_hz = self.probes.tick_hz
        period = 1 if tick_hz and hz >= tick_hz else int(1e9 / hz)
        cfg = self.probes.bpf["pycfg"]
        # blocked samples: at most 4 per period, and no more than 100 Hz gave (a pipe-bound env
        # worker blocks thousands of times a second)
        cfg[ct.c_int(1)] = ct.c_uint64(max(period // 4, BLOCK_GAP_MIN_NS))
        cfg[ct.c_int(0)] = ct.c_uint64(period)

    def _add(self, pid: int, interp: Interpreter | None) -> None:
        self.interps[pid] = interp
        if interp is None:
            return
        L = interp.layout
        self.probes.bpf["pyinfo"][ct.c_uint32(pid)] = _PyInfo(L.tstate_cframe, L.cframe_current, L.frame_code,
                                                              L.frame_previous, L.frame_instr, 0)
        self._thread_states(interp)

    def _thread_states(self, interp: Interpreter) -> int:
        """Write the thread states the kernel does not have yet (this runs every refresh).
        Returns how many the interpreter has."""
        table = self.probes.bpf["pyts"]
        states = interp.thread_states()
        for tid, addr in states.items():
            if self._pyts.get(tid) != addr:
                table[ct.c_uint32(tid)] = ct.c_uint64(addr)
                self._pyts[tid] = addr
        return len(states)

    def stop(self) -> None:
        """Stop sampling in the kernel and the reader (idempotent)."""
        if self._stopping:
            return
        self._stopping = True
        try:
            self.probes.bpf["pycfg"][ct.c_int(0)] = ct.c_uint64(0)
        except Exception:                # the program is gone already
            pass
        self._cpu_final = self.cpu_s()
        self._sites_final = self.site_ticks()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._rb and not (self._thread and self._thread.is_alive()):
            self._lib.bpf_consume_ringbuf(self._rb)     # the last decided samples (no wakeup came)
        if self._rb:
            self._lib.bpf_free_ringbuf(self._rb)
            self._rb = None
        for interp in self.interps.values():
            if interp is not None:
                interp.close()
        self.ended = True

    def restarted(self, hz: float, children: bool | None = None) -> "KernelStackSampler":
        """Another rate; the tree is followed by the probes either way (no cost to following)."""
        self.hz = hz
        if children is not None:
            self.children = children
        self._set_rate(hz)
        return self

    def forget(self, tid: int) -> None:
        """A thread exited: drop what was kept for it, here and in the kernel."""
        self._cur.pop(tid, None)
        self._prev.pop(tid, None)
        self._pyts.pop(tid, None)
        for name in ("pyts", "pylast"):
            try:
                del self.probes.bpf[name][ct.c_uint32(tid)]
            except Exception:                # KeyError, or the program is gone
                pass

    def site_ticks(self) -> int:
        """CPU-clock ticks the kernel placed by their call site (bpf_program.c site_where)."""
        if self._sites_final is not None:
            return self._sites_final
        try:
            return int(sum(self.probes.bpf["pystat"][ct.c_int(4)]))
        except Exception:                # the program is gone
            return 0

    def cpu_s(self) -> float | None:
        """CPU seconds the kernel half has spent reading stacks: taken from the target's threads.
        The reader thread is the monitor's own CPU, counted with it (as austin's reader is)."""
        if self._cpu_final is not None:
            return self._cpu_final
        try:
            return sum(self.probes.bpf["pystat"][ct.c_int(1)]) / 1e9
        except Exception:
            return None

    # -- reading -----------------------------------------------------------
    def _read(self) -> None:
        last = 0.0
        while not self._stopping:
            # a process whose interpreter is starting is looked at every few ms (decided
            # samples wake the reader only every 50 ms: pystack.c pys_wake_flags)
            self._lib.bpf_poll_ringbuf(self._rb, STARTING_POLL_MS if self._starting else POLL_MS)
            self._lib.bpf_consume_ringbuf(self._rb)     # samples queued without a wakeup
            if self._gone:
                self._let_go()
            for pid in list(self._starting):
                interp = self.interps.get(pid)
                if interp is None or self._thread_states(interp):
                    self._starting.discard(pid)
            now = time.monotonic()
            if now - last >= REFRESH_S:
                last = now
                self._refresh()
                if self._stale_sites:        # one pass over each table, not one per exec (a loop that
                    for table in ("site_ticks", "site_op"):                  # runs a command each step)
                        self._forget_process(table, self._stale_sites)
                    self._stale_sites = set()

    def _exec(self, pid: int) -> None:
        """A process exec'd (the kernel dropped its interpreter): forget the old program's code
        objects, here and in the kernel, and read the new one. Its main thread state exists only
        once the new interpreter has started: it is looked for at every poll until found."""
        self._drop({pid})
        self._stale_sites.add(pid)       # code addresses mean nothing in the new program (cleared in batches)
        self._pyts.pop(pid, None)
        if self._try_add(pid) is not None:
            self._starting.add(pid)

    def forget_processes(self, pids: list[int]) -> None:
        """Processes that exited: the reader lets go of them at its next poll (their samples
        still in the ring are read first)."""
        self._gone.update(pids)

    def _let_go(self) -> None:
        """The reader's half of forget_processes: drop them here and from the kernel's pyinfo
        (which the exit hook in pystack.c has mostly done already)."""
        gone = set()
        while self._gone:
            gone.add(self._gone.pop())
        self._drop(gone)
        pyinfo = self.probes.bpf["pyinfo"]
        for pid in gone:                 # bounded (4,096), and a fork copies its parent's entry in
            try:
                del pyinfo[ct.c_uint32(pid)]
            except Exception:            # KeyError: never followed as Python, or the program is gone
                pass
            self._starting.discard(pid)

    def _drop(self, pids: set[int]) -> None:
        """Forget processes' interpreters (and their open /proc/PID/mem) and their code objects,
        here and in the kernel's code_op."""
        for pid in pids:
            self._native.pop(pid, None)
            old = self.interps.pop(pid, None)
            if old is not None:
                old.close()
        self._known = {k: v for k, v in self._known.items() if k[0] not in pids}
        table = self.probes.bpf["code_op"]
        for tgid, code in [k for k in self._taught if k[0] in pids]:
            key = table.Key()
            key.code, key.tgid = code, tgid
            try:
                del table[key]
            except Exception:
                pass
        self._taught = {k for k in self._taught if k[0] not in pids}

    def _forget_process(self, name: str, pids: set[int]) -> None:
        """Drop processes' entries from a kernel table keyed by (code address, tgid)."""
        table = self.probes.bpf[name]
        for k in [k for k in table.keys() if k.tgid in pids]:
            try:
                del table[k]
            except KeyError:
                pass

    def _refresh(self) -> None:
        """Name new processes of the tree and find new threads' states."""
        try:
            pids = self.probes.pids()
        except Exception:
            return
        for pid in pids:
            if pid not in self.interps or (self.interps[pid] is None and self._native.get(pid) != _program(pid)):
                self._try_add(pid)       # new, or it exec'd since (a launcher's fork that became python)
            elif self.interps[pid] is not None:
                self._thread_states(self.interps[pid])

    def _try_add(self, pid: int) -> Interpreter | None:
        try:
            interp = Interpreter(pid)
            self._native.pop(pid, None)
        except NotReadablePython:
            interp = None
            self._native[pid] = _program(pid)
        self._add(pid, interp)
        return interp

    def _on_sample(self, ctx, data, size) -> int:
        try:
            self._sample(data)
        except Exception:                # never let a bad sample stop the reader
            self.invalid += 1
        return 0

    def _sample(self, data: int) -> None:
        ts, tgid, tid, depth, why, truncated, decided = _HEAD.unpack(ct.string_at(data, _HEAD.size))
        if why == WHY_EXEC:
            self._exec(tgid)
            return
        raw = ct.string_at(data + _HEAD.size, min(depth, DEPTH) * 8)
        got = self._known.get((tgid, raw))      # stacks repeat: one lookup names and matches it
        if got is None:
            interp = self.interps.get(tgid, False)
            if interp is False:          # a fork the kernel followed: name it now, not at the next refresh
                interp = self._try_add(tgid)
            if interp is None:
                return                   # not a CPython we can read (an exec the kernel has not seen yet)
            codes = struct.unpack(f"<{len(raw) // 8}Q", raw)
            frames = [interp.name(c) for c in reversed(codes)]
            got = (frames, self.matcher.match(frames))
            if len(self._known) >= MAX_STACKS:
                self._known.clear()
            if not any(_unread(f) for f in frames):     # else read again: untaught, its next block
                self._known[(tgid, raw)] = got        # would wait on this reader (up to POLL_MS)
            self._teach(tgid, codes, frames[::-1])
        frames, match = got
        if decided:                      # the kernel applied it as it read it: count it only
            self._counted(tid, why, frames, match, truncated)
        elif why == WHY_BLOCK:
            self._blocked(tid, frames, ts, match, truncated)
        elif truncated:                  # outer frames unknown
            self.take_partial(tid, frames, ts, match)
        else:
            self.take(tid, frames, ts, match)
        if self.stacks is not None:
            self._keep_interval(tgid, tid, ts, frames)

    def _teach(self, tgid: int, codes: tuple, names: list[str]) -> None:
        """Tell the kernel what the rules make of these code objects (pystack.c: code_op)."""
        table = self.probes.bpf["code_op"]
        for code, name in zip(codes, names):
            key = (tgid, code)
            if key in self._taught:
                continue
            if _unread(name):
                continue                 # not readable now: ask again next time
            rule = self.matcher.frame_rule(name)
            k = table.Key()
            k.code, k.tgid = code, tgid
            table[k] = ct.c_uint32(1 + self.ids[rule.name] if rule else 1)
            self._taught.add(key)

    def _counted(self, tid: int, why: int, frames: list[str], match: tuple, truncated: int) -> None:
        """A sample the kernel named: the counts and this side's idea of the thread's op."""
        if truncated:                    # its inner frames named it; not a whole sample
            op = self.ids[match[0]] if match[0] else 0
        else:
            op = self.count(frames, match)
        if why != WHY_BLOCK:
            self._cur[tid] = op

    def _blocked(self, tid: int, frames: list[str], ts: int, match: tuple, truncated: int) -> None:
        """A stack read as the thread blocked: its op owns the wait only (SOP_BLOCKED); the
        thread's on-CPU operation stays what the ticks last saw."""
        inner = match[0]                 # of the frames read: the inner ones, when truncated
        if truncated and inner is None:
            self.invalid += 1
            return
        op = self.ids[inner] if inner else 0
        if not truncated:
            self.count(frames, match)
        if op != self._cur.get(tid, 0):
            self._set_op(tid, op | SOP_BLOCKED, ts)

    def _keep_interval(self, pid: int, tid: int, ts: int, frames: list[str]) -> None:
        """--record: the time since a thread's last sample goes to that sample's stack (it held
        until now), as each austin sample carries the time since the one before."""
        prev = self._prev.get(tid)
        self._prev[tid] = (ts, frames)
        if prev is not None and ts > prev[0]:
            self.stacks.add(pid, tid, prev[1], (ts - prev[0]) // 1000)


def _program(pid: int) -> str:
    """What a process runs now ("" once it is gone): an exec changes it."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _unread(frame: str) -> bool:
    """A frame name the interpreter could not be read for (yet)."""
    return frame.startswith("?") or frame.endswith(":?")
