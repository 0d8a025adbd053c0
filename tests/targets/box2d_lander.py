"""Gymnasium's LunarLander (Box2D through SWIG): exactly N env steps after the go file appears.

Each env.step calls b2World.Step once, and so does each reset (LunarLander's reset ends with
a step), so the known answer is N + resets calls, which it writes to the truth file.

usage: box2d_lander.py N GO DONE TRUTH
"""

import json
import os
import sys

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")   # gymnasium's box2d envs import pygame
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from common import counted  # noqa: E402

n, go, done, truth = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
env = gym.make("LunarLander-v3")
env.reset(seed=23)
actions = np.random.default_rng(23).integers(0, 4, size=n)


def body():
    resets = 0
    for a in actions:
        _, _, terminated, truncated, _ = env.step(int(a))
        if terminated or truncated:
            env.reset()
            resets += 1
    with open(truth, "w") as f:
        json.dump({"steps": n, "resets": resets, "world_steps": n + resets}, f)


counted(go, done, body)
