"""DQN on CartPole-v1, PyTorch eager (see dqn_common.py)."""

import torch
from torch import nn

import dqn_common as C


class Agent:
    def __init__(self, obs_dim: int, n_act: int, seed: int):
        torch.manual_seed(seed)
        torch.set_num_threads(1)
        mk = lambda: nn.Sequential(nn.Linear(obs_dim, C.HIDDEN), nn.ReLU(), nn.Linear(C.HIDDEN, C.HIDDEN),  # noqa: E731
                                   nn.ReLU(), nn.Linear(C.HIDDEN, n_act))
        self.q, self.target = mk(), mk()
        self.opt = torch.optim.Adam(self.q.parameters(), lr=C.LR)

    def act(self, obs) -> int:
        with torch.no_grad():
            return int(self.q(torch.as_tensor(obs)).argmax())

    def train(self, o, a, r, o2, d) -> None:
        o, a, r, o2, d = map(torch.as_tensor, (o, a, r, o2, d))
        with torch.no_grad():
            y = r + C.GAMMA * (1.0 - d) * self.target(o2).max(dim=1).values
        q = self.q(o).gather(1, a.long().unsqueeze(1)).squeeze(1)
        loss = nn.functional.smooth_l1_loss(q, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def sync(self) -> None:
        self.target.load_state_dict(self.q.state_dict())


if __name__ == "__main__":
    C.run(Agent, "torch")
