"""Issue 4 on real eBPF: annotated operations against a known-answer target."""

from __future__ import annotations

import json
import signal
import time

import pytest

from support import load_summary

pytestmark = pytest.mark.ebpf
CYCLES, INFER, TRAIN = 101, 7, 5     # primes: counts that cannot come out right by accident
SIZE = 192      # ~0.45 ms matmuls: a few us of per-call correction error is ~1 pp, not 4 (CI, 128)
OPS = ("rollout", "simulation", "inference", "train")


def _truth(items: list) -> dict:
    """Per operation: exclusive seconds and the category split the target measured itself."""
    op = {n: 0 for n in OPS}
    backend = {n: 0 for n in OPS}
    native = {n: 0 for n in OPS}
    for what, name, t0, t1 in items:
        d = t1 - t0
        if what == "op":
            op[name] += d
            if name == "simulation":
                op["rollout"] -= d          # flattened: the nested operation owns its time
        elif what == "backend":
            backend[name] += d
        elif what == "native":
            native[name] += d
    out = {}
    for n in OPS:
        out[n] = {"wall": op[n] / 1e9, "backend": backend[n] / op[n], "native": native[n] / op[n],
                  "python": 1 - (backend[n] + native[n]) / op[n]}
    return out


@pytest.fixture
def annotated_run(ebpf, target, monitor, tmp_path, simlib, calibration_file):
    go, done, truth = tmp_path / "go", tmp_path / "done", tmp_path / "truth.json"
    t = target("annotated_ops.py", simlib, go, done, truth, "--cycles", CYCLES, "--infer", INFER,
               "--train", TRAIN, "--size", SIZE)
    m, summary = monitor(t.pid, "--sim-lib", f"{simlib}:sim_step", "--max-overhead", "100",
                         env={"RLSCOPE_CALIBRATION": calibration_file})
    go.touch()
    deadline = time.monotonic() + 120
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists(), t.stderr_text
    assert m.finish(signal.SIGINT, timeout=60) == 0, m.stderr_text
    return load_summary(summary), _truth(json.loads(truth.read_text())), m


def test_annotated_operations(annotated_run):
    """Transitions per operation exact; time shares within 3 pp, category shares within 4 pp
    (3 pp on the Intel VMs; 4.03 pp once in CI on the noisy AMD EPYC VM with 128x128 matmuls,
    hence 192x192 now: docs/accuracy.md)."""
    s, truth, m = annotated_run
    ops = s["operations"]
    assert "is annotated" in m.stderr_text
    assert ops["inference"]["transitions"]["python->backend"] == CYCLES * INFER
    assert ops["train"]["transitions"]["python->backend"] == CYCLES * TRAIN
    assert ops["simulation"]["transitions"]["python->simulator"] == CYCLES
    assert ops["rollout"]["transitions"]["python->backend"] == 0
    assert ops["rollout"]["transitions"]["python->simulator"] == 0
    assert ops["<none>"]["transitions"]["python->backend"] == 0   # nothing ran outside the operations
    assert all(ops[n]["source"] == "annotated" for n in OPS)
    op_total = sum(ops[n]["wall_s"] for n in OPS)
    truth_total = sum(truth[n]["wall"] for n in OPS)
    for n in OPS:
        assert abs(ops[n]["wall_s"] / op_total - truth[n]["wall"] / truth_total) <= 0.03, (n, ops[n], truth[n])
    for n in ("rollout", "inference", "train"):
        sh = ops[n]["shares"]
        assert abs(sh["backend"] - truth[n]["backend"]) <= 0.04, (n, sh, truth[n])
        assert abs(sh["python"] - truth[n]["python"]) <= 0.04, (n, sh, truth[n])
    # simulation kind: its Python time counts as simulation; the Python/native split stays
    sim = ops["simulation"]
    assert sim["shares"]["simulator"] == pytest.approx(1.0) and sim["python_s"] == 0.0
    split = sim["simulation_split"]
    ours = split["native_s"] / (split["native_s"] + split["python_s"])
    assert abs(ours - truth["simulation"]["native"]) <= 0.03, (split, truth["simulation"])
    print(json.dumps({n: {"ours": {"share": ops[n]["wall_s"] / op_total, **ops[n]["shares"]},
                          "truth": {"share": truth[n]["wall"] / truth_total, **truth[n]}} for n in OPS}))
