"""A session that follows a process tree puts its probes into the tree's processes only: a
process outside it that runs the same library keeps its code as loaded (no breakpoint, so no
trap and no cost), while the target's calls are all counted. Before, the tree's links served
every process (pid 0), and another user's torch job paid ~2.6 us a probed call."""

from __future__ import annotations

import json
import time

from support import load_summary, stop, wait_file

N = 1009
US = 50
CODE = 32       # bytes of sim_step read: its entry, and the instruction a probe may skip to


def _code(pid: int, addr: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        return f.read(CODE)


def _start(target, simlib, tmp_path, name: str):
    go, done, truth = (tmp_path / f"{name}.{n}" for n in ("go", "done", "truth"))
    t = target("sim_count.py", simlib, N, US, go, done, truth)
    return t, int(t.wait_line("ready").split()[2], 16), go, done, truth


def _until_changed(pid: int, addr: int, before: bytes, timeout: float = 10.0) -> bytes:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        now = _code(pid, addr)
        if now != before:
            return now
        time.sleep(0.05)
    raise AssertionError(f"no probe went into PID {pid}'s sim_step in {timeout} s")


def test_a_tree_session_leaves_a_process_outside_it_alone(ebpf, target, monitor, simlib, tmp_path):
    t, t_addr, go, done, truth = _start(target, simlib, tmp_path, "target")
    b, b_addr, b_go, b_done, _ = _start(target, simlib, tmp_path, "bystander")
    t_code, b_code = _code(t.pid, t_addr), _code(b.pid, b_addr)
    assert t_code == b_code                         # the same library, as loaded
    m, summary = monitor(t.pid, "--headless", "--sim-lib", f"{simlib}:sim_step", "--max-overhead", "100")
    probed = _until_changed(t.pid, t_addr, t_code)
    assert 0xCC in probed, probed.hex()             # the target's copy has its breakpoint
    assert _code(b.pid, b_addr) == b_code           # the bystander's has none ...
    b_go.touch()
    wait_file(b_done, timeout=120)
    assert _code(b.pid, b_addr) == b_code           # ... not even once it calls the function
    go.touch()
    wait_file(done, timeout=120)
    stop(m)
    s = load_summary(summary)
    assert s["calls"]["simulator"] == N, s["calls"]
    own = json.loads(truth.read_text())["sim_s"]
    assert abs(s["totals"]["simulator_s"] - own) <= 0.1 * own, (s["totals"], own)
