"""Back-to-back ~20 us simulator calls (tests/native/simlib.c ``sim_work``, whose first
instruction is stepped out of line when probed), each batch timed on the target's own clock,
then as many calls of its never-probed twin ``sim_ref``: what a probe costs a call is the
difference per call, probed less unprobed (tests/test_ebpf_probe_prices.py). The twin beside
each batch takes out the machine's speed, which on these VMs moves by more than the probe's
cost between the unprobed and the probed spans.

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
log = []        # (t0, t1, t2, calls): one batch of sim_work (t0-t1), then of sim_ref (t1-t2)


def dump(*_):
    with open(out + ".tmp", "w") as f:
        json.dump(log, f)
    os.replace(out + ".tmp", out)
    os._exit(0)


signal.signal(signal.SIGTERM, dump)
ready()
sim, ref = lib.sim_work, lib.sim_ref
ref.argtypes, ref.restype = sim.argtypes, sim.restype
while True:
    t0 = mono()
    for _ in range(BATCH):
        sim(ROUNDS)
    t1 = mono()
    for _ in range(BATCH):
        ref(ROUNDS)
    log.append((t0, t1, mono(), BATCH))
