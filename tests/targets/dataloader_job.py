"""A torch DataLoader with two persistent worker processes, each item a little pure Python
(a decoded sample) and a tensor; the main process takes batches and does a matmul on each.

usage: dataloader_job.py
"""

import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __len__(self):
        return 1009

    def __getitem__(self, i):
        end = time.perf_counter() + 0.002       # decoding: Python work in the worker
        x = 0
        while time.perf_counter() < end:
            x += i * i
        return torch.full((16,), float(i % 7))


def main():
    torch.set_num_threads(1)
    loader = DataLoader(Samples(), batch_size=8, num_workers=2, persistent_workers=True)
    w = torch.randn(16, 16)
    it = iter(loader)
    next(it)
    print(f"ready {os.getpid()}", flush=True)
    while True:
        for batch in loader:
            torch.mm(batch, w)


if __name__ == "__main__":
    main()
