"""A small CPU-only torch training loop for `rlscope-top run`; exits with argv[2].

Usage: cpu_train.py STEPS EXIT_CODE
"""

import sys

import torch

steps, code = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for _ in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print(f"trained {steps} steps on {'cuda' if torch.cuda.is_available() else 'cpu'}", flush=True)
sys.exit(code)
