"""A plain Python process with no probed libraries: sleeps and spins a little."""

import time

from common import ready

ready()
while True:
    x = sum(i for i in range(20000))
    time.sleep(0.01)
