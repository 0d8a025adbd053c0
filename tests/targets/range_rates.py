"""Named ranges at two rates after the go file: COLD rare ones (a 64x64 matmul and ~5 ms each,
then a pause), then HOT ones around one tiny in-place add, as fast as they run."""

import sys
import time

import torch
from torch.autograd.profiler import record_function

from common import counted

cold, hot, go, done = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.set_num_threads(1)
a, x = torch.randn(64, 64), torch.zeros(1)
with record_function("warm"):      # torch's lazy set-up of the range path, before attach
    torch.mm(a, a)


def body():
    for _ in range(cold):
        with record_function("cold"):
            torch.mm(a, a)
            time.sleep(0.005)
        time.sleep(0.02)
    for _ in range(hot):
        with record_function("hot"):
            x.add_(1)


counted(go, done, body)
