"""Known-answer annotated workload: three operations, one nested simulation operation.

Waits for GO, runs CYCLES cycles, writes its phase log to TRUTH, touches DONE, idles.
Per cycle:
    rollout:      Python (py_iters), then nested simulation: Python (py_iters/4) + sim_step
    inference:    INFER torch.mm calls
    train:        Python (py_iters/2) + TRAIN torch.mm calls

usage: annotated_ops.py SIMLIB GO DONE TRUTH [--cycles N] [--py-iters N] [--sim-us N]
"""

import argparse
import json
import threading
import time

import torch

import rlscope_top
from common import load_simlib, ready, spin, touch, wait_for

ap = argparse.ArgumentParser()
ap.add_argument("simlib")
ap.add_argument("go")
ap.add_argument("done")
ap.add_argument("truth")
ap.add_argument("--cycles", type=int, default=101)
ap.add_argument("--py-iters", type=int, default=20000)
ap.add_argument("--sim-us", type=float, default=1500)
ap.add_argument("--infer", type=int, default=7)
ap.add_argument("--train", type=int, default=5)
ap.add_argument("--size", type=int, default=128)
args = ap.parse_args()

lib = load_simlib(args.simlib)
torch.set_num_threads(1)
mono = time.monotonic_ns
log: list = []          # (what, op, t0, t1): what = "op" (whole, inclusive) | "backend" | "native"
a = torch.randn(args.size, args.size)
rollout = rlscope_top.operation("rollout")
simulation = rlscope_top.operation("simulation", kind="simulation")
inference = rlscope_top.operation("inference")


def mm(op: str) -> None:
    t0 = mono(); r = torch.mm(a, a); t1 = mono()
    log.append(("backend", op, t0, t1))
    del r


@rlscope_top.operation("train")
def train() -> None:
    spin(args.py_iters // 2)
    for _ in range(args.train):
        mm("train")


def cycle() -> None:
    t0 = mono()
    with rollout:
        spin(args.py_iters)
        s0 = mono()
        with simulation:
            spin(args.py_iters // 4)
            n0 = mono(); lib.sim_step(args.sim_us / 1e6); n1 = mono()
        s1 = mono()
    t1 = mono()
    log.extend([("op", "rollout", t0, t1), ("op", "simulation", s0, s1), ("native", "simulation", n0, n1)])
    t0 = mono()
    with inference:
        for _ in range(args.infer):
            mm("inference")
    t1 = mono()
    log.append(("op", "inference", t0, t1))
    t0 = mono()
    train()
    log.append(("op", "train", t0, mono()))


spin(1000); mm("warmup"); log.clear()
ready()
wait_for(args.go)
for _ in range(args.cycles):
    cycle()
with open(args.truth, "w") as f:
    json.dump(log, f)
touch(args.done)
while True:
    time.sleep(0.05)
