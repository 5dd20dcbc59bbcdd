"""Base-2 Graph: a 1-peer time-varying topology with finite-time exact consensus.

Reference: Y. Takezawa, R. Sato, H. Bao, K. Niwa, M. Yamada, "Beyond Exponential
Graph: Communication-Efficient Topologies for Decentralized Learning via
Finite-time Convergence", NeurIPS 2023 (arXiv:2305.11420).  The construction
below follows the Base-(k+1) Graph with maximum degree 1 as built by the
authors' public code (github.com/yukiTakezawa/BaseGraph, files
``simple_base_graph.py`` and ``base_graph.py``).  This is an independent
numpy re-implementation; the ordering of rounds and of peer assignments
matches that code.

Construction for ``k`` nodes (ids ``0..k-1``)
---------------------------------------------
* ``k == 1``: one identity round.
* ``k == 2**p``: the 1-peer hypercube, round ``r`` pairs ``i`` with
  ``i ^ (1 << r)`` at weight 1/2 (period ``p``).
* ``k`` odd (Simple Base-2 Graph): write ``k = n_0 + ... + n_{L-1}`` with
  ``n_l = 2**p_l``, ``p_0 > p_1 > ... > p_{L-1}`` (binary expansion) and give
  group ``l`` a contiguous block of ids.

  1. Rounds ``m = 0..p_0-1``: every group runs hypercube round ``m % p_l``
     internally, so each group reaches its own average.
  2. Round ``m = p_0 + s`` for ``s = 0..L-2``: every node of groups
     ``l > s`` (taken group ``L-1`` first, ascending ids inside a group) is
     paired with a distinct node of group ``s`` (taken from its highest id
     downward) with edge weight ``n_s / (n_s + ... + n_{L-1})``.  The nodes
     of group ``s`` left unpaired are paired among themselves at weight 1/2
     (they hold equal values, so this does not affect exactness).  After this
     round group ``s`` holds, on average, the global average and the groups
     ``l > s`` hold values whose size-weighted mean is still the global one.
  3. From the round after its mixing step, every group ``l`` runs its own
     hypercube rounds again (counter ``b_l`` = 0, 1, ... modulo ``p_l``) to
     re-average internally.  Group 0 needs ``p_0`` such rounds, so the
     period is ``2 * p_0 + 1``.

* ``k = 2**p * q`` with ``q > 1`` odd and ``p >= 1``: split the nodes into
  ``2**p`` contiguous blocks of ``q`` nodes; first run the Simple Base-2
  Graph of ``q`` nodes inside every block in parallel, then ``p`` hypercube
  rounds over the sets ``{j, j + q, j + 2q, ...}`` (block ``b`` pairs with
  block ``b ^ (1 << r)`` in round ``r``).  This is what the authors' code
  selects for even non-powers of two (it is shorter than the Simple Base-2
  Graph on all ``k`` nodes; for odd ``k`` the Simple Base-2 Graph is used).

Period: ``1`` (k = 1); ``p`` (k = 2**p); ``2*floor(log2 k) + 1`` (k odd, not 1);
``p + 2*floor(log2 q) + 1`` (k = 2**p * q, q odd > 1).  Always
``<= 2*ceil(log2 k) + 2``.

No deviation from the authors' code is intended: for every k tested
(1..300 and 511..513) the dense matrices built from these rounds are
identical, round by round, to the ones that code's logic produces.

Every round is a symmetric, doubly stochastic matrix in which each node has
at most one peer, and the product of the matrices of one period equals
``J / k`` exactly (up to floating point rounding).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["base2_rounds", "base2_matrix"]

_Round = tuple[np.ndarray, np.ndarray]


def _hypercube_peer(local: np.ndarray, r: int) -> np.ndarray:
    return local ^ (1 << r)


def _pow2_rounds(n: int) -> list[_Round]:
    p = n.bit_length() - 1
    ids = np.arange(n, dtype=np.int64)
    return [(_hypercube_peer(ids, r), np.full(n, 0.5)) for r in range(p)]


def _simple_rounds(n: int) -> list[_Round]:
    """Simple Base-2 Graph over ``n`` nodes (``n`` >= 1)."""
    if n == 1:
        return [(np.zeros(1, dtype=np.int64), np.ones(1))]
    if n & (n - 1) == 0:
        return _pow2_rounds(n)

    # binary decomposition, largest part first, contiguous id blocks
    exps = [e for e in range(n.bit_length() - 1, -1, -1) if (n >> e) & 1]
    sizes = [1 << e for e in exps]
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    L = len(sizes)
    p0 = exps[0]
    tails = np.cumsum(sizes[::-1])[::-1]  # tails[s] = n_s + ... + n_{L-1}

    def hyper(peer: np.ndarray, w: np.ndarray, l: int, r: int) -> None:
        if exps[l] == 0:
            return
        o, sz = int(offsets[l]), sizes[l]
        local = np.arange(sz, dtype=np.int64)
        peer[o:o + sz] = o + _hypercube_peer(local, r % exps[l])
        w[o:o + sz] = 0.5

    rounds: list[_Round] = []
    for m in range(2 * p0 + 1):
        peer = np.arange(n, dtype=np.int64)
        w = np.ones(n)
        if m < p0:
            for l in range(L):
                hyper(peer, w, l, m)
        else:
            s = m - p0  # group whose mixing step is this round (if s < L-1)
            for l in range(L):
                if l < s or (l == s and l == L - 1):
                    # re-averaging phase; counter b_l counts these rounds
                    b = m - p0 - l - (0 if l == L - 1 else 1)
                    hyper(peer, w, l, b)
            if s < L - 1:
                # groups L-1, ..., s+1 (ascending ids within each) pair with
                # group s taken from its highest id downward
                a_nodes = np.concatenate([
                    np.arange(offsets[l], offsets[l] + sizes[l], dtype=np.int64)
                    for l in range(L - 1, s, -1)
                ])
                cnt = a_nodes.size
                top = int(offsets[s]) + sizes[s] - 1
                b_nodes = top - np.arange(cnt, dtype=np.int64)
                alpha = sizes[s] / float(tails[s])
                peer[a_nodes] = b_nodes
                peer[b_nodes] = a_nodes
                w[a_nodes] = 1.0 - alpha
                w[b_nodes] = 1.0 - alpha
                # unpaired nodes of group s: consecutive pairs at weight 1/2
                rest = np.arange(offsets[s], top - cnt + 1, dtype=np.int64)
                npair = rest.size // 2
                if npair:
                    ev, od = rest[0:2 * npair:2], rest[1:2 * npair:2]
                    peer[ev], peer[od] = od, ev
                    w[ev] = 0.5
                    w[od] = 0.5
        rounds.append((peer, w))
    return rounds


@functools.lru_cache(maxsize=64)
def _rounds_cached(k: int) -> tuple[_Round, ...]:
    if k & (k - 1) == 0 or k & 1:
        rounds = _simple_rounds(k)
    else:
        p = (k & -k).bit_length() - 1
        q = k >> p
        ids = np.arange(k, dtype=np.int64)
        block, local = ids // q, ids % q
        rounds = []
        for sp, sw in _simple_rounds(q):
            rounds.append((block * q + sp[local], sw[local].copy()))
        for r in range(p):
            rounds.append(((block ^ (1 << r)) * q + local, np.full(k, 0.5)))
    out = []
    for peer, w in rounds:
        peer = np.ascontiguousarray(peer, dtype=np.int64)
        w = np.ascontiguousarray(w, dtype=np.float64)
        peer.setflags(write=False)
        w.setflags(write=False)
        out.append((peer, w))
    return tuple(out)


def base2_rounds(k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """One period of the Base-2 Graph over k nodes.

    Returns a list of rounds; round r is (peer, self_weight):
      peer: int64 array (k,), peer[i] = the one node i averages with in round r,
        or i itself if none;
      self_weight: float64 array (k,), W_r[i, i]; W_r[i, peer[i]] =
        1 - self_weight[i] when peer[i] != i.
    For k == 1 return [(array([0]), array([1.0]))].
    The arrays are cached and read-only.
    """
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return list(_rounds_cached(k))


def base2_matrix(k: int, r: int) -> np.ndarray:
    """Dense k x k W for round r (r taken modulo the period), built from base2_rounds."""
    rounds = base2_rounds(k)
    peer, w = rounds[int(r) % len(rounds)]
    W = np.zeros((k, k), dtype=np.float64)
    ids = np.arange(k)
    W[ids, ids] = w
    moved = peer != ids
    W[ids[moved], peer[moved]] = 1.0 - w[moved]
    return W
