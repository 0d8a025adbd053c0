"""The NVML sampler behind its real interface (pynvml; this machine has no
libnvidia-ml.so), and the --gpu-activity version check."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from rlscope_top import remote
from rlscope_top.errors import EXIT_GPU_ACTIVITY, GpuActivityUnavailable
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


def test_remote_exec_needs_python_314_on_both_sides():
    with pytest.raises(GpuActivityUnavailable) as e:
        remote.check(1, monitor=(3, 11), target=(3, 14))
    assert "3.14" in e.value.message and "3.11" in e.value.message and "rlscope-top run" in e.value.hint
    with pytest.raises(GpuActivityUnavailable) as e:
        remote.check(1, monitor=(3, 14), target=(3, 12))
    assert "PID 1 is CPython 3.12" in e.value.message
    assert e.value.code == EXIT_GPU_ACTIVITY and e.value.pid == 1


def test_target_python_version_is_read_from_proc():
    p = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()
        assert remote.target_python(p.pid) == sys.version_info[:2]
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="checks the message shown before CPython 3.14")
def test_cli_gpu_activity_says_what_to_do_instead(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()
        r = subprocess.run([sys.executable, "-m", "rlscope_top.cli", "attach", str(p.pid), "--gpu-activity"],
                           capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    finally:
        p.kill()
        p.wait()
    assert r.returncode == EXIT_GPU_ACTIVITY
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and "needs CPython >= 3.14" in lines[0] and lines[1].strip().startswith("hint:")
    assert "Traceback" not in r.stderr
