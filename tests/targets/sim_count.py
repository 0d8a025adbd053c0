"""Exactly N calls of the toy simulator's sim_step(US microseconds) after the go file appears;
writes the time they took, as the target itself measured it. Its ready line says where
sim_step's code is (``ready PID ADDR``, hex), for a test that reads it (/proc/PID/mem).

usage: sim_count.py SIMLIB N US GO DONE TRUTH
"""

import ctypes
import json
import sys
import time

from common import counted, load_simlib, ready

lib = load_simlib(sys.argv[1])
n, us = int(sys.argv[2]), float(sys.argv[3])
go, done, truth = sys.argv[4], sys.argv[5], sys.argv[6]


def body():
    total = 0
    for _ in range(n):
        t0 = time.monotonic_ns()
        lib.sim_step(us / 1e6)
        total += time.monotonic_ns() - t0
    with open(truth, "w") as f:
        json.dump({"calls": n, "sim_s": total / 1e9}, f)


ready(hex(ctypes.cast(lib.sim_step, ctypes.c_void_p).value))
counted(go, done, body, announce=False)
