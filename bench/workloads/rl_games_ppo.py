"""rl-games 1.6.5 PPO (a2c_discrete) on CartPole-v1, for bench/rl_games_ops.py: the library's own
ppo_cartpole.yaml (16 actors, horizon 32, 4 mini-epochs, an MLP of 32x32, 4 torch threads) with
two changes a CPU-only user makes: the envs come from envpool in-process (the shipped config asks
for Ray actors, not installed here) and the device is cpu.

rl-games times each epoch itself: ``train_epoch`` returns the env steps' time (``step_time``, the
calls to ``env_step``), the rollout's (``play_time``, ``play_steps``) and the update's
(``update_time``). A shim around it appends them, with the epoch's end on CLOCK_MONOTONIC, to
TIMES as ``end_ns step_s play_s update_s total_s``: the known answer of a session. The program
is otherwise unchanged.

rl-games pins psutil<6 (the test extra has 7), so it runs from a virtual environment of its own:
    python3 -m venv /tmp/rgvenv && /tmp/rgvenv/bin/pip install torch==2.13.0 rl-games==1.6.5 envpool==1.2.5

usage: rl_games_ppo.py TIMES RUNDIR [TORCH_THREADS]     (run until killed; the config's 4 threads by default)
"""

import sys
import time

from rl_games.common import a2c_common
from rl_games.torch_runner import Runner

times_path, rundir = sys.argv[1], sys.argv[2]
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
log = open(times_path, "a", buffering=1)
train_epoch = a2c_common.DiscreteA2CBase.train_epoch


def timed(self):
    out = train_epoch(self)
    step_s, play_s, update_s, total_s = out[:4]
    log.write(f"{time.monotonic_ns()} {step_s:.9f} {play_s:.9f} {update_s:.9f} {total_s:.9f}\n")
    return out


a2c_common.DiscreteA2CBase.train_epoch = timed

MLP = {"units": [32, 32], "activation": "relu", "initializer": {"name": "default"}, "regularizer": {"name": "None"}}
CONFIG = {
    "reward_shaper": {"scale_value": 0.1}, "normalize_advantage": True, "gamma": 0.99, "tau": 0.9,
    "learning_rate": 2e-4, "name": "cartpole_envpool", "score_to_win": 10**9, "grad_norm": 1.0,
    "entropy_coef": 0.01, "truncate_grads": True, "e_clip": 0.2, "clip_value": True, "num_actors": 16,
    "horizon_length": 32, "minibatch_size": 64, "mini_epochs": 4, "critic_coef": 1, "lr_schedule": None,
    "kl_threshold": 0.008, "normalize_input": False, "save_best_after": 10**9, "save_frequency": 0,
    "max_epochs": 10**9, "multi_gpu": False, "train_dir": rundir,
    # the two changes: envpool's CartPole in-process, and the CPU
    "env_name": "envpool", "env_config": {"env_name": "CartPole-v1", "env_type": "gymnasium"}, "device": "cpu",
}
PARAMS = {"seed": 5, "torch_threads": threads, "algo": {"name": "a2c_discrete"}, "model": {"name": "discrete_a2c"},
          "load_checkpoint": False, "network": {"name": "actor_critic", "separate": True,
                                                "space": {"discrete": None}, "mlp": MLP},
          "config": CONFIG}

runner = Runner()
runner.load({"params": PARAMS})
print("ready", flush=True)
runner.run({"train": True, "play": False})
