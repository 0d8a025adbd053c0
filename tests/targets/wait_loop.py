"""A loop whose main thread mostly waits: compute (pure Python, ~3.7 ms) then wait_env (blocked
on a pipe another thread writes ~8.3 ms later; a 12 ms cycle, not a multiple of a sample period), as a vector env's recv waits on its workers.
Both logged with CLOCK_MONOTONIC bounds (dumped on SIGTERM).

With COMPUTE_MS and WAIT_MS, another cycle: 0.25 and 0.55 ms block ~1,250 times a second, as
envpool's recv waits on its C++ workers between ~0.8 ms batched steps.

usage: wait_loop.py TRUTH [COMPUTE_MS WAIT_MS]
"""

import os
import sys
import threading
import time

from common import Truth, ready

truth = Truth(sys.argv[1])
COMPUTE_S, WAIT_S = (float(a) / 1e3 for a in sys.argv[2:4]) if len(sys.argv) > 3 else (0.0037, 0.0083)
mono = time.monotonic_ns
ask_r, ask_w = os.pipe()
ans_r, ans_w = os.pipe()


def worker() -> None:
    """The 'env worker': answers each request after ~8.3 ms (asleep, not computing)."""
    while os.read(ask_r, 1):
        time.sleep(WAIT_S)
        os.write(ans_w, b"x")


def compute() -> None:
    end = time.perf_counter() + COMPUTE_S
    x = 0
    while time.perf_counter() < end:
        for i in range(50):
            x += i * i


def wait_env() -> None:
    os.write(ask_w, b"a")
    os.read(ans_r, 1)


threading.Thread(target=worker, daemon=True).start()
ready()
while True:
    t0 = mono(); compute(); t1 = mono()
    truth.add("compute", t0, t1)
    wait_env(); t2 = mono()
    truth.add("wait", t1, t2)
