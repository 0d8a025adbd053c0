"""Which CPUs an attach's start-up work may use without taking one from the target.

Niced (start_priority.py), the start-up work still runs on whichever core the scheduler
gives it, and half the time that is the target's: on issue 16's busy 2-core VM (the
target on one core, a neighbour's loop on the other) the target ran 1.098x slower while
attaching, against 1.043x in the steady state, with the monitor using only 0.19 s of CPU.
Kept off the cores the target's running tasks are on, that CPU comes from the other
task on the core, or from an idle one.
"""

from __future__ import annotations

import os


def running_cpus(pid: int) -> set[int]:
    """The CPUs the running (state R) tasks of a process and of its descendants are on."""
    from ..probes.maps import descendants, task_ids  # noqa: PLC0415  (after the start is niced)
    from .target import thread_stat  # noqa: PLC0415

    cpus: set[int] = set()
    for p in (pid, *descendants(pid)):
        for tid in task_ids(p):
            st = thread_stat(p, tid)
            if st is not None and st[0] == "R":
                cpus.add(st[1])
    return cpus


def away_from(pid: int | None, allowed: set[int]) -> set[int] | None:
    """The CPUs of ``allowed`` less those the target runs on, or None where that leaves
    none, takes none away, or the target is not running (``RLSCOPE_START_CPUS=0``: None,
    for bench/attach_cost.py's side by side)."""
    if not pid or os.environ.get("RLSCOPE_START_CPUS") == "0":
        return None
    away = allowed - running_cpus(pid)
    return away if away and away != allowed else None
