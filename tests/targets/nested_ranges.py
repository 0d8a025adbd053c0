"""Nested named ranges with known times after the go file: N rounds of an `outer` range that
sleeps OUTER_MS around an `inner` one that sleeps INNER_MS; then one chain of DEEP ranges
d0 (outermost) .. d{DEEP-1}, each inside the one before. Prints each range's own measured
total (ns) as JSON once done, so the test can hold the summary to it."""

import json
import sys
import time

import torch
from torch.autograd.profiler import record_function

from common import counted

n, go, done = int(sys.argv[1]), sys.argv[2], sys.argv[3]
OUTER_MS, INNER_MS, DEEP = 2.0, 3.0, 10
torch.set_num_threads(1)
with record_function("warm"):      # torch's lazy set-up of the range path, before attach
    pass
own = {"outer": 0, "inner": 0}


def deep(level: int) -> None:
    if level < DEEP:
        with record_function(f"d{level}"):
            deep(level + 1)


def body():
    for _ in range(n):
        t0 = time.monotonic_ns()
        with record_function("outer"):
            time.sleep(OUTER_MS / 1e3)
            t1 = time.monotonic_ns()
            with record_function("inner"):
                time.sleep(INNER_MS / 1e3)
            t2 = time.monotonic_ns()
        t3 = time.monotonic_ns()
        own["inner"] += t2 - t1
        own["outer"] += t3 - t0
    deep(0)
    print(json.dumps(own), flush=True)


counted(go, done, body)
