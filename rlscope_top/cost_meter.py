"""What the session costs the target, measured from outside the probes (issue 12: an honest
self-report).

Two costs the calibrated per-hit figures do not see:
- kernel time the target's threads spend beyond what the calibration explains (uprobe traps
  in a large program, text patching when re-timing windows attach and detach probes): the
  target's system time since attach, less its rate before attach (measured while the BPF
  program compiles);
- the monitor's own CPU on a machine with no idle core: it is taken from the job. Measured
  as the monitor process's CPU less the machine's idle CPU over the same stretch.
The stack sampler (austin, a child process) is counted apart (`sampler`).
"""

from __future__ import annotations

import time

import psutil

MIN_BASELINE_S = 0.5     # a shorter pre-attach stretch gives no usable system-time rate


class CostMeter:
    """Cumulative readings since ``begin()``: the target's system time and its pre-attach
    rate, the monitor's CPU time, and the machine's idle CPU time."""

    def __init__(self, pid: int):
        self.pid = pid
        self._proc = _process(pid)
        self._pre: tuple[float, float] | None = None
        self._start: tuple[float, float, float] | None = None
        self.base_sys_per_s: float | None = None
        self._last: dict | None = None

    def before_attach(self) -> None:
        """Note the target's system time before any probe is in."""
        sys_s = self._target_sys()
        if sys_s is not None:
            self._pre = (time.monotonic(), sys_s)

    def begin(self) -> None:
        """Start the session's readings (at t0, probes attached)."""
        now, sys_s = time.monotonic(), self._target_sys()
        if self._pre is not None and sys_s is not None and now - self._pre[0] >= MIN_BASELINE_S:
            self.base_sys_per_s = max(0.0, (sys_s - self._pre[1]) / (now - self._pre[0]))
        self._start = (sys_s if sys_s is not None else 0.0, time.process_time(), _idle_s())

    def read(self) -> dict | None:
        """{target_sys_s, base_sys_per_s, monitor_cpu_s, idle_cpu_s} since begin(), or None
        before it. A target that is gone keeps its last reading."""
        if self._start is None:
            return None
        sys_s = self._target_sys()
        if sys_s is None:
            return self._last
        s0, m0, i0 = self._start
        self._last = {"target_sys_s": round(max(0.0, sys_s - s0), 4), "base_sys_per_s": self.base_sys_per_s,
                      "monitor_cpu_s": round(time.process_time() - m0, 4), "idle_cpu_s": round(_idle_s() - i0, 4)}
        return self._last

    def _target_sys(self) -> float | None:
        try:
            return self._proc.cpu_times().system if self._proc is not None else None
        except (psutil.Error, OSError):
            return None


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except (psutil.Error, OSError):
        return None


def _idle_s() -> float:
    """The machine's idle CPU time, all CPUs (idle + iowait: a waiting CPU runs nothing)."""
    c = psutil.cpu_times()
    return c.idle + getattr(c, "iowait", 0.0)
