"""A job that churns child processes: the monitor lets go of each child as it exits, in the
kernel and in itself (its /proc/PID/mem reader, its code objects), so every child is counted,
the last one is still sampled, and no file of a gone process stays open. Before, each child
kept an open file in the monitor and its entries in the kernel's tables (256 processes), and
past that children were neither followed nor sampled; and every exited process stayed in each
counters record, until one was too large for the ring and the session ended without a summary."""

from __future__ import annotations

import json
import re
import signal

import pytest

from support import load_summary, open_fds

CHURN = 307          # children, 16 at a time, each long enough to be sampled
BURST = 1009         # then from 3 processes side by side, ~1.7k a second here
FORKERS = 3          # fork_churn.py's
WORK_S = 1.5
MEM_FD = re.compile(r"^/proc/\d+/mem$")


def _mem_fds(pid: int) -> list[str]:
    """The /proc/PID/mem files a process holds open (the sampler's interpreter readers)."""
    return [link for link in open_fds(pid).values() if MEM_FD.match(link)]


@pytest.mark.quiet
def test_churned_children_are_let_go_and_the_next_one_is_sampled(ebpf, target, monitor, tmp_path):
    """Needs a quiet machine for its last check (the final child's work to 25 ms, one sample
    period at each end): a clean-clone CI run on a slow hour read it 28 ms short."""
    start, truth = tmp_path / "start", tmp_path / "truth.json"
    t = target("fork_churn.py", start, truth, CHURN, WORK_S, BURST)
    m, summary = monitor(t.pid, "--duration", "30", "--op", "childwork=child_work", "--max-overhead", "100")
    start.touch()
    print(t.wait_line("burst", timeout=60))
    final = int(t.wait_line("final", timeout=120).split()[1])
    t.wait_line("done", timeout=60)
    held = _mem_fds(m.pid)
    m.finish(signal.SIGINT, timeout=120)
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    want = json.loads(truth.read_text())
    want_s = (want["t1"] - want["t0"]) / 1e9
    procs = {p["pid"]: p for p in s["processes"]}
    got = procs[final]["operations"].get("childwork", 0.0)
    print(f"{len(procs)} processes; final child's work sampled {got:.3f} s, truth {want_s:.3f} s; "
          f"monitor holds {len(held)} /proc/*/mem files")
    # the newest 256 exited processes apart, the older ones added together in one entry
    folded = procs.pop(1 << 30)
    assert len(procs) == 1 + 256, len(procs)            # the parent, live; every child has exited
    assert len(procs) + folded["folded"] == 1 + CHURN + FORKERS + BURST // FORKERS * FORKERS + 1, folded
    assert folded["exited"] and folded["totals"]["python_s"] > 0, folded
    for k in ("python_s", "on_cpu_s", "off_cpu_s"):      # folding moves figures, never loses them
        whole = sum(p["totals"][k] or 0 for p in [*procs.values(), folded])
        assert abs(whole - (s["totals"][k] or 0)) < 1e-3, (k, whole, s["totals"][k])
    # the parent's and the final child's readers at most (one per churned child before)
    assert len(held) <= 3, held
    # a boundary is known to one sample period (10 ms) at each end
    assert abs(got - want_s) <= 0.025, (got, want_s, s["sampler"], s["notes"])
    assert s["sampler"]["tool"] == "kernel", s["sampler"]
