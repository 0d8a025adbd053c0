"""collect/waits.py on real processes: a child blocked reading a pipe that this test holds
the other end of, a child asleep, a child blocked on a Unix socket pair's far end."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from rlscope_top.collect.waits import WaitSampler

pytestmark = pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="syscall table")


def _blocked(pid: int, timeout: float = 10.0) -> None:
    """Until the child sleeps in a system call (its state is S)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "S":
                return
        time.sleep(0.02)
    raise AssertionError(f"{pid} never blocked")


def _counts(pids: list[int], rounds: int = 7) -> dict[int, list]:
    s = WaitSampler(lambda: pids)
    for i in range(rounds):
        s.sample_once(float(i))
    return {p: s.counts(p) for p in pids}


def test_pipe_sleep_and_socket_peers():
    me = os.getpid()
    r, w = os.pipe()
    a, b = socket.socketpair()
    reader = subprocess.Popen([sys.executable, "-c", "import os; os.read(0, 1)"], stdin=r)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    sock = subprocess.Popen([sys.executable, "-c", "import os; os.read(0, 1)"], stdin=b.fileno())
    os.close(r)
    b.close()
    try:
        for p in (reader, sleeper, sock):
            _blocked(p.pid)
        got = _counts([me, reader.pid, sleeper.pid, sock.pid])
        assert got[reader.pid] == [["pipe", me, 7]]
        assert got[sleeper.pid] == [["a sleep", 0, 7]]
        assert got[sock.pid] == [["socket", me, 7]]       # the peer end is this test's `a`
        assert _counts([reader.pid])[reader.pid] == [["pipe", 0, 7]]   # the writer is not in the job
    finally:
        for p in (reader, sleeper, sock):
            p.kill()
            p.wait()
        os.close(w)
        a.close()


def _rounds(pid: int, seconds: float = 1.5) -> int:
    """Rounds the sampler's own thread takes over ``seconds`` with one process to look at."""
    s = WaitSampler(lambda: [pid])
    n = [0]
    real = s.sample_once

    def counted(now):
        n[0] += 1
        return real(now)

    s.sample_once = counted
    s.start()
    time.sleep(seconds)
    s.stop()
    return n[0]


def test_the_rate_falls_while_nothing_is_blocked_and_comes_back_with_a_wait():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _blocked(sleeper.pid)
        quiet, waiting = _rounds(busy.pid), _rounds(sleeper.pid)
    finally:
        for p in (busy, sleeper):
            p.kill()
            p.wait()
    # 1.5 s at a mean 20 ms: ~75 rounds while blocked; ~10 rounds to reach 0.2 s, then ~6 more
    assert waiting >= 35, waiting
    assert quiet <= 25, quiet
