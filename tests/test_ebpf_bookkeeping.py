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


TICK_NS = 10007                    # the price the test sets: a prime, so that no default can match it


def test_the_ticks_interrupts_are_priced_per_tick_that_found_the_target(ebpf, target, monitor, tmp_path, simlib):
    """The self-report's ``tick``: each CPU-clock tick that found one of the target's threads on a
    CPU costs it the calibrated ``tick`` price. Known answer: a thread spinning in Python for 3 s
    takes the tick at its mean rate (250 Hz, the period drawn around 4 ms), so its on-CPU seconds
    x 250 x the price."""
    from rlscope_top.collect import calibration
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"schema": calibration.SCHEMA, "machines": {calibration.machine_key(): {
        "kinds": {"tick": {"per_tick": TICK_NS}}, "measured_at": 0}}}))
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("native_threads.py", "contended", simlib, go, done, 3.0)
    m, summary = monitor(t.pid, env={"RLSCOPE_CALIBRATION": str(cal)})
    go.touch()
    wait_file(done, 60)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    on_cpu = sum(r["on_cpu_s"] or 0.0 for r in s["threads"])
    assert on_cpu > 2.5, s["threads"]
    want = on_cpu * 250 * TICK_NS / 1e9
    tick = s["overhead"]["by_source_s"]["tick"]
    print(f"tick {tick:.5f} s against {want:.5f} s ({on_cpu:.2f} s on a CPU)")
    assert tick == pytest.approx(want, rel=0.08), (tick, want)
    assert s["overhead"]["estimated_s"] == pytest.approx(sum(s["overhead"]["by_source_s"].values()), abs=1e-5)
