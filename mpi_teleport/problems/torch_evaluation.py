"""Chunked evaluation of a :class:`~.torch_problem.TorchProblem`'s averaged model: the
rows of per-chunk sums (:func:`chunk_sums`) that every back end adds in chunk order, and
the metrics from them (:func:`metrics`), so that one process evaluating the whole set
and n ranks each evaluating their chunk-aligned slice (:mod:`mpi_teleport.core.evaluation`)
give the same bits. torch is imported only when a chunk is evaluated.
"""
from __future__ import annotations

import math

import numpy as np

from . import torch_metrics as tm
from .torch_data import call_model, to_device


def average(x: np.ndarray) -> np.ndarray:
    """Mean of the token rows, summed in token order in float64, rounded once."""
    return (np.add.reduce(x.astype(np.float64), axis=0) / len(x)).astype(np.float32)


def chunk_sums(problem, vector: np.ndarray, lo: int = 0, hi: int | None = None,
               split: str = "test") -> np.ndarray:
    """Per-chunk sums of the model ``vector`` on samples ``[lo, hi)`` of a set ("test" or
    "validation"); ``lo``/``hi`` multiples of ``eval_batch_size`` (or the set's end;
    :func:`mpi_teleport.core.evaluation.chunk_slices`). Returns float64 rows ``(loss sum,
    correct, samples, *metric sums)``, one per chunk, in order: rows of disjoint
    chunk-aligned slices concatenated in slice order equal the whole set's rows bit for
    bit (each chunk's random draws keyed by its start, not by who evaluates it)."""
    import torch

    p = problem
    check_split(p, split)
    size = p.eval_batch_size
    data, start, lo, hi = p.data.slice(split, lo, hi, size)
    width = tm.BASE + sum(m.size for m in p.user_metrics)
    rows = []
    with p.torch_settings, torch.no_grad(), p._keyed as keyed:
        p.state.load(vector)
        p.model.eval()
        for s in range(lo, hi, size):
            keyed.seed_chunk(split, s)
            xb, yb = data.span(s - start, min(s + size, hi) - start)
            xb, yb = to_device(xb, p.device), p._target(yb.to(p.device))
            out = call_model(p.model, xb)
            rows.append([*tm.task_sums(p.task, loss_total(p, out, yb), out, yb),
                         *tm.metric_row(p.user_metrics, out, yb)])
    return np.array(rows, dtype=np.float64).reshape(-1, width)


def check_split(problem, split: str) -> None:
    """A set the problem evaluates: "test", or "validation" when it holds one."""
    if split not in ("test", "validation"):
        raise ValueError(f"split must be 'test' or 'validation', got {split!r}")
    if split not in problem._sets:
        raise ValueError("this problem has no validation set")


def loss_total(problem, out, yb) -> float:
    """The summed evaluation loss of one chunk (cross-entropy for classification unless
    the problem has its own ``eval_loss``)."""
    from torch.nn import functional as F

    if problem.eval_loss is None and problem.task == "classification":
        return float(F.cross_entropy(out, yb, reduction="sum").double())
    fn = problem.eval_loss or problem.loss
    return float(fn(out, yb).double()) * len(yb)


def metrics(problem, sums: np.ndarray, x: np.ndarray | None = None) -> dict:
    """``loss`` (mean), ``accuracy`` (not for regression) and the user's metrics from all
    chunk rows (added in chunk order); with the token matrix ``x``, also ``consensus``
    (mean squared distance to the average)."""
    width = tm.BASE + sum(m.size for m in problem.user_metrics)
    sums = np.asarray(sums, dtype=np.float64).reshape(-1, width)
    m = tm.finish(problem.task, problem.user_metrics, sums, problem.data.labels_per_sample)
    if x is not None:
        mean = average(x)
        centred = x.astype(np.float64) - mean.astype(np.float64)
        m["consensus"] = math.fsum(np.sum(centred * centred, axis=1).tolist()) / len(x)
    return m
