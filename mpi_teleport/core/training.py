"""The training loss a record carries, from the gradient computations already made.

A problem that reports its batches (``training_metrics(t)``: node -> {name: value} for
the rows it computed in round t, e.g. :class:`~mpi_teleport.TorchProblem`'s
``train_loss`` and ``train_accuracy``) gives every record of round r the mean over
round r - 1's active nodes of their batch values: the latest round's mini-batches, as a
plain PyTorch loop prints ``loss.item()`` of its latest batch. No forward pass is added.

The mean is a pure function of round r - 1 (keyed batches, keyed holders), so a resumed
run and an uninterrupted one record the same values; its sum is ``math.fsum`` (exact,
rounded once), so the order in which ranks report does not matter: the simulator and
MPI agree bit for bit.

Such a problem's run also records round 1 (:func:`first_batches_round`): the first
batches' training loss, where a plain loop prints batch 0's, instead of only at round
``log_every``. That record is evaluated as round 0's is (every record evaluates by
default, so it has ``loss`` like every other; with ``eval_every`` or
``eval_at_start=False`` it carries the training values only, as records between
evaluations do).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["round_means", "latest_mean", "reports_batches", "first_batches_round"]


def round_means(reports: list[dict[int, dict[str, Any]]],
                holders: npt.ArrayLike) -> dict[str, float]:
    """The mean of each reported value over ``holders`` (every run's active nodes of one
    round), from the processes' ``reports`` (node -> {name: value} dicts; a node is
    computed by one process). Empty when some holder was not reported (a problem that
    does not report its batches)."""
    merged: dict[int, dict[str, Any]] = {}
    for report in reports:
        if report:
            merged.update(report)
    nodes = [int(h) for h in np.asarray(holders).reshape(-1)]
    if not nodes or any(h not in merged for h in nodes):
        return {}
    names = list(merged[nodes[0]])
    return {name: math.fsum(float(merged[h][name]) for h in nodes) / len(nodes)
            for name in names}


def latest_mean(report: dict[int, dict[str, Any]]) -> float | None:
    """The mean ``train_loss`` of the batches this process computed last (the progress
    bar's text between records: under MPI the root's own batches only)."""
    values = [v["train_loss"] for v in report.values() if "train_loss" in v]
    return math.fsum(values) / len(values) if values else None


def reports_batches(problem: Any) -> bool:
    """Whether ``problem`` reports its batches' training values (has
    ``training_metrics``; a :class:`~mpi_teleport.problem.ProblemWithDefaults` asks the
    problem it wraps). The same on every process of a run (a property of the problem's
    type), so the ranks agree on the records without communicating."""
    return hasattr(getattr(problem, "problem", problem), "training_metrics")


def first_batches_round(r: int, start: int, stop: int, reports: bool) -> bool:
    """Whether round ``r`` of a phase ``[start, stop)`` is recorded as the one after its
    first steps: ``start + 1`` (round 1), for a run whose records carry training values
    (``reports``: the problem reports its batches; not the search's phases, not elastic
    runs), a round of the phase. A pure function of the round, so a resumed run records
    it exactly where the uninterrupted one did (a run resumed after round 1 has it among
    its restored records)."""
    return reports and r == start + 1 and r <= stop
