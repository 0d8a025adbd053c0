"""Run a real RL program unchanged, counting CartPole steps into a shared 8-byte file (for
bench/real_rl.py: the program's own progress rate, attached and not, is the slowdown).

usage: count_steps.py COUNTER_FILE (-m MODULE | SCRIPT) [ARGS...]
"""

import mmap
import os
import runpy
import struct
import sys

from gymnasium.envs.classic_control import cartpole

path, rest = sys.argv[1], sys.argv[2:]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 8)
counter = mmap.mmap(fd, 8)
n = [0]
step = cartpole.CartPoleEnv.step


def counted(self, action):
    n[0] += 1
    if n[0] % 64 == 0:
        struct.pack_into("q", counter, 0, n[0])
    return step(self, action)


cartpole.CartPoleEnv.step = counted


def _count_subproc_steps() -> None:
    """SB3's SubprocVecEnv steps CartPole in worker processes this patch does not reach:
    count there, in the parent, one step per worker per step_wait."""
    try:
        from stable_baselines3.common.vec_env import subproc_vec_env
    except ImportError:
        return
    wait = subproc_vec_env.SubprocVecEnv.step_wait

    def step_wait(self):
        out = wait(self)
        n[0] += len(self.remotes)
        struct.pack_into("q", counter, 0, n[0])
        return out

    subproc_vec_env.SubprocVecEnv.step_wait = step_wait


_count_subproc_steps()
if rest[0] == "-m":
    sys.argv = [rest[1], *rest[2:]]
    runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = rest
    runpy.run_path(rest[0], run_name="__main__")
