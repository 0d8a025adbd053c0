"""The nvidia-smi case study's script (bench/case_gpu_util.py) without a GPU: its plan, the
figures it reads from a real summary (built by the accounting from a recorded GPU stream,
tests/gpu_streams.py), its table, what --write writes, and the one line it says without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpu_streams as GS
from rlscope_top.account.books import Books
from rlscope_top.report import summary as S

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import case_gpu_util as CG  # noqa: E402

SM_ACTIVE = 37.5


def _summary(monkeypatch, sm_active: bool = True, **kw) -> dict:
    """A real summary of GS's session (20% GPU-bound, NVML 100%), with GPM samples when asked."""
    plain = GS._nvml

    def with_gpm(i):
        d = plain(i)
        d["sm_active"] = [[GS.T0 + i * GS.TICK, SM_ACTIVE]]
        return d

    if sm_active:
        monkeypatch.setattr(GS, "_nvml", with_gpm)
    a = Books()
    a.feed(GS.gpu_stream(**kw))
    return S.build(a.cpu, a.gpu)


def _row(n, gap, fig, **extra) -> dict:
    return {"n": n, "gap_ms": gap, "seconds": 4.0, "summary": CG.data_name(CG.Cell(n, gap, 4.0)), **fig, **extra}


def test_quick_plan_is_every_size_with_every_gap():
    cells = CG.plan()
    assert len(cells) == 12
    assert sorted({c.n for c in cells}) == [64, 512, 2048]
    assert [c.gap_ms for c in cells if c.n == 64] == [0.0, 0.1, 1.0, 2.0]
    assert {c.seconds for c in cells} == {4.0}


def test_full_plan_is_longer_and_bigger():
    quick, full = CG.plan(), CG.plan(full=True)
    assert len(full) == 7 * 6 and {c.seconds for c in full} == {15.0}
    assert {(c.n, c.gap_ms) for c in quick} < {(c.n, c.gap_ms) for c in full}
    assert max(c.n for c in full) == 4096 and max(c.gap_ms for c in full) == 10.0


def test_plan_overrides():
    cells = CG.plan(False, sizes=[128], gaps_ms=[0, 5], seconds=2)
    assert cells == [CG.Cell(128, 0.0, 2), CG.Cell(128, 5.0, 2)]


def test_data_names_and_what_write_may_remove():
    assert CG.data_name(CG.Cell(64, 0.1, 4)) == "gpu-util-64-0.1ms.json"
    assert CG.data_name(CG.Cell(2048, 0.0, 4)) == "gpu-util-2048-0ms.json"
    assert CG.DATA_RE.match("gpu-util-2048-0ms.json") and CG.DATA_RE.match("gpu-util-64-0.01ms.json")
    for other in ("gpu-util-sweep.json", "gpu-utilization-h100-reported.json", "dqn-torch.json"):
        assert not CG.DATA_RE.match(other), other


def test_figures_from_a_real_summary(monkeypatch):
    s = _summary(monkeypatch)
    f = CG.figures(s)
    assert f["nvml_util_pct"] == 100 and f["gpu_bound_pct"] == pytest.approx(20.0)
    assert f["ratio"] == pytest.approx(5.0) and f["ratio"] == s["gpu"]["contrast"]["ratio"]
    assert f["sm_active_pct"] == pytest.approx(SM_ACTIVE)
    wall = GS.TICKS * GS.TICK / 1e9
    assert f["kernels"] == GS.TICKS * GS.KERNELS_PER_TICK
    assert f["kernels_per_s"] == pytest.approx(GS.TICKS * GS.KERNELS_PER_TICK / wall)
    assert f["mean_kernel_us"] == pytest.approx(GS.KERNEL / 1e3)
    assert f["gpu_mode"] == "traced" and f["gpu_complete"] is True and f["gpu_name"] == "NVIDIA H100"
    assert f["nvml_samples"] == 2 * GS.TICKS
    assert f["python_pct"] == pytest.approx(100.0) and f["cuda_api_pct"] == 0.0   # all its time in Python
    assert f["sync_blocked_pct"] == pytest.approx(12.0) and f["notices"] == []
    assert f["excess_us_per_kernel"] == pytest.approx(0.8 * wall / f["kernels"] * 1e6)    # 80% of 4 s, 160 kernels
    json.dumps(f)


def test_figures_without_gpm_nvml_or_cupti(monkeypatch):
    no_gpm = CG.figures(_summary(monkeypatch, sm_active=False))
    assert no_gpm["sm_active_pct"] is None and no_gpm["ratio"] == pytest.approx(5.0)
    no_nvml = CG.figures(_summary(monkeypatch, nvml=False))
    assert no_nvml["nvml_util_pct"] is None and no_nvml["sm_active_pct"] is None and no_nvml["ratio"] is None
    assert no_nvml["gpu_bound_pct"] == pytest.approx(20.0)                      # gpu.busy_pct
    assert any(n.startswith("NVML: libnvidia-ml.so not found") for n in no_nvml["notices"])
    no_cupti = CG.figures(_summary(monkeypatch, cupti=False))
    assert no_cupti["nvml_util_pct"] == 100 and no_cupti["gpu_bound_pct"] is None and no_cupti["ratio"] is None
    assert no_cupti["kernels"] is None and no_cupti["kernels_per_s"] is None


def test_figures_take_the_device_the_kernels_ran_on():
    """On a machine with an idle second GPU, its 0% must not be the row's NVML figure."""
    gpu = {"nvml": {"devices": {"0": {"util_pct": 0.0, "gpu_bound_pct": 0.0, "sm_active_pct": 0.0},
                                "1": {"util_pct": 4.8, "gpu_bound_pct": 1.6, "sm_active_pct": 2.0}}},
           "busy_pct": 0.8, "contrast": {"nvml_util_pct": 2.4}}
    f = CG.figures({"gpu": gpu})
    assert (f["nvml_util_pct"], f["gpu_bound_pct"], f["sm_active_pct"], f["ratio"]) == (4.8, 1.6, 2.0, 3.0)


def test_ratio():
    assert CG.ratio(2.0, 0.8) == 2.5 and CG.ratio(0.01, 0.11) == 0.09        # inflated, inverted
    assert CG.ratio(None, 1.0) is None and CG.ratio(5.0, 0.0) is None and CG.ratio(5.0, None) is None


def test_excess_per_kernel():
    assert CG.excess_us(4.8, 1.6, 10.0, 100_000) == pytest.approx(3.2)       # 0.32 s over 100k kernels
    assert CG.excess_us(0.01, 0.11, 10.0, 1500) == pytest.approx(-6.667, abs=1e-3)
    assert CG.excess_us(None, 1.6, 10.0, 5) is None and CG.excess_us(4.8, 1.6, 10.0, 0) is None


def test_table_with_figures_and_n_a(monkeypatch):
    full = _row(64, 0.1, CG.figures(_summary(monkeypatch)), workload={"matmuls": 150})
    bare = _row(2048, 2.0, CG.figures(_summary(monkeypatch, sm_active=False, nvml=False)),
                workload={"matmuls": 150}, gpu_mode="windowed")
    failed = _row(512, 0.0, {}, error="CellError: rlscope-top exited 2: no root")
    lines = CG.render([full, bare, failed])
    assert lines[:2] == CG.HEADER and lines[0].count("|") == 10
    assert lines[2] == "| 64 | 0.1 ms | 40 | 5000.0 us | 100.00% | 37.50% | 20.00% | 5.00x | 20000.00 us |"
    assert lines[3] == "| 2048 | 2 ms | 40 | 5000.0 us | n/a | n/a | 20.00% (est.) | n/a | n/a |"
    assert lines[4] == "| 512 | 0 ms | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"
    notes = lines[6:]
    assert lines[5] == "" and "- N=512, gap 0 ms: not measured: CellError: rlscope-top exited 2: no root" in notes
    assert sum(n.startswith("- NVML: libnvidia-ml.so not found") for n in notes) == 1


def test_table_says_when_cupti_missed_kernels(monkeypatch):
    fig = CG.figures(_summary(monkeypatch))                       # 160 kernels
    ok, short = _row(64, 0.0, fig, workload={"matmuls": 160}), _row(64, 1.0, fig, workload={"matmuls": 300})
    assert CG.render([ok])[-1].startswith("| 64 |")                 # no notes
    assert CG.render([short])[-1] == ("- N=64, gap 1 ms: CUPTI counted 160 kernels for 300 matmuls: kernels "
                                      "were missed, so its GPU-bound % is too low")


def test_write_replaces_its_section_and_the_data(monkeypatch, tmp_path):
    doc, data, tmp = tmp_path / "gpu-utilization.md", tmp_path / "data", tmp_path / "run"
    data.mkdir()
    tmp.mkdir()
    doc.write_text("# Case study\n\nintro\n\n## Our numbers: the sweep\n\nNot run yet.\n\n## Why\n\nbecause\n")
    (data / "gpu-util-4096-10ms.json").write_text("{}")           # an earlier --full run's cell
    (data / "gpu-utilization-h100-reported.json").write_text("[]")
    monkeypatch.setattr(CG, "DOC", str(doc))
    monkeypatch.setattr(CG, "DATA", str(data))
    cell = CG.Cell(64, 0.1, 4.0)
    (tmp / CG.data_name(cell)).write_text(json.dumps({"gpu": {}}))
    row = _row(64, 0.1, CG.figures(_summary(monkeypatch)), workload={"matmuls": 150})
    vers = {"gpu_driver": "NVIDIA H100 80GB HBM3, 580.159.04", "torch": "2.11.0+cu130", "cuda": "13.0",
            "python": "3.12.3", "rlscope_top_commit": "abc1234", "date": "2026-12-01"}
    CG.write([row], vers, [cell], str(tmp), full=False)
    assert sorted(os.listdir(data)) == ["gpu-util-64-0.1ms.json", "gpu-util-sweep.json",
                                        "gpu-utilization-h100-reported.json"]
    sweep = json.loads((data / "gpu-util-sweep.json").read_text())
    assert sweep["rows"][0]["ratio"] == pytest.approx(5.0) and sweep["versions"]["torch"] == "2.11.0+cu130"
    text = doc.read_text()
    assert "Not run yet." not in text and text.count("## Our numbers: the sweep") == 1
    assert text.startswith("# Case study\n\nintro\n") and text.endswith("## Why\n\nbecause\n")
    assert "| 64 | 0.1 ms | 40 | 5000.0 us | 100.00% | 37.50% | 20.00% | 5.00x | 20000.00 us |" in text
    assert "`sudo .venv/bin/python bench/case_gpu_util.py --write`" in text and "580.159.04" in text


def test_without_a_gpu_one_line_and_exit_2():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([sys.executable, str(REPO / "bench" / "case_gpu_util.py")], capture_output=True,
                       text=True, env=env, timeout=240)
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, lines)
    assert lines[0].startswith("case_gpu_util: cannot run: ") and "GPU" in lines[0]
    assert "Traceback" not in p.stderr


def test_torch_without_cuda_is_said_in_one_line(monkeypatch, capsys):
    """A driver but a CPU-only torch (or hidden devices): torch's view, in one line."""
    monkeypatch.setattr(CG, "driver_present", lambda: True)
    monkeypatch.setattr(CG, "torch_probe", lambda py=CG.PY: {"torch": "2.13.0+cpu", "cuda": None,
                                                              "available": False})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert CG.main([]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert "torch 2.13.0+cpu (a CPU-only build, CUDA_VISIBLE_DEVICES='') sees no CUDA GPU" in out.err


def test_a_gpu_without_the_agent_or_root_is_refused(monkeypatch):
    monkeypatch.setattr(CG, "why_no_gpu", lambda py=CG.PY: None)
    monkeypatch.setattr(CG, "AGENT", "/nonexistent/librlscope_gpu.so")
    assert "scripts/setup.sh" in CG.why_not_runnable()
    monkeypatch.setattr(CG, "AGENT", __file__)
    monkeypatch.setattr(CG.os, "geteuid", lambda: 1000)
    assert "root" in CG.why_not_runnable()


FAKE_WORKLOAD = """
import json, os, sys, time
go = sys.argv[sys.argv.index("--go") + 1]
print("ready", os.getpid(), flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
print(json.dumps({"n": int(sys.argv[1]), "gap_ms": float(sys.argv[2]), "matmuls": 150, "loop_s": 0.05}), flush=True)
"""
FAKE_MONITOR = """
import os, shutil, sys, time
a = sys.argv[1:]
pid, out = int(a[a.index("attach") + 1]), a[a.index("--summary") + 1]
if os.environ.get("FAKE_REFUSE"):
    print("rlscope-top: " + os.environ["FAKE_REFUSE"], file=sys.stderr)
    sys.exit(2)
print(f"rlscope-top: attached to PID {pid} (3 probes)", file=sys.stderr, flush=True)
while os.path.exists(f"/proc/{pid}"):
    time.sleep(0.01)
shutil.copyfile(os.environ["FAKE_SUMMARY"], out)
"""


def _stand_ins(monkeypatch, tmp_path, summary: dict) -> None:
    """The workload and rlscope-top replaced by small scripts that keep their protocol."""
    (tmp_path / "wl.py").write_text(FAKE_WORKLOAD)
    (tmp_path / "mon.py").write_text(FAKE_MONITOR)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setattr(CG, "WORKLOAD", str(tmp_path / "wl.py"))
    monkeypatch.setattr(CG, "RLS", [sys.executable, str(tmp_path / "mon.py")])
    monkeypatch.setenv("FAKE_SUMMARY", str(tmp_path / "summary.json"))


def test_a_cell_runs_attach_go_and_reads_the_summary(monkeypatch, tmp_path):
    """The orchestration with stand-ins: ready, attach, go file, the session ends with the loop."""
    _stand_ins(monkeypatch, tmp_path, _summary(monkeypatch))
    run = tmp_path / "run"
    run.mkdir()
    row = CG.measure(CG.Cell(64, 0.1, 0.05), str(run))
    assert "error" not in row, row
    assert row["workload"] == {"n": 64, "gap_ms": 0.1, "matmuls": 150, "loop_s": 0.05}
    assert row["ratio"] == pytest.approx(5.0) and row["sm_active_pct"] == pytest.approx(SM_ACTIVE)
    assert (run / "gpu-util-64-0.1ms.json").exists() and (run / "go").exists()


def test_a_cell_whose_monitor_refuses_is_an_error_row(monkeypatch, tmp_path):
    _stand_ins(monkeypatch, tmp_path, {})
    monkeypatch.setenv("FAKE_REFUSE", "attaching needs root")
    row = CG.measure(CG.Cell(64, 0.0, 0.05), str(tmp_path))
    assert row["error"] == "CellError: rlscope-top exited 2 before attaching: rlscope-top: attaching needs root"
    assert "ratio" not in row and CG.render([row])[2] == "| 64 | 0 ms | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"
