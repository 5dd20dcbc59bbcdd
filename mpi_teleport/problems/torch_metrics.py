"""What a :class:`~.torch_problem.TorchProblem` reports: the task's loss and accuracy, and
a user's own metrics through one override point, :class:`EvalMetric`.

Evaluation is a sum over chunks of samples (:mod:`mpi_teleport.core.evaluation`): each chunk
gives one row of additive sums, the rows of all chunks are added in chunk order, and the
metrics are computed from the totals. Under MPI each rank computes the rows of its own
chunks; any split gives the same bits. A metric that fits that shape -- per-batch sums
plus a finaliser -- therefore works in every back end and for every number of ranks;
that is what :class:`EvalMetric` asks for. (Overriding ``TorchProblem.evaluate`` would
not: the MPI back end never calls it; see :func:`check_overrides`.)

Row layout: ``[loss sum, correct, samples, *metric sums]`` (float64), one metric's sums
after another in the order given.

Examples
--------
Top-5 accuracy and macro-F1 over ``n`` classes::

    class Top5(mt.EvalMetric):
        name, size, higher_is_better = "top5", 1, True

        def sums(self, output, target):
            hits = (output.topk(5, dim=1).indices == target[:, None]).any(1)
            return [hits.sum()]

        def value(self, totals, count):
            return totals[0] / count

    class MacroF1(mt.EvalMetric):
        name, higher_is_better = "macro_f1", True

        def __init__(self, n):
            self.n, self.size = n, 3 * n

        def sums(self, output, target):       # true positives, predicted, actual per class
            pred = output.argmax(1)
            tp = torch.bincount(target[pred == target], minlength=self.n)
            return torch.cat([tp, torch.bincount(pred, minlength=self.n),
                              torch.bincount(target, minlength=self.n)])

        def value(self, totals, count):
            tp, pred, true = np.split(totals, 3)
            f1 = 2 * tp / np.maximum(pred + true, 1)
            return float(f1.mean())

    problem = mt.TorchProblem(model, train, test=test, nodes=8,
                              metrics=[Top5(), MacroF1(10)], metric="macro_f1")
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["EvalMetric", "TASKS", "check_metrics", "check_overrides", "headline",
           "default_loss", "task_sums", "finish"]

TASKS = ("classification", "regression", "multilabel")
BASE = 3  # loss sum, correct, samples


class EvalMetric:
    """A metric computed from additive per-batch sums (the one override point).

    Attributes
    ----------
    name : str
        Its key in the metrics dict (and a possible ``metric=`` of the problem).
    size : int
        How many sums :meth:`sums` returns.
    higher_is_better : bool
        Whether larger is better (used when it is the headline ``metric``).
    """

    name: str = "metric"
    size: int = 1
    higher_is_better: bool = True

    def sums(self, output, target):
        """``size`` numbers for one batch (``output``: the model's output in ``eval()``
        mode, ``target``: the batch's targets), which added over batches give
        :meth:`value`'s ``totals``: counts, sums of per-sample values."""
        raise NotImplementedError

    def value(self, totals: np.ndarray, count: int) -> float:
        """The metric from the totals over the whole set (float64, length ``size``) and
        the number of samples."""
        raise NotImplementedError


def check_metrics(metrics) -> list:
    """The ``metrics=`` option as a list of EvalMetric-like objects, checked."""
    out = list(metrics or [])
    names = set()
    for m in out:
        for attr in ("name", "size", "sums", "value"):
            if not hasattr(m, attr):
                raise TypeError(f"metrics: {type(m).__name__} lacks {attr!r} (subclass "
                                "mpi_teleport.EvalMetric: name, size, sums(output, target), "
                                "value(totals, count))")
        size = m.size
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"metrics: {m.name}.size must be a positive integer, got {size!r}")
        if m.name in names or m.name in ("loss", "accuracy", "consensus"):
            raise ValueError(f"metrics: the name {m.name!r} is taken; give each metric its own")
        names.add(m.name)
    return out


def check_overrides(problem_cls, base) -> None:
    """Refuse a subclass of ``base`` (TorchProblem) that overrides ``evaluate`` or
    ``validate`` but not the chunked evaluation the MPI back end uses: its metric would
    silently vanish under MPI."""
    overridden = [m for m in ("evaluate", "validate")
                  if getattr(problem_cls, m) is not getattr(base, m)]
    chunked = any(getattr(problem_cls, m) is not getattr(base, m)
                  for m in ("evaluation_sums", "metrics_from_sums"))
    if overridden and not chunked:
        raise TypeError(
            f"{problem_cls.__name__} overrides {' and '.join(overridden)}(), which the MPI "
            "back end does not call (it evaluates through evaluation_sums); pass "
            "metrics=[...] (mpi_teleport.EvalMetric: per-batch sums plus value()) instead, "
            "or override evaluation_sums and metrics_from_sums too")


def headline(task: str, evaluated_on: str, metric, metrics: list) -> tuple:
    """``(metric, higher_is_better)``: the one asked for (a task metric or a user metric's
    name), else ``accuracy`` (classification, multilabel) or ``loss`` (regression, and
    on the training sample)."""
    default = "accuracy" if task != "regression" else "loss"
    if evaluated_on.startswith("train"):
        default = "loss"
    chosen = default if metric is None else metric
    custom = {m.name: m for m in metrics}
    known = ["loss", *(["accuracy"] if task != "regression" else []), *custom]
    if chosen not in known:
        raise ValueError(f"metric must be one of {', '.join(known)}, got {metric!r}")
    if chosen in custom:
        return chosen, bool(getattr(custom[chosen], "higher_is_better", True))
    return chosen, chosen == "accuracy"


def default_loss(task: str):
    """Cross-entropy (classification), binary cross-entropy on logits (multilabel), mean
    squared error (regression)."""
    from torch.nn import functional as F

    if task == "classification":
        return F.cross_entropy
    if task == "multilabel":
        return F.binary_cross_entropy_with_logits
    return _mse


def _mse(output, target):
    """Mean squared error; a (B, 1) output against (B,) targets is compared row by row.
    Outputs and targets of different sizes are refused: torch would broadcast them (a
    (B, C) output against (B,) float labels, classification labels given as floats) and
    train on a loss no one meant."""
    from torch.nn import functional as F

    if output.shape != target.shape:
        if output.numel() != target.numel():
            raise ValueError(f"the model's output of shape {tuple(output.shape)} does not match "
                             f"the targets of shape {tuple(target.shape)}")
        output = output.reshape(target.shape)
    return F.mse_loss(output, target)


def task_sums(task: str, loss_total: float, output, target) -> tuple:
    """(loss sum, correct, samples) of one batch for the task."""
    n = int(target.shape[0])
    if task == "classification":
        correct = int((output.argmax(1) == target).sum())
    elif task == "multilabel":
        correct = int(((output > 0) == (target > 0.5)).sum())
    else:
        correct = 0
    return loss_total, correct, n


def metric_row(metrics: list, output, target) -> list:
    """The user metrics' sums for one batch, as floats."""
    import torch

    row = []
    for m in metrics:
        s = m.sums(output, target)
        s = s.detach().double().cpu().reshape(-1).tolist() if isinstance(s, torch.Tensor) \
            else [float(v) for v in np.asarray(s, dtype=np.float64).reshape(-1)]
        if len(s) != m.size:
            raise ValueError(f"metric {m.name}: sums() returned {len(s)} numbers, size is {m.size}")
        row += s
    return row


def finish(task: str, metrics: list, sums: np.ndarray, labels_per_sample: int) -> dict:
    """``loss`` (mean), ``accuracy`` (classification: share of samples; multi-label: of
    labels) and each user metric from all chunk rows, added in chunk order."""
    count = int(sum(int(c) for c in sums[:, 2]))
    out = {}
    if count == 0:
        out["loss"] = math.nan
        if task != "regression":
            out["accuracy"] = math.nan
        out.update({m.name: math.nan for m in metrics})
        return out
    total = 0.0
    for value in sums[:, 0].tolist():
        total += value
    out["loss"] = total / count
    if task != "regression":
        out["accuracy"] = int(sum(int(c) for c in sums[:, 1])) / (count * labels_per_sample)
    col = BASE
    for m in metrics:
        totals = np.zeros(m.size, dtype=np.float64)
        for row in sums[:, col:col + m.size]:  # in chunk order
            totals += row
        out[m.name] = float(m.value(totals, count))
        col += m.size
    return out
