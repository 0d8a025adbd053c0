"""The real thing, the way a user runs it: a training process, `rlscope-top PID` in a
tmux pane, watch the screen fill in, press q."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import pytest

from support import REPO

pytestmark = pytest.mark.ebpf


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", "rlscope-test", *args], capture_output=True, text=True).stdout


def _share(screen: str, label: str) -> float:
    m = re.search(rf"{label}\s+[\d.,]+s\s+([\d.]+)%", screen)
    return float(m.group(1)) if m else 0.0


def test_live_screen_in_tmux_on_a_real_training_process(ebpf, spawn, tmp_path):
    if not shutil.which("tmux"):
        pytest.fail("tmux is missing: scripts/setup.sh installs it")
    work = spawn([sys.executable, "-m", "rlscope_top.demo_workload"], cwd=str(tmp_path))
    pid = int(work.wait_line("ready", timeout=120).split()[1])
    summary = tmp_path / "live.json"
    cmd = f"cd {tmp_path} && {REPO}/.venv/bin/rlscope-top {pid} --summary {summary}; echo EXIT=$?; sleep 60"
    if not (REPO / ".venv/bin/rlscope-top").exists():
        cmd = cmd.replace(f"{REPO}/.venv/bin/rlscope-top", f"{sys.executable} -m rlscope_top.cli")
    _tmux("kill-server")
    _tmux("new-session", "-d", "-s", "live", "-x", "120", "-y", "36", cmd)
    try:
        screen, end = "", time.monotonic() + 180      # attach on a loaded machine: no speed assumed
        while time.monotonic() < end:
            screen = _tmux("capture-pane", "-p", "-t", "live")
            if _share(screen, "Python") > 0 and _share(screen, "Backend") > 0 and "collect_rollouts" in screen:
                break
            time.sleep(0.5)
        assert _share(screen, "Python") > 0 and _share(screen, "Backend") > 0, screen
        assert "<all>" in screen and "q Quit" in screen and f"pid {pid}" in screen
        # zero-change operations from the stack sampler's built-in SB3 rules, on screen
        assert re.search(r"collect_rollouts\s+sampled\s+\d+%", screen), screen
        _tmux("send-keys", "-t", "live", "q")
        end = time.monotonic() + 60
        while "EXIT=" not in (screen := _tmux("capture-pane", "-p", "-t", "live")) and time.monotonic() < end:
            time.sleep(0.5)
        assert "EXIT=0" in screen, screen
        assert "rlscope-top summary" in screen and "backend" in screen       # the printed summary
        s = json.loads(summary.read_text())
        assert s["end_reason"] == "quit (q)" and s["totals"]["python_s"] > 0 and s["totals"]["backend_s"] > 0
        assert s["operations"]["collect_rollouts"]["source"] == "sampled"
        assert work.p.poll() is None, "the training process must keep running"
    finally:
        _tmux("kill-server")


@pytest.mark.parametrize("mode", ["attach", "run"])
def test_closing_the_terminal_ends_the_session_with_its_summary(ebpf, spawn, tmp_path, mode):
    """The terminal goes away (an ssh session drops, tmux is killed): SIGHUP ends the session as
    q does, the summary is written, nothing is left behind. attach: the live screen; the
    process watched goes on. run --headless, straight in the pane (the session leader, whom
    alone the kernel tells): the hang-up is passed on to the command, as a shell would."""
    import glob  # noqa: PLC0415

    import psutil  # noqa: PLC0415

    if not shutil.which("tmux"):
        pytest.fail("tmux is missing: scripts/setup.sh installs it")
    summary = tmp_path / "hup.json"
    idle = REPO / "tests/targets/idle.py"
    if mode == "attach":
        work = spawn([sys.executable, str(idle)], cwd=str(idle.parent))
        pid = int(work.wait_line("ready", timeout=120).split()[1])
        cmd, up = f"{sys.executable} -m rlscope_top.cli {pid} --summary {summary}", "q Quit"
    else:
        cmd, up = f"{sys.executable} -m rlscope_top.cli run --headless --summary {summary} -- {sys.executable} {idle}", \
            "attached to PID"
    _tmux("kill-server")
    _tmux("new-session", "-d", "-s", "hup", "-x", "120", "-y", "36", f"cd {tmp_path} && exec {cmd}")
    try:
        end = time.monotonic() + 180
        while up not in _tmux("capture-pane", "-p", "-t", "hup") and time.monotonic() < end:
            time.sleep(0.5)
        mons = [p for p in psutil.process_iter(["cmdline"]) if str(summary) in " ".join(p.info["cmdline"] or [])]
        assert mons, "the monitor is not running"
        if mode == "run":
            pid = mons[0].children()[0].pid
        time.sleep(1.0)
    finally:
        _tmux("kill-server")
    gone, alive = psutil.wait_procs(mons, timeout=60)
    for p in alive:                      # nothing stays behind a failure
        for c in p.children(recursive=True):
            c.kill()
        p.kill()
    assert not alive, alive
    s = json.loads(summary.read_text())
    want = "hung up" if mode == "attach" else "command exited (status 129)"
    assert s["end_reason"].startswith(want), s["end_reason"]
    assert s["duration_s"] > 0.5, s["duration_s"]
    assert not glob.glob(f"/dev/shm/rlscope-top/ring-{pid}-*.bin")
    if mode == "attach":
        assert work.p.poll() is None, "the process watched must keep running"
    else:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
