"""``--problem factories:NAME`` problem factories for tests (tests/scripts on PYTHONPATH):
``slow`` takes 4 s to build the quadratic problem, ``very_slow`` 60 s, ``exits`` calls
sys.exit(0),
``announcing`` is the quadratic problem touching $ROUNDS_STARTED once its rounds run,
``torch_without_validation`` is a TorchProblem without a validation set,
``torch_per_sample_loss`` one whose loss returns a value per sample."""
import os
import sys
import time

from mpi_teleport.problems.quadratic import quadratic


def slow(nodes, seed):
    time.sleep(4.0)
    return quadratic(nodes, seed=seed)


def very_slow(nodes, seed):
    """60 s (or $FACTORY_SLEEP) in Python code that cannot poll for signals (a large data
    set loading); touches $FACTORY_STARTED, when set, as it starts."""
    if os.environ.get("FACTORY_STARTED"):
        open(os.environ["FACTORY_STARTED"], "a").close()
    time.sleep(float(os.environ.get("FACTORY_SLEEP", "60")))
    return quadratic(nodes, seed=seed)


def announcing(nodes, seed):
    """The quadratic problem (dim 50), whose gradient touches $ROUNDS_STARTED, when set,
    from round 2 on: a test signals the run mid-way without waiting for a record."""
    from mpi_teleport.problems.quadratic import Quadratic

    class Announcing(Quadratic):
        def gradient(self, nodes, x, t, out=None):
            self.announce(t)
            return super().gradient(nodes, x, t, out)

        def gradient_columns(self, nodes, x, t, columns, *args, **kwargs):
            self.announce(t)
            return super().gradient_columns(nodes, x, t, columns, *args, **kwargs)

        def announce(self, t):
            path = os.environ.get("ROUNDS_STARTED")
            if t >= 2 and path and not getattr(self, "_announced", False):
                self._announced = True
                open(path, "a").close()

    problem = quadratic(nodes, seed=seed)
    problem.__class__ = Announcing
    return problem


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


def torch_per_sample_loss(nodes, seed):
    """A TorchProblem whose loss returns one value per sample: refused at construction in
    one line (issue 31, class 4)."""
    import numpy as np
    import torch

    import mpi_teleport as mt

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(12 * nodes, 4)).astype(np.float32)
    return mt.TorchProblem(lambda: torch.nn.Linear(4, 2), (x, (x[:, 0] > 0).astype(np.int64)),
                           nodes=nodes, seed=seed, batch_size=4,
                           loss=lambda out, y: torch.nn.functional.cross_entropy(out, y, reduction="none"))
