"""The demo workload end to end, and doctor."""

from __future__ import annotations

import os
import subprocess

import pytest

from support import CLI, REPO, load_summary


@pytest.mark.ebpf
def test_demo_headless_prints_nonzero_breakdown(ebpf, tmp_path):
    out, tmp = tmp_path / "demo.json", tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.run([*CLI, "demo", "--headless", "--duration", "10", "--summary", str(out)],
                       capture_output=True, text=True, timeout=240, cwd=str(tmp_path),
                       env={**os.environ, "TMPDIR": str(tmp)})
    assert p.returncode == 0, p.stderr
    assert not list(tmp.glob("SB3-*"))        # the workload logs nowhere (SB3 made a dir per learn())
    s = load_summary(out)
    t = s["totals"]
    assert t["python_s"] > 0.5 and t["backend_s"] > 0.5 and t["simulator_s"] > 0.05
    assert s["calls"]["backend"] > 1000 and s["calls"]["simulator"] > 100
    assert {"torch", "mujoco"} <= set(s["probes"]["attached"])
    assert "Optimizer.step#Adam.step" in s["ranges"]           # record_function ranges from SB3's Adam
    assert "backend" in p.stdout and "simulator" in p.stdout   # the printed table
    assert "summary written to" in p.stderr


def test_doctor_reports_each_check():
    p = subprocess.run([*CLI, "doctor"], capture_output=True, text=True, timeout=60, cwd=str(REPO))
    for name in ("root", "BTF", "bcc", "kernel headers", "tracefs", "calibration", "GPU", "NVML", "CUPTI"):
        assert name in p.stdout
    assert p.returncode in (0, 1)
    assert ("attach can work" in p.stdout) == (p.returncode == 0)


@pytest.mark.ebpf
def test_doctor_with_pid_lists_probe_targets(ebpf, target):
    t = target("torch_count.py", 1, "/nonexistent-go", "/nonexistent-done")
    p = subprocess.run([*CLI, "doctor", str(t.pid)], capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert p.returncode == 0, p.stdout
    assert "libtorch_python.so" in p.stdout
    assert "mujoco" in p.stdout and "not mapped" in p.stdout


def test_doctor_bad_pid_is_a_fail_line():
    p = subprocess.run([*CLI, "doctor", "3999999"], capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert p.returncode == 1 and "no process with PID" in p.stdout and "Traceback" not in p.stderr
