"""Call a native simulator N times, then die inside the last call (after the go file)."""

import ctypes
import sys

from common import ready, wait_for

lib = ctypes.CDLL(sys.argv[1])
lib.sim_step.argtypes = lib.sim_die.argtypes = [ctypes.c_double]
lib.sim_step.restype = ctypes.c_double
n, go = int(sys.argv[2]), sys.argv[3]
ready()
wait_for(go)
for _ in range(n):
    lib.sim_step(0.001)
lib.sim_die(0.5)
