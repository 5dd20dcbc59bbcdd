"""Internal, except the built-in problems the manual names (``problems.quadratic.Quadratic``
in its examples; the factories by their ``--problem`` names); the protocol they follow is
the public :class:`mpi_teleport.Problem`, and PyTorch models go through the public
:class:`mpi_teleport.TorchProblem`.

Training problems. Each maps the rows of a token matrix to stochastic gradients of the
holders' local losses and evaluates a token matrix (:class:`mpi_teleport.problem.Problem`).

Built-in problems are factories called with keyword arguments ``nodes`` and ``seed``
(the ``--problem`` convention): :func:`.quadratic.quadratic`, and over
:class:`.torch_problem.TorchProblem` :func:`.network.digits`,
:func:`.network.fashion_mnist`, :func:`.network.cifar10`. Importing this package imports
neither torch nor mpi4py.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .factory import from_factory  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class ProblemSettings:
    """What building a problem needs of a run's settings, and nothing of a front end's:
    the problem's name (``quadratic``, ``digits``, ``fashion-mnist``, ``cifar10`` or a
    user's ``package.module:function``), n and the seed, the synthetic problem's
    dimension and noise, the network problems' data and split settings, whether the run
    is elastic (a node's data must then be rebuildable alone), and ``given``: the data
    settings set away from their defaults (a user's factory receives those it takes and
    refuses the others). The command line builds it from its settings' values
    (:func:`problem_settings`)."""

    problem: str
    nodes: int
    seed: int
    dim: int
    sigma2: float
    zeta2: float
    batch_size: int
    sampling: str
    alpha: float
    val_fraction: float
    data_dir: str | None
    download: bool
    device: str
    elastic: bool
    given: tuple[str, ...] = ()


def problem_settings(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> ProblemSettings:
    """What building a run's problem needs of its settings ``values`` (named as the
    settings table's rows, which name every field of :class:`ProblemSettings`: a command
    line's ``Values.to_dict()``), ``given`` the fields away from ``defaults`` (the
    table's, ``mpi_teleport.session.settings.defaults()``), which a user's factory receives
    when it takes them. The problems see no front end's objects, only these values."""
    names = [f.name for f in fields(ProblemSettings) if f.name != "given"]
    return ProblemSettings(**{name: values[name] for name in names},
                           given=tuple(name for name in names if values[name] != defaults[name]))


def needs_local_rank(cfg: ProblemSettings) -> bool:
    """Whether building the problem needs this rank's index on its host (GPU mapping)."""
    return ((cfg.problem in ("digits", "fashion-mnist", "cifar10") or is_factory(cfg.problem))
            and cfg.device != "cpu")


def make_problem(cfg: ProblemSettings, local_rank: int = 0, local_nodes=None):
    """The problem ``cfg`` asks for (network problems are loaded once per process);
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
        return _network(cfg, pick_device(cfg.device, local_rank),
                        None if local_nodes is None else tuple(int(i) for i in local_nodes))
    except NotEnoughSamplesError as exc:  # (datasets.check_enough_samples, at the partition)
        raise NotEnoughSamplesError(f"--problem {cfg.problem}: {exc}") from None


def prepare(cfg: ProblemSettings) -> None:
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
    from .network import from_settings

    return from_settings(data_cfg, device, local_nodes=local_nodes)


def describe(problem) -> dict:
    """Extra facts for config.json: the problem's ``describe()`` when it has one (a
    torch problem: per-node class histogram, n_train, n_params, device), else none."""
    facts = getattr(problem, "describe", None)
    return {} if facts is None else dict(facts())
