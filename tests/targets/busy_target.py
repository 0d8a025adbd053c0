"""A busy process to inject the GPU agent into, many times, while it works.

Modes (it maps the CUDA runtime wheel's libcudart, as a CUDA job would, so that
--gpu-activity's checks accept it):
- threads: 4 threads recompute a SHA-256 chain and check it against the known answer;
- syscalls: threads blocked in read() on a FIFO, in sleep() and in select(); what they read
  they print back once the test writes it;
- torch: a torch matmul loop that checks every result against the first one.

Any wrong answer prints a BAD line. On the stop file it prints `ok` and its work count and
exits 0. Usage: busy_target.py MODE STOP [FIFO]
"""

import ctypes
import glob
import hashlib
import os
import select
import sys
import threading
import time

import nvidia

mode, stop = sys.argv[1], sys.argv[2]
ctypes.CDLL(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib", "libcudart.so.*")))[0])
counts = [0] * 4
lock = threading.Lock()


def chain(n: int) -> str:
    h = b"rlscope"
    for _ in range(n):
        h = hashlib.sha256(h).digest()
    return h.hex()


ANSWER = chain(2000)


def hasher(i: int) -> None:
    while not os.path.exists(stop):
        if chain(2000) != ANSWER:
            print("BAD chain", i, flush=True)
        counts[i] += 1


def reader(path: str) -> None:
    with open(path, "rb", buffering=0) as f:
        data = f.read(64)
    print("read", data.decode(), flush=True)


def sleeper() -> None:
    while not os.path.exists(stop):
        time.sleep(0.2)
        counts[1] += 1


def selecter() -> None:
    r, w = os.pipe()
    while not os.path.exists(stop):
        select.select([r], [], [], 0.3)
        counts[2] += 1


def torch_loop() -> None:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    a, b = torch.randn(96, 96), torch.randn(96, 96)
    first = (a @ b).sum().item()
    warm.set()
    while not os.path.exists(stop):
        if (a @ b).sum().item() != first:
            print("BAD matmul", flush=True)
        counts[0] += 1


warm = threading.Event()          # torch imported and its first answer known
threads = []
if mode != "torch":
    warm.set()
if mode == "threads":
    threads = [threading.Thread(target=hasher, args=(i,)) for i in range(4)]
elif mode == "syscalls":
    threads = [threading.Thread(target=reader, args=(sys.argv[3],)), threading.Thread(target=sleeper),
               threading.Thread(target=selecter)]
elif mode == "torch":
    threads = [threading.Thread(target=torch_loop)]
for t in threads:
    t.start()
warm.wait()
print("ready", os.getpid(), flush=True)
for t in threads:
    t.join()
print("ok", sum(counts) > 0, flush=True)
