"""Issue 13 (2): what a process waits for, against a known answer, and the DataLoader role.

A learner and its env worker over a Pipe (tests/targets/wait_pair.py): the learner's blocked
samples split between its worker (recv) and a sleep as its own clock says; the worker waits on
the learner. A torch DataLoader's worker processes are named as such."""

from __future__ import annotations

import json
import signal

import pytest

from support import load_summary, wait_file

pytestmark = pytest.mark.ebpf
TOLERANCE = 0.10      # ~250 blocked samples at ~50 Hz over 6 s: 3 sigma of a share near 2/3


def test_the_learner_waits_on_its_worker_and_the_worker_on_it(ebpf, target, monitor, tmp_path):
    truth = tmp_path / "truth.json"
    t = target("wait_pair.py", truth)
    learner, worker = (int(x) for x in t.wait_line("ready").split()[1:3])
    m, summary = monitor(t.pid, "--headless", "--duration", "6")
    assert m.finish(timeout=90) == 0, m.stderr_text
    t.finish(signal.SIGTERM)
    wait_file(truth, timeout=30)
    want = json.loads(truth.read_text())
    procs = {p["pid"]: p for p in load_summary(summary)["processes"]}
    waits = {w["what"]: w for w in procs[learner]["waits_for"]}
    on_worker = waits.get(f"PID {worker} (worker) via socket")
    assert on_worker, procs[learner]["waits_for"]
    expect = want["recv_s"] / (want["recv_s"] + want["sleep_s"])
    print(f"learner: on its worker {on_worker['share']:.3f} (truth {expect:.3f}), "
          f"sleep {waits.get('a sleep', {}).get('share')}; samples {sum(w['samples'] for w in waits.values())}")
    assert abs(on_worker["share"] - expect) <= TOLERANCE, (waits, want)
    assert abs(waits["a sleep"]["share"] - (1 - expect)) <= TOLERANCE, (waits, want)
    assert on_worker["seconds"] == pytest.approx(on_worker["share"] * procs[learner]["waiting_s"], rel=1e-3)
    mine = procs[worker]["waits_for"]
    assert mine[0]["what"] == f"PID {learner} (main) via socket" and mine[0]["share"] >= 0.9, mine


def test_dataloader_workers_get_their_role(ebpf, target, monitor):
    t = target("dataloader_job.py")
    t.wait_line("ready")
    m, summary = monitor(t.pid, "--headless", "--duration", "5")
    assert m.finish(timeout=90) == 0, m.stderr_text
    s = load_summary(summary)
    procs = {p["pid"]: p for p in s["processes"]}
    children = [p for p in procs.values() if p["ppid"] == t.pid]
    assert len(children) == 2, procs
    assert all(p["role"] == "dataloader" and p["operations"].get("data_loading") for p in children), children
    assert procs[t.pid]["role"] == "main"
