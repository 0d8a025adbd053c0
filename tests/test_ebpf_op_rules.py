"""Issue 4 on real eBPF: user rules on a hand-written loop; a target the sampler cannot read."""

from __future__ import annotations

import json
import signal

import psutil
import pytest

from support import load_summary, wait_until

pytestmark = pytest.mark.ebpf


def _truth_shares(items: list, window: dict) -> dict:
    t0, t1 = window["t0_monotonic_ns"], window["t1_monotonic_ns"]
    out: dict[str, float] = {}
    for kind, a, b in items:
        a, b = max(a, t0), min(b, t1)
        if b > a:
            out[kind] = out.get(kind, 0) + (b - a) / (t1 - t0)
    return out


def test_custom_rules_on_a_hand_written_loop(ebpf, target, monitor, tmp_path, simlib):
    truth = tmp_path / "truth.json"
    t = target("custom_loop.py", simlib, truth)
    m, summary = monitor(t.pid, "--duration", "8", "--sim-lib", f"{simlib}:sim_step",
                         "--op", "rollout=collect_batch", "--op", "update=*/custom_loop.py:update_model",
                         "--max-overhead", "100")
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    want = _truth_shares(json.loads(truth.read_text()), s["window"])
    ops = s["operations"]
    for n in ("rollout", "update"):
        assert ops[n]["source"] == "sampled"
        assert abs(ops[n]["share"] - want[n]) <= 0.05, (n, ops[n]["share"], want)
    # the probes' exact counts land in their operation, but a sampled boundary is known only
    # to about one sample period (10 ms here, against ~50-60 ms phases)
    pb = s["transitions"]["python->backend"]
    ps = s["transitions"]["python->simulator"]
    # (76-90% measured; 2 of 7 full-suite runs on 2026-11-23 had 76% and 78% for update)
    assert ops["update"]["transitions"]["python->backend"] >= 0.7 * pb > 0
    assert ops["rollout"]["transitions"]["python->simulator"] >= 0.7 * ps > 0
    assert ops["rollout"]["shares"]["simulator"] > 0.5 and ops["update"]["shares"]["backend"] > 0.5


def test_target_the_sampler_cannot_read_keeps_the_categories(ebpf, spawn, monitor, tmp_path):
    t = spawn(["sleep", "60"])               # not a CPython process
    m, summary = monitor(t.pid, "--duration", "2")
    assert m.finish(timeout=60) == 0, m.stderr_text
    s = load_summary(summary)
    notes = [n for n in s["notes"] if n.startswith("operations unavailable")]
    assert len(notes) == 1 and "\n" not in notes[0], s["notes"]
    # counted, as native time: it never runs Python (its wait is not Python time)
    assert s["totals"]["python_s"] == 0 and not s["processes"][0]["python"], (s["totals"], s["processes"])
    row = next(th for th in s["threads"] if th["tid"] == t.pid)
    assert row["category"] == "native" and row["off_cpu_s"] > 1.0, row
    assert set(s["operations"]) == {"<all>"}


def _austin_args(pid: int) -> list[list[str]]:
    """The command lines of the austin processes sampling PID."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cl = p.info["cmdline"] or []
        if any("austin" in a for a in cl) and str(pid) in cl:
            out.append(cl)
    return out


def test_austin_follows_a_child_forked_after_attach(ebpf, target, monitor, tmp_path):
    """austin -C (children) costs ~1.4% of a core at any rate, so the sampler starts without
    it and turns it on when the target forks: the child's operation is still sampled."""
    start, truth = tmp_path / "start", tmp_path / "truth.json"
    t = target("late_child.py", start, truth, 3.0)
    m, summary = monitor(t.pid, "--duration", "7", "--op", "childwork=child_work", "--max-overhead", "100",
                         "--sampler", "austin")
    wait_until(lambda: _austin_args(t.pid), timeout=30)
    assert all("-C" not in a for a in _austin_args(t.pid)), _austin_args(t.pid)
    start.touch()
    child = int(t.wait_line("child").split()[1])
    wait_until(lambda: any("-C" in a for a in _austin_args(t.pid)), timeout=10)
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    want = json.loads(truth.read_text())
    want_s = (want["t1"] - want["t0"]) / 1e9
    got = {p["pid"]: p for p in s["processes"]}[child]["operations"].get("childwork", 0.0)
    print(f"child work sampled {got:.3f} s, truth {want_s:.3f} s")
    # up to ~1 s of the child's start goes by before austin follows it (a tick, a restart)
    assert want_s - 1.2 <= got <= want_s + 0.1, (got, want_s, s["sampler"], s["notes"])
    assert s["operations"]["childwork"]["source"] == "sampled"


def test_a_new_operation_after_queued_samples_is_taken_at_once(ebpf, target, monitor, tmp_path):
    """Samples the kernel names itself wake the reader at most every 50 ms; one it cannot name
    (a function never seen) forces a wakeup. With the ring's default wakeup it waited behind
    the queued ones for the reader's poll: each new operation began up to 50 ms late (a
    spawned child's 3 s read 2.96-2.97 s under load). Seven new functions here."""
    go, truth = tmp_path / "go", tmp_path / "truth.json"
    t = target("new_ops.py", go, truth)
    m, summary = monitor(t.pid, "--duration", "6", "--op", "bwork=b_work_*")
    go.touch()
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    spans = json.loads(truth.read_text())
    want = sum(b - a for a, b in spans) / 1e9
    got = s["operations"]["bwork"]["wall_s"]
    print(f"bwork sampled {got:.3f} s, truth {want:.3f} s")
    assert s["sampler"]["tool"] == "kernel", s["sampler"]
    # each of the 14 boundaries is known to one sample period (10 ms); a late start loses ~25 ms
    assert abs(got - want) <= 0.06, (got, want, s["sampler"])


# Read 3.03-3.05 s in half the runs until the collector charged a thread's open wait to the
# kernel's op for it (a blocked sample's, none here), not to the op it last ran in
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_kernel_sampler_follows_a_child_from_its_fork(ebpf, target, monitor, tmp_path, method):
    """The in-kernel sampler gives a forked child its parent's interpreter and thread state at
    the fork (pystack.c: pys_fork): the child's operation is sampled from its first tick, and
    no austin runs. A spawned child (fork, then exec of a new interpreter) is read again at
    its exec, and its main thread found as soon as its interpreter starts."""
    start, truth = tmp_path / "start", tmp_path / "truth.json"
    t = target("late_child.py", start, truth, 3.0, method)
    m, summary = monitor(t.pid, "--duration", "7", "--op", "childwork=child_work", "--max-overhead", "100")
    start.touch()
    child = int(t.wait_line("child").split()[1])
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    want = json.loads(truth.read_text())
    want_s = (want["t1"] - want["t0"]) / 1e9
    got = {p["pid"]: p for p in s["processes"]}[child]["operations"].get("childwork", 0.0)
    print(f"child work sampled {got:.3f} s, truth {want_s:.3f} s")
    assert s["sampler"]["tool"] == "kernel" and not _austin_args(t.pid), s["sampler"]
    # a boundary is known to one sample period (10 ms) at each end
    assert abs(got - want_s) <= 0.025, (got, want_s, s["sampler"], s["notes"])
    assert s["operations"]["childwork"]["source"] == "sampled"


@pytest.mark.quiet
@pytest.mark.parametrize("sampler", ["kernel", "austin"])
def test_time_blocked_in_an_operation_is_that_operation(ebpf, target, monitor, tmp_path, sampler):
    """A main thread blocked ~70% of the time in wait_env (a pipe read): the kernel sampler
    reads the stack as the thread blocks, austin samples wall time; both give each
    operation its time, though the thread is on a CPU only in compute.

    Quiet: the truth is the target's own clock, and the compute phase's length moves with the
    host's speed. austin read compute 5.2-7.3 pp low in CI until it ran under SCHED_DEADLINE
    (probes/sampler_sched.py): on a busy machine it woke late while the target computed
    (with one busy loop here: 3.6-4.6 pp low before, 0.1-0.7 pp after)."""
    truth = tmp_path / "truth.json"
    t = target("wait_loop.py", truth)
    m, summary = monitor(t.pid, "--duration", "6", "--op", "compute=compute", "--op", "wait=wait_env",
                         "--sampler", sampler)
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    want = _truth_shares(json.loads(truth.read_text()), s["window"])
    ops = s["operations"]
    assert s["sampler"]["tool"] == sampler, s["sampler"]
    got = {n: ops[n]["share"] for n in ("compute", "wait")}
    print(sampler, got, want)
    assert want["wait"] > 0.6
    # kernel: wait reads 1-2.4 pp low (its on-CPU edge, the pipe write and read, is sampled as
    # compute by the ticks; 2.7 on a loaded machine); austin within 1.3 pp idle, 4.1 loaded
    bound = {"kernel": 0.04, "austin": 0.05}[sampler]
    assert not [n for n in s["notes"] if "normal scheduler" in n], s["notes"]
    for n in got:
        assert abs(got[n] - want[n]) <= bound, (n, got, want, s["sampler"])


@pytest.mark.quiet
def test_waits_too_many_to_sample_each_go_to_the_operation_they_wait_in(ebpf, target, monitor, tmp_path):
    """~1,250 short waits a second (0.25 ms compute, 0.55 ms blocked, as envpool's recv between
    batched steps): more than the blocked samples' rate limit takes (one per 2.5 ms). A wait
    with no sample of its own goes to the operation its call site's sampled waits named
    (pystack.c site_op), not to the one the ticks last saw. Before, wait read 33-37 pp low
    here, and envpool Hopper's `simulation` 48% against a true 83%."""
    truth = tmp_path / "truth.json"
    t = target("wait_loop.py", truth, "0.25", "0.55")
    m, summary = monitor(t.pid, "--duration", "6", "--op", "compute=compute", "--op", "wait=wait_env")
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    want = _truth_shares(json.loads(truth.read_text()), s["window"])
    got = {n: s["operations"][n]["share"] for n in ("compute", "wait")}
    print(got, want)
    assert s["sampler"]["tool"] == "kernel" and want["wait"] > 0.55, (s["sampler"], want)
    for n in got:
        # the ticks place on-CPU time at 4 ms grain over a 0.8 ms cycle: compute's on-CPU
        # edge in wait_env (the pipe calls) and the reverse blur it by a few pp
        assert abs(got[n] - want[n]) <= 0.06, (n, got, want, s["sampler"])


def test_austin_on_a_launcher_points_at_the_kernel_sampler(ebpf, spawn, monitor, tmp_path):
    """`--sampler austin` cannot read a launcher (`bash train.sh`); the in-kernel sampler reads
    the Python processes it starts, and the note says so."""
    sh = spawn(["bash", "-c", "sleep 60; echo done"])            # two commands: bash stays bash
    m, summary = monitor(sh.pid, "--duration", "2", "--sampler", "austin")
    assert m.finish(timeout=60) == 0, m.stderr_text
    notes = [n for n in load_summary(summary)["notes"] if n.startswith("operations unavailable")]
    assert len(notes) == 1 and "--sampler auto" in notes[0] and "\n" not in notes[0], notes


def _other_cpython() -> str | None:
    """A CPython the in-kernel sampler has no layout for (pyenv's 3.12 or 3.13 here)."""
    import glob
    import os

    for v in ("3.13", "3.12"):
        for exe in sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}*/bin/python{v}"))) + \
                [f"/usr/bin/python{v}", f"/usr/local/bin/python{v}"]:
            if os.access(exe, os.X_OK):
                return exe
    return None


def test_a_cpython_the_kernel_sampler_cannot_read_is_sampled_by_austin(ebpf, spawn, monitor, tmp_path):
    """`--op` on a Python 3.12/3.13 target: auto falls back to austin (it used to take the target
    for a launcher and sample nothing in it), and the shares match the target's own timing.

    12 s at austin's 100 Hz: ~1,200 samples of phases of random length (tests/targets/py_phases.py)
    put collect's SD near 1.3 pp, so 5 pp is ~4 SD. With 6 s (SD ~2 pp with random lengths) or a
    fixed cycle near a divisor of the sample period (SD ~3 pp), CI read 5.6 pp low once."""
    from support import TARGETS

    exe = _other_cpython()
    if exe is None:
        pytest.skip("no CPython other than 3.11 on this machine (pyenv's 3.12 or 3.13)")
    truth = tmp_path / "truth.json"
    t = spawn([exe, str(TARGETS / "py_phases.py"), str(truth)], cwd=str(TARGETS))
    t.wait_line("ready", timeout=60)
    m, summary = monitor(t.pid, "--duration", "12", "--op", "collect=collect", "--op", "update=update")
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    assert "stack sampler: austin (the in-kernel one cannot read" in m.stderr_text, m.stderr_text
    want = _truth_shares(json.loads(truth.read_text()), s["window"])
    print({n: s["operations"][n]["share"] for n in want}, want, s["sampler"])
    for n in ("collect", "update"):
        assert s["operations"][n]["source"] == "sampled"
        assert abs(s["operations"][n]["share"] - want[n]) <= 0.05, (n, s["operations"][n]["share"], want)
