"""DQN on CartPole-v1, JAX with jax.jit (see dqn_common.py). Adam written out (no optax)."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import dqn_common as C  # noqa: E402


def mlp(key, obs_dim: int, n_act: int) -> list:
    sizes = [(obs_dim, C.HIDDEN), (C.HIDDEN, C.HIDDEN), (C.HIDDEN, n_act)]
    out = []
    for (i, o), k in zip(sizes, jax.random.split(key, len(sizes))):
        lim = (6.0 / (i + o)) ** 0.5
        out += [jax.random.uniform(k, (i, o), minval=-lim, maxval=lim), jnp.zeros(o)]
    return out


def forward(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = jax.nn.relu(x @ w1 + b1)
    h = jax.nn.relu(h @ w2 + b2)
    return h @ w3 + b3


def huber(x):
    return jnp.where(jnp.abs(x) < 1.0, 0.5 * x * x, jnp.abs(x) - 0.5)


@jax.jit
def act_fn(params, obs):
    return jnp.argmax(forward(params, obs))


@jax.jit
def train_fn(params, target, opt, o, a, r, o2, d):
    m, v, t = opt
    y = r + C.GAMMA * (1.0 - d) * forward(target, o2).max(axis=1)

    def loss(p):
        q = jnp.take_along_axis(forward(p, o), a[:, None], axis=1)[:, 0]
        return huber(q - y).mean()

    grads = jax.grad(loss)(params)
    t = t + 1
    m = [0.9 * mi + 0.1 * g for mi, g in zip(m, grads)]
    v = [0.999 * vi + 0.001 * g * g for vi, g in zip(v, grads)]
    lr = C.LR * jnp.sqrt(1.0 - 0.999 ** t) / (1.0 - 0.9 ** t)
    params = [p - lr * mi / (jnp.sqrt(vi) + 1e-8) for p, mi, vi in zip(params, m, v)]
    return params, (m, v, t)


class Agent:
    def __init__(self, obs_dim: int, n_act: int, seed: int):
        k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
        self.q, self.target = mlp(k1, obs_dim, n_act), mlp(k2, obs_dim, n_act)
        self.opt = ([jnp.zeros_like(p) for p in self.q], [jnp.zeros_like(p) for p in self.q], 0.0)

    def act(self, obs) -> int:
        return int(act_fn(self.q, obs))

    def train(self, o, a, r, o2, d) -> None:
        self.q, self.opt = train_fn(self.q, self.target, self.opt, o, a, r, o2, d)

    def sync(self) -> None:
        self.target = list(self.q)


if __name__ == "__main__":
    C.run(Agent, "jax")
