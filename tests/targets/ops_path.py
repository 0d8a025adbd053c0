"""Half the time in torch through `torch.ops.aten.mm.default`, half in pure Python. That
path enters torch through no binding the catalog brackets (no PyWarningHandler), so the
probes time none of it: the known answer for the coverage check is that the ticks find the
thread in torch's libraries about half the time while the probes time ~0.

usage: ops_path.py
"""

import time

import torch

from common import ready, sized, spin as think

torch.set_num_threads(1)
a = torch.randn(96, 96)
mm = torch.ops.aten.mm.default


def infer(n: int) -> None:
    for _ in range(n):
        mm(a, a)


def seconds(fn, n: int, rounds: int = 20) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn(n)
    return time.perf_counter() - t0


N_THINK, N_INFER = sized(think, 5e-3, 200), sized(infer, 5e-3, 200)
t_infer, t_think = seconds(infer, N_INFER), seconds(think, N_THINK)
ready(f"infer_share {t_infer / (t_infer + t_think):.4f}")
while True:
    think(N_THINK)
    infer(N_INFER)
