"""Context switches on request (the bookkeeping's known answer): two threads pass a byte back
and forth over pipes, each blocking on its read, so every round trip is two switches out.

Usage: switch_pingpong.py GO DONE ROUNDS. Sleeps until GO appears, runs ROUNDS round trips,
writes its threads' voluntary switches over them (/proc/thread-self/status) as JSON to DONE,
then sleeps (no switches to speak of).
"""

import json
import os
import sys
import threading
import time

from common import ready


def switches() -> int:
    with open("/proc/thread-self/status") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


go, done, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
a, b = os.pipe(), os.pipe()
echoed = []


def echo() -> None:
    s0 = switches()
    for _ in range(rounds):
        os.write(b[1], os.read(a[0], 1))
    echoed.append(switches() - s0)


ready()
while not os.path.exists(go):
    time.sleep(0.01)
t = threading.Thread(target=echo)
t.start()
s0 = switches()
for _ in range(rounds):
    os.write(a[1], b"x")
    os.read(b[0], 1)
mine = switches() - s0
t.join()
with open(done + ".tmp", "w") as f:
    json.dump({"switches": mine + echoed[0]}, f)
os.rename(done + ".tmp", done)
while True:
    time.sleep(1)
