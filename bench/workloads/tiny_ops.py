"""A target making ~100k probed torch calls a second, for the monitor's own cost.

Prints `ready`, then loops until killed.
"""

import torch

torch.set_num_threads(1)
a = torch.randn(2, 2)
print("ready", flush=True)
while True:
    for _ in range(1000):
        torch.add(a, a)
