"""A fixed, seeded subsample of a test set (``TorchProblem(test_samples=N)``): evaluating
N samples instead of all of them makes frequent evaluation cheap, and because the N are
the same at every evaluation (and in every process) the records stay comparable from
round to round and the simulator equals MPI."""
from __future__ import annotations

import numpy as np

from ..core import rng
from .torch_options import positive_int

__all__ = ["fixed_subsample"]


def fixed_subsample(test, count, seed: int):
    """``count`` samples of ``test`` ((X, y) or a map-style Dataset), chosen by ``seed``
    alone and kept in their original order; the whole set when it has no more."""
    count = positive_int(count, "test_samples")
    if test is None:
        raise ValueError("test_samples needs a test set: give test= (or leave test_samples out)")
    size = len(test[-1]) if isinstance(test, tuple) else len(test)
    if count >= size:
        return test
    gen = rng.generator(seed, rng.STREAM_TEST_SUBSAMPLE, 0)
    index = np.sort(gen.choice(size, size=count, replace=False)).astype(np.int64)
    if isinstance(test, tuple):
        return tuple(part[index] for part in test)
    import torch

    return torch.utils.data.Subset(test, index.tolist())
