"""Known answer for non-stationary programs: a phased collect/update trainer.

Phases alternate, like an RL loop: a fixed number of env steps, then a fixed number of
updates, each sized at start to last about --phase-s (0.15 s by default) unprobed:
- collect(): per env step, some pure Python, one ~20 us native simulator call
  (tests/native/simlib.c `sim_work` through ctypes: fixed work, sized at start, as the Python
  and torch work are, so the shares hold when the machine's speed changes) and a few tiny
  torch ops (policy inference);
- update(): tiny torch ops only (a small network's forward/backward-like op mix).
Every Python, simulator and torch interval is logged with CLOCK_MONOTONIC bounds, so the
ground truth can be cut to any window (tests/truth.py). The log is dumped when the stop
file appears (or on SIGTERM). The phase functions have plain names, so operation rules
(`--op collect=collect --op update=update`) can find them in the stacks.

usage: phased_trainer.py SIMLIB TRUTH [--phase-s S] [--sim-us US] [--py-iters N]
                          [--infer-ops N] [--update-ops N] [--op-size N] [--stop FILE]
"""

import argparse
import os
import signal
import threading
import time

from common import IntervalLog, dispatch_cost, load_simlib, sim_rounds, timer_cost

import torch

ap = argparse.ArgumentParser()
ap.add_argument("simlib")
ap.add_argument("truth")
ap.add_argument("--phase-s", type=float, default=0.15)
ap.add_argument("--sim-us", type=float, default=20)
ap.add_argument("--py-iters", type=int, default=60)
ap.add_argument("--infer-ops", type=int, default=3)
ap.add_argument("--update-ops", type=int, default=12)
ap.add_argument("--op-size", type=int, default=8)
ap.add_argument("--stop", default=None, help="dump and exit when this file appears")
args = ap.parse_args()

lib = load_simlib(args.simlib)
torch.set_num_threads(1)
mono = time.monotonic_ns
KINDS = ("python", "simulator", "backend", "phase")
PY_K, SIM_K, BACKEND_K, PHASE_K = range(4)
tid = threading.get_native_id()
log = IntervalLog(KINDS, tid)     # not tuples: their heap's page faults (common.py)
kind_add, stamp_add = log.kind, log.stamp
a = torch.randn(args.op_size, args.op_size)
w = torch.randn(args.op_size, args.op_size)
done = threading.Event()


def python_work(n: int) -> int:
    x = 0
    for i in range(n):
        x += i * i
    return x


MM, ADD = torch.mm, torch.add


def torch_op(k: int, a=a, w=w):
    op = MM if k % 3 else ADD          # chosen outside the timer: it times the call, little bytecode
    t0 = mono()
    r = op(a, w)
    t1 = mono()
    kind_add(BACKEND_K); stamp_add(t0); stamp_add(t1)
    return r


SIM_ROUNDS = sim_rounds(lib, args.sim_us)


def collect_step() -> None:
    t0 = mono(); python_work(args.py_iters); t1 = mono()
    kind_add(PY_K); stamp_add(t0); stamp_add(t1)
    sim, rounds = lib.sim_work, SIM_ROUNDS
    t0 = mono(); sim(rounds); t1 = mono()
    kind_add(SIM_K); stamp_add(t0); stamp_add(t1)
    for k in range(args.infer_ops):
        torch_op(k)


def update_step() -> None:
    for k in range(args.update_ops):
        torch_op(k)


def collect(n: int) -> None:
    for _ in range(n):
        collect_step()


def update(n: int) -> None:
    for _ in range(n):
        update_step()


def steps_in(step, seconds: float) -> int:
    """How many steps fit in ``seconds`` now (unprobed, before the monitor starts)."""
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        step()
        n += 1
    return n


TIMER_NS = timer_cost()
DISPATCH_NS = dispatch_cost(lib.sim_work)      # ctypes' part of each simulator interval


def dump(*_):
    done.set()
    log.write(args.truth, TIMER_NS, DISPATCH_NS)
    os._exit(0)


signal.signal(signal.SIGTERM, dump)
# Phases are fixed work, as in an RL loop (N env steps, then M updates), sized once so that
# each lasts about --phase-s unprobed. A probed run then does the same work mix, slower, and
# its corrected shares can be held to the unprobed ones.
steps_in(collect_step, 0.1), steps_in(update_step, 0.1)      # warm up
N_COLLECT, N_UPDATE = steps_in(collect_step, args.phase_s), steps_in(update_step, args.phase_s)
log.clear()
print(f"ready {os.getpid()}", flush=True)
while True:                  # each phase is marked: the truth can count whole phases (tests/truth.py)
    kind_add(PHASE_K); stamp_add(mono()); stamp_add(0)
    collect(N_COLLECT)
    kind_add(PHASE_K); stamp_add(mono()); stamp_add(1)
    update(N_UPDATE)
    if args.stop and os.path.exists(args.stop):
        dump()
