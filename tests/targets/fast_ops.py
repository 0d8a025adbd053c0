"""Two operations that alternate faster than the stack samples: think() is pure Python,
infer() is tiny torch ops. Each lasts ~0.3 ms, as an RL loop's env step and policy call do.
The known answer is structural: think() never calls torch, so its Backend share is 0.

usage: fast_ops.py
"""

import torch

from common import ready, sized

torch.set_num_threads(1)
a, w = torch.randn(8, 8), torch.randn(8, 8)


def think(n: int) -> int:
    x = 0
    for i in range(n):
        x += i * i
    return x


def infer(n: int) -> None:
    for _ in range(n):
        torch.mm(a, w)


N_THINK, N_INFER = sized(think, 300e-6), sized(infer, 300e-6)
ready()
while True:
    think(N_THINK)
    infer(N_INFER)
