"""A parent and its workers, each making exactly N simulator calls and N torch calls.

Workers 0 and 1 are forked before the ready line (alive at attach); worker 2 starts when the
`start` file appears (after attach), with the START method (fork or spawn). Each worker waits
for the go file, makes its calls, writes its own truth to TRUTH.<i> and touches DONE.<i>.
Worker 0 then exits (a process that ends keeps its figures); the others idle. The parent
makes no probed call after the ready line.

usage: process_tree.py SIMLIB N US GO DONE TRUTH START_FILE START
"""

import json
import multiprocessing as mp
import os
import sys
import time


TENSORS = None      # made in the parent: a forked worker calls torch only in its loop


def worker(i, simlib, n, us, go, done, truth):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from common import SimBounds, load_simlib, touch, wait_for

    if TENSORS is None:      # a spawned worker: its own (its import calls torch too)
        torch.set_num_threads(1)
        a, b = torch.randn(16, 16), torch.randn(16, 16)
    else:
        a, b = TENSORS
    lib = load_simlib(simlib)
    bounds = SimBounds(lib)
    touch(f"{done}.mapped.{i}")      # its libraries are mapped: what the monitor links its probes to
    wait_for(go)
    sim_ns = 0
    for _ in range(n):
        lib.sim_step(us / 1e6)
        t0, t1 = bounds.last()
        sim_ns += t1 - t0
        torch.mm(a, b)
    with open(f"{truth}.{i}", "w") as f:
        json.dump({"pid": os.getpid(), "calls": n, "sim_s": sim_ns / 1e9}, f)
    touch(f"{done}.{i}")
    if i == 0:
        return
    while True:
        time.sleep(0.05)


def main():
    simlib, n, us, go, done, truth, start_file, start = sys.argv[1:9]
    n, us = int(n), float(us)
    import torch   # the forked workers inherit it (and its libraries' mappings)

    from common import ready, wait_for

    global TENSORS
    torch.set_num_threads(1)
    TENSORS = torch.randn(16, 16), torch.randn(16, 16)

    args = (simlib, n, us, go, done, truth)
    early = [mp.get_context("fork").Process(target=worker, args=(i, *args)) for i in (0, 1)]
    for p in early:
        p.start()
    ready(" ".join(str(p.pid) for p in early))
    wait_for(start_file)
    late = mp.get_context(start).Process(target=worker, args=(2, *args))
    late.start()
    print(f"late {late.pid}", flush=True)
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
