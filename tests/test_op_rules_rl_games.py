"""Built-in operation rules for rl-games' PPO and SAC loops (pure Python, the rules' Matcher).

rl-games 1.6.5 times each epoch itself: the env steps (``env_step``), the rollout
(``play_steps``) and the update (the rest of ``train_epoch``). Before these rules everything but
envpool's own step read as ``<none>`` (68% of a PPO session on CartPole). With them, default mode
read each part within 0.8 pp of rl-games' own timers (bench/rl_games_ops.py; docs/accuracy.md,
"rl-games' PPO, tried as a new user")."""

from __future__ import annotations

import pytest

from rlscope_top.collect.op_rules import BUILTIN, SIMULATION, Matcher

RG = "/v/lib/python3.11/site-packages/rl_games"
EPOCH = f"{RG}/common/a2c_common.py:DiscreteA2CBase.train_epoch"
PLAY = f"{RG}/common/a2c_common.py:A2CBase.play_steps"
TORCH = "/v/lib/python3.11/site-packages/torch"


@pytest.mark.parametrize("frames,op", [
    ([EPOCH], "train"),                                     # the update: the epoch outside play_steps
    ([EPOCH, f"{RG}/algos_torch/a2c_discrete.py:DiscreteA2CAgent.calc_gradients"], "train"),
    ([EPOCH, f"{RG}/algos_torch/a2c_discrete.py:DiscreteA2CAgent.calc_gradients",
      f"{TORCH}/_tensor.py:Tensor.backward"], "backward"),
    ([EPOCH, f"{TORCH}/optim/adam.py:Adam.step"], "optimizer_step"),
    ([EPOCH, PLAY], "collect_rollouts"),
    ([EPOCH, f"{RG}/common/a2c_common.py:A2CBase.play_steps_rnn"], "collect_rollouts"),
    ([EPOCH, PLAY, f"{RG}/common/a2c_common.py:A2CBase.get_action_values"], "inference"),
    ([EPOCH, PLAY, f"{RG}/algos_torch/a2c_discrete.py:DiscreteA2CAgent.get_masked_action_values"], "inference"),
    ([EPOCH, PLAY, f"{RG}/common/a2c_common.py:A2CBase.get_values"], "inference"),
    ([EPOCH, PLAY, f"{RG}/common/a2c_common.py:A2CBase.env_step"], SIMULATION),
    ([EPOCH, PLAY, f"{RG}/common/a2c_common.py:A2CBase.env_step", f"{RG}/envs/envpool.py:Envpool.step"],
     SIMULATION),
    ([f"{RG}/common/a2c_common.py:A2CBase.env_reset"], SIMULATION),
    # SAC: play_steps steps the env and updates in the same loop
    ([f"{RG}/algos_torch/sac_agent.py:SACAgent.train_epoch", f"{RG}/algos_torch/sac_agent.py:SACAgent.play_steps",
      f"{RG}/algos_torch/sac_agent.py:SACAgent.update"], "train"),
    ([f"{RG}/algos_torch/sac_agent.py:SACAgent.play_steps", f"{RG}/algos_torch/sac_agent.py:SACAgent.act"],
     "inference"),
    ([f"{RG}/algos_torch/sac_agent.py:SACAgent.play_steps", f"{RG}/algos_torch/sac_agent.py:SACAgent.env_step"],
     SIMULATION),
])
def test_rl_games_phases_are_named(frames, op):
    m = Matcher(BUILTIN)
    got, held = m.match(frames)
    assert got == op
    assert op in held


def test_rl_games_bookkeeping_is_not_an_operation():
    m = Matcher(BUILTIN)
    runner = f"{RG}/torch_runner.py:Runner.run_train"
    assert m.match([runner, f"{RG}/common/a2c_common.py:A2CBase.write_stats"]) == (None, set())
    # a function of one's own named like rl-games' is not rl-games'
    assert m.match(["/w/train.py:play_steps"]) == (None, set())
    assert m.match(["/w/agent.py:update"]) == (None, set())
