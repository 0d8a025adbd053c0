"""What one CPU-clock tick costs the thread it interrupts, beyond the BPF program's own time.

A session keeps a perf-event tick on every CPU (probes/loader.py TICK_HZ) in every mode. The
programs it runs are timed in the kernel (``bookkeeping``); the interrupt around them is not:
its entry and exit, the hrtimer's re-arm (in a VM, a timer write the hypervisor traps) and what
they do to the thread's caches. On the AMD EPYC VM that was ~25 us a tick on an RL-shaped loop,
~0.65% of a busy thread's time at 250 Hz, and the self-report read tianshou's default-mode cost
at 0.64x of its measured slowdown without it (docs/overhead.md, "The tick's own cost").

Measured on a loop pinned to one CPU, its rate per second on a CPU (so that a wait for the CPU
is not read as cost), in windows with a tick of an empty program at HZ on that CPU between
windows without: the cost of a tick is the rate lost over the ticks in the window. The rate
matters: a tick costs more when the ticks are sparse, as the loop's caches have refilled in
between. On the RL-shaped loop a tick cost 18 us at 10 kHz and 25-28 us from 2.5 kHz down to
500 Hz (flat within the noise; 250 Hz itself is under the VM's noise in any window calibrate
can afford).
"""

from __future__ import annotations

import statistics
from typing import Callable

HZ = 2_500             # the sparse ticks' price (above); ~6% of the loop's time, clear of the VM's noise
WINDOW_S = 0.3
PAIRS = 15
PROGRAM = "int on_tick(void *ctx) { return 0; }"


def tick_price(rate: Callable[[float], float], cpu: int, *, hz: int = HZ, pairs: int = PAIRS,
               window_s: float = WINDOW_S, on_attach: Callable | None = None) -> dict:
    """The cost of one tick to the loop on ``cpu``.

    Args:
        rate: runs (or watches) the loop for the given seconds and returns its work per second
            on a CPU.
        cpu: the CPU the loop is pinned to; the tick runs there only.
        hz: the tick's rate while on.
        pairs: on windows, each between two off windows.
        window_s: each window's length.
        on_attach: called with the perf events' fds each time the tick is attached, and with
            None before it is detached (a bench re-draws the period as the monitor does).

    Returns:
        {"per_tick": ns (the median over pairs, >= 0), "q1", "q3": the middle half, "pairs"}.
    """
    from bcc import BPF, PerfSWConfig, PerfType  # noqa: PLC0415 (calibrate and the bench only)

    key = (PerfType.SOFTWARE, PerfSWConfig.CPU_CLOCK)
    bpf = BPF(text=PROGRAM)
    costs = []
    try:
        off_before = rate(window_s)
        for _ in range(pairs):
            bpf.attach_perf_event(ev_type=key[0], ev_config=key[1], fn_name="on_tick",
                                  sample_period=1_000_000_000 // hz, cpu=cpu)
            try:
                if on_attach:
                    on_attach(list(bpf.open_perf_events[key].values()))
                on = rate(window_s)
            finally:
                if on_attach:
                    on_attach(None)
                bpf.detach_perf_event(ev_type=key[0], ev_config=key[1])
            off_after = rate(window_s)
            off = (off_before + off_after) / 2
            costs.append((1 - on / off) / hz * 1e9)   # the share of a CPU second the ticks took, over their count
            off_before = off_after
    finally:
        bpf.cleanup()
    q = statistics.quantiles(costs, n=4) if len(costs) > 1 else [costs[0]] * 3
    return {"per_tick": max(0, round(statistics.median(costs))), "q1": round(q[0]), "q3": round(q[2]),
            "pairs": pairs}
