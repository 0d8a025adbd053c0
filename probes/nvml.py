"""NVML sampler (nvidia-ml-py): what nvidia-smi would say, at NVML's own sample periods.

- device utilization.gpu and memory-controller utilization: ``nvmlDeviceGetSamples``
  returns the driver's buffered samples (each with its own timestamp) newer than the
  last one we saw, so each series keeps its native period (about 1/6 s on most GPUs);
  where that is not supported, ``nvmlDeviceGetUtilizationRates`` is polled instead.
- per-process SM/memory utilization of the target: ``nvmlDeviceGetProcessUtilization``.
- SM activity (GPM, Hopper and newer): ``nvmlGpmMetricsGet`` on two ``nvmlGpmSampleGet``
  snapshots ``GPM_PERIOD_S`` apart.
- memory used/total: ``nvmlDeviceGetMemoryInfo``.

No GPU, no driver, or no library: :meth:`NvmlSampler.start` returns one line saying
what is missing, and :meth:`poll` returns nothing. Nothing here raises to the caller.
This module knows nothing of the ring or the screen: it returns plain dicts.
"""

from __future__ import annotations

import time

POLL_PERIOD_S = 0.5
GPM_PERIOD_S = 1.0
MEMINFO_PERIOD_S = 1.0


_WALL_OFFSET = [0]       # wall clock - CLOCK_MONOTONIC, ns; measured once per poll


def _to_monotonic_ns(ts_us: int) -> int:
    """NVML sample timestamps are CPU wall-clock microseconds: convert to CLOCK_MONOTONIC ns."""
    return ts_us * 1000 - _WALL_OFFSET[0]


class _Device:
    """What we hold per device between polls."""

    def __init__(self, index: int, handle, name: str):
        self.index, self.handle, self.name = index, handle, name
        self.last = {"util": 0, "mem_util": 0, "proc": 0}
        self.native = {"util": True, "mem_util": True}
        self.gpm: list | None = None          # [older sample, its time] when GPM is supported
        self.proc_ok = True
        self.next_meminfo = 0.0


class NvmlSampler:
    """Samples every visible GPU for one target PID.

    Args:
        pid: the target; only its per-process samples are kept.
        nvml: the ``pynvml`` module (default: import it). Tests use the real one.
    """

    def __init__(self, pid: int, nvml=None):
        self.pid = pid
        self._nvml = nvml
        self.devices: list[_Device] = []
        self.ok = False
        self._next = 0.0

    def start(self) -> str | None:
        """Initialize NVML and find the devices. Returns None, or why NVML is unavailable."""
        try:
            n = self._nvml or __import__("pynvml")
            self._nvml = n
        except ImportError:
            return "NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py); utilization not sampled"
        try:
            n.nvmlInit()
        except n.NVMLError as e:
            return _why(n, e)
        try:
            count = n.nvmlDeviceGetCount()
            for i in range(count):
                h = n.nvmlDeviceGetHandleByIndex(i)
                name = n.nvmlDeviceGetName(h)
                self.devices.append(_Device(i, h, name.decode() if isinstance(name, bytes) else str(name)))
        except n.NVMLError as e:
            return _why(n, e)
        if not self.devices:
            return "NVML: no NVIDIA GPU visible (nvmlDeviceGetCount() is 0); utilization not sampled"
        for d in self.devices:
            d.gpm = self._gpm_start(d)
        self.ok = True
        return None

    def poll(self, now: float | None = None) -> list[dict]:
        """New samples since the last poll, one dict per device (at most every POLL_PERIOD_S)."""
        now = time.monotonic() if now is None else now
        if not self.ok or now < self._next:
            return []
        self._next = now + POLL_PERIOD_S
        _WALL_OFFSET[0] = time.time_ns() - time.monotonic_ns()
        return [self._device_poll(d, now) for d in self.devices]

    def stop(self) -> None:
        """Free GPM samples and shut NVML down."""
        if not self.ok:
            return
        n = self._nvml
        for d in self.devices:
            for s in (d.gpm or [None])[:1]:
                if s is not None:
                    try:
                        n.nvmlGpmSampleFree(s)
                    except n.NVMLError:
                        pass
        try:
            n.nvmlShutdown()
        except n.NVMLError:
            pass
        self.ok = False

    # -- one device -------------------------------------------------------
    def _device_poll(self, d: _Device, now: float) -> dict:
        n = self._nvml
        out: dict = {"dev": d.index, "name": d.name, "ts": time.monotonic_ns()}
        out["util"] = self._samples(d, "util", n.NVML_GPU_UTILIZATION_SAMPLES, lambda u: u.gpu)
        out["mem_util"] = self._samples(d, "mem_util", n.NVML_MEMORY_UTILIZATION_SAMPLES, lambda u: u.memory)
        out["proc"] = self._proc(d)
        sm = self._gpm_poll(d, now)
        if sm is not None:
            out["sm_active"] = [sm]
        if now >= d.next_meminfo:
            d.next_meminfo = now + MEMINFO_PERIOD_S
            try:
                mi = n.nvmlDeviceGetMemoryInfo(d.handle)
                out["mem_used"], out["mem_total"] = int(mi.used), int(mi.total)
            except n.NVMLError:
                pass
        out["native"] = dict(d.native)
        return out

    def _samples(self, d: _Device, key: str, kind: int, from_rates) -> list[list]:
        """Buffered samples newer than the last seen; polled rates where unsupported."""
        n = self._nvml
        if d.native[key]:
            try:
                _, samples = n.nvmlDeviceGetSamples(d.handle, kind, d.last[key])
            except n.NVMLError as e:
                if getattr(e, "value", None) == n.NVML_ERROR_NOT_FOUND:
                    return []            # no sample newer than the last one
                d.native[key] = False
            else:
                fresh = [s for s in samples if s.timeStamp > d.last[key]]
                if fresh:
                    d.last[key] = max(s.timeStamp for s in fresh)
                return [[_to_monotonic_ns(s.timeStamp), int(s.sampleValue.uiVal)] for s in fresh]
        try:
            return [[time.monotonic_ns(), int(from_rates(n.nvmlDeviceGetUtilizationRates(d.handle)))]]
        except n.NVMLError:
            return []

    def _proc(self, d: _Device) -> list[list]:
        n = self._nvml
        if not d.proc_ok:
            return []
        try:
            samples = n.nvmlDeviceGetProcessUtilization(d.handle, d.last["proc"])
        except n.NVMLError as e:
            if getattr(e, "value", None) != n.NVML_ERROR_NOT_FOUND:
                d.proc_ok = False        # not supported here: stop asking
            return []
        mine = [s for s in samples if s.pid == self.pid and s.timeStamp > d.last["proc"]]
        if samples:
            d.last["proc"] = max(d.last["proc"], max(s.timeStamp for s in samples))
        return [[_to_monotonic_ns(s.timeStamp), int(s.smUtil), int(s.memUtil)] for s in mine]

    def _gpm_start(self, d: _Device) -> list | None:
        n = self._nvml
        try:
            if not n.nvmlGpmQueryDeviceSupport(d.handle).isSupportedDevice:
                return None
            s = n.nvmlGpmSampleAlloc()
            n.nvmlGpmSampleGet(d.handle, s)
            return [s, time.monotonic(), n.nvmlGpmSampleAlloc()]
        except (n.NVMLError, AttributeError):
            return None

    def _gpm_poll(self, d: _Device, now: float) -> list | None:
        """SM activity % over the last GPM_PERIOD_S, [ts, pct], or None."""
        if d.gpm is None or now - d.gpm[1] < GPM_PERIOD_S:
            return None
        n = self._nvml
        older, _, newer = d.gpm
        try:
            n.nvmlGpmSampleGet(d.handle, newer)
            mg = n.c_nvmlGpmMetricsGet_t()
            mg.version = n.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = 1
            mg.sample1, mg.sample2 = older, newer
            mg.metrics[0].metricId = n.NVML_GPM_METRIC_SM_UTIL
            n.nvmlGpmMetricsGet(mg)
        except n.NVMLError:
            d.gpm = None
            return None
        d.gpm = [newer, now, older]            # swap: the newer becomes the base
        return [time.monotonic_ns(), float(mg.metrics[0].value)]


def _why(n, e) -> str:
    """One line for an NVML failure: what is missing and how to fix it."""
    if isinstance(e, getattr(n, "NVMLError_LibraryNotFound", ())):
        return ("NVML: libnvidia-ml.so not found (no NVIDIA driver on this machine); "
                "install the driver to sample utilization")
    if isinstance(e, getattr(n, "NVMLError_DriverNotLoaded", ())):
        return "NVML: the NVIDIA driver is not loaded (modprobe nvidia); utilization not sampled"
    if isinstance(e, getattr(n, "NVMLError_NoPermission", ())):
        return "NVML: no permission to query the GPU; run as root or fix /dev/nvidia* permissions"
    return f"NVML unavailable: {e}"
