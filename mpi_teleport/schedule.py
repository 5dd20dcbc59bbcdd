"""Which node holds which token in round t (mpi_teleport/DESIGN.md §3.2, Alg. 1 line 3 / Alg. 3 line 5).

Every function here is pure: the answer for round t is computed from (seed, n, k, t)
alone, by a generator keyed by (seed, t), so each rank evaluates any round locally in
O(k) time and memory, without replaying earlier rounds and without communication.
"""
from __future__ import annotations

import functools

import numpy as np

from . import rng


@functools.lru_cache(maxsize=64)
def _lows(k: int) -> np.ndarray:
    lows = np.arange(k)
    lows.flags.writeable = False
    return lows


def _ordered_sample(gen: np.random.Generator, n: int, k: int) -> np.ndarray:
    """A uniformly random ordered choice of k distinct integers out of range(n).

    Sparse Fisher-Yates: the first k steps of a shuffle of range(n), with the swapped
    positions kept in a dict, so cost is O(k) however large n is. When k is a sizeable
    fraction of n a full permutation is cheaper; which branch runs depends on (n, k)
    only, so every process picks the same one.
    """
    if 4 * k >= n:
        return gen.permutation(n)[:k].astype(np.int64, copy=False)
    draws = gen.integers(_lows(k), n).tolist()  # draws[j] uniform in [j, n)
    moved: dict[int, int] = {}
    out = np.empty(k, dtype=np.int64)
    for j, r in enumerate(draws):
        out[j] = moved.get(r, r)
        moved[r] = moved.get(j, j)
    return out


def holders(seed: int, n: int, k: int, t: int) -> np.ndarray:
    """holders(t)[m] = the node holding token m in round t (k distinct nodes of n)."""
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    return _ordered_sample(rng.scratch_generator(seed, rng.STREAM_SCHEDULE, t), n, k)


def fixed_holders(n: int) -> np.ndarray:
    """Decentralized SGD: node m always holds replica m."""
    return np.arange(n, dtype=np.int64)


def candidate_ks(n: int) -> list[int]:
    """Alg. 2 phase-2 candidates {1, 2, 4, ..., 2^(floor(log2(n+1)) - 1)}; they sum to <= n (Lemma 1)."""
    top = (n + 1).bit_length() - 1  # floor(log2(n + 1))
    return [1 << q for q in range(top)]


def search_blocks(seed: int, n: int, t: int) -> list[np.ndarray]:
    """Alg. 2 phase 2: disjoint holder sets for every candidate k in round t.

    One shared random ordering of the nodes is cut into consecutive blocks of sizes
    1, 2, 4, ...; block q holds the tokens of the run with k = 2^q.
    """
    ks = candidate_ks(n)
    order = _ordered_sample(rng.scratch_generator(seed, rng.STREAM_BLOCKS, t), n, sum(ks))
    return [order[k - 1:2 * k - 1] for k in ks]  # block of size k starts at 1+2+...+k/2 = k-1
