"""Issue exactly N TensorFlow eager ops (tf.matmul, the C fast path) after the go file appears.

usage: tf_count.py N GO DONE
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

from common import counted  # noqa: E402

n, go, done = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
a, b = tf.random.normal((32, 32)), tf.random.normal((32, 32))
tf.matmul(a, b)


def body():
    for _ in range(n):
        tf.matmul(a, b)


counted(go, done, body)
