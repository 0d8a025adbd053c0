"""tianshou 2.0.1 DQN on CartPole, as its README trains it (for bench/real_rl.py): a program
nobody here wrote, run until killed. Prints "ready PID" once training has started.

usage: tianshou_dqn.py [SEED]   (default 0: torch, numpy, random and every env and action space
seeded, so two copies take the same steps; bench/twin_slowdown.py runs two)
"""

import os
import random
import sys

import numpy as np

import gymnasium as gym
import torch
from tianshou.algorithm import DQN
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, CollectStats, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.trainer import OffPolicyTrainerParams
from tianshou.utils.net.common import Net

torch.set_num_threads(1)
SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 0
torch.manual_seed(SEED)
np.random.seed(SEED)
random.seed(SEED)
train_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(8)])
test_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
train_envs.seed(SEED)                  # each env's reset and action space (the random warm-up samples it)
test_envs.seed(SEED + 100)
env = gym.make("CartPole-v1")
net = Net(state_shape=env.observation_space.shape, action_shape=env.action_space.n, hidden_sizes=[128, 128, 128])
policy = DiscreteQLearningPolicy(model=net, action_space=env.action_space, eps_training=0.1, eps_inference=0.05)
algorithm = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), gamma=0.9, n_step_return_horizon=3,
                target_update_freq=320)
train_collector = Collector[CollectStats](algorithm, train_envs, VectorReplayBuffer(20000, 8), exploration_noise=True)
test_collector = Collector[CollectStats](algorithm, test_envs, exploration_noise=True)
train_collector.reset()
train_collector.collect(n_step=64 * 8, random=True)
print("ready", os.getpid(), flush=True)
algorithm.run_training(OffPolicyTrainerParams(
    training_collector=train_collector, test_collector=test_collector, max_epochs=10_000, epoch_num_steps=10_000,
    collection_step_num_env_steps=10, test_step_num_episodes=2, batch_size=64,
    update_step_num_gradient_steps_per_sample=0.1, stop_fn=lambda r: False, logger=None, show_progress=False))
