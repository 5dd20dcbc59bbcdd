"""How a training set is split: over nodes (non-IID Dirichlet as in the paper's Sec. 5.2,
Hsu et al. 2019; or IID) and into training and validation samples. numpy only.

* :func:`dirichlet_partition`, :func:`class_histogram` -- the non-IID split;
  :func:`balanced_dirichlet_partition` -- the authors' variant (groups of nodes,
  balancing, equal shares: the Fashion-MNIST recipe of their harness);
  :func:`iid_partition` -- a seeded shuffle cut into equal shares;
  :func:`check_enough_samples` refuses more nodes than training samples.
* :func:`train_val_split` -- hold out validation samples from a training set (used to
  choose k; never the test set).
"""
from __future__ import annotations

import numpy as np

from ..errors import DatasetMissingError

__all__ = ["NotEnoughSamplesError", "check_enough_samples", "dirichlet_partition",
           "balanced_dirichlet_partition", "iid_partition", "class_histogram", "train_val_split"]

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


def balanced_dirichlet_partition(labels, n_nodes: int, alpha: float, seed: int,
                                 group_size: int = 10, max_tries: int = 1000) -> list:
    """The non-IID split of the authors' harness (github.com/yukiTakezawa/BaseGraph at
    c89b116, ``data/loader_dirichlet.py``, after Lin et al.'s RelaySGD code), reimplemented
    here from its behaviour; the same (labels, n_nodes, alpha, seed) gives their split.

    1. The sample order is shuffled (numpy's legacy ``RandomState(seed)``, the generator
       of every draw below).
    2. The nodes form groups of ``group_size`` (the last group the rest: 10, 10, 5 for 25
       nodes); the shuffled samples are cut into one block per group, each block
       ``int(group_size / n_nodes * N)`` samples long except the last, which takes the rest.
    3. In each block, for every class in ascending order: proportions ``q ~
       Dir(alpha)`` over the group's nodes; *balancing*: a node that already holds at
       least the block's mean share (block size / group's nodes) gets proportion 0, the
       rest renormalised; the class's samples (in shuffled order) are cut at
       ``int(cumsum(q) * n_c)``. The whole block is redrawn while its smallest node holds
       fewer than ``int(0.5 * block size / group's nodes)`` samples (``max_tries`` at most,
       then ValueError).
    4. *Equal shares*: the nodes' lists, concatenated in node order, are cut into
       ``n_nodes`` consecutive pieces of equal size (``np.array_split``: 2,400 each for 25
       nodes and 60,000 samples), so a node's share straddles its Dirichlet list and its
       neighbour's.

    Returns sorted int64 index arrays, one per node: a partition of ``range(len(labels))``.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError("labels must be one-dimensional")
    n_nodes, group_size = int(n_nodes), int(group_size)
    if n_nodes < 1 or group_size < 1:
        raise ValueError(f"n_nodes and group_size must be >= 1, got {n_nodes}, {group_size}")
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ValueError(f"alpha must be a positive finite number, got {alpha}")
    check_enough_samples(len(labels), n_nodes, "the training split")
    state = np.random.RandomState(int(seed))
    n = len(labels)
    order = np.arange(n)
    state.shuffle(order)  # (the draws of shuffling the (index, label) rows)
    classes = np.unique(labels)
    groups = -(-n_nodes // group_size)
    block = int(group_size / n_nodes * n)
    lists: list[np.ndarray] = []
    for g in range(groups):
        members = order[g * block:] if g == groups - 1 else order[g * block:(g + 1) * block]
        workers = min(group_size, n_nodes - g * group_size)
        size = len(members)
        for _ in range(max_tries):
            parts = _balanced_block(labels, members, classes, workers, size, alpha, state)
            if min(len(p) for p in parts) >= int(0.5 * size / workers):
                break
        else:
            raise ValueError(f"balanced_dirichlet_partition: no split of a block of {size} "
                             f"samples over {workers} nodes gave every node "
                             f"{int(0.5 * size / workers)} samples in {max_tries} tries")
        lists += parts
    whole = np.concatenate(lists) if lists else np.empty(0, np.int64)
    return [np.sort(p).astype(np.int64) for p in np.array_split(whole, n_nodes)]


def _balanced_block(labels, members, classes, workers: int, size: int, alpha: float,
                    state) -> list:
    """One draw of step 3 of :func:`balanced_dirichlet_partition` for one block."""
    held: list[list[np.ndarray]] = [[] for _ in range(workers)]
    counts = np.zeros(workers, dtype=np.int64)
    block_labels = labels[members]
    for c in classes:
        idx = members[block_labels == c]
        q = state.dirichlet(np.repeat(float(alpha), workers))
        q = q * (counts < size / workers)  # balancing: full nodes get no more
        q = q / q.sum()
        cuts = (np.cumsum(q) * len(idx)).astype(int)[:-1]
        for j, piece in enumerate(np.split(idx, cuts)):
            held[j].append(piece)
            counts[j] += len(piece)
    return [np.concatenate(h).astype(np.int64) for h in held]


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
