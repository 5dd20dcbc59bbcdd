"""Training problems. Each maps the rows of a token matrix to stochastic gradients of the
holders' local losses and evaluates a token matrix (:class:`mpi_teleport.problem.Problem`).

Built-in problems are factories called with keyword arguments ``nodes`` and ``seed``
(the ``--problem`` convention): :func:`.quadratic.quadratic`, and over
:class:`.torch_problem.TorchProblem` :func:`.network.digits`,
:func:`.network.fashion_mnist`, :func:`.network.cifar10`. Importing this package imports
neither torch nor mpi4py.
"""
from __future__ import annotations

import functools
import math


def make_problem(cfg, comm=None, local_rank: int = 0):
    """The problem a Config asks for (network problems are loaded once per process).

    ``local_rank`` (this process's rank among those on its machine; the MPI layer
    computes it) picks the GPU under ``--device auto/cuda``. ``comm`` is accepted for
    existing callers and not used: problems never talk MPI.
    """
    if cfg.problem == "quadratic":
        from .quadratic import quadratic

        return quadratic(nodes=cfg.nodes, seed=cfg.seed, dim=cfg.dim, sigma2=cfg.sigma2,
                         zeta2=cfg.zeta2)
    from .device import pick_device

    return _network(cfg.replace(rounds=1, k=None, algorithm="compare", lr=1.0, epochs=None,
                                momentum=0.0, lr_schedule="constant", out=None),
                    pick_device(cfg.device, local_rank))


@functools.lru_cache(maxsize=4)
def _network(data_cfg, device):
    from .network import from_config

    return from_config(data_cfg, device)


def with_epochs(cfg, algorithm: str, k, problem):
    """--epochs E: the same number of training samples for every method, so a run with
    k active nodes (n for DSGD and for each phase of --k auto) gets
    ceil(E * n_train / (batch_size * k)) rounds."""
    if cfg.epochs is None:
        return cfg
    active = cfg.nodes if algorithm == "dsgd" or k == "auto" else k
    return cfg.replace(rounds=max(1, math.ceil(cfg.epochs * problem.n_train / (cfg.batch_size * active))))


def describe(problem) -> dict:
    """Extra facts for config.json: the problem's ``describe()`` when it has one (a
    torch problem: per-node class histogram, n_train, n_params, device), else none."""
    facts = getattr(problem, "describe", None)
    return {} if facts is None else dict(facts())
