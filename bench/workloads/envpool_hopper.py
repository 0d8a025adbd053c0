"""envpool Hopper-v4 (8 envs on 2 C++ worker threads) stepped by a small torch policy, with an
Adam update every 64 steps: the shape of an envpool training loop. The main thread mostly
waits in envpool's recv (~1,250 short waits a second). Every 2,000 steps it prints the share
of wall time spent in `env.step`, timed in-process: the `simulation` operation's truth.

usage: envpool_hopper.py    (prints "ready PID", then "step share PCT steps/s N" lines)
"""

import os
import time

import envpool
import numpy as np
import torch

torch.set_num_threads(1)
env = envpool.make("Hopper-v4", env_type="gymnasium", num_envs=8, batch_size=8, num_threads=2)
obs, _ = env.reset()
pi = torch.nn.Sequential(torch.nn.Linear(obs.shape[1], 64), torch.nn.Tanh(),
                         torch.nn.Linear(64, env.action_space.shape[0]))
opt = torch.optim.Adam(pi.parameters(), 1e-3)
print("ready", os.getpid(), flush=True)
step, in_step, t0 = 0, 0.0, time.perf_counter()
while True:
    with torch.no_grad():
        a = pi(torch.as_tensor(obs, dtype=torch.float32)).numpy()
    s0 = time.perf_counter()
    obs, r, term, trunc, _ = env.step(np.clip(a, -1, 1))
    in_step += time.perf_counter() - s0
    step += 1
    if step % 64 == 0:
        for _ in range(4):
            loss = pi(torch.as_tensor(obs, dtype=torch.float32)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    if step % 2000 == 0:
        wall = time.perf_counter() - t0
        print("step share", round(100 * in_step / wall, 1), "steps/s", round(2000 / wall), flush=True)
        in_step, t0 = 0.0, time.perf_counter()
