"""A Python parent whose child execs a program that is not Python (sh), after attach.

Once the go file appears, the parent starts `sh -c` that counts to LOOPS in shell builtins
(on-CPU, no process of its own), then sleeps SLEEP seconds (off-CPU), and exits. The parent reaps it
with os.wait4 and writes the child's own truth: its pid, CPU time (rusage) and wall time.

usage: native_child.py GO DONE TRUTH LOOPS SLEEP
"""

import json
import os
import subprocess
import sys
import time

from common import ready, touch, wait_for

SH_LOOP = 'i=0; while [ $i -lt {loops} ]; do i=$((i+1)); done; exec sleep {sleep}'


def main():
    go, done, truth, loops, sleep = sys.argv[1:6]
    ready()
    wait_for(go)
    t0 = time.monotonic()
    child = subprocess.Popen(["sh", "-c", SH_LOOP.format(loops=int(loops), sleep=sleep)])
    _, status, ru = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    with open(truth, "w") as f:
        json.dump({"pid": child.pid, "status": status, "cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall}, f)
    touch(done)
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
