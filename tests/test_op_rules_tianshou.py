"""Built-in operation rules for tianshou's vector envs (pure Python, the rules' Matcher).

With a SubprocVectorEnv the main process steps no env itself: it waits in the vector env's
`step` for its workers. Before this rule that wait read as `<none>` and as waiting (0.9 s of a
12 s DQN session); SB3's `step_wait` has long been simulation. Now it is simulation too: the
main process's Sim read 2.1 s of 10 s (docs/accuracy.md, "tianshou's vector env")."""

from __future__ import annotations

import pytest

from rlscope_top.collect.op_rules import BUILTIN, SIMULATION, Matcher

TS = "/v/lib/python3.11/site-packages/tianshou"
LOOP = f"{TS}/data/collector.py:Collector._collect"


@pytest.mark.parametrize("frames", [
    # SubprocVectorEnv: the main process waits on its workers' pipes inside step
    [f"{TS}/env/venvs.py:BaseVectorEnv.step", f"{TS}/env/worker/subproc.py:SubprocEnvWorker.recv"],
    [f"{TS}/env/venvs.py:BaseVectorEnv.reset"],
    # DummyVectorEnv: gymnasium's step inside it names it, simulation either way
    [f"{TS}/env/venvs.py:BaseVectorEnv.step", f"{TS}/env/worker/dummy.py:DummyEnvWorker.send",
     "/v/lib/python3.11/site-packages/gymnasium/wrappers/common.py:TimeLimit.step"],
])
def test_tianshou_vector_env_steps_are_simulation(frames):
    got, held = Matcher(BUILTIN).match([LOOP, *frames])
    assert got == SIMULATION and SIMULATION in held


def test_tianshou_collector_and_other_vector_env_calls_are_not_simulation():
    m = Matcher(BUILTIN)
    assert m.match([LOOP]) == (None, set())
    assert m.match([LOOP, f"{TS}/env/venvs.py:BaseVectorEnv.get_env_attr"]) == (None, set())
    assert m.match(["/w/my_envs/venvs.py:step"]) == (None, set())
