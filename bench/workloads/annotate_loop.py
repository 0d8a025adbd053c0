"""Times `with rlscope_top.operation(...)` in blocks of 0.5 s and prints ns per annotation.

Prints one line per block: "<ns per annotation> <ns per annotation with a reused op object>",
each minus the empty loop measured in the same block.
"""

import sys
import time

import rlscope_top

N = 20000
op = rlscope_top.operation("held")


def empty():
    for _ in range(N):
        pass


def fresh():
    for _ in range(N):
        with rlscope_top.operation("inference"):
            pass


def held():
    for _ in range(N):
        with op:
            pass


def best(fn, reps=5):
    out = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t)
    return min(out) / N


print("ready", flush=True)
while True:
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        base = best(empty)
        a, b = best(fresh) - base, best(held) - base
    print(f"{a:.1f} {b:.1f}", flush=True)
    sys.stdout.flush()
