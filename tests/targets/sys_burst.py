"""A known amount of system time after a handshake (the cost meter's known answer).

Usage: sys_burst.py GO DONE SECONDS. Sleeps (no system time to speak of) until GO appears,
then reads /dev/zero in 1 MiB chunks (the kernel zero-fills the buffer: system time) for
SECONDS, and writes its own system-time delta (os.times) as JSON to DONE. Then it sleeps.
"""

import json
import os
import sys
import time

from common import ready

go, done, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
ready()
while not os.path.exists(go):
    time.sleep(0.01)
fd = os.open("/dev/zero", os.O_RDONLY)
buf = bytearray(1 << 20)
t0 = os.times()
end = time.monotonic() + seconds
while time.monotonic() < end:
    os.readv(fd, [buf])
t1 = os.times()
with open(done + ".tmp", "w") as f:
    json.dump({"sys_s": t1.system - t0.system, "user_s": t1.user - t0.user}, f)
os.rename(done + ".tmp", done)
while True:
    time.sleep(1)
