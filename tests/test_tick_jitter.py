"""probes/tick_jitter.py without a perf event: what it does where the kernel refuses a period."""

from __future__ import annotations

import os

from rlscope_top.probes.tick_jitter import TickJitter


def test_a_descriptor_that_is_no_perf_event_stops_it_with_a_reason_not_an_exception():
    r, w = os.pipe()
    try:
        j = TickJitter([r], 4_000_000, every_s=0.001)
        assert j.start() is False
        assert "the tick's period cannot be set" in j.error and j.draws == 0
        j.stop()                           # never started: returns at once
    finally:
        os.close(r)
        os.close(w)
