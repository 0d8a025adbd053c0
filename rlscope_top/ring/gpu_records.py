"""Builders for the GPU ring records (format v1, additive; docs/ring-format.md).

Times are CLOCK_MONOTONIC ns like every other record: CUPTI's and NVML's own
clocks are converted by the collector before writing.
"""

from __future__ import annotations

from ..vocab import ALL_OP, NONE_OP  # noqa: F401 - the records name operations with these

GPU, GPU_STATUS, NVML, SYNC, TOTALS = "gpu", "gstat", "nvml", "gsync", "gtot"

# Item layout of a `gpu` record, one list per activity record.
KIND, START, END, DEVICE, STREAM, CORR, TID, LAUNCH, OP, DETAIL = range(10)
KERNEL, MEMCPY, MEMSET = "k", "m", "s"

# What to do when a process runs without the GPU activity agent (shown as is).
HOW_TO = ("GPU kernel timing needs the GPU agent in the process: attach with `rlscope-top PID --gpu-activity` "
          "(injects it), launch with `rlscope-top run -- CMD`, or start the job with RLSCOPE_GPU_ACTIVITY=1 "
          "(or call rlscope_top.enable_gpu_activity())")
NO_GPU = "no GPU to time"   # a CPU-only process on a machine with no driver: no how-to (no_gpu)


def no_gpu(pid: int) -> str:
    """The notice for a process that maps no CUDA library, on a machine with no NVIDIA driver."""
    return f"{NO_GPU} (no NVIDIA driver on this machine, no CUDA library in PID {pid})"


def activity(kind: str, start: int, end: int, device: int, stream: int, corr: int, tid: int, launch_ts: int,
             op: str, detail: int) -> list:
    """One GPU activity: kind k/m/s, start/end on the GPU, the launching thread (0 unknown),
    when its CUDA API call began (0 unknown), the operation, and a detail (kernel name id
    for kernels, bytes for memcpy/memset)."""
    return [kind, start, end, device, stream, corr, tid, launch_ts, op, detail]


def gpu(items: list[list], names: dict[int, str]) -> dict:
    """A batch of GPU activity; ``names`` adds kernel names first seen in it."""
    return {"t": GPU, "items": items, "names": names}


def status(ts: int, source: str, ok: bool, code: str, msg: str, **extra) -> dict:
    """Whether a GPU source works: ``source`` cupti or nvml; ``code`` ok, no_driver,
    no_gpu, no_permission, not_installed, no_agent, error; ``msg`` one line with the fix."""
    return {"t": GPU_STATUS, "ts": ts, "source": source, "ok": ok, "code": code, "msg": msg, **extra}


def nvml(ts: int, device: int, name: str, **series) -> dict:
    """NVML samples of one device since the last record, each at its native period:
    ``util`` / ``mem_util`` / ``sm_active`` / ``proc`` as ``[[ts, value], ...]`` (proc:
    ``[ts, sm, mem]`` for the target's PID), ``mem_used``/``mem_total`` bytes."""
    return {"t": NVML, "ts": ts, "dev": device, "name": name, **series}


def sync(ts: int, ns: dict[str, int], calls: dict[str, int]) -> dict:
    """Cumulative time blocked in CUDA synchronize calls, per API (outermost calls only)."""
    return {"t": SYNC, "ts": ts, "ns": ns, "calls": calls}


def totals(ts: int, **fields) -> dict:
    """Everything GPU so far, cumulative (rlscope_top/gpu_accounting.GpuTotals.record): a
    reader that starts late or loses records to a lapped ring still has every figure.

    Fields: ``all``/``ops``/``devices`` (kernels, kernel_ns, memcpys, memcpy_ns,
    memcpy_bytes, memsets, memset_ns, joined, kernels_joined, latency_ns, busy_ns),
    ``top`` [[name, count, ns]], ``late`` (records after the reorder window), ``clipped``
    (late ones whose time reached past the kept bins), ``overlap`` and ``op_overlap`` (ns by
    cpu_only/gpu_only/both/idle), ``live`` (the screen's "now" window), ``nvml`` (per
    device: n/sum/period of util, mem_util, sm_active, proc_sm; memory), ``sync``,
    ``status`` (per source, the latest ``gstat``) and ``agent`` (the GPU agent's counters).
    """
    return {"t": TOTALS, "ts": ts, **fields}
