"""The NVML sampler behind its real interface (pynvml; this machine has no
libnvidia-ml.so), and the checks --gpu-activity makes before it injects anything."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import pytest

from rlscope_top.errors import EXIT_USAGE, GpuActivityUnavailable
from rlscope_top.probes import gpu_inject
from rlscope_top.probes.nvml import NvmlSampler

pynvml = pytest.importorskip("pynvml")


def _nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_nvml_present(), reason="this machine has libnvidia-ml: the absent-library path cannot be shown")
def test_real_pynvml_with_the_library_absent_says_so_in_one_line():
    s = NvmlSampler(pid=1)
    why = s.start()
    assert why is not None and "libnvidia-ml.so not found" in why and "\n" not in why
    assert s.ok is False and s.poll(now=10**9) == []
    s.stop()                                             # nothing to stop: no error either
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):   # the sampler reads the real library's answer
        pynvml.nvmlInit()


class _Stub:
    """pynvml's functions for one device, answering with pynvml's own ctypes structures.

    Stands in only for the GPU and driver this machine lacks; constants, error classes
    and structures are the real module's.
    """

    def __init__(self, pid: int):
        self.pid = pid
        self.calls = []
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "c_nvml")):
                setattr(self, name, getattr(pynvml, name))
        self._samples = {pynvml.NVML_GPU_UTILIZATION_SAMPLES: [(1_000_000, 100), (1_166_000, 100), (1_333_000, 97)],
                         pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: [(1_000_000, 5)]}

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return "h0"

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetSamples(self, h, kind, last):
        out = []
        for ts, v in self._samples[kind]:
            if ts > last:
                s = pynvml.c_nvmlSample_t()
                s.timeStamp, s.sampleValue.uiVal = ts, v
                out.append(s)
        if not out:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, out

    def nvmlDeviceGetProcessUtilization(self, h, last):
        mine, other = pynvml.c_nvmlProcessUtilizationSample_t(), pynvml.c_nvmlProcessUtilizationSample_t()
        mine.pid, mine.timeStamp, mine.smUtil, mine.memUtil = self.pid, 1_200_000, 3, 1
        other.pid, other.timeStamp, other.smUtil = self.pid + 1, 1_200_000, 60
        return [s for s in (mine, other) if s.timeStamp > last]

    def nvmlGpmQueryDeviceSupport(self, h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetMemoryInfo(self, h):
        m = pynvml.c_nvmlMemory_t()
        m.used, m.total = 3 << 30, 80 << 30
        return m


def test_sampler_keeps_native_samples_and_only_the_targets_process():
    stub = _Stub(pid=4242)
    s = NvmlSampler(pid=4242, nvml=stub)
    assert s.start() is None and s.ok
    first = s.poll(now=0.0)[0]
    assert [v for _, v in first["util"]] == [100, 100, 97]          # every buffered sample, at its own time
    assert first["util"][1][0] - first["util"][0][0] == 166_000_000  # NVML's 166 ms period, kept
    assert [p[1:] for p in first["proc"]] == [[3, 1]]               # the target's process only
    assert first["mem_used"] == 3 << 30 and "sm_active" not in first  # no GPM on this "device"
    assert s.poll(now=0.1) == []                                     # rate-limited
    again = s.poll(now=1.0)[0]
    assert again["util"] == [] and again["proc"] == []               # nothing newer than what we saw
    s.stop()
    assert stub.calls == ["shutdown"]


def _sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    return p


def test_preflight_refuses_a_process_without_cuda():
    p = _sleeper()
    try:
        with pytest.raises(GpuActivityUnavailable) as e:
            gpu_inject.preflight(p.pid)
    finally:
        p.kill()
        p.wait()
    assert f"PID {p.pid} maps no CUDA library" in e.value.message and e.value.hint
    assert e.value.code == EXIT_USAGE and e.value.pid == p.pid


def test_preflight_refuses_a_stopped_process():
    p = _sleeper()
    try:
        os.kill(p.pid, signal.SIGSTOP)
        end = time.monotonic() + 10
        while gpu_inject._status(p.pid).get("State", "")[:1] != "T" and time.monotonic() < end:
            time.sleep(0.01)                      # the stop is asynchronous: wait until it took
        with pytest.raises(GpuActivityUnavailable) as e:
            gpu_inject.preflight(p.pid)
        assert "is stopped (SIGSTOP)" in e.value.message and "kill -CONT" in e.value.hint
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.wait()


def test_preflight_refuses_when_ptrace_is_off(monkeypatch):
    monkeypatch.setattr(gpu_inject, "_ptrace_scope", lambda: 3)
    with pytest.raises(GpuActivityUnavailable) as e:
        gpu_inject.preflight(os.getpid())
    assert "ptrace_scope=3" in e.value.message and "RLSCOPE_GPU_ACTIVITY=1" in e.value.hint


def test_preflight_refuses_without_cap_sys_ptrace(monkeypatch):
    monkeypatch.setattr(gpu_inject, "_have_cap", lambda cap: False)
    with pytest.raises(GpuActivityUnavailable) as e:
        gpu_inject.preflight(os.getpid())
    assert "CAP_SYS_PTRACE" in e.value.message and "--cap-add SYS_PTRACE" in e.value.hint


def test_cli_gpu_activity_without_cuda_is_one_line_and_exit_2(tmp_path):
    p = _sleeper()
    try:
        r = subprocess.run([sys.executable, "-m", "rlscope_top.cli", "attach", str(p.pid), "--gpu-activity"],
                           capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    finally:
        p.kill()
        p.wait()
    lines = r.stderr.strip().splitlines()
    if os.geteuid() != 0:
        assert r.returncode == 7 and "root" in lines[0]
        return
    assert r.returncode == EXIT_USAGE
    assert len(lines) == 2 and "maps no CUDA library" in lines[0] and lines[1].strip().startswith("hint:")
    assert "Traceback" not in r.stderr


def test_the_agent_copy_is_root_owned_and_replaced_when_tampered(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("root only")
    d = tmp_path / "lib"
    path = gpu_inject.agent_path(str(d))
    st = os.stat(path)
    assert st.st_uid == 0 and st.st_mode & 0o777 == 0o644 and os.stat(d).st_mode & 0o777 == 0o755
    os.chmod(path, 0o666)                               # someone made it writable: not trusted, replaced
    again = gpu_inject.agent_path(str(d))
    assert again == path and os.stat(path).st_mode & 0o777 == 0o644
    os.chmod(d, 0o777)
    with pytest.raises(GpuActivityUnavailable) as e:
        gpu_inject.agent_path(str(d))
    assert "only root can write" in e.value.message
