"""Which node holds which token in round t (mpi_teleport/DESIGN.md §3.2, Alg. 1 line 3 / Alg. 3 line 5).

Every function here is pure: the answer for round t is computed from (seed, n, k, t)
alone, from hash words keyed by (seed, t) (:func:`rng.words`), so each rank evaluates
any round locally in O(k) time and memory, without replaying earlier rounds and without
communication. The ``*_block`` functions compute a block of consecutive rounds in a few
numpy calls; the one-round functions are their first row (one definition). A
:class:`Phase` is a run's rounds [start, stop) with their rosters
(:meth:`mpi_teleport.core.spec.RunSpec.phases` builds them from these functions).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, cast

import numpy as np
import numpy.typing as npt

from . import rng


@functools.lru_cache(maxsize=64)
def _span(k: int) -> npt.NDArray[np.int64]:
    """0, 1, ..., k-1 (read-only, cached: no allocation per call)."""
    span = np.arange(k, dtype=np.int64)
    span.flags.writeable = False
    return span


@functools.lru_cache(maxsize=64)
def _remaining(n: int, k: int) -> npt.NDArray[np.uint64]:
    """n - j for j < k: the number of nodes step j of a shuffle still chooses from."""
    left = (n - _span(k)).astype(np.uint64)
    left.flags.writeable = False
    return left


_WORDS_AT_ONCE = 1 << 20  # hash words one pass holds (8 MiB, plus the sort's as much again)


def _ordered_sample_block(seed: int, stream: int, n: int, k: int, t0: int,
                          count: int) -> npt.NDArray[np.int64]:
    """(count, k) int64: row r a uniformly random ordered choice of k distinct integers
    out of range(n), a pure function of (seed, stream, n, k, t0 + r).

    Dense (4k >= n): every node gets a hash word and the k nodes with the smallest words,
    in word order, are the sample (a stable sort breaks ties, probability ~ n^2 / 2^65,
    by node id). Sparse (4k < n): the first k steps of a Fisher-Yates shuffle of range(n),
    step j swapping position j with r_j = j + below(word_j, n - j), the swapped positions
    kept in a dict, so cost is O(k) however large n is. The branch depends on (n, k)
    only, so every process picks the same one.
    """
    width = n if 4 * k >= n else k
    if count > 1 and count * width > _WORDS_AT_ONCE:  # bound the temporaries: rows in chunks
        step = max(1, _WORDS_AT_ONCE // width)
        return np.concatenate([_ordered_sample_block(seed, stream, n, k, t, min(step, t0 + count - t))
                               for t in range(t0, t0 + count, step)])
    ts = range(t0, t0 + count)
    if 4 * k >= n:
        order = np.argsort(rng.words(seed, stream, ts, n), axis=1, kind="stable")
        return np.ascontiguousarray(order[:, :k]) if k < n else order  # (C order: a buffer)
    draws = rng.below(rng.words(seed, stream, ts, k), _remaining(n, k))
    draws += _span(k)  # draws[r, j] uniform in [j, n)
    # Where a row's draws are distinct no swap is ever read back (the dict below would
    # return each draw itself), so only rows with a repeated draw replay the shuffle.
    if k == 1:
        return draws
    ordered = np.sort(draws, axis=1)
    for r in np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1)).tolist():
        moved: dict[int, int] = {}
        picked = []
        for j, d in enumerate(draws[r].tolist()):
            picked.append(moved.get(d, d))
            moved[d] = moved.get(j, j)
        draws[r] = picked
    return draws


def holders_block(seed: int, n: int, k: int, t0: int, count: int) -> npt.NDArray[np.int64]:
    """(count, k) int64: row r = holders(seed, n, k, t0 + r), all rows in one pass."""
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    return _ordered_sample_block(seed, rng.STREAM_SCHEDULE, n, k, t0, count)


def holders(seed: int, n: int, k: int, t: int) -> npt.NDArray[np.int64]:
    """holders(t)[m] = the node holding token m in round t (k distinct nodes of n)."""
    # (a row: numpy's stubs type an integer index as Any)
    return cast("npt.NDArray[np.int64]", holders_block(seed, n, k, t, 1)[0])


def fixed_holders(n: int) -> npt.NDArray[np.int64]:
    """Decentralized SGD: node m always holds replica m."""
    return np.arange(n, dtype=np.int64)


def candidate_ks(n: int) -> list[int]:
    """Alg. 2 phase-2 candidates {1, 2, 4, ..., 2^(floor(log2(n+1)) - 1)}; they sum to <= n (Lemma 1)."""
    top = (n + 1).bit_length() - 1  # floor(log2(n + 1))
    return [1 << q for q in range(top)]


def search_order_block(seed: int, n: int, t0: int, count: int) -> npt.NDArray[np.int64]:
    """(count, sum(candidate_ks(n))) int64: row r = Alg. 2's disjoint blocks of round
    t0 + r side by side (an ordered sample of distinct nodes, the sampler of holders)."""
    return _ordered_sample_block(seed, rng.STREAM_BLOCKS, n, sum(candidate_ks(n)), t0, count)


def search_blocks(seed: int, n: int, t: int) -> list[npt.NDArray[np.int64]]:
    """Alg. 2 phase 2: disjoint holder sets for every candidate k in round t.

    One shared random ordering of the nodes is cut into consecutive blocks of sizes
    1, 2, 4, ...; block q holds the tokens of the run with k = 2^q.
    """
    order = search_order_block(seed, n, t, 1)[0]
    return [order[k - 1:2 * k - 1] for k in candidate_ks(n)]  # block of size k starts at 1+2+...+k/2 = k-1


def flat_rosters(rosters: list[list[npt.NDArray[np.int64]]]) -> npt.NDArray[np.int64]:
    """Rosters as one (R, K) int64 array: row r holds every run's holders side by side
    (run 0's first). The runs' sizes are the same in every round of a phase."""
    return np.array([np.concatenate(r) if len(r) > 1 else r[0] for r in rosters], dtype=np.int64)


@dataclass
class Phase:
    """Rounds [start, stop) whose rosters come from ``roster(t)`` (a roster: every run's
    holder array of round t); ``fresh``: the phase starts from new tokens placed at
    roster(start) (Algorithm 2, phase 2). ``block``, when given, computes the rosters of
    many rounds at once (:meth:`rosters`); it must agree with ``roster``."""

    roster: Callable[[int], list[npt.NDArray[np.int64]]]
    start: int
    stop: int
    fresh: bool = False
    block: Callable[[int, int], npt.NDArray[np.int64]] | None = None

    def rosters(self, t0: int, t1: int) -> npt.NDArray[np.int64]:
        """The rosters of rounds t0 .. t1 - 1 as one (t1 - t0, K) int64 array, every run's
        holders side by side (:func:`flat_rosters`)."""
        if self.block is not None:
            return self.block(t0, t1)
        return flat_rosters([self.roster(t) for t in range(t0, t1)])

    def is_placement_round(self, t: int) -> bool:
        """Whether Algorithm 1's tokens of round t sit with holders(t) itself on entry (the
        first round of the run, or of a fresh phase) rather than with holders(t - 1)."""
        return t == self.start and (self.fresh or t == 0)
