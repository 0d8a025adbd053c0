"""Injecting the GPU agent (ptrace + dlopen, probes/gpu_inject.py) into busy processes on a
machine without a GPU: 100 injections into processes that hash in 4 threads, block in
read/sleep/select, or run torch ops. They keep running, their answers stay right, and the
agent, asked to start, says in one line that there is no driver."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from support import TARGETS
from rlscope_top.probes import gpu_inject
from rlscope_top.probes import gpu_region as R

pytest.importorskip("pyinjector")


@pytest.fixture
def root():
    if os.geteuid() != 0:
        if os.environ.get("RLSCOPE_REQUIRE_EBPF") == "1":
            pytest.fail("ptrace injection needs root, and RLSCOPE_REQUIRE_EBPF=1")
        pytest.skip("ptrace injection needs root")


def _start(mode, tmp_path, *extra):
    stop = tmp_path / f"stop-{mode}"
    p = subprocess.Popen([sys.executable, str(TARGETS / "busy_target.py"), mode, str(stop), *map(str, extra)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("ready"), p.stderr.read()
    return p, stop


def test_a_hundred_injections_into_busy_processes_change_nothing(root, gpu_native, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    targets = [_start("threads", tmp_path), _start("syscalls", tmp_path, fifo), _start("torch", tmp_path)]
    agent = gpu_native["agent"]
    try:
        held = []
        for i in range(100):
            p, _ = targets[i % 3]
            gpu_inject.preflight(p.pid)
            held.append(gpu_inject.inject(p.pid, agent))
            time.sleep(0.02)                          # spread over the targets' work
            assert p.poll() is None, f"target died after injection {i + 1}"
        with open(fifo, "wb", buffering=0) as f:
            f.write(b"rlscope-1009")                 # the blocked read() still gets its bytes
        for p, _ in targets:
            r = R.open_region(p.pid)
            assert r is not None and r.u32("agent_pid") == p.pid
            r.claim(os.getpid(), gpu_inject.local_cupti())
            assert r.command(R.CMD_START, 10)
            code, msg = r.status()
            assert code == "no_driver" and "libcuda.so.1" in msg and "\n" not in msg and not r.tracing
            r.close()
        outs = []
        for p, stop in targets:
            stop.touch()
            out, err = p.communicate(timeout=60)
            outs.append(out)
            assert p.returncode == 0, err
            assert "BAD" not in out and "ok True" in out, (out, err)
        assert "read rlscope-1009" in outs[1]
        assert max(held) < 5.0                        # each injection held the process briefly
    finally:
        for p, _ in targets:
            if p.poll() is None:
                p.kill()
                p.wait()
