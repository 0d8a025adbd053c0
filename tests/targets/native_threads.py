"""Threads that are not Python, and a Python thread that waits for them or for a CPU.

Modes (after the go file appears, for SECONDS, then the done file):
- sim: a native thread the simulator library starts (never runs Python) steps the
  simulator; the Python thread sleeps until it is done (waiting, not Python);
- torch: large matmuls on 2 intra-op threads (torch's own pool: native, in libtorch);
- omp: pure Python for 80 ms (or 2.4x the last matmul, if longer), then one 1536x1536 matmul on 2 intra-op threads (~35 ms here),
  in turn, with libgomp's active wait (OMP_WAIT_POLICY=active): the pool's worker spins in
  libgomp while Python runs. The done file holds the share of the time spent in the Python part
  (the known answer; with 30 ms, perf put 0.448 of the worker's user time in libgomp against 0.442). Large
  matmuls: on the 2-vCPU VM a 384x384 one took 23.7 ms on 2 threads against 1.5 ms on one,
  both threads ~94% in libgomp;
- contended: pure Python spinning (the test pins it to one CPU beside a busy loop);
- churn: 1009 short Python threads, one after another, each one sim_step of 20 us
  (SECONDS is ignored).

Usage: native_threads.py MODE SIMLIB GO DONE SECONDS
"""

import ctypes
import os
import sys
import time

from common import load_simlib, ready, touch, wait_for

mode, simlib, go, done, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
lib = load_simlib(simlib)
lib.sim_spawn.argtypes, lib.sim_spawn.restype = [ctypes.c_double, ctypes.c_double], ctypes.c_int
if mode == "omp":
    os.environ["OMP_WAIT_POLICY"] = "active"     # read as libgomp loads (with torch, below)
if mode in ("torch", "omp"):
    import torch

    torch.set_num_threads(2)
    a = torch.randn(384, 384)
    (a @ a).sum()                          # the pool's threads exist before the monitor attaches
ready()
wait_for(go)
end = time.monotonic() + seconds
if mode == "sim":
    assert lib.sim_spawn(seconds, 20e-6) == 0
    while not lib.sim_worker_done():
        time.sleep(0.01)
elif mode == "torch":
    while time.monotonic() < end:
        (a @ a).sum()
elif mode == "omp":
    b, c = torch.randn(1536, 1536), torch.empty(1536, 1536)
    serial, t0, mm = 0.0, time.monotonic(), 0.035
    while time.monotonic() < end:
        s0 = time.monotonic()
        x = 0
        while time.monotonic() - s0 < max(0.08, 2.4 * mm):   # keeps the share ~0.7 on a slow host
            x += 1
        serial += time.monotonic() - s0
        m0 = time.monotonic()
        torch.mm(b, b, out=c)
        mm = time.monotonic() - m0
    with open(done + ".tmp", "w") as f:
        f.write(f"{serial / (time.monotonic() - t0):.4f}")
    os.rename(done + ".tmp", done)
    while True:
        time.sleep(0.05)
elif mode == "contended":
    x = 0
    while time.monotonic() < end:
        x += 1
elif mode == "churn":
    import threading

    lib.sim_step.argtypes, lib.sim_step.restype = [ctypes.c_double], ctypes.c_double
    for _ in range(1009):
        t = threading.Thread(target=lib.sim_step, args=(20e-6,))
        t.start()
        t.join()
touch(done)
while True:
    time.sleep(0.05)
