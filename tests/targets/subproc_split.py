"""SubprocVecEnv-style known split: a parent and three worker processes (forkserver, as
Stable-Baselines3 starts them), each worker with its own mix of pure Python, native simulator
calls and torch ops, logging each phase with CLOCK_MONOTONIC bounds (tests/truth.py reads
them). The parent waits on the workers' pipes, as a vectorized env's learner does.

On SIGTERM the parent tells the workers to stop; each writes its log to TRUTH.<pid>.

usage: subproc_split.py SIMLIB TRUTH
"""

import json
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import threading
import time

# per worker: Python phase (us), one simulator call (us), torch ops (64x64 mm), sleep (us)
MIXES = [(2000, 3000, 10, 2000), (4000, 1000, 30, 2000), (1000, 5000, 5, 2000)]


def worker(simlib, truth, mix, conn):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from common import SimBounds, load_simlib, timer_cost

    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent says when to stop
    torch.set_num_threads(1)
    lib = load_simlib(simlib)
    bounds = SimBounds(lib)
    py_us, sim_us, ops, sleep_us = mix
    a = torch.randn(64, 64)
    mono, tid, log = time.monotonic_ns, threading.get_native_id(), []
    timer = timer_cost()
    conn.send("warm")
    while not conn.poll():
        t0 = mono()
        end = time.perf_counter() + py_us / 1e6
        x = 0
        while time.perf_counter() < end:
            for i in range(20):
                x += i * i
        t1 = mono()
        log.append(("python", tid, t0, t1))
        lib.sim_step(sim_us / 1e6)
        log.append(("simulator", tid, *bounds.last()))
        for _ in range(ops):
            t0 = mono(); r = torch.mm(a, a); t1 = mono()
            log.append(("backend", tid, t0, t1))
            del r
        time.sleep(sleep_us / 1e6)
    with open(f"{truth}.{os.getpid()}", "w") as f:
        json.dump(log + [("timer_ns", 0, timer, 0)], f)
    conn.send("done")


def main():
    simlib, truth = sys.argv[1:3]
    ctx = mp.get_context("forkserver")
    pipes, procs = [], []
    for mix in MIXES:
        here, there = ctx.Pipe()
        p = ctx.Process(target=worker, args=(simlib, truth, mix, there))
        p.start()
        pipes.append(here)
        procs.append(p)
    for c in pipes:
        assert c.recv() == "warm"

    def finish(*_):
        for c in pipes:
            c.send("stop")
        for c in pipes:
            c.recv()
        os._exit(0)

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    print(f"ready {os.getpid()} {' '.join(str(p.pid) for p in procs)}", flush=True)
    while True:                   # the learner waits on its workers
        mp.connection.wait(pipes, timeout=1.0)
        time.sleep(0.01)


if __name__ == "__main__":
    main()
