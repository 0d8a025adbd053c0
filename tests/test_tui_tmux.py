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
