"""The austin sampler's process under SCHED_DEADLINE: samples on time, with a hard CPU cap.

austin sleeps between samples. On a machine with every core busy, a woken austin under the
normal scheduler waits up to a slice (~3 ms) for a core, and it waits most while the target
itself runs: samples due in a short compute phase were taken in the wait after it. On the
2-core VM with one busy loop, austin's own samples read a wait loop's 3.7 ms compute phase
26-28% against a true 30.4% (nice -10 the same; SCHED_FIFO and SCHED_DEADLINE 30.1-30.5%).
SCHED_DEADLINE is chosen over SCHED_FIFO for its cap: RUNTIME_NS of CPU in each PERIOD_NS
at most (10% of a core), whatever austin does.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

SCHED_DEADLINE = 6
SCHED_FLAG_RESET_ON_FORK = 0x01
RUNTIME_NS = 1_000_000
PERIOD_NS = 10_000_000
_SYSCALL = {"x86_64": 314, "aarch64": 274}       # sched_setattr


class _Attr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]


def _setattr(pid: int) -> int:
    """sched_setattr(pid, SCHED_DEADLINE); 0 or the errno."""
    attr = _Attr(size=ctypes.sizeof(_Attr), policy=SCHED_DEADLINE, flags=SCHED_FLAG_RESET_ON_FORK,
                 runtime=RUNTIME_NS, deadline=PERIOD_NS, period=PERIOD_NS)
    libc = ctypes.CDLL(None, use_errno=True)
    return 0 if libc.syscall(_SYSCALL[platform.machine()], pid, ctypes.byref(attr), 0) == 0 else ctypes.get_errno()


def prompt(pid: int) -> str | None:
    """Put process ``pid`` (one thread) under SCHED_DEADLINE.

    A deadline task's CPU mask must span its root domain: a mask the monitor's niced start
    narrowed (start_cpus.py) is widened to every online CPU first.

    Returns:
        None when done, else why not, as a few words.
    """
    if platform.machine() not in _SYSCALL:
        return f"no sched_setattr number for {platform.machine()}"
    err = _setattr(pid)
    if err in (errno.EPERM, errno.EBUSY):
        try:
            os.sched_setaffinity(pid, range(os.cpu_count() or 1))
        except OSError:
            pass
        err = _setattr(pid)
    return None if err == 0 else f"SCHED_DEADLINE refused: {os.strerror(err)}"
