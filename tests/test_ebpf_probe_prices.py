"""Probe costs measured on the target's own calls (rlscope_top/collect/probe_prices.py): the
ticks that find a thread in a probe's trap raise a price the calibration set too low, so the
overhead the tool reports, and takes out of the categories, is what the target paid."""

from __future__ import annotations

import json
import signal
import statistics
import time

import pytest

from rlscope_top.collect.calibration import SCHEMA, machine_key
from support import load_summary

pytestmark = pytest.mark.ebpf
LOW_NS = 50            # every probe kind's calibrated cost: far below any real trap (~1-10 us)


def _low_calibration(path) -> str:
    low = {"outside": LOW_NS, "inside": LOW_NS}
    kinds = {k: dict(low) for k in ("bracket", "bracket_ool", "pair", "pair_ool", "bracket_torch")}
    kinds["sched_switch"] = {"per_switch": 0}
    path.write_text(json.dumps({"schema": SCHEMA, "machines": {machine_key(): {"kinds": kinds, "details": {}}}}))
    return str(path)


def _per_call_us(log: list, keep) -> tuple[float, float]:
    """Medians over the batches ``keep`` accepts of the target's own time per call: sim_work's,
    and its excess over the never-probed twin timed just after it."""
    rows = [((t1 - t0) / n / 1e3, (t1 - t0 - (t2 - t1)) / n / 1e3) for t0, t1, t2, n in log if keep(t0, t2)]
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


@pytest.mark.quiet     # its yardstick is the target's own clock before, during and after
def test_a_too_low_calibration_is_raised_to_what_the_traps_cost(ebpf, target, monitor, tmp_path, simlib):
    log_path = tmp_path / "log.json"
    t = target("trap_cost.py", simlib, log_path)
    time.sleep(2.0)                                     # unprobed batches
    m, summary = monitor(t.pid, "--sim-lib", f"{simlib}:sim_work", "--max-overhead", "100", "--duration", "12",
                         env={"RLSCOPE_CALIBRATION": _low_calibration(tmp_path / "calibration.json")})
    assert m.finish(timeout=90) == 0, m.stderr_text
    time.sleep(1.0)
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    log = json.loads(log_path.read_text())
    w0, w1 = s["window"]["t0_monotonic_ns"], s["window"]["t1_monotonic_ns"]
    half = w0 + (w1 - w0) // 2                          # prices settle in the first seconds
    probed, probed_excess = _per_call_us(log, lambda a, b: a >= half and b <= w1)
    unprobed, unprobed_excess = _per_call_us(log, lambda a, b: b < w0 or a > w1)
    paid = probed_excess - unprobed_excess       # the twin beside each batch takes out the machine's speed
    prices = s["overhead"]["measured_prices"]
    raised = prices["raised"]["sim_work"]
    # the return trap is cheap: in a short session it may not reach its 20 ticks, and then
    # counts at its calibrated price (CI once saw no raise at all when both parts were needed)
    entry, ret = (sum(prices["measured_ns"].get(f"sim_work:{p}", [LOW_NS])) / 1e3 for p in ("enter", "exit"))
    print(f"per call: unprobed {unprobed:.2f} us, probed {probed:.2f} us, paid {paid:.2f} us; measured traps "
          f"entry {entry:.2f} + return {ret:.2f} us; calibrated {2 * LOW_NS / 1e3:.2f} us raised x{raised:.1f}")
    assert paid > 1.0, "the probe pair should cost microseconds a call"
    # The ticks see the kernel's part of a trap, not its cost to the code after it: a lower
    # bound of what the target paid (92-97% of it on this loop, docs/overhead.md). Paid was
    # probed less unprobed per call, 2 s apart: 0.62-1.13x over 8 runs, then 1.45x, 1.55x and
    # 1.95x in CI on a host whose speed moved more than the probe costs (paid 3.3 us where the
    # twin beside each batch now says 7.1-7.4: 0.80-0.99x in 3 runs). The calibration alone
    # would say 0.01-0.02x.
    assert 0.5 * paid <= entry + ret <= 1.4 * paid
    assert raised * 2 * LOW_NS / 1e3 == pytest.approx(entry + ret, rel=0.1)
    assert s["calls"]["simulator"] > 10_000
