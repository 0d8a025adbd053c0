"""Two threads passing a byte back and forth over pipes, forever: a program whose cost to the
profiler is its context switches (bench/switch_cost.py). Each round trip bumps a counter in a
shared file (its first 8 bytes, in bench/real_rl.py's ``Steps`` layout), so a bench reads the
rate from outside.

Both threads keep to one CPU (the last one): each switch then goes from one thread to the
other, with no CPU going idle between. Across two CPUs a VM's idle-and-wake path set the rate:
attached, with the monitor keeping a CPU busy, the same loop ran 12-20% faster.

usage: pingpong.py COUNTER_FILE
"""

import mmap
import os
import struct
import sys
import threading

os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 16)
counter = mmap.mmap(fd, 16)
a, b = os.pipe(), os.pipe()


def echo() -> None:
    while True:
        os.write(b[1], os.read(a[0], 1))


threading.Thread(target=echo, daemon=True).start()
print("ready", flush=True)
n = 0
while True:
    os.write(a[1], b"x")
    os.read(b[0], 1)
    n += 1
    if n % 64 == 0:
        struct.pack_into("q", counter, 0, n)
