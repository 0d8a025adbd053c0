"""Probe prices measured on the target's own calls (issue 12: an honest self-report).

The calibration prices each probe kind on a C loop. A probe can cost a real program more:
on the phased trainer an entry probe on a ~20 us simulator call took 7.6 us a call against
the 2-5 us charged, and that difference stayed in Python's share. The kernel counts the
CPU-clock ticks that find a target thread handling a probe's trap (the breakpoint, the
instruction stepped out of line, the return trampoline, the BPF program), per probe part,
with that part's hits (bpf_program.c ``trap_tick``). A part with enough ticks is priced at
ticks x ns per tick / hits; the loader writes the price to the kernel, which charges it
from then on, and the budget prices the probe with it.
"""

from __future__ import annotations

import dataclasses

MIN_TRAP_TICKS = 20         # a part's ticks before its measured price replaces the calibrated one
HALF_LIFE_S = 60.0          # older ticks and hits weigh less: the machine's load changes a trap's cost


@dataclasses.dataclass
class Part:
    """Decayed hits of one probe part, and its trap ticks before and after its timestamp."""

    hits: float = 0.0
    ticks: list = dataclasses.field(default_factory=lambda: [0.0, 0.0])


class ProbePrices:
    """Measured ns per hit of each probe part (part slot: probe id * 2, + 1 for its exit
    fields), before and after its timestamp (tick slot: part slot * 2, + 1 after)."""

    def __init__(self) -> None:
        self.parts: dict[int, Part] = {}
        self._prev: tuple[dict, dict, int] | None = None
        self.ns_per_tick = 0.0
        self.trap_ticks = 0         # all trap ticks so far (named or not)
        self.last: dict[int, tuple[float, float]] = {}   # the prices the last reprice() read
        self._t = 0.0

    def update(self, hits: dict[int, int], ticks: dict[int, int], unnamed: int, ns_per_tick: float,
               now: float) -> None:
        """Fold in the kernel's cumulative counters.

        Args:
            hits: per part slot, hits so far.
            ticks: per tick slot (part slot * 2, + 1 after its timestamp), trap ticks so far.
            unnamed: trap ticks no part could be named for so far; they are shared among the
                parts in proportion to their own ticks in this stretch.
            ns_per_tick: on-CPU ns a tick stands for (the target threads' on-CPU ns / ticks).
            now: seconds (monotonic).
        """
        ph, pt, pu = self._prev or ({}, {}, 0)
        dh = {k: max(0, v - ph.get(k, 0)) for k, v in hits.items()}
        dt = {k: max(0, v - pt.get(k, 0)) for k, v in ticks.items()}
        du = max(0, unnamed - pu)
        self._prev = (dict(hits), dict(ticks), unnamed)
        named = sum(dt.values())
        spread = 1.0 + du / named if named else 1.0
        f = 0.5 ** ((now - self._t) / HALF_LIFE_S) if self._t else 1.0
        self._t = now
        for p in self.parts.values():
            p.hits, p.ticks = p.hits * f, [t * f for t in p.ticks]
        for slot, h in dh.items():
            t = [dt.get(2 * slot, 0), dt.get(2 * slot + 1, 0)]
            if h or any(t):
                p = self.parts.setdefault(slot, Part())
                p.hits += h
                p.ticks = [a + b * spread for a, b in zip(p.ticks, t)]
        self.trap_ticks += named + du
        if ns_per_tick > 0:
            self.ns_per_tick = ns_per_tick

    def price(self, slot: int, calibrated_ns: float = 0.0) -> tuple[float, float] | None:
        """Measured (before, after) ns per hit of a part, or None while its ticks cannot say:
        fewer than MIN_TRAP_TICKS seen, and fewer expected at the calibrated price (a cheap
        part with many hits and few ticks is measured too: the calibration would have it trap
        more often than it does)."""
        p = self.parts.get(slot)
        if p is None or p.hits <= 0 or self.ns_per_tick <= 0:
            return None
        expected = p.hits * calibrated_ns / self.ns_per_tick
        if max(sum(p.ticks), expected) < MIN_TRAP_TICKS:
            return None
        return p.ticks[0] * self.ns_per_tick / p.hits, p.ticks[1] * self.ns_per_tick / p.hits

    def prices(self, calibrated=lambda slot: 0.0) -> dict[int, tuple[float, float]]:
        """Every part that has a measured price (``calibrated``: a part's calibrated ns per hit)."""
        out = {}
        for slot in self.parts:
            ns = self.price(slot, calibrated(slot))
            if ns is not None:
                out[slot] = ns
        return out


PERIOD_S = 1.0              # how often the collector reads the trap counters and reprices


def ns_per_tick(rows: list[dict]) -> float:
    """On-CPU ns per CPU-clock tick of the target's threads (counter records' rows)."""
    on = sum(sum(x[0] for x in r["ns"]) for r in rows if r.get("ticks"))
    ticks = sum(sum(r["ticks"]) for r in rows if r.get("ticks"))
    return on / ticks if ticks else 0.0


def reprice(prices: ProbePrices, probes, rows: list[dict], now: float) -> int:
    """Read the kernel's trap counters and raise the prices they show too low (and split a
    lone enter or exit probe's price where they show it lands).

    Args:
        prices: the session's measurements.
        probes: the ProbeSet (trap_counts, calibrated_part_ns, reprice).
        rows: the latest counters record's thread rows.
        now: seconds (monotonic).

    Returns:
        How many probes were repriced.
    """
    hits, ticks, unnamed = probes.trap_counts()
    prices.update(hits, ticks, unnamed, ns_per_tick(rows), now)
    prices.last = prices.prices(probes.calibrated_part_ns)
    return probes.reprice(prices.last)
