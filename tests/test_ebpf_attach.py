"""Real eBPF on real target processes: known counts, known splits, late loads, errors."""

from __future__ import annotations

import json
import signal
import time

import pytest

from support import load_summary, stop, wait_file
from truth import truth_shares

pytestmark = pytest.mark.ebpf


def test_known_count_1009_torch_mm(ebpf, target, monitor, tmp_path):
    go, done = tmp_path / "go", tmp_path / "done"
    t = target("torch_count.py", 1009, go, done)
    m, summary = monitor(t.pid)
    go.touch()
    wait_file(done)
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    assert s["transitions"]["python->backend"] == 1009
    assert s["calls"]["backend"] == 1009
    assert s["operations"]["<all>"]["calls"]["backend"] == 1009
    assert s["sources"]["calls.backend"] == "exact"


def test_known_split_python_simulator_torch(ebpf, target, monitor, tmp_path, simlib):
    truth_path = tmp_path / "truth.json"
    t = target("known_split.py", simlib, truth_path, "--py-us", 10000, "--sim-us", 6000, "--ops", 40)
    m, summary = monitor(t.pid, "--sim-lib", f"{simlib}:sim_step,sim_reset", "--duration", "6")
    assert m.finish(timeout=60) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    truth = truth_shares(json.loads(truth_path.read_text()), s["window"])
    ours = {c: s["totals"][f"{c}_s"] for c in ("python", "simulator", "backend")}
    tot_ours = sum(ours.values())
    for c in ours:
        assert abs(ours[c] / tot_ours - truth[c]) <= 0.03, (c, ours, truth)
    assert s["calls"]["simulator"] > 0 and s["transitions"]["python->simulator"] == s["calls"]["simulator"]


def test_libcudart_dlopened_after_attach_counts_23_launches(ebpf, target, monitor, tmp_path):
    f = {k: tmp_path / k for k in ("go_load", "loaded", "go_call", "done")}
    t = target("cudart_late.py", 23, f["go_load"], f["loaded"], f["go_call"], f["done"])
    m, summary = monitor(t.pid)
    f["go_load"].touch()
    wait_file(f["loaded"])
    m.wait_line("probes for cudart", stream="stderr", timeout=10)
    f["go_call"].touch()
    wait_file(f["done"])
    assert f["done"].read_text() == "35"   # cudaErrorInsufficientDriver: the call did run
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    assert s["calls"]["cuda_api"] == 23
    assert s["transitions"]["python->cuda_api"] == 23
    assert s["probes"]["hits"]["cudaLaunchKernel"] == 23


def test_torch_imported_after_attach_is_picked_up(ebpf, target, monitor, tmp_path):
    f = {k: tmp_path / k for k in ("go_import", "imported", "go_call", "done")}
    t = target("late_torch.py", 101, f["go_import"], f["imported"], f["go_call"], f["done"])
    m, summary = monitor(t.pid)
    f["go_import"].touch()
    wait_file(f["imported"])
    m.wait_line("probes for torch", stream="stderr", timeout=10)
    f["go_call"].touch()
    wait_file(f["done"])
    time.sleep(0.5)
    assert stop(m) == 0, m.stderr_text
    s = load_summary(summary)
    assert s["calls"]["backend"] >= 101
    assert "torch" in s["probes"]["attached"]


def test_torch_cpp_errors_do_not_crash_the_target(ebpf, target, monitor, tmp_path):
    out = tmp_path / "caught"
    t = target("torch_errors.py", out, 3, tmp_path / "go")
    m, summary = monitor(t.pid)
    (tmp_path / "go").touch()
    rc = t.finish(timeout=60)
    assert rc == 0, t.stderr_text
    assert int(out.read_text()) > 100
    assert m.finish(timeout=30) == 0
    s = load_summary(summary)
    assert s["end_reason"] == "target exited"
    assert s["calls"]["backend"] > 200


def test_multiprocessing_helpers_stay_out_of_the_job_figures(ebpf, target, monitor, tmp_path, simlib):
    """multiprocessing's forkserver and resource tracker wait on a pipe all session. Counted,
    their waiting made a torchrl PPO's headline read Python 80% where its one working process
    was at 60%. They are listed, `in_totals` false, and the shares are the known split's."""
    truth_path = tmp_path / "truth.json"
    t = target("known_split.py", simlib, truth_path, "--py-us", 10000, "--sim-us", 6000, "--ops", 40,
               "--mp-helpers")
    m, summary = monitor(t.pid, "--sim-lib", f"{simlib}:sim_step", "--duration", "5")
    assert m.finish(timeout=60) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    s = load_summary(summary)
    procs = {p["role"]: p for p in s["processes"]}
    assert set(procs) == {"main", "forkserver", "resource tracker"}, s["processes"]
    assert [p["in_totals"] for p in (procs["main"], procs["forkserver"], procs["resource tracker"])] == \
        [True, False, False]
    assert procs["resource tracker"]["waiting_s"] > 0.8 * s["duration_s"]     # listed with its wait
    for c in ("python", "simulator", "backend"):
        assert s["totals"][f"{c}_s"] == pytest.approx(procs["main"]["totals"][f"{c}_s"], abs=1e-5)
    truth = truth_shares(json.loads(truth_path.read_text()), s["window"])
    ours = {c: s["totals"][f"{c}_s"] for c in ("python", "simulator", "backend")}
    for c in ours:
        assert abs(ours[c] / sum(ours.values()) - truth[c]) <= 0.03, (c, ours, truth)
    assert s["job"]["critical_path"]["waiting_s"] < 0.1 * s["duration_s"]
