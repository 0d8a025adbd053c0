"""GPU activity end to end, with real eBPF: `rlscope-top run` on a CPU-only torch
workload and on a CUDA program that is not Python, signals and exit status, attach to a
process with the GPU agent, and --gpu-activity injecting it. The GPU and CUPTI are
stand-ins behind CUPTI's C interface (tests/native/); the CUDA runtime calls, the eBPF
probes, the agent and the ptrace injection are real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from support import CLI, REPO, TARGETS, load_summary

pytest.importorskip("cupti")
pytestmark = pytest.mark.ebpf


def _run(tmp_path, *cmd, extra=(), timeout=240):
    summary = tmp_path / "run.json"
    p = subprocess.run([*CLI, "run", "--headless", "--summary", str(summary), *extra, "--", *cmd],
                       capture_output=True, text=True, timeout=timeout, cwd=str(tmp_path))
    return p, summary


def test_run_cpu_torch_workload_sees_every_step_and_says_no_gpu(ebpf, tmp_path):
    p, summary = _run(tmp_path, sys.executable, str(TARGETS / "cpu_train.py"), "200", "3")
    assert p.returncode == 3, p.stderr                               # the command's exit status
    assert "trained 200 steps on cpu" in p.stdout
    s = load_summary(summary)
    assert "torch" in s["probes"]["attached"]                        # the same eBPF probes as attach mode
    assert s["ranges"]["Optimizer.step#SGD.step"]["count"] == 200    # held until attached: nothing missed
    assert s["calls"]["backend"] >= 200 * 5
    assert s["gpu"]["source"] == "unavailable" and s["totals"]["gpu_s"] is None
    notice = s["gpu"]["notice"]
    assert "no NVIDIA driver" in notice and "\n" not in notice
    assert "GPU activity unavailable: no NVIDIA driver" in p.stderr
    assert "NVML: libnvidia-ml.so not found" in p.stderr
    assert "Traceback" not in p.stderr


def test_run_returns_the_status_of_a_command_that_exits_early(ebpf, tmp_path):
    p, _ = _run(tmp_path, "/bin/sh", "-c", "exit 5")
    assert p.returncode == 5 and "Traceback" not in p.stderr


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_run_forwards_a_signal_and_reports_the_command_status(ebpf, spawn, tmp_path, sig):
    code = ("import signal, sys, time\n"
            f"signal.signal(signal.{sig}, lambda *a: sys.exit(7))\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n")
    summary = tmp_path / "sig.json"
    m = spawn([*CLI, "run", "--headless", "--summary", str(summary), "--", sys.executable, "-c", code],
              cwd=str(tmp_path))
    m.wait_line("ready", timeout=120)
    m.wait_line("attached to PID", stream="stderr", timeout=60)
    m.p.send_signal(getattr(signal, sig))            # to the monitor alone: forwarded
    assert m.finish(timeout=120) == 7
    s = load_summary(summary)
    assert s["end_reason"] in ("command exited (status 7)", "target exited")


def test_run_past_its_duration_says_it_waits_and_still_forwards(ebpf, spawn, tmp_path):
    """--duration ends the session, not the command: `run` says it waits for the command's
    status, and a signal sent to it alone still reaches the command (it used to wait, deaf)."""
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n")
    summary = tmp_path / "d.json"
    m = spawn([*CLI, "run", "--headless", "--duration", "1", "--summary", str(summary), "--",
               sys.executable, "-c", code], cwd=str(tmp_path))
    line = m.wait_line("the session is over", stream="stderr", timeout=180)
    assert "waiting for the command (PID" in line and "Ctrl-C stops it" in line
    assert load_summary(summary)["end_reason"].startswith("duration")
    m.p.send_signal(signal.SIGTERM)
    assert m.finish(timeout=60) == 7


def _wait_tracing(pid, timeout_s):
    """Wait until the agent in `pid` has acknowledged the monitor's START (CUPTI subscribed)."""
    import time

    from rlscope_top.probes import gpu_region

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        r = gpu_region.open_region(pid)
        if r is not None:
            try:
                if r.tracing:
                    return True
            finally:
                r.close()
        time.sleep(0.05)
    return False


class _Driven:
    """gpu_native_target.py with a stdin pipe: one command, one answer line."""

    def __init__(self, g, agent=True):
        self.p = subprocess.Popen([sys.executable, str(TARGETS / "gpu_native_target.py"), g["cuda"], g["cupti"],
                                   g["agent"] if agent else "--no-agent"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        _, pid, tid = self.p.stdout.readline().split()
        self.pid, self.tid = int(pid), int(tid)

    def __call__(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self):
        self.p.kill()
        self.p.wait()


def _attach_and_count(monitor, g, t, extra=()):
    n, m_sync = 23, 7
    mon, summary = monitor(t.pid, *extra, env={"RLSCOPE_CUPTI_LIB": g["cupti"]})
    mon.wait_line("CUPTI activity on", stream="stderr", timeout=60)
    assert t(f"cudart {n} 200000") == "100"          # every CUDA call really ran (the stand-in driver: no device)
    assert t(f"sync {m_sync}") == "100"
    assert mon.finish(signal.SIGINT) == 0, mon.stderr_text
    s = load_summary(summary)
    g_ = s["gpu"]
    assert g_["source"] == "cupti" and g_["kernels"] == n and g_["complete"] is True, g_
    op = s["operations"]["<all>"]["gpu"]
    assert op["kernels"] == n and op["joined"] == n                  # every kernel found its API call
    assert op["mean_kernel_us"] == pytest.approx(200.0)
    assert s["totals"]["gpu_s"] == pytest.approx(n * 200e-6, abs=1e-6)   # one stream: union == sum
    assert s["probes"]["hits"]["cudaLaunchKernel"] == n                 # eBPF saw the same launches
    assert g_["cuda_api"]["launches"] == n and g_["cuda_api"]["sync_calls"] == m_sync
    assert 0 < g_["cuda_api"]["sync_blocked_s"] < 1
    ov = s["totals"]["overlap_s"]
    assert sum(ov.values()) == pytest.approx(s["totals"]["wall_s"], abs=1e-3)
    assert g_["agent"]["records"] == 2 * n and g_["agent"]["dropped_records"] == 0
    return s, mon


def test_attach_to_a_process_with_the_agent_joins_every_kernel(ebpf, gpu_native, monitor):
    t = _Driven(gpu_native)
    try:
        _attach_and_count(monitor, gpu_native, t)
    finally:
        t.close()


def test_kernels_cupti_gave_no_time_make_the_summary_incomplete(ebpf, gpu_native, monitor):
    """CUPTI 12.6u2-13.0 stamps kernels 0 with a timestamp callback. An H200 attach read
    0 kernels and `complete` (the session's start dropped them without a count). Through
    the real agent, region, decoder and joiner, each such kernel is now counted as lost."""
    n = 23
    t = _Driven(gpu_native)
    try:
        mon, summary = monitor(t.pid, env={"RLSCOPE_CUPTI_LIB": gpu_native["cupti"]})
        mon.wait_line("CUPTI activity on", stream="stderr", timeout=60)
        assert t("untimed 1") == "ok" and t(f"cudart {n} 200000") == "100"
        assert mon.finish(signal.SIGINT) == 0, mon.stderr_text
        s = load_summary(summary)
        g_ = s["gpu"]
        assert g_["kernels"] == 0 and g_["lost"]["without_timestamps"] == n and g_["complete"] is False, g_
        assert g_["cuda_api"]["launches"] == n and g_["agent"]["records"] == 2 * n
        assert f"INCOMPLETE: {n} without timestamps" in mon.stdout_text
    finally:
        t.close()


def test_an_agent_loaded_after_attach_is_found(ebpf, gpu_native, monitor):
    """The monitor keeps looking for an agent the target loads later (RLSCOPE_GPU_ACTIVITY in
    a child, a dlopen), re-reading the target's maps only when its mapped size moves, and
    then counts its kernels like one there from the start."""
    t = _Driven(gpu_native, agent=False)
    try:
        mon, summary = monitor(t.pid, env={"RLSCOPE_CUPTI_LIB": gpu_native["cupti"]})
        mon.wait_line("attached to PID", stream="stderr", timeout=60)
        assert t(f"load {gpu_native['agent']}") == "loaded"
        mon.wait_line("CUPTI activity on", stream="stderr", timeout=15)
        assert t("kernels 23 1000 0") == "46"          # records the stand-in CUPTI made (two a kernel)
        assert mon.finish(signal.SIGINT) == 0, mon.stderr_text
        g_ = load_summary(summary)["gpu"]
        assert g_["source"] == "cupti" and g_["kernels"] == 23 and g_["complete"] is True, g_
    finally:
        t.close()


def test_gpu_activity_injects_the_agent_and_counts_exactly(ebpf, gpu_native, monitor):
    t = _Driven(gpu_native, agent=False)
    try:
        s, mon = _attach_and_count(monitor, gpu_native, t, extra=("--gpu-activity",))
        assert "injecting the GPU agent into PID" in mon.stderr_text
        maps = open(f"/proc/{t.pid}/maps").read()
        assert "librlscope_gpu" in maps and "rlscope-top-gpu" in maps    # it stays, idle
        assert t("threads")                                              # the target goes on
        prog = s["probes"]["program"]                                    # the GPU steps of the attach time
        steps = [prog[k] for k in ("sampler_s", "nvml_s", "inject_s", "sources_s", "ready_s")]
        assert steps == sorted(steps), prog
    finally:
        t.close()


def test_gpu_activity_refuses_a_process_without_cuda_in_one_line(ebpf, target, tmp_path):
    t = target("idle.py")
    p = subprocess.run([*CLI, "attach", str(t.pid), "--gpu-activity", "--duration", "1"], capture_output=True,
                       text=True, timeout=60, cwd=str(tmp_path))
    assert p.returncode == 2 and "maps no CUDA library" in p.stderr and "hint:" in p.stderr
    assert "Traceback" not in p.stderr
    assert "librlscope_gpu" not in open(f"/proc/{t.pid}/maps").read()       # nothing was injected


@pytest.mark.parametrize("at_once", [False, True], ids=["after-attach", "at-once"])
def test_run_times_a_cuda_program_that_is_not_python(ebpf, gpu_native, tmp_path, at_once):
    """at-once: the program initialises CUDA and makes its kernels at once, as a real one does
    (seen on an H200: all 1009 kernels came before the probes attached and none was counted).
    Its cuInit waits for the monitor to claim the agent's region; then every kernel counts."""
    exe = tmp_path / "cuda_prog"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(REPO / "tests" / "native" / "cuda_prog.c"),
                    gpu_native["cuda"], f"-Wl,-rpath,{gpu_native['dir']}", "-ldl"], check=True)
    go, summary = tmp_path / "go", tmp_path / "prog.json"
    if at_once:
        go.touch()
    m = subprocess.Popen([*CLI, "run", "--headless", "--summary", str(summary), "--", str(exe),
                          gpu_native["cupti"], "101", str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=str(tmp_path), env={**os.environ, "RLSCOPE_CUPTI_LIB": gpu_native["cupti"]})
    err = []
    for line in m.stderr:
        err.append(line)
        if "attached to PID" in line:
            go.touch()
            break
    out, rest = m.communicate(timeout=120)
    assert m.returncode == 0, "".join(err) + rest
    assert "made 101 kernels" in out
    s = load_summary(summary)
    assert s["gpu"]["source"] == "cupti" and s["gpu"]["kernels"] == 101, s["gpu"]
    assert s["gpu"]["top_kernels"][0]["name"] == "fake_copy_kernel"


def test_the_screens_g_key_path_injects_mid_session(ebpf, gpu_native, tmp_path, monkeypatch):
    """What `g` + `y` on the live screen asks of the collector: inject now, then count."""
    import threading
    import time

    from rlscope_top.collect.gpu_source import GpuOptions
    from rlscope_top.collect.session import Options, run_until

    monkeypatch.setenv("RLSCOPE_CUPTI_LIB", gpu_native["cupti"])
    t = _Driven(gpu_native, agent=False)
    attached, stop, box = threading.Event(), threading.Event(), {}
    gpu = GpuOptions()
    opts = Options(pid=t.pid, summary_path=str(tmp_path / "g.json"), quiet=True, gpu=gpu, sample_hz=0,
                   on_attached=attached.set)
    th = threading.Thread(target=lambda: box.update(s=run_until(opts, lambda: "q" if stop.is_set() else None)))
    th.start()
    try:
        assert attached.wait(120)
        gpu.inject_now.set()
        assert _wait_tracing(t.pid, 30)      # mapped is not enough: CUPTI starts after the monitor's START
        assert t("cudart 23 200000") == "100"
    finally:
        stop.set()
        th.join(120)
        t.close()
    s = box["s"]
    assert s["gpu"]["source"] == "cupti" and s["gpu"]["kernels"] == 23, s["gpu"]


def test_a_job_with_no_gpu_to_time_gets_one_short_line_not_the_agents_how_to(ebpf, gpu_native, target, monitor):
    """Attach to a CPU-only process on a machine with no NVIDIA driver: one line says there is
    no GPU to time; the how-to for the GPU agent is for a process that maps CUDA."""
    from rlscope_top.collect.gpu_source import driver_present  # noqa: PLC0415
    from rlscope_top.ring.gpu_records import HOW_TO  # noqa: PLC0415

    t = target("idle.py")
    mon, summary = monitor(t.pid)
    mon.wait_line("attached to PID", stream="stderr", timeout=60)
    assert mon.finish(signal.SIGINT) == 0, mon.stderr_text
    notice = load_summary(summary)["gpu"]["notice"]
    if driver_present():                         # a machine with a driver: the how-to, as before
        assert notice == HOW_TO
    else:
        assert notice == f"no GPU to time (no NVIDIA driver on this machine, no CUDA library in PID {t.pid})"
        assert f"GPU: n/a, {notice}" in mon.stdout_text          # the printed summary's GPU line
        assert notice in mon.stderr_text and HOW_TO not in mon.stderr_text
    d = _Driven(gpu_native, agent=False)          # maps the stand-in libcuda.so.1: the how-to
    try:
        mon, summary = monitor(d.pid, env={"RLSCOPE_CUPTI_LIB": gpu_native["cupti"]})
        mon.wait_line("attached to PID", stream="stderr", timeout=60)
        assert mon.finish(signal.SIGINT) == 0, mon.stderr_text
        assert load_summary(summary)["gpu"]["notice"] == HOW_TO and HOW_TO in mon.stderr_text
    finally:
        d.close()
