"""What a run is, as small immutable settings: the algorithm and its schedule (pure).

:class:`RunSpec` says which algorithm runs on how many nodes, with which step size,
topology and seed; :meth:`RunSpec.phases` turns it into the rosters of its rounds (who
holds which token when), a pure function of (seed, n, k, t) that every process evaluates
locally. Teleportation and DSGD have one phase; Algorithm 2 has two (k = n, then the
candidates concurrently on disjoint nodes). Logging and latency settings are separate
dataclasses, so each component receives only what it needs. Their values are checked
by :mod:`mpi_teleport.session.settings` (the algorithms and variants are named there) before any
of them is built.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from os import PathLike
from typing import TYPE_CHECKING, Callable, cast

import numpy as np

from . import schedule
from .schedule import Phase
from .topology import Topology
from ..errors import CLI, Naming

if TYPE_CHECKING:
    from .optimizers import Adam, SgdDecay, TorchRule


@dataclass(frozen=True)
class RunSpec:
    """One run: ``algorithm`` is 'teleportation' (k tokens), 'dsgd' (all n nodes, fixed
    placement) or 'search' (Algorithm 2: 2 x ``rounds`` rounds, k chosen by the criterion
    ``k_select``, one of :data:`mpi_teleport.runtime.search.CRITERIA`)."""

    algorithm: str
    nodes: int
    k: int | None
    rounds: int
    lr: float | Callable[[int], float]
    momentum: float = 0.0
    topology: Topology = "ring"
    variant: str = "overlap"
    seed: int = 0
    k_select: str = "averaged"
    optimizer: Adam | SgdDecay | TorchRule | None = None  # an optimizers step rule; None: SGD with ``momentum``

    @property
    def state_slots(self) -> int:
        """d-long state vectors a token carries: 2 for Adam, 1 with momentum, else 0."""
        if self.optimizer is not None:
            return self.optimizer.slots
        return 1 if self.momentum > 0 else 0

    @property
    def step_rule(self) -> Adam | SgdDecay | TorchRule | float:
        """What the local step applies: the optimizer's rule, else the momentum."""
        return self.optimizer if self.optimizer is not None else self.momentum

    @property
    def tokens(self) -> int | None:
        """k of a single run (n for DSGD); None for the search."""
        if self.algorithm == "dsgd":
            return self.nodes
        return None if self.algorithm == "search" else self.k

    @property
    def moves(self) -> str:
        """How tokens move: 'simple' (Alg. 1) only for Teleportation asked so."""
        return "simple" if self.algorithm != "dsgd" and self.variant == "simple" else "overlap"

    @property
    def total_rounds(self) -> int:
        return 2 * self.rounds if self.algorithm == "search" else self.rounds

    def lr_at(self, t: int) -> float:
        return self.lr(t) if callable(self.lr) else self.lr

    def phases(self) -> list[Phase]:
        n, seed, T = self.nodes, self.seed, self.rounds
        if self.algorithm == "dsgd":
            fixed = [schedule.fixed_holders(n)]
            return [Phase(lambda t: fixed, 0, T,
                          block=lambda t0, t1: np.broadcast_to(fixed[0], (t1 - t0, n)))]
        if self.algorithm == "teleportation":
            k = cast(int, self.k)  # (validated: Teleportation has a k)
            return [Phase(lambda t: [schedule.holders(seed, n, k, t)], 0, T,
                          block=lambda t0, t1: schedule.holders_block(seed, n, k, t0, t1 - t0))]
        return [Phase(lambda t: [schedule.holders(seed, n, n, t)], 0, T,
                      block=lambda t0, t1: schedule.holders_block(seed, n, n, t0, t1 - t0)),
                Phase(lambda t: schedule.search_blocks(seed, n, t), T, 2 * T, fresh=True,
                      block=lambda t0, t1: schedule.search_order_block(seed, n, t0, t1 - t0))]

    def run_ks(self, phase: int) -> list[int]:
        """k of each concurrent run in phase ``phase``."""
        if self.algorithm == "search":
            return [self.nodes] if phase == 0 else schedule.candidate_ks(self.nodes)
        return [cast(int, self.tokens)]  # (not the search: a number)


@dataclass(frozen=True)
class Logging:
    """When to evaluate and what counts as reaching the target. ``log_every``: record every
    this many rounds (no default here: the settings table holds the one default, and
    the front ends pass it)."""

    log_every: int
    target: float | None = None
    stop_at_target: bool = False
    # how messages spell settings (--lr on a command line, lr in Python): how a message
    # reads, not what runs, so two runs alike but for their front end compare equal
    naming: Naming = field(default=CLI, compare=False)
    eval_every: int | None = None  # None: every record evaluates
    eval_at_start: bool = True  # False: round 0's record is not evaluated
    trace: str | PathLike[str] | None = None  # the run's timeline goes there
    log_every_epochs: int | None = None  # also record at the end of every this many epochs
    eval_every_epochs: int | None = None  # evaluate at the end of every this many epochs
    epoch_span: tuple[int, int] | None = None  # (n_train, samples a round): where epochs end

    def is_log_round(self, r: int, start: int, stop: int) -> bool:
        """Round r of a phase [start, stop): its first and last, every ``log_every``, every
        evaluation round and, with ``log_every_epochs``, the round that ends every such
        epoch (:meth:`ends_epochs`)."""
        rel = r - start
        return (rel == 0 or rel % self.log_every == 0 or r == stop
                or (self.eval_every is not None and rel % self.eval_every == 0)
                or self.ends_epochs(rel, self.log_every_epochs)
                or self.ends_epochs(rel, self.eval_every_epochs))

    def ends_epochs(self, rel: int, every: int | None) -> bool:
        """Whether round ``rel`` of its phase completes a multiple of ``every`` epochs
        (exact integer arithmetic: epochs end where the samples drawn reach a multiple
        of n_train)."""
        if not every or self.epoch_span is None or rel < 1:
            return False
        n_train, samples = self.epoch_span
        return (rel * samples // n_train) // every > ((rel - 1) * samples // n_train) // every

    def is_eval_round(self, r: int, start: int, stop: int) -> bool:
        """Whether round r's record evaluates the model: every record without
        ``eval_every`` or ``eval_every_epochs``; with them, the phase's first and last
        round, every ``eval_every`` and every ``eval_every_epochs``-th epoch's end (the
        others carry the training loss only). Round 0 not without
        ``eval_at_start`` (unless it is also the last)."""
        if r == 0 and not self.eval_at_start and r != stop:
            return False
        if self.eval_every is None and self.eval_every_epochs is None:
            return True
        rel = r - start
        return (rel == 0 or r == stop
                or (self.eval_every is not None and rel % self.eval_every == 0)
                or self.ends_epochs(rel, self.eval_every_epochs))


def epoch_position(r: int, n_train: int, samples: int) -> dict[str, int | bool]:
    """Where round r (r >= 1: its batches drawn) stands in the epochs as a plain loop
    counts them: ``train_epoch``, the epoch (from 1) its batches belong to;
    ``epoch_step``, the step (from 1) within it; ``epoch_end``, whether it completes that
    epoch. Round 0 (nothing drawn): epoch 0, step 0, no end. ``samples``: drawn a round by
    the active nodes."""
    if r < 1:
        return {"train_epoch": 0, "epoch_step": 0, "epoch_end": False}
    epoch = (r - 1) * samples // n_train + 1
    first = -(-(epoch - 1) * n_train // samples) + 1  # (the epoch's first round)
    return {"train_epoch": epoch, "epoch_step": r - first + 1,
            "epoch_end": r * samples // n_train >= epoch}


def cosine_lr(lr: float, total: int) -> Callable[[int], float]:
    """lr * (1 + cos(pi t / T)) / 2 over T rounds (``--lr-schedule cosine``)."""
    total = max(1, total)

    def cosine(t: int) -> float:
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(t, total) / total))

    # (function attributes: the type checker does not know them.) ``checked``: a finite
    # number >= 0 for lr > 0, so contract.checked_lr leaves it.
    cosine.base = lr  # type: ignore[attr-defined]  # (named in messages)
    cosine.checked = True  # type: ignore[attr-defined]
    return cosine
