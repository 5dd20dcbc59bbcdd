"""``--problem factories:NAME`` problem factories for tests (tests/scripts on PYTHONPATH):
``slow`` takes 4 s to build the quadratic problem, ``exits`` calls sys.exit(0),
``torch_without_validation`` is a TorchProblem without a validation set."""
import sys
import time

from mpi_teleport.problems.quadratic import quadratic


def slow(nodes, seed):
    time.sleep(4.0)
    return quadratic(nodes, seed=seed)


def exits(nodes, seed):
    sys.exit(0)


def torch_without_validation(nodes, seed):
    """A TorchProblem built without a validation set: Algorithm 2 (--k auto) must refuse
    it at its start in one line (issue 31, class 9)."""
    import numpy as np
    import torch

    import mpi_teleport as mt

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(12 * nodes, 4)).astype(np.float32)
    return mt.TorchProblem(lambda: torch.nn.Linear(4, 2), (x, (x[:, 0] > 0).astype(np.int64)),
                           nodes=nodes, seed=seed, batch_size=4)
