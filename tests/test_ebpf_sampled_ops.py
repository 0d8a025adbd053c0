"""Issue 4, zero-change path on real eBPF: unannotated SB3 PPO, attached mid-run."""

from __future__ import annotations

import bisect
import json
import signal
import time

import pytest

from support import load_summary

pytestmark = pytest.mark.ebpf


def _at(snaps: list, t: int, idx: int) -> dict:
    """The target's cumulative figures at the last snapshot before t."""
    i = max(0, bisect.bisect_right([s[0] for s in snaps], t) - 1)
    return snaps[i][idx]


def _window_shares(snaps: list, window: dict, idx: int) -> dict:
    t0, t1 = window["t0_monotonic_ns"], window["t1_monotonic_ns"]
    a, b = _at(snaps, t0, idx), _at(snaps, t1, idx)
    return {k: (v - a.get(k, 0)) / (t1 - t0) for k, v in b.items()}


def test_sb3_ppo_operations_match_in_process_measurement(ebpf, target, monitor, tmp_path):
    out = tmp_path / "inproc.json"
    t = target("sb3_ops.py", out)
    time.sleep(3)                                    # attach mid-run
    m, summary = monitor(t.pid, "--duration", "12")
    assert m.finish(timeout=120) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    snaps = json.loads(out.read_text())
    flat = _window_shares(snaps, s["window"], 1)
    incl = _window_shares(snaps, s["window"], 2)
    ops = s["operations"]
    assert {"collect_rollouts", "train", "simulation"} <= set(ops), ops.keys()
    for n in ("collect_rollouts", "train", "simulation", "backward", "optimizer_step"):
        assert ops[n]["source"] == "sampled"
        # 4 pp (was 5 with austin, whose torn samples biased simulation ~2.6 pp low); the
        # kernel sampler's largest error in 11 runs on 2026-11-25 was 2.1 pp (train)
        assert abs(ops[n]["share"] - flat[n]) <= 0.04, (n, {k: (v.get("share"), flat.get(k)) for k, v in ops.items()},
                                                         s["sampler"], [x for x in s["notes"] if "sampler" in x])
    for n in ("collect_rollouts", "train"):
        assert abs(ops[n]["inclusive_share"] - incl[n]) <= 0.05, (n, ops[n]["inclusive_share"], incl)
    assert ops["simulation"]["kind"] == "simulation" and ops["simulation"]["simulator_s"] > 0
    assert ops["collect_rollouts"]["transitions"]["python->backend"] > 0   # policy inference inside it
    smp = s["sampler"]
    # the default sampler reads stacks in the kernel, the thread stopped: none is torn (austin
    # drops ~15% here). A frame page the tick cannot read (not resident) cuts a rare one short.
    assert smp["tool"] == "kernel" and smp["invalid"] <= 0.01 * smp["samples"], smp
    assert smp["hz"] <= 250 and smp["samples"] > 300 and smp["cpu_s"] is not None
    print(json.dumps({n: [ops[n]["share"], flat.get(n), ops[n].get("inclusive_share"), incl.get(n)]
                      for n in ops if n in flat}))
