"""Raise torch C++ errors (bad shapes) in a loop; report how many were caught.

Usage: torch_errors.py OUT SECONDS [GO]. With GO, the SECONDS start when that file appears
(the test writes it once the monitor is attached), so attach speed never matters.
"""

import os
import sys
import time

import torch

from common import ready

out = sys.argv[1]
go = sys.argv[3] if len(sys.argv) > 3 else None
torch.set_num_threads(1)
a, b = torch.randn(3, 4), torch.randn(5, 6)
ready()
caught = 0
end = None if go else time.monotonic() + float(sys.argv[2])
while end is None or time.monotonic() < end:
    if end is None and os.path.exists(go):
        end = time.monotonic() + float(sys.argv[2])
    try:
        torch.mm(a, b)
    except RuntimeError:
        caught += 1
    torch.mm(a, a.t())
with open(out, "w") as f:
    f.write(str(caught))
