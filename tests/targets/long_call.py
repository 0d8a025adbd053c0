"""One long native call (simlib's sim_step), then pure Python for good: the call's own bounds
(CLOCK_MONOTONIC ns) go to stdout as ``call T0 T1``.

usage: long_call.py SIMLIB SECONDS GO
"""

import sys

from common import SimBounds, load_simlib, ready, wait_for

lib = load_simlib(sys.argv[1])
bounds = SimBounds(lib)
ready()
wait_for(sys.argv[3])
lib.sim_step(float(sys.argv[2]))
t0, t1 = bounds.last()
print(f"call {t0} {t1}", flush=True)
x = 0
while True:
    x = (x + sum(range(1000))) % 7
