"""A process that forks many short-lived children, then one that spends a known time in
`child_work` (pure Python, CLOCK_MONOTONIC bounds in TRUTH): a job that churns workers (a
DataLoader without persistent workers, a pool per epoch) for longer than the kernel's
per-process tables hold.

usage: fork_churn.py START_FILE TRUTH CHILDREN SECONDS [BURST]
  BURST children then, that exit at once, all within a fraction of a second and just before
  the last one (faster than the monitor's ticks: the kernel must let go of them itself)
"""

import json
import os
import sys
import time

from common import ready, wait_for

BATCH = 16           # children alive at once
CHURN_S = 0.02       # each burns this much CPU: long enough for ticks to sample it
FORKERS = 3          # processes forking a burst side by side


def spin(seconds: float) -> None:
    x = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for i in range(50):
            x += i * i


def child_work(seconds: float) -> None:
    spin(seconds)


def fork(body) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    return pid


def burst(n: int) -> None:
    """n children from FORKERS processes at once (each a followed child itself)."""
    def forker():
        for _ in range(n // FORKERS):
            os.waitpid(fork(lambda: None), 0)
    for k in [fork(forker) for _ in range(FORKERS)]:
        os.waitpid(k, 0)


def churn(n: int) -> None:
    while n > 0:
        kids = [fork(lambda: spin(CHURN_S)) for _ in range(min(BATCH, n))]
        for k in kids:
            os.waitpid(k, 0)
        n -= len(kids)


def final(truth: str, seconds: float) -> None:
    t0 = time.monotonic_ns()
    child_work(seconds)
    with open(truth, "w") as f:
        json.dump({"t0": t0, "t1": time.monotonic_ns()}, f)


def main() -> None:
    start_file, truth, n, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    ready()
    wait_for(start_file)
    churn(n)
    t0 = time.monotonic()
    burst(int(sys.argv[5]) if len(sys.argv) > 5 else 0)
    print(f"burst {time.monotonic() - t0:.3f} s", flush=True)
    pid = fork(lambda: final(truth, seconds))
    print(f"final {pid}", flush=True)
    os.waitpid(pid, 0)
    print("done", flush=True)
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
