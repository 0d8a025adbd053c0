"""A target with the GPU activity agent on (enable_gpu_activity) and a stand-in CUPTI
source (tests/cupti_fake.py). On go: N real cudaLaunchKernel calls into the CUDA
runtime wheel (no GPU: each returns 35) and, for each, the kernel record a GPU would
produce; then M cudaDeviceSynchronize calls.

Usage: gpu_agent_target.py N M GO DONE
"""

import ctypes
import glob
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nvidia  # noqa: E402

import cupti_fake  # noqa: E402
import rlscope_top  # noqa: E402
from common import ready, wait_for  # noqa: E402

n, m, go, done = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
KERNEL_NS = 200_000


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


fake = cupti_fake.FakeCupti(offset_ns=987_654_321_000)
rlscope_top.enable_gpu_activity(cupti=fake)
path = sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib", "libcudart.so.*")))[0]
cudart = ctypes.CDLL(path)
launch = cudart.cudaLaunchKernel
launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
launch.restype = ctypes.c_int
sync = cudart.cudaDeviceSynchronize
sync.restype = ctypes.c_int
ready()
wait_for(go)
tid = threading.get_native_id()
rcs = set()
for i in range(n):
    rcs.add(launch(None, Dim3(1, 1, 1), Dim3(1, 1, 1), None, 0, None))
    fake.launch(tid, f"kernel_{i % 3}", KERNEL_NS)
for _ in range(m):
    rcs.add(sync())
with open(done, "w") as f:
    f.write(",".join(map(str, sorted(rcs))))
while True:
    time.sleep(0.05)
