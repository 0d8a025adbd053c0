"""Collect CartPole transitions with a small policy network, one of four ways (the data-collection
case study, docs/case-studies/vectorized-simulation.md):

- `single`: one gymnasium env, a torch MLP forward per step;
- `gym-vec`: gymnasium's SyncVectorEnv of N envs, one batched torch forward per vector step;
- `envpool`: EnvPool's C++ CartPole (N envs on its own threads), one batched torch forward;
- `jax`: gymnax's JAX CartPole, policy and env step fused in one `jax.jit` of a `vmap` over N envs.

Prints `ready PID` once warm (imports, JIT compiled), waits for a line on stdin, collects at least
STEPS transitions (env steps summed over envs), prints `time SECONDS steps STEPS`.

usage: vec_collect.py MODE N_ENVS STEPS
"""

import os
import sys
import time

import numpy as np

MODE, N, STEPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
HIDDEN = 64


def torch_policy():
    """A 4-64-2 MLP on one torch thread: greedy actions for a batch of observations."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 2))

    def act(obs):
        with torch.no_grad():
            return net(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()
    return act


def single():
    import gymnasium as gym

    env, act = gym.make("CartPole-v1"), torch_policy()
    obs, _ = env.reset(seed=0)

    def step():
        nonlocal obs
        a = int(act(obs[None])[0])
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            obs, _ = env.reset()
        return 1
    return step


def gym_vec():
    import gymnasium as gym

    envs, act = gym.make_vec("CartPole-v1", num_envs=N, vectorization_mode="sync"), torch_policy()
    obs, _ = envs.reset(seed=0)

    def step():
        nonlocal obs
        obs, *_ = envs.step(act(obs))          # autoreset: finished envs reset on the next step
        return N
    return step


def envpool_vec():
    import envpool

    envs, act = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=N, seed=0), torch_policy()
    obs, _ = envs.reset()

    def step():
        nonlocal obs
        obs, *_ = envs.step(act(obs))
        return N
    return step


def jax_vec():
    import jax
    import jax.numpy as jnp
    import gymnax

    env, params = gymnax.make("CartPole-v1")
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    w1, w2 = jax.random.normal(k[0], (4, HIDDEN)) * 0.5, jax.random.normal(k[1], (HIDDEN, 2)) * 0.1
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k[2], N), params)

    @jax.jit
    def collect(key, obs, state):
        a = jnp.argmax(jnp.tanh(obs @ w1) @ w2, axis=-1)
        key, sub = jax.random.split(key)
        obs, state, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(sub, N), state, a, params)
        return key, obs, state

    carry = [k[2], obs, state]

    def step():
        carry[:] = collect(*carry)
        carry[1].block_until_ready()
        return N
    return step


def main():
    step = {"single": single, "gym-vec": gym_vec, "envpool": envpool_vec, "jax": jax_vec}[MODE]()
    for _ in range(50):                      # warm: imports, allocations, the JIT compile
        step()
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    done, t0 = 0, time.perf_counter()
    while done < STEPS:
        done += step()
    print(f"time {time.perf_counter() - t0:.4f} steps {done}", flush=True)


if __name__ == "__main__":
    np.random.seed(0)
    main()
