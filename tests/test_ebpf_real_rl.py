"""Real RL programs from the registry, attached as a user would (issue 12, item 7): tianshou
2.0.1 DQN and rl-zoo3 2.9.2 (SB3) PPO on CartPole, run unchanged, a CleanRL-style
single-file PPO, torchrl 0.14.1's PPO tutorial and skrl 2.1.1's PPO on CartPole; default settings.

The claims that must hold on any program: no impossible values (the same invariants as the
property test), the categories add up, the Python training thread is found and classed as
Python, torch is probed, gymnasium's step is found as `simulation`, and the target is still
training after the monitor leaves. One known answer: the Simulator share against the time the
program spends in its outermost environment step or reset, timed in the program by the
shim (bench/workloads/count_steps.py) over the unattached stretches either side. envpool's
native threads are in test_ebpf_envpool.py.

Readiness is the program's own progress (CartPole steps counted into a shared file by
bench/workloads/count_steps.py), never a sleep; the session lasts a number of steps, so a
busy machine makes it longer, not emptier.
"""

from __future__ import annotations

import math
import sys
import time

import pytest

from support import REPO, load_summary, require_modules, stop
from invariants import check_summary

sys.path.insert(0, str(REPO / "bench"))
from real_rl import PROGRAMS, Steps, _shares  # noqa: E402  (the bench's programs, step-counter reader, shares)

pytestmark = pytest.mark.ebpf

WORKLOADS = REPO / "bench" / "workloads"
WARM_STEPS = 2003          # past start-up (imports, replay warm-up) before attaching
SESSION_STEPS = 3001       # CartPole steps the program makes while attached
MIN_SESSION_S = 4.0        # and at least this long, so the stack sampler names operations
TRUTH_S = 2.0              # unattached seconds either side of the session, for the Simulator truth
# Simulator's share against the in-program truth: default mode read 0.2-1.6 pp low over 15
# sessions of 10 s (docs/accuracy.md, "Real RL programs: a known answer for Simulator"); a short
# session adds the samples' own error, three binomial standard deviations of the share.
SIM_BIAS_PP = 1.5
# torchrl's simulation operation reads high against its step's clock: +1.2 to +3.0 pp over 3 runs
# on 2026-12-05, +1.7 to +7.5 pp over 5 on 2026-12-08 (two of them a clean-clone CI run's, which
# failed at 1.5); cause not found (docs/accuracy.md, "torchrl's PPO, tried as a new user")
OP_BIAS_PP = {"torchrl": 4.0}
OP_TRUTH = ("torchrl", "skrl")    # programs whose truth is the simulation operation's share (below)


@pytest.fixture
def rl_installed():
    """tianshou, rl-zoo3, torchrl and skrl (the `test` extra)."""
    require_modules(("tianshou", "rl_zoo3", "torchrl", "skrl"), "RLSCOPE_REQUIRE_RL", "test")


def _wait_steps(steps: Steps, n: int, proc, timeout: float = 240.0) -> None:
    """Until the program has made ``n`` CartPole steps (and is still running)."""
    end = time.monotonic() + timeout
    while steps.now() < n:
        assert proc.p.poll() is None, f"the program exited ({proc.p.returncode}): {proc.stderr_text[-2000:]}"
        assert time.monotonic() < end, f"only {steps.now()} of {n} steps in {timeout:.0f} s"
        time.sleep(0.05)


def _start(spawn, tmp_path, key: str):
    steps = Steps(str(tmp_path / "steps"))
    steps.stop.set()                    # only now() is needed here, not the bench's rate samples
    argv = [sys.executable, str(WORKLOADS / "count_steps.py"), str(tmp_path / "steps"), *PROGRAMS[key][1]]
    proc = spawn(argv, cwd=str(tmp_path))
    _wait_steps(steps, WARM_STEPS, proc)
    return proc, steps


def _sim_share(steps: Steps, proc) -> float:
    """The share of TRUTH_S unattached seconds spent in the outermost env step/reset, %."""
    t0, v0 = time.monotonic_ns(), steps.sim_ns()
    _wait_steps(steps, steps.now() + 1, proc)
    time.sleep(TRUTH_S)
    return 100 * (steps.sim_ns() - v0) / (time.monotonic_ns() - t0)


def _attached_session(monitor, proc, steps) -> dict:
    before = _sim_share(steps, proc)
    m, summary = monitor(proc.pid)
    t0, n0 = time.monotonic(), steps.now()
    _wait_steps(steps, n0 + SESSION_STEPS, proc)
    while time.monotonic() - t0 < MIN_SESSION_S:
        _wait_steps(steps, steps.now() + 1, proc)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    s["sim_truth_pct"] = (before + _sim_share(steps, proc)) / 2
    return s


def _workers_simulate(s: dict, pid: int) -> None:
    """Issue 13: the 4 SubprocVecEnv workers (forkserver's children) are followed with no
    option, and their simulation time (gymnasium's step, sampled in each worker) appears."""
    procs = {p["pid"]: p for p in s["processes"]}
    workers = [p for p in procs.values() if p["ppid"] in procs and p["pid"] != pid and p["ppid"] != pid]
    assert len(workers) == 4, [(p["pid"], p["ppid"], p["role"], p["command"][:60]) for p in procs.values()]
    with_sim = [p for p in workers if (p["totals"]["simulator_s"] or 0) > 0]
    assert len(with_sim) >= 3 and all(p["role"] == "env worker" for p in with_sim), workers
    assert procs[pid]["role"] == "main"


@pytest.mark.quiet
@pytest.mark.parametrize("key", sorted(PROGRAMS))
def test_real_rl_program_gets_sane_bounded_numbers(ebpf, rl_installed, spawn, monitor, tmp_path, key):
    """Quiet: the simulation share's truth is the program's own clock on this machine and its
    bound is ~3 binomial sigma of the samples, which are not independent (phases last longer
    than a sample period); a clean-clone CI run on the AMD EPYC VM read cleanrl 8.3% against
    13.2% with a 4.7 pp bound (2026-12-03), the two runs before it passed."""
    proc, steps = _start(spawn, tmp_path, key)
    s = _attached_session(monitor, proc, steps)

    check_summary(s)                                    # no negatives, categories add up, n/a is None
    t = s["totals"]
    main = next(r for r in s["threads"] if r["tid"] == proc.pid)
    assert main["python_thread"] and main["python_s"] > 0, main
    assert t["wall_s"] > 0 and (t["python_s"] is None or 0 < t["python_s"] <= t["on_cpu_s"] + t["off_cpu_s"])
    assert s["calls"]["backend"] > 0 or s["budget"]["modes"].get("backend") == "off", s["calls"]
    assert "torch" in s["probes"]["attached"], s["probes"]["attached"].keys()
    sim = s["operations"].get("simulation")
    assert sim and sim["source"] == "sampled" and sim["samples"] > 0 and sim["wall_s"] > 0, s["operations"].keys()
    assert 0 < sim["share"] < 1, sim
    assert s["totals"]["simulator_s"] > 0               # Python inside gymnasium's step counts as Simulator
    assert s["overhead"]["estimated_pct"] is not None and s["overhead"]["estimated_pct"] >= 0
    if key == "zoo_subproc":       # the job's Simulator also holds the workers' steps: no single truth
        _workers_simulate(s, proc.pid)
    else:
        # torchrl's and skrl's env steps make tensors (torch calls: Backend by the rules), so there the
        # truth, the whole step, is the operation's share, not the Simulator category's
        ours = 100 * sim["share"] if key in OP_TRUTH else _shares(s)["simulator"]
        truth = s["sim_truth_pct"]
        print(f"{key}: simulation {ours:.1f}% against {truth:.1f}% (Simulator {_shares(s)['simulator']:.1f}%)")
        n = max(1, s["sampler"]["samples"])
        tolerance = OP_BIAS_PP.get(key, SIM_BIAS_PP) + 300 * math.sqrt(truth / 100 * (1 - truth / 100) / n)
        assert abs(ours - truth) <= tolerance, (ours, truth, tolerance, n)

    n = steps.now()                                     # the monitor left; the program trains on
    _wait_steps(steps, n + 101, proc)
