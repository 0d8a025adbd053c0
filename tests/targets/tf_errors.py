"""Raise TensorFlow errors through every probed entry point in a loop; report how many
were caught. Ends with a pure-Python second so a bracket left open would show.

Errors: an eager op with bad shapes (fast path), a tf.function whose assertion fails
(TFE_Py_ExecuteCancelable), a gradient function that raises (TFE_Py_TapeGradient) and a
graph-mode assertion (TF_SessionRun).

usage: tf_errors.py OUT SECONDS GO   (starts when the GO file appears)
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

from common import ready, wait_for  # noqa: E402

out, seconds, go = sys.argv[1], float(sys.argv[2]), sys.argv[3]
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
a, b = tf.ones((3, 4)), tf.ones((5, 6))


@tf.function
def must_be_positive(x):
    tf.debugging.assert_positive(x)
    return x * 2.0


@tf.custom_gradient
def bad_grad(x):
    def grad(dy):
        raise ValueError("gradient refused")
    return x * 3.0, grad


graph = tf.Graph()
with graph.as_default():
    feed = tf.compat.v1.placeholder(tf.float32, (2,))
    checked = tf.debugging.assert_positive(feed)
session = tf.compat.v1.Session(graph=graph)
neg = tf.constant([-1.0, 2.0])
must_be_positive(tf.constant([1.0, 2.0]))


def attempts():
    """Each returns normally or raises a Python exception."""
    yield lambda: tf.matmul(a, b)
    yield lambda: must_be_positive(neg)
    v = tf.Variable([1.0, 2.0])

    def tape():
        with tf.GradientTape() as t:
            y = tf.reduce_sum(bad_grad(v))
        return t.gradient(y, v)
    yield tape
    yield lambda: session.run(checked, {feed: [-1.0, 1.0]})


ready()
wait_for(go)
caught = 0
end = time.monotonic() + seconds
calls = list(attempts())
while time.monotonic() < end:
    for call in calls:
        try:
            call()
        except (tf.errors.OpError, ValueError):
            caught += 1
    tf.matmul(a, tf.transpose(a))        # and a good call after the errors
t = time.monotonic() + 1.0
x = 0
while time.monotonic() < t:             # pure Python: Python time if no bracket stayed open
    x += 1
with open(out, "w") as f:
    f.write(str(caught))
