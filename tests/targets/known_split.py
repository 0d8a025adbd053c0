"""Known-answer workload: cycles of pure Python, a native simulator call and torch ops.

Each phase is logged with CLOCK_MONOTONIC bounds, per thread, so the ground truth
can be cut to exactly the monitor's window. Dumped as JSON on SIGTERM/SIGINT.

usage: known_split.py SIMLIB TRUTH --py-us N --sim-us N --ops N --op-size N [--threads N] [--mp-helpers] [--torch-threads N]
    [--pace-us N]
--pace-us paces each cycle to N us, as a fixed-rate control loop does: after its Python and torch
work the simulator spins until the cycle's deadline (sim_step for the time left), then --sim-us is
not used.

--mp-helpers starts multiprocessing's forkserver and resource tracker first, as torchrl and
SB3's SubprocVecEnv do: two child processes that wait on a pipe all session.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time

from common import SimBounds, load_simlib, timer_cost

import torch

ap = argparse.ArgumentParser()
ap.add_argument("simlib")
ap.add_argument("truth")
ap.add_argument("--py-us", type=float, default=10000)
ap.add_argument("--py-iters", type=int, default=0, help="fixed-work Python phase (overrides --py-us)")
ap.add_argument("--sim-us", type=float, default=6000)
ap.add_argument("--ops", type=int, default=40, help="torch ops per cycle")
ap.add_argument("--op-size", type=int, default=96, help="square matrix size of each torch.mm")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--mp-helpers", action="store_true")
ap.add_argument("--torch-threads", type=int, default=1,
                help="torch's intra-op threads (more than the cores: the caller blocks inside torch's ops)")
ap.add_argument("--pace-us", type=float, default=0, help="cycle period: the simulator spins until its deadline")
args = ap.parse_args()

lib = load_simlib(args.simlib)
bounds = SimBounds(lib)
torch.set_num_threads(args.torch_threads)
mono = time.monotonic_ns
logs: list[list] = []
stop = threading.Event()


def python_phase(seconds: float) -> int:
    x = 0
    if args.py_iters:              # fixed work: takes the same time probed or not
        for i in range(args.py_iters):
            x += i * i
        return x
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for i in range(20):
            x += i * i
    return x


def worker() -> None:
    log: list = []
    logs.append(log)
    a = torch.randn(args.op_size, args.op_size)
    tid = threading.get_native_id()
    pace = int(args.pace_us * 1000)
    deadline = mono() + pace
    while not stop.is_set():
        t0 = mono(); python_phase(args.py_us / 1e6); t1 = mono()
        log.append(("python", tid, t0, t1))
        if args.sim_us and not pace:
            lib.sim_step(args.sim_us / 1e6)
            log.append(("simulator", tid, *bounds.last()))
        for _ in range(args.ops):
            t0 = mono(); r = torch.mm(a, a); t1 = mono()
            log.append(("backend", tid, t0, t1))
            del r     # the tensor is freed outside the op binding: Python time (see README limits)
        if pace:
            left = deadline - mono()
            if left > 0:
                lib.sim_step(left / 1e9)
                log.append(("simulator", tid, *bounds.last()))
            deadline = max(deadline + pace, mono())      # behind: no burst to catch up


TIMER_NS = timer_cost()


def dump(*_):
    stop.set()
    items = [x for log in logs for x in list(log)] + [("timer_ns", 0, TIMER_NS, 0)]
    with open(args.truth + ".tmp", "w") as f:
        json.dump(items, f)
    os.replace(args.truth + ".tmp", args.truth)
    os._exit(0)


signal.signal(signal.SIGTERM, dump)
signal.signal(signal.SIGINT, dump)
if args.mp_helpers:
    import multiprocessing.forkserver

    multiprocessing.set_forkserver_preload([])     # the forkserver imports nothing of ours
    multiprocessing.forkserver.ensure_running()    # starts the resource tracker too
threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.threads - 1)]
for t in threads:
    t.start()
print(f"ready {os.getpid()}", flush=True)
worker()
