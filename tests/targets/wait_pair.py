"""What a process waits for, known answer: a learner and one env worker (forkserver, a Pipe:
what SubprocVecEnv does). Each cycle the learner runs Python for PY_MS, sends "step", blocks
in recv while the worker runs Python for WORK_MS, then sleeps SLEEP_MS. The learner logs its
time in recv and in sleep (CLOCK_MONOTONIC); the worker blocks on the learner otherwise.

On SIGTERM the learner writes {"recv_s", "sleep_s"} to TRUTH and stops the worker.

usage: wait_pair.py TRUTH
"""

import json
import multiprocessing as mp
import os
import signal
import sys
import time

PY_MS, WORK_MS, SLEEP_MS = 10, 20, 10


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    x = 0
    while time.perf_counter() < end:
        for i in range(20):
            x += i * i


def worker(conn):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while conn.recv() != "stop":
        spin(WORK_MS)
        conn.send("obs")


def main():
    truth = sys.argv[1]
    ctx = mp.get_context("forkserver")
    here, there = ctx.Pipe()
    p = ctx.Process(target=worker, args=(there,), daemon=True)
    p.start()
    there.close()                  # as SubprocVecEnv does: the worker holds its end alone
    stop, recv_ns, sleep_ns = [], 0, 0
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print(f"ready {os.getpid()} {p.pid}", flush=True)
    while not stop:
        spin(PY_MS)
        here.send("step")
        t0 = time.monotonic_ns(); here.recv(); t1 = time.monotonic_ns()
        time.sleep(SLEEP_MS / 1e3)
        t2 = time.monotonic_ns()
        recv_ns += t1 - t0
        sleep_ns += t2 - t1
    with open(truth, "w") as f:
        json.dump({"recv_s": recv_ns / 1e9, "sleep_s": sleep_ns / 1e9}, f)
    here.send("stop")
    p.join(5)


if __name__ == "__main__":
    main()
