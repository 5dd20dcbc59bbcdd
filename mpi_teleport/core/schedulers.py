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

``lr=`` also takes the scheduler *unbuilt*, so a script needs no throwaway model to build
it on: a scheduler class with its keywords (``functools.partial(StepLR, step_size=1,
gamma=0.7)``) or a function of the optimizer (its one parameter named ``optimizer`` or
``opt``: ``lambda optimizer: StepLR(optimizer, 1, 0.7)``); it is built on a private copy of
``optimizer=`` (:func:`built_scheduler`).

A scheduler that cannot be replayed is refused at the start in one line naming it
(``ReduceLROnPlateau``: its step needs a metric), and one whose ``step()`` fails during
the run (``OneCycleLR`` with ``total_steps`` smaller than the run's steps) raises one
UsageError naming it and the round.
"""
from __future__ import annotations

import copy
import functools
import inspect
import warnings
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

from ..errors import UsageError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

__all__ = ["is_scheduler", "is_scheduler_factory", "built_scheduler", "step_size",
           "scheduled_lr", "rounds_per_epoch", "STEPS"]

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


def is_scheduler_factory(obj: object) -> bool:
    """A scheduler not built yet: a torch scheduler class, ``functools.partial`` of one, or
    a function whose one parameter is named ``optimizer`` or ``opt`` (a function of one
    parameter named otherwise: :func:`builds_scheduler`, given the optimizer)."""
    target = obj.func if isinstance(obj, functools.partial) else obj
    if isinstance(target, type):
        return any(c.__name__ in ("LRScheduler", "_LRScheduler", "ReduceLROnPlateau")
                   for c in target.__mro__)
    if not callable(obj) or is_scheduler(obj):
        return False
    try:
        names = [q.name for q in inspect.signature(obj).parameters.values()
                 if q.default is inspect.Parameter.empty]
    except (TypeError, ValueError):
        return False
    return names in (["optimizer"], ["opt"])


def builds_scheduler(obj: Any, optimizer: Any) -> bool:
    """A function of one parameter, whatever its name (``lambda o: StepLR(o, 1, 0.7)``),
    that builds a torch scheduler on ``optimizer=`` (tried on a private copy): a scheduler
    to build. A function of the round (``lambda t: 0.1 * 0.9 ** t``) fails on an
    optimizer, or returns no scheduler: it stays the step size of round t."""
    if optimizer is None or isinstance(obj, type) or not callable(obj) or is_scheduler(obj):
        return False
    try:
        required = [q for q in inspect.signature(obj).parameters.values()
                    if q.default is inspect.Parameter.empty
                    and q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    if len(required) != 1:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return is_scheduler(built_scheduler(obj, optimizer))
    except Exception:  # noqa: BLE001  (a function of the round, called with an optimizer)
        return False


def built_scheduler(factory: Any, optimizer: Any) -> Any:
    """The scheduler ``factory`` builds on a private copy of ``optimizer=`` (a class,
    factory or instance; its learning rate is the scheduler's base): UsageError (one
    line) without an optimizer, or when building raises."""
    from .optimizers import _instance, _private, torch_module

    name = getattr(getattr(factory, "func", factory), "__name__", type(factory).__name__)
    if optimizer is None:
        raise UsageError(f"lr={name} (a scheduler to build) needs optimizer=: the scheduler "
                         "is built on it and starts from its learning rate")
    torch = torch_module()
    opt = _private(_instance(optimizer, torch))
    opt.param_groups[0]["params"] = [torch.zeros(1, requires_grad=True)]
    opt.param_groups[0].pop("initial_lr", None)
    try:
        built = factory(opt)
    except Exception as exc:  # noqa: BLE001  (the user's factory: say what it did)
        raise UsageError(f"lr={name}: building the scheduler on the optimizer raised "
                         f"{type(exc).__name__}: {_first_line(exc)}") from None
    if not is_scheduler(built):
        raise UsageError(f"lr={name}: the factory returned {type(built).__name__}, not a torch "
                         "learning-rate scheduler")
    return built


def _first_line(exc: BaseException) -> str:
    said = str(exc).strip()
    return said.splitlines()[0] if said else ""


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
              active: int, optimizer: Any = None) -> float | Callable[[int], float]:
    """The API's ``lr``: a scheduler, built or to build on ``optimizer`` (the API's
    ``optimizer=``), becomes a function of the round (:func:`scheduled_lr`); a number or
    a function is returned as it is."""
    if is_scheduler_factory(lr) or builds_scheduler(lr, optimizer):
        lr = built_scheduler(lr, optimizer)
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
    if any(c.__name__ == "ReduceLROnPlateau" for c in type(scheduler).__mro__):
        raise UsageError(f"lr={name} cannot be replayed: its step() needs the validation "
                         "metric, and a run's step size is a function of the round alone (the "
                         "same on every rank and in a resume); use a schedule of the epoch "
                         "(StepLR, MultiStepLR, CosineAnnealingLR) or run again with a lower "
                         "lr= when the metric stalls")
    if getattr(scheduler, "last_epoch", 0) != 0:
        raise UsageError(f"lr={name}: the scheduler was stepped already (last_epoch="
                         f"{scheduler.last_epoch}); pass it as built, before any step()")
    groups = scheduler.optimizer.param_groups
    if len({g["lr"] for g in groups}) > 1:
        raise UsageError(f"lr={name}: its optimizer's parameter groups have different learning "
                         "rates; a token has one step size (use one group)")
    if lr_step == "epoch":
        batch_rounds = _epoch_of(problem, active)  # type: ignore[arg-type]  # (given with "epoch")
        samples, n_train = problem.batch_size * active, problem.n_train

        def first_round(e: int) -> int:  # (epoch e's first round)
            return int(-(-e * n_train // samples))
    else:
        batch_rounds = None

        def first_round(e: int) -> int:
            return e
    replay = copy.deepcopy(scheduler)  # (its own optimizer: the user's is never stepped)
    lrs = [float(replay.get_last_lr()[0])]
    _replay_step(copy.deepcopy(scheduler), name, None)  # (one that cannot step: refused now)
    failed: list[UsageError] = []

    def lr(t: int) -> float:
        step = int(t) if batch_rounds is None else batch_rounds(int(t))
        if step < 0:
            raise ValueError(f"round {t} < 0")
        if failed and len(lrs) <= step:  # (the copy is past its failure: the same line)
            raise failed[0]
        while len(lrs) <= step:  # (the round named is the first the failing step serves)
            try:
                lrs.append(_replay_step(replay, name, first_round(len(lrs))))
            except UsageError as exc:
                failed.append(exc)
                raise
        return lrs[step]

    lr.__qualname__ = lr.__name__ = f"{name}_per_{lr_step}"
    lr.arguments = _arguments(scheduler)  # type: ignore[attr-defined]  # (said in messages)
    # (a function attribute: the type checker does not know it)
    lr.base = lrs[0]  # type: ignore[attr-defined]  # (named in messages)
    return lr


def _arguments(scheduler: Any) -> str:
    """A scheduler's own settings as a message names them (``step_size=1, gamma=0.7``):
    the plain values of its state, less what stepping changes."""
    try:
        state = scheduler.state_dict()
    except Exception:  # noqa: BLE001  (a scheduler without one: nothing to say)
        return ""
    moving = {"last_epoch", "base_lrs", "verbose"}
    return ", ".join(f"{k}={v!r}" for k, v in state.items()
                     if not k.startswith("_") and k not in moving
                     and isinstance(v, (int, float, str, bool)) and len(repr(v)) <= 24)


def _replay_step(replay: Any, name: str, t: int | None) -> float:
    """One ``step()`` of the private copy, and the learning rate it sets: UsageError (one
    line) naming the scheduler, and the round (``t``; None: at the start), when it fails."""
    try:
        with warnings.catch_warnings():  # (stepped without optimizer.step(): on purpose)
            warnings.simplefilter("ignore")
            replay.step()
        return float(replay.get_last_lr()[0])
    except Exception as exc:  # noqa: BLE001  (the scheduler's own: say what it did)
        when = "at the start" if t is None else f"at round {t}"
        hint = "; give it enough steps for the run (total_steps, epochs)" \
            if "total_steps" in str(exc) or "Tried to step" in str(exc) else \
            "; a scheduler is stepped with no arguments, once per epoch or round (lr_step)"
        raise UsageError(f"lr={name}: its step() failed {when}: {type(exc).__name__}: "
                         f"{_first_line(exc)}{hint}") from None


def _epoch_of(problem: Any, active: int) -> Callable[[int], int]:
    """Round -> the epoch it is in, in exact integer arithmetic."""
    rounds_per_epoch(problem, active)  # (the one-line refusal for a problem without epochs)
    samples: int
    n_train: int
    samples, n_train = problem.batch_size * active, problem.n_train

    def epoch(t: int) -> int:
        return (t * samples) // n_train

    return epoch
