"""Issue 13 (1, 2): the process tree. `rlscope-top PID` counts PID and every process it forked
or spawned, before attach and after, with exact calls per process; `--no-children` counts PID
alone; `--role` names a process."""

from __future__ import annotations

import json
import time

import psutil

import pytest

from support import load_summary, stop, wait_file

N = 1009
US = 200


def _tree(target, simlib, tmp_path, start: str):
    go, done, truth, start_file = (tmp_path / n for n in ("go", "done", "truth", "start"))
    t = target("process_tree.py", simlib, N, US, go, done, truth, start_file, start)
    early = [int(x) for x in t.wait_line("ready").split()[2:]]
    return t, early, go, done, truth, start_file


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    """Until worker 0 has exited (a zombie: its parent never joins it)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.02)
    raise AssertionError(f"worker {pid} never exited")


def _by_pid(s: dict) -> dict:
    return {p["pid"]: p for p in s["processes"]}


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_known_count_over_a_process_tree(ebpf, target, monitor, simlib, tmp_path, start):
    t, early, go, done, truth, start_file = _tree(target, simlib, tmp_path, start)
    m, summary = monitor(t.pid, "--headless", "--sim-lib", f"{simlib}:sim_step", "--max-overhead", "100",
                         "--role", f"{early[1]}=actor")
    start_file.touch()
    late = int(t.wait_line("late ").split()[1])
    go.touch()
    for i in range(3):
        wait_file(tmp_path / f"done.{i}", timeout=120)
    _wait_gone(early[0])
    stop(m)
    s = load_summary(summary)
    procs = _by_pid(s)
    assert {t.pid, *early, late} <= set(procs), s["processes"]
    assert s["calls"]["simulator"] == 3 * N, s["calls"]
    for pid in (*early, late):
        p = procs[pid]
        assert p["calls"]["simulator"] == N, p
        truth_i = json.loads((tmp_path / f"truth.{[*early, late].index(pid)}").read_text())
        assert truth_i["pid"] == pid
        # the simulator time each process measured itself, within 10%
        assert p["totals"]["simulator_s"] == pytest.approx(truth_i["sim_s"], rel=0.10), (p, truth_i)
    assert procs[t.pid]["calls"]["simulator"] == 0 and procs[t.pid]["role"] == "main"
    assert procs[early[1]]["role"] == "actor" and procs[early[1]]["role_source"] == "user"
    assert procs[early[0]]["exited"] and procs[early[0]]["role"] == "env worker"
    if start == "fork":        # a forked worker runs no import: its torch calls are its own
        assert s["transitions"]["python->backend"] == 3 * N, s["transitions"]
        for pid in (*early, late):
            assert procs[pid]["transitions"]["python->backend"] == N
    else:                      # a spawned one imports torch first, after it was forked
        assert procs[late]["transitions"]["python->backend"] >= N
        assert sum(procs[p]["transitions"]["python->backend"] for p in early) == 2 * N


def test_no_children_counts_the_pid_alone(ebpf, target, monitor, simlib, tmp_path):
    t, early, go, done, truth, start_file = _tree(target, simlib, tmp_path, "fork")
    m, summary = monitor(t.pid, "--headless", "--sim-lib", f"{simlib}:sim_step", "--no-children")
    start_file.touch()
    t.wait_line("late ")
    go.touch()
    for i in range(3):
        wait_file(tmp_path / f"done.{i}", timeout=120)
    stop(m)
    s = load_summary(summary)
    assert [p["pid"] for p in s["processes"]] == [t.pid]
    # the parent maps torch but makes no call after attach, and never maps the simulator
    assert s["calls"]["backend"] == 0 and s["calls"]["simulator"] is None, s["calls"]
