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

from .factory import from_factory  # noqa: F401  (re-exported)


def needs_local_rank(cfg) -> bool:
    """Whether building the problem needs this rank's index on its host (GPU mapping)."""
    return ((cfg.problem in ("digits", "fashion-mnist", "cifar10") or is_factory(cfg.problem))
            and cfg.device != "cpu")


def make_problem(cfg, local_rank: int = 0, local_nodes=None):
    """The problem a Config asks for (network problems are loaded once per process);
    ``--problem module:function`` calls a user's factory (:func:`from_factory`).

    ``local_rank`` (this process's rank among those on its machine; the MPI layer
    computes it) picks the GPU under ``--device auto/cuda``: problems never talk MPI.
    ``local_nodes`` (an MPI rank: ``[rank]``) makes a network problem keep only those
    nodes' training data and its slice of the evaluation sets (None: everything, the
    simulator).
    """
    if is_factory(cfg.problem):
        return from_factory(cfg.problem, cfg=cfg, local_nodes=local_nodes, local_rank=local_rank)
    if cfg.problem == "quadratic":
        from .quadratic import quadratic

        return quadratic(nodes=cfg.nodes, seed=cfg.seed, dim=cfg.dim, sigma2=cfg.sigma2,
                         zeta2=cfg.zeta2)
    from .datasets import NotEnoughSamplesError
    from .device import pick_device

    try:
        return _network(cfg.replace(rounds=1, k=None, algorithm="compare", lr=1.0, epochs=None,
                                momentum=0.0, lr_schedule="constant", out=None),
                        pick_device(cfg.device, local_rank),
                        None if local_nodes is None else tuple(int(i) for i in local_nodes))
    except NotEnoughSamplesError as exc:  # (datasets.check_enough_samples, at the partition)
        raise NotEnoughSamplesError(f"--problem {cfg.problem}: {exc}") from None


def prepare(cfg) -> None:
    """Import what building ``cfg``'s problem needs and build nothing: a hot spare does it
    before it waits (spares.serve), so that taking a node over does not start with
    importing torch (about 1 s). A network problem only; a ``module:function`` factory's
    module is imported when it is built, where its errors are reported."""
    if not is_factory(cfg.problem) and cfg.problem != "quadratic":
        try:
            import torchvision  # noqa: F401  (the data sets' readers)

            from . import datasets, models, torch_problem  # noqa: F401  (torch)
        except ImportError:  # (no torch: the build says so, in its words)
            pass


def is_factory(name: str) -> bool:
    """``package.module:function`` names a user's problem factory."""
    return ":" in str(name)


@functools.lru_cache(maxsize=4)
def _network(data_cfg, device, local_nodes=None):
    from .network import from_config

    return from_config(data_cfg, device, local_nodes=local_nodes)


def with_epochs(cfg, algorithm: str, k, problem):
    """--epochs E: the same number of training samples for every method, so a run with
    k active nodes (n for DSGD and for each phase of --k auto) gets
    ceil(E * n_train / (batch_size * k)) rounds."""
    if cfg.epochs is None:
        return cfg
    from ..errors import UsageError

    if getattr(problem, "n_train", None) is None:
        raise UsageError(f"--epochs needs a problem that knows its training-set size "
                         f"(n_train); {cfg.problem} does not: use --rounds")
    batch = getattr(problem, "batch_size", None)  # (a factory's own batch size)
    if batch is None and is_factory(cfg.problem):
        raise UsageError(f"--epochs needs a problem that knows its batch size (batch_size); "
                         f"{cfg.problem} does not: use --rounds")
    batch = int(batch or cfg.batch_size)
    active = cfg.nodes if algorithm == "dsgd" or k == "auto" else k
    return cfg.replace(batch_size=batch,
                       rounds=max(1, math.ceil(cfg.epochs * problem.n_train / (batch * active))))


def describe(problem) -> dict:
    """Extra facts for config.json: the problem's ``describe()`` when it has one (a
    torch problem: per-node class histogram, n_train, n_params, device), else none."""
    facts = getattr(problem, "describe", None)
    return {} if facts is None else dict(facts())
