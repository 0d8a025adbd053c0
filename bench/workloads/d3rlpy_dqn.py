"""d3rlpy 2.8 online DQN on CartPole-v1, as d3rlpy's online tutorial writes it (device cpu, no
evaluation env), for bench/d3rlpy_ops.py. Epochs of 1,000 steps: d3rlpy writes its own mean
time per step of each part (inference, environment_step, sample_batch, algorithm_update, step)
to d3rlpy_logs/<run>/time_*.csv at each epoch's end, the known answer for the operations.

d3rlpy pins gymnasium==1.0.0 (SB3 here has 1.4), so it runs from a virtual environment of its own:
    python3 -m venv /tmp/d3venv && /tmp/d3venv/bin/pip install torch==2.13.0 d3rlpy==2.8.1

usage: d3rlpy_dqn.py LOGDIR     (run until killed)
"""

import sys

import d3rlpy
import gymnasium as gym

env = gym.make("CartPole-v1")
dqn = d3rlpy.algos.DQNConfig(batch_size=32, learning_rate=2.5e-4, target_update_interval=100).create(device="cpu:0")
buffer = d3rlpy.dataset.create_fifo_replay_buffer(limit=100_000, env=env)
explorer = d3rlpy.algos.ConstantEpsilonGreedy(0.3)
print("ready", flush=True)
dqn.fit_online(env, buffer, explorer, n_steps=10**9, n_steps_per_epoch=1000, update_start_step=1000,
               save_interval=10**9, show_progress=False, logger_adapter=d3rlpy.logging.FileAdapterFactory(sys.argv[1]))
