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


def needs_local_rank(cfg) -> bool:
    """Whether building the problem needs this rank's index on its host (GPU mapping)."""
    return cfg.problem in ("digits", "fashion-mnist", "cifar10") and cfg.device != "cpu"


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
        return from_factory(cfg.problem, nodes=cfg.nodes, seed=cfg.seed)
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


def is_factory(name: str) -> bool:
    """``package.module:function`` names a user's problem factory."""
    return ":" in str(name)


def from_factory(name: str, *, nodes: int, seed: int):
    """Call the factory ``package.module:function`` with keyword arguments ``nodes`` and
    ``seed``; it must return a Problem. Anything else is a UsageError saying what."""
    import importlib

    from ..errors import UsageError
    from ..problem import with_defaults

    module_name, _, function_name = str(name).partition(":")
    if not module_name or not function_name:
        raise UsageError(f"--problem {name}: give package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001  (any failure to import is the user's to fix)
        raise UsageError(f"--problem {name}: cannot import {module_name!r} "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                         f"check the name and that it is on PYTHONPATH") from None
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise UsageError(f"--problem {name}: {module_name} has no function {function_name!r}")
    try:
        problem = factory(nodes=nodes, seed=seed)
    except SystemExit as exc:  # (else the command line would exit with it, having run nothing)
        raise UsageError(f"--problem {name}: the factory called sys.exit({exc.code!r}) instead "
                         f"of returning a Problem") from None
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"--problem {name}: the factory failed ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    try:
        with_defaults(problem)
    except TypeError as exc:
        raise UsageError(f"--problem {name}: the factory returned {type(problem).__name__}, "
                         f"not a Problem ({exc})") from None
    return problem


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
    if getattr(problem, "n_train", None) is None:
        from ..errors import UsageError

        raise UsageError(f"--epochs needs a problem that knows its training-set size "
                         f"(n_train); {cfg.problem} does not: use --rounds")
    active = cfg.nodes if algorithm == "dsgd" or k == "auto" else k
    return cfg.replace(rounds=max(1, math.ceil(cfg.epochs * problem.n_train / (cfg.batch_size * active))))


def describe(problem) -> dict:
    """Extra facts for config.json: the problem's ``describe()`` when it has one (a
    torch problem: per-node class histogram, n_train, n_params, device), else none."""
    facts = getattr(problem, "describe", None)
    return {} if facts is None else dict(facts())
