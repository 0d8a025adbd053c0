"""A hand-written training loop with no annotations, for --op rules.

Alternates collect_batch (Python + a native simulator call, ~60 ms) and update_model
(2000 small torch ops, ~50 ms), and logs both with CLOCK_MONOTONIC bounds (dumped on SIGTERM).

usage: custom_loop.py SIMLIB TRUTH
"""

import sys
import time

import torch

from common import Truth, load_simlib, ready

lib = load_simlib(sys.argv[1])
truth = Truth(sys.argv[2])
torch.set_num_threads(1)
a = torch.randn(96, 96)
mono = time.monotonic_ns


def collect_batch() -> None:
    for _ in range(25):
        x = 0
        for i in range(3000):
            x += i * i
        lib.sim_step(0.002)


def update_model() -> None:
    for _ in range(2000):
        torch.mm(a, a)


ready()
while True:
    t0 = mono(); collect_batch(); t1 = mono()
    truth.add("rollout", t0, t1)
    update_model(); t2 = mono()
    truth.add("update", t1, t2)
