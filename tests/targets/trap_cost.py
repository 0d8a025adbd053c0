"""Back-to-back ~20 us simulator calls (tests/native/simlib.c ``sim_work``, whose first
instruction is stepped out of line when probed), each batch timed on the target's own clock:
what a probe costs a call is the time per call probed less unprobed
(tests/test_ebpf_probe_prices.py).

usage: trap_cost.py LIBTOYSIM LOG_JSON
"""

import json
import os
import signal
import sys
import time

from common import load_simlib, ready, sim_rounds

lib = load_simlib(sys.argv[1])
out = sys.argv[2]
mono = time.monotonic_ns
BATCH = 101
ROUNDS = sim_rounds(lib, 20.0)
log = []        # (t0, t1, calls): one batch


def dump(*_):
    with open(out + ".tmp", "w") as f:
        json.dump(log, f)
    os.replace(out + ".tmp", out)
    os._exit(0)


signal.signal(signal.SIGTERM, dump)
ready()
sim = lib.sim_work
while True:
    t0 = mono()
    for _ in range(BATCH):
        sim(ROUNDS)
    log.append((t0, mono(), BATCH))
