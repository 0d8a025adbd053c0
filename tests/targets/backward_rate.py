"""Backward passes of a tiny MLP at a steady RATE a second (a Python spin between them),
until killed: an RL-shaped learner whose backward counter is hot."""

import sys
import time

import torch

from common import ready

rate = float(sys.argv[1])
torch.set_num_threads(1)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
obs = torch.zeros(1, 8)
net(obs).sum().backward()          # torch's lazy set-up of the autograd engine, before attach
ready()
period, clock = 1.0 / rate, time.perf_counter
due = clock()
while True:
    net.zero_grad()                # a Module method: no optimizer, no record_function ranges
    net(obs).sum().backward()
    due = max(due + period, clock() - period)   # behind: no debt to run off at full speed
    while clock() < due:
        pass
