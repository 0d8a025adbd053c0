"""The monitor's side of the GPU agent's shared region (probes/gpu_agent.h).

The agent (probes/gpu_agent.c, loaded in the target) maps a memfd named
``rlscope-top-gpu``; it shows in /proc/PID/maps and root opens the same pages
through /proc/PID/map_files. Here we validate it, send commands (a futex word the
agent sleeps on), and take whole CUPTI buffers and kernel names out of it.

The region is written by the target, so nothing in it is trusted: every offset and
length is checked, and anything inconsistent raises :class:`RegionError` (the
collector then treats the agent as lost). Nothing here runs per record.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import time

from .ann_region import find_memfd
from ..errors import RegionError

MEMFD_NAME = "rlscope-top-gpu"
MAGIC = b"RLSGPU\x00\x01"
VERSION = 1
HEADER = 4096
MAX_DATA = 1 << 30
MAX_NAMES = 64 << 20
FRAME = struct.Struct("<IHHII")        # len, type, kind, records, reserved
NAME = struct.Struct("<QII")           # ptr, len, reserved
FRAME_RECORDS, FRAME_PAD = 1, 2
NAME_MAX = 1024
NKINDS = 32

CMD_START, CMD_STOP, CMD_FLUSH = 1, 2, 3
STATE_IDLE, STATE_TRACING = 0, 1
OPT_API = 1

# Field offsets (struct rls_gpu_header; tests/test_gpu_native.py checks them against the C).
OFF = {
    "magic": 0, "version": 8, "header_size": 12, "data_capacity": 16, "names_capacity": 24,
    "agent_pid": 32, "state": 36, "cmd_seq": 40, "cmd": 44, "ack_seq": 48, "status": 52,
    "cupti_version": 56, "built_version": 60, "head": 64, "tail": 72, "names_head": 80,
    "records": 88, "dropped_records": 96, "cupti_dropped": 104, "buffers": 112, "callback_ns": 120,
    "heartbeat_ns": 128, "monitor_pid": 136, "options": 140, "started_ns": 144, "stopped_ns": 152,
    "kind_size": 160, "unknown_records": 288, "names_dropped": 296, "clock": 304, "name_offset": 308,
    "clock_offset_ns": 312, "alloc_buffers": 320, "generation": 328, "flushes": 336,
    "status_msg": 344, "cupti_path": 600,
}
U32 = ("version", "header_size", "agent_pid", "state", "cmd_seq", "cmd", "ack_seq", "cupti_version",
       "built_version", "monitor_pid", "options", "clock", "name_offset")
I32 = ("status",)
I64 = ("clock_offset_ns",)
STATS = ("records", "dropped_records", "cupti_dropped", "buffers", "callback_ns", "unknown_records",
         "names_dropped", "alloc_buffers", "generation", "flushes", "started_ns", "stopped_ns")

# Status codes (RLS_ST_*) as the summary names them.
STATUS = {0: "ok", 1: "no_libcupti", 2: "no_driver", 3: "no_gpu", 4: "no_permission",
          5: "other_subscriber", 6: "unsupported", 7: "error", 8: "monitor_gone"}

_SYS_FUTEX, _FUTEX_WAKE = 202, 1
_libc = ctypes.CDLL(None, use_errno=True)



def find(pid: int) -> tuple[int, str] | None:
    """(address, map_files path) of the agent's region in ``pid``, or None."""
    return find_memfd(pid, MEMFD_NAME)


def _align8(n: int) -> int:
    return (n + 7) & ~7


class GpuRegion:
    """An open agent region of one process."""

    def __init__(self, pid: int, path: str):
        self.pid = pid
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise RegionError(f"cannot open the GPU agent's region of PID {pid}: {e.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if size < HEADER:
                raise RegionError(f"PID {pid}'s {MEMFD_NAME} region is too small to be ours")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        try:
            self._validate(size)
        except RegionError:
            self.mm.close()
            raise
        ref = ctypes.c_char.from_buffer(self.mm)
        self._base = ctypes.addressof(ref)
        del ref                       # no export may outlive close()
        self._tail = self.u64("tail")
        self._names_at = 0
        self.name_text: dict[int, str] = {}

    def _validate(self, size: int) -> None:
        mm = self.mm
        if mm[0:8] != MAGIC:
            raise RegionError(f"PID {self.pid} has a {MEMFD_NAME} region that is not rlscope-top's (bad magic)")
        if self.u32("version") != VERSION or self.u32("header_size") != HEADER:
            raise RegionError(f"PID {self.pid}'s GPU agent speaks region v{self.u32('version')}; "
                              f"this rlscope-top reads v{VERSION}")
        cap, ncap = self.u64("data_capacity"), self.u64("names_capacity")
        if not (4096 <= cap <= MAX_DATA and cap % 8 == 0 and 0 < ncap <= MAX_NAMES and ncap % 8 == 0):
            raise RegionError(f"PID {self.pid}'s GPU agent region has impossible sizes")
        if size != HEADER + cap + ncap:
            raise RegionError(f"PID {self.pid}'s GPU agent region is {size} bytes, its header says "
                              f"{HEADER + cap + ncap}")
        if self.u32("agent_pid") != self.pid:
            raise RegionError(f"the GPU agent region in PID {self.pid} says it belongs to PID "
                              f"{self.u32('agent_pid')}")
        self.cap, self.ncap = cap, ncap

    # -- fields --------------------------------------------------------------------
    def u32(self, name: str) -> int:
        """One 32-bit header field (unsigned unless it is a status)."""
        fmt = "<i" if name in I32 else "<I"
        return struct.unpack_from(fmt, self.mm, OFF[name])[0]

    def u64(self, name: str) -> int:
        """One 64-bit header field."""
        fmt = "<q" if name in I64 else "<Q"
        return struct.unpack_from(fmt, self.mm, OFF[name])[0]

    def _put(self, name: str, value: int, fmt: str) -> None:
        struct.pack_into(fmt, self.mm, OFF[name], value)

    def text(self, name: str, size: int) -> str:
        """A NUL-ended string field."""
        raw = self.mm[OFF[name]:OFF[name] + size]
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def kind_sizes(self) -> dict[int, int]:
        """Record bytes per CUPTI activity kind, as the agent's CUPTI reported them."""
        sizes = struct.unpack_from(f"<{NKINDS}I", self.mm, OFF["kind_size"])
        return {k: s for k, s in enumerate(sizes) if s}

    def status(self) -> tuple[str, str]:
        """(code, message) of the agent's last answer."""
        return STATUS.get(self.u32("status"), "error"), self.text("status_msg", 256)

    def stats(self) -> dict:
        """The agent's counters (records, drops, time in its callbacks, ...)."""
        out = {k: self.u64(k) for k in STATS}
        out.update(state=self.u32("state"), cupti_version=self.u32("cupti_version"),
                   built_version=self.u32("built_version"), clock=self.u32("clock"),
                   clock_offset_ns=self.u64("clock_offset_ns"), monitor_pid=self.u32("monitor_pid"))
        return out

    @property
    def tracing(self) -> bool:
        """Whether CUPTI activity is on in the target."""
        return self.u32("state") == STATE_TRACING

    # -- commands --------------------------------------------------------------------
    def _wake(self, name: str) -> None:
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(self._base + OFF[name]), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)

    def command(self, cmd: int, timeout_s: float) -> bool:
        """Send a command and wait for the agent's answer. False: it did not answer in time."""
        seq = (self.u32("cmd_seq") + 1) & 0xFFFFFFFF
        self._put("cmd", cmd, "<I")
        self._put("cmd_seq", seq, "<I")
        self._wake("cmd_seq")
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.u32("ack_seq") == seq:
                return True
            time.sleep(0.002)
        return False

    def claim(self, monitor_pid: int, cupti_path: str = "", options: int = OPT_API) -> None:
        """Say who collects, and what to load: before ``start``."""
        raw = cupti_path.encode()[:511]
        self.mm[OFF["cupti_path"]:OFF["cupti_path"] + 512] = raw + b"\0" * (512 - len(raw))
        self._put("options", options, "<I")
        self._put("monitor_pid", monitor_pid, "<I")
        self.heartbeat()

    def heartbeat(self) -> None:
        """Tell the agent the monitor is alive (it stops tracing after 10 s without one)."""
        self._put("heartbeat_ns", time.monotonic_ns(), "<Q")

    def holder(self) -> int | None:
        """PID of another live monitor that collects from this agent, if any."""
        pid = self.u32("monitor_pid")
        fresh = time.monotonic_ns() - self.u64("heartbeat_ns") < 5_000_000_000
        if pid and pid != os.getpid() and fresh and os.path.exists(f"/proc/{pid}"):
            return pid
        return None

    # -- data ------------------------------------------------------------------------
    def read(self, max_bytes: int = 64 << 20) -> list[tuple[int, bytes]]:
        """Frames written since the last call: (CUPTI activity kind, its records as bytes)."""
        head, cap, mm, sizes = self.u64("head"), self.cap, self.mm, self.kind_sizes()
        tail = self._tail
        if not tail <= head <= tail + cap:
            raise RegionError(f"PID {self.pid}'s GPU agent region is inconsistent (head {head}, tail {tail})")
        out, taken = [], 0
        while tail < head and taken < max_bytes:
            phys = tail % cap
            rem = cap - phys
            if rem < FRAME.size:
                tail += rem
                continue
            n, typ, kind, records, _ = FRAME.unpack_from(mm, HEADER + phys)
            if typ == FRAME_PAD:
                tail += rem
                continue
            size = _align8(FRAME.size + n)
            if (typ != FRAME_RECORDS or size > rem or n > cap // 2 or tail + size > head
                    or n != records * sizes.get(kind, 0)):
                raise RegionError(f"PID {self.pid}'s GPU agent region has a bad frame at {tail}")
            start = HEADER + phys + FRAME.size
            out.append((kind, mm[start:start + n]))
            taken += n
            tail += size
        self._tail = tail
        self._put("tail", tail, "<Q")
        return out

    def names(self) -> dict[int, str]:
        """Kernel names published since the last call: {pointer: name}."""
        end = self.u64("names_head")
        if end > self.ncap:
            raise RegionError(f"PID {self.pid}'s GPU agent region has a bad names head")
        base, mm, at, new = HEADER + self.cap, self.mm, self._names_at, {}
        while at + NAME.size <= end:
            ptr, n, _ = NAME.unpack_from(mm, base + at)
            if n > NAME_MAX or at + NAME.size + n > end:
                raise RegionError(f"PID {self.pid}'s GPU agent region has a bad name at {at}")
            text = mm[base + at + NAME.size:base + at + NAME.size + n].decode("utf-8", "replace")
            new[ptr] = text
            at += _align8(NAME.size + n)
        self._names_at = at
        self.name_text.update(new)
        return new

    def close(self) -> None:
        """Unmap (the agent and its region stay in the target)."""
        try:
            self.mm.close()
        except (BufferError, ValueError):
            pass


def open_region(pid: int) -> GpuRegion | None:
    """The agent's region in ``pid``, or None when it has none.

    Raises:
        RegionError: a region by our name that is not ours, or is damaged.
    """
    found = find(pid)
    if found is None:
        return None
    return GpuRegion(pid, found[1])
