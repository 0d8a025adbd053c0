"""Built-in operation rules for envpool's Python API (pure Python, the rules' Matcher)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from rlscope_top.collect.op_rules import BUILTIN, SIMULATION, Matcher

SITE = "/v/lib/python3.11/site-packages"
LOOP = "/w/train.py:<module>"


@pytest.mark.parametrize("frame", [
    f"{SITE}/envpool/python/envpool.py:EnvPoolMixin.step",
    f"{SITE}/envpool/python/envpool.py:EnvPoolMixin.send",
    f"{SITE}/envpool/python/envpool.py:EnvPoolMixin.recv",
    f"{SITE}/envpool/python/gymnasium_envpool.py:GymnasiumEnvPoolMixin.reset",
    f"{SITE}/envpool/python/lax.py:XlaMixin.xla.<locals>.recv",
])
def test_envpool_step_send_recv_are_simulation(frame):
    m = Matcher(BUILTIN)
    assert m.match([LOOP, frame]) == (SIMULATION, {SIMULATION})
    assert m.kinds[SIMULATION] == SIMULATION


def test_envpool_step_inside_a_phase_is_the_innermost_operation():
    m = Matcher(BUILTIN)
    sb3 = f"{SITE}/stable_baselines3/common/on_policy_algorithm.py:OnPolicyAlgorithm.collect_rollouts"
    frames = [LOOP, sb3, f"{SITE}/envpool/python/envpool.py:EnvPoolMixin.step",
              f"{SITE}/envpool/python/envpool.py:EnvPoolMixin.recv"]
    assert m.match(frames) == (SIMULATION, {SIMULATION, "collect_rollouts"})


def test_other_envpool_functions_and_other_step_functions_are_not_simulation():
    m = Matcher(BUILTIN)
    assert m.match([f"{SITE}/envpool/python/envpool.py:EnvPoolMixin.render"]) == (None, set())
    assert m.match([f"{SITE}/envpool/registration.py:make"]) == (None, set())
    assert m.match(["/w/my_envpool_wrapper.py:step"]) == (None, set())


def test_rules_match_the_installed_envpool_source():
    """The paths the sampler sees come from the real files: the methods must live where the rules look."""
    spec = importlib.util.find_spec("envpool")
    if spec is None:
        pytest.skip("envpool not installed (pip install -e '.[test]')")
    base = os.path.join(os.path.dirname(spec.origin), "python", "envpool.py")
    src = open(base).read()
    m = Matcher(BUILTIN)
    for name in ("step", "send", "recv", "reset"):
        assert f"    def {name}(" in src, name
        assert m.match([f"{base}:EnvPoolMixin.{name}"])[0] == SIMULATION, name
