"""Issue exactly N torch.mm calls after the go file appears, then idle."""

import sys

import torch

from common import counted

n, go, done = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
a, b = torch.randn(32, 32), torch.randn(32, 32)
torch.mm(a, b)


def body():
    for _ in range(n):
        torch.mm(a, b)


counted(go, done, body)
