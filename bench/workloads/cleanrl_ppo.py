"""A CleanRL-style single-file PPO on CartPole (for bench/real_rl.py and the real-program
tests): the layout of CleanRL's ppo.py (a gymnasium SyncVectorEnv of 4 envs, an `Agent` with
`get_value` / `get_action_and_value`, 128-step rollouts, GAE, 4 epochs of 4 minibatches,
clipped surrogate loss, the learning rate annealed), its default hyperparameters, on the CPU
and run until killed. Written here in that style (no file of CleanRL's is copied): the
registry's cleanrl 0.4.8 needs the old `gym`. Prints "ready PID" once training has started.

usage: cleanrl_ppo.py [SEED]
"""

import os
import sys
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn, optim
from torch.distributions.categorical import Categorical


@dataclass
class Args:
    seed: int = 0
    env_id: str = "CartPole-v1"
    total_timesteps: int = 10 ** 12       # until killed
    learning_rate: float = 2.5e-4
    num_envs: int = 4
    num_steps: int = 128
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches


def make_env(env_id: str):
    def thunk():
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))
    return thunk


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs = int(np.array(envs.single_observation_space.shape).prod())
        self.critic = nn.Sequential(layer_init(nn.Linear(obs, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                    nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(obs, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                   nn.Tanh(), layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def gae(args: Args, agent: Agent, next_obs, next_done, rewards, dones, values):
    with torch.no_grad():
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(args.num_steps)):
            if t == args.num_steps - 1:
                nextnonterminal, nextvalues = 1.0 - next_done, next_value
            else:
                nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
            delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def update(args: Args, agent: Agent, optimizer, b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values):
    b_inds = np.arange(args.batch_size)
    for _epoch in range(args.update_epochs):
        np.random.shuffle(b_inds)
        for start in range(0, args.batch_size, args.minibatch_size):
            mb = b_inds[start:start + args.minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions.long()[mb])
            ratio = (newlogprob - b_logprobs[mb]).exp()
            mb_adv = b_advantages[mb]
            if args.norm_adv:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
            newvalue = newvalue.view(-1)
            if args.clip_vloss:
                v_unclipped = (newvalue - b_returns[mb]) ** 2
                v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_returns[mb]) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()


def main() -> None:
    args = Args(seed=int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    envs = gym.vector.SyncVectorEnv([make_env(args.env_id) for _ in range(args.num_envs)])
    agent = Agent(envs)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    shape = (args.num_steps, args.num_envs)
    obs = torch.zeros(shape + envs.single_observation_space.shape)
    actions = torch.zeros(shape + envs.single_action_space.shape)
    logprobs, rewards, dones, values = (torch.zeros(shape) for _ in range(4))
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs, next_done = torch.Tensor(next_obs), torch.zeros(args.num_envs)
    num_iterations = args.total_timesteps // args.batch_size
    start, global_step = time.time(), 0
    print("ready", os.getpid(), flush=True)
    for iteration in range(1, num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step], logprobs[step] = action, logprob
            next_obs, reward, terminations, truncations, _infos = envs.step(action.cpu().numpy())
            rewards[step] = torch.tensor(reward).view(-1)
            next_obs = torch.Tensor(next_obs)
            next_done = torch.Tensor(np.logical_or(terminations, truncations).astype(np.float32))
        advantages, returns = gae(args, agent, next_obs, next_done, rewards, dones, values)
        update(args, agent, optimizer, obs.reshape((-1,) + envs.single_observation_space.shape), logprobs.reshape(-1),
               actions.reshape((-1,) + envs.single_action_space.shape), advantages.reshape(-1), returns.reshape(-1),
               values.reshape(-1))
        if iteration % 50 == 0:
            print(f"SPS {int(global_step / (time.time() - start))}", flush=True)


if __name__ == "__main__":
    main()
