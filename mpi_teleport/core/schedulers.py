"""PyTorch learning-rate schedulers as the step size of a run.

A plain script builds a scheduler on its optimizer and calls ``scheduler.step()`` once per
epoch (or per batch). A run here needs the step size as a *pure function of the round*:
every rank evaluates it for itself, a resumed run must see the same values, and the
start-up agreement compares them. :func:`scheduled_lr` therefore replays a private copy
of the scheduler (and of its optimizer), as built and never stepped, and reads the
learning rate it sets after each step:

* ``lr_step="epoch"`` (default): round t is in epoch ``e = floor(t * batch_size * active /
  n_train)``, the passes over the training data its active nodes have made (k nodes
  draw a batch each round in Teleportation, n in DSGD); the step size of round t is the
  scheduler's learning rate after ``e`` calls of ``step()``, as a plain script's epoch e
  trains with. So ``CosineAnnealingLR(opt, T_max=epochs)`` anneals over the run's epochs.
* ``lr_step="round"``: after ``t`` calls (one per round, as a script that steps per batch;
  ``OneCycleLR(opt, max_lr, total_steps=rounds)``).

The learning rates are computed once, in order, and kept, so lr(t) is the same whatever
the order of the calls; the user's scheduler and optimizer are never touched.
"""
from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

from ..errors import UsageError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

__all__ = ["is_scheduler", "step_size", "scheduled_lr", "rounds_per_epoch", "STEPS"]

STEPS = ("epoch", "round")


class Scheduler(Protocol):
    """What ``lr=`` takes of a torch learning-rate scheduler (a structural type: torch is
    optional): the members :func:`is_scheduler` looks for."""

    optimizer: Any  # the torch optimizer it drives

    def step(self) -> None: ...

    def get_last_lr(self) -> list[Any]: ...  # (torch: float or Tensor values)


def is_scheduler(obj: object) -> TypeIs[Scheduler]:
    """A torch learning-rate scheduler (anything with ``step``, ``get_last_lr`` and the
    ``optimizer`` it drives)."""
    return all(hasattr(obj, name) for name in ("step", "get_last_lr", "optimizer"))


def rounds_per_epoch(problem: Any, active: int) -> float:
    """Rounds one pass over the training data takes when ``active`` nodes each draw a
    batch of the problem's ``batch_size`` per round: ``n_train / (batch_size * active)``;
    active = k for Teleportation, n for DSGD (``epochs=E`` runs ``ceil(E * this)`` rounds).

    >>> import types
    >>> rounds_per_epoch(types.SimpleNamespace(n_train=60_000, batch_size=32), active=8)
    234.375
    """
    n_train, batch = getattr(problem, "n_train", None), getattr(problem, "batch_size", None)
    if not n_train or not batch:
        raise UsageError(f"rounds per epoch need a problem that knows n_train and batch_size "
                         f"(a TorchProblem); {type(problem).__name__} does not")
    return cast(float, n_train / (batch * active))  # (the problem's attributes: Any)


def step_size(lr: float | Callable[[int], float] | Scheduler, lr_step: str, problem: Any,
              active: int) -> float | Callable[[int], float]:
    """The API's ``lr``: a scheduler becomes a function of the round (:func:`scheduled_lr`);
    a number or a function is returned as it is."""
    if is_scheduler(lr):
        return scheduled_lr(lr, lr_step, problem, active)
    if lr_step not in STEPS:
        raise UsageError(f"lr_step must be 'epoch' or 'round', got {lr_step!r}")
    return lr


def scheduled_lr(scheduler: Any, lr_step: str, problem: Any = None,
                 active: int | None = None) -> Callable[[int], float]:
    """The step size of round t from a torch scheduler stepped per ``lr_step`` ("epoch" or
    "round"; the module docstring says how). UsageError for a scheduler already stepped."""
    # (scheduler: a Scheduler, typed Any: its last_epoch is read too, where it has one)
    if lr_step not in STEPS:
        raise UsageError(f"lr_step must be 'epoch' or 'round', got {lr_step!r}")
    name = type(scheduler).__name__
    if getattr(scheduler, "last_epoch", 0) != 0:
        raise UsageError(f"lr={name}: the scheduler was stepped already (last_epoch="
                         f"{scheduler.last_epoch}); pass it as built, before any step()")
    groups = scheduler.optimizer.param_groups
    if len({g["lr"] for g in groups}) > 1:
        raise UsageError(f"lr={name}: its optimizer's parameter groups have different learning "
                         "rates; a token has one step size (use one group)")
    if lr_step == "epoch":
        batch_rounds = _epoch_of(problem, active)  # type: ignore[arg-type]  # (given with "epoch")
    else:
        batch_rounds = None
    replay = copy.deepcopy(scheduler)  # (its own optimizer: the user's is never stepped)
    lrs = [float(replay.get_last_lr()[0])]

    def lr(t: int) -> float:
        step = int(t) if batch_rounds is None else batch_rounds(int(t))
        if step < 0:
            raise ValueError(f"round {t} < 0")
        while len(lrs) <= step:
            with warnings.catch_warnings():  # (stepped without optimizer.step(): on purpose)
                warnings.simplefilter("ignore")
                replay.step()
            lrs.append(float(replay.get_last_lr()[0]))
        return lrs[step]

    lr.__qualname__ = lr.__name__ = f"{name}_per_{lr_step}"
    # (a function attribute: the type checker does not know it)
    lr.base = lrs[0]  # type: ignore[attr-defined]  # (named in messages)
    return lr


def _epoch_of(problem: Any, active: int) -> Callable[[int], int]:
    """Round -> the epoch it is in, in exact integer arithmetic."""
    rounds_per_epoch(problem, active)  # (the one-line refusal for a problem without epochs)
    samples: int
    n_train: int
    samples, n_train = problem.batch_size * active, problem.n_train

    def epoch(t: int) -> int:
        return (t * samples) // n_train

    return epoch
