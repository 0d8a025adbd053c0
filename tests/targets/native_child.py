"""A Python parent whose child execs a program that is not Python (sh), after attach.

Once the go file appears, the parent starts `sh -c` that counts to LOOPS in shell builtins
(on-CPU, no process of its own), then sleeps SLEEP seconds (off-CPU), and exits. The parent reaps it
with os.wait4 and writes the child's own truth: its pid, CPU time (rusage), wall time, and the
machine's steal time meanwhile (/proc/stat: a vCPU the hypervisor ran something else on; the
monitor's on-CPU time, switch to switch, includes it, rusage does not).

usage: native_child.py GO DONE TRUTH LOOPS SLEEP
"""

import json
import os
import subprocess
import sys
import time

from common import ready, touch, wait_for

SH_LOOP = 'i=0; while [ $i -lt {loops} ]; do i=$((i+1)); done; exec sleep {sleep}'


def steal_s() -> float:
    """The machine's steal time so far, all CPUs (seconds)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


def main():
    go, done, truth, loops, sleep = sys.argv[1:6]
    ready()
    wait_for(go)
    t0, steal0 = time.monotonic(), steal_s()
    child = subprocess.Popen(["sh", "-c", SH_LOOP.format(loops=int(loops), sleep=sleep)])
    _, status, ru = os.wait4(child.pid, 0)
    wall, steal = time.monotonic() - t0, steal_s() - steal0
    with open(truth, "w") as f:
        json.dump({"pid": child.pid, "status": status, "cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall,
                   "steal_s": steal}, f)
    touch(done)
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
