"""N jitted JAX calls, each result then read by np.asarray (a wait for XLA's thread and a copy
out), after the go file appears. Each asarray is timed here; the sum goes to DONE's sibling
``DONE.truth`` (seconds) for the test's known answer.

usage: jax_to_numpy.py N GO DONE
"""

import os
import sys
import time

import numpy as np

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from common import counted  # noqa: E402

n, go, done = int(sys.argv[1]), sys.argv[2], sys.argv[3]
f = jax.jit(lambda x: jnp.tanh(x @ x) @ x + 1.0)     # ~ms of XLA work on 256x256: a wait to see
x = jnp.ones((256, 256)) / 256
np.asarray(f(x))
spent = [0.0]


def body():
    for _ in range(n):
        y = f(x)
        t0 = time.perf_counter()
        np.asarray(y)
        spent[0] += time.perf_counter() - t0
    with open(done + ".truth", "w") as fh:
        fh.write(f"{spent[0]:.6f}")


counted(go, done, body)
