"""A reference RL training run for bench/overhead.py: fixed seed, fixed steps, CPU.

Prints `ready PID` once the model is built and warm, waits for a line on stdin,
then times model.learn(STEPS) and prints `time SECONDS`.
usage: sb3_train.py ALGO ENV STEPS [--torch-profiler] [--device cuda]
"""

import sys
import time

import gymnasium as gym
import torch
from stable_baselines3 import PPO, SAC, TD3

algo, env_id, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
cls = {"ppo": PPO, "sac": SAC, "td3": TD3}[algo]
kw = {"n_steps": 1024, "batch_size": 64} if algo == "ppo" else {"learning_starts": 100, "buffer_size": 20000}
device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
model = cls("MlpPolicy", gym.make(env_id), seed=0, device=device, verbose=0, **kw)
model.learn(200 if algo != "ppo" else 1024)
print(f"ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
post = 0.0
if "--torch-profiler" in sys.argv:
    from torch.profiler import ProfilerActivity, profile
    prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else []))
    prof.__enter__()
    model.learn(steps, reset_num_timesteps=False)
    elapsed = time.perf_counter() - t0
    t1 = time.perf_counter()
    prof.__exit__(None, None, None)      # stops tracing and builds the event list
    post = time.perf_counter() - t1
else:
    model.learn(steps, reset_num_timesteps=False)
    elapsed = time.perf_counter() - t0
print(f"time {elapsed:.4f} post {post:.4f}", flush=True)
