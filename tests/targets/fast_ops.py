"""Two operations that alternate faster than the stack samples: think() is pure Python,
infer() is tiny torch ops. Each lasts ~0.3 ms, as an RL loop's env step and policy call do.
The known answer is structural: think() never calls torch, so its Backend share is 0.

usage: fast_ops.py
"""

import time

import torch

from common import ready

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


def sized(fn, us: float) -> int:
    """Iterations of fn that take ``us`` microseconds now."""
    n, t0 = 1000, time.perf_counter()
    fn(n)
    return max(1, round(n * us * 1e-6 / (time.perf_counter() - t0)))


N_THINK, N_INFER = sized(think, 300), sized(infer, 300)
ready()
while True:
    think(N_THINK)
    infer(N_INFER)
