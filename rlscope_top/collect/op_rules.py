"""Rules that map sampled Python stacks to operations (pure Python).

A rule is ``NAME=PATTERN``. PATTERN is a shell glob matched against each frame as
``/path/to/file.py:function``, where function is the qualified name
(``Class.method``) or the bare one; a pattern without ``:`` matches the function
name alone. The innermost matching frame names the operation (nested operations are
flattened, as with annotations); at the same frame, user rules win over built-in
ones.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re

from ..errors import UsageError

SIMULATION = "simulation"


@dataclasses.dataclass(frozen=True)
class Rule:
    """One operation rule."""

    name: str
    pattern: str
    kind: str = ""           # "simulation": the operation's Python time counts as simulation
    user: bool = False


def _r(name: str, kind: str = "", *patterns: str) -> list[Rule]:
    return [Rule(name, p, kind) for p in patterns]


BUILTIN: list[Rule] = [
    # gymnasium / gym environments and vector envs, SB3 vec envs: simulation
    *_r(SIMULATION, SIMULATION, "*/gymnasium/*:step", "*/gymnasium/*:reset", "*/gymnasium/*:step_wait",
        "*/gym/*:step", "*/gym/*:reset", "*/stable_baselines3/common/vec_env/*:step",
        "*/stable_baselines3/common/vec_env/*:step_wait", "*/stable_baselines3/common/vec_env/*:reset",
        # envpool's Python API (envpool/python/envpool.py, protocol.py, lax.py): the C++ pool
        # steps while send/recv wait, so the calling thread's time there is simulation
        "*/envpool/python/*:step", "*/envpool/python/*:send", "*/envpool/python/*:recv",
        "*/envpool/python/*:reset",
        # torchrl: its env wrappers' step (tensordicts, transforms, specs) around the simulator
        "*/torchrl/envs/*:step", "*/torchrl/envs/*:step_and_maybe_reset", "*/torchrl/envs/*:reset",
        # skrl: its env wrappers' step/reset (tensors to numpy and back) around the env
        "*/skrl/envs/wrappers/*:step", "*/skrl/envs/wrappers/*:reset",
        # tianshou's vector envs: with SubprocVectorEnv the main process waits here for its workers
        "*/tianshou/env/venvs.py:step", "*/tianshou/env/venvs.py:reset",
        # rl-games: its agents' env_step/env_reset (actions to numpy, results to tensors) around
        # the vec env; rl-games' own `step_time` is this call
        "*/rl_games/*:env_step", "*/rl_games/*:env_reset"),
    # torch DataLoader: a worker process's loop, and the main process waiting for the next batch
    *_r("data_loading", "", "*/torch/utils/data/_utils/worker.py:_worker_loop",
        "*/torch/utils/data/dataloader.py:__next__"),
    # stable-baselines3 algorithm phases
    *_r("collect_rollouts", "", "*/stable_baselines3/*:collect_rollouts", "*/torchrl/collectors/*:rollout",
        "*/rl_games/*:play_steps", "*/rl_games/*:play_steps_rnn"),
    # rl-games: an epoch is play_steps then the update; SAC updates inside play_steps (`update`)
    *_r("train", "", "*/stable_baselines3/*:train", "*/skrl/agents/*:update", "*/d3rlpy/algos/*:update",
        "*/rl_games/*:train_epoch", "*/rl_games/algos_torch/sac_agent.py:update"),
    *_r("inference", "", "*/stable_baselines3/*:predict", "*/skrl/agents/*:act",
        # d3rlpy: an algorithm's predict/sample_action, and the explorer that calls them
        "*/d3rlpy/algos/*:predict", "*/d3rlpy/algos/*:sample_action", "*/d3rlpy/algos/qlearning/explorers.py:sample",
        # rl-games: the policy's forward in a rollout (values for the last step too), SAC's act
        "*/rl_games/*:get_action_values", "*/rl_games/*:get_masked_action_values", "*/rl_games/*:get_values",
        "*/rl_games/algos_torch/sac_agent.py:act", "*/rl_games/algos_torch/players.py:get_action",
        # CleanRL-style agents
        "get_action_and_value", "get_action", "get_value"),
    # a replay buffer's minibatch, drawn outside the update (d3rlpy's fit_online; SB3 draws inside train)
    *_r("replay_sample", "", "*/d3rlpy/dataset/*:sample_transition_batch"),
    # torch autograd and optimizers
    *_r("backward", "", "*/torch/_tensor.py:backward", "*/torch/autograd/__init__.py:backward"),
    *_r("optimizer_step", "", "*/torch/optim/*:step"),
    # JAX: tracing, compiling and the Python dispatch path of jitted calls; not the modules'
    # own code (`<module>`): importing jax is not jit (it read 8% of a torch-only tianshou run)
    *_r("jax_jit", "", "*/jax/_src/pjit.py:[!<]*", "*/jax/_src/dispatch.py:[!<]*"),
]


def parse(spec: str) -> Rule:
    """Parse a ``--op NAME=PATTERN`` argument.

    Raises:
        UsageError: with a hint, for a malformed rule.
    """
    name, sep, pattern = spec.partition("=")
    name, pattern = name.strip(), pattern.strip()
    if not sep or not name or not pattern:
        raise UsageError(f"bad --op rule {spec!r}: expected NAME=PATTERN",
                         hint="e.g. --op rollout='*/train.py:collect' or --op update=update_policy")
    name, colon, kind = name.partition(":")
    if colon and kind != SIMULATION or not name:
        raise UsageError(f"bad --op rule {spec!r}: the only kind after NAME: is 'simulation'",
                         hint="e.g. --op env:simulation=step_env, or --op rollout=collect_batch")
    return Rule(name, pattern, kind, user=True)


class Matcher:
    """Finds the operation of a stack; caches per frame (stacks repeat a lot)."""

    def __init__(self, rules: list[Rule]):
        ordered = [r for r in rules if r.user] + [r for r in rules if not r.user]
        self._rules = [(r, re.compile(fnmatch.translate(r.pattern)), ":" in r.pattern) for r in ordered]
        self._cache: dict[str, Rule | None] = {}
        self.kinds = {r.name: r.kind for r in reversed(ordered)}

    def frame_rule(self, frame: str) -> Rule | None:
        """The rule a frame (``path:function``) matches, if any."""
        try:
            return self._cache[frame]
        except KeyError:
            pass
        path, _, qual = frame.rpartition(":")
        name = qual.rsplit(".", 1)[-1]            # austin gives qualnames (Class.method) on 3.11+
        full_forms = (frame, f"{path}:{name}") if name != qual else (frame,)
        hit = next((r for r, rx, full in self._rules
                    if any(rx.match(x) for x in (full_forms if full else (qual, name)))), None)
        self._cache[frame] = hit
        return hit

    def match(self, frames: list[str]) -> tuple[str | None, set[str]]:
        """(innermost operation, every operation on the stack) for frames outermost first."""
        inner, seen = None, set()
        for f in frames:
            r = self.frame_rule(f)
            if r is not None:
                inner = r.name
                seen.add(r.name)
        return inner, seen
