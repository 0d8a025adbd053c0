"""envpool's statically linked MuJoCo, probed with no --sim-lib (real envpool, real eBPF).

`import envpool` maps five libraries that each carry a copy of MuJoCo; only the one the
env steps (mujoco_gym_envpool.so for HalfCheetah) may take probes. envpool steps MuJoCo
on its own C++ worker threads, so the Simulator time lands on those threads.
"""

from __future__ import annotations

import importlib.util
import os
import time

import pytest

from support import load_summary, stop, wait_file

pytestmark = pytest.mark.ebpf

STEPS = 200


@pytest.fixture
def envpool_installed():
    if importlib.util.find_spec("envpool") is None:
        pytest.skip("envpool not installed (pip install -e '.[test]')")


def _session(target, monitor, tmp_path) -> dict:
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("envpool_mujoco.py", "HalfCheetah-v5", STEPS, go, done)
    m, summary = monitor(t.pid, "--max-overhead", "100")
    m.wait_line("probes for mujoco (mujoco_gym_envpool.so)", stream="stderr", timeout=5)
    go.touch()
    wait_file(done, 60)
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    return load_summary(summary)


def test_envpool_mujoco_counts_as_simulator_without_sim_lib(ebpf, envpool_installed, target, monitor, tmp_path):
    s = _session(target, monitor, tmp_path)
    libs = s["probes"]["attached"]["mujoco"]["libs"]
    assert [os.path.basename(p) for p in libs] == ["mujoco_gym_envpool.so"], libs   # not the four unused copies
    assert s["probes"]["attached"]["mujoco"]["probes"] == 10
    # HalfCheetah: frame_skip 5, 2 envs, no episode ends within STEPS: every mj_step is seen
    assert s["probes"]["hits"]["mj_step"] == 2 * 5 * STEPS
    workers = {r["tid"] for r in s["threads"] if not r["python_thread"]}
    sim = {r["tid"]: r["simulator_s"] for r in s["threads"] if r["simulator_s"] and not r["python_thread"]}
    assert len(sim) == 2 and set(sim) <= workers, s["threads"]     # envpool's two C++ threads run MuJoCo
    # the Python threads' Simulator time is their `simulation` operation's Python time: their
    # rows add up to the totals
    py_sim = sum(r["simulator_s"] or 0 for r in s["threads"] if r["python_thread"])
    assert py_sim == pytest.approx(s["totals"]["simulator_s"], rel=0.02), s["threads"]
    assert all(r["simulator_s"] <= r["on_cpu_s"] + r["off_cpu_s"] for r in s["threads"])
    # totals sum Python threads only (today): their Simulator time is the main thread's
    # time inside envpool's step, named `simulation` by the built-in operation rule
    assert s["totals"]["simulator_s"] > 0
    assert s["operations"]["simulation"]["source"] == "sampled"


def test_envpool_worker_thread_calls_reach_the_totals(ebpf, envpool_installed, target, monitor, tmp_path):
    """Calls are counted over the whole job (the worker threads'), and the worker threads' MuJoCo
    time is in the job's CPU view; the Python thread's wait for them is waiting, not Python."""
    s = _session(target, monitor, tmp_path)
    assert s["calls"]["simulator"] >= 2 * 5 * STEPS
    assert s["job"]["cpu_s"]["simulator"] > 0
    workers = [r for r in s["threads"] if not r["python_thread"]]
    assert workers and all(r["python_s"] is None for r in workers)


def test_envpool_classic_control_threads_count_as_simulator_without_a_probe(ebpf, envpool_installed, target,
                                                                            monitor, tmp_path):
    """envpool's CartPole (classic_control_envpool.so) has no probe set: its worker threads are
    seen running the simulator by the CPU-clock tick (catalog.SIM_ENGINE_LIB), not as native
    time of no category (0.0 s of Simulator before)."""
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("envpool_mujoco.py", "CartPole-v1", 20011, go, done)
    m, summary = monitor(t.pid, "--max-overhead", "100")
    go.touch()
    wait_file(done, 60)
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    assert "mujoco" not in s["probes"]["attached"]
    workers = [r for r in s["threads"] if not r["python_thread"]]
    assert sum(r["on_cpu_s"] > 0.1 for r in workers) >= 2, s["threads"]     # envpool's C++ threads at work
    sim = sum(r["on_cpu_s"] * (r["where"] or {}).get("simulator", 0) for r in workers)
    user = sum(r["on_cpu_s"] * (1 - (r["where"] or {}).get("kernel", 1)) for r in workers)
    # Their kernel share (queue futexes) swings 50-86% with the machine's load; of their
    # user-space ticks, 68-74% of the job's were in envpool's module, the rest in libc.
    assert sim >= 0.5 * user > 0, workers
    assert sum(r["category"] == "simulator" for r in workers if r["on_cpu_s"] > 0.1) >= 2, workers
    # the workers' ticks in the simulator, and the main thread's on-CPU Python inside its
    # `simulation` operation (the built-in envpool rule), which counts as Simulator there too
    moved = (s.get("simulation_split") or {}).get("python_s") or 0.0
    assert sim * 0.95 - 0.01 <= s["job"]["cpu_s"]["simulator"] <= sim * 1.05 + moved + 0.01, (s["job"], workers, moved)
