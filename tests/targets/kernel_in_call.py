"""Known answer for kernel time inside a native call: a loop of pure Python and one simulator
call (tests/native/simlib.c `sim_fault`) that spends most of its time in the kernel, in page
faults at its own stores and in libc's munmap, around ~20 us of its own loop.

A timed call counts that kernel time as the simulator's. So must an estimate from the
CPU-clock ticks, where a tick in the kernel is placed by the user IP it entered from or by
its call site (probes/bpf_program.c `kernel_site`).

usage: kernel_in_call.py SIMLIB TRUTH [--pages N] [--sim-us US] [--py-iters N]
Prints "ready PID"; dumps the truth (tests/truth.py items) on SIGTERM.
"""

import argparse
import ctypes
import os
import signal
import threading
import time

from common import IntervalLog, dispatch_cost, load_simlib, sim_rounds, timer_cost

ap = argparse.ArgumentParser()
ap.add_argument("simlib")
ap.add_argument("truth")
ap.add_argument("--pages", type=int, default=48)
ap.add_argument("--sim-us", type=float, default=20)
ap.add_argument("--py-iters", type=int, default=300)
args = ap.parse_args()

lib = load_simlib(args.simlib)
lib.sim_fault.argtypes, lib.sim_fault.restype = [ctypes.c_long], ctypes.c_double
lib.sim_fault_rounds.argtypes, lib.sim_fault_rounds.restype = [ctypes.c_long], None
lib.sim_fault_rounds(sim_rounds(lib, args.sim_us))
mono = time.monotonic_ns
tid = threading.get_native_id()
log = IntervalLog(("python", "simulator"), tid)     # not tuples: their heap's page faults (common.py)
kind_add, stamp_add = log.kind, log.stamp


def python_work(n: int) -> int:
    x = 0
    for i in range(n):
        x += i * i
    return x


def dump(*_):
    log.write(args.truth, TIMER_NS, DISPATCH_NS)
    os._exit(0)


TIMER_NS, DISPATCH_NS = timer_cost(), dispatch_cost(lib.sim_fault)    # sim_fault(0) does nothing
signal.signal(signal.SIGTERM, dump)
sim, pages, iters = lib.sim_fault, args.pages, args.py_iters
print(f"ready {os.getpid()}", flush=True)
while True:
    t0 = mono(); python_work(iters); t1 = mono()
    kind_add(0); stamp_add(t0); stamp_add(t1)
    t0 = mono(); sim(pages); t1 = mono()
    kind_add(1); stamp_add(t0); stamp_add(t1)
