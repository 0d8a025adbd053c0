"""Raise JAX errors through every probed entry point in a loop; report how many were caught.
Ends with a pure-Python second so a bracket left open would show.

Errors: a jitted call that fails while tracing (inside the jitted-call slot function), a
host callback that raises while the computation runs (surfaces at dispatch or in
block_until_ready), and a Python signal handler that raises while block_until_ready
waits: jaxlib throws a C++ exception through PyArray::BlockUntilReady, the case a return
probe there would turn into a crash.

usage: jax_errors.py OUT SECONDS GO   (starts when the GO file appears)
"""

import logging
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from common import ready, wait_for

out, seconds, go = sys.argv[1], float(sys.argv[2]), sys.argv[3]


class Interrupted(Exception):
    pass


def on_alarm(*_):
    raise Interrupted


signal.signal(signal.SIGALRM, on_alarm)
logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)   # no traceback per refused callback
bad_shapes = jax.jit(lambda x: x @ jnp.ones((5, 6)))


def refuse(x):
    raise ValueError("callback refused")


bad_callback = jax.jit(lambda x: jax.pure_callback(refuse, jax.ShapeDtypeStruct(x.shape, x.dtype), x))


@jax.jit
def slow(x):                 # 0.3-0.9 s of work on the 2-core VMs: long enough to be interrupted mid-wait
    return jax.lax.fori_loop(0, 40, lambda i, y: jnp.tanh(y @ x), x)


good = jax.jit(lambda x: x + 1.0)
x3, big = jnp.ones((3, 4)), jnp.ones((1024, 1024)) / 1024
slow(big).block_until_ready()
good(x3).block_until_ready()
t0 = time.monotonic()
slow(big).block_until_ready()
# the alarm goes off a third of the way into the wait, however fast this machine runs `slow`
# (a fixed 0.3 s missed every wait once a faster VM ran it in 0.30 s)
ALARM_S = (time.monotonic() - t0) / 3


def interrupted_wait():
    y = slow(big)
    signal.setitimer(signal.ITIMER_REAL, ALARM_S)
    try:
        y.block_until_ready()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


ready()
wait_for(go)
caught = interrupts = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    for call in (lambda: bad_shapes(x3), lambda: bad_callback(x3).block_until_ready(), interrupted_wait):
        try:
            call()
        except Interrupted:
            interrupts += 1
        except (TypeError, ValueError, jax.errors.JaxRuntimeError):
            caught += 1
    np.asarray(good(x3).block_until_ready())
t = time.monotonic() + 1.0
x = 0
while time.monotonic() < t:
    x += 1
with open(out, "w") as f:
    f.write(f"{caught} {interrupts}")
