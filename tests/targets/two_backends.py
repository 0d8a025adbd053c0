"""One process, two backends: exactly T torch.mm calls, J jitted JAX calls and W
block_until_ready waits after the go file appears.

usage: two_backends.py T J W GO DONE
"""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from common import counted  # noqa: E402

n_torch, n_jax, n_wait, go, done = (*map(int, sys.argv[1:4]), sys.argv[4], sys.argv[5])
torch.set_num_threads(1)
a = torch.randn(32, 32)
f = jax.jit(lambda x: x @ x + 1.0)
x = jnp.ones((32, 32))
torch.mm(a, a)
f(x).block_until_ready()


def body():
    for _ in range(n_torch):
        torch.mm(a, a)
    out = [f(x) for _ in range(n_jax)]
    for y in out[:n_wait]:
        y.block_until_ready()


counted(go, done, body)
