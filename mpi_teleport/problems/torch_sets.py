"""Which samples a :class:`~.torch_problem.TorchProblem` holds: the training set split
over the nodes (and narrowed to this process's nodes), the validation split, and the
evaluated set (the test set, else the validation set, else a fixed training sample),
narrowed to this process's chunk-aligned slice when ranks share evaluation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core import rng
from ..core.evaluation import chunk_slices
from . import partitions
from .torch_data import samples
from .torch_checks import refuse_negative_labels
from .torch_options import check_local_nodes, check_part, infer_task, split_nodes

if TYPE_CHECKING:
    from .torch_data import ArraySamples, DatasetSamples

__all__ = ["NodeData", "node_data", "TRAIN_EVAL_SAMPLES"]

TRAIN_EVAL_SAMPLES = 1000  # without test=: the training sample evaluated, at most


@dataclass
class NodeData:
    """The samples of one problem in one process.

    ``parts[i]``: node i's training-sample indices (every node's, in every process);
    ``train``: the samples kept (the local nodes'); ``local_parts[i]``: node i's positions
    in ``train`` (None for a node not kept); ``sets[split]`` the kept slice ``held[split]``
    of the evaluated set of ``sizes[split]`` samples ("test", "validation")."""

    train: ArraySamples | DatasetSamples
    parts: list
    local_parts: list
    local_nodes: tuple
    n_train: int
    task: str
    labels_per_sample: int
    class_histogram: list | None
    evaluated_on: str
    evaluation_part: tuple | None
    sizes: dict
    held: dict
    sets: dict

    def positions(self, node: int) -> np.ndarray:
        """Node's training samples as positions in ``train`` (checked: held here)."""
        if not 0 <= node < len(self.parts):
            raise ValueError(f"node {node} is out of range for {len(self.parts)} nodes")
        if self.local_parts[node] is None:
            raise ValueError(f"node {node} is not among this problem's local_nodes "
                             f"{list(self.local_nodes)}; its data was not kept")
        return self.local_parts[node]

    def slice(self, split: str, lo: int, hi: int | None, size: int) -> tuple:
        """``(samples held, their first index, lo, hi)`` for evaluating samples ``[lo,
        hi)`` of a set in chunks of ``size``, checked: bounds multiples of ``size`` (or the
        set's end) and within what this process holds."""
        n = self.sizes[split]
        hi = n if hi is None else int(hi)
        lo = int(lo)
        if not (0 <= lo <= hi <= n) or (lo % size and lo != n) or (hi % size and hi != n):
            raise ValueError(f"evaluation slice [{lo}, {hi}) of {n} samples must lie within "
                             f"the set, with bounds multiples of {size} (or the set's end)")
        start, stop = self.held[split]
        if lo < hi and not (start <= lo and hi <= stop):
            raise ValueError(f"evaluation slice [{lo}, {hi}) of the {split} set is not held "
                             f"here (this problem keeps [{start}, {stop}), evaluation_part="
                             f"{self.evaluation_part}; (0, 1) keeps the whole set)")
        return self.sets[split], start, lo, hi


def node_data(train, *, nodes: int, seed: int, task, partition, alpha, test, validation,
              validation_fraction, n_classes, local_nodes, evaluation_part, collate_fn,
              eval_batch_size: int) -> NodeData:
    """The options of :class:`~.torch_problem.TorchProblem` about data, checked and
    applied (see its docstring)."""
    data = samples(train, "train", collate_fn)
    if validation is not None and validation_fraction:
        raise ValueError("give either validation= or validation_fraction, not both")
    val = None if validation is None else samples(validation, "validation", collate_fn)
    if validation_fraction:
        kept, held = partitions.train_val_split(len(data), validation_fraction, seed)
        data, val = data.subset(kept), data.subset(held)
    n_train = len(data)
    targets = data.take(np.arange(1))[1]
    task = infer_task(task, targets)
    per_sample = int(targets[0].numel()) if task == "multilabel" else 1
    labels = data.labels() if task == "classification" else None
    refuse_negative_labels(labels, "train")  # (before the partition counts them)
    parts = split_nodes(partition, nodes, n_train, labels, alpha, seed)
    histogram = None
    if labels is not None:
        classes = int(labels.max()) + 1 if n_classes is None else int(n_classes)
        histogram = partitions.class_histogram(labels, parts, classes)
    evaluated_on = "test" if test is not None else "validation"
    test = samples(test, "test", collate_fn) if test is not None else val
    if test is None:  # the training loss of the averaged model, on a fixed sample
        count = min(n_train, TRAIN_EVAL_SAMPLES)
        gen = rng.generator(seed, rng.STREAM_EVAL_SAMPLE, 0)
        test = data.subset(np.sort(gen.choice(n_train, count, replace=False)))
        evaluated_on = f"train sample of {count}"
    local = check_local_nodes(local_nodes, nodes)
    if local_nodes is None:
        kept_train, local_parts = data, parts
    else:  # keep only the local nodes' samples; positions re-indexed into them
        kept = np.unique(np.concatenate([parts[i] for i in local]))
        kept_train = data.keep(kept)
        local_parts = [np.searchsorted(kept, p) if i in set(local) else None
                       for i, p in enumerate(parts)]
    if evaluation_part is None and local_nodes is not None and len(local) == 1:
        evaluation_part = (local[0], nodes)
    evaluation_part = check_part(evaluation_part)
    sizes = {"test": len(test), "validation": 0 if val is None else len(val)}
    held, sets = {}, {}
    for split, d in (("test", test), ("validation", val)):
        if d is None:
            continue
        lo, hi = 0, len(d)
        if evaluation_part is not None:  # only this process's slice is kept
            lo, hi = chunk_slices(len(d), eval_batch_size, evaluation_part[1])[evaluation_part[0]]
            d = d.keep(slice(lo, hi))
        held[split], sets[split] = (lo, hi), d
    return NodeData(kept_train, parts, local_parts, local, n_train, task, per_sample, histogram,
                    evaluated_on, evaluation_part, sizes, held, sets)
