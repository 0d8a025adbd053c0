"""Issue 16's RL-shaped loop, forever: a tiny MLP forward each step, an SGD update every 8
steps, a 200-iteration pure-Python "env step". Prints, every ~0.1 s of work,
``t <monotonic_ns> steps <n>`` so that a bench can cut any window out of the run
(every RL_LOOP_PRINT_MS ms of work instead, where it is set: bench/window_cost.py).
"""

import os
import time

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
opt = torch.optim.SGD(net.parameters(), lr=1e-3)


def env_step(x: int) -> int:
    for i in range(200):
        x = (x * 31 + i) % 1009
    return x


obs, s, steps = torch.zeros(1, 8), 1, 0
PERIOD_NS = int(float(os.environ.get("RL_LOOP_PRINT_MS", "100")) * 1e6)
print("ready", flush=True)
mono, next_print = time.monotonic_ns, time.monotonic_ns()
while True:
    s = env_step(s)
    out = net(obs)
    if steps % 8 == 7:
        opt.zero_grad()
        out.sum().backward()
        opt.step()
    steps += 1
    now = mono()
    if now >= next_print:
        print(f"t {now} steps {steps}", flush=True)
        next_print = now + PERIOD_NS
