"""DQN on CartPole-v1, TensorFlow 2 with tf.function (see dqn_common.py).

The network and Adam are written with tf.Variable so that nothing but TensorFlow runs
inside the compiled functions (no Keras layer machinery).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

import dqn_common as C  # noqa: E402


def mlp(obs_dim: int, n_act: int, seed: int) -> list:
    g = tf.random.Generator.from_seed(seed)
    sizes = [(obs_dim, C.HIDDEN), (C.HIDDEN, C.HIDDEN), (C.HIDDEN, n_act)]
    out = []
    for i, o in sizes:
        lim = (6.0 / (i + o)) ** 0.5
        out += [tf.Variable(g.uniform((i, o), -lim, lim)), tf.Variable(tf.zeros(o))]
    return out


def forward(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = tf.nn.relu(x @ w1 + b1)
    h = tf.nn.relu(h @ w2 + b2)
    return h @ w3 + b3


class Agent:
    def __init__(self, obs_dim: int, n_act: int, seed: int):
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        self.q, self.target = mlp(obs_dim, n_act, seed), mlp(obs_dim, n_act, seed + 1)
        self.m = [tf.Variable(tf.zeros_like(v)) for v in self.q]
        self.v = [tf.Variable(tf.zeros_like(v)) for v in self.q]
        self.t = tf.Variable(0.0)

    @tf.function
    def _act(self, obs):
        return tf.argmax(forward(self.q, obs[None])[0])

    def act(self, obs) -> int:
        return int(self._act(obs))

    @tf.function
    def _train(self, o, a, r, o2, d):
        y = r + C.GAMMA * (1.0 - d) * tf.reduce_max(forward(self.target, o2), axis=1)
        with tf.GradientTape() as tape:
            q = tf.gather(forward(self.q, o), a, batch_dims=1)
            err = tf.abs(q - y)
            loss = tf.reduce_mean(tf.where(err < 1.0, 0.5 * err * err, err - 0.5))   # Huber
        grads = tape.gradient(loss, self.q)
        self.t.assign_add(1.0)
        lr = C.LR * tf.sqrt(1.0 - 0.999 ** self.t) / (1.0 - 0.9 ** self.t)
        for p, g, m, v in zip(self.q, grads, self.m, self.v):
            m.assign(0.9 * m + 0.1 * g)
            v.assign(0.999 * v + 0.001 * g * g)
            p.assign_sub(lr * m / (tf.sqrt(v) + 1e-8))

    def train(self, o, a, r, o2, d) -> None:
        self._train(o, a, r, o2, d)

    def sync(self) -> None:
        for t, q in zip(self.target, self.q):
            t.assign(q)


if __name__ == "__main__":
    C.run(Agent, "tensorflow")
