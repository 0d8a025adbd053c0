"""A tick repairs a switch-in the books missed (probes/bpf_program.c ``tick_on_cpu``).

On rl-zoo3 PPO a running thread's time was charged as blocked for 0.3-0.8 s at a stretch:
it ticked at 250 Hz with no context switch while the books held it off-CPU, which the
default mode's estimate then gave to Python (docs/accuracy.md, 2026-12-02, stop 60). The
switch-ins go missing where the VM's own agent (PID 1's tokio workers) preempted the thread:
sched_switch never fires for a switch away from those workers (docs/accuracy.md, "Whose
switch-ins go missing"). The known answer here: a thread that only spins is on a CPU whenever
the scheduler does not hold it off (its run time in /proc/PID/schedstat; on a busy machine it
is preempted too). The test puts the kernel's books for it in the off-CPU state 7 times, as a
missed switch-in leaves them; each time the next tick that interrupts it must set them right,
having charged at most one tick period to off-CPU beyond the time it really waited.
"""

from __future__ import annotations

import ctypes as ct
import subprocess
import sys
import time

from rlscope_top.probes import catalog
from rlscope_top.probes.loader import ProbeSet

RUN_OFF = 0
INJECTIONS = 7


def _books(ps: ProbeSet, tid: int):
    return ps.bpf["threads"][ct.c_uint(tid)]


def _on_off(th, now: int) -> tuple[int, int]:
    """The thread's Python on- and off-CPU ns, with the time since its last event charged as
    its state says (as the monitor's record builder does)."""
    on, off = th.ns[0], th.ns[1]
    pending = max(0, now - th.last_ts)
    return (on + pending, off) if th.run != RUN_OFF else (on, off + pending)


def _ran_ns(pid: int) -> int:
    """ns the process's only thread has run on a CPU (/proc/PID/schedstat, the scheduler's clock)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def _switch_out_unseen_in(ps: ProbeSet, tid: int) -> None:
    """The books as a switch-out now leaves them, whose switch-in is never seen."""
    th = _books(ps, tid)
    now = time.monotonic_ns()
    if now > th.last_ts:                          # the time until now, as the books hold it
        th.ns[0 if th.run != RUN_OFF else 1] += now - th.last_ts
    th.last_ts, th.run = now, RUN_OFF
    ps.bpf["threads"][ct.c_uint(tid)] = th


def test_a_tick_sets_right_a_running_thread_the_books_hold_off_cpu(ebpf):
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    ps = None
    try:
        time.sleep(0.3)
        ps = ProbeSet(p.pid, [s for s in catalog.builtin() if s.group == "torch"][:1])
        ps.load()
        ps.start()
        assert ps.tick_hz == 250
        time.sleep(0.3)
        t0, run0 = time.monotonic_ns(), _ran_ns(p.pid)
        on0, off0 = _on_off(_books(ps, p.pid), t0)
        for _ in range(INJECTIONS):
            _switch_out_unseen_in(ps, p.pid)
            time.sleep(0.05)
        t1, run1 = time.monotonic_ns(), _ran_ns(p.pid)
        on1, off1 = _on_off(_books(ps, p.pid), t1)
        fixes = ps.run_fixes()
    finally:
        if ps is not None:
            ps.stop()
        p.kill()
        p.wait()
    span, on, off = t1 - t0, on1 - on0, off1 - off0
    ran = run1 - run0            # the kernel's own figure: on a busy machine the spinner is preempted too
    print(f"span {span / 1e6:.0f} ms: on {on / 1e6:.1f} ms, off {off / 1e6:.1f} ms (ran {ran / 1e6:.1f} ms), "
          f"{fixes} repairs")
    # each one a tick's repair, or a switch's where one came first (or twice: a tick between
    # this test's read of the books and its write back)
    assert fixes >= 1, fixes
    assert ran > 0.3 * span, ("the machine is too busy for the spinner to run", ran, span)
    # at most one tick period (4 ms) off each time beyond the time it really waited; unrepaired,
    # all of the 0.35 s from the first injection on reads off-CPU
    slack = INJECTIONS * 4e6 + 0.02 * span
    assert off < (span - ran) + slack, (on, off, ran, span)
    assert on > ran - slack, (on, off, ran, span)
