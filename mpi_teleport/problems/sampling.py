"""How a node draws its mini-batches: a pure function of (seed, node, t), so that any
rank, the simulator and a resumed run draw the same samples (mpi_teleport/DESIGN.md §3.1).

* ``"replacement"`` (default): each round's batch is drawn with replacement from the
  node's share, keyed by (seed, node, t).
* ``"epochs"``: shuffled passes over the share, as ``DataLoader(shuffle=True)`` draws them
  (without replacement; the last batch of a pass holds the remainder, as with
  ``drop_last=False``). A share of m samples has b = ceil(m / batch) batches per pass;
  round t takes batch ``t mod b`` of pass ``t div b``, whose order is a permutation keyed
  by (seed, node, pass). With DSGD every node steps every round, so this is exactly the
  authors' per-node loader; with Teleportation a node steps only in the rounds it is
  active and takes the batch its pass holds at that round: within a pass no sample
  repeats, and the batches of rounds it was idle are skipped, not postponed (the node
  need not know its own history, which would tie the data to the schedule).
"""
from __future__ import annotations

import numpy as np

__all__ = ["SAMPLINGS", "check_sampling", "epoch_batch", "batches_per_pass"]

SAMPLINGS = ("replacement", "epochs")  # the one list of choices (--sampling)


def check_sampling(value) -> str:
    """``value`` if it names a way of drawing batches, else one line saying the choices."""
    if not isinstance(value, str) or value not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(map(repr, SAMPLINGS))}, got {value!r}")
    return value


def batches_per_pass(size: int, batch_size: int) -> int:
    """Batches in one pass over a share of ``size`` samples (the last may be short)."""
    return max(1, -(-int(size) // int(batch_size)))


def epoch_batch(order, node: int, t: int, size: int, batch_size: int) -> np.ndarray:
    """Positions in the node's share of its batch in round ``t`` under ``"epochs"``:
    ``order(node, epoch, size)`` gives the pass's permutation."""
    per_pass = batches_per_pass(size, batch_size)
    epoch, b = divmod(int(t), per_pass)
    return order(node, epoch, size)[b * batch_size:(b + 1) * batch_size]
