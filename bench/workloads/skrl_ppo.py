"""skrl 2.1 PPO on CartPole-v1 (for bench/real_rl.py and the real-program tests), written from
skrl's API as a new user would: 4 gymnasium envs in a SyncVectorEnv behind skrl's `wrap_env`,
categorical policy and deterministic value MLPs (64x64), a `RandomMemory` of 128 rollouts, PPO
with 4 epochs of 4 minibatches, the `SequentialTrainer`; torch's default threads (on the 2-core
VM one intra-op worker then spins in libgomp all session: the summary's OPENMP line), run until
killed. skrl's wrapper turns actions and observations into tensors around gymnasium's step.

usage: skrl_ppo.py
"""

import gymnasium as gym
import torch
import torch.nn as nn

from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model
from skrl.trainers.torch import SequentialTrainer


class Policy(CategoricalMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        CategoricalMixin.__init__(self, unnormalized_log_prob=True)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                 nn.Linear(64, self.num_actions))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                 nn.Linear(64, 1))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


env = wrap_env(gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)]))
device = env.device
memory = RandomMemory(memory_size=128, num_envs=env.num_envs, device=device)
models = {"policy": Policy(env.observation_space, env.action_space, device),
          "value": Value(env.observation_space, env.action_space, device)}
cfg = PPO_CFG(rollouts=128, learning_epochs=4, mini_batches=4)
agent = PPO(models=models, memory=memory, observation_space=env.observation_space,
            action_space=env.action_space, device=device, cfg=cfg)
SequentialTrainer(cfg={"timesteps": 10**7, "headless": True, "disable_progressbar": True}, env=env, agents=agent).train()
