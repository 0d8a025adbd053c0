"""One cell of the nvidia-smi case study (bench/case_gpu_util.py).

Bursts of BURST float32 N x N matmuls on the GPU, then a synchronize (the step reads its
result back, as an RL step reads its action), then GAP_MS of Python busy-waiting (the CPU
side of the step: Python running, the GPU idle), repeated for SECONDS.

It loads rlscope-top's GPU agent first (``rlscope_top.enable_gpu_activity``), so a monitor
that attaches needs no ptrace to time its kernels. It warms up, prints ``ready PID`` and,
with --go, waits for that file; after the loop it prints one JSON line and leaves at once
(``os._exit``: no interpreter or CUDA teardown inside the profiled window).

usage: gpu_sweep.py N GAP_MS SECONDS [--go FILE] [--burst 3]
"""

import argparse
import json
import os
import time

WARMUP_BURSTS = 20


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("n", type=int, help="matrix size: each kernel is an N x N x N float32 matmul")
    ap.add_argument("gap_ms", type=float, help="Python busy-wait after each burst, ms")
    ap.add_argument("seconds", type=float, help="length of the measured loop")
    ap.add_argument("--go", help="wait for this file before the loop (the monitor is attached)")
    ap.add_argument("--burst", type=int, default=3, help="matmuls between two gaps")
    return ap.parse_args()


def _prepare_agent() -> None:
    """Load the GPU agent while nobody watches: idle until a monitor attaches."""
    try:
        import rlscope_top  # noqa: PLC0415

        rlscope_top.enable_gpu_activity()
    except ImportError:
        pass                      # attach --gpu-activity injects it instead


def _spin(seconds: float) -> None:
    """Busy-wait, not sleep: the gap is Python at work, as between an RL step's kernels."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    a = _args()
    _prepare_agent()
    import torch  # noqa: PLC0415 - after the agent, so it sees CUDA start

    torch.backends.cuda.matmul.allow_tf32 = False       # plain fp32: the same kernel on every GPU
    x = torch.randn(a.n, a.n, device="cuda")
    y = torch.randn(a.n, a.n, device="cuda")
    out = torch.empty_like(x)

    def burst() -> None:
        for _ in range(a.burst):
            torch.mm(x, y, out=out)                     # out=: no allocator work between kernels
        torch.cuda.synchronize()

    for _ in range(WARMUP_BURSTS):                       # context, cuBLAS handle, kernels loaded
        burst()
    print("ready", os.getpid(), flush=True)
    while a.go and not os.path.exists(a.go):
        time.sleep(0.005)
    bursts, gap, t0 = 0, a.gap_ms / 1e3, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        burst()
        bursts += 1
        _spin(gap)
    loop_s = time.perf_counter() - t0
    print(json.dumps({"n": a.n, "gap_ms": a.gap_ms, "burst": a.burst, "bursts": bursts,
                      "matmuls": bursts * a.burst, "loop_s": round(loop_s, 6),
                      "matmuls_per_s": round(bursts * a.burst / loop_s, 1),
                      "device": torch.cuda.get_device_name(0)}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
