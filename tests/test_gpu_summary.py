"""GPU figures in the summary, from a recorded ring stream with known answers
(tests/gpu_streams.py): GPU-bound time, overlap, per-operation kernel figures, the
CPU-side CUDA API figures, and the nvidia-smi contrast."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

import gpu_streams as GS
from rlscope_top.report import gpu_summary
from rlscope_top.report import summary as S
from rlscope_top.account.books import Books


def _summary(**kw) -> dict:
    a = Books()
    a.feed(GS.gpu_stream(**kw))
    return S.build(a.cpu, a.gpu)


def test_gpu_bound_time_and_per_operation_figures():
    s = _summary()
    wall = GS.TICKS * GS.TICK / 1e9
    kernels = GS.TICKS * GS.KERNELS_PER_TICK
    busy = kernels * GS.KERNEL / 1e9
    assert s["totals"]["wall_s"] == pytest.approx(wall)
    assert s["totals"]["gpu_s"] == pytest.approx(busy)
    assert s["gpu"]["busy_pct"] == pytest.approx(100 * busy / wall)
    op = s["operations"]["<all>"]
    assert op["gpu_s"] == pytest.approx(busy)
    g = op["gpu"]
    assert g["kernels"] == kernels and g["steps"] == GS.STEPS and g["steps_from"] == "optimizer steps"
    assert g["launches_per_step"] == pytest.approx(kernels / GS.STEPS)
    assert g["mean_kernel_us"] == pytest.approx(GS.KERNEL / 1e3)
    assert g["launches_per_s"] == pytest.approx(kernels / wall)
    assert g["launch_latency_us"] == pytest.approx(20.0)
    assert s["sources"]["gpu_s"] == "exact"
    assert s["gpu"]["top_kernels"][0]["count"] == kernels // 2
    json.dumps(s)


def test_overlap_splits_wall_time():
    s = _summary()
    ov = s["totals"]["overlap_s"]
    assert s["operations"]["<all>"]["overlap_s"] == ov
    wall = s["totals"]["wall_s"]
    assert sum(ov.values()) == pytest.approx(wall, abs=1e-5)
    # per tick: CPU 200 ms, GPU 50 ms, independent within the tick: both = 200 * 50 / 250 = 40 ms
    ticks = GS.TICKS
    assert ov["both"] == pytest.approx(ticks * 0.040, abs=1e-5)
    assert ov["cpu_only"] == pytest.approx(ticks * 0.160, abs=1e-5)
    assert ov["gpu_only"] == pytest.approx(ticks * 0.010, abs=1e-5)
    assert ov["idle"] == pytest.approx(ticks * 0.040, abs=1e-5)
    assert s["sources"]["overlap_s"] == "estimated"


def test_overlap_per_operation():
    """Each operation's own wall time split by whether the GPU was busy (20% of every tick);
    the operations (with <none>) add up to the total overlap."""
    s = _summary(ops=True)
    ops, total = s["operations"], s["totals"]["overlap_s"]
    for name, (on, off) in GS.OP_TICK.items():
        ov = ops[name]["overlap_s"]
        want = {"both": on * 0.2, "cpu_only": on * 0.8, "gpu_only": off * 0.2, "idle": off * 0.8}
        for k, v in want.items():
            assert ov[k] == pytest.approx(GS.TICKS * v / 1e9, abs=1e-5), (name, k, ov)
    for k in total:
        assert sum(ops[n]["overlap_s"][k] for n in GS.OP_TICK) == pytest.approx(total[k], abs=1e-5), k
    assert s["sources"]["operations.overlap_s"] == "estimated"
    assert _summary()["operations"]["<all>"]["overlap_s"] == total    # the operations change no total


def test_nvidia_smi_contrast():
    s = _summary()
    c = s["gpu"]["contrast"]
    assert c["nvml_util_pct"] == 100 and c["gpu_bound_pct"] == pytest.approx(20.0)
    assert c["ratio"] == pytest.approx(5.0) and c["ratio_is"] == "exact"
    d = s["gpu"]["nvml"]["devices"]["0"]
    assert d["samples"] == 2 * GS.TICKS and d["period_ms"] == pytest.approx(83.0)
    assert d["mem_used_mb_max"] == 3072 and d["ratio"] == pytest.approx(5.0)


def test_launches_cupti_gave_no_kernel_for_make_the_figures_incomplete():
    """On an H200 a third `attach --gpu-activity` read 0 kernels beside ~150k launches and
    said complete: the launch probes' count is checked against the kernel records."""
    launches = GS.TICKS * 101                                  # 1,616 launches, no kernel record
    s = _summary(kernels=False, launches_per_tick=101)
    g = s["gpu"]
    assert g["source"] == "cupti" and g["kernels"] == 0
    assert g["lost"]["launches_without_kernels"] == launches and g["complete"] is False
    assert f"INCOMPLETE: {launches:,} launches without kernels" in gpu_summary.lines(s)[0]
    full = _summary(launches_per_tick=101)                     # 10 kernels for 101 launches a tick: past half
    assert full["gpu"]["lost"]["launches_without_kernels"] == launches - GS.TICKS * GS.KERNELS_PER_TICK
    few = _summary(kernels=False)                              # 160 launches: under UNREPORTED_MIN
    assert few["gpu"]["lost"]["launches_without_kernels"] == 0 and few["gpu"]["complete"] is True
    assert _summary()["gpu"]["complete"] is True


def test_kernels_without_timestamps_make_the_figures_incomplete():
    """One candidate cause of the H200's '0 kernels, complete' (CUPTI's zero kernel
    timestamps): each such record is counted, and the summary says the figures are short."""
    n = GS.TICKS * GS.KERNELS_PER_TICK
    s = _summary(timestamps=False)
    g = s["gpu"]
    assert g["kernels"] == 0 and g["lost"]["without_timestamps"] == n and g["complete"] is False
    assert f"INCOMPLETE: {n:,} without timestamps" in gpu_summary.lines(s)[0]
    assert _summary()["gpu"]["lost"]["without_timestamps"] == 0


def test_records_from_before_the_session_count_only_when_they_outnumber_its_own():
    """A clock that disagrees puts the session's records before its start: when those
    outnumber the session's own (>= 1,000), the figures are incomplete; a previous
    session's last flush (a few hundred) is not."""
    own = GS.TICKS * GS.KERNELS_PER_TICK
    s = _summary(stale=1009)
    assert s["gpu"]["lost"]["ended_before_the_session"] == 1009 and s["gpu"]["complete"] is False
    assert "1,009 ended before the session" in gpu_summary.lines(s)[0]
    assert s["gpu"]["kernels"] == own and s["totals"]["gpu_s"] == pytest.approx(own * GS.KERNEL / 1e9)
    few = _summary(stale=997)                                   # under the floor
    assert few["gpu"]["lost"]["ended_before_the_session"] == 0 and few["gpu"]["complete"] is True
    lost_all = _summary(stale=1009, kernels=False)
    assert lost_all["gpu"]["lost"]["ended_before_the_session"] == 1009


def test_without_the_agent_cpu_side_figures_and_a_lower_bound():
    s = _summary(cupti=False)
    assert s["totals"]["gpu_s"] is None and s["totals"]["overlap_s"] is None
    assert s["gpu"]["source"] == "unavailable" and "rlscope-top run" in s["gpu"]["notice"]
    assert "enable_gpu_activity()" in s["gpu"]["notice"]          # the full how-to stays in the summary
    cuda = s["gpu"]["cuda_api"]
    assert cuda["launches"] == GS.TICKS * GS.KERNELS_PER_TICK
    assert cuda["sync_blocked_s"] == pytest.approx(GS.TICKS * 0.030) and cuda["sync_calls"] == 2 * GS.TICKS
    c = s["gpu"]["contrast"]
    assert c["gpu_bound_pct"] is None and c["gpu_bound_lower_pct"] == pytest.approx(12.0)
    assert c["ratio"] == pytest.approx(100 / 12.0, abs=0.01) and c["ratio_is"] == "at most"
    assert s["operations"]["<all>"]["gpu"] is None


def test_no_gpu_at_all_is_one_line_each_and_nothing_else_breaks():
    s = _summary(cupti=False, nvml=False)
    lines = gpu_summary.lines(s)
    assert lines[0].startswith("GPU: n/a, no GPU activity measured:")
    assert any(line.startswith("NVML: libnvidia-ml.so not found") for line in lines)
    assert s["totals"]["wall_s"] > 0 and s["totals"]["python_s"] is not None


def test_printed_summary_has_the_gpu_lines():
    buf = io.StringIO()
    S.render(_summary(), Console(file=buf, width=200))
    out = buf.getvalue()
    assert "GPU: busy 0.800s (20.0%)" in out and "kernels 160" in out and "20.0/step" in out
    assert "nvidia-smi util 100.0% vs true GPU-bound 20.0%: ratio 5.0x" in out


def test_per_operation_launches_per_step_and_per_second_of_the_operation():
    s = _summary(ops=True)
    inf = s["operations"]["inference"]["gpu"]                 # 5 of the 10 kernels of each tick
    assert inf["kernels"] == 5 * GS.TICKS and inf["steps"] == GS.STEPS
    assert inf["launches_per_step"] == pytest.approx(5 * GS.TICKS / GS.STEPS)
    assert inf["launches_per_s"] == pytest.approx(5 / 0.120, rel=1e-4)     # inference runs 120 ms a tick
    assert inf["mean_kernel_us"] == pytest.approx(5000.0)
    assert s["operations"]["<all>"]["gpu"]["launches_per_s"] == pytest.approx(10 / 0.250)


def test_printed_operations_have_their_gpu_overlap():
    buf = io.StringIO()
    S.render(_summary(ops=True), Console(file=buf, width=200))
    rows = {line.split()[0]: [c.strip() for c in line.split("│")]
            for line in buf.getvalue().splitlines() if line.startswith(("inference", "train"))}
    assert "cpu+gpu" in buf.getvalue() and "gpu-only" in buf.getvalue()
    # inference: both 20 ms and GPU-only 4 ms of its 120 ms per tick; it launched 5 of the 10 kernels
    assert rows["inference"][-3:] == ["0.400s", "17%", "3%"], rows["inference"]
    assert rows["train"][-3:] == ["0.400s", "15%", "5%"], rows["train"]


def test_gpu_totals_survive_a_lapped_ring(tmp_path):
    """A reader that starts late on a ring that lapped many times (`view` of a kept ring)
    gets the same GPU figures as one that read everything: they are cumulative."""
    from rlscope_top.ring.ring import RingReader, RingWriter

    full = _summary()
    path = str(tmp_path / "small.bin")
    w = RingWriter(path, capacity=16384)
    recs = GS.gpu_stream()
    for r in recs[:-2]:
        w.write(r)
    late = RingReader(path)                  # joins now: most of the session is gone
    for r in recs[-2:]:
        w.write(r)
    a = Books()
    meta = recs[0]
    a.feed([meta, *late.poll()])             # `view` keeps the latest meta the same way
    s = S.build(a.cpu, a.gpu)
    assert late.dropped > 0
    for key in ("gpu_s",):
        assert s["totals"][key] == full["totals"][key]
    assert s["gpu"]["kernels"] == full["gpu"]["kernels"] == GS.TICKS * GS.KERNELS_PER_TICK
    assert s["gpu"]["top_kernels"] == full["gpu"]["top_kernels"]
    assert s["gpu"]["contrast"]["nvml_util_pct"] == full["gpu"]["contrast"]["nvml_util_pct"]
    assert s["gpu"]["cuda_api"]["sync_calls"] == full["gpu"]["cuda_api"]["sync_calls"]


def test_a_process_with_no_gpu_to_time_reads_so_without_the_how_to():
    from rlscope_top.ring.gpu_records import no_gpu  # noqa: PLC0415

    s = _summary(cupti=False, nvml=False)
    s["gpu"]["notice"] = no_gpu(4243)
    line = gpu_summary.lines(s)[0]
    assert line == "GPU: n/a, no GPU to time (no NVIDIA driver on this machine, no CUDA library in PID 4243)"
    assert "RLSCOPE_GPU_ACTIVITY" not in line
