"""Run a real RL program unchanged, counting CartPole steps into a shared file (for
bench/real_rl.py: the program's own progress rate, attached and not, is the slowdown). The
file's second 8 bytes: the ns spent in stable-baselines3's outermost VecEnv.step, the
`simulation` operation's extent there (its truth, read over the unattached spans).

usage: count_steps.py COUNTER_FILE (-m MODULE | SCRIPT) [ARGS...]
"""

import mmap
import os
import runpy
import struct
import sys
import time

from gymnasium.envs.classic_control import cartpole

path, rest = sys.argv[1], sys.argv[2:]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 16)
counter = mmap.mmap(fd, 16)
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


def _time_vec_steps() -> None:
    """The ns inside the outermost VecEnv.step (a wrapper's step calls its venv's step_wait,
    not its step; the depth guards against one that does)."""
    try:
        from stable_baselines3.common.vec_env import base_vec_env
    except ImportError:
        return
    vstep, depth, spent = base_vec_env.VecEnv.step, [0], [0]

    def timed(self, actions):
        depth[0] += 1
        t0 = time.perf_counter_ns()
        try:
            return vstep(self, actions)
        finally:
            depth[0] -= 1
            if not depth[0]:
                spent[0] += time.perf_counter_ns() - t0
                struct.pack_into("q", counter, 8, spent[0])

    base_vec_env.VecEnv.step = timed


_count_subproc_steps()
_time_vec_steps()
if rest[0] == "-m":
    sys.argv = [rest[1], *rest[2:]]
    runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = rest
    runpy.run_path(rest[0], run_name="__main__")
