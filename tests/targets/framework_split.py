"""Known-answer workload for one framework: cycles of pure Python and backend calls.

Each phase is logged with CLOCK_MONOTONIC bounds, per thread, in the format of
known_split.py (tests/truth.py reads it). The backend phase is a few calls of the
framework's matmul: TensorFlow's eager MatMul op (executed inline, one intra-op
thread), or a jitted JAX function followed by ``block_until_ready`` (dispatch + wait:
the computation runs asynchronously, so the Python thread waits for it).
Dumped as JSON, and the target exits, once the file TRUTH.stop exists (checked once per
cycle). Not on a signal: a SIGTERM that lands while TensorFlow's eager executor runs on
the main thread corrupts its heap now and then (about 1 run in 6 on the dev VM, with no
monitor attached: "corrupted size vs. prev_size" in EagerOperation's destructor; it went
away when Python's handler ran on an alternate signal stack).

usage: framework_split.py {tf,jax} TRUTH [--py-iters N] [--ops N] [--op-size N]
"""

import argparse
import json
import os
import threading
import time

from common import timer_cost

ap = argparse.ArgumentParser()
ap.add_argument("framework", choices=("tf", "jax"))
ap.add_argument("truth")
ap.add_argument("--py-iters", type=int, default=20000, help="fixed-work Python phase per cycle")
ap.add_argument("--ops", type=int, default=4, help="backend calls per cycle")
ap.add_argument("--op-size", type=int, default=128, help="square matrix size")
args = ap.parse_args()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
mono = time.monotonic_ns


def tf_op():
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow.python.ops import gen_math_ops  # noqa: PLC0415
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    a = tf.random.normal((args.op_size, args.op_size))
    # The generated op wrapper: one eager fast-path call with little Python around it, as
    # torch.mm is for the torch target (tf.matmul adds ~20 us of Python dispatch per call).
    return lambda: gen_math_ops.mat_mul(a, a)


def jax_op():
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    f = jax.jit(lambda x: jnp.tanh(x @ x))
    a = jnp.ones((args.op_size, args.op_size)) / args.op_size
    return lambda: f(a).block_until_ready()


op = tf_op() if args.framework == "tf" else jax_op()
for _ in range(20):     # compile and warm up before the ready line
    op()
log: list = []


def python_phase() -> int:
    x = 0
    for i in range(args.py_iters):
        x += i * i
    return x


TIMER_NS = timer_cost()


def dump():
    items = list(log) + [("timer_ns", 0, TIMER_NS, 0)]
    with open(args.truth + ".tmp", "w") as f:
        json.dump(items, f)
    os.replace(args.truth + ".tmp", args.truth)
    os._exit(0)


STOP = args.truth + ".stop"
tid = threading.get_native_id()
print(f"ready {os.getpid()}", flush=True)
while not os.path.exists(STOP):
    t0 = mono(); python_phase(); t1 = mono()
    log.append(("python", tid, t0, t1))
    for _ in range(args.ops):
        t0 = mono(); op(); t1 = mono()
        log.append(("backend", tid, t0, t1))
dump()
