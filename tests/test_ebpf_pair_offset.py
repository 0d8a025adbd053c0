"""A --sim-lib probe (an entry and return pair) on a function built with CET, as Ubuntu's and
Fedora's gcc build by default: it starts with `endbr64`, which the kernel steps out of line
(~9-25 us a hit), then `push`. The pair goes on the `push` (emulated, ~1-2.5 us), where [rsp]
is still the return address the return probe takes; the calls and their time stay exact."""

from __future__ import annotations

import json
import subprocess

import pytest

from support import HERE, load_summary, stop, wait_file

pytestmark = pytest.mark.ebpf
N, US = 1009, 200


@pytest.fixture(scope="module")
def cet_simlib(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("cet") / "libtoysim_cet.so"
    subprocess.run(["gcc", "-O1", "-fcf-protection=full", "-shared", "-fPIC", "-o", str(out),
                    str(HERE / "native" / "simlib.c")], check=True)
    code = subprocess.run(["objdump", "-d", str(out), "--disassemble=sim_step"], capture_output=True, text=True).stdout
    first = [ln.split("\t")[-1].split()[0] for ln in code.splitlines() if ln.count("\t") >= 2][:2]
    assert first == ["endbr64", "push"], first          # the prologue this test is about
    return str(out)


def _session(target, monitor, tmp_path, lib: str, sym: str, env: dict | None = None) -> tuple[dict, dict]:
    go, done, truth = tmp_path / "go", tmp_path / "done", tmp_path / "truth.json"
    t = target("sim_count.py", lib, N, US, go, done, truth)
    m, summary = monitor(t.pid, "--sim-lib", f"{lib}:{sym}", "--max-overhead", "100", "--sample-hz", "0", env=env)
    go.touch()
    wait_file(done)
    assert stop(m) == 0, m.stderr_text
    return load_summary(summary), json.loads(truth.read_text())


@pytest.mark.parametrize("uprobes", ["uprobe_multi", "perf"])
def test_a_cet_function_is_probed_past_its_endbr64_and_stays_exact(ebpf, target, monitor, tmp_path, cet_simlib,
                                                                     uprobes):
    """uprobe_multi links take any offset: emulated. bcc's perf-event uretprobe takes the
    symbol only, so that path keeps the pair on `endbr64` and says so."""
    env = {"RLSCOPE_PERF_UPROBES": "1"} if uprobes == "perf" else None
    s, truth = _session(target, monitor, tmp_path, cet_simlib, "sim_step", env)
    (group,) = [g for g in s["probes"]["attached"] if g.startswith("sim:")]
    assert s["probes"]["attached"][group]["out_of_line"] == ([] if uprobes == "uprobe_multi" else ["sim_step"])
    assert s["calls"]["simulator"] == N and s["transitions"]["python->simulator"] == N, s["calls"]
    # each call spins US microseconds by its own clock; the bracket holds it all and little else
    assert N * US * 0.97e-6 <= s["totals"]["simulator_s"] <= min(truth["sim_s"], N * US * 1.15e-6), (
        s["totals"]["simulator_s"], truth)


def test_a_function_with_no_cheap_instruction_before_one_that_moves_rsp_is_named_out_of_line(
        ebpf, target, monitor, tmp_path, simlib):
    """The plain build's sim_work starts `mov %rdi,%rcx; movq $0,-0x8(%rsp)`: the decoder knows
    no emulated instruction there, so the pair stays at the entry, stepped out of line."""
    s, _ = _session(target, monitor, tmp_path, simlib, "sim_work")
    (group,) = [g for g in s["probes"]["attached"] if g.startswith("sim:")]
    assert s["probes"]["attached"][group]["out_of_line"] == ["sim_work"]
