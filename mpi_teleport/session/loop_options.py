"""The API's training-loop keywords turned into :class:`~mpi_teleport.core.spec.RunSpec`
fields: ``epochs`` into rounds, an ``lr`` schedule that sees the round within its phase
(Algorithm 2), ``nesterov`` into the momentum's form (:class:`~.algorithms.Nesterov`).
Each raises UsageError (one line) for a value no run can have.
"""
from __future__ import annotations

import math

from ..core.algorithms import Nesterov
from ..errors import UsageError
from .settings import Default

__all__ = ["rounds_for", "eval_rounds", "optimizer_settings", "within_phase", "momentum_of",
           "step_rule", "optimizer_factory", "scheduled"]


def rounds_for(problem, rounds, epochs, active, names=("rounds", "epochs")):
    """``rounds``, or the rounds ``epochs`` passes over the data take with ``active``
    nodes each drawing a batch per round (the API's other checks follow). ``names``: the
    two keywords as the user wrote them (``eval_every``, ``eval_every_epochs``), which
    the messages name."""
    in_rounds, in_epochs = names
    if (rounds is None) == (epochs is None):
        raise UsageError(f"give {in_rounds}= or {in_epochs}= (one of them)")
    if epochs is None:
        return rounds
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not epochs > 0 \
            or not math.isfinite(epochs):
        raise UsageError(f"{in_epochs} must be a number > 0, got {epochs!r}")
    n_train, batch = getattr(problem, "n_train", None), getattr(problem, "batch_size", None)
    if not n_train or not batch:
        raise UsageError(f"{in_epochs}= needs a problem that knows n_train and batch_size (a "
                         f"TorchProblem); {type(problem).__name__} does not: give "
                         f"{in_rounds}=")
    if isinstance(active, bool) or not isinstance(active, int) or active < 1:
        return 1  # (k or nodes is wrong: the checks say so)
    return epoch_rounds(epochs, n_train, batch, active)


def epoch_rounds(epochs: float, n_train: int, batch: int, active: int) -> int:
    """The rounds ``epochs`` passes over ``n_train`` samples take when ``active`` nodes
    each draw a batch of ``batch`` per round: ceil(E n_train / (batch k_active)), so
    every method sees the same number of training samples (mpi_teleport/DESIGN.md §2.5).
    The one place both front ends count epochs in rounds."""
    return max(1, math.ceil(epochs * n_train / (batch * active)))


def eval_rounds(problem, eval_every, eval_every_epochs, active):
    """``(eval_every, eval_every_epochs)``: ``eval_every`` (rounds, or the
    :class:`~.options.Default` standing for it) and a Default(None); or, for
    ``eval_every_epochs``, a Default and the whole number of epochs (evaluated exactly
    at their ends: ``Logging.eval_every_epochs``), or a fraction of an epoch converted to
    the rounds it takes with ``active`` nodes each drawing a batch per round (as
    ``epochs`` is) and a Default(None)."""
    if eval_every_epochs is None:
        return eval_every, Default(None)
    if not isinstance(eval_every, Default):
        raise UsageError("give eval_every= (rounds) or eval_every_epochs= (epochs), not both")
    rounds = rounds_for(problem, None, eval_every_epochs, active,
                        ("eval_every", "eval_every_epochs"))  # (its checks, its messages)
    if float(eval_every_epochs).is_integer():
        return eval_every, int(eval_every_epochs)
    return rounds, Default(None)


def step_rule(values, problem=None):
    """``(momentum, nesterov, rule)`` of the command line's ``--optimizer`` (with
    ``--momentum``, ``--nesterov``, ``--weight-decay``, ``--betas``, ``--eps``, or any
    torch.optim class by name with ``--optimizer-args``; ``values`` named as the table's
    rows): the optimizer torch.optim would build, read by the API's own plumbing
    (:func:`optimizer_settings`), so a command-line run steps exactly as ``optimizer=``
    does. Plain SGD (no weight decay) is the momentum alone (rule None), as before
    optimizers existed. ``problem``: the run's (a named torch optimizer needs one that
    computes with torch)."""
    factory = optimizer_factory(values)
    if factory is None:
        return values["momentum"], values["nesterov"], None
    if problem is not None and not _builtin(values):
        inner = getattr(problem, "problem", problem)
        if getattr(inner, "torch_settings", None) is None:
            raise UsageError(f"--optimizer {values['optimizer']}: {type(inner).__name__} "
                             f"computes with numpy; a torch optimizer by name steps a torch "
                             f"problem's parameters: use sgd, adam or adamw")
    _, momentum, nesterov, rule = optimizer_settings(factory, problem, values["lr"], 0.0,
                                                     False)
    return momentum, nesterov, rule


def _builtin(values) -> bool:
    """The three optimizers the package names itself, without --optimizer-args."""
    from .settings import OPTIMIZERS

    return values["optimizer"] in OPTIMIZERS and values.get("optimizer_args") is None


def optimizer_factory(values, plain_sgd: bool = False):
    """The torch optimizer the command line's values describe, as a class with its
    keywords (``functools.partial``, what ``optimizer=`` takes); None for plain SGD
    without weight decay (the momentum alone) unless ``plain_sgd`` (a scheduler is built
    on it)."""
    import functools

    name, lr, decay = values["optimizer"], values["lr"], values["weight_decay"]
    if not _builtin(values):
        from ..problems.torch_names import factory

        return factory(name, values.get("optimizer_args"), "optimizer", lr=lr)
    if name == "sgd" and not decay and not plain_sgd:
        return None
    from ..core.optimizers import torch_module

    optim = torch_module().optim
    if name == "sgd":
        return functools.partial(optim.SGD, lr=lr, momentum=values["momentum"],
                                 weight_decay=decay, nesterov=values["nesterov"])
    cls = optim.Adam if name == "adam" else optim.AdamW
    return functools.partial(cls, lr=lr, betas=tuple(values["betas"]), eps=values["eps"],
                             weight_decay=decay)


def scheduled(values, problem, active: int):
    """The step size of the command line's ``--lr-scheduler`` (with its arguments and
    interval), a function of the round built as the API's ``lr=`` builds a scheduler
    factory on ``optimizer=`` (:func:`mpi_teleport.core.schedulers.step_size`); the
    number ``values["lr"]`` without one."""
    name = values.get("lr_scheduler")
    if name is None:
        return values["lr"]
    from ..core.schedulers import step_size
    from ..problems.torch_names import factory

    scheduler = factory(name, values.get("lr_scheduler_args"), "lr_scheduler")
    interval = values.get("lr_scheduler_interval") or "epoch"
    return step_size(scheduler, interval, problem, active, optimizer_factory(values, True))


def optimizer_settings(optimizer, problem, lr, momentum, nesterov):
    """``(lr, momentum, nesterov, rule)`` of a run given ``optimizer=`` (a torch optimizer,
    :func:`mpi_teleport.core.optimizers.from_torch`) or not: ``lr`` given wins over the
    optimizer's; momentum comes one way only."""
    if optimizer is None:  # (lr None: the settings' rule says what lr must be)
        return lr, momentum, nesterov, None
    from ..core.optimizers import from_torch

    inner = getattr(problem, "problem", problem)  # (decay: parameters only, not buffers)
    found = from_torch(optimizer, getattr(inner, "n_params", None),
                       getattr(inner, "param_shapes", None))
    if momentum or nesterov:
        raise UsageError("give the momentum through optimizer= (SGD's momentum, nesterov) or "
                         "momentum=/nesterov=, not both")
    return (found["lr"] if lr is None else lr, found["momentum"], found["nesterov"],
            found["rule"])


def within_phase(lr, rounds):
    """Algorithm 2's step size: a schedule sees the round within its phase."""
    if not callable(lr) or isinstance(rounds, bool) or not isinstance(rounds, int):
        return lr

    def phase_lr(t: int) -> float:
        return lr(t - rounds if t >= rounds else t)

    phase_lr.base = getattr(lr, "base", "a schedule")  # (named in messages)
    return phase_lr


def momentum_of(momentum: float, nesterov) -> float:
    """The run's momentum: the checked number, or it in Nesterov's form."""
    if not nesterov:
        return momentum
    if nesterov is not True:
        raise UsageError(f"nesterov: expected True or False, got {nesterov!r}")
    if not momentum > 0:
        raise UsageError(f"nesterov=True needs momentum > 0, got momentum={momentum!r}")
    return Nesterov(momentum)
