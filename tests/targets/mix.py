"""Cycle forever through pure Python, a native simulator call and torch ops.

argv: simlib.so truth.json py_ms sim_ms torch_ms. Every phase is logged with
CLOCK_MONOTONIC bounds so the test can cut the ground truth to the monitor's window.
"""

import ctypes
import sys
import time

import torch

from common import Truth, ready

lib = ctypes.CDLL(sys.argv[1])
lib.sim_step.argtypes, lib.sim_step.restype = [ctypes.c_double], ctypes.c_double
truth = Truth(sys.argv[2])
py_s, sim_s, torch_s = (float(x) / 1000 for x in sys.argv[3:6])
torch.set_num_threads(1)
a, b = torch.randn(96, 96), torch.randn(96, 96)
mono = time.monotonic_ns


def python_phase(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(50):
            x += i * i
    return x


ready()
while True:
    t0 = mono(); python_phase(py_s); t1 = mono()
    truth.add("python", t0, t1)
    t0 = mono(); lib.sim_step(sim_s); t1 = mono()
    truth.add("simulator", t0, t1)
    end = time.perf_counter() + torch_s
    while time.perf_counter() < end:
        t0 = mono(); torch.mm(a, b); t1 = mono()
        truth.add("backend", t0, t1)
