"""Built-in operation rules for d3rlpy's online loop (pure Python, the rules' Matcher).

d3rlpy 2.8's ``fit_online`` times each part of a step itself (``time_inference``,
``time_environment_step``, ``time_sample_batch``, ``time_algorithm_update``); before these rules
all but the env step read as ``<none>`` (71% of a DQN session on CartPole). With them, default
mode read 9.7 / 1.0 / 13.9 / 71.5% against d3rlpy's own 10.0 / 1.0 / 15.0 / 72.2%
(docs/accuracy.md, "d3rlpy's online DQN, tried as a new user")."""

from __future__ import annotations

import pytest

from rlscope_top.collect.op_rules import BUILTIN, SIMULATION, Matcher

D3 = "/v/lib/python3.11/site-packages/d3rlpy"
LOOP = f"{D3}/algos/qlearning/base.py:QLearningAlgoBase.fit_online"
TORCH = "/v/lib/python3.11/site-packages/torch"


@pytest.mark.parametrize("frames,op", [
    ([f"{D3}/algos/qlearning/explorers.py:ConstantEpsilonGreedy.sample",
      f"{D3}/algos/qlearning/base.py:QLearningAlgoBase.predict"], "inference"),
    ([f"{D3}/algos/qlearning/explorers.py:LinearDecayEpsilonGreedy.sample"], "inference"),
    ([f"{D3}/algos/qlearning/base.py:QLearningAlgoBase.sample_action",
      f"{D3}/algos/qlearning/base.py:QLearningAlgoImplBase.sample_action"], "inference"),
    ([f"{D3}/dataset/replay_buffer.py:ReplayBuffer.sample_transition_batch"], "replay_sample"),
    ([f"{D3}/algos/qlearning/base.py:QLearningAlgoBase.update",
      f"{D3}/algos/qlearning/base.py:QLearningAlgoImplBase.update",
      f"{D3}/algos/qlearning/torch/dqn_impl.py:DQNImpl.inner_update"], "train"),
    # torch's backward and the optimizer inside the update are the innermost operations
    ([f"{D3}/algos/qlearning/base.py:QLearningAlgoBase.update", f"{TORCH}/_tensor.py:Tensor.backward"], "backward"),
    ([f"{D3}/algos/qlearning/base.py:QLearningAlgoBase.update", f"{TORCH}/optim/adam.py:Adam.step"],
     "optimizer_step"),
    # the env it steps is gymnasium's
    (["/v/lib/python3.11/site-packages/gymnasium/wrappers/common.py:TimeLimit.step"], SIMULATION),
])
def test_d3rlpy_phases_are_named(frames, op):
    m = Matcher(BUILTIN)
    got, held = m.match([LOOP, *frames])
    assert got == op
    assert op in held


def test_d3rlpy_bookkeeping_is_not_an_operation():
    m = Matcher(BUILTIN)
    assert m.match([LOOP, f"{D3}/dataset/replay_buffer.py:ReplayBuffer.append"]) == (None, set())
    assert m.match([LOOP, f"{D3}/logging/logger.py:D3RLPyLogger.measure_time"]) == (None, set())
    # a replay buffer of one's own is not d3rlpy's
    assert m.match(["/w/train.py:sample_transition_batch"]) == (None, set())
