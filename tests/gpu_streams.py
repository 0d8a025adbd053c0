"""Hand-built ring streams with GPU records and known answers (summary and TUI tests).

The stream is what the collector writes: the activities go through the collector's own
GPU aggregation (rlscope_top.account.gpu_accounting.GpuTotals), which puts one cumulative
``gtot`` record after every counters record.

A 4-second session of one Python thread on a CUDA policy: the collector ticks every
0.25 s; in every tick the thread is on a CPU for 200 ms and the GPU runs 10 kernels of
5 ms each, back to back (50 ms busy per tick: 20% GPU-bound). NVML says 100% busy the
whole time (nvidia-smi's inflated view). There are 8 optimizer steps.

With ``ops=True`` the thread's time is split between two annotated operations and time
outside them, per tick: inference 100 ms on CPU + 20 off, train 60 + 20, <none> 40 + 10
(OP_TICK). The GPU is busy 20% of every tick, so each operation's overlap is its on-CPU
time x 0.2 (both) and x 0.8 (CPU only), its off-CPU time x 0.2 (GPU only) and x 0.8 (idle).
"""

import numpy as np

from rlscope_top.ring import gpu_records as G
from rlscope_top.ring import records as R
from rlscope_top.account.gpu_accounting import GpuTotals
from rlscope_top.collect.gpu_join import JOINED

MS = 1_000_000
T0 = 10_000 * MS                  # ten seconds of uptime: before 1 s, a record has no time
TICK = 250 * MS
TICKS = 16
ON_PER_TICK = 200 * MS
KERNELS_PER_TICK, KERNEL = 10, 5 * MS
STEPS = 8
OP_TICK = {"inference": (100 * MS, 20 * MS), "train": (60 * MS, 20 * MS), "<none>": (40 * MS, 10 * MS)}


def _meta():
    probes = [{"id": 0, "group": "cudart", "label": "cudaLaunchKernel", "kind": "pair", "cost_ns": 1900},
              {"id": 1, "group": "cudart", "label": "cudaStreamSynchronize", "kind": "pair", "cost_ns": 1900}]
    return R.meta(pid=42, command="python ppo_cuda.py", t0_ns=T0, wall0=1_700_000_000.0, interval_s=1.0,
                  probes=probes, labels=["cudaLaunchKernel", "cudaStreamSynchronize"],
                  groups={"cudart": ["/x/libcudart.so.13"]}, missing={}, host="h", kernel="k")


def _ctr(i, launches, ops=False):
    th = R.thread(tid=42, name="python", python=True, exited=False,
                  ns=[[i * ON_PER_TICK, i * (TICK - ON_PER_TICK)], [0, 0], [0, 0], [0, 0]],
                  trans=[[0] * 4 for _ in range(4)], calls=[0, 0, 0, 0], oh=[0, 0, 0, 0])
    return R.counters(T0 + i * TICK, [th], [launches, 2 * i], ops=_ops(i) if ops else None)


def _ops(i):
    """Cumulative operation records after i ticks (Python time only: on, off CPU)."""
    return [R.operation(id=k + 1, name=n, kind="", source="annotated",
                        ns=[[i * on, i * off], [0, 0], [0, 0], [0, 0]], trans=[[0] * 4 for _ in range(4)],
                        calls=[0, 0, 0, 0], oh=[0, 0, 0, 0])
            for k, (n, (on, off)) in enumerate(OP_TICK.items()) if n != "<none>"]


OPS = ["<all>", "inference", "train"]
NAMES = {0: "ampere_sgemm_32x32", 1: "elementwise_tanh"}     # kernel name pointer -> name


def _kernels(i, ops=False, timestamps=True) -> np.ndarray:
    """The tick's kernels; with ops, launched alternately from inference and train; without
    timestamps, CUPTI's 0 less a clock offset of 252 ns (what the joiner makes of it)."""
    a = np.zeros(KERNELS_PER_TICK, JOINED)
    for k in range(KERNELS_PER_TICK):
        start = T0 + i * TICK + 100 * MS + k * KERNEL
        a[k] = (0, start, start + KERNEL, 0, 7, 1000 * i + k, k % 2, 42, start - 20_000, 1 + k % 2 if ops else 0)
    if not timestamps:
        a["start"] = a["end"] = -252
    return a


def _stale(n: int) -> np.ndarray:
    """``n`` memcpys that ended before the session (a 1 us copy each, the last 1 ms before T0)."""
    a = np.zeros(n, JOINED)
    a["kind"], a["device"] = 1, 0
    a["end"] = T0 - MS - np.arange(n) * 2000
    a["start"] = a["end"] - 1000
    return a


def _nvml(i) -> dict:
    return {"ts": T0 + i * TICK, "dev": 0, "name": "NVIDIA H100",
            "util": [[T0 + i * TICK - 166 * MS, 100], [T0 + i * TICK - 83 * MS, 100]],
            "mem_util": [[T0 + i * TICK, 3]], "mem_used": 3 << 30, "mem_total": 80 << 30}


def gpu_stream(cupti: bool = True, nvml: bool = True, end: bool = True, ops: bool = False,
               kernels: bool = True, launches_per_tick: int = KERNELS_PER_TICK, timestamps: bool = True,
               stale: int = 0) -> list[dict]:
    """The session; ``cupti=False`` is the same job without the agent (CPU-side figures only);
    ``kernels=False``, CUPTI on and delivering no kernel record while the probes count
    ``launches_per_tick`` launches a tick; ``timestamps=False``, kernel records without times;
    ``stale``, that many records that ended before the session, delivered first."""
    out = [_meta()]
    tot = GpuTotals(t0=T0)

    def status(rec):
        tot.status[rec["source"]] = rec
        out.append(rec)

    def counters(rec):
        out.append(rec)
        tot.counters(rec)
        out.append(tot.record(rec["ts"]))

    status(G.status(T0, "cupti", True, "ok", "CUPTI activity on") if cupti else
           G.status(T0, "cupti", False, "no_agent", G.HOW_TO))
    status(G.status(T0, "nvml", True, "ok", "NVML: sampling 1 GPU(s): NVIDIA H100") if nvml else
           G.status(T0, "nvml", False, "unavailable", "NVML: libnvidia-ml.so not found (no NVIDIA driver)"))
    counters(_ctr(0, 0, ops))
    if stale:
        tot.add(_stale(stale), OPS, NAMES)
    for i in range(1, TICKS + 1):
        if cupti and kernels:
            tot.add(_kernels(i - 1, ops, timestamps), OPS, NAMES)
        if nvml:
            tot.nvml_sample(_nvml(i))
        tot.sync({"cudaStreamSynchronize": i * 30 * MS}, {"cudaStreamSynchronize": 2 * i})
        counters(_ctr(i, launches_per_tick * i, ops))
    out.append(R.intervals([R.interval(42, "range", "Optimizer.step#Adam.step", T0 + s * 500 * MS,
                                       T0 + s * 500 * MS + MS) for s in range(STEPS)]))
    if end:
        tot.finish()
        out.append(tot.record(T0 + TICKS * TICK))
        out.append(R.end(T0 + TICKS * TICK, "target exited"))
    return out
