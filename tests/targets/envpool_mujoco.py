"""Step an envpool MuJoCo env N times after the go file appears, then idle.

envpool links MuJoCo statically into envpool/mujoco/mujoco_gym_envpool.so and steps it
on its own C++ worker threads; `import envpool` maps all of its MuJoCo modules.
"""

import sys

import envpool
import numpy as np

from common import counted

task, n, go, done = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
env = envpool.make(task, env_type="gymnasium", num_envs=2, num_threads=2, seed=0)
env.reset()
action = np.zeros((2, *env.action_space.shape), dtype=env.action_space.dtype)


def body():
    for _ in range(n):
        env.step(action)


counted(go, done, body)
