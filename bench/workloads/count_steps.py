"""Run a real RL program unchanged, counting CartPole steps into a shared file (for
bench/real_rl.py: the program's own progress rate, attached and not, is the slowdown). The
file's second 8 bytes: the ns spent in the outermost environment step or reset (stable-baselines3's
VecEnv.step, gymnasium's vector env or wrappers, torchrl's EnvBase), the `simulation` operation's extent by the
built-in rules (its truth, read over the unattached spans).

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
# SB3 makes an empty /tmp/SB3-<time> directory per logger with no folder (rl-zoo3 runs): beside the counter
os.environ.setdefault("SB3_LOGDIR", os.path.join(os.path.dirname(os.path.abspath(path)), "sb3-log"))
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 16)
counter = mmap.mmap(fd, 16)
n = [0]
step = cartpole.CartPoleEnv.step
EVERY = int(os.environ.get("COUNT_STEPS_EVERY", "64"))    # 1: bench/window_cost.py's 5 ms trace


def counted(self, action):
    n[0] += 1
    if n[0] % EVERY == 0:
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


_depth, _spent = [0], [0]


def _time_outermost(cls, name: str) -> None:
    """Add the ns inside ``cls.name`` to the file's second slot, where no other timed env
    method is running (a vector env's step calls its envs' wrappers' step, a wrapper its
    inner env's: only the outermost is counted)."""
    inner = cls.__dict__.get(name)
    if inner is None:
        return

    def timed(self, *a, **k):
        _depth[0] += 1
        t0 = time.perf_counter_ns()
        try:
            return inner(self, *a, **k)
        finally:
            _depth[0] -= 1
            if not _depth[0]:
                _spent[0] += time.perf_counter_ns() - t0
                struct.pack_into("q", counter, 8, _spent[0])

    setattr(cls, name, timed)


def _time_env_steps() -> None:
    """The simulation operation's extent, by the built-in rules: stable-baselines3's VecEnv.step,
    gymnasium's vector env step/reset, and the step/reset of gymnasium's wrappers and of the
    CartPole env itself; for tianshou, its vector env's step and reset; for torchrl, its EnvBase's
    step, step_and_maybe_reset and reset; for skrl, its gymnasium wrapper's step and reset."""
    import gymnasium

    from gymnasium import wrappers
    classes = [gymnasium.vector.SyncVectorEnv, gymnasium.Wrapper, cartpole.CartPoleEnv,
               *(getattr(wrappers, w) for w in ("TimeLimit", "OrderEnforcing", "PassiveEnvChecker",
                                                 "RecordEpisodeStatistics"))]
    try:
        from stable_baselines3.common.vec_env import base_vec_env
        classes.append(base_vec_env.VecEnv)
    except ImportError:
        pass
    names = ("step", "reset")
    # torchrl's envs (its collector steps them), only for a torchrl program: importing torchrl
    # pulls in jax, TensorFlow and MuJoCo where they are installed, which the others never map
    if any("torchrl" in a for a in rest):
        from torchrl.envs.common import EnvBase
        classes.append(EnvBase)
        names += ("step_and_maybe_reset",)
    if any("tianshou" in a for a in rest):   # tianshou's vector env around each env's own step
        from tianshou.env.venvs import BaseVectorEnv
        classes.append(BaseVectorEnv)
    if any("skrl" in a for a in rest):     # skrl's wrapper around the vector env (tensors in and out)
        from skrl.envs.wrappers.torch.gymnasium_envs import GymnasiumWrapper
        classes.append(GymnasiumWrapper)
    for cls in classes:
        for name in names:
            _time_outermost(cls, name)


_count_subproc_steps()
_time_env_steps()
if rest[0] == "-m":
    sys.argv = [rest[1], *rest[2:]]
    runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = rest
    runpy.run_path(rest[0], run_name="__main__")
