"""Pure-Python phases (stdlib only, so any CPython runs it): collect and update alternate,
~1:3 by work, each logged with CLOCK_MONOTONIC bounds (dumped on SIGTERM).

usage: py_phases.py TRUTH
"""

import sys
import time

from common import Truth, ready

truth = Truth(sys.argv[1])
mono = time.monotonic_ns


def collect() -> int:
    s = 0
    for i in range(20000):
        s += i * i
    return s


def update() -> int:
    s = 0
    for i in range(60000):
        s += i ^ 3
    return s


ready()
while True:
    t0 = mono(); collect(); t1 = mono()
    truth.add("collect", t0, t1)
    update(); t2 = mono()
    truth.add("update", t1, t2)
