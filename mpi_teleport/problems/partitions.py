"""How a training set is split: over nodes (non-IID Dirichlet as in the paper's Sec. 5.2,
Hsu et al. 2019; or IID) and into training and validation samples. numpy only.

* :func:`dirichlet_partition`, :func:`class_histogram` -- the non-IID split;
  :func:`iid_partition` -- a seeded shuffle cut into equal shares;
  :func:`check_enough_samples` refuses more nodes than training samples.
* :func:`train_val_split` -- hold out validation samples from a training set (used to
  choose k; never the test set).
"""
from __future__ import annotations

import numpy as np

from ..errors import DatasetMissingError

__all__ = ["NotEnoughSamplesError", "check_enough_samples", "dirichlet_partition",
           "iid_partition", "class_histogram", "train_val_split"]

# Seed-sequence tags: keep the different uses of one user seed apart.
_TAG_DIRICHLET = 0xD1
_TAG_VAL = 0x7A
_TAG_IID = 0x11D


class NotEnoughSamplesError(DatasetMissingError):
    """More nodes than training samples: some node would hold no data."""


def check_enough_samples(n_samples: int, nodes: int, what: str) -> None:
    """Refuse (:class:`NotEnoughSamplesError`, one line) to split ``n_samples`` training
    samples of ``what`` over more than ``n_samples`` nodes: every node needs one at least."""
    if int(nodes) > int(n_samples):
        raise NotEnoughSamplesError(
            f"{what} has {n_samples} training samples, too few for {nodes} nodes (every node "
            f"needs at least one): use --nodes {n_samples} or fewer, or a larger data set")


def dirichlet_partition(labels, n_nodes: int, alpha: float, seed: int) -> list:
    """Split sample indices over ``n_nodes`` nodes, non-IID (Hsu et al., 2019).

    For each class c (ascending), its indices are shuffled and cut by proportions
    ``q_c ~ Dir(alpha * 1_n)``: node j gets ``floor(n_c*cumsum(q)_j) - floor(n_c*cumsum(q)_{j-1})``
    of them. Small alpha -> each node holds few classes; large alpha -> near-IID.

    Guarantees: a partition (every index exactly once), deterministic for
    ``(labels, n_nodes, alpha, seed)`` (numpy PCG64 from ``SeedSequence([seed, tag])``),
    and every node non-empty. The last is enforced deterministically: while some node is
    empty, the lowest-numbered empty node receives the largest index of the largest node
    (lowest node id on ties). Needs ``len(labels) >= n_nodes``. Returns a list of sorted
    int64 index arrays, one per node.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError("labels must be one-dimensional")
    n_nodes = int(n_nodes)
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ValueError(f"alpha must be a positive finite number, got {alpha}")
    check_enough_samples(len(labels), n_nodes, "the training split")
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_DIRICHLET]))
    chunks: list[list[np.ndarray]] = [[] for _ in range(n_nodes)]
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[gen.permutation(len(idx))]
        q = gen.dirichlet(np.full(n_nodes, float(alpha)))
        if not np.all(np.isfinite(q)) or q.sum() <= 0:  # underflow for tiny alpha
            q = np.zeros(n_nodes)
            q[gen.integers(n_nodes)] = 1.0
        cuts = np.floor(np.cumsum(q) * len(idx)).astype(np.int64)
        cuts = np.clip(cuts, 0, len(idx))
        cuts[-1] = len(idx)
        for j, part in enumerate(np.split(idx, cuts[:-1])):
            if len(part):
                chunks[j].append(part)
    parts = [
        np.sort(np.concatenate(ch)).astype(np.int64) if ch else np.empty(0, dtype=np.int64)
        for ch in chunks
    ]
    while True:
        sizes = np.array([len(p) for p in parts])
        empty = np.flatnonzero(sizes == 0)
        if len(empty) == 0:
            break
        donor = int(np.argmax(sizes))
        parts[int(empty[0])] = parts[donor][-1:].copy()
        parts[donor] = parts[donor][:-1]
    return parts


def iid_partition(n_samples: int, n_nodes: int, seed: int) -> list:
    """Split ``range(n_samples)`` over ``n_nodes`` nodes IID: a seeded permutation cut
    into ``n_nodes`` shares whose sizes differ by one at most (the first ones larger).
    Deterministic for (n_samples, n_nodes, seed); sorted int64 index arrays."""
    n_samples, n_nodes = int(n_samples), int(n_nodes)
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    check_enough_samples(n_samples, n_nodes, "the training split")
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_IID]))
    perm = gen.permutation(n_samples)
    return [np.sort(p).astype(np.int64) for p in np.array_split(perm, n_nodes)]


def class_histogram(labels, parts, n_classes: int) -> list:
    """Per-node label counts: ``hist[j][c]`` = samples of class c on node j."""
    labels = np.asarray(labels)
    return [
        np.bincount(labels[np.asarray(p, dtype=np.int64)], minlength=n_classes)[:n_classes]
        .astype(int)
        .tolist()
        for p in parts
    ]


def train_val_split(n_samples: int, val_fraction: float, seed: int):
    """Seeded split of ``range(n_samples)`` into ``(train_idx, val_idx)``.

    ``n_val = round(val_fraction * n_samples)``, at least 1 when val_fraction > 0 and at
    most ``n_samples - 1``; ``val_fraction == 0`` gives an empty validation set. Both are
    sorted int64 arrays, disjoint, covering every index; deterministic for
    (n_samples, val_fraction, seed). Use it on the training set only (for choosing k);
    the test set stays untouched.
    """
    n_samples = int(n_samples)
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n_val = int(round(val_fraction * n_samples))
    if val_fraction > 0:
        n_val = max(1, n_val)
    n_val = min(n_val, n_samples - 1)
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_VAL]))
    perm = gen.permutation(n_samples)
    return np.sort(perm[n_val:]).astype(np.int64), np.sort(perm[:n_val]).astype(np.int64)
