"""Issue exactly N jitted JAX calls, then W block_until_ready waits, after the go file appears.

The jitted function is compiled before `ready`, so every call in the window takes the
C++ fast path (one dispatch each).

usage: jax_count.py N W GO DONE
"""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from common import counted  # noqa: E402

n, waits, go, done = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
f = jax.jit(lambda x: x @ x + 1.0)
x = jnp.ones((32, 32))
f(x).block_until_ready()


def body():
    out = [f(x) for _ in range(n)]
    for y in out[:waits]:
        y.block_until_ready()


counted(go, done, body)
