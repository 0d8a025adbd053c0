"""Print the time per small torch op, batch after batch, forever."""

import time

import torch

from common import ready

torch.set_num_threads(1)
a = torch.randn(4, 4)
ready()
while True:
    t0 = time.perf_counter_ns()
    for _ in range(200):
        torch.add(a, a)
    print(f"ns {(time.perf_counter_ns() - t0) / 200:.0f}", flush=True)
    time.sleep(0.005)
