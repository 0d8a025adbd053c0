"""Issue exactly N torch.mm calls after the go file appears, then idle."""

import sys
import time

import torch

from common import ready, touch, wait_for

n, go, done = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
a, b = torch.randn(32, 32), torch.randn(32, 32)
torch.mm(a, b)
ready()
wait_for(go)
for _ in range(n):
    torch.mm(a, b)
touch(done)
while True:
    time.sleep(0.05)
