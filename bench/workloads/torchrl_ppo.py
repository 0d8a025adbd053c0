"""torchrl 0.14 PPO on CartPole (for bench/real_rl.py and the real-program tests), after
torchrl's own PPO tutorial: a `Collector` of 1000 frames from `GymEnv("CartPole-v1")`
(with a `StepCounter` transform), a `ProbabilisticActor` over one-hot actions and a
`ValueOperator`, `GAE`, `ClipPPOLoss`, 4 epochs of 64-frame minibatches from a replay buffer,
Adam; on the CPU, one torch thread, run until killed. The collector calls the env's
`step_and_maybe_reset`, which wraps gymnasium's step in tensordicts, transforms and specs.

usage: torchrl_ppo.py [SEED]
"""

import sys

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data.replay_buffers import ReplayBuffer
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from torchrl.data.replay_buffers.storages import LazyTensorStorage
from torchrl.envs import StepCounter, TransformedEnv
from torchrl.envs.libs.gym import GymEnv
from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

FRAMES, EPOCHS, MINIBATCH = 1000, 4, 64


def mlp(n_in: int, n_out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(n_in, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_out))


def main() -> None:
    torch.manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    torch.set_num_threads(1)
    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    n_obs = env.observation_spec["observation"].shape[-1]
    actor = ProbabilisticActor(TensorDictModule(mlp(n_obs, env.action_spec.shape[-1]), in_keys=["observation"],
                                                out_keys=["logits"]),
                               in_keys=["logits"], spec=env.action_spec, distribution_class=OneHotCategorical,
                               return_log_prob=True)
    value = ValueOperator(mlp(n_obs, 1), in_keys=["observation"])
    collector = Collector(env, actor, frames_per_batch=FRAMES, total_frames=-1)
    buf = ReplayBuffer(storage=LazyTensorStorage(FRAMES), sampler=SamplerWithoutReplacement())
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=value, average_gae=True)
    loss = ClipPPOLoss(actor, value, clip_epsilon=0.2, entropy_bonus=True, entropy_coeff=1e-4)
    opt = torch.optim.Adam(loss.parameters(), 3e-4)
    for data in collector:
        for _ in range(EPOCHS):
            advantage(data)
            buf.extend(data.reshape(-1))
            for _ in range(FRAMES // MINIBATCH):
                parts = loss(buf.sample(MINIBATCH))
                (parts["loss_objective"] + parts["loss_critic"] + parts["loss_entropy"]).backward()
                opt.step()
                opt.zero_grad()


if __name__ == "__main__":
    main()
