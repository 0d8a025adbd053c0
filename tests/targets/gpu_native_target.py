"""A CUDA-shaped process for the GPU agent's tests, on a machine without a GPU.

It maps a stand-in driver library (soname libcuda.so.1, tests/native/fake_cuda.c) and the
stand-in libcupti (tests/native/fake_cupti.c), and, unless --no-agent, loads the real
agent (probes/librlscope_gpu.so). Then it obeys lines on stdin, answering each with one
line: ``kernels N DUR_NS NAME_ID``, ``memcpy N BYTES``, ``memset N BYTES``, ``cudart N``
(N real cudaLaunchKernel calls into the CUDA runtime wheel, each with its kernel record),
``sync N`` (N real cudaDeviceSynchronize calls),
``flush_hold MS`` (each CUPTI flush then takes MS more), ``untimed 0|1`` (kernel records
with zero timestamps, as CUPTI 12.6u2-13.0 gave them), ``fork_exit`` (ms a forked
child takes to exit through its atexit hooks), ``threads`` (its thread count),
``tid``, ``load AGENT`` (load the agent now: one that comes after attach), ``exit``.

Usage: gpu_native_target.py FAKE_CUDA FAKE_CUPTI AGENT|--no-agent
"""

import ctypes
import glob
import os
import sys
import threading
import time

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)          # "the driver": libcuda.so.1
cupti = ctypes.CDLL(sys.argv[2])
cupti.fake_cupti_kernels.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32]
cupti.fake_cupti_memcpy.argtypes = cupti.fake_cupti_memset.argtypes = [ctypes.c_uint32, ctypes.c_uint64]
cupti.fake_cupti_emitted.restype = ctypes.c_uint64
if sys.argv[3] != "--no-agent":
    ctypes.CDLL(sys.argv[3])


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def _cudart():
    import nvidia  # noqa: PLC0415

    path = sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib", "libcudart.so.*")))[0]
    lib = ctypes.CDLL(path)
    lib.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.cudaLaunchKernel.restype = ctypes.c_int
    lib.cudaDeviceSynchronize.restype = ctypes.c_int
    return lib


cudart = _cudart()
print("ready", os.getpid(), threading.get_native_id(), flush=True)
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "load":
        ctypes.CDLL(args[0])
        print("loaded", flush=True)
        continue
    a = [int(x) for x in args]
    if cmd == "kernels":
        cupti.fake_cupti_kernels(a[0], a[1], a[2])
        out = cupti.fake_cupti_emitted()
    elif cmd == "memcpy":
        cupti.fake_cupti_memcpy(a[0], a[1])
        out = cupti.fake_cupti_emitted()
    elif cmd == "memset":
        cupti.fake_cupti_memset(a[0], a[1])
        out = cupti.fake_cupti_emitted()
    elif cmd == "cudart":
        rcs = set()
        for _ in range(a[0]):
            rcs.add(cudart.cudaLaunchKernel(None, Dim3(1, 1, 1), Dim3(1, 1, 1), None, 0, None))
            cupti.fake_cupti_kernels(1, a[1], 0)
        out = ",".join(map(str, sorted(rcs)))
    elif cmd == "sync":
        out = ",".join(map(str, sorted({cudart.cudaDeviceSynchronize() for _ in range(a[0])})))
    elif cmd == "flush_hold":
        cupti.fake_cupti_flush_hold(a[0])
        out = "ok"
    elif cmd == "untimed":
        cupti.fake_cupti_untimed(a[0])
        out = "ok"
    elif cmd == "fork_exit":                     # a child that exits through its atexit hooks
        t0 = time.monotonic()
        child = os.fork()
        if child == 0:
            sys.exit(0)
        os.waitpid(child, 0)
        out = round(1000 * (time.monotonic() - t0))
    elif cmd == "configure":
        cupti.fake_cupti_configure(a[0], a[1])
        out = "ok"
    elif cmd == "threads":
        out = len(os.listdir("/proc/self/task"))
    elif cmd == "tid":
        out = threading.get_native_id()
    elif cmd == "exit":
        break
    else:
        out = "?"
    print(out, flush=True)
