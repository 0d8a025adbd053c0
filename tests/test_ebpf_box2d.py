"""Issue 17's probe-set acceptance on real eBPF: Box2D (one catalog entry, probes/catalog.py
BOX2D) seen in gymnasium's LunarLander, a program nobody here wrote."""

from __future__ import annotations

import json
import time

import pytest

from support import load_summary, require_modules, stop, wait_file

pytestmark = pytest.mark.ebpf


@pytest.fixture
def box2d_installed():
    """Box2D and gymnasium's Box2D envs (the `test` extra)."""
    require_modules(("Box2D",), "RLSCOPE_REQUIRE_RL", "test")


def test_box2d_world_steps_are_simulator_calls_known_count(ebpf, box2d_installed, target, monitor, tmp_path):
    """1009 env steps (a prime) plus the resets' own step: every b2World.Step is one Simulator
    call entered from Python, the probe set attaches by its catalog entry alone, and its native
    time is within the body's wall time."""
    go, done, truth = tmp_path / "go", tmp_path / "done", tmp_path / "truth.json"
    t = target("box2d_lander.py", 1009, go, done, truth)
    m, summary = monitor(t.pid)
    t0 = time.monotonic()
    go.touch()
    wait_file(done, 120)
    wall = time.monotonic() - t0
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    s, want = load_summary(summary), json.loads(truth.read_text())["world_steps"]
    assert want >= 1009
    assert "box2d" in s["probes"]["attached"], s["probes"]
    assert s["probes"]["hits"]["b2World.Step"] == want
    assert s["calls"]["simulator"] == want
    assert s["transitions"]["python->simulator"] == want
    assert s["sources"]["simulator_s"] == "exact"
    # Simulator also holds the Python of env.step (the `simulation` operation's rule), whose
    # sampled end can run into the idle time after the body: the native part is b2World.Step
    assert 0 < s["simulation_split"]["native_s"] < wall
