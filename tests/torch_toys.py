"""Small PyTorch pieces the optimizer tests share, in-process (tests/test_optimizers.py)
and inside MPI ranks (tests/in_rank/test_torch_optimizers_mpi.py): a seeded blob data set,
two tiny classifiers (one with BatchNorm: buffers that travel with the token), and a
third-party-style optimizer."""
from __future__ import annotations

import numpy as np
import torch

F, C = 5, 3  # features, classes


def blobs(size: int = 96, seed: int = 0):
    """``size`` samples of C Gaussian blobs in F dimensions: (x float32, y int)."""
    gen = np.random.default_rng(seed)
    y = gen.integers(0, C, size)
    return (gen.standard_normal((size, F)) + y[:, None]).astype(np.float32), y


def net():
    return torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.ReLU(), torch.nn.Linear(8, C))


def bn_net():
    return torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, C))


class Lion(torch.optim.Optimizer):
    """A third-party-style optimizer (sign of an interpolated momentum, as the Lion
    paper's): its own state (a momentum tensor, a Python int step count) made lazily."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"], state["exp_avg"] = 0, torch.zeros_like(p)
                state["step"] += 1
                m = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(torch.sign(m * b1 + p.grad * (1 - b1)), alpha=-group["lr"])
                m.mul_(b2).add_(p.grad, alpha=1 - b2)
