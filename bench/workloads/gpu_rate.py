"""A "GPU" that makes CUPTI records at a set rate, for bench/gpu_record_rate.py.

It maps the stand-in driver and libcupti (tests/native/) and the real GPU agent. After
the go file appears it makes kernels (each with its cudaLaunchKernel API record, so two
records a kernel) in batches paced to RATE records/s for SECONDS, then prints one JSON
line with what it made, and idles until killed.

Usage: gpu_rate.py FAKE_CUDA FAKE_CUPTI AGENT RATE SECONDS GO
"""

import ctypes
import json
import os
import sys
import time

cuda, cupti_path, agent, rate, seconds, go = sys.argv[1:7]
ctypes.CDLL(cuda, mode=ctypes.RTLD_GLOBAL)
cupti = ctypes.CDLL(cupti_path)
cupti.fake_cupti_kernels.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32]
cupti.fake_cupti_emitted.restype = ctypes.c_uint64
ctypes.CDLL(agent)
rate, seconds = float(rate), float(seconds)
BATCH = 200                                   # kernels per call: 400 records
print("ready", os.getpid(), flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
period = 2 * BATCH / rate
t0 = time.monotonic()
n = 0
while True:
    now = time.monotonic() - t0
    if now >= seconds:
        break
    due = int(now / period) + 1
    while n < due:
        cupti.fake_cupti_kernels(BATCH, 1500, n % 4)
        n += 1
    time.sleep(max(0.0, (n * period) - (time.monotonic() - t0)))
took = time.monotonic() - t0
print(json.dumps({"kernels": n * BATCH, "records": int(cupti.fake_cupti_emitted()), "seconds": round(took, 3)}),
      flush=True)
while True:
    time.sleep(0.5)
