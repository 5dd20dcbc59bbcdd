"""The :class:`Problem` protocol: what a training problem gives the engine.

A problem maps the rows of a token matrix to stochastic gradients of the holders' local
losses and evaluates a token matrix. numpy alone suffices (see
``mpi_teleport.examples.logistic``); :class:`mpi_teleport.TorchProblem` wraps a PyTorch
model. :func:`adapt` fills the optional parts with their defaults, so the engine can
rely on one complete interface.
"""
from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Problem(Protocol):
    """A training problem over n nodes.

    Attributes
    ----------
    dim : int
        Length of a token (model) vector.
    dtype : numpy dtype
        Its element type (float64 for numpy problems, float32 for torch models). Gossip
        arithmetic is done in this type.
    metric : str
        The headline key of :meth:`evaluate`'s dict (e.g. ``"error"`` or ``"accuracy"``).
    higher_is_better : bool
        Whether larger values of ``metric`` are better (accuracy) or smaller (error).

    Optional members: ``validate(x) -> float`` (Algorithm 2's selection metric, with
    ``validation`` its name and ``validation_higher_is_better``; default: ``metric`` of
    :meth:`evaluate`), ``n_train`` (training samples, for epochs), ``name``,
    ``after_step(nodes, y)`` (called after each local step, before gossip: to write
    state the forward pass updates into the token rows) and ``describe() -> dict``
    (facts for ``config.json``).
    """

    dim: int
    dtype: np.dtype
    metric: str
    higher_is_better: bool

    def initial(self) -> np.ndarray:
        """x0, shape (dim,): the same vector in every process."""

    def gradient(self, nodes, x: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """Row r: the stochastic gradient of node ``nodes[r]``'s local loss at ``x[r]`` in
        round t. Its randomness must be keyed by (seed, node, t), so that every back end
        (k rows at once in the simulator, one row on an MPI rank) sees the same numbers."""

    def evaluate(self, x: np.ndarray) -> dict:
        """Metrics (floats) of a token matrix, one row per token in token order."""


class Adapted:
    """A problem with every optional part present (defaults where the problem has none).
    Attribute access falls through to the problem itself."""

    def __init__(self, problem):
        missing = [name for name in ("dim", "dtype", "initial", "gradient", "evaluate")
                   if not hasattr(problem, name)]
        if missing:
            raise TypeError(f"{type(problem).__name__} is not a Problem: it lacks "
                            f"{', '.join(missing)} (see mpi_teleport.Problem)")
        self._problem = problem
        self.metric = getattr(problem, "metric", None) or "loss"
        higher = getattr(problem, "higher_is_better", None)
        self.higher_is_better = bool(higher) if higher is not None else self.metric == "accuracy"
        self.validation = getattr(problem, "validation", None) or f"averaged-model {self.metric}"
        vh = getattr(problem, "validation_higher_is_better", None)
        self.validation_higher_is_better = self.higher_is_better if vh is None else bool(vh)
        self.name = getattr(problem, "name", None) or type(problem).__name__
        self.dtype = np.dtype(problem.dtype)

    def __getattr__(self, name):
        return getattr(self._problem, name)

    @property
    def inner(self):
        return self._problem

    def validate(self, x: np.ndarray) -> float:
        own = getattr(self._problem, "validate", None)
        if own is not None:
            return float(own(x))
        return float(self._problem.evaluate(np.add.reduce(x, axis=0, keepdims=True) / len(x))[self.metric])

    def reached(self, metrics: dict, target: float | None) -> bool:
        if target is None:
            return False
        own = getattr(self._problem, "reached", None)
        if own is not None:
            return bool(own(metrics, target))
        value = metrics[self.metric]
        return value >= target if self.higher_is_better else value <= target

    def finite(self, metrics: dict) -> bool:
        own = getattr(self._problem, "finite", None)
        if own is not None:
            return bool(own(metrics))
        return all(math.isfinite(v) for v in metrics.values() if isinstance(v, (int, float)))

    def describe(self) -> dict:
        own = getattr(self._problem, "describe", None)
        return dict(own()) if own is not None else {}


def adapt(problem) -> Adapted:
    """The problem as the engine uses it (idempotent)."""
    return problem if isinstance(problem, Adapted) else Adapted(problem)
