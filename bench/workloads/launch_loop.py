"""A launch-bound loop for the CUPTI overhead bench: many small torch ops per step.

On a GPU (``cuda`` available) every op launches a kernel; on a CPU-only machine the same
loop runs on the CPU, which measures only the launch-mode path without CUPTI records.
Prints one JSON line: {"device", "seconds", "steps", "ops"}; with --torch-profiler the
loop runs under torch.profiler (CPU, and CUDA activities where there is a GPU).

With --forever it runs until SIGTERM/SIGINT and prints a JSON line every 0.25 s:
{"t": monotonic s, "steps": steps so far} (for attach/detach speed checks).

usage: launch_loop.py STEPS [--torch-profiler] | launch_loop.py --forever
"""

import json
import sys
import time

import torch

forever = "--forever" in sys.argv
steps = 0 if forever else int(sys.argv[1])
WARMUP = 20
profiler = "--torch-profiler" in sys.argv
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(32, 64, device=dev)


def step():
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss


loss = None
for _ in range(WARMUP):    # warm-up (CUDA context, allocator, kernels loaded)
    loss = step()
if dev == "cuda":
    torch.cuda.synchronize()
if forever:
    import signal

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    n, last = 0, time.monotonic()
    print("ready", flush=True)
    try:
        while True:
            loss = step()
            n += 1
            if n % 50 == 0:
                loss.item()
                now = time.monotonic()
                if now - last >= 0.25:
                    last = now
                    print(json.dumps({"t": now, "steps": n}), flush=True)
    except KeyboardInterrupt:
        sys.exit(0)
ctx = None
if profiler:
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
    ctx = torch.profiler.profile(activities=acts)
    ctx.__enter__()
t0 = time.perf_counter()
for _ in range(steps):
    loss = step()
loss.item()                # one sync at the end, as a training loop logs (0 steps: the warm-up's)
seconds = time.perf_counter() - t0
kernels = activities = None
if ctx is not None:
    ctx.__exit__(None, None, None)
    if dev == "cuda":
        # The GPU lane also holds record_function ranges (`Optimizer.step#Adam.step`, one a
        # step, seen on an H200): an event whose name is a CPU event's too is not an activity.
        cuda = torch.autograd.DeviceType.CUDA
        cpu_names = {e.name for e in ctx.events() if e.device_type != cuda}
        gpu = [e.name for e in ctx.events() if e.device_type == cuda and e.name not in cpu_names]
        activities = len(gpu)
        kernels = sum(1 for n in gpu if not n.startswith(("Memcpy", "Memset")))
print(json.dumps({"device": dev, "seconds": seconds, "steps": steps, "warmup_steps": WARMUP,
                  "profiler_kernels": kernels, "profiler_activities": activities}), flush=True)
