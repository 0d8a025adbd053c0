"""The built-in demo: stable-baselines3 PPO, torch CPU policy, MuJoCo InvertedPendulum.

Runs until killed (or for ``--seconds``). Prints ``ready <pid>`` once training has
started, so the monitor attaches to a warm process. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    """Train PPO in short learn() calls until time is up."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3600.0)
    ap.add_argument("--env", default="InvertedPendulum-v5")
    args = ap.parse_args()

    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger

    torch.set_num_threads(1)
    env = gym.make(args.env)
    model = PPO("MlpPolicy", env, n_steps=512, batch_size=64, n_epochs=4, seed=0, device="cpu", verbose=0)
    model.set_logger(Logger(None, []))     # SB3's default makes an empty /tmp/SB3-<time> dir every learn()
    model.learn(512)
    print(f"ready {os.getpid()}", flush=True)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        model.learn(2048, reset_num_timesteps=False)
    sys.exit(0)


if __name__ == "__main__":
    main()
