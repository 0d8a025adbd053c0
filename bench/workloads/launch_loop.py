"""A launch-bound loop for the CUPTI overhead bench: many small torch ops per step.

On a GPU (``cuda`` available) every op launches a kernel; on a CPU-only machine the same
loop runs on the CPU, which measures only the launch-mode path without CUPTI records.
Prints one JSON line: {"device", "seconds", "steps", "ops"}; with --torch-profiler the
loop runs under torch.profiler (CPU, and CUDA activities where there is a GPU).

usage: launch_loop.py STEPS [--torch-profiler]
"""

import json
import sys
import time

import torch

steps = int(sys.argv[1])
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


for _ in range(20):        # warm-up (CUDA context, allocator, kernels loaded)
    step()
if dev == "cuda":
    torch.cuda.synchronize()
ctx = None
if profiler:
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
    ctx = torch.profiler.profile(activities=acts)
    ctx.__enter__()
t0 = time.perf_counter()
for _ in range(steps):
    loss = step()
loss.item()                # one sync at the end, as a training loop logs
seconds = time.perf_counter() - t0
kernels = None
if ctx is not None:
    ctx.__exit__(None, None, None)
    if dev == "cuda":
        kernels = sum(1 for e in ctx.events() if e.device_type == torch.autograd.DeviceType.CUDA)
print(json.dumps({"device": dev, "seconds": seconds, "steps": steps, "profiler_kernels": kernels}), flush=True)
