"""Built-in operation rules for skrl's agents and env wrappers (pure Python, the rules' Matcher).

skrl 2.1's trainer interleaves the phases in one loop (act, env step, record, post_interaction ->
update); before these rules a PPO on CartPole read 77% of its time as `<none>`."""

from __future__ import annotations

import pytest

from rlscope_top.collect.op_rules import BUILTIN, SIMULATION, Matcher

SKRL = "/v/lib/python3.12/site-packages/skrl"
LOOP = f"{SKRL}/trainers/torch/sequential.py:SequentialTrainer.train"


@pytest.mark.parametrize("frames,op", [
    ([f"{SKRL}/agents/torch/ppo/ppo.py:PPO.act"], "inference"),
    ([f"{SKRL}/agents/torch/dqn/dqn.py:DQN.act"], "inference"),
    ([f"{SKRL}/agents/torch/base.py:Agent.post_interaction", f"{SKRL}/agents/torch/ppo/ppo.py:PPO.update"], "train"),
    ([f"{SKRL}/envs/wrappers/torch/gymnasium_envs.py:GymnasiumWrapper.step"], SIMULATION),
    ([f"{SKRL}/envs/wrappers/jax/gymnasium_envs.py:GymnasiumWrapper.reset"], SIMULATION),
    # the wrapper calls gymnasium's vector env: the innermost frame names it, simulation either way
    ([f"{SKRL}/envs/wrappers/torch/gymnasium_envs.py:GymnasiumWrapper.step",
      "/v/lib/python3.12/site-packages/gymnasium/vector/sync_vector_env.py:SyncVectorEnv.step"], SIMULATION),
    # torch's backward inside the agent's update is the innermost operation
    ([f"{SKRL}/agents/torch/ppo/ppo.py:PPO.update", "/v/lib/python3.12/site-packages/torch/_tensor.py:Tensor.backward"],
     "backward"),
])
def test_skrl_phases_are_named(frames, op):
    m = Matcher(BUILTIN)
    got, held = m.match([LOOP, *frames])
    assert got == op
    assert op in held


def test_skrl_bookkeeping_and_models_are_not_operations():
    m = Matcher(BUILTIN)
    assert m.match([LOOP, f"{SKRL}/agents/torch/ppo/ppo.py:PPO.record_transition"]) == (None, set())
    # a model's own act (the value model inside record_transition) is not the agent's act
    assert m.match([LOOP, f"{SKRL}/models/torch/deterministic.py:DeterministicMixin.act"]) == (None, set())
    assert m.match(["/w/my_agent.py:update"]) == (None, set())
