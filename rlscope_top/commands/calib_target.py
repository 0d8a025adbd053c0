"""The process `rlscope-top calibrate` measures: runs loops on request over stdin.

Commands (one per line): ``loop MODE N K`` runs N iterations and answers with a
JSON line {loop_ns, body_ns, wait_ns}; ``pingpong N`` runs N round trips between two threads
and answers {loop_ns, switches}; ``spin S`` runs the RL-shaped loop for S seconds and answers
{steps, cpu_ns}. Modes: bracket, bracket_ool, pair, pair_ool, and
``torch`` (N additions of two 8x8 tensors: a real torch op binding, for the torch
probes' own cost; body_ns is then 0: the binding's own time is not known).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import threading
import time


def _pingpong(n: int) -> dict:
    """N round trips between this thread and one it starts, both on one CPU: each switch goes
    from one to the other with no CPU idle between (across two CPUs a VM's idle-and-wake path
    set the time, and the probed loop often ran faster than the plain one: a price of 0)."""
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {max(mask)})           # the echo thread inherits it
    try:
        return _round_trips(n)
    finally:
        os.sched_setaffinity(0, mask)


def _round_trips(n: int) -> dict:
    a, b = os.pipe(), os.pipe()

    def echo():
        for _ in range(n):
            os.write(b[1], os.read(a[0], 1))

    t = threading.Thread(target=echo)
    t.start()
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        os.write(a[1], b"x")
        os.read(b[0], 1)
    dt = time.perf_counter_ns() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    t.join()
    for fd in (*a, *b):
        os.close(fd)
    return {"loop_ns": dt, "switches": (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)}


def _spin(seconds: float, rl_step) -> dict:
    """Steps of the RL-shaped loop (a Python loop where torch is not installed) for ``seconds``:
    {steps, cpu_ns} (this thread's time on a CPU, an interrupt's included, a wait for a CPU not)."""
    step = rl_step or (lambda k: sum((i * 31) % 1009 for i in range(200)))
    n, c0 = 0, time.thread_time_ns()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(16):
            step(8)
        n += 16
    return {"steps": n, "cpu_ns": time.thread_time_ns() - c0}


def _run_delay() -> int | None:
    """ns this thread has waited on a run queue so far (/proc schedstat), or None where the
    kernel does not keep it: calibrate leaves the wait out of a loop's time and tries a round
    again when its loops waited (a neighbour's time on the CPU is no probe's cost)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _torch_op():
    """A tiny torch op, or None where torch is not installed."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None
    torch.set_num_threads(1)
    a, w = torch.randn(8, 8), torch.randn(8, 8)
    add = torch.add
    return lambda k: add(a, w)


def _rl_step():
    """One step of an RL-shaped loop (issue 16's: a 200-iteration Python env step, a tiny MLP
    forward, an SGD update every K steps), or None where torch is not installed: probes in
    a real program cost more than on a tight loop (the code after each trap runs slower)."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    obs, state = torch.zeros(1, 8), [0, 1]

    def step(k):
        x = state[1]
        for i in range(200):
            x = (x * 31 + i) % 1009
        state[1] = x
        out = net(obs)
        if state[0] % k == k - 1:
            opt.zero_grad()
            out.sum().backward()
            opt.step()
        state[0] += 1
    return step


def main() -> None:
    """Serve loop requests until stdin closes."""
    lib = ctypes.CDLL(sys.argv[1])
    lib.cal_body_ns.restype = ctypes.c_ulonglong
    for f in (lib.cal_push, lib.cal_ool, lib.cal_bracket, lib.cal_bracket_ool):
        f.argtypes, f.restype = [ctypes.c_long], ctypes.c_long
    loops = {
        "pair": lambda k: lib.cal_push(k),
        "pair_ool": lambda k: lib.cal_ool(k),
        "bracket": lambda k: lib.cal_bracket(k),
        "bracket_ool": lambda k: lib.cal_bracket_ool(k),
        "torch": _torch_op(),
        "rl": _rl_step(),
    }
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "pingpong":
            print(json.dumps(_pingpong(int(cmd[1]))), flush=True)
            continue
        if cmd[0] == "spin":
            print(json.dumps(_spin(float(cmd[1]), loops["rl"])), flush=True)
            continue
        fn, n, k = loops[cmd[1]], int(cmd[2]), int(cmd[3])
        lib.cal_reset()
        t0 = time.perf_counter_ns()
        w0 = _run_delay()            # inside the timed span: a wait between the two reads is in it
        for _ in range(n):
            fn(k)
        w1 = _run_delay()
        dt = time.perf_counter_ns() - t0
        print(json.dumps({"loop_ns": dt, "body_ns": lib.cal_body_ns() if cmd[1] not in ("torch", "rl") else 0,
                          "wait_ns": None if w0 is None or w1 is None else w1 - w0}), flush=True)


if __name__ == "__main__":
    main()
