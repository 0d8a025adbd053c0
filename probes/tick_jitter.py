"""Random periods for the CPU-clock tick, so that it samples a paced loop at all its phases.

The tick is a perf event per CPU whose hrtimer fires every 4 ms exactly. A loop that keeps
time meets it at the same phase every time: a 1 kHz control loop does four cycles a tick, and
a loop whose time-based wait (a simulator spinning until a deadline, a GPU wait) absorbs the
tick's own cost while its fixed work does not locks onto it. Its ticks then all fall in one
part of the cycle: the known-split loop's thread read 96.5% Backend or 99.9% Simulator where
it runs 10% and 64% (docs/accuracy.md, "A tick in step with the loop").

No BPF helper sets a perf event's period, so a thread here draws a new one for every CPU's
event every ``EVERY_S``. The kernel restarts the timer from the moment it is set
(``__perf_event_period``), so each draw also starts the ticks at a new phase.
"""

from __future__ import annotations

import fcntl
import random
import struct
import threading

PERF_EVENT_IOC_PERIOD = 0x40082404   # _IOW('$', 4, __u64)
SPREAD = 0.2          # each period drawn from [0.8, 1.2] x the mean
EVERY_S = 0.05        # a draw every 50 ms: re-drawn every 100 ms already read within 1 pp


class TickJitter:
    """Re-draws the period of the tick's per-CPU perf events until stopped."""

    def __init__(self, fds: list[int], mean_ns: int, every_s: float = EVERY_S):
        """
        Args:
            fds: the perf event file descriptors, one per CPU.
            mean_ns: the mean period.
            every_s: how often a new period is drawn.
        """
        self.fds, self.mean_ns, self.every_s = list(fds), mean_ns, every_s
        self.error: str | None = None      # why it stopped on its own (the periods then stay as they were)
        self.draws = 0
        self._rng = random.Random()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlscope-tick-jitter", daemon=True)

    def start(self) -> bool:
        """Set a first period now and keep drawing in a thread. Returns False (and says why in
        ``error``) where the kernel refuses the period."""
        if not self.draw():
            return False
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop drawing; returns once no ioctl can still run (before the fds close)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def draw(self) -> bool:
        """Give every CPU's event a new random period. Returns False once one is refused."""
        for fd in self.fds:
            ns = int(self.mean_ns * self._rng.uniform(1 - SPREAD, 1 + SPREAD))
            try:
                fcntl.ioctl(fd, PERF_EVENT_IOC_PERIOD, struct.pack("Q", ns))
            except OSError as e:
                self.error = f"the tick's period cannot be set ({e.strerror or e})"
                return False
        self.draws += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            if not self.draw():
                return
