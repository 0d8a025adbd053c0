"""Kernel time inside a native call is that call's category when the budget estimates it
from the CPU-clock ticks (probes/bpf_program.c `kernel_site`).

A timed call counts the page faults and syscalls it makes as its own time. The ticks'
estimate did not: every tick that found a Python thread in the kernel was Python's, so a
simulator step that spends most of its time in page faults and munmap read 28.6% Simulator
against a true 90.1% (tests/targets/kernel_in_call.py, ad hoc). A kernel tick now goes to
the category of the user IP it entered from (the faulting store in the simulator's own
code) or, for an IP elsewhere (libc's munmap), to the category its call site's user-space
ticks mostly find, as a user-space tick in libc inside torch.mm is torch's.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from support import TO_999, load_summary, stated_bound_pp
from truth import truth_shares

pytestmark = pytest.mark.ebpf
CATS = ("python", "simulator")


def _run(target, monitor, tmp_path, simlib, *extra) -> tuple[dict, dict]:
    truth_path = tmp_path / "truth.json"
    # ~45% Python; the simulator call is ~2/3 kernel time (48 fresh pages and an munmap)
    t = target("kernel_in_call.py", simlib, truth_path, "--py-iters", "2500")
    time.sleep(0.5)
    m, summary = monitor(t.pid, "--sim-lib", f"{simlib}:sim_fault", "--duration", "6", "--headless", *extra)
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    return s, truth_shares(json.loads(truth_path.read_text()), s["window"])


def _shares(s: dict) -> dict:
    tot = sum(s["totals"][f"{c}_s"] for c in CATS)
    return {c: s["totals"][f"{c}_s"] / tot for c in CATS}


def test_kernel_time_in_an_estimated_call_is_that_calls(ebpf, target, monitor, tmp_path, simlib):
    """Known answer: the target's own clock around each call. The budget (0.5%) turns the
    simulator off, so its time between windows is the ticks' share. Within the stated bound
    taken to 99.9% plus 2 pp (the binding's boundary); before the change, 42 pp low at these
    settings (16.3% against 58.1%, docs/accuracy.md "Kernel ticks")."""
    s, truth = _run(target, monitor, tmp_path, simlib, "--max-overhead", "0.5")
    assert s["budget"]["modes"].get("simulator") in ("off", "count"), s["budget"]
    assert s["sources"]["simulator_s"] == "estimated", s["sources"]
    assert s["sampler"]["tool"] == "kernel" and s["sampler"]["site_ticks"] > 0, s["sampler"]
    ours, bound = _shares(s), stated_bound_pp(s)
    where = next(th["where"] for th in s["threads"] if th["python_thread"])
    print("ours", ours, "truth", truth, "bound", bound, "where", where)
    assert truth["simulator"] > 0.35, truth                  # the workload is what it says
    assert where.get("kernel", 0.0) < 0.1, where             # its kernel ticks were placed
    for c in CATS:
        assert abs(ours[c] - truth[c]) <= (bound * TO_999 + 2) / 100, (c, ours, truth, s["estimates"])


def test_kernel_time_in_a_timed_call_agrees_with_the_estimate(ebpf, target, monitor, tmp_path, simlib):
    """The same program with every call timed: the reference the estimate must match."""
    s, truth = _run(target, monitor, tmp_path, simlib, "--max-overhead", "100")
    assert s["sources"]["simulator_s"] == "exact", s["sources"]
    ours = _shares(s)
    print("ours", ours, "truth", truth)
    for c in CATS:
        assert abs(ours[c] - truth[c]) <= 0.04, (c, ours, truth)
