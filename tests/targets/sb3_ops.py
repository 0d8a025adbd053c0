"""Unannotated SB3 PPO on CartPole, with its own in-process measurement of the operations.

The measurement wraps the functions the built-in rules name and flattens nesting the
same way (the innermost operation owns the time). Every ~5 ms it snapshots the
cumulative time per operation, so a test can cut the record to any window. Dumped
as JSON on SIGTERM: [[t_ns, {op: ns}], ...] plus "inclusive" snapshots.

usage: sb3_ops.py OUT
"""

import functools
import json
import os
import signal
import sys
import time

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from common import ready

OUT = sys.argv[1]
torch.set_num_threads(1)
mono = time.monotonic_ns
cum: dict[str, int] = {}
incl: dict[str, int] = {}
stack: list[list] = [["<none>", mono(), 0, False]]   # [op, since, entered, outermost]
snaps: list = []


def _charge(now: int, snap: bool = True) -> None:
    top = stack[-1]
    cum[top[0]] = cum.get(top[0], 0) + now - top[1]
    top[1] = now
    if snap and (not snaps or now - snaps[-1][0] > 5_000_000):
        snaps.append([now, dict(cum), _inclusive(now)])


def _inclusive(now: int) -> dict:
    """Closed outermost calls, plus the open ones up to now."""
    out = dict(incl)
    for op, _, t_enter, outer in stack[1:]:
        if outer:
            out[op] = out.get(op, 0) + now - t_enter
    return out


def measured(op: str, fn):
    @functools.wraps(fn)
    def wrapped(*a, **k):
        # The wrapper's own work runs in this file's frame, which the sampler counts for
        # the enclosing operation: so do the same here, and start the clock last.
        outer = all(s[0] != op for s in stack)
        _charge(mono())
        now = mono()
        _charge(now, snap=False)
        stack.append([op, now, now, outer])
        try:
            return fn(*a, **k)
        finally:
            end = mono()
            _charge(end)
            stack.pop()
            stack[-1][1] = end
            if outer:
                incl[op] = incl.get(op, 0) + end - now
    return wrapped


PPO.collect_rollouts = measured("collect_rollouts", PPO.collect_rollouts)
PPO.train = measured("train", PPO.train)
DummyVecEnv.step = measured("simulation", DummyVecEnv.step)
DummyVecEnv.reset = measured("simulation", DummyVecEnv.reset)
torch.Tensor.backward = measured("backward", torch.Tensor.backward)
torch.optim.Adam.step = measured("optimizer_step", torch.optim.Adam.step)


def dump(*_):
    now = mono()
    _charge(now)
    snaps.append([now, dict(cum), _inclusive(now)])
    with open(OUT + ".tmp", "w") as f:
        json.dump(snaps, f)
    os.replace(OUT + ".tmp", OUT)
    os._exit(0)


signal.signal(signal.SIGTERM, dump)
env = DummyVecEnv([lambda: gym.make("CartPole-v1")])
model = PPO("MlpPolicy", env, n_steps=1024, batch_size=64, n_epochs=4, seed=1, device="cpu", verbose=0)
ready()
model.learn(total_timesteps=10_000_000)
