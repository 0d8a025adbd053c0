"""The framework-independent half of the DQN case study (docs/case-studies/frameworks.md).

Environment loop, replay buffer and epsilon-greedy exploration in plain Python/NumPy;
the agent (Q-network MLP 4-64-64-2, Adam, Huber loss, target network) comes from
dqn_torch.py, dqn_tf.py or dqn_jax.py, each written the way that framework is usually
written: PyTorch eager, TensorFlow with tf.function, JAX with jax.jit.

Every workload: setup and warm-up (imports, compilation) happen first; it prints
``ready PID`` and, with ``--go FILE``, waits for that file, so the profiler attaches
before the measured loop; then it runs exactly ``--steps`` environment steps and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import gymnasium as gym
import numpy as np

HIDDEN = 64
GAMMA = 0.99
LR = 1e-3
BATCH = 64
BUFFER = 50_000
LEARN_START = 500
TARGET_SYNC = 500


class Replay:
    """A ring of transitions in NumPy arrays."""

    def __init__(self, obs_dim: int, size: int = BUFFER):
        self.obs = np.zeros((size, obs_dim), np.float32)
        self.nxt = np.zeros((size, obs_dim), np.float32)
        self.act = np.zeros(size, np.int32)
        self.rew = np.zeros(size, np.float32)
        self.done = np.zeros(size, np.float32)
        self.n = self.i = 0
        self.size = size

    def add(self, o, a, r, o2, d) -> None:
        self.obs[self.i], self.act[self.i], self.rew[self.i], self.nxt[self.i], self.done[self.i] = o, a, r, o2, d
        self.i = (self.i + 1) % self.size
        self.n = min(self.n + 1, self.size)

    def sample(self, rng: np.random.Generator, k: int = BATCH):
        idx = rng.integers(0, self.n, k)
        return self.obs[idx], self.act[idx], self.rew[idx], self.nxt[idx], self.done[idx]


def epsilon(step: int, total: int) -> float:
    return max(0.05, 1.0 - step / (0.5 * total))


def parse(name: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=f"DQN on CartPole-v1 ({name})")
    ap.add_argument("--steps", type=int, default=5000, help="environment steps in the measured loop")
    ap.add_argument("--go", help="wait for this file after warm-up (attach the profiler first)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write {steps, seconds, episodes, mean_return} here")
    return ap.parse_args()


def run(make_agent, name: str) -> None:
    """Warm up, wait for --go, run --steps environment steps of DQN, report."""
    args = parse(name)
    random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env = gym.make("CartPole-v1")
    obs_dim, n_act = env.observation_space.shape[0], env.action_space.n
    agent = make_agent(obs_dim, n_act, args.seed)
    buf = Replay(obs_dim)
    warm = np.zeros((BATCH, obs_dim), np.float32)   # compile / first-call costs before the window
    for _ in range(3):
        agent.act(warm[0])
        agent.train(warm, np.zeros(BATCH, np.int32), np.zeros(BATCH, np.float32), warm, np.zeros(BATCH, np.float32))
    agent.sync()
    print(f"ready {os.getpid()} {name}", flush=True)
    if args.go:
        while not os.path.exists(args.go):
            time.sleep(0.01)
    obs, _ = env.reset(seed=args.seed)
    returns, ret = [], 0.0
    t0 = time.perf_counter()
    for step in range(args.steps):
        if rng.random() < epsilon(step, args.steps):
            a = int(rng.integers(n_act))
        else:
            a = agent.act(obs.astype(np.float32))
        obs2, r, term, trunc, _ = env.step(a)
        buf.add(obs, a, r, obs2, float(term))
        ret += r
        obs = obs2
        if term or trunc:
            returns.append(ret)
            ret = 0.0
            obs, _ = env.reset()
        if buf.n >= LEARN_START:
            agent.train(*buf.sample(rng))
            if step % TARGET_SYNC == 0:
                agent.sync()
    seconds = time.perf_counter() - t0
    report = {"framework": name, "steps": args.steps, "seconds": round(seconds, 3), "episodes": len(returns),
              "mean_return_last10": round(float(np.mean(returns[-10:])), 1) if returns else None}
    print(json.dumps(report), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f)
    if args.go:     # profiled: end the attached window with the loop, not with interpreter teardown
        sys.stdout.flush()
        os._exit(0)
