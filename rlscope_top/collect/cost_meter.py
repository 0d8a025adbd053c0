"""What the session costs the target, measured from outside the probes (issue 12: an honest
self-report).

Two costs the calibrated per-hit figures do not see:
- kernel time the target's threads spend beyond what the calibration explains (uprobe traps
  in a large program, text patching when re-timing windows attach and detach probes): the
  target's system time since attach, less its rate before attach (from the command's start
  until attach: the monitor's imports and the BPF program's load or compile; where that is
  under MIN_BASELINE_S, the target's lifetime average);
- the monitor's own CPU on a machine with no idle core: it is taken from whatever runs there.
  Measured as the monitor process's CPU less the machine's idle CPU over the same stretch; the
  target's part of it is its share of the machine's other busy CPU time.
The stack sampler (austin, a child process) is counted apart (`sampler`).
"""

from __future__ import annotations

import time

import psutil

MIN_BASELINE_S = 0.5     # a pre-attach stretch this long gives the system-time rate alone
# A shorter one (from the cache, ~0.2-0.5 s) sees a clock tick (10 ms) or none; the target's
# lifetime average holds its start-up's system time (a 13 s old torch loop: 0.016-0.025 s/s,
# 0.000 now). The lower of the two is taken: a compute-bound program reads ~0.
MIN_SHORT_S = 0.1
_EARLY: dict[int, tuple[float, float]] = {}    # pid -> (monotonic s, system s) at the command's start


def note_early(pid: int) -> None:
    """Read the target's system time as the command starts, before the monitor's imports: with
    the program from the compile cache, the stretch until attach is then long enough for a
    pre-attach rate (a young program's lifetime average holds its start-up's system time)."""
    try:
        _EARLY[pid] = (time.monotonic(), psutil.Process(pid).cpu_times().system)
    except (psutil.Error, OSError, ValueError):
        pass


class CostMeter:
    """Cumulative readings since ``begin()``: the target's system and total CPU time, its
    pre-attach system-time rate, the monitor's CPU time, and the machine's idle and busy CPU time."""

    def __init__(self, pid: int):
        self._proc = _process(pid)
        self._pre: tuple[float, float] | None = None
        self._start: tuple[float, ...] | None = None   # target sys, target cpu, monitor cpu, idle, busy, steal, all
        self.base_sys_per_s: float | None = None
        # a short stretch with no clock tick in it says only that the rate is low (rl-games'
        # 0.045 s/s read 0 or 0.06 session by session): the figures then bound it by the
        # target's own kernel ticks in the session (session_figures._with_base)
        self.base_read = True
        self.life_sys_per_s: float | None = None
        self._last: dict | None = None

    def before_attach(self) -> None:
        """Note the target's system time before any probe is in."""
        early = _EARLY.pop(self._proc.pid, None) if self._proc is not None else None
        if early is not None:            # once: a later session in this process starts its own stretch
            self._pre = early
            return
        cpu = self._target_cpu()
        if cpu is not None:
            self._pre = (time.monotonic(), cpu[0])

    def probes_in(self) -> None:
        """End the pre-attach stretch: the probes go in now (their first hits, before the
        budget's first step, are not the target's own rate)."""
        now, cpu = time.monotonic(), self._target_cpu()
        if cpu is None:
            return
        span = now - self._pre[0] if self._pre is not None else 0.0
        rate = max(0.0, (cpu[0] - self._pre[1]) / span) if span >= MIN_SHORT_S else None
        life = self._lifetime_sys_rate(cpu[0])
        self.life_sys_per_s = life
        if span >= MIN_BASELINE_S or life is None:
            self.base_sys_per_s = rate
        else:       # a short stretch (the program from the cache) or none: the lower of it and the life
            self.base_sys_per_s = life if rate is None else min(rate, life)
            self.base_read = bool(rate)

    def begin(self) -> None:
        """Start the session's readings (at t0, probes attached)."""
        cpu = self._target_cpu() or (0.0, 0.0)
        self._start = (*cpu, time.process_time(), *_machine_s())

    def read(self) -> dict | None:
        """{target_sys_s, target_cpu_s, base_sys_per_s, base_read, life_sys_per_s, monitor_cpu_s,
        idle_cpu_s, busy_cpu_s, steal_cpu_s, all_cpu_s} since begin(), or None before it. A target that is gone keeps its last reading."""
        if self._start is None:
            return None
        cpu = self._target_cpu()
        if cpu is None:
            return self._last
        s0, c0, m0, i0, b0, st0, a0 = self._start
        idle, busy, steal, whole = _machine_s()
        self._last = {"target_sys_s": round(max(0.0, cpu[0] - s0), 4), "target_cpu_s": round(max(0.0, cpu[1] - c0), 4),
                      "base_sys_per_s": self.base_sys_per_s, "base_read": self.base_read,
                      "life_sys_per_s": self.life_sys_per_s, "monitor_cpu_s": round(time.process_time() - m0, 4),
                      "idle_cpu_s": round(idle - i0, 4), "busy_cpu_s": round(busy - b0, 4),
                      "steal_cpu_s": round(max(0.0, steal - st0), 4), "all_cpu_s": round(max(0.0, whole - a0), 4)}
        return self._last

    def _lifetime_sys_rate(self, sys_s: float) -> float | None:
        """The target's system time per second of its life so far. Its startup (imports, file
        reads) usually makes this higher than the rate now: the extra cost then reads low."""
        try:
            age = time.time() - self._proc.create_time() if self._proc is not None else 0.0
        except (psutil.Error, OSError):
            return None
        return max(0.0, sys_s / age) if age >= MIN_BASELINE_S else None

    def _target_cpu(self) -> tuple[float, float] | None:
        """(system, user + system) seconds of the target, or None when it is gone."""
        try:
            t = self._proc.cpu_times() if self._proc is not None else None
        except (psutil.Error, OSError):
            return None
        return (t.system, t.user + t.system) if t is not None else None


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except (psutil.Error, OSError):
        return None


def _machine_s() -> tuple[float, float, float, float]:
    """The machine's idle, busy, stolen and whole CPU time, all CPUs (iowait is idle: a waiting
    CPU runs nothing; steal: the hypervisor ran another guest on a CPU this VM had work for)."""
    c = psutil.cpu_times()
    idle = c.idle + getattr(c, "iowait", 0.0)
    steal = getattr(c, "steal", 0.0)
    guest = sum(getattr(c, k, 0.0) for k in ("guest", "guest_nice"))     # inside user time already
    whole = sum(c) - guest
    return idle, whole - idle - steal, steal, whole
