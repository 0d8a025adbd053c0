"""Pure-Python phases (stdlib only, so any CPython runs it): collect and update alternate,
~1:3 by work, each logged with CLOCK_MONOTONIC bounds (dumped on SIGTERM).

Each phase's length is drawn from 0.5-1.5x its mean: a fixed cycle aliases with a fixed-rate
sampler on a host whose speed puts the cycle at a divisor of the sample period (a 4.4 ms cycle
read 0.75 pp SD over sample phases; at 5 ms against austin's 10 ms, 3.2 pp, and a clean-clone
CI run read collect 5.6 pp low).

usage: py_phases.py TRUTH
"""

import random
import sys
import time

from common import Truth, ready

truth = Truth(sys.argv[1])
mono = time.monotonic_ns
rng = random.Random(23)


def collect() -> int:
    s = 0
    for i in range(rng.randrange(10000, 30000)):
        s += i * i
    return s


def update() -> int:
    s = 0
    for i in range(rng.randrange(30000, 90000)):
        s += i ^ 3
    return s


ready()
while True:
    t0 = mono(); collect(); t1 = mono()
    truth.add("collect", t0, t1)
    update(); t2 = mono()
    truth.add("update", t1, t2)
