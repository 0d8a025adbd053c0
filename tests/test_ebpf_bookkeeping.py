"""The self-report's ``bookkeeping``: the BPF program's own time on the target's context
switches and clock ticks, timed by the program itself (bpf_program.c ``bookkeep``). Known
answer: the kernel's own run-time statistics of the same programs (BPF_ENABLE_STATS, held on an
fd for the test only), on a target whose threads switch ~20k times a second and nothing else
on the machine does."""

from __future__ import annotations

import ctypes
import json
import os

import pytest

from support import load_summary, open_fds, stop, wait_file

pytestmark = pytest.mark.ebpf
ROUNDS = 20011                     # round trips: ~40k switches out of the target's threads
SYS_BPF, BPF_ENABLE_STATS = 321, 32
PROG_TRACEPOINT, PROG_PERF_EVENT = 5, 7    # sched_switch and the tick; the uprobes are priced apart


def _stats_fd() -> int:
    """Turn the kernel's BPF run-time statistics on while the returned fd is open."""
    attr = ctypes.create_string_buffer(8)          # enable_stats.type = BPF_STATS_RUN_TIME (0)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(SYS_BPF, BPF_ENABLE_STATS, attr, 4)
    if fd < 0:
        pytest.fail(f"BPF_ENABLE_STATS: {os.strerror(ctypes.get_errno())}")
    return fd


def _run_time_s(pid: int) -> float:
    """Run time of the process's tracepoint and perf-event programs (their fdinfo)."""
    total = 0
    for fd, link in open_fds(pid).items():
        if "bpf-prog" not in link:
            continue
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if int(info.get("prog_type", -1)) in (PROG_TRACEPOINT, PROG_PERF_EVENT):
            total += int(info.get("run_time_ns", 0))
    return total / 1e9


def test_bookkeeping_is_the_programs_own_time_on_the_targets_switches(ebpf, target, monitor, tmp_path):
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("switch_pingpong.py", go, done, ROUNDS)
    fd = _stats_fd()
    try:
        m, summary = monitor(t.pid)
        before = _run_time_s(m.pid)
        go.touch()
        wait_file(done, 120)
        after = _run_time_s(m.pid)
        assert stop(m) == 0, m.stderr_text
    finally:
        os.close(fd)
    switched = json.loads(done.read_text())["switches"]
    src = load_summary(summary)["overhead"]["by_source_s"]
    assert switched >= ROUNDS, switched                      # most reads blocked: the switches are there
    stats = after - before
    ours = src["bookkeeping"] + src["sampler"]              # the kernel sampler's reads run in the same programs
    assert stats > 0.2e-6 * switched, (stats, switched)     # the programs ran on them
    # ours leaves out each run's entry before its first clock read and other processes' switches
    assert 0.6 * stats <= ours <= 1.1 * stats, (ours, stats, src)
