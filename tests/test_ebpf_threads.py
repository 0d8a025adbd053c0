"""Every thread counted for what it does (real eBPF, real threads): a native thread the
simulator starts is Simulator, not Python; torch's intra-op pool is seen running in
torch's libraries, and spinning in the OpenMP runtime apart from it; a Python thread sleeping until a worker is done is waiting, not Python;
and time a thread spends waiting for a CPU is told apart from waiting on something."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from support import load_summary

pytestmark = pytest.mark.ebpf


def _session(target, monitor, tmp_path, simlib, mode, seconds, *extra, pin=None, before_go=None):
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("native_threads.py", mode, simlib, go, done, seconds)
    if pin is not None:
        os.sched_setaffinity(t.pid, {pin})
        for tid in os.listdir(f"/proc/{t.pid}/task"):
            os.sched_setaffinity(int(tid), {pin})
    m, summary = monitor(t.pid, "--sim-lib", f"{simlib}:sim_step", *extra)
    if before_go:
        before_go()
    go.touch()
    end = time.monotonic() + 120
    while not done.exists():
        assert time.monotonic() < end, "the target never finished its work"
        time.sleep(0.05)
    assert m.finish(signal.SIGINT) == 0, m.stderr_text
    return load_summary(summary)


def test_a_native_simulator_thread_is_simulator_not_python(ebpf, target, monitor, tmp_path, simlib):
    s = _session(target, monitor, tmp_path, simlib, "sim", 2.0, "--max-overhead", "100")
    (worker,) = [r for r in s["threads"] if r["name"] == "sim-worker"]
    assert worker["python_thread"] is False and worker["python_s"] is None
    assert worker["simulator_s"] > 1.0                   # it stepped the simulator ~2 s, probed exactly
    assert worker["native_s"] is not None and worker["native_s"] < worker["simulator_s"]
    assert worker["category"] == "simulator"            # where the tick found it, too
    assert s["calls"]["simulator"] > 10_000             # its calls count for the job
    assert s["job"]["cpu_s"]["simulator"] > 1.0
    main = next(r for r in s["threads"] if r["python_thread"])
    crit = s["job"]["critical_path"]
    assert crit["waiting_s"] > 1.0 > crit["python_s"]    # the Python thread waited for it, off-CPU
    assert main["python_s"] >= crit["python_s"]


def _user_share(where: dict | None, place: str) -> float:
    user = sum(v for k, v in (where or {}).items() if k not in ("kernel", "probe_trap"))
    return (where or {}).get(place, 0) / user if user else 0.0


def test_torch_intra_op_threads_are_seen_running_in_torch(ebpf, target, monitor, tmp_path, simlib):
    s = _session(target, monitor, tmp_path, simlib, "torch", 3.0, "--max-overhead", "100")
    # in torch for most of its user-space ticks (a worker can spend most of its CPU in the kernel:
    # futex wake-ups between ops; CI once saw 79% kernel, 21% torch)
    # or in its OpenMP runtime: on the 2-vCPU VM these 384x384 matmuls keep both threads ~94% in
    # libgomp (perf), and the tick read the worker 55% there (2026-12-05)
    pool = [r for r in s["threads"] if not r["python_thread"]
            and _user_share(r["where"], "backend") + _user_share(r["where"], "openmp") > 0.5]
    assert pool, [(r["name"], r["where"]) for r in s["threads"]]
    assert all(r["category"] in ("backend", "openmp") and r["python_s"] is None for r in pool)
    cpu = s["job"]["cpu_s"]
    assert cpu["backend"] + cpu["openmp"] > s["totals"]["backend_s"] * 0.5     # the pool's CPU counts too


OMP_TOLERANCE = 0.12   # the worker's ticks: ~750 in 3 s, and it also waits at each matmul's barrier


@pytest.mark.quiet
def test_an_intra_op_worker_spinning_in_openmp_is_not_backend_work(ebpf, target, monitor, tmp_path, simlib):
    """skrl's PPO left torch's libgomp worker spinning on a core all session: 15 s of the job's 23.4 s
    of Backend CPU. Known answer: the target's own share of time in pure Python between matmuls, when
    the worker (libgomp's active wait) can only be spinning. Quiet: the workload's own split needs the
    host's usual speed (truth 0.67-0.68; clean-clone CI runs at stop 68 read 0.586 and 0.605, their
    matmuls slow, so the Python part now lasts at least 2.4x the last matmul)."""
    s = _session(target, monitor, tmp_path, simlib, "omp", 3.0, "--max-overhead", "100")
    truth = float((tmp_path / "done").read_text())
    assert 0.5 + OMP_TOLERANCE < truth < 0.9, truth      # the worker mostly spins
    (worker,) = [r for r in s["threads"] if not r["python_thread"] and (r["on_cpu_s"] or 0) > 1.0]
    spin = _user_share(worker["where"], "openmp")
    print(f"worker: openmp {spin:.3f} of its user ticks against {truth:.3f}; where {worker['where']}")
    assert abs(spin - truth) <= OMP_TOLERANCE, (spin, truth, worker["where"])
    assert worker["category"] == "openmp" and worker["python_s"] is None
    cpu = s["job"]["cpu_s"]
    assert cpu["openmp"] == pytest.approx(worker["on_cpu_s"] * worker["where"]["openmp"], rel=0.05)
    assert cpu["backend"] < s["totals"]["backend_s"] + worker["on_cpu_s"] * (1 - truth + OMP_TOLERANCE)


def test_waiting_for_a_cpu_is_not_waiting_on_the_job(ebpf, target, monitor, tmp_path, simlib):
    hogs = []

    def start_hog():                   # after attach: the compile must not compete with it
        hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        os.sched_setaffinity(hogs[0].pid, {0})

    try:
        s = _session(target, monitor, tmp_path, simlib, "contended", 3.0, pin=0, before_go=start_hog)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    crit = s["job"]["critical_path"]
    wall = sum(v for v in crit.values() if v)
    assert 0.2 < crit["runnable_s"] / wall < 0.8, crit      # shared one CPU with a busy loop: about half
    assert crit["waiting_s"] < 0.2 * wall, crit             # it never blocked


def test_thread_churn_stays_bounded_and_every_call_counts(ebpf, target, monitor, tmp_path, simlib):
    """1009 threads come and go: the exited ones fold into one row, no call is lost."""
    s = _session(target, monitor, tmp_path, simlib, "churn", 0.0, "--max-overhead", "100")
    assert s["calls"]["simulator"] == 1009
    folded = [r for r in s["threads"] if r["tid"] < 0]
    assert 1 <= len(folded) <= 2 and all("exited" in r["name"] for r in folded), [r["name"] for r in s["threads"]]
    assert len(s["threads"]) <= 16 + 2 + 8, len(s["threads"])   # kept + folded + the live ones
    assert sum(r["simulator_s"] or 0 for r in folded) > 0.9 * (1009 - 16) * 20e-6
