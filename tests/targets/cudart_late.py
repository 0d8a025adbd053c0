"""dlopen the nvidia-cuda-runtime wheel's libcudart after attach; launch N kernels.

With no GPU every call fails fast with cudaErrorInsufficientDriver (35); the call
itself still happens, which is what the probes count.
"""

import ctypes
import glob
import os
import sys
import time

import nvidia

from common import ready, touch, wait_for

n, go_load, loaded, go_call, done = int(sys.argv[1]), *sys.argv[2:6]


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


path = sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib", "libcudart.so.*")))[0]
ready()
wait_for(go_load)
cudart = ctypes.CDLL(path)
fn = cudart.cudaLaunchKernel
fn.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
fn.restype = ctypes.c_int
touch(loaded)
wait_for(go_call)
rcs = {fn(None, Dim3(1, 1, 1), Dim3(1, 1, 1), None, 0, None) for _ in range(n)}
with open(done, "w") as f:
    f.write(",".join(map(str, sorted(rcs))))
while True:
    time.sleep(0.05)
