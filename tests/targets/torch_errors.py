"""Raise torch C++ errors (bad shapes) in a loop; report how many were caught."""

import sys
import time

import torch

from common import ready

out = sys.argv[1]
torch.set_num_threads(1)
a, b = torch.randn(3, 4), torch.randn(5, 6)
ready()
caught = 0
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    try:
        torch.mm(a, b)
    except RuntimeError:
        caught += 1
    torch.mm(a, a.t())
with open(out, "w") as f:
    f.write(str(caught))
